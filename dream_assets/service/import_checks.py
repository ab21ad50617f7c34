"""The checks an import runs on every record before anything is written (``transfer.py``).

A record gets into the store only by the rules a save applies to the same value: the agent's save
(``dream_assets.agent_memory``, through ``passes/model_text.py``) and the store's own limits. So an id is a non-blank
string of at most 200 characters with no control or invisible character; content is required, at most the store's
``MaxContentChars`` (a skill's at most ``MAX_SKILL_CHARS``) with no control character but tab and line ends; a
category and each tag are as a save takes them, at most 50 tags; importance is a number from 0 to 1 (not NaN);
metadata maps strings to strings; a change row has a known kind (``CHANGE_KINDS``) and target type. A time must
parse and be at most ``MAX_FUTURE`` after the import's clock: ``9999-12-31`` is no real time, and date arithmetic on it
overflows (importance decay adds its grace period to the last sighting).

Each check raises ``Bad`` with a message that names the field (``field tags[3] contains a control character (NUL) at
character 2``); the importer prefixes the file and line.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from datetime import UTC, datetime, timedelta
from typing import Any

from dream_assets.model import MemoryEntry, Skill, iso, parse_ts
from dream_assets.passes.model_text import problem, shown
from dream_assets.store.changes import CHANGE_KINDS, TARGET_TYPES
from dream_assets.store.skills import MAX_SKILL_CHARS

#: How far after the import's clock a time may be (clocks of two machines disagree; by a year, a time is wrong).
MAX_FUTURE = timedelta(days=366)
#: Longest metadata value (the store sets no limit of its own; a log record's text has this one).
MAX_METADATA_CHARS = 1_000_000
#: Longest skill summary, as the agent's skill save takes it.
MAX_SUMMARY_CHARS = 2000
#: Largest reinforcement count (the store's column is a 32-bit integer).
MAX_REINFORCEMENT = 2**31 - 1


class Bad(ValueError):
    """One field of one record is not importable; the message names the field."""


def check(value: object, kind: str, field: str, *, max_chars: int | None = None) -> None:
    """``value`` is of ``kind`` (``model_text.problem``'s rules), else ``Bad`` naming ``field``."""
    if kind != "text" and (value is None or (isinstance(value, str) and not value.strip())):
        raise Bad(f"field {field} is missing or empty")
    found = problem(value, kind, field=field, max_chars=max_chars)
    if found:
        raise Bad(f"field {found}")


def latest(now: datetime) -> datetime:
    """The latest time an import takes: ``MAX_FUTURE`` after ``now`` (the largest time there is, near its end)."""
    try:
        return now + MAX_FUTURE
    except OverflowError:
        return datetime.max.replace(tzinfo=UTC)


def timestamp(obj: Mapping[str, Any], name: str, now: datetime, *, required: bool = True) -> datetime | None:
    """The time in field ``name`` (None when absent and not ``required``)."""
    value = obj.get(name)
    if value is None or value == "":
        if required:
            raise Bad(f"field {name} is missing or empty")
        return None
    try:
        when = parse_ts(value)
    except (TypeError, ValueError, OverflowError) as exc:
        raise Bad(f"field {name} {shown(value, 40)} is not an ISO-8601 time ({exc})") from None
    if when > latest(now):
        raise Bad(
            f"field {name} {iso(when)} is more than {MAX_FUTURE.days} days after now ({iso(now)}): no real time; "
            "correct it in the file"
        )
    return when


def number(value: object, field: str, *, low: float = 0.0, high: float = 1.0) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise Bad(f"field {field} {shown(value, 40)} is not a number")
    if not low <= value <= high:
        raise Bad(f"field {field} {value} must be between {low:g} and {high:g}")
    return float(value)


def whole(value: object, field: str, *, low: int, high: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
        raise Bad(f"field {field} {shown(value, 40)} must be a whole number from {low} to {high}")
    return value


def text_map(value: object, field: str) -> dict[str, str]:
    """A metadata object: string keys (as ids are) to string values (text: tab and line ends allowed)."""
    if not isinstance(value, dict):
        raise Bad(f"field {field} is not an object of strings ({type(value).__name__})")
    for key, item in value.items():
        check(key, "id", f"{field} key {shown(key, 40)}")
        check(item, "text", f"{field}.{shown(key, 40)}", max_chars=MAX_METADATA_CHARS)
    return dict(value)


def memory(obj: Mapping[str, Any], now: datetime, max_content: int) -> MemoryEntry:
    """A memory record of a JSONL export (``MemoryEntry.to_dict``)."""
    check(obj.get("id"), "id", "id")
    check(obj.get("content"), "content", "content", max_chars=max_content)
    category = obj.get("category")
    category = "general" if category is None else category
    check(category, "category", "category")
    tags = obj.get("tags")
    tags = [] if tags is None else tags
    check(tags, "tags", "tags")
    return MemoryEntry(
        id=obj["id"],
        content=obj["content"],
        category=category,
        tags=tuple(tags),
        importance=number(obj.get("importance", 0.5), "importance"),
        created_at=timestamp(obj, "created_at", now),  # type: ignore[arg-type]
        updated_at=timestamp(obj, "updated_at", now),  # type: ignore[arg-type]
        last_seen_at=timestamp(obj, "last_seen_at", now),  # type: ignore[arg-type]
        reinforcement_count=whole(
            obj.get("reinforcement_count", 1), "reinforcement_count", low=0, high=MAX_REINFORCEMENT
        ),
        metadata=text_map({} if obj.get("metadata") is None else obj["metadata"], "metadata"),
        archived_at=timestamp(obj, "archived_at", now, required=False),
    )


def skill(obj: Mapping[str, Any], now: datetime) -> Skill:
    """A skill record of a JSONL export (``Skill.to_dict``)."""
    check(obj.get("name"), "name", "name")
    summary = "" if obj.get("summary") is None else obj["summary"]
    check(summary, "text", "summary", max_chars=MAX_SUMMARY_CHARS)
    check(obj.get("content"), "content", "content", max_chars=MAX_SKILL_CHARS)
    see_also = [] if obj.get("see_also") is None else obj["see_also"]
    if not isinstance(see_also, list):
        raise Bad("field see_also is not a list of skill names")
    for i, name in enumerate(see_also):
        check(name, "name", f"see_also[{i}]")
    return Skill(
        name=obj["name"],
        summary=summary,
        content=obj["content"],
        see_also=tuple(see_also),
        created_at=timestamp(obj, "created_at", now),  # type: ignore[arg-type]
        updated_at=timestamp(obj, "updated_at", now),  # type: ignore[arg-type]
        last_used_at=timestamp(obj, "last_used_at", now, required=False),
        archived_at=timestamp(obj, "archived_at", now, required=False),
    )


def change(obj: Mapping[str, Any], now: datetime) -> dict[str, Any]:
    """A change row of a JSONL export, as ``ChangeLog.put_exact`` takes it."""
    for name in ("change_id", "cycle_id", "pass_name"):
        check(obj.get(name), "id", name)
    kind = obj.get("change_kind")
    if kind not in CHANGE_KINDS:
        raise Bad(f"field change_kind {shown(kind, 40)} is not a kind of change ({', '.join(sorted(CHANGE_KINDS))})")
    target_type = obj.get("target_type")
    if target_type not in TARGET_TYPES:
        raise Bad(f"field target_type {shown(target_type, 40)} is not {' or '.join(TARGET_TYPES)}")
    check(obj.get("target_id"), "id" if target_type == "memory" else "name", "target_id")
    for name in ("before", "after"):
        if obj.get(name) is not None and not isinstance(obj[name], dict):
            raise Bad(f"field {name} is not a record (an object) or null")
    reason = "" if obj.get("reason") is None else obj["reason"]
    check(reason, "text", "reason", max_chars=MAX_METADATA_CHARS)
    created = timestamp(obj, "created_at", now)
    undone = timestamp(obj, "undone_at", now, required=False)
    return {**obj, "reason": reason, "created_at": iso(created), "undone_at": iso(undone)}
