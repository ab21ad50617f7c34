"""Importance decay (runs before consolidation).

Entries whose last_seen_at is older than the grace period lose importance as importance × 0.5^(elapsed/half-life),
never below the floor. Keyed on last_seen_at (real reinforcement), not updated_at, so a dream rewrite never shields an
entry. Calendar-time invariant: each entry carries ``decayAppliedThrough`` (the instant up to which decay has been
applied), and a run applies only the time since then, so running twice a day, daily or weekly composes to the same
curve (0.5^(a/T)·0.5^(b/T) = 0.5^((a+b)/T)). The first decay after the grace period applies only post-grace time.
Decay changes score and updated_at, never content: it does not re-open an entry for review or move a fingerprint.
"""

from __future__ import annotations

from datetime import datetime, timedelta

from dream_assets.model import MemoryEntry, iso, parse_ts
from dream_assets.options import DreamOptions
from dream_assets.passes.context import PassContext
from dream_assets.passes.report import PassReport

PASS = "importance_decay"
APPLIED_KEY = "decayAppliedThrough"


def decayed_importance(entry: MemoryEntry, options: DreamOptions, now: datetime) -> tuple[float, datetime] | None:
    """The entry's new importance and the new applied-through instant, or None when nothing is due."""
    half_life = options.ImportanceDecayHalfLifeDays
    floor = options.ImportanceDecayFloor
    if half_life <= 0 or entry.importance <= floor:
        return None
    start = entry.last_seen_at + timedelta(days=options.ImportanceDecayGraceDays)
    applied = entry.metadata.get(APPLIED_KEY)
    if applied:
        try:
            start = max(start, parse_ts(applied))
        except ValueError:
            pass  # an unreadable stamp: fall back to post-grace time only, never retroactively into the grace window
    if now <= start:
        return None
    elapsed_days = (now - start).total_seconds() / 86400.0
    value = max(floor, entry.importance * 0.5 ** (elapsed_days / half_life))
    return value, now


def run_importance_decay(ctx: PassContext) -> PassReport:
    report = PassReport(PASS)
    opts = ctx.options
    if not opts.ImportanceDecayEnabled:
        return report.skip("disabled (ImportanceDecayEnabled = false)")
    if opts.ImportanceDecayHalfLifeDays <= 0:
        return report.skip("ImportanceDecayHalfLifeDays is not positive: decay is off")
    importance: dict[str, float] = {}
    stamps: dict[str, dict[str, str]] = {}
    reached_floor = 0
    for e in ctx.store.memories.list_live():
        result = decayed_importance(e, opts, ctx.now)
        if result is None:
            continue
        value, through = result
        stamps[e.id] = {APPLIED_KEY: iso(through) or ""}
        if value != e.importance:
            importance[e.id] = value
            if value <= opts.ImportanceDecayFloor:
                reached_floor += 1
    ctx.store.memories.set_importance(importance, now=ctx.now, stamps=stamps)
    report.counts.update({"decayed": len(importance), "at_floor": reached_floor})
    return report.finish(f"importance decayed on {len(importance)} entries ({reached_floor} at the floor "
                         f"{opts.ImportanceDecayFloor:.2f})")
