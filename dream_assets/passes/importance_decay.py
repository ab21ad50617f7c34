"""Importance decay (runs before consolidation).

Entries whose last_seen_at is older than the grace period lose importance as importance × 0.5^(elapsed/half-life),
never below the floor. Calendar-time invariant: each entry carries ``decayAppliedThrough`` (the instant up to which
decay has been applied), and a run applies only the time since then, so running twice a day, daily or weekly composes
to the same curve (0.5^(a/T)·0.5^(b/T) = 0.5^((a+b)/T)). The first decay after the grace period applies only
post-grace time. Decay changes score and updated_at, never content: it does not re-open an entry for review or move a
fingerprint.

When the clock starts. Spec: decay is keyed on LastSeenAt, and "a recent dream rewrite does delay the current pass's
decay (since the elapsedDays clock is reset by any record write) but does not permanently shield the entry". So the
elapsed time of a run counts from the latest of: the end of the grace period after the last sighting, the last decay
(``decayAppliedThrough``), and the last *content* write. updated_at cannot stand for the last content write on its
own: decay itself moves it, and so do category, tag and importance edits, none of which restate the fact. Content
writes are found where they are recorded:

- a consolidation merge stamps ``mergedAt`` on the entry it writes (a merge also carries its sources' latest decay
  stamp, so without this the merged text would be decayed again for time its sources had already paid);
- every decay run stamps ``decayContentHash``, a hash of the content it decayed. Content that no longer matches was
  rewritten since (a tool edit, a save that extended it, an undo); updated_at is then the time of that write, or of a
  later edit, which only starts the clock a little later.

An entry never decayed and never merged has no record of an earlier content write than its sighting, so the clock is
the sighting's alone. Each write only delays the decay of the time before it; cumulative decay goes on while
last_seen_at stays stale.

Quiet. A decay that would change an importance by less than ``QUIET_DECAY`` (below the 4 decimals every output
shows) is not written: no change row, no stamp. The entry's applied-through instant stays, so a later run applies
that time too, and the curve is the same at any cadence.

Undoable. Every entry decay writes gets a "decayed" change row in the same transaction, holding only what decay
writes (importance, updated_at, its two stamps) before and after, so ``dream undo`` puts the old values back. An undone
decay is not an exemption: its stamps go back too, so the next cycle decays that time again.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import ClassVar

from dream_assets.changes_model import Actor, ChangeRow
from dream_assets.model import MemoryEntry, iso, parse_ts, shifted
from dream_assets.options import DreamOptions, PassOptions, pass_option
from dream_assets.passes.context import PassContext
from dream_assets.passes.memory_vocabulary import DECAY_APPLIED_KEY as APPLIED_KEY
from dream_assets.passes.memory_vocabulary import MERGED_AT_KEY
from dream_assets.passes.report import PassReport
from dream_assets.passes.spec import PassSpec
from dream_assets.store.changes import DECAY_KIND
from dream_assets.store.memory import WRITE_CHUNK
from dream_assets.text.content_hash import stable_hash

PASS = "importance_decay"
CONTENT_HASH_KEY = "decayContentHash"
#: A decay smaller than this (importance is shown to 4 decimals) is left for a later run: cycles minutes apart write no
#: rows of 1e-6 changes, and the time they skip is applied, exactly, when the change is big enough to see.
QUIET_DECAY = 1e-4


def content_hash(content: str) -> str:
    return stable_hash("decay-content", content)[:16]


def last_content_write(entry: MemoryEntry) -> datetime | None:
    """The latest content write the entry records (see the module docstring), or None when it records none."""
    found: list[datetime] = []
    merged = entry.metadata.get(MERGED_AT_KEY)
    if merged:
        try:
            found.append(parse_ts(merged))
        except ValueError:
            pass
    stamped = entry.metadata.get(CONTENT_HASH_KEY)
    if stamped and stamped != content_hash(entry.content):
        found.append(entry.updated_at)
    return max(found, default=None)


def decayed_importance(entry: MemoryEntry, options: DreamOptions, now: datetime) -> tuple[float, datetime] | None:
    """The entry's new importance and the new applied-through instant, or None when nothing is due."""
    section = options.section(ImportanceDecayOptions)
    half_life = section.half_life_days
    floor = section.floor
    if half_life <= 0 or entry.importance <= floor:
        return None
    # A sighting near the calendar's end (an imported 9999-12-31) ends its grace period "never", not in an overflow.
    start = shifted(entry.last_seen_at, timedelta(days=section.grace_days))
    applied = entry.metadata.get(APPLIED_KEY)
    if applied:
        try:
            start = max(start, parse_ts(applied))
        except ValueError:
            pass  # an unreadable stamp: fall back to post-grace time only, never retroactively into the grace window
    written = last_content_write(entry)
    if written is not None:
        start = max(start, written)
    if now <= start:
        return None
    elapsed_days = (now - start).total_seconds() / 86400.0
    value = max(floor, entry.importance * 0.5 ** (elapsed_days / half_life))
    if value > floor and entry.importance - value < QUIET_DECAY:
        # Below what any output shows: no write and no change row. The applied-through stamp stays where it is, so
        # the time is not lost: a later run applies all of it at once (the curve composes), calendar-exact.
        return None
    return value, now


def decay_importance(ctx: PassContext) -> PassReport:
    report = PassReport(PASS)
    opts = ctx.options
    section = opts.section(ImportanceDecayOptions)
    if section.half_life_days <= 0:
        return report.skip("ImportanceDecayHalfLifeDays is not positive: decay is off")
    importance: dict[str, float] = {}
    stamps: dict[str, dict[str, str]] = {}
    rows: list[ChangeRow] = []
    reached_floor = 0
    now_iso = iso(ctx.now)
    for e in ctx.store.memories.list_live():
        result = decayed_importance(e, opts, ctx.now)
        if result is None:
            continue
        value, through = result
        stamps[e.id] = {APPLIED_KEY: iso(through) or "", CONTENT_HASH_KEY: content_hash(e.content)}
        if value != e.importance:
            importance[e.id] = value
            if value <= section.floor:
                reached_floor += 1
        rows.append(_decay_row(ctx.cycle_id, e, value, now_iso if e.id in importance else iso(e.updated_at), stamps))
    # An entry's new score, its stamps and its change row are one write, WRITE_CHUNK entries per transaction: the
    # store is never held for the whole corpus, and a crash between chunks leaves each entry decayed, stamped and
    # recorded, or untouched (the next run decays it).
    ids = list(stamps)
    for start in range(0, len(ids), WRITE_CHUNK):
        chunk = ids[start : start + WRITE_CHUNK]
        with ctx.store.transaction():
            ctx.store.memories.set_importance(
                {i: importance[i] for i in chunk if i in importance},
                now=ctx.now,
                stamps={i: stamps[i] for i in chunk},
            )
            ctx.store.changes.record_many(rows[start : start + WRITE_CHUNK], now=ctx.now)
    report.counts.update({"decayed": len(importance), "at_floor": reached_floor})
    return report.finish(
        f"importance decayed on {len(importance)} entries ({reached_floor} at the floor {section.floor:.2f})"
    )


def _decay_row(cycle_id: str, e: MemoryEntry, value: float, updated_at: str | None, stamps: dict) -> ChangeRow:
    """The change row of one decayed entry: only the fields decay writes, before and after."""
    return ChangeRow(
        cycle_id=cycle_id,
        actor=Actor.PASS,
        pass_name=PASS,
        kind=DECAY_KIND,
        target_type="memory",
        target_id=e.id,
        before={
            "importance": e.importance,
            "updated_at": iso(e.updated_at),
            "metadata": {k: e.metadata.get(k) for k in (APPLIED_KEY, CONTENT_HASH_KEY)},
        },
        after={"importance": value, "updated_at": updated_at, "metadata": stamps[e.id]},
        reason=f"not seen since {e.last_seen_at:%Y-%m-%d}: importance {e.importance:.3f} -> {value:.3f}",
    )


@dataclass(frozen=True, kw_only=True)
class ImportanceDecayOptions(PassOptions):
    """The options section of this pass (``[passes.importance_decay]``)."""

    PASS: ClassVar[str] = "importance_decay"

    enabled: bool = pass_option(
        True, "importance decay (a non-positive half-life also disables it)", alias="ImportanceDecayEnabled"
    )
    apply_mode: str = pass_option(
        "",
        "ApplyMode of importance decay; empty = ApplyMode",
        choices=("", "auto", "review", "review-risky"),
        alias="ImportanceDecayApplyMode",
    )
    grace_days: float = pass_option(
        30.0, "days after last_seen_at before decay starts", minimum=0.0, alias="ImportanceDecayGraceDays"
    )
    half_life_days: float = pass_option(
        45.0, "decay half-life in days; zero or negative disables decay", alias="ImportanceDecayHalfLifeDays"
    )
    floor: float = pass_option(
        0.10, "decay never takes importance below this", minimum=0.0, maximum=1.0, alias="ImportanceDecayFloor"
    )


SPEC = PassSpec(
    name=PASS,
    group="memory",
    description="Importance decay — lowers the importance of memories not seen for a while.\n\nLowers the importance "
    "of memories not seen for longer than the grace period (half-life decay, never below the floor). Changes scores "
    "only, never content.",
    body=decay_importance,
    options=ImportanceDecayOptions,
    after=("archive_purge",),
    reads=("memory_corpus",),
)


def run_importance_decay(ctx: PassContext) -> PassReport:
    """The pass with its shared opening, change gate and ledger stamp (runner.attempt: no lock, no review mode, no
    recorded outcome)."""
    from dream_assets.passes.runner import attempt

    return attempt(SPEC, ctx)
