"""Pass 0 — log retention: cap the append-only JSONL telemetry logs (spec "Pass 0 — Log retention").

Per-session directories (skill-usage, tool-call, feedback): delete files older than ``LogRetentionMaxFileAge`` by
last-write time, cap the directory at ``LogRetentionMaxFilesPerDirectory`` (oldest first), then trim each
surviving top-level ``{sessionId}.jsonl`` to its last ``LogRetentionMaxLinesPerFile`` lines under that
session's write lock. Single-file logs keep their last ``LogRetentionMaxLinesPerFile`` lines. A non-positive
value disables its dimension; a failure on one file is reported and the sweep goes on.

Nothing leaves a log unrecorded: the lines a file is about to lose — a trimmed prefix or a whole deleted file —
are first appended to the day-partitioned warehouse, whose writes are idempotent, so a run that stops between
archiving and trimming only repeats harmless work next time. A directory's files go into one streamed warehouse write,
and each file is trimmed or deleted as soon as the parts holding its lines are written, synced and renamed into place,
while the files after it are still being archived.

How a trim stays cheap and safe against the writer: the prefix of an append-only file never changes, so the cut
is found by reading blocks backwards from the end and the prefix is archived without the lock; only the copy of
the kept tail (plus anything appended meanwhile) to a temp file and the atomic rename happen under the writer's
lock. The file's identity (device, inode) is checked under the lock; if another process replaced it meanwhile,
the file is left for the next cycle.

Hostile lines do not stop it. A line that is not a readable record (not JSON, nested too deeply, not UTF-8, the wrong
shape) is archived as raw text in the warehouse's ``date=unknown`` partition; a line longer than
``line_batch.MAX_LINE_BYTES`` cannot be archived and is removed with the rest (otherwise one runaway line would stop
retention for good). Both are counted (``lines_undated``, ``lines_unarchivable``) and named with their file and line
number in the report.

A trim or an archive killed before its rename leaves a temp file (``.<log>.<random>.tmp`` next to the log,
``.part-*.parquet.tmp`` in the warehouse). Each run deletes those last written more than ``TEMP_FILE_MIN_AGE`` ago,
long after any rewrite that could still be writing them has finished.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import ClassVar

from dream_assets.file_safety import fsync_dir
from dream_assets.model import iso
from dream_assets.options import DreamOptions, PassOptions, pass_option
from dream_assets.passes.context import PassContext
from dream_assets.passes.report import PassReport
from dream_assets.passes.spec import PassSpec
from dream_assets.profile import SESSION_LOGS, SINGLE_FILE_LOGS, AgentProfile
from dream_assets.store import line_batch, log_bytes, warehouse
from dream_assets.store.locks import path_lock
from dream_assets.store.log_bytes import (
    count_lines_between,
    file_identity,
    find_cut_offset,
    iter_lines_between,
    replace_with_tail,
)
from dream_assets.store.logs import display_path, log_files
from dream_assets.store.warehouse import RangeArchive, archive_file_ranges

PASS_NAME = "log_retention"
COUNT_KEYS = (
    "files_deleted_age",
    "files_deleted_count",
    "files_trimmed",
    "lines_trimmed",
    "lines_archived",
    "errors",
    "lines_undated",
    "lines_unarchivable",
    "temp_files_removed",
)
APPLY_THREADS = 8
log = logging.getLogger("dream_assets.passes")
#: A temp file last written longer ago than this is left over from a rewrite that was killed.
TEMP_FILE_MIN_AGE = timedelta(hours=1)

#: Receives ``(source file name, line)`` pairs and returns the warehouse rows it added.
Sink = Callable[[Iterable[tuple[str, str]]], int]


@dataclass
class _Plan:
    """One file about to lose bytes ``[0, end)``: a trim (end = the cut) or a deletion (end = its size)."""

    path: Path
    lock_path: Path
    identity: tuple[int, int]
    mtime_ns: int
    end: int
    action: str  # "trim" | "age" | "count"
    lines: int = 0
    unarchivable: int = 0  # lines removed that were too long to archive
    failed: str | None = None


def run_log_retention(profile: AgentProfile, options: DreamOptions, now: datetime) -> PassReport:
    """Apply the retention policy to every telemetry log of the profile (skipped when LogRetentionEnabled is false).
    Never raises for one log's failure."""
    from dream_assets.passes.runner import attempt

    return attempt(SPEC, PassContext(profile, options, now))


def retain_logs(ctx: PassContext) -> PassReport:
    """The pass. It reads no memories, so it runs first and unconditionally in a cycle, also when the store holds
    fewer than two memories (spec "Pass 0": the logs are capped on every cycle even when there is nothing to
    consolidate)."""
    profile, options, now = ctx.profile, ctx.options, ctx.now
    section = options.section(LogRetentionOptions)
    report = PassReport(PASS_NAME)
    for key in COUNT_KEYS:
        report.count(key, 0)
    max_lines = section.max_lines_per_file
    _sweep_temp_files(profile, now, report)

    for kind in SESSION_LOGS:
        try:
            _sweep_session_dir(profile, kind, options, now, report)
        except Exception as exc:  # best effort (spec): one log's failure does not stop the sweep
            _error(report, display_path(profile, profile.session_log_dir(kind)), exc)

    for kind in SINGLE_FILE_LOGS:
        path = profile.single_log_path(kind)
        try:
            if max_lines > 0 and path.is_file():
                plan = _plan_trim(path, profile.log_lock_path(kind), max_lines)
                if plan is not None:
                    _archive_and_apply(profile, kind, [plan], now, report)
        except Exception as exc:
            _error(report, display_path(profile, path), exc)

    c = {k: int(report.counts[k]) for k in COUNT_KEYS}
    deleted = c["files_deleted_age"] + c["files_deleted_count"]
    extra = "".join(
        f", {c[key]:,} {label}"
        for key, label in (
            ("lines_undated", "lines archived as raw text (no readable record)"),
            ("lines_unarchivable", "lines too long to archive removed"),
            ("temp_files_removed", "leftover temp files removed"),
        )
        if c[key]
    )
    return report.finish(
        f"log retention — {deleted:,} files deleted (age {c['files_deleted_age']:,}, count "
        f"{c['files_deleted_count']:,}), {c['files_trimmed']:,} files trimmed ({c['lines_trimmed']:,} lines), "
        f"{c['lines_archived']:,} lines archived to the warehouse, {c['errors']:,} errors{extra}"
    )


@dataclass(frozen=True, kw_only=True)
class LogRetentionOptions(PassOptions):
    """The options section of this pass (``[passes.log_retention]``)."""

    PASS: ClassVar[str] = "log_retention"

    enabled: bool = pass_option(True, "pass 0: cap the telemetry logs", alias="LogRetentionEnabled")
    max_file_age: timedelta = pass_option(
        timedelta(days=30),
        "per-session files older than this are deleted; non-positive disables",
        duration="any",
        alias="LogRetentionMaxFileAge",
    )
    max_files_per_directory: int = pass_option(
        1000, "per-session files kept per directory; non-positive disables", alias="LogRetentionMaxFilesPerDirectory"
    )
    max_lines_per_file: int = pass_option(
        50_000, "lines kept per log file; non-positive disables", alias="LogRetentionMaxLinesPerFile"
    )


SPEC = PassSpec(
    name=PASS_NAME,
    group="logs",
    description="Log retention — caps the telemetry logs after copying what it removes to the warehouse.\n\nPass 0. "
    "Caps the append-only telemetry logs (age, file count, lines per file), copying every line it removes into the "
    "day-partitioned Parquet log warehouse first. Runs first, every cycle.",
    body=retain_logs,
    options=LogRetentionOptions,
    reads=(
        "skill_usage_log",
        "tool_call_log",
        "feedback_log",
        "skill_resource_usage_log",
        "wisp_execution_log",
        "tier_routing_log",
    ),
)


def trim_file_to_last_lines(
    path: Path, max_lines: int, lock_path: Path, *, archive: Callable[[Iterable[str]], None] | None = None
) -> int:
    """Keep the last ``max_lines`` complete lines of ``path``; returns the lines removed (0 when disabled).

    ``archive`` first receives the lines about to be removed, streamed; if it raises, the file is not touched.
    ``lock_path`` is the lock the file's writers hold. A final line without a newline is never split.
    """
    path = Path(path)
    if max_lines <= 0 or not path.is_file():
        return 0
    plan = _plan_trim(path, lock_path, max_lines)
    if plan is None:
        return 0
    if archive is None:
        plan.lines = count_lines_between(path, 0, plan.end)
    else:

        def sink(pairs: Iterable[tuple[str, str]]) -> int:
            archive(line for _, line in pairs)
            return 0

        _archive([plan], sink)
        if plan.failed:
            raise OSError(f"{path}: {plan.failed}")
        if plan.unarchivable:
            log.warning(
                "%s: %d line(s) longer than %d bytes removed without archiving",
                path,
                plan.unarchivable,
                line_batch.MAX_LINE_BYTES,
            )
    return plan.lines if _apply_one(plan) else 0


# --- per-session directories -------------------------------------------------------------------------------


def _sweep_session_dir(
    profile: AgentProfile, kind: str, options: DreamOptions, now: datetime, report: PassReport
) -> None:
    section = options.section(LogRetentionOptions)
    files = []
    for path in log_files(profile, kind):  # top-level {sessionId}.jsonl only; sub-directories are not swept
        try:
            files.append((path, os.stat(path)))
        except FileNotFoundError:
            continue

    def plan(path: Path, st: os.stat_result, action: str, end: int) -> _Plan:
        return _Plan(path, profile.log_lock_path(kind, path.stem), file_identity(st), st.st_mtime_ns, end, action)

    doomed: list[_Plan] = []
    max_age = section.max_file_age
    if max_age.total_seconds() > 0:
        cutoff_ns = int((now - max_age).timestamp() * 1e9)
        doomed += [plan(p, st, "age", st.st_size) for p, st in files if st.st_mtime_ns < cutoff_ns]
        files = [(p, st) for p, st in files if st.st_mtime_ns >= cutoff_ns]
    max_files = section.max_files_per_directory
    if 0 < max_files < len(files):
        files.sort(key=lambda f: (f[1].st_mtime_ns, f[0].name))  # oldest last-write first
        excess = len(files) - max_files
        doomed += [plan(p, st, "count", st.st_size) for p, st in files[:excess]]
        files = files[excess:]

    trims: list[_Plan] = []
    if section.max_lines_per_file > 0:
        for path, _ in files:
            try:
                trim = _plan_trim(path, profile.log_lock_path(kind, path.stem), section.max_lines_per_file)
            except FileNotFoundError:
                continue
            except OSError as exc:
                _error(report, display_path(profile, path), exc)
                continue
            if trim is not None:
                trims.append(trim)

    plans = doomed + trims
    if not plans:
        return
    # One streamed warehouse write for the whole directory: thousands of files cost one set of part files.
    _archive_and_apply(profile, kind, plans, now, report)


# --- planning, archiving, applying -------------------------------------------------------------------------


def _plan_trim(path: Path, lock_path: Path, max_lines: int) -> _Plan | None:
    st = os.stat(path)
    cut = find_cut_offset(path, max_lines)
    if cut == 0:
        return None
    return _Plan(path, lock_path, file_identity(st), st.st_mtime_ns, cut, "trim")


def _archive_and_apply(profile: AgentProfile, kind: str, plans: list[_Plan], now: datetime, report: PassReport) -> None:
    """Archive every plan's doomed byte range [0, end) in one streamed warehouse write (the bulk path), and apply
    each plan as soon as its lines are in the warehouse, while the rest are still being archived (the removals wait on
    locks, syncs and the file system, the archive on the processor). If the warehouse write fails, the plans already
    applied are reported as done and the others are left as they were."""
    applier = _Applier(plans)
    try:
        report.count("lines_archived", _archive_ranges(profile, kind, plans, now, report, applier.release))
    finally:
        _report_applied(profile, plans, applier.wait(), report)


def _archive_ranges(
    profile: AgentProfile,
    kind: str,
    plans: list[_Plan],
    now: datetime,
    report: PassReport,
    on_archived: Callable[[int], None] | None = None,
) -> int:
    """Archive every plan's doomed byte range [0, end) in one streamed warehouse write; ``on_archived(k)`` is called
    once the first ``k`` plans' lines are in the warehouse (their counts set). A file that cannot be read is marked
    failed, and is then neither trimmed nor deleted. Lines archived as raw text and lines too long to archive are
    counted and named in the report."""
    counted = 0

    def archived(k: int, result: RangeArchive) -> None:
        nonlocal counted
        for i in range(counted, k):
            plan, error = plans[i], result.errors[i]
            plan.lines, plan.unarchivable = result.lines[i], result.unarchivable[i]
            if error is not None:
                plan.failed = f"could not be read for archiving ({error.strerror or error})"
        counted = max(counted, k)
        if on_archived is not None:
            on_archived(counted)

    result = archive_file_ranges(profile, kind, [(p.path, 0, p.end) for p in plans], now, on_archived=archived)
    unarchivable = sum(result.unarchivable)
    report.count("lines_undated", result.undated)
    report.count("lines_unarchivable", unarchivable)
    if result.problems:
        where = {plan.path.name: display_path(profile, plan.path) for plan in plans}
        shown = "; ".join(
            f"{where.get(source, source)}:{lineno}: {reason}" for source, lineno, reason in result.problems[:5]
        )
        more = len(result.problems) - 5 if len(result.problems) > 5 else 0
        message = (
            f"{kind}: {result.undated:,} line(s) that are not readable records were archived as raw text "
            f"(warehouse date=unknown) and {unarchivable:,} line(s) too long to archive were removed: {shown}"
            + (f" … and more ({more}+ not shown)" if more else "")
        )
        (report.warn if unarchivable else report.info)(message)
    return result.added


def _archive(plans: list[_Plan], sink: Sink) -> int:
    """Stream every plan's doomed lines to the sink; a file that cannot be read is marked failed, not applied. A line
    too long to archive is not streamed, and is counted on its plan."""

    def pairs() -> Iterator[tuple[str, str]]:
        for plan in plans:

            def oversized(lineno: int, size: int, plan: _Plan = plan) -> None:
                plan.lines += 1
                plan.unarchivable += 1

            try:
                for line in iter_lines_between(plan.path, 0, plan.end, on_oversized=oversized):
                    plan.lines += 1
                    yield plan.path.name, line
            except OSError as exc:
                plan.failed = f"could not be read for archiving ({exc.strerror or exc})"

    return sink(pairs())


def _sweep_temp_files(profile: AgentProfile, now: datetime, report: PassReport) -> None:
    """Delete the temp files of rewrites that were killed before their rename (logs and warehouse)."""
    cutoff_ns = int((now - TEMP_FILE_MIN_AGE).timestamp() * 1e9)
    for path in [*log_bytes.temp_files(profile), *warehouse.temp_files(profile)]:
        where = display_path(profile, path)
        try:
            st = os.stat(path)
            if st.st_mtime_ns >= cutoff_ns:
                continue  # recent: a rewrite may still be writing it
            path.unlink()
        except FileNotFoundError:
            continue
        except OSError as exc:
            _error(report, where, exc)
            continue
        report.count("temp_files_removed")
        last = iso(datetime.fromtimestamp(st.st_mtime_ns / 1e9, UTC))
        report.change(
            "temp-removed",
            where,
            f"left by an interrupted rewrite (last written {last}, {st.st_size:,} bytes)",
        )


class _Applier:
    """Applies plans on a few threads as they are released, in order: each file waits on its own lock and sync, and
    the threads overlap those waits (10,000 session files). A release hands each thread every ``APPLY_THREADS``-th
    plan of it at once, so the trims (each with a sync) are spread over all of them."""

    def __init__(self, plans: list[_Plan]) -> None:
        self.plans = plans
        self.outcomes: list[bool | str | Exception | None] = [None] * len(plans)  # None: not applied
        self.released = 0
        self.pool = ThreadPoolExecutor(max_workers=APPLY_THREADS, thread_name_prefix="retention-apply")

    def release(self, k: int) -> None:
        """Apply plans up to the ``k``-th (their lines are archived)."""
        first, self.released = self.released, max(self.released, k)
        for t in range(APPLY_THREADS):
            share = range(first + t, self.released, APPLY_THREADS)
            if share:
                self.pool.submit(self._apply_share, share)

    def _apply_share(self, share: range) -> None:
        for i in share:
            self.outcomes[i] = _attempt(self.plans[i])

    def wait(self) -> list[bool | str | Exception | None]:
        """Every released plan's outcome, once all are applied."""
        self.pool.shutdown(wait=True)
        return self.outcomes


def _report_applied(
    profile: AgentProfile, plans: list[_Plan], outcomes: list[bool | str | Exception | None], report: PassReport
) -> None:
    folders: dict[Path, str] = {}
    for plan, outcome in zip(plans, outcomes, strict=True):
        if outcome is None:
            continue  # not applied: its archive did not complete (reported by the caller)
        folder = folders.get(plan.path.parent)
        if folder is None:
            folder = folders[plan.path.parent] = display_path(profile, plan.path.parent)
        where = f"{folder}/{plan.path.name}"
        if isinstance(outcome, str | Exception):
            _error(report, where, outcome)
        elif not outcome:
            report.info(f"{where} changed while it was being swept; it is left for the next cycle")
        elif plan.action == "trim":
            report.count("files_trimmed")
            report.count("lines_trimmed", plan.lines)
            report.change("log-trimmed", where, f"{plan.lines:,} oldest lines removed after archiving")
        else:
            report.count(f"files_deleted_{plan.action}")
            if plan.action == "age":
                last = iso(datetime.fromtimestamp(plan.mtime_ns / 1e9, UTC))
                why = f"last written {last}, older than LogRetentionMaxFileAge"
            else:
                why = "among the oldest beyond LogRetentionMaxFilesPerDirectory"
            report.change("log-deleted", where, f"{why}; {plan.lines:,} lines archived first")
    for folder in {plan.path.parent for plan, outcome in zip(plans, outcomes, strict=True) if outcome is True}:
        fsync_dir(folder)


def _attempt(plan: _Plan) -> bool | str | Exception:
    if plan.failed:
        return plan.failed
    try:
        return _apply_one(plan, sync_dir=False)
    except Exception as exc:
        return exc


def _apply_one(plan: _Plan, *, sync_dir: bool = True) -> bool:
    """Under the writer's lock: trim or delete, if the file is still the one that was planned and archived."""
    with path_lock(plan.lock_path):
        try:
            st = os.stat(plan.path)
        except FileNotFoundError:
            return False
        if file_identity(st) != plan.identity:
            return False
        if plan.action == "trim":
            if st.st_size < plan.end:
                return False
            replace_with_tail(plan.path, plan.end, sync_dir=sync_dir)
        else:
            # Written since it was selected: no longer old, nor the oldest, and the new lines are not archived.
            if st.st_size != plan.end or st.st_mtime_ns != plan.mtime_ns:
                return False
            plan.path.unlink()
            if sync_dir:
                fsync_dir(plan.path.parent)
    return True


def _error(report: PassReport, where: str, exc: Exception | str) -> None:
    report.count("errors")
    report.warn(f"could not process {where}: {exc}; it is left as it was and retried next cycle")
