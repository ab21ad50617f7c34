"""Runs the scripted year through one adapter: each day's saves, a consolidation every N days, and after each one the
metrics of ``scoring.py`` plus the tokens it spent and how much of what it took out can be restored."""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field
from typing import Any

from .adapters.base import Adapter
from .scenario import START, Scenario
from .scoring import reversible, snapshot

#: The end-of-year metrics, in the order of the results table: (name, unit, better).
FINAL = (
    ("specifics_lost", "count", "lower"),
    ("facts_lost", "count", "lower"),
    ("specifics_missing_live", "count", "lower"),
    ("facts_missing_live", "count", "lower"),
    ("dup_groups_one_live", "fraction", "higher"),
    ("distinct_merged", "pairs", "lower"),
    ("distinct_collapsed", "pairs", "lower"),
    ("stale_first", "count", "lower"),
    ("correction_missed", "count", "lower"),
    ("recall_at_10", "fraction", "higher"),
    ("tokens_per_cycle", "tokens", "lower"),
    ("tokens_per_idle_cycle", "tokens", "lower"),
    ("reversible", "fraction", "higher"),
    ("live_entries", "entries", "-"),
    ("failures", "count", "lower"),
)
#: The metrics plotted over the year, one PNG each.
PLOTTED = (
    "specifics_lost",
    "facts_lost",
    "dup_groups_one_live",
    "distinct_merged",
    "distinct_collapsed",
    "stale_first",
    "recall_at_10",
    "tokens",
    "reversible",
    "live_entries",
)


@dataclass
class Result:
    adapter: str
    backend: str
    cycles: list[dict[str, Any]] = field(default_factory=list)
    final: dict[str, tuple[float, int]] = field(default_factory=dict)  # metric -> (value, n)
    examples: dict[str, list[str]] = field(default_factory=dict)
    failures: list[str] = field(default_factory=list)
    seconds: float = 0.0


def run(scenario: Scenario, adapter: Adapter, *, on_cycle: Any = None) -> Result:
    started = time.perf_counter()
    result = Result(adapter.name, getattr(adapter, "describe", lambda: "")())
    saves = iter(scenario.saves)
    pending = next(saves, None)
    saved: set[str] = set()
    rev_kept = rev_total = 0
    last = None
    save_failures: list[str] = []
    estimate = getattr(adapter, "prompt_tokens_estimate", None)  # prompts sized as sent, with or without a model
    for i, at in enumerate(scenario.consolidations):
        fresh = 0
        while pending is not None and pending.at <= at:
            try:
                adapter.save(pending.text, pending.at)
            except Exception as exc:  # noqa: BLE001 - a save the memory refused or failed is a failure of the adapter
                # and a fact the agent meant to keep: counted, scored as saved (so lost), and the year goes on
                save_failures.append(f"save on {pending.at:%Y-%m-%d} failed: {type(exc).__name__}: {exc}"[:300])
            saved.add(pending.key)
            fresh += 1
            pending = next(saves, None)
        before, tokens = adapter.dump(), adapter.tokens_used()
        sized = estimate() if estimate is not None else 0
        adapter.consolidate(at)
        after = adapter.dump()
        spent = adapter.tokens_used() - tokens
        kept, taken = reversible(before, after)
        rev_kept, rev_total = rev_kept + kept, rev_total + taken
        last = snapshot(scenario, at, after, adapter.search, saved)
        row: dict[str, Any] = {
            "cycle": i + 1,
            "day": (at - START).days,
            "idle": fresh == 0,
            "saves": fresh,
            "tokens": spent,
            **({"prompt_tokens_estimate": estimate() - sized} if estimate is not None else {}),
            "reversible": rev_kept / rev_total if rev_total else math.nan,
            "reversible_n": rev_total,
            **last.values,
        }
        result.cycles.append(row)
        if on_cycle is not None:
            on_cycle(row, last)
    assert last is not None, "the scenario has no consolidation"
    result.final = {name: (value, last.counts[name]) for name, value in last.values.items()}
    busy = [c["tokens"] for c in result.cycles if not c["idle"]]
    idle = [c["tokens"] for c in result.cycles if c["idle"]]
    result.final["tokens_per_cycle"] = (sum(busy) / len(busy) if busy else 0.0, len(busy))
    result.final["tokens_per_idle_cycle"] = (sum(idle) / len(idle) if idle else 0.0, len(idle))
    result.final["tokens_total"] = (float(adapter.tokens_used()), len(result.cycles))
    result.final["reversible"] = (rev_kept / rev_total if rev_total else math.nan, rev_total)
    result.examples = last.examples
    result.failures = save_failures + list(
        getattr(adapter, "failed_passes", []) or getattr(adapter, "failed_calls", [])
    )
    result.final["failures"] = (float(len(result.failures)), len(result.cycles))
    result.seconds = time.perf_counter() - started
    result.final["seconds"] = (result.seconds, len(result.cycles))
    return result
