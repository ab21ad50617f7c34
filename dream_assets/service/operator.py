"""An operator's operations on one agent's store: the report of a cycle, an import of historical logs into the
warehouse, and a rebuild of a damaged store from its newest snapshot."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from pathlib import Path

from pydantic import Field

from dream_assets.calls import CycleReportText, InvalidInput, NotFound, Refused, Result, StoreUnavailable
from dream_assets.options import DreamOptions
from dream_assets.profile import AgentProfile
from dream_assets.service._common import begin, check_id
from dream_assets.store.connection import StoreError

# --- the report of a cycle ------------------------------------------------------------------------------------------


def report(
    profile: AgentProfile | str | Path,
    *,
    cycle_id: str | None = None,
    options: DreamOptions | None = None,
    now: datetime | None = None,
    profile_arg: str | None = None,
) -> CycleReportText:
    """The report of the last cycle (or ``cycle_id``): what it changed, rejected and why, its model calls and how to
    undo it. ``cycle_id`` None in the result: no cycle has run yet. ``NotFound`` for a cycle the agent never ran.
    Changes waiting for review past ``ReviewExpiryDays`` are closed as expired first, so the report shows them so."""
    from dream_assets.cycle_report import build_cycle_report, latest_cycle_id, saved_report
    from dream_assets.passes.registry import PASSES
    from dream_assets.passes.review import expire

    op = begin(profile, options, now)
    if cycle_id is not None:
        cycle_id = check_id(cycle_id, "cycle_id")
    where = profile_arg or str(op.profile.root)
    names = [p.name for p in PASSES]
    store = op.store()
    try:
        expire(store, op.now)  # a change set past ReviewExpiryDays shows as expired
        cycle = cycle_id or latest_cycle_id(op.profile, names)
        if cycle is None:
            return CycleReportText(
                cycle_id=None, markdown=f"No dream cycle has run for agent {op.profile.agent_id} yet."
            )
        built = build_cycle_report(op.profile, store, cycle, names, profile_arg=where)
    except StoreError as exc:
        raise StoreUnavailable(str(exc)) from exc
    if not built.passes:
        saved = saved_report(op.profile, cycle)
        if saved is not None:
            return CycleReportText(cycle_id=cycle, markdown=saved.read_text(encoding="utf-8"))
        if not built.undoable:
            raise NotFound(
                f"no cycle {cycle!r} for agent {op.profile.agent_id}: no pass record, saved report or change of it "
                f"(see `dream undo --profile {where} --list`)"
            )
    return CycleReportText(cycle_id=cycle, markdown=built.markdown())


# --- historical logs ------------------------------------------------------------------------------------------------


class FileImport(Result):
    path: str
    imported: int = Field(description="new lines in the warehouse")
    already_there: int
    malformed: int = Field(description="not a record of any log kind")
    wrong_kind: int = Field(description="a valid record of another log kind")
    other_kinds: dict[str, int] = Field(default_factory=dict)
    problems: list[str] = Field(default_factory=list, description="'<file>:<line>: <reason>' of the first few")
    more_problems: int = Field(0, description="lines not imported beyond those named in problems")


class LogImport(Result):
    kind: str
    files: list[FileImport]
    imported: int
    already_there: int
    malformed: int
    wrong_kind: int
    likely_kind: str | None = Field(None, description="the kind most lines are records of, when it is another")
    error: str | None = Field(None, description="a file that could not be read: the files after it were not imported")


def import_logs(
    profile: AgentProfile | str | Path,
    kind: str,
    files: Sequence[str | Path],
    *,
    options: DreamOptions | None = None,
    now: datetime | None = None,
) -> LogImport:
    """Load historical JSONL logs of ``kind`` into the warehouse (backfills). Only valid records of ``kind`` are
    imported; other lines are counted and the first named. ``InvalidInput`` (nothing imported) for an unknown kind
    or a file that is missing; a file that cannot be read midway is named in ``error``."""
    from dream_assets.store.warehouse import ImportResult, WarehouseError, check_import_kind, import_jsonl

    op = begin(profile, options, now)
    try:
        check_import_kind(kind)
        for path in map(Path, files):
            if not path.is_file():
                raise WarehouseError(f"cannot import {path}: {'not a file' if path.exists() else 'no such file'}")
    except WarehouseError as exc:
        raise InvalidInput(str(exc)) from exc
    total = ImportResult()
    done: list[FileImport] = []
    error = None
    for path in files:
        try:
            r = import_jsonl(op.profile, kind, Path(path), op.now)
        except WarehouseError as exc:
            error = str(exc)
            break
        done.append(
            FileImport(
                path=str(path),
                imported=r.imported,
                already_there=r.already_there,
                malformed=r.malformed,
                wrong_kind=r.wrong_kind,
                other_kinds=dict(sorted(r.other_kinds.items())),
                problems=list(r.problems),
                more_problems=max(0, r.malformed + r.wrong_kind - len(r.problems)),
            )
        )
        total.imported += r.imported
        total.valid += r.valid
        total.malformed += r.malformed
        total.wrong_kind += r.wrong_kind
        for other, n in r.other_kinds.items():
            total.other_kinds[other] = total.other_kinds.get(other, 0) + n
    likely = None
    if total.other_kinds and total.wrong_kind > total.valid:
        likely = max(total.other_kinds, key=lambda k: total.other_kinds[k])
    return LogImport(
        kind=kind,
        files=done,
        imported=total.imported,
        already_there=total.already_there,
        malformed=total.malformed,
        wrong_kind=total.wrong_kind,
        likely_kind=likely,
        error=error,
    )


# --- rebuild --------------------------------------------------------------------------------------------------------


class RebuildReport(Result):
    store: str = Field(description="the store file rebuilt")
    snapshot: str = Field(description="the snapshot folder it was rebuilt from")
    memories_live: int
    memories_archived: int
    skills: int
    purges: int = Field(description="purge records carried over")
    damaged_aside: str | None = Field(None, description="where the damaged store now is (never overwritten)")


def rebuild(
    profile: AgentProfile | str | Path,
    *,
    snapshot: str | Path | None = None,
    force: bool = False,
    options: DreamOptions | None = None,
    now: datetime | None = None,
) -> RebuildReport:
    """A fresh store from the newest snapshot (or ``snapshot``); the damaged file is moved aside, never overwritten.
    Changes after the snapshot are lost and the change log starts empty. ``Refused`` (nothing changed) for a store
    that is readable (unless ``force``) or a snapshot that is not usable."""
    from dream_assets.store.rebuild import RebuildError, rebuild_store

    op = begin(profile, options, now)
    try:
        result = rebuild_store(
            op.profile, op.now, snapshot=Path(snapshot) if snapshot else None, options=op.options, force=force
        )
    except RebuildError as exc:
        raise Refused(str(exc)) from exc
    return RebuildReport(
        store=str(op.profile.store_path),
        snapshot=str(result.snapshot),
        memories_live=result.memories_live,
        memories_archived=result.memories_archived,
        skills=result.skills,
        purges=result.purges,
        damaged_aside=str(result.damaged_aside) if result.damaged_aside is not None else None,
    )
