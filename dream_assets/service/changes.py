"""Undo, the change log's listing, and a hand restore: each one function with a typed result, that takes the pass
locks and waits for a running cycle itself, writes its own change rows and puts the linked folder's files back with
the store.

``undo`` takes back a cycle, one pass of a cycle or one change; ``undo_own`` the same, limited to the agent's own
changes (its saves, puts, forgets and restores); ``restore`` puts one archived memory back live, recorded under a
cycle of its own that ``undo`` archives again. The outcome of an undo is ``done`` (everything asked was put back, or
nothing was left to do), ``partial`` (something was put back, and an entry or a file of the linked folder could not
be: each is named) or ``nothing``; an undo refused before it acted (a running cycle or pass, a cycle with no changes)
raises ``Refused`` and changed nothing.
"""

from __future__ import annotations

import time
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Literal

from pydantic import Field

from dream_assets import cycle_ids
from dream_assets.agent_memory import (
    InvalidInput,
    NotFound,
    Refused,
    StoreUnavailable,
)
from dream_assets.calls import Result
from dream_assets.changes_model import ACTOR_PASS_NAMES, Actor, ChangeRow
from dream_assets.model import folder_place, iso
from dream_assets.options import DreamOptions
from dream_assets.profile import AgentProfile
from dream_assets.service._common import Op, begin, check_id
from dream_assets.store import DreamStore
from dream_assets.store.changes import STAMP_KIND, CycleRunning, UndoRefused, UndoResult
from dream_assets.store.connection import StoreError

if TYPE_CHECKING:
    from dream_assets.folders.sync import FolderUndo

#: The pass name a hand restore is recorded under (``dream restore``, the ``memory_restore`` tool), and the prefix of
#: its cycle id; an undo treats it like any cycle.
RESTORE_PASS = ACTOR_PASS_NAMES[Actor.RESTORE]
#: Who makes the agent's own changes: its saves, puts and reinforcements, the extends of save-time dedup, its forgets
#: and its restores. ``undo_own`` undoes these and nothing else.
OWN_ACTORS = frozenset({Actor.AGENT_SAVE, Actor.SAVE_DEDUP, Actor.AGENT_FORGET, Actor.RESTORE})


# --- results --------------------------------------------------------------------------------------------------------


class PutBack(Result):
    target: str = Field(description="'memory <id>' or 'skill <name>'")
    kind: str = Field(
        description="what the undo did: put back, put back live, unmerged, unsuperseded, archived again, "
        "retired, unpurged or importance put back"
    )
    detail: str
    place: str = Field("", description="a note of the linked memory folder: its file and heading, else ''")


class UndoReport(Result):
    """What an undo did, target by target, and the files of the linked folder it put back."""

    cycle_id: str | None = Field(description="the cycle undone (for one change: the cycle the change belongs to)")
    change_id: str | None = None
    pass_name: str | None = None
    forced: bool = False
    put_back: list[PutBack] = Field(default_factory=list)
    already_undone: list[str] = Field(default_factory=list, description="targets an earlier undo put back")
    not_restored: list[str] = Field(default_factory=list, description="'<target>: <why>' — could not be put back")
    refused: list[str] = Field(default_factory=list, description="'<target>: <why>' — edited since; left as they are")
    left: list[str] = Field(
        default_factory=list, description="'<target>: <why>' — decayed again by a later cycle; left as that one left it"
    )
    blocked_by: list[str] = Field(
        default_factory=list, description="later cycles that built on what is undone: undo them first, newest first"
    )
    files: list[str] = Field(default_factory=list, description="one line per file of the linked folder")
    files_refused: list[str] = Field(default_factory=list, description="files of the linked folder not put back")
    stale_markers: list[str] = Field(
        default_factory=list, description="markers of crashed cycles, ignored and removed, with why"
    )
    undo_cycle_id: str | None = Field(None, description="the cycle the undo's own rows are recorded under")
    review_marks: int = Field(0, description="entries whose review marks the undo left as the cycle wrote them")
    review_mark_keys: list[str] = Field(default_factory=list, description="the metadata keys of those marks")
    left_apart: list[str] = Field(
        default_factory=list,
        description="memories of the merges undone, stamped left apart so a dream cycle does not merge them again "
        "before the consolidation cooldown",
    )
    outcome: Literal["done", "partial", "nothing"]
    summary: str = Field(description="one line saying what was done")

    def kinds(self) -> dict[str, int]:
        counts: dict[str, int] = {}
        for p in self.put_back:
            counts[p.kind] = counts.get(p.kind, 0) + 1
        return counts

    def done(self, kind: str) -> list[PutBack]:
        return [p for p in self.put_back if p.kind == kind]


class ChangeSetSummary(Result):
    """What one pass of one cycle left in the change log (``dream undo --list``)."""

    cycle_id: str
    pass_name: str
    started_at: str = Field(description="ISO-8601 UTC of the cycle's first change")
    changes: int = Field(description="real changes (review stamps are counted apart)")
    undoable: int = Field(description="changes not undone yet")
    stamps: int = Field(description="review stamps: not changes, an undo leaves them")
    kinds: dict[str, int]


class RestoreResult(Result):
    id: str
    status: Literal["restored", "already_live"]
    content: str
    cycle_id: str | None = Field(None, description="the cycle the restore is recorded under: undo it to archive again")
    undo_command: str | None = None


# --- undo -----------------------------------------------------------------------------------------------------------


def undo(
    profile: AgentProfile | str | Path,
    *,
    cycle_id: str | None = None,
    change_id: str | None = None,
    pass_name: str | None = None,
    force: bool = False,
    wait: float = 0.0,
    now: datetime | None = None,
    options: DreamOptions | None = None,
    profile_arg: str | None = None,
) -> UndoReport:
    """Undo a cycle (``cycle_id``), one pass of it (and ``pass_name``) or one change (``change_id``).

    Never inside a running cycle, nor beside a running pass: it waits up to ``wait`` seconds for them, then raises
    ``Refused`` (``running``). A cycle whose entries were edited since is refused as a whole unless ``force`` (the
    result lists the refusals and nothing is changed); a later cycle that built on it blocks it even with ``force``
    (``blocked_by``). Undoing a whole cycle (or the last standing pass or change of one: a forget's one change)
    also puts back the files of the linked folder its write-backs changed, and a file it could not put back makes
    the outcome ``partial``. ``NotFound`` for a cycle, pass or change the
    agent never had; ``StoreUnavailable`` when the store is busy or damaged (what was done is kept: a rerun finishes
    it)."""
    op = begin(profile, _with_passes(profile, options), now)
    if (cycle_id is None) == (change_id is None):
        raise InvalidInput("give cycle_id or change_id (one of them)")
    if change_id is not None and pass_name is not None:
        raise InvalidInput("pass_name goes with cycle_id, not with change_id")
    cycle_id = check_id(cycle_id, "cycle_id") if cycle_id is not None else None
    change_id = check_id(change_id, "change_id") if change_id is not None else None
    where = profile_arg or str(op.profile.root)
    store = op.store()
    return _undo(op, store, cycle_id, change_id, pass_name, force, wait, where)


def undo_own(
    profile: AgentProfile | str | Path,
    *,
    cycle_id: str | None = None,
    change_id: str | None = None,
    now: datetime | None = None,
    options: DreamOptions | None = None,
    profile_arg: str | None = None,
) -> UndoReport:
    """``undo`` limited to the agent's own changes: a day's saves and puts (``agent-YYYY-MM-DD``), a save's extend
    (``save-...``), a forget, a restore, or one change of those. Any other cycle or change (a dream cycle, a review
    set, an undo) is refused by name: an operator undoes those with ``dream undo``."""
    op = begin(profile, options, now)
    if (cycle_id is None) == (change_id is None):
        raise InvalidInput("give cycle_id or change_id (one of them)")
    cycle_id = check_id(cycle_id, "cycle_id") if cycle_id is not None else None
    change_id = check_id(change_id, "change_id") if change_id is not None else None
    store = op.store()
    try:
        if change_id is not None:
            row = store.changes.get(change_id)
            if row is None:
                raise NotFound(f"no change {change_id!r} in agent {op.profile.agent_id}; nothing was changed")
            if row.actor not in OWN_ACTORS:
                raise Refused(
                    f"change {change_id} was made by {row.pass_name} (cycle {row.cycle_id}), not by the agent: an "
                    "agent undoes only its own saves, forgets and restores; nothing was changed"
                )
        else:
            rows = store.changes.list(cycle_id)
            if not rows:
                raise NotFound(f"no changes of cycle {cycle_id!r} in agent {op.profile.agent_id}; nothing was changed")
            others = sorted({r.pass_name for r in rows if r.actor not in OWN_ACTORS})
            if others:
                raise Refused(
                    f"cycle {cycle_id} is not the agent's own (it holds changes of {', '.join(others)}): an agent "
                    "undoes only its own saves, forgets and restores; nothing was changed"
                )
    except StoreError as exc:
        raise StoreUnavailable(str(exc)) from exc
    return _undo(op, store, cycle_id, change_id, None, False, 0.0, profile_arg or str(op.profile.root))


def _undo(
    op: Op,
    store: DreamStore,
    cycle_id: str | None,
    change_id: str | None,
    pass_name: str | None,
    force: bool,
    wait: float,
    where: str,
) -> UndoReport:
    from dream_assets.passes.registry import PassRunning, no_pass_running

    stale: list[str] = []
    try:
        _check_target(op, store, cycle_id, change_id, pass_name, where)
        # Never inside a running cycle (between two of its passes as well) nor beside a running pass: an undo between
        # a pass's read and its write, or under the passes that build on what it puts back, would leave half of each.
        stale = wait_for_cycles(store, wait)
        with no_pass_running(op.profile, wait=wait):
            if change_id is not None:
                result = store.changes.undo_change(change_id, now=op.now)
            else:
                assert cycle_id is not None
                result = store.changes.undo_cycle(cycle_id, now=op.now, pass_name=pass_name, force=force)
            whole = cycle_id is not None and pass_name is None
            files = _undo_files(op, _whole_set(store, result.cycle_id, whole)) if result.applied else None
            apart = _leave_undone_merges_apart(op, store, result, change_id, pass_name)
    except (UndoRefused, PassRunning) as exc:
        raise Refused(str(exc), running=isinstance(exc, PassRunning | CycleRunning), stale_markers=stale) from exc
    except StoreError as exc:  # busy: try again later (what was done is kept; a rerun finishes it); corrupt: recover
        raise StoreUnavailable(str(exc)) from exc
    report = _report(result, cycle_id, change_id, pass_name, force, stale, files, where)
    for put in report.put_back:  # a folder note is named by its file and heading, not only its id
        kind, _, entry_id = put.target.partition(" ")
        entry = store.memories.get(entry_id) if kind == "memory" else None
        put.place = folder_place(entry.to_dict()) if entry is not None else ""
    if apart:
        report.left_apart = apart
        report.summary += (
            f"; {len(apart)} memories of the merges undone are left apart: a dream cycle does not merge them again "
            "before the consolidation cooldown"
        )
    if cycle_id is not None and report.put_back:
        try:
            report.review_marks, keys = store.changes.review_marks(cycle_id)
        except StoreError as exc:
            raise StoreUnavailable(str(exc)) from exc
        if report.review_marks:
            from dream_assets.passes.contradiction_sweep import REVIEWED_KEY

            report.review_mark_keys = sorted({*keys, REVIEWED_KEY})
    return report


def _leave_undone_merges_apart(
    op: Op, store: DreamStore, result: UndoResult, change_id: str | None, pass_name: str | None
) -> list[str]:
    """An undone merge is a person's decision, like a merge rejected in review: the memories it had joined, live
    again, are stamped left apart (``passes.left_apart.leave_apart``) so the next cycle does not propose the same
    merge at once. Stamped under the undo's own cycle, so undoing the undo takes the stamps back with the rest; a
    rerun of an undo killed half-way stamps what the first run did not."""
    from dream_assets.passes.left_apart import leave_apart

    if not result.undo_cycle_id:
        return []
    rows = store.changes.list(result.cycle_id, pass_name=pass_name)
    if change_id is not None:  # one change: the merges it belongs to (as a source's archive or the merged entry)
        mine = {i for r in rows if r.change_id == change_id for i in (r.target_id, r.successor_id) if i}
        rows = [r for r in rows if r.target_id in mine or r.successor_id in mine]
    groups: dict[str, set[str]] = {}
    for r in rows:
        if r.kind == "archived" and r.actor is Actor.PASS and r.successor_how.merged and r.undone_at is not None:
            # with the entry it went into: one the undo retired is not live (a whole merge undone leaves its
            # sources apart), one that stays (a source's own archive undone, a fold) is left apart from the source
            groups.setdefault(r.successor_id or "", set()).update((r.target_id, r.successor_id or ""))
    done = {r.target_id for r in store.changes.list(result.undo_cycle_id) if r.kind == STAMP_KIND}
    apart: list[str] = []
    for ids in groups.values():
        if ids & done:  # stamped by an earlier run of this undo (one transaction: all of the group or none)
            continue
        apart += leave_apart(
            store,
            sorted(ids),
            cycle_id=result.undo_cycle_id,
            actor=Actor.UNDO,
            reason=f"merge undone by a person ({result.cycle_id}): left apart",
            now=op.now,
        )
    return apart


def _whole_set(store: DreamStore, set_id: str, whole: bool) -> str:
    """The change set whose linked-folder files an undo puts back: ``set_id`` when it was undone ``whole`` (a cycle,
    not one pass or change of it) or when the pass or change undone left none of its changes standing (a forget's one
    change is its whole set); "" when some stand (the write-back wrote them out with the rest: the files stay as the
    set left them)."""
    if whole:
        return set_id
    standing = [r for r in store.changes.list(set_id) if r.undone_at is None and r.kind != STAMP_KIND] if set_id else []
    return "" if standing else set_id


def _undo_files(op: Op, cycle_id: str) -> FolderUndo | None:
    """The linked memory folder's files, as the change set found them: its cycle's write-back and any later one (a
    dream sync, the next cycle) that wrote its changes out."""
    from dream_assets.folders import undo_files

    return undo_files(op.profile, cycle_id) if cycle_id else None


def _check_target(
    op: Op, store: DreamStore, cycle_id: str | None, change_id: str | None, pass_name: str | None, where: str
) -> None:
    """``NotFound`` when the cycle, pass or change names nothing that exists (a mistyped pass, a cycle this agent
    never ran). A cycle that ran but changed nothing is not unknown: the undo then says it has nothing to undo."""
    from dream_assets.cycle_report import saved_report
    from dream_assets.passes.outcome import load_outcomes
    from dream_assets.passes.registry import PASSES

    if change_id is not None:
        if store.changes.get(change_id) is None:
            raise NotFound(
                f"no change {change_id!r} in agent {op.profile.agent_id}; nothing was changed (the changes of an "
                f"entry are listed by `dream memory history --profile {where} ID`)"
            )
        return
    names = [p.name for p in PASSES]
    if pass_name is not None and pass_name not in [*names, RESTORE_PASS]:
        raise NotFound(f"no pass named {pass_name!r}; the passes are {', '.join([*names, RESTORE_PASS])}")
    cycles = {cycle for cycle, _, _ in store.changes.cycles()}
    ran = any(o.get("cycle_id") == cycle_id for o in load_outcomes(op.profile, names).values())
    if cycle_id not in cycles and not ran and saved_report(op.profile, cycle_id) is None:
        raise NotFound(
            f"no such cycle {cycle_id!r} for agent {op.profile.agent_id}; nothing was changed "
            f"(the cycles are listed by `dream undo --profile {where} --list`)"
        )


def wait_for_cycles(store: DreamStore, wait: float) -> list[str]:
    """Wait up to ``wait`` seconds while a cycle of the agent is in progress (the undo itself refuses if one still
    is). Returns the stale markers of crashed cycles found meanwhile (removed), with why."""
    deadline = time.monotonic() + max(0.0, wait)
    stale: list[str] = []
    while True:
        running, found = store.changes.cycle_markers()
        stale += found
        if not running or time.monotonic() >= deadline:
            return stale
        time.sleep(min(1.0, max(0.0, deadline - time.monotonic())))


def _report(
    result: UndoResult,
    cycle_id: str | None,
    change_id: str | None,
    pass_name: str | None,
    force: bool,
    stale: list[str],
    files: FolderUndo | None,
    where: str,
) -> UndoReport:
    put_back = []
    for target in result.restored:
        action = result.actions.get(target)
        put_back.append(
            PutBack(target=target, kind=action.kind, detail=action.detail)
            if action
            else PutBack(target=target, kind="put back", detail="")
        )
    files_refused = list(files.refused) if files is not None else []
    report = UndoReport(
        cycle_id=cycle_id if cycle_id is not None else result.cycle_id,
        change_id=change_id,
        pass_name=pass_name,
        forced=force,
        put_back=put_back,
        already_undone=list(result.already_undone),
        not_restored=list(result.not_restored),
        refused=list(result.refused),
        left=list(result.left),
        blocked_by=list(result.blocked_by),
        files=list(files.lines) if files is not None else [],
        files_refused=files_refused,
        stale_markers=[*stale, *result.stale_markers],
        undo_cycle_id=result.undo_cycle_id if result.restored else None,
        outcome=_outcome(result, files_refused),
        summary="",
    )
    report.summary = _summary(report, result, where)
    return report


def _outcome(result: UndoResult, files_refused: list[str]) -> Literal["done", "partial", "nothing"]:
    """``done`` when the undo did something usable (put records back, or found nothing left to do), refusals under
    force listed; ``partial`` when some entries could not be restored or a file of the linked folder could not be put
    back (the folder and the store disagree until it is); ``nothing`` when nothing was undone."""
    if result.blocked_by or (result.not_restored and not result.restored) or not result.applied:
        return "nothing"
    return "partial" if result.not_restored or files_refused else "done"


def _summary(report: UndoReport, result: UndoResult, where: str) -> str:
    what = (
        f"change {report.change_id} (cycle {result.cycle_id})"
        if report.change_id
        else f"pass {report.pass_name} of cycle {report.cycle_id}"
        if report.pass_name and report.blocked_by
        else f"cycle {report.cycle_id}"
    )
    if report.blocked_by:
        later = [c for c in report.blocked_by if c != report.cycle_id or report.change_id]
        if report.change_id:
            return (
                f"undo of {what} refused: a later change of cycle(s) {', '.join(later)} built on it; nothing was "
                f"changed. Undo that first (`dream undo --profile {where} --cycle {later[-1]}`), then this change"
            )
        if later:
            return (
                f"undo of {what} refused: later cycle(s) {', '.join(later)} built on its results; nothing was "
                f"changed. Undo them first, newest first (`dream undo --profile {where} --cycle {later[-1]}`), then "
                "this cycle"
            )
        return (
            f"undo of {what} refused: a later pass of the cycle built on its results; nothing was changed. Undo that "
            "pass first, or the whole cycle"
        )
    kinds = report.kinds()
    nothing_done = result.refused and not report.forced
    refused = len(report.refused) + len(report.files_refused)
    return (
        f"undo of {what}: {len(report.put_back)} put back"
        + (f" ({', '.join(f'{n} {k}' for k, n in kinds.items())})" if kinds else "")
        + f", {len(report.already_undone)} already undone, {len(report.not_restored)} could not be restored, "
        f"{refused} refused"
        + (f" ({len(report.files_refused)} file(s) of the linked folder, named above)" if report.files_refused else "")
        + (f", {len(report.left)} left as a later cycle decayed them again" if report.left else "")
        + ("; nothing was changed (pass --force to undo the rest)" if nothing_done and not report.change_id else "")
        + ("; nothing was changed" if nothing_done and report.change_id else "")
        + (f"; recorded as cycle {report.undo_cycle_id}" if report.undo_cycle_id else "")
    )


def _with_passes(profile: AgentProfile | str | Path, options: DreamOptions | None) -> DreamOptions:
    """The options an undo of a dream cycle reads: those given, or the agent's, knowing every pass's section (an
    undone purge keeps its entry archive purge's retention longer)."""
    from dream_assets.options_loader import load_agent_options, with_passes
    from dream_assets.profile import as_profile

    return load_agent_options(as_profile(profile)) if options is None else with_passes(options)


# --- the change log -------------------------------------------------------------------------------------------------


def list_changes(
    profile: AgentProfile | str | Path, *, options: DreamOptions | None = None, now: datetime | None = None
) -> list[ChangeSetSummary]:
    """One summary per cycle and pass, oldest cycle first: real changes, how many are still undoable, and the review
    stamps apart (they are not changes and undo leaves them)."""
    op = begin(profile, options, now)
    try:
        rows = op.store().changes.by_pass()
    except StoreError as exc:
        raise StoreUnavailable(str(exc)) from exc
    return [
        ChangeSetSummary(
            cycle_id=r.cycle_id,
            pass_name=r.pass_name,
            started_at=iso(r.cycle_started_at) or "",
            changes=r.changes,
            undoable=r.undoable,
            stamps=r.stamps,
            kinds=dict(r.kinds),
        )
        for r in rows
    ]


# --- restore --------------------------------------------------------------------------------------------------------


def restore(
    profile: AgentProfile | str | Path,
    memory_id: str,
    *,
    now: datetime | None = None,
    options: DreamOptions | None = None,
    profile_arg: str | None = None,
) -> RestoreResult:
    """Put one archived memory back in the live corpus, recorded in the change log under a cycle of its own
    (``cycle_id``) that ``undo`` archives again. A live memory is left alone (``already_live``); an id the store
    never held, or one that was purged, is ``NotFound``."""
    op = begin(profile, options, now)
    memory_id = check_id(memory_id, "id")
    cycle = cycle_ids.restore(op.now, memory_id)
    store = op.store()
    try:
        with store.transaction():
            entry = store.memories.get(memory_id)
            if entry is None:
                gone = "it was purged" if memory_id in store.memories.purged_ids() else "no such id"
                raise NotFound(
                    f"no memory with id {memory_id!r} in agent {op.profile.agent_id} ({gone}); nothing restored"
                )
            if not entry.is_archived:
                return RestoreResult(id=memory_id, status="already_live", content=entry.content)
            restored = store.memories.restore(memory_id, now=op.now)
            store.changes.record(
                ChangeRow(
                    cycle_id=cycle,
                    actor=Actor.RESTORE,
                    kind="restored",
                    target_type="memory",
                    target_id=memory_id,
                    before=entry,
                    after=restored,
                    reason="restored by hand with dream restore",
                ),
                now=op.now,
            )
    except StoreError as exc:
        raise StoreUnavailable(str(exc)) from exc
    return RestoreResult(
        id=memory_id,
        status="restored",
        content=restored.content,
        cycle_id=cycle,
        undo_command=f"dream undo --profile {profile_arg or op.profile.root} --cycle {cycle}",
    )
