"""Content fingerprints for the change gate, the consolidation review stamp and event watermarks.

Spec "The change gate": a fingerprint covers the corpus, not statistics derived from it, so
importance scores, usage counts and rolling tallies never enter one; otherwise nothing would ever be
"unchanged" and the gate would never fire.
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Iterable, Mapping, Sequence
from datetime import date, datetime
from typing import Any

from dream_assets.model import iso, utc

# Every value is encoded as a type tag, an 8-byte length and its payload, so no two different
# field lists can produce the same byte stream: ("ab", "c") and ("a", "bc") differ in lengths,
# "1" and 1 differ in tags, None differs from "" and from "None".
_TAG_NONE = b"N"
_TAG_STR = b"s"
_TAG_BYTES = b"y"
_TAG_BOOL = b"b"
_TAG_INT = b"i"
_TAG_FLOAT = b"f"
_TAG_TIME = b"t"
_TAG_LIST = b"l"
_TAG_SET = b"e"
_TAG_DICT = b"d"

#: What :func:`event_watermark_fingerprint` returns for a log with no events in scope.
EMPTY_WATERMARK = hashlib.sha256(b"dream-assets:no-events").hexdigest()


def _frame(tag: bytes, payload: bytes) -> bytes:
    return tag + len(payload).to_bytes(8, "big") + payload


def _encode(value: Any) -> bytes:
    if value is None:
        return _frame(_TAG_NONE, b"")
    if isinstance(value, str):
        return _frame(_TAG_STR, value.encode("utf-8"))
    if isinstance(value, bytes | bytearray):
        return _frame(_TAG_BYTES, bytes(value))
    if isinstance(value, bool):  # before int: bool is an int subclass
        return _frame(_TAG_BOOL, b"1" if value else b"0")
    if isinstance(value, int):
        return _frame(_TAG_INT, str(value).encode("ascii"))
    if isinstance(value, float):
        if math.isnan(value):
            raise ValueError("stable_hash: NaN has no stable identity; replace it with None before hashing")
        return _frame(_TAG_FLOAT, repr(value).encode("ascii"))
    if isinstance(value, datetime):
        return _frame(_TAG_TIME, (iso(utc(value)) or "").encode("ascii"))
    if isinstance(value, date):
        return _frame(_TAG_TIME, value.isoformat().encode("ascii"))
    if isinstance(value, Mapping):
        items = sorted((_encode(k), _encode(v)) for k, v in value.items())
        return _frame(_TAG_DICT, b"".join(k + v for k, v in items))
    if isinstance(value, set | frozenset):
        return _frame(_TAG_SET, b"".join(sorted(_encode(v) for v in value)))
    if isinstance(value, Sequence):
        return _frame(_TAG_LIST, b"".join(_encode(v) for v in value))
    raise TypeError(
        f"stable_hash: cannot fingerprint a {type(value).__name__}; pass str, int, float, bool, None, "
        "datetime, list/tuple (ordered), set (unordered) or dict (keys sorted)"
    )


def stable_hash(*fields: object) -> str:
    """SHA-256 hex digest of ``fields``, identical across processes, platforms and Python versions.

    Supported: str, bytes, bool, int, float (not NaN), None, datetime (as UTC ISO-8601), date,
    dict (keys sorted), set/frozenset (order ignored) and list/tuple (order kept: sort first when
    the order does not matter).
    """
    h = hashlib.sha256(b"dream-assets:v1")
    for field in fields:
        h.update(_encode(field))
    return h.hexdigest()


def combine_unordered(hashes: Iterable[str]) -> str:
    """One digest for a collection of digests, independent of their order (duplicates still count)."""
    return stable_hash("unordered", sorted(hashes))


def _tag_set(tags: Iterable[str] | None) -> list[str]:
    return sorted({t for t in (tags or ()) if t})


def memory_entry_fingerprint(content: str, category: str, tags: Iterable[str] | None) -> str:
    """What the corpus fingerprint covers for one memory entry: content, category, tags (as a set).

    Importance, timestamps and reinforcement counts drift without the corpus changing and are
    deliberately absent (spec "The change gate").
    """
    return stable_hash("memory-entry", content, category, _tag_set(tags))


def review_fingerprint(
    content: str,
    category: str,
    tags: Iterable[str] | None,
    reinforcement_count: int,
    last_seen_at_iso: str | None,
) -> str:
    """The consolidation review stamp of one entry (``consolidationReviewedHash``).

    Spec "Candidate gating": any write path (reinforcement, a tool edit, a prior merge) re-opens an
    entry for review, so reinforcement count and last-seen time are covered; importance decay, which
    only rewrites the score and UpdatedAt, is not.
    """
    return stable_hash("memory-review", content, category, _tag_set(tags), int(reinforcement_count), last_seen_at_iso)


def skill_fingerprint(name: str, summary: str, content: str, see_also: Iterable[str] | None) -> str:
    """What the skill catalog fingerprint covers for one skill; see-also links as a set. Usage counts are not."""
    return stable_hash("skill", name, summary, content, _tag_set(see_also))


def event_watermark_fingerprint(timestamps_and_lines: Iterable[tuple[datetime, str]]) -> str:
    """A watermark over a time-windowed log: newest timestamp, how many events share it, and their lines.

    Losing the oldest events (ageing out of a window, a retention trim) leaves it unchanged; appending
    an event changes it, whether the new event is later than the rest or ties the newest timestamp.
    An empty log gives :data:`EMPTY_WATERMARK`.
    """
    newest: datetime | None = None
    lines: list[str] = []
    for ts, line in timestamps_and_lines:
        ts = utc(ts)
        if newest is None or ts > newest:
            newest, lines = ts, [line]
        elif ts == newest:
            lines.append(line)
    if newest is None:
        return EMPTY_WATERMARK
    # Lines at the newest instant are sorted: the same events read in another order are the same log.
    return stable_hash("event-watermark", newest, len(lines), sorted(lines))
