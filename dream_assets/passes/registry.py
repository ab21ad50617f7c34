"""The passes of a dream cycle, in the spec's order, with what each reads and whether it calls the model.

The Dagster layer builds one asset per entry; ``dream_assets.cycle.run_cycle`` runs them without Dagster.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from dataclasses import dataclass

from dream_assets.passes.context import PassContext
from dream_assets.passes.report import PassReport


@dataclass(frozen=True)
class PassSpec:
    name: str
    group: str                     # logs | memory | skills | audit
    description: str
    runner: str                    # "module:function" taking a PassContext
    uses_model: bool
    after: tuple[str, ...] = ()    # passes that must run first in a cycle
    reads: tuple[str, ...] = ()    # source assets (stores and logs) the pass reads

    def run(self, ctx: PassContext) -> PassReport:
        module, func = self.runner.split(":")
        fn: Callable[[PassContext], PassReport] = getattr(importlib.import_module(module), func)
        return fn(ctx)


PASSES: tuple[PassSpec, ...] = (
    PassSpec("log_retention", "logs",
             "Pass 0. Caps the append-only telemetry logs (age, file count, lines per file), copying every line it "
             "removes into the day-partitioned Parquet log warehouse first. Runs first, every cycle.",
             "dream_assets.passes.registry:log_retention_pass", False,
             reads=("skill_usage_log", "tool_call_log", "feedback_log", "skill_resource_usage_log",
                    "wisp_execution_log", "tier_routing_log")),
    PassSpec("archive_purge", "memory",
             "Pass 0b. Hard-deletes memories archived longer ago than MemoryArchiveRetention (90 days), except those "
             "above the high-value floor (importance >= 0.80 or reinforced >= 5 times).",
             "dream_assets.passes.archive_purge:run_archive_purge", False, after=("log_retention",),
             reads=("memory_corpus",)),
    PassSpec("importance_decay", "memory",
             "Lowers the importance of memories not seen for longer than the grace period (half-life decay, never below "
             "the floor). Changes scores only, never content.",
             "dream_assets.passes.importance_decay:run_importance_decay", False, after=("archive_purge",),
             reads=("memory_corpus",)),
)


def log_retention_pass(ctx: PassContext) -> PassReport:
    from dream_assets.passes.log_retention import run_log_retention

    return run_log_retention(ctx.profile, ctx.options, ctx.now)


def by_name(name: str) -> PassSpec:
    for spec in PASSES:
        if spec.name == name:
            return spec
    raise KeyError(f"unknown pass {name!r}; known passes: {', '.join(p.name for p in PASSES)}")
