"""Telemetry and conversation logs: appending a record, reading records back, and clearing the conversation log.

On-disk shapes (spec "Pass 0 — Log retention"; paths only via ``AgentProfile``): per-session directories
``logs/<kind>/{sessionId}.jsonl`` for skill-usage, tool-call and feedback; single append-only files
``logs/skill-resource-usage.jsonl``, ``logs/wisp-executions.jsonl``, ``logs/tier-routing.jsonl``; and
``conversation-log.jsonl`` at the profile root. One JSON object per line, UTF-8, camelCase keys, and an
ISO-8601 UTC ``timestamp`` on every record. The records are the models of ``log_records``; the byte-level file
primitives are in ``log_bytes``. docs/log-formats.md documents the schemas for agent authors.

Every writer holds the log's lock (``profile.log_lock_path``) while it appends one whole line; retention and
the conversation clear hold the same lock while they replace a file, so no append is ever lost to a rewrite.

Readers never raise for what a line holds. A line that is not a record — not UTF-8, not JSON, nested deeper than
``line_batch.MAX_NESTING``, longer than ``line_batch.MAX_LINE_BYTES`` (never read whole), a JSON value of the wrong
type, a number that is not finite, text with an unpaired surrogate escape such as ``"\\ud800"`` (it could not be sent
to a model or written anywhere as UTF-8) — is malformed: skipped, counted, and named with its file and line number.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

from dream_assets.model import utc
from dream_assets.names import validate_session_id
from dream_assets.profile import SESSION_LOGS, AgentProfile, as_profile
from dream_assets.store import warehouse
from dream_assets.store.line_batch import MalformedLine
from dream_assets.store.locks import path_lock
from dream_assets.store.log_bytes import (
    Oversized,
    file_identity,
    find_cut_offset,
    raw_lines,
    replace_with_tail,
)
from dream_assets.store.log_records import (
    CONVERSATION,
    ConversationTurn,
    LogRecord,
    parse_record,
    parse_text,
    record_class,
)
from dream_assets.store.warehouse import RangeArchive, archive_file_ranges

MAX_PROBLEMS = 20


# --- writing ---------------------------------------------------------------------------------------------------


def append_event(
    profile: AgentProfile | str | Path,
    kind: str | LogRecord,
    event: LogRecord | None = None,
    *,
    fsync: bool = False,
) -> None:
    """Append one record as one complete line, under the lock log retention also takes. The log is the record's
    own (``append_event(profile, FeedbackEvent(...))``); naming it as well (``append_event(profile, "feedback",
    record)``) checks the record is of that log. A record built without a ``timestamp`` carries the current UTC time."""
    profile = as_profile(profile)
    if isinstance(kind, LogRecord):
        if event is not None:
            raise TypeError("append_event takes the record once: append_event(profile, record)")
        kind, event = kind.log_kind, kind
    if event is None:
        raise TypeError(f"append_event(profile, {kind!r}) needs the record to append")
    cls = record_class(kind)
    if not isinstance(event, cls):
        raise TypeError(f"a {kind} log takes {cls.__name__} records, got {type(event).__name__}")
    # What is written must read back: the round trip applies every field rule to records built in code.
    record = cls.from_json(event.to_json()).to_json()
    session_id = getattr(event, "session_id", None)
    if session_id is not None:
        validate_session_id(session_id)
    if kind in SESSION_LOGS:
        path, lock = profile.session_log_path(kind, session_id), profile.log_lock_path(kind, session_id)
    else:
        path, lock = _single_path(profile, kind), profile.log_lock_path(kind)
    line = json.dumps(record, ensure_ascii=False, allow_nan=False, separators=(",", ":"))
    data = (line + "\n").encode("utf-8")
    path.parent.mkdir(parents=True, exist_ok=True)
    with path_lock(lock):
        fd = os.open(path, os.O_RDWR | os.O_APPEND | os.O_CREAT, 0o644)
        try:
            # A final line without a newline (a writer that crashed mid-line) must not swallow this record.
            size = os.fstat(fd).st_size
            if size and os.pread(fd, 1, size - 1) != b"\n":
                data = b"\n" + data
            written = os.write(fd, data)
            while written < len(data):  # a short write is rare, but the line must be whole
                written += os.write(fd, data[written:])
            if fsync:
                os.fsync(fd)
        finally:
            os.close(fd)


def _single_path(profile: AgentProfile, kind: str) -> Path:
    return profile.conversation_log_path if kind == CONVERSATION else profile.single_log_path(kind)


# --- reading ---------------------------------------------------------------------------------------------------


@dataclass
class LogRead:
    events: list[Any] = field(default_factory=list)
    malformed: int = 0
    problems: list[str] = field(default_factory=list)  # "<file>:<line>: <reason>", the first MAX_PROBLEMS


def log_files(profile: AgentProfile, kind: str) -> list[Path]:
    """The files of a log: top-level ``*.jsonl`` of a per-session directory, or the one file if it exists."""
    record_class(kind)
    if kind in SESSION_LOGS:
        folder = profile.session_log_dir(kind)
        if not folder.is_dir():
            return []
        return sorted(Path(e.path) for e in os.scandir(folder) if e.name.endswith(".jsonl") and e.is_file())
    path = _single_path(profile, kind)
    return [path] if path.is_file() else []


def log_exists(profile: AgentProfile, kind: str) -> bool:
    """Whether the optional input is present: the file exists, or the directory holds at least one log file."""
    return bool(log_files(profile, kind))


def read_events(
    profile: AgentProfile, kind: str, *, since: datetime | None = None, until: datetime | None = None
) -> LogRead:
    """Every valid record of a log with ``since <= timestamp < until``, sorted by (timestamp, file, line).

    Malformed lines are skipped and counted, never fatal; a missing log is an empty read.
    """
    return _read(profile, kind, log_files(profile, kind), since, until)


def read_session(profile: AgentProfile, kind: str, session_id: str) -> LogRead:
    """The records of one session: its own file for per-session logs, else the records carrying its id."""
    if kind in SESSION_LOGS:
        path = profile.session_log_path(kind, session_id)
        return _read(profile, kind, [path] if path.is_file() else [], None, None)
    result = read_events(profile, kind)
    result.events = [e for e in result.events if getattr(e, "session_id", None) == session_id]
    return result


def read_archived(profile: AgentProfile, kind: str, since: datetime, until: datetime) -> LogRead:
    """The records of ``kind`` the log warehouse holds with ``since <= timestamp < until``, sorted by time, read by
    the same rules as the live log: an archived line that is not a valid record is malformed (skipped, counted, and
    named by its warehouse partition and source file), never an exception."""
    cls = record_class(kind)
    result = LogRead()
    for source, raw in warehouse.read_window_lines(profile, kind, since, until):
        file_session = source[: -len(".jsonl")] if kind in SESSION_LOGS and source.endswith(".jsonl") else None
        try:
            result.events.append(parse_text(cls, raw, file_session))
        except MalformedLine as exc:
            result.malformed += 1
            if len(result.problems) < MAX_PROBLEMS:
                result.problems.append(f"warehouse/{kind} ({source}): {exc}")
    result.events.sort(key=lambda e: e.timestamp)
    return result


def conversation_by_session(profile: AgentProfile) -> tuple[dict[str, list[ConversationTurn]], LogRead]:
    """Conversation turns grouped by session, sessions in first-seen (time) order."""
    result = read_events(profile, CONVERSATION)
    sessions: dict[str, list[ConversationTurn]] = {}
    for turn in result.events:
        sessions.setdefault(turn.session_id, []).append(turn)
    return sessions, result


def _read(
    profile: AgentProfile, kind: str, files: list[Path], since: datetime | None, until: datetime | None
) -> LogRead:
    cls = record_class(kind)
    since = utc(since) if since else None
    until = utc(until) if until else None
    result = LogRead()
    rows: list[tuple[datetime, str, int, Any]] = []

    def problem(where: str, reason: str) -> None:
        if len(result.problems) < MAX_PROBLEMS:
            result.problems.append(f"{where}: {reason}")

    for path in files:
        where = display_path(profile, path)
        try:
            for lineno, raw in enumerate(raw_lines(path, 0, None), start=1):
                if isinstance(raw, Oversized):
                    result.malformed += 1
                    problem(f"{where}:{lineno}", raw.reason)
                    continue
                if not raw.strip():
                    continue
                try:
                    event = parse_record(cls, raw, path.stem if kind in SESSION_LOGS else None)
                except MalformedLine as exc:
                    result.malformed += 1
                    problem(f"{where}:{lineno}", str(exc))
                    continue
                if (since is None or event.timestamp >= since) and (until is None or event.timestamp < until):
                    rows.append((event.timestamp, where, lineno, event))
        except OSError as exc:
            problem(where, f"could not be read ({exc.strerror or exc})")
    rows.sort(key=lambda r: r[:3])
    result.events = [r[3] for r in rows]
    return result


def display_path(profile: AgentProfile, path: Path) -> str:
    """A log file as people read it in problems and reports: relative to the profile root."""
    try:
        return path.relative_to(profile.root).as_posix()
    except ValueError:
        return str(path)


class ConversationLogChanged(RuntimeError):
    """The conversation log was rewritten since it was read, so the bytes to clear are no longer the ones read."""


def clear_conversation_log(
    profile: AgentProfile,
    now: datetime,
    *,
    upto: int | None = None,
    identity: tuple[int, int] | None = None,
    problems: list[str] | None = None,
) -> int:
    """Move the conversation log's complete lines to the warehouse, then remove them. Returns the lines moved.

    With ``upto`` (a byte offset at a line boundary, e.g. what a pass read) only ``[0, upto)`` is moved, so turns
    appended since stay for the next cycle; with ``identity`` (``file_identity`` of the file that was read) a file
    rewritten meanwhile raises ``ConversationLogChanged`` and nothing is removed. Both steps happen under the
    conversation lock, so a turn appended meanwhile waits; if archiving fails nothing is removed. A final line still
    being written is left in place.

    A line that is not a record is archived as raw text; a line longer than ``line_batch.MAX_LINE_BYTES`` cannot be
    archived and is removed all the same (the log must not grow without bound). ``problems``, when given, receives
    one "<file>:<line>: <what happened>" entry for each such line (the first ``MAX_PROBLEMS``).
    """
    path = profile.conversation_log_path
    with path_lock(profile.log_lock_path(CONVERSATION)):
        if not path.is_file():
            return 0
        if upto is None:
            cut = find_cut_offset(path, 0)
        else:
            st = path.stat()
            if (identity is not None and file_identity(st) != identity) or st.st_size < upto:
                raise ConversationLogChanged(f"{path.name} was rewritten since it was read")
            cut = upto
        if cut == 0:
            return 0
        result: RangeArchive = archive_file_ranges(profile, CONVERSATION, [(path, 0, cut)], now)
        if result.errors[0] is not None:
            raise result.errors[0]
        if problems is not None:
            where = display_path(profile, path)
            problems.extend(f"{where}:{lineno}: {reason}" for _, lineno, reason in result.problems)
        replace_with_tail(path, cut)
        return result.lines[0]
