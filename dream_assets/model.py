"""Domain records: memory entries and skills. Plain dataclasses; the stores persist them."""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime, timedelta
from typing import Any

#: Metadata keys that carry subject time: when the thing a memory talks about happened
#: (as opposed to when the agent observed it). ``subjectTime`` is a point; start/end a range.
SUBJECT_TIME_KEYS = ("subjectTime", "subjectTimeStart", "subjectTimeEnd")
#: Metadata of an entry whose text is only the head of a longer text kept elsewhere (a LangGraph value over
#: ``MaxContentChars``): the whole text's length. The dream never merges, folds or removes such an entry, since a
#: check of its text could not see what the rest says.
TEXT_HEAD_KEY = "textHeadOf"


def utc(dt: datetime) -> datetime:
    """Every timestamp in the project is timezone-aware UTC; naive values are taken as UTC."""
    if dt.tzinfo is None:
        return dt.replace(tzinfo=UTC)
    return dt.astimezone(UTC)


def utc_or_now(now: datetime | None) -> datetime:
    """``now`` as aware UTC, or the current UTC time when it is None (an agent's call need not pass a clock)."""
    return datetime.now(UTC) if now is None else utc(now)


#: The clocks the project computes with: a ``now`` (``--now``, a call's ``now``) outside them is refused, so that
#: every window, grace period and expiry added to or taken from it stays inside the calendar (years 1 to 9999).
EARLIEST_NOW = datetime(1970, 1, 1, tzinfo=UTC)
LATEST_NOW = datetime(9000, 1, 1, tzinfo=UTC)


def clock_problem(now: datetime, field: str = "now") -> str | None:
    """Why ``now`` cannot be the clock (see ``EARLIEST_NOW``), or None."""
    if EARLIEST_NOW <= utc(now) < LATEST_NOW:
        return None
    return (
        f"{field} {iso(now)} is outside the times a clock may take ({EARLIEST_NOW:%Y-%m-%d} to "
        f"{LATEST_NOW - timedelta(days=1):%Y-%m-%d}): date arithmetic on it would leave the calendar"
    )


def shifted(at: datetime, delta: timedelta) -> datetime:
    """``at + delta``, or the calendar's first or last instant when that leaves it: a stored time near year 9999 (an
    imported date, a file's modification time) plus a grace period is "never", not an ``OverflowError``."""
    try:
        return at + delta
    except OverflowError:
        edge = datetime.max if delta > timedelta(0) else datetime.min
        return edge.replace(tzinfo=UTC)


def parse_ts(value: Any) -> datetime:
    """An ISO-8601 string (``Z`` allowed) or datetime, as aware UTC. Raises ValueError."""
    if isinstance(value, datetime):
        return utc(value)
    if not isinstance(value, str) or not value:
        raise ValueError(f"expected an ISO-8601 timestamp, got {value!r}")
    text = value.strip()
    if text.endswith(("Z", "z")):
        text = text[:-1] + "+00:00"
    try:
        return utc(datetime.fromisoformat(text))
    except OverflowError:  # 9999-12-31T23:00-05:00 is in year 10000 in UTC
        raise ValueError(f"{value!r} is outside the calendar in UTC") from None


def iso(dt: datetime | None) -> str | None:
    return None if dt is None else utc(dt).isoformat().replace("+00:00", "Z")


def new_id() -> str:
    return uuid.uuid4().hex


@dataclass(frozen=True)
class MemoryEntry:
    id: str
    content: str
    category: str
    tags: tuple[str, ...]
    importance: float
    created_at: datetime
    updated_at: datetime
    last_seen_at: datetime
    reinforcement_count: int = 1
    metadata: dict[str, str] = field(default_factory=dict)
    archived_at: datetime | None = None

    @property
    def is_archived(self) -> bool:
        return self.archived_at is not None

    @property
    def subject_time(self) -> dict[str, str]:
        return {k: self.metadata[k] for k in SUBJECT_TIME_KEYS if self.metadata.get(k)}

    def with_(self, **changes: Any) -> MemoryEntry:
        return replace(self, **changes)

    def to_dict(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "content": self.content,
            "category": self.category,
            "tags": list(self.tags),
            "importance": self.importance,
            "created_at": iso(self.created_at),
            "updated_at": iso(self.updated_at),
            "last_seen_at": iso(self.last_seen_at),
            "reinforcement_count": self.reinforcement_count,
            "metadata": dict(self.metadata),
            "archived_at": iso(self.archived_at),
        }

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> MemoryEntry:
        return cls(
            id=d["id"],
            content=d["content"],
            category=d.get("category") or "general",
            tags=tuple(d.get("tags") or ()),
            importance=float(d.get("importance", 0.5)),
            created_at=parse_ts(d["created_at"]),
            updated_at=parse_ts(d["updated_at"]),
            last_seen_at=parse_ts(d["last_seen_at"]),
            reinforcement_count=int(d.get("reinforcement_count", 1)),
            metadata={str(k): str(v) for k, v in (d.get("metadata") or {}).items()},
            archived_at=parse_ts(d["archived_at"]) if d.get("archived_at") else None,
        )


# --------------------------------------------------------------------------------------------------- signal entries
#: Metadata ``source`` values of a fact the user stated.
USER_SOURCES = frozenset({"user", "user-stated", "user-correction", "correction"})
#: The tag of a user correction wherever it is filed.
USER_CORRECTION_TAG = "user-correction"
#: A correction filed under this category (or below it) with the tag ``correction`` is a user correction too.
FEEDBACK_FROM_USER = "feedback/from-user"
CORRECTION_TAG = "correction"
#: Categories (with everything below them) whose entries are signals: feedback, and the agent's claims about what it
#: can do, which users correct.
SIGNAL_CATEGORIES = ("feedback", "capability-claims")
#: Tags that make an entry a signal wherever it is filed.
SIGNAL_TAGS = frozenset({"feedback", "capability-claim", CORRECTION_TAG, USER_CORRECTION_TAG})


def folder_place(record: Mapping[str, Any] | None) -> str:
    """Where a memory read from a linked memory folder lives, as a person finds it: ``file › Heading / Sub``
    (the ``folder.file`` and ``folder.heading`` metadata the folder read writes); '' for any other memory."""
    metadata = (record or {}).get("metadata") or {}
    file = metadata.get("folder.file") if isinstance(metadata, Mapping) else None
    if not file:
        return ""
    try:
        heading = [str(h) for h in json.loads(metadata.get("folder.heading") or "[]")]
    except (TypeError, ValueError):
        heading = []
    return f"{file} › {' / '.join(heading)}" if heading else str(file)


def in_category(category: str, root: str) -> bool:
    """``category`` is ``root`` or below it, segment by segment ("feedback" covers "feedback/from-user", not
    "feedbacks"); categories compare case-sensitively."""
    return category == root or category.startswith(root + "/")


#: The metadata keys ``user_correction_signs`` reads.
CORRECTION_METADATA_KEYS = ("feedbackKind", "source")


def user_correction_signs(category: str, tags: Iterable[str], metadata: Mapping[str, str]) -> bool:
    """Whether a record with these fields is a user correction: saved from feedback of kind Correction (metadata
    ``feedbackKind``), stated by the user (metadata ``source`` in :data:`USER_SOURCES`), tagged ``user-correction``,
    or filed under ``feedback/from-user`` with the tag ``correction``. The one place these signs are read
    (``store/standing.is_user_correction`` adds the decision consolidation records on the entries it writes); tag
    and value spellings are compared without case."""
    folded = {str(t).strip().casefold() for t in tags}
    return (
        metadata.get("feedbackKind", "").strip().casefold() == "correction"
        or metadata.get("source", "").strip().casefold() in USER_SOURCES
        or USER_CORRECTION_TAG in folded
        or (in_category(category, FEEDBACK_FROM_USER) and CORRECTION_TAG in folded)
    )


def is_signal(category: str, tags: Iterable[str], metadata: Mapping[str, str]) -> bool:
    """A record whose every occurrence counts: a user correction, feedback or a capability claim. Such entries are
    never folded into, deduplicated against or reinforced by one another, at save time or by consolidation's
    deterministic folds: a user repeating a correction is a signal, not a duplicate."""
    tags = tuple(tags)
    return (
        any(in_category(category, root) for root in SIGNAL_CATEGORIES)
        or bool({str(t).strip().casefold() for t in tags} & SIGNAL_TAGS)
        or user_correction_signs(category, tags, metadata)
    )


def is_signal_entry(entry: MemoryEntry) -> bool:
    return is_signal(entry.category, entry.tags, entry.metadata)


@dataclass(frozen=True)
class Skill:
    name: str
    summary: str
    content: str
    see_also: tuple[str, ...] = ()
    created_at: datetime = field(default_factory=lambda: datetime(1970, 1, 1, tzinfo=UTC))
    updated_at: datetime = field(default_factory=lambda: datetime(1970, 1, 1, tzinfo=UTC))
    last_used_at: datetime | None = None
    archived_at: datetime | None = None

    @property
    def is_archived(self) -> bool:
        return self.archived_at is not None

    def with_(self, **changes: Any) -> Skill:
        return replace(self, **changes)

    def to_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "summary": self.summary,
            "content": self.content,
            "see_also": list(self.see_also),
            "created_at": iso(self.created_at),
            "updated_at": iso(self.updated_at),
            "last_used_at": iso(self.last_used_at),
            "archived_at": iso(self.archived_at),
        }

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Skill:
        return cls(
            name=d["name"],
            summary=d.get("summary") or "",
            content=d.get("content") or "",
            see_also=tuple(d.get("see_also") or ()),
            created_at=parse_ts(d["created_at"]),
            updated_at=parse_ts(d["updated_at"]),
            last_used_at=parse_ts(d["last_used_at"]) if d.get("last_used_at") else None,
            archived_at=parse_ts(d["archived_at"]) if d.get("archived_at") else None,
        )
