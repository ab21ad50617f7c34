"""Telemetry and conversation logs: record schemas, the writer, readers, and the byte-level file primitives
log retention and the conversation clear share.

On-disk shapes (spec "Pass 0 — Log retention"; paths only via ``AgentProfile``): per-session directories
``logs/<kind>/{sessionId}.jsonl`` for skill-usage, tool-call and feedback; single append-only files
``logs/skill-resource-usage.jsonl``, ``logs/wisp-executions.jsonl``, ``logs/tier-routing.jsonl``; and
``conversation-log.jsonl`` at the profile root. One JSON object per line, UTF-8, camelCase keys, and an
ISO-8601 UTC ``timestamp`` on every record. docs/log-formats.md documents the schemas for agent authors.

Every writer holds the log's lock (``profile.log_lock_path``) while it appends one whole line; retention and
the conversation clear hold the same lock while they replace a file, so no append is ever lost to a rewrite.

Readers never raise for what a line holds. A line that is not a record — not UTF-8, not JSON, nested deeper than
``line_batch.MAX_NESTING``, longer than ``line_batch.MAX_LINE_BYTES`` (never read whole), a JSON value of the wrong
type, a number that is not finite, text with an unpaired surrogate escape such as ``"\\ud800"`` (it could not be sent
to a model or written anywhere as UTF-8) — is malformed: skipped, counted, and named with its file and line number.
"""

from __future__ import annotations

import json
import math
import os
import re
import shutil
import stat
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any, Self

from dream_assets.model import iso, parse_ts, utc
from dream_assets.names import validate_session_id
from dream_assets.profile import SESSION_LOGS, AgentProfile
from dream_assets.store import line_batch, warehouse
from dream_assets.store.line_batch import MalformedLine, parse_json_line, read_line_blocks
from dream_assets.store.locks import path_lock
from dream_assets.store.warehouse import RangeArchive, archive_file_ranges

CONVERSATION = "conversation"
MAX_PROBLEMS = 20
_BLOCK = 1 << 20

SKILL_ACTIONS = ("recalled", "invoked", "loaded")
FEEDBACK_KINDS = ("Correction", "SessionSummary", "Positive", "Negative", "Note")
RATINGS = ("poor", "fair", "good", "excellent")
TIER_OUTCOMES = ("success", "failure", "escalated")
ROLES = ("user", "assistant", "tool")


# --- field readers: each error names the field and what is accepted ----------------------------------------


def _object(d: Any) -> dict[str, Any]:
    if not isinstance(d, dict):
        raise ValueError(f"a record must be a JSON object, got {type(d).__name__}")
    return d


def _timestamp(d: dict[str, Any]) -> datetime:
    value = d.get("timestamp")
    if value is None:
        raise ValueError("field 'timestamp' is missing: add an ISO-8601 UTC time such as 2024-05-01T12:00:00Z")
    try:
        return parse_ts(value)
    except (ValueError, TypeError, OverflowError):
        raise ValueError(
            f"field 'timestamp' is {value!r}, not an ISO-8601 time: write e.g. 2024-05-01T12:00:00Z"
        ) from None


def _text(d: dict[str, Any], key: str, *, optional: bool = False, nonempty: bool = False) -> Any:
    value = d.get(key)
    if value is None:
        if optional:
            return None
        raise ValueError(f"field '{key}' is missing: it must be a {'non-empty ' if nonempty else ''}string")
    if not isinstance(value, str) or (nonempty and not value.strip()):
        raise ValueError(f"field '{key}' must be a {'non-empty ' if nonempty else ''}string, got {value!r}")
    return value


def _choice(
    d: dict[str, Any],
    key: str,
    choices: tuple[str, ...],
    *,
    default: str | None = None,
    optional: bool = False,
) -> Any:
    """Accepted in any letter case and stored in the documented spelling."""
    value = d.get(key)
    if value is None:
        if default is not None or optional:
            return default
        raise ValueError(f"field '{key}' is missing: use one of {', '.join(choices)}")
    for choice in choices:
        if isinstance(value, str) and value.lower() == choice.lower():
            return choice
    raise ValueError(f"field '{key}' is {value!r}: use one of {', '.join(choices)}")


def _flag(d: dict[str, Any], key: str) -> bool:
    value = d.get(key)
    if not isinstance(value, bool):
        raise ValueError(f"field '{key}' must be true or false, got {value!r}")
    return value


def _number(d: dict[str, Any], key: str) -> float | None:
    value = d.get(key)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ValueError(f"field '{key}' must be a number or null, got {value!r}")
    try:
        number = float(value)
    except OverflowError:
        number = math.inf
    if not math.isfinite(number):
        raise ValueError(f"field '{key}' must be a finite number or null, got {str(value)[:40]}")
    return number


def _texts(d: dict[str, Any], key: str) -> list[str]:
    value = d.get(key)
    if value is None:
        return []
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise ValueError(f"field '{key}' must be a list of strings, got {value!r}")
    return list(value)


class _Record:
    """Timestamps are normalised to aware UTC however the record was built."""

    timestamp: datetime

    def __post_init__(self) -> None:
        object.__setattr__(self, "timestamp", utc(self.timestamp))


# --- record schemas ------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class SkillUsageEvent(_Record):
    timestamp: datetime
    session_id: str
    skill_name: str
    action: str = "invoked"

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> Self:
        d = _object(d)
        return cls(
            timestamp=_timestamp(d),
            session_id=_text(d, "sessionId", nonempty=True),
            skill_name=_text(d, "skillName", nonempty=True),
            action=_choice(d, "action", SKILL_ACTIONS, default="invoked"),
        )

    def to_json(self) -> dict[str, Any]:
        return {
            "timestamp": iso(self.timestamp),
            "sessionId": self.session_id,
            "skillName": self.skill_name,
            "action": self.action,
        }


@dataclass(frozen=True)
class ToolCallEvent(_Record):
    timestamp: datetime
    session_id: str
    tool: str
    success: bool
    error: str | None = None
    duration_ms: float | None = None
    skill_name: str | None = None

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> Self:
        d = _object(d)
        return cls(
            timestamp=_timestamp(d),
            session_id=_text(d, "sessionId", nonempty=True),
            tool=_text(d, "tool", nonempty=True),
            success=_flag(d, "success"),
            error=_text(d, "error", optional=True),
            duration_ms=_number(d, "durationMs"),
            skill_name=_text(d, "skillName", optional=True),
        )

    def to_json(self) -> dict[str, Any]:
        return {
            "timestamp": iso(self.timestamp),
            "sessionId": self.session_id,
            "tool": self.tool,
            "success": self.success,
            "error": self.error,
            "durationMs": self.duration_ms,
            "skillName": self.skill_name,
        }


@dataclass(frozen=True)
class FeedbackEvent(_Record):
    timestamp: datetime
    session_id: str
    kind: str
    text: str
    rating: str | None = None
    domain: str | None = None
    skill_names: list[str] = field(default_factory=list)

    def __post_init__(self) -> None:
        super().__post_init__()
        # Skill optimization reads "SessionSummary rated poor or fair" (spec "Pass 4"): a summary needs a rating.
        if self.kind == "SessionSummary" and self.rating is None:
            raise ValueError("field 'rating' is required for a SessionSummary: use one of " + ", ".join(RATINGS))

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> Self:
        d = _object(d)
        return cls(
            timestamp=_timestamp(d),
            session_id=_text(d, "sessionId", nonempty=True),
            kind=_choice(d, "kind", FEEDBACK_KINDS),
            text=_text(d, "text"),
            rating=_choice(d, "rating", RATINGS, optional=True),
            domain=_text(d, "domain", optional=True),
            skill_names=_texts(d, "skillNames"),
        )

    def to_json(self) -> dict[str, Any]:
        return {
            "timestamp": iso(self.timestamp),
            "sessionId": self.session_id,
            "kind": self.kind,
            "text": self.text,
            "rating": self.rating,
            "domain": self.domain,
            "skillNames": list(self.skill_names),
        }


@dataclass(frozen=True)
class SkillResourceUsageEvent(_Record):
    timestamp: datetime
    session_id: str
    skill_name: str
    resource: str

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> Self:
        d = _object(d)
        return cls(
            timestamp=_timestamp(d),
            session_id=_text(d, "sessionId", nonempty=True),
            skill_name=_text(d, "skillName", nonempty=True),
            resource=_text(d, "resource", nonempty=True),
        )

    def to_json(self) -> dict[str, Any]:
        return {
            "timestamp": iso(self.timestamp),
            "sessionId": self.session_id,
            "skillName": self.skill_name,
            "resource": self.resource,
        }


@dataclass(frozen=True)
class WispExecutionEvent(_Record):
    timestamp: datetime
    wisp_id: str
    description: str
    success: bool
    skill_name: str | None = None  # the skill that produced the wisp definition
    failed_step: str | None = None
    error: str | None = None
    steps: list[str] = field(default_factory=list)
    definition: str | None = None  # the wisp definition that ran, verbatim (what a promotion attaches to a skill)

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> Self:
        d = _object(d)
        return cls(
            timestamp=_timestamp(d),
            wisp_id=_text(d, "wispId", nonempty=True),
            description=_text(d, "description"),
            success=_flag(d, "success"),
            skill_name=_text(d, "skillName", optional=True),
            failed_step=_text(d, "failedStep", optional=True),
            error=_text(d, "error", optional=True),
            steps=_texts(d, "steps"),
            definition=_text(d, "definition", optional=True),
        )

    def to_json(self) -> dict[str, Any]:
        return {
            "timestamp": iso(self.timestamp),
            "wispId": self.wisp_id,
            "description": self.description,
            "skillName": self.skill_name,
            "success": self.success,
            "failedStep": self.failed_step,
            "error": self.error,
            "steps": list(self.steps),
            # Only when present: a log written without definitions keeps its lines (and window fingerprint).
            **({"definition": self.definition} if self.definition is not None else {}),
        }


@dataclass(frozen=True)
class TierRoutingEvent(_Record):
    timestamp: datetime
    session_id: str
    tier: str
    task_kind: str
    outcome: str
    latency_ms: float | None = None
    cost_usd: float | None = None

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> Self:
        d = _object(d)
        return cls(
            timestamp=_timestamp(d),
            session_id=_text(d, "sessionId", nonempty=True),
            tier=_text(d, "tier", nonempty=True),
            task_kind=_text(d, "taskKind", nonempty=True),
            outcome=_choice(d, "outcome", TIER_OUTCOMES),
            latency_ms=_number(d, "latencyMs"),
            cost_usd=_number(d, "costUsd"),
        )

    def to_json(self) -> dict[str, Any]:
        return {
            "timestamp": iso(self.timestamp),
            "sessionId": self.session_id,
            "tier": self.tier,
            "taskKind": self.task_kind,
            "outcome": self.outcome,
            "latencyMs": self.latency_ms,
            "costUsd": self.cost_usd,
        }


@dataclass(frozen=True)
class ConversationTurn(_Record):
    timestamp: datetime
    session_id: str
    role: str
    content: str

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> Self:
        d = _object(d)
        return cls(
            timestamp=_timestamp(d),
            session_id=_text(d, "sessionId", nonempty=True),
            role=_choice(d, "role", ROLES),
            content=_text(d, "content"),
        )

    def to_json(self) -> dict[str, Any]:
        return {
            "timestamp": iso(self.timestamp),
            "sessionId": self.session_id,
            "role": self.role,
            "content": self.content,
        }


LogEvent = (
    SkillUsageEvent
    | ToolCallEvent
    | FeedbackEvent
    | SkillResourceUsageEvent
    | WispExecutionEvent
    | TierRoutingEvent
    | ConversationTurn
)

LOG_KINDS: dict[str, type] = {
    "skill-usage": SkillUsageEvent,
    "tool-call": ToolCallEvent,
    "feedback": FeedbackEvent,
    "skill-resource-usage": SkillResourceUsageEvent,
    "wisp-executions": WispExecutionEvent,
    "tier-routing": TierRoutingEvent,
    CONVERSATION: ConversationTurn,
}


def _record_class(kind: str) -> type:
    try:
        return LOG_KINDS[kind]
    except KeyError:
        raise ValueError(f"unknown log kind {kind!r}; expected one of {', '.join(LOG_KINDS)}") from None


# --- writing ---------------------------------------------------------------------------------------------------


def append_event(profile: AgentProfile, kind: str, event: Any, *, fsync: bool = False) -> None:
    """Append one record as one complete line, under the lock log retention also takes."""
    cls = _record_class(kind)
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
    _record_class(kind)
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
    cls = _record_class(kind)
    result = LogRead()
    for source, raw in warehouse.read_window_lines(profile, kind, since, until):
        file_session = source[: -len(".jsonl")] if kind in SESSION_LOGS and source.endswith(".jsonl") else None
        try:
            result.events.append(_parse_text(cls, raw, file_session))
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
    cls = _record_class(kind)
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
            for lineno, raw in enumerate(_lines(path, 0, None), start=1):
                if isinstance(raw, Oversized):
                    result.malformed += 1
                    problem(f"{where}:{lineno}", raw.reason)
                    continue
                if not raw.strip():
                    continue
                try:
                    event = _parse_record(cls, raw, path.stem if kind in SESSION_LOGS else None)
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


_SURROGATE_ESCAPE = re.compile(r"\\u[dD][89a-fA-F]")


def parse_line(kind: str, raw: bytes, file_session: str | None = None) -> Any:
    """One raw line (without its newline) as a record of ``kind``, by the rules the readers apply, or
    ``MalformedLine`` saying why not. ``file_session``: the session id a per-session file's name gives its lines."""
    return _parse_record(_record_class(kind), raw, file_session)


def _parse_record(cls: Any, raw: bytes, file_session: str | None) -> Any:
    """One line as a record of ``cls``, or ``MalformedLine`` saying why not (whatever the line holds)."""
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        raise MalformedLine("not valid UTF-8") from None
    return _parse_text(cls, text, file_session)


def _parse_text(cls: Any, text: str, file_session: str | None) -> Any:
    obj = parse_json_line(text)
    # Bytes that are not UTF-8 were refused above, so an unpaired surrogate can only come from a \u escape.
    if _SURROGATE_ESCAPE.search(text) and _has_lone_surrogate(obj):
        raise MalformedLine("text holds an unpaired surrogate escape (such as \\ud800), which is not a character")
    if file_session is not None and isinstance(obj, dict) and "sessionId" not in obj:
        obj["sessionId"] = file_session  # the file name is the session id
    try:
        return cls.from_json(obj)
    except (ValueError, TypeError, OverflowError) as exc:
        raise MalformedLine(str(exc)) from None


def _has_lone_surrogate(value: Any) -> bool:
    if isinstance(value, str):
        try:
            value.encode("utf-8")
        except UnicodeEncodeError:
            return True
        return False
    if isinstance(value, dict):
        return any(_has_lone_surrogate(k) or _has_lone_surrogate(v) for k, v in value.items())
    if isinstance(value, list):
        return any(_has_lone_surrogate(v) for v in value)
    return False


def display_path(profile: AgentProfile, path: Path) -> str:
    """A log file as people read it in problems and reports: relative to the profile root."""
    try:
        return path.relative_to(profile.root).as_posix()
    except ValueError:
        return str(path)


# --- byte-level primitives (shared with log retention) --------------------------------------------------------


@dataclass(frozen=True)
class Oversized:
    """A line too long to read (``line_batch.MAX_LINE_BYTES``): where it starts and how long it is."""

    offset: int
    size: int

    @property
    def reason(self) -> str:
        return f"line of {self.size:,} bytes is longer than the {line_batch.MAX_LINE_BYTES:,}-byte limit"


def _lines(path: Path, start: int, end: int | None) -> Iterator[bytes | Oversized]:
    """Lines of a file in ``[start, end)`` without their newline, a final partial line included; a line too long to
    hold is an ``Oversized`` in its place (so line numbers stay right)."""
    skipped: list[Oversized] = []
    for data, ends in read_line_blocks(
        path, start, end, _BLOCK, oversized=lambda offset, size: skipped.append(Oversized(offset, size))
    ):
        if skipped:
            yield from skipped
            skipped.clear()
        block = data.tobytes()
        begin = 0
        for stop in ends.tolist():
            yield block[begin:stop]
            begin = stop + 1
    yield from skipped


def iter_raw_lines(path: Path, *, on_oversized: Callable[[int, int], None] | None = None) -> Iterator[tuple[int, str]]:
    """``(line number, text)`` of every line, numbered from 1, without the newline.

    Bytes that are not UTF-8 are kept as surrogate escapes, so ``text.encode("utf-8", "surrogateescape")``
    gives the original bytes back. A line longer than ``line_batch.MAX_LINE_BYTES`` is not read: it is left out,
    and ``on_oversized(line number, size)`` is called.
    """
    for lineno, raw in enumerate(_lines(path, 0, None), start=1):
        if isinstance(raw, Oversized):
            if on_oversized is not None:
                on_oversized(lineno, raw.size)
            continue
        yield lineno, raw.decode("utf-8", "surrogateescape")


def iter_lines_between(
    path: Path, start: int, end: int, *, on_oversized: Callable[[int, int], None] | None = None
) -> Iterator[str]:
    """The lines of ``path`` in the byte range ``[start, end)``, streamed (surrogate-escaped like iter_raw_lines;
    a line too long to read is left out and reported to ``on_oversized`` with its number in the range)."""
    for lineno, raw in enumerate(_lines(path, start, end), start=1):
        if isinstance(raw, Oversized):
            if on_oversized is not None:
                on_oversized(lineno, raw.size)
            continue
        yield raw.decode("utf-8", "surrogateescape")


def count_lines_between(path: Path, start: int, end: int) -> int:
    """Lines in ``[start, end)`` (``end`` on a line boundary), counted in blocks without holding the range."""
    count, pos = 0, start
    with open(path, "rb") as f:
        f.seek(start)
        while pos < end:
            block = f.read(min(_BLOCK, end - pos))
            if not block:
                break
            count += block.count(b"\n")
            pos += len(block)
    return count


def find_cut_offset(path: Path, keep_lines: int) -> int:
    """The byte offset where the last ``keep_lines`` complete lines start; 0 when there is nothing to drop.

    Reads blocks backwards from the end, so the cost depends on what is kept, not on the file's size. A final
    line without a newline is a write in progress: it is always kept, is never split, and is not counted.
    """
    if keep_lines < 0:
        raise ValueError(f"keep_lines must be 0 or more, got {keep_lines}")
    need = keep_lines + 1  # the newline just before the first kept line
    with open(path, "rb") as f:
        pos = f.seek(0, os.SEEK_END)
        seen = 0
        while pos > 0:
            start = max(0, pos - _BLOCK)
            f.seek(start)
            block = f.read(pos - start)
            found = block.count(b"\n")
            if seen + found >= need:
                idx = len(block)
                for _ in range(need - seen):
                    idx = block.rfind(b"\n", 0, idx)
                return start + idx + 1
            seen += found
            pos = start
    return 0


def file_identity(st: os.stat_result) -> tuple[int, int]:
    """Device and inode: a rewrite (temp file + rename) gives a file a new identity, an append does not."""
    return st.st_dev, st.st_ino


def replace_with_tail(path: Path, cut: int, *, sync_dir: bool = True) -> None:
    """Rewrite ``path`` as its bytes from ``cut`` to the end: temp file in the same folder, fsync, atomic rename.

    The caller holds the log's lock. Permissions and the last-write time are kept, so a trim does not make an
    idle session file look recently written (age pruning reads the last-write time). ``sync_dir=False`` leaves
    the folder's fsync to a caller that rewrites many files of one folder (``fsync_dir`` once at the end).
    """
    tmp = path.with_name(f".{path.name}.{uuid.uuid4().hex[:12]}.tmp")
    try:
        with open(path, "rb") as src, open(tmp, "wb") as dst:
            st = os.fstat(src.fileno())
            src.seek(cut)
            shutil.copyfileobj(src, dst, _BLOCK)
            dst.flush()
            os.fsync(dst.fileno())
        os.chmod(tmp, stat.S_IMODE(st.st_mode))
        os.utime(tmp, ns=(st.st_atime_ns, st.st_mtime_ns))
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    if sync_dir:
        fsync_dir(path.parent)


def fsync_dir(folder: Path) -> None:
    """Make renames and deletions in ``folder`` durable (best effort: not every platform can fsync a folder)."""
    try:
        fd = os.open(folder, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


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


def temp_files(profile: AgentProfile) -> list[Path]:
    """Temp files of log rewrites (``.<name>.<random>.tmp``, see ``replace_with_tail``) in the log folders and the
    profile root: a trim or clear killed before its rename leaves one behind."""
    folders = [profile.root, profile.logs_dir, *(profile.session_log_dir(kind) for kind in SESSION_LOGS)]
    return sorted(p for folder in folders if folder.is_dir() for p in folder.glob(".*.jsonl.*.tmp"))
