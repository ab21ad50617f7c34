"""The passes of a dream cycle, in the spec's order, with what each reads and whether it calls the model.

The Dagster layer builds one asset per entry; ``dream_assets.cycle.run_cycle`` runs them without Dagster.
"""

from __future__ import annotations

import importlib
import logging
from collections.abc import Callable
from contextlib import ExitStack
from dataclasses import dataclass

from dream_assets.passes.context import PassContext
from dream_assets.passes.report import PassReport
from dream_assets.store.connection import StoreCorrupt, StoreError
from dream_assets.store.locks import LockTimeout, path_lock

log = logging.getLogger("dream_assets.passes")


@dataclass(frozen=True)
class PassSpec:
    name: str
    group: str  # logs | memory | skills | audit
    description: str
    runner: str  # "module:function" taking a PassContext
    uses_model: bool
    after: tuple[str, ...] = ()  # passes that must run first in a cycle
    reads: tuple[str, ...] = ()  # source assets (stores and logs) the pass reads

    def run(self, ctx: PassContext) -> PassReport:
        """Run the pass, unless the same pass is already running for this agent (a schedule and a change-gate sensor
        can both launch it): then it is skipped with that reason rather than run twice at once. Only this pass's own
        lock means "another run in progress": any other failure — the store busy past its wait limit, a corrupt store,
        a lock the pass itself takes timing out, any exception — is reported as failed, never as done or skipped
        (spec: retried next cycle; a store failure's reason names the agent and the file), and the rest of the
        cycle still runs."""
        module, func = self.runner.split(":")
        agent = ctx.profile.agent_id
        with ExitStack() as held:
            try:
                fn: Callable[[PassContext], PassReport] = getattr(importlib.import_module(module), func)
                try:
                    held.enter_context(path_lock(ctx.profile.pass_lock_path(self.name), timeout=0))
                except LockTimeout:  # not recorded: the run in progress records its own outcome
                    return PassReport(self.name).skip("another run of this pass is in progress for this agent")
                report = fn(ctx)
            except StoreCorrupt as exc:
                log.error("pass %s failed for agent %s: %s", self.name, agent, exc)
                report = PassReport(self.name).fail(f"the store of agent {agent!r} is unusable: {exc}")
            except StoreError as exc:
                log.error("pass %s failed for agent %s: %s", self.name, agent, exc)
                report = PassReport(self.name).fail(
                    f"the store of agent {agent!r} was not available: {exc}; retried next cycle"
                )
            # a failed pass is reported and retried next cycle; the cycle goes on
            except Exception as exc:  # noqa: BLE001
                log.exception("pass %s failed for agent %s", self.name, agent)
                report = PassReport(self.name).fail(f"{type(exc).__name__}: {exc}")
            return record_pass_outcome(ctx, report)  # the last status, for `dream status` and the cycle report


PASSES: tuple[PassSpec, ...] = (
    PassSpec(
        "log_retention",
        "logs",
        "Log retention — caps the telemetry logs after copying what it removes to the warehouse.\n\nPass 0. Caps the "
        "append-only telemetry logs (age, file count, lines per file), copying every line it "
        "removes into the day-partitioned Parquet log warehouse first. Runs first, every cycle.",
        "dream_assets.passes.registry:log_retention_pass",
        False,
        reads=(
            "skill_usage_log",
            "tool_call_log",
            "feedback_log",
            "skill_resource_usage_log",
            "wisp_execution_log",
            "tier_routing_log",
        ),
    ),
    PassSpec(
        "archive_purge",
        "memory",
        "Archive purge — deletes long-archived memories, never those above the high-value floor.\n\nPass 0b. "
        "Hard-deletes memories archived longer ago than MemoryArchiveRetention (90 days), except those "
        "above the high-value floor (importance >= 0.80 or reinforced >= 5 times).",
        "dream_assets.passes.archive_purge:run_archive_purge",
        False,
        after=("log_retention",),
        reads=("memory_corpus",),
    ),
    PassSpec(
        "importance_decay",
        "memory",
        "Importance decay — lowers the importance of memories not seen for a while.\n\nLowers the importance of "
        "memories not seen for longer than the grace period (half-life decay, never below "
        "the floor). Changes scores only, never content.",
        "dream_assets.passes.importance_decay:run_importance_decay",
        False,
        after=("archive_purge",),
        reads=("memory_corpus",),
    ),
    PassSpec(
        "memory_consolidation",
        "memory",
        "Memory consolidation — merges near-duplicate memories and retires noise, with safeguards.\n\nPass 1. Shows "
        "the model only new, changed or near-duplicate memories and applies its merges with host-side "
        "safeguards: coverage check (no dropped names, numbers or dates) with one repair call, high-value floor, "
        "replacement before retirement, archive never delete. Every change can be undone per cycle.",
        "dream_assets.passes.memory_consolidation:run_memory_consolidation",
        True,
        after=("importance_decay",),
        reads=("memory_corpus", "feedback_log"),
    ),
    PassSpec(
        "skill_gap_detection",
        "skills",
        "Skill gap detection — creates skills for requests that recur without one.\n\nPass 2. Finds request types "
        "that recur across at least two conversation sessions and have no skill yet, and "
        "creates skills for them (never overwriting an existing name).",
        "dream_assets.passes.skill_gap:run_skill_gap_detection",
        True,
        after=("log_retention",),
        reads=("conversation_log", "skill_catalog"),
    ),
    PassSpec(
        "wisp_failure_analysis",
        "skills",
        "Wisp failure analysis — annotates skills whose workflows keep failing.\n\nFinds workflow (wisp) "
        "descriptions that failed 3+ times in 14 days and annotates the skills that produced "
        "them; flags consistently successful ones (5+ runs, over 80 %) as promotion candidates.",
        "dream_assets.passes.wisp_failure:run_wisp_failure_analysis",
        True,
        after=("skill_gap_detection",),
        reads=("wisp_execution_log", "skill_catalog"),
    ),
    PassSpec(
        "skill_consolidation",
        "skills",
        "Skill consolidation — merges overlapping skills and links related ones.\n\nPass 3. Merges overlapping "
        "skills, adds guide skills for prefix families (mcp/*), fills seeAlso and prunes "
        "redundant skills (archived, restorable). Skipped when the catalog has not changed (change gate).",
        "dream_assets.passes.skill_consolidation:run_skill_consolidation",
        True,
        after=("wisp_failure_analysis",),
        reads=("skill_catalog", "skill_usage_log"),
    ),
    PassSpec(
        "skill_optimization",
        "skills",
        "Skill optimization — improves skills behind corrected or poorly rated sessions.\n\nPass 4. Improves skills "
        "used in sessions with corrections or poor/fair ratings, and expands sparse skills.",
        "dream_assets.passes.skill_optimization:run_skill_optimization",
        True,
        after=("skill_consolidation",),
        reads=("skill_catalog", "feedback_log", "skill_usage_log"),
    ),
    PassSpec(
        "preference_inference",
        "memory",
        "Preference inference — saves durable user preferences found in conversations.\n\nPass 5. Infers durable "
        "user preferences from the conversation log and recent feedback, saves them as "
        "user-preferences/inferred memories (flagged when they touch security or money), then clears the log.",
        "dream_assets.passes.preference_inference:run_preference_inference",
        True,
        after=("memory_consolidation", "skill_gap_detection"),
        reads=("conversation_log", "feedback_log"),
    ),
    PassSpec(
        "tier_routing_review",
        "memory",
        "Tier routing review — records what model-tier routing outcomes teach.\n\nSummarises model-tier routing "
        "outcomes of the last 14 days and records findings as anti-patterns/routing "
        "memories.",
        "dream_assets.passes.tier_routing:run_tier_routing_review",
        True,
        after=("preference_inference",),
        reads=("tier_routing_log",),
    ),
    PassSpec(
        "contradiction_sweep",
        "memory",
        "Contradiction sweep — archives a memory a later fact makes stale, as superseded.\n\nShows the model new or "
        "changed memories next to the live memories most similar to them and applies the pairs where one supersedes "
        "the other: the loser is archived with supersededBy (the winner carries supersedes), a user correction is "
        "never superseded by an agent's claim, an entry about a later moment never loses to an earlier one. Skipped "
        "when the corpus has not changed (change gate). Every change can be undone per cycle.",
        "dream_assets.passes.contradiction_sweep:run_contradiction_sweep",
        True,
        after=("memory_consolidation",),
        reads=("memory_corpus",),
    ),
)


def record_pass_outcome(ctx: PassContext, report: PassReport) -> PassReport:
    """Record the pass's last outcome in the profile; a skipped report gets its last completed counts (the live
    memory and skill counts measured now)."""
    from dream_assets.pass_status import load_outcome, record_outcome

    if report.status == "deferred":  # retried with back-off, not at the next cycle (passes/deferral.py)
        from dream_assets.passes.deferral import note_deferral

        note_deferral(report, load_outcome(ctx.profile, report.pass_name), ctx.options, ctx.now)
    measured = {
        "live": lambda: ctx.store.memories.counts()["live"],
        "skills": lambda: len(ctx.store.skills.list()),
    }
    return record_outcome(ctx.profile, report, now=ctx.now, cycle_id=ctx.cycle_id, measured=measured)


def log_retention_pass(ctx: PassContext) -> PassReport:
    from dream_assets.passes.log_retention import run_log_retention

    return run_log_retention(ctx.profile, ctx.options, ctx.now)


def by_name(name: str) -> PassSpec:
    for spec in PASSES:
        if spec.name == name:
            return spec
    raise KeyError(f"unknown pass {name!r}; known passes: {', '.join(p.name for p in PASSES)}")
