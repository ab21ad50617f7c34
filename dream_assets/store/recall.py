"""The order recall returns live entries in: BM25 finds them, these rules put the current version of a fact first.

BM25 ranks by words alone, so "The user's manager is Tom Becker." outscores its successor "The user's manager is
Priya Shah since 2026-11-01." (more words, a lower score) until the contradiction sweep archives the stale one, and a
correction the agent saved a minute ago has not been swept at all. ``recall_index.search`` therefore takes more of
BM25's best than it returns (:func:`candidate_count`) and orders them here:

1. **Score.** BM25 times ``1 + RecallRecencyWeight * recency + RecallReinforcementWeight * reinforcement``. Recency
   is ``0.5 ** (age / RecallRecencyHalfLife)``, the age counted back from the most recently seen candidate (the
   order is relative to what was found: no clock is read); reinforcement is ``1 - 1 / reinforcement_count`` (0 for an
   entry seen once, approaching 1). Ties break by id.
2. **Versions of one fact.** Among the first ``max(limit, VERSION_WINDOW)`` places, entries of one category that
   match the same query terms answer the question the same way; those scoring at least ``RIVAL_SCORE_RATIO`` of the
   best of them are versions of one fact. The places they hold go to them in order of standing: a user correction
   (:func:`is_user_correction`, the contradiction sweep's rule: never superseded by an entry that is not one) before
   an entry that is not one, then the later moment (:func:`moment`: the subject time, else when the entry was first
   saved), then the score order. Further down, to ``max(limit, VERSION_REACH)``, only an entry that says it is a
   later version (:func:`later_version`: a change word, "moved", "now", "no longer", text/change.py; or a user
   correction) joins its group, so it can take the place of the stale version above it. Any other entry from further
   down would push out another answer and cost recall (benchmarks/quality.py measured it: quality.recall10_* fell
   half a point when every entry to 20 could join). The recall index keeps which live entries say so, so a search
   reads the rows below the window only for them (:func:`rows_needed`).
3. **Supersession.** A live entry whose ``supersededBy`` names another candidate (a superseded entry restored by
   hand) ranks right below its successor. Archived entries are never candidates.

Each entry is returned with the score of the place it took, so scores never rise down the list.
"""

from __future__ import annotations

import json
import re
from collections import defaultdict
from collections.abc import Container, Mapping, Sequence
from datetime import datetime, timedelta

from dream_assets.model import MemoryEntry, parse_ts, utc
from dream_assets.options import DreamOptions
from dream_assets.store.standing import STANDING_METADATA_KEYS, correction_standing, is_user_correction
from dream_assets.text.change import says_change
from dream_assets.text.tokens import document_tokens

#: Supersession metadata: the archived loser names its winner (store/memory.py ``supersede``).
SUPERSEDED_BY_KEY = "supersededBy"
#: Versions of one fact score at least this share of the best of them (a passing mention is not a version).
RIVAL_SCORE_RATIO = 0.5
#: Versions of one fact are looked for among the first ``max(limit, VERSION_WINDOW)`` places, so a search for the one
#: best answer still gets the current version when BM25 puts the stale one first.
VERSION_WINDOW = 10
#: A version that says it is one (a change word, text/change.py; or a user correction) is looked for further down, to
#: ``max(limit, VERSION_REACH)``: BM25 puts "Steven Miller has moved to Los Angeles. He lives in Los Angeles now."
#: below ten other mentions of Steven Miller where the shorter "Steven Miller lives in Seattle." is among them.
VERSION_REACH = 20


def candidate_count(limit: int, options: DreamOptions) -> int:
    """How many of BM25's best a search of ``limit`` results orders: the places versions of a fact are looked for
    in, and with a recency or reinforcement weight set, room for those signals to lift an entry from further down."""
    if options.RecallRecencyWeight or options.RecallReinforcementWeight:
        return max(2 * limit + 10, VERSION_REACH)
    return max(limit, VERSION_REACH)


def later_version(
    content: str, category: str, tags: Sequence[str] | str, metadata: Mapping[str, str] | str | None
) -> bool:
    """Whether an entry with these fields says it is a later version of a fact (a change word, or user-correction
    standing): only such an entry joins its version group from below the first ``VERSION_WINDOW`` places. ``tags``
    and ``metadata`` as the entry holds them or as the JSON text of its row (read only when the content says no
    change)."""
    if says_change(content):
        return True
    if isinstance(tags, str):
        tags = json.loads(tags)
    if isinstance(metadata, str):
        metadata = json.loads(metadata) if metadata != "{}" else None
    return correction_standing(category, tags, metadata or {})


def later_rows(
    ids: Sequence[str], contents: Sequence[str], categories: Sequence[str], tags: Sequence[str], metadata: Sequence[str]
) -> set[str]:
    """The ids among these rows (tags and metadata as the JSON text of the row) for which ``later_version`` holds,
    for an index build: the verdict of a category and tags is worked out once, and metadata is read only when it
    names a key standing is read from."""
    by_labels: dict[tuple[str, str], bool] = {}
    out = set()
    for mid, content, category, tag_text, meta in zip(ids, contents, categories, tags, metadata, strict=True):
        if says_change(content):
            out.add(mid)
        elif meta != "{}" and any(key in meta for key in STANDING_METADATA_KEYS):
            if correction_standing(category, json.loads(tag_text), json.loads(meta)):
                out.add(mid)
        else:
            verdict = by_labels.get((category, tag_text))
            if verdict is None:
                verdict = by_labels[(category, tag_text)] = correction_standing(category, json.loads(tag_text), {})
            if verdict:
                out.add(mid)
    return out


def rows_needed(ids: Sequence[str], limit: int, options: DreamOptions, later: Container[str]) -> list[str]:
    """Of BM25's best ``ids`` (``candidate_count`` of them, best first), those whose rows ``rank`` orders for a search
    of ``limit``: the first ``max(limit, VERSION_WINDOW)`` and, below them, only those in ``later`` (live entries that
    say they are a later version); every one when a recency or reinforcement weight can lift an entry from further
    down. The others hold places nothing below the window is returned from, unless ``rows_complete`` says not."""
    if options.RecallRecencyWeight or options.RecallReinforcementWeight:
        return list(ids)
    window = max(limit, VERSION_WINDOW)
    return [*ids[:window], *(i for i in ids[window:] if i in later)]


def rows_complete(ids: Sequence[str], limit: int, found: Mapping[str, MemoryEntry]) -> bool:
    """Whether the rows ``found`` of ``rows_needed`` order as all of ``ids`` would: every entry of the first places is
    live (else one from further down moves up into them), and none of the rows names a successor that was not read
    (rule 3 would move it down to below its successor and the places after it up)."""
    window = ids[: max(limit, VERSION_WINDOW)]
    if any(i not in found or found[i].is_archived for i in window):
        return False
    unread = set(ids).difference(found)
    return not any(e.metadata.get(SUPERSEDED_BY_KEY) in unread for e in found.values())


_PARTIAL_DATE = re.compile(r"^(\d{4})(?:-(\d{1,2})(?:-(\d{1,2}))?)?$")


def _span_of(text: str) -> tuple[datetime, datetime] | None:
    """A subject-time value as a half-open span: a year, month or day covers all of it, an instant one microsecond.
    None when it cannot be read."""
    text = (text or "").strip()
    m = _PARTIAL_DATE.fullmatch(text)
    try:
        if m:
            year, month, day = int(m[1]), int(m[2] or 0), int(m[3] or 0)
            if not month:
                return utc(datetime(year, 1, 1)), utc(datetime(year + 1, 1, 1))
            start = utc(datetime(year, month, day or 1))
            if day:
                return start, start + timedelta(days=1)
            return start, utc(datetime(year + (month == 12), month % 12 + 1, 1))
        at = parse_ts(text)
    except (ValueError, OverflowError):
        return None
    return at, at + timedelta(microseconds=1)


def subject_span(entry: MemoryEntry) -> tuple[datetime, datetime] | None:
    """The moment an entry is about, from its subject-time metadata; None when it carries none that can be read."""
    st = entry.subject_time
    if "subjectTime" in st:
        return _span_of(st["subjectTime"])
    start = _span_of(st.get("subjectTimeStart", ""))
    end = _span_of(st.get("subjectTimeEnd", ""))
    if start and end:
        return (start[0], end[1]) if start[0] <= end[1] else None
    return start or end


def about_earlier_moment(a: MemoryEntry, b: MemoryEntry) -> bool:
    """True when ``a`` is about a moment that ends before the moment ``b`` is about begins."""
    sa, sb = subject_span(a), subject_span(b)
    return sa is not None and sb is not None and sa[1] <= sb[0]


def moment(entry: MemoryEntry) -> datetime:
    """When the fact an entry states holds from: the start of its subject time, else when it was first saved (a merge
    keeps its sources' earliest ``created_at``, a reinforcement does not move it)."""
    span = subject_span(entry)
    return span[0] if span else entry.created_at


def rank(
    hits: Sequence[tuple[MemoryEntry, float]], query_tokens: Sequence[str], options: DreamOptions, limit: int
) -> list[tuple[MemoryEntry, float]]:
    """The ``limit`` best of ``hits`` (live entries with their BM25 scores) by the rules of this module."""
    if not hits or limit <= 0:
        return []
    scored = _weighted(hits, options)
    order = sorted(range(len(scored)), key=lambda i: (-scored[i][1], scored[i][0].id))
    places = [scored[i][1] for i in order]  # the score of each place, best first
    ranked = [scored[i][0] for i in order]
    bm25 = {e.id: s for e, s in hits}
    ranked = _current_first(ranked, set(query_tokens), bm25, max(limit, VERSION_WINDOW), max(limit, VERSION_REACH))
    ranked = _successors_first(ranked)
    return list(zip(ranked[:limit], places[:limit], strict=False))


def _weighted(hits: Sequence[tuple[MemoryEntry, float]], options: DreamOptions) -> list[tuple[MemoryEntry, float]]:
    w_recent, w_reinforced = options.RecallRecencyWeight, options.RecallReinforcementWeight
    if not w_recent and not w_reinforced:
        return list(hits)
    newest = max(e.last_seen_at for e, _ in hits)
    half_life = options.RecallRecencyHalfLife.total_seconds()
    out = []
    for entry, score in hits:
        recency = 0.5 ** ((newest - entry.last_seen_at).total_seconds() / half_life)
        reinforcement = 1.0 - 1.0 / max(1, entry.reinforcement_count)
        out.append((entry, score * (1.0 + w_recent * recency + w_reinforced * reinforcement)))
    return out


def _standing(entry: MemoryEntry) -> tuple[bool, datetime]:
    return is_user_correction(entry), moment(entry)


def _current_first(
    ranked: list[MemoryEntry], query: set[str], bm25: dict[str, float], window: int, reach: int
) -> list[MemoryEntry]:
    """Rule 2: the places each group of versions holds among the first ``window`` (and, for a version that says it
    is one, the first ``reach``), handed out again by standing."""
    groups: dict[tuple[str, frozenset[str]], list[int]] = defaultdict(list)
    for place, entry in enumerate(ranked[:reach]):
        if place >= window and not later_version(entry.content, entry.category, entry.tags, entry.metadata):
            continue
        matched = query.intersection(document_tokens(entry.content, entry.category, entry.tags))
        if matched:
            groups[(entry.category, frozenset(matched))].append(place)
    out = list(ranked)
    for places in groups.values():
        if len(places) < 2:
            continue
        floor = RIVAL_SCORE_RATIO * max(bm25[ranked[p].id] for p in places)
        versions = [p for p in places if bm25[ranked[p].id] >= floor]
        # Highest standing first; equal standing keeps the score order (places are in it already).
        by_standing = sorted(versions, key=lambda p: (_standing(ranked[p]), -p), reverse=True)
        for place, source in zip(versions, by_standing, strict=True):
            out[place] = ranked[source]
    return out


def _successors_first(ranked: list[MemoryEntry]) -> list[MemoryEntry]:
    """Rule 3: each live superseded entry moves to just below its successor when it ranks above it."""
    out = list(ranked)
    for _ in range(len(out)):
        position = {e.id: i for i, e in enumerate(out)}
        moved = False
        for i, entry in enumerate(out):
            j = position.get(entry.metadata.get(SUPERSEDED_BY_KEY, ""), -1)
            if j > i:
                out.insert(j, out.pop(i))
                moved = True
                break
        if not moved:
            break
    return out
