"""What the prompt renderers share: the same inputs give byte-identical prompts.

Each pass renders its own prompt next to its body, from these pieces: a memory entry, a feedback signal, a
conversation message and the sections that list them, and the text helpers (one line, a safe code fence, sorted
``key=value`` extras).

Nothing here reads a clock (``now`` is a parameter) and wherever the order of the inputs carries no
meaning it is sorted, so a store that returns rows in a different order does not produce a different
prompt (which would also defeat prompt caching on the endpoint). Orders that do mean something are kept:
messages within a session, the failure context of a skill.

Memory entries carry their temporal context (spec, pass 1): ``first=`` (CreatedAt), ``last=``
(LastSeenAt, when another day), ``reinforced=N×`` (ReinforcementCount, when over one) and ``subject=`` when
subject-time metadata exists.
"""

from __future__ import annotations

import re
from collections.abc import Collection, Iterable, Mapping, Sequence
from datetime import datetime
from typing import Any

from dream_assets.model import MemoryEntry, iso, parse_ts


# --- helpers -----------------------------------------------------------------------------------------
def one_line(text: Any) -> str:
    """Continuation lines indented, so a multi-line value stays inside its list item."""
    return "\n    ".join(str(text).strip().splitlines()) if str(text).strip() else ""


def _date(dt: datetime) -> str:
    return (iso(dt) or "")[:10]


def fenced(text: str) -> str:
    """A code fence longer than any backtick run inside ``text``, so skill markdown cannot break out."""
    longest = max((len(m) for m in re.findall(r"`+", text)), default=0)
    fence = "`" * max(3, longest + 1)
    return f"{fence}\n{text.rstrip()}\n{fence}"


def _ts_key(value: Any) -> tuple[int, str]:
    """Sort key for a timestamp that may be missing or malformed (those sort oldest)."""
    try:
        return (1, iso(parse_ts(value)) or "")
    except (TypeError, ValueError):
        return (0, str(value or ""))


def _ts_text(value: Any) -> str:
    try:
        return iso(parse_ts(value)) or ""
    except (TypeError, ValueError):
        return str(value or "")


def _first(item: Mapping[str, Any], *keys: str) -> Any:
    for key in keys:
        if item.get(key) not in (None, ""):
            return item[key]
    return None


def extras(item: Mapping[str, Any], shown: Collection[str]) -> str:
    rest = {k: v for k, v in item.items() if k not in shown and v not in (None, "", [], {})}
    return " ".join(f"{k}={value_text(rest[k])}" for k in sorted(rest))


def value_text(value: Any) -> str:
    if isinstance(value, list | tuple):
        return ",".join(str(v) for v in value)
    if isinstance(value, float):
        return f"{value:g}"
    return str(value)


# --- memory ---------------------------------------------------------------------------------------------
def subject_text(entry: MemoryEntry) -> str:
    """When the thing an entry tells of happened: a point, or ``start..end``; empty when the entry does not say."""
    st = entry.subject_time
    if "subjectTime" in st:
        return st["subjectTime"]
    start, end = st.get("subjectTimeStart", ""), st.get("subjectTimeEnd", "")
    if start or end:
        return f"{start}..{end}"
    return ""


def render_memory_entry(entry: MemoryEntry) -> str:
    """``- id=<id> [<category>] tags=<a,b> first=<date> last=<date> reinforced=N× subject=<..> :: <content>``, compact:
    ``last=`` only when it is another day than ``first=``, ``reinforced=`` only when the entry was observed more than
    once (most entries are neither: the words a small model reads per entry go to its content)."""
    parts = [f"- id={entry.id}", f"[{entry.category}]"]
    if entry.tags:
        parts.append("tags=" + ",".join(sorted(entry.tags)))
    first, last = _date(entry.created_at), _date(entry.last_seen_at)
    parts.append(f"first={first}")
    if last != first:
        parts.append(f"last={last}")
    if entry.reinforcement_count > 1:
        parts.append(f"reinforced={entry.reinforcement_count}×")
    subject = subject_text(entry)
    if subject:
        parts.append(f"subject={subject}")
    return " ".join(parts) + " :: " + one_line(entry.content)


def entries_sorted(entries: Iterable[MemoryEntry]) -> list[MemoryEntry]:
    """Oldest first, then by id: the order memory entries are shown in."""
    return sorted(entries, key=lambda e: (iso(e.created_at) or "", e.id))


def render_feedback_item(item: Mapping[str, Any]) -> str:
    """``- <timestamp> [<kind>] rating=<r> session=<id> :: <text>``"""
    parts = ["-", _ts_text(item.get("timestamp")) or "(no time)"]
    if item.get("kind"):
        parts.append(f"[{item['kind']}]")
    if item.get("rating") not in (None, ""):
        parts.append(f"rating={item['rating']}")
    if item.get("sessionId"):
        parts.append(f"session={item['sessionId']}")
    extra = extras(item, {"timestamp", "kind", "rating", "sessionId", "text"})
    if extra:
        parts.append(extra)
    return " ".join(parts) + " :: " + one_line(item.get("text") or "")


def feedback_section(feedback: Sequence[Mapping[str, Any]], title: str) -> list[str]:
    """``## <title> (N, newest first)`` and one line per feedback signal, newest first."""
    items = sorted(
        feedback,
        key=lambda f: (
            _ts_key(f.get("timestamp")),
            str(f.get("sessionId") or ""),
            str(f.get("kind") or ""),
            str(f.get("text") or ""),
        ),
        reverse=True,
    )
    lines = [f"## {title} ({len(items)}, newest first)"]
    lines += [render_feedback_item(f) for f in items] or ["(none)"]
    return lines


_ISO_MINUTE = re.compile(r"(\d{4}-\d{2}-\d{2})T(\d{2}:\d{2}):\d{2}(?:\.\d+)?Z")


def _message_time(value: Any, day: str | None) -> str:
    """A message's time to the minute (``2026-10-27 08:00``), only ``08:00`` on its session's day ``day``."""
    when = _ts_text(value)
    m = _ISO_MINUTE.fullmatch(when)
    if m is None:
        return when
    return m.group(2) if m.group(1) == day else f"{m.group(1)} {m.group(2)}"


def render_message(item: Mapping[str, Any], day: str | None = None) -> str:
    """One conversation-log line: ``- [<time>] <role>: <content>``, the time to the minute (a model judging requests
    needs no seconds), without its date when it is the session's ``day``."""
    when = _message_time(_first(item, "timestamp", "time", "ts"), day)
    role = _first(item, "role", "speaker", "author") or "message"
    text = _first(item, "content", "text", "message") or ""
    return (f"- [{when}] " if when else "- ") + f"{role}: {one_line(text)}"


def sessions_section(sessions: Mapping[str, Sequence[Mapping[str, Any]]]) -> list[str]:
    """``## Conversation log (N session(s))``: the sessions by their first message, each message in its order; a
    session's heading gives its day, its messages the time of day."""

    def first_time(sid: str) -> tuple[tuple[int, str], str]:
        times = [_ts_key(_first(m, "timestamp", "time", "ts")) for m in sessions[sid]]
        return (min(times) if times else (0, ""), sid)

    lines = [f"## Conversation log ({len(sessions)} session(s))"]
    for sid in sorted(sessions, key=first_time):
        msgs = sessions[sid]
        (known, first), _ = first_time(sid)
        day = first[:10] if known else None
        lines.append(f"### Session {sid} ({len(msgs)} message(s)" + (f", {day})" if day else ")"))
        lines += [render_message(m, day) for m in msgs]  # conversation order is meaningful: kept
    return lines if sessions else lines + ["(none)"]
