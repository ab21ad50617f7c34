"""Host arithmetic for a consolidation merge: the temporal fields, subject time and provenance of a merged entry.

Spec "Temporal-field arithmetic on merge (computed by the host, not the LLM)": CreatedAt = min (first seen kept),
LastSeenAt = max (never reset to now), ReinforcementCount = sum, subject-time keys merged (start/end widen, a point
prefers the most specific), every other metadata key dropped. Provenance ("Provenance"): ``mergedFrom`` and
``mergedAt``.

Choices where the spec is silent, each the one that loses nothing:
- ``mergedFrom`` is a JSON list of the source ids in the order the model listed them (``["a","b"]``): unambiguous
  for any id, and what ``dream_assets.memory_audit.merged_from`` reads first.
- Importance is the highest of the sources, so a merge never demotes a fact below what any source already had.
- ``decayAppliedThrough`` (importance decay's calendar stamp) carries the latest of the sources, so decay does not
  re-apply time the importance taken over has already been decayed for.
- Subject-time points that disagree (neither is a refinement of the other: distinct moments the model chose to merge)
  are not collapsed to one of them; they widen the range instead, so the merged entry never claims a single moment
  the sources do not support. Values that are not ISO dates cannot be ordered: when they differ they are all kept.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping, Sequence
from datetime import datetime
from typing import Any

from dream_assets.model import SUBJECT_TIME_KEYS, MemoryEntry, iso, parse_ts, utc
from dream_assets.passes.memory_vocabulary import DECAY_APPLIED_KEY as APPLIED_KEY
from dream_assets.passes.memory_vocabulary import MERGED_AT_KEY
from dream_assets.store.standing import with_standing
from dream_assets.text.content_hash import stable_hash

MERGED_FROM_KEY = "mergedFrom"
REJECTED_CLUSTER_KEY = "consolidationRejectedCluster"
REJECTED_AT_KEY = "consolidationRejectedAt"

_POINT, _START, _END = SUBJECT_TIME_KEYS
# YYYY, YYYY-MM, YYYY-MM-DD, optionally with a time and a zone.
_ISO_LIKE = re.compile(
    r"^\d{4}(?:-\d{2}(?:-\d{2}(?:[T ]\d{2}(?::\d{2}(?::\d{2}(?:\.\d+)?)?)?"
    r"(?:Z|z|[+-]\d{2}:?\d{2})?)?)?)?$"
)
_PAST_END = "\uffff"  # a partial date as an end bound reaches to its last instant: "2026-05" ends after "2026-05-31"


def _normalise(value: str) -> str:
    """ISO dates as written; date-times as UTC ``YYYY-MM-DDTHH:MM:SSZ`` so zones compare correctly."""
    text = value.strip()
    if _ISO_LIKE.fullmatch(text) and len(text) > 10:
        try:
            return iso(parse_ts(text.replace(" ", "T", 1))) or text
        except ValueError:
            return text
    return text


def _is_iso(value: str) -> bool:
    return bool(_ISO_LIKE.fullmatch(value))


def _start_key(value: str) -> str:
    return value


def _end_key(value: str) -> str:
    return value if "T" in value else value + _PAST_END


def _distinct(values: Iterable[str]) -> list[str]:
    return list(dict.fromkeys(v for v in values if v))


def merge_subject_time(metadatas: Sequence[Mapping[str, str]]) -> dict[str, str]:
    """MergeSubjectTimeMetadata: the subject-time keys of a merged entry from those of its sources."""
    points = _distinct(_normalise(m.get(_POINT, "")) for m in metadatas)
    starts = _distinct(_normalise(m.get(_START, "")) for m in metadatas)
    ends = _distinct(_normalise(m.get(_END, "")) for m in metadatas)
    result: dict[str, str] = {}
    if points:
        most_specific = max(points, key=len)  # first of the longest on ties
        compatible = all(_is_iso(p) for p in points) and all(most_specific.startswith(p) for p in points)
        if len(points) == 1 or compatible:
            result[_POINT] = most_specific
        elif all(_is_iso(p) for p in points):
            starts += points  # distinct moments: an honest range, not one of them
            ends += points
        else:
            result[_POINT] = " / ".join(points)
    if starts or ends:
        # A range covers every moment the sources talk about, points included.
        bounds_start = starts + (points if _POINT in result and starts else [])
        bounds_end = ends + (points if _POINT in result and ends else [])
        for key, values, pick, sort_key in (
            (_START, _distinct(bounds_start), min, _start_key),
            (_END, _distinct(bounds_end), max, _end_key),
        ):
            if not values:
                continue
            if all(_is_iso(v) for v in values):
                result[key] = pick(values, key=sort_key)
            else:
                result[key] = values[0] if len(values) == 1 else " / ".join(values)
    return result


def latest_decay_stamp(sources: Iterable[MemoryEntry]) -> str | None:
    best: datetime | None = None
    for e in sources:
        raw = e.metadata.get(APPLIED_KEY)
        if not raw:
            continue
        try:
            ts = parse_ts(raw)
        except ValueError:
            continue  # an unreadable stamp is not carried: decay then falls back to post-grace time only
        if best is None or ts > best:
            best = ts
    return iso(best) if best else None


def merged_fields(entries: Sequence[MemoryEntry]) -> dict[str, Any]:
    """The host's arithmetic over the entries a merge or fold combines: first seen = min, last seen = max (never
    reset to now), reinforcement = sum, importance = the highest (a merge never demotes a fact)."""
    return {
        "importance": max(e.importance for e in entries),
        "created_at": min(e.created_at for e in entries),
        "last_seen_at": max(e.last_seen_at for e in entries),
        "reinforcement_count": sum(max(0, e.reinforcement_count) for e in entries),
    }


def build_merged_entry(
    sources: Sequence[MemoryEntry],
    *,
    entry_id: str,
    content: str,
    category: str,
    tags: Sequence[str],
    now: datetime,
) -> MemoryEntry:
    """The merged record. Temporal fields, importance, metadata and user-correction standing come from the sources,
    never from the model."""
    if not sources:
        raise ValueError("build_merged_entry: a merge needs at least one source entry")
    now = utc(now)
    metadata = merge_subject_time([s.metadata for s in sources])
    metadata[MERGED_FROM_KEY] = json.dumps([s.id for s in sources])
    metadata[MERGED_AT_KEY] = iso(now) or ""
    decay = latest_decay_stamp(sources)
    if decay:
        metadata[APPLIED_KEY] = decay
    merged = MemoryEntry(
        id=entry_id,
        content=content.strip(),
        category=category,
        tags=tuple(sorted({str(t).strip() for t in tags if str(t).strip()})),
        updated_at=now,
        metadata=metadata,
        **merged_fields(sources),
    )
    return with_standing(merged, sources)


def rejected_cluster_id(source_ids: Iterable[str]) -> str:
    """A stable id of a source set (order-free), so a cluster rejected cycle after cycle is visible on disk."""
    return stable_hash("consolidation-rejected-cluster", sorted(set(source_ids)))[:16]


def fold_into(
    keeper: MemoryEntry, sources: Sequence[MemoryEntry], *, tags: Sequence[str] = (), now: datetime
) -> MemoryEntry:
    """``keeper`` after ``sources`` that say the same thing are folded into it (an exact duplicate, or a merge whose
    text an existing entry already holds): its id, content and category stay; the temporal fields follow the merge
    arithmetic over keeper and sources (first seen = min, last seen = max, reinforcement = sum, subject time
    widened), importance is the highest, tags the union (case-sensitive: ``Ops`` and ``ops`` are both kept),
    ``updated_at`` stays (no text changed), ``mergedFrom`` gains the sources after any it had, and it is a user
    correction exactly when keeper or a source was."""
    everyone = [keeper, *sources]
    now = utc(now)
    metadata = {k: v for k, v in keeper.metadata.items() if k not in SUBJECT_TIME_KEYS}
    metadata.update(merge_subject_time([e.metadata for e in everyone]))
    try:
        previous = json.loads(keeper.metadata.get(MERGED_FROM_KEY, "[]"))
        previous = [str(i) for i in previous] if isinstance(previous, list) else []
    except ValueError:
        previous = []
    metadata[MERGED_FROM_KEY] = json.dumps(list(dict.fromkeys([*previous, *(s.id for s in sources)])))
    metadata[MERGED_AT_KEY] = iso(now) or ""
    decay = latest_decay_stamp(everyone)
    if decay:
        metadata[APPLIED_KEY] = decay
    # The kept text does not change, so neither does updated_at (the entry was observed again, not edited).
    folded = keeper.with_(
        tags=tuple(sorted({str(t).strip() for e in everyone for t in e.tags} | {str(t).strip() for t in tags} - {""})),
        metadata=metadata,
        **merged_fields(everyone),
    )
    return with_standing(folded, everyone)
