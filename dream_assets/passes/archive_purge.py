"""Pass 0b — Archive purge: hard-delete memories archived longer ago than MemoryArchiveRetention.

The only path that destroys long-term memory, so the high-value floor applies: an entry at or above
PruningProtectionImportance or PruningProtectionReinforcementCount is kept past retention. Importance is frozen at
archive time (decay skips archived entries), so in practice the reinforcement half of the floor is what bites.

A memory the contradiction sweep archived as superseded (``supersededBy``) is history, not noise: it is kept while
the entry that superseded it — or, along a chain of supersessions, any later one — is live or not yet due itself, and
purged only together with its whole chain.

An entry an undo put back after its purge carries ``keepArchivedUntil`` (a full retention from the undo): it is kept
until then, and the report says so, so the next cycle does not purge again what the operator just brought back.

Each purge writes, in one transaction, the delete, the ``memory_purges`` record and a "purged" change-log row holding
the whole record, so ``dream undo --cycle`` can put a purged entry back exactly as it was (archived).
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import ClassVar

from dream_assets.model import MemoryEntry, parse_ts
from dream_assets.options import PassOptions, pass_option
from dream_assets.passes.context import PassContext
from dream_assets.passes.memory_vocabulary import is_high_value
from dream_assets.passes.report import PassReport
from dream_assets.passes.spec import PassSpec
from dream_assets.store.changes import KEEP_ARCHIVED_UNTIL_KEY
from dream_assets.store.memory import SUPERSEDED_BY_KEY

PASS = "archive_purge"


def kept_until(entry: MemoryEntry) -> datetime | None:
    """Until when an undo of its purge keeps ``entry`` from the purge (None: no such keep, or an unreadable one)."""
    raw = entry.metadata.get(KEEP_ARCHIVED_UNTIL_KEY)
    if not raw:
        return None
    try:
        return parse_ts(raw)
    except ValueError:
        return None


def held_by_chain(entry: MemoryEntry, get: Callable[[str], MemoryEntry | None], due: set[str]) -> str | None:
    """The id of the entry that keeps superseded ``entry`` from the purge — the first along its chain of
    ``supersededBy`` that is live, or archived but not yet due — or None when the whole chain is due (or gone)."""
    seen = {entry.id}
    current = entry
    while winner_id := current.metadata.get(SUPERSEDED_BY_KEY, "").strip():
        winner = get(winner_id)
        if winner is None or winner_id in seen:
            return None  # purged already, or a loop: nothing live keeps it
        if not winner.is_archived or winner_id not in due:
            return winner_id
        seen.add(winner_id)
        current = winner
    return None


def purge_archived(ctx: PassContext) -> PassReport:
    report = PassReport(PASS)
    opts = ctx.options
    section = opts.section(ArchivePurgeOptions)
    if section.retention <= timedelta(0):
        return report.skip("MemoryArchiveRetention is not positive: archived entries are kept forever")
    cutoff = ctx.now - section.retention
    due = [e for e in ctx.store.memories.list_archived() if e.archived_at is not None and e.archived_at < cutoff]
    undone = {e.id: until for e in due if (until := kept_until(e)) is not None and until > ctx.now}
    due = [e for e in due if e.id not in undone]
    for eid, until in undone.items():
        report.change("kept", eid, f"put back by an undo of its purge; kept archived until {until:%Y-%m-%d}")
    kept = [e for e in due if is_high_value(e, opts)]
    candidates = [e for e in due if not is_high_value(e, opts)]
    doomed_ids = {e.id for e in candidates}
    chains = functools.lru_cache(maxsize=None)(ctx.store.memories.get)
    history = {e.id: held for e in candidates if (held := held_by_chain(e, chains, doomed_ids)) is not None}
    doomed = [e for e in candidates if e.id not in history]
    for e in candidates:
        if e.id in history:
            report.change(
                "kept",
                e.id,
                f"archived {e.archived_at:%Y-%m-%d} as superseded; {history[e.id]} is not due for the purge, so "
                "it stays as that entry's history",
            )
    for e in kept:
        report.change(
            "kept",
            e.id,
            f"archived {e.archived_at:%Y-%m-%d}, importance {e.importance:.2f}, "
            f"reinforced {e.reinforcement_count}× — above the high-value floor",
        )
    # The delete, its purge record and its change-log row (the full record, which undo puts back) are one write.
    with ctx.store.transaction():
        purged = ctx.store.memories.purge([e.id for e in doomed], now=ctx.now)
        for e in purged:
            ctx.record(
                PASS,
                "purged",
                e,
                before=e,
                after=None,
                reason=f"archived {e.archived_at:%Y-%m-%d}, older than MemoryArchiveRetention",
            )
    for e in purged:
        report.change("purged", e.id, e.content)
        report.info(f"purged memory {e.id} archived {e.archived_at:%Y-%m-%d}: {e.content}")
    report.counts.update(
        {
            "purged": len(purged),
            "kept_high_value": len(kept),
            "kept_superseded": len(history),
            "kept_undone": len(undone),
            "archived_total": len(due) + len(undone),
        }
    )
    return report.finish(
        f"{len(purged)} purged, {len(kept)} kept above the high-value floor"
        + (f", {len(history)} kept as the history of a live entry" if history else "")
        + (f", {len(undone)} kept archived after an undo of their purge" if undone else "")
    )


@dataclass(frozen=True, kw_only=True)
class ArchivePurgeOptions(PassOptions):
    """The options section of this pass (``[passes.archive_purge]``)."""

    PASS: ClassVar[str] = "archive_purge"

    enabled: bool = pass_option(True, "pass 0b: purge long-archived memories", alias="ArchivePurgeEnabled")
    apply_mode: str = pass_option(
        "",
        "ApplyMode of archive purge; empty = ApplyMode",
        choices=("", "auto", "review", "review-risky"),
        alias="ArchivePurgeApplyMode",
    )
    retention: timedelta = pass_option(
        timedelta(days=90),
        "archived entries older than this are purged; non-positive keeps them forever",
        duration="any",
        alias="MemoryArchiveRetention",
    )


SPEC = PassSpec(
    name=PASS,
    group="memory",
    description="Archive purge — deletes long-archived memories, never those above the high-value floor.\n\nPass 0b. "
    "Hard-deletes memories archived longer ago than MemoryArchiveRetention (90 days), except those above the "
    "high-value floor (importance >= 0.80 or reinforced >= 5 times) and those superseded by an entry still live.",
    body=purge_archived,
    options=ArchivePurgeOptions,
    after=("log_retention",),
    reads=("memory_corpus",),
)


def run_archive_purge(ctx: PassContext) -> PassReport:
    """The pass with its shared opening, change gate and ledger stamp (runner.attempt: no lock, no review mode, no
    recorded outcome)."""
    from dream_assets.passes.runner import attempt

    return attempt(SPEC, ctx)
