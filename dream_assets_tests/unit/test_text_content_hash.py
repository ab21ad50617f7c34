"""Fingerprints behind the change gate, the consolidation review stamp and log watermarks."""

import math
from datetime import UTC, datetime, timedelta, timezone

import pytest

from dream_assets.model import MemoryEntry, iso
from dream_assets.text.content_hash import (
    EMPTY_WATERMARK,
    combine_unordered,
    event_watermark_fingerprint,
    memory_entry_fingerprint,
    review_fingerprint,
    skill_fingerprint,
    stable_hash,
)

T0 = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)


def test_stable_hash_is_pinned_across_releases() -> None:
    # Ledgers and review stamps persist these digests: changing the encoding would make every
    # gated pass and every reviewed entry look changed once, so a change here must be deliberate.
    assert stable_hash() == "c82143ab160ca6a3a31f73f29b36c198b911c2337a7b8b7e13b0149c55191edb"
    assert stable_hash("a", 1, None, ["x"], {"k": 2.5}) == (
        "64655c159ea7df7e6b104158d5108f1626196b167dde46ec3901e86852cf8899"
    )


@pytest.mark.parametrize(
    ("left", "right"),
    [
        (("ab", "c"), ("a", "bc")),
        (("a", ""), ("a",)),
        ((None,), ("",)),
        ((None,), ("None",)),
        (("1",), (1,)),
        ((1,), (1.0,)),
        ((True,), (1,)),
        ((["a", "b"],), (["b", "a"],)),
        ((["ab"],), (["a", "b"],)),
        (({"k": "v"},), ({"k": "w"},)),
        ((b"a",), ("a",)),
    ],
)
def test_different_field_lists_never_collide(left: tuple, right: tuple) -> None:
    assert stable_hash(*left) != stable_hash(*right)


@pytest.mark.parametrize(
    ("left", "right"),
    [
        (({"a": 1, "b": 2},), ({"b": 2, "a": 1},)),
        (({"x", "y", "z"},), ({"z", "y", "x"},)),
        ((("a", "b"),), (["a", "b"],)),
        ((datetime(2026, 3, 1, 13, 0, tzinfo=timezone(timedelta(hours=1))),), (T0,)),
        ((datetime(2026, 3, 1, 12, 0),), (T0,)),  # naive is taken as UTC
    ],
)
def test_equal_values_hash_equally(left: tuple, right: tuple) -> None:
    assert stable_hash(*left) == stable_hash(*right)


def test_unhashable_values_are_refused_with_the_fix() -> None:
    with pytest.raises(TypeError, match="list/tuple"):
        stable_hash(object())
    with pytest.raises(ValueError, match="NaN"):
        stable_hash(math.nan)


def test_combine_unordered_ignores_order_but_counts_members() -> None:
    hashes = [stable_hash(i) for i in range(5)]
    assert combine_unordered(hashes) == combine_unordered(reversed(hashes))
    assert combine_unordered(hashes) != combine_unordered(hashes[:4])
    assert combine_unordered(hashes) != combine_unordered(hashes + hashes[:1])
    assert combine_unordered([]) == combine_unordered([])


def _entry(**changes: object) -> MemoryEntry:
    entry = MemoryEntry(
        id="m1",
        content="Alice moved to Austin",
        category="people/alice",
        tags=("move", "city"),
        importance=0.7,
        created_at=T0,
        updated_at=T0,
        last_seen_at=T0,
        reinforcement_count=2,
    )
    return entry.with_(**changes)


def _corpus_print(e: MemoryEntry) -> str:
    return memory_entry_fingerprint(e.content, e.category, e.tags)


def _review_print(e: MemoryEntry) -> str:
    return review_fingerprint(e.content, e.category, e.tags, e.reinforcement_count, iso(e.last_seen_at))


def test_corpus_fingerprint_ignores_importance_timestamps_and_reinforcement() -> None:
    drifted = _entry(
        importance=0.1,
        updated_at=T0 + timedelta(days=3),
        last_seen_at=T0 + timedelta(days=3),
        reinforcement_count=9,
    )
    assert _corpus_print(drifted) == _corpus_print(_entry())


@pytest.mark.parametrize(
    "changes",
    [{"content": "Alice moved to Boston"}, {"category": "people/bob"}, {"tags": ("move",)}],
)
def test_corpus_fingerprint_follows_content_category_and_tags(changes: dict) -> None:
    assert _corpus_print(_entry(**changes)) != _corpus_print(_entry())


def test_tags_are_a_set_for_fingerprinting() -> None:
    assert _corpus_print(_entry(tags=("city", "move", "move"))) == _corpus_print(_entry())


def test_review_stamp_survives_importance_decay() -> None:
    decayed = _entry(importance=0.2, updated_at=T0 + timedelta(days=1))
    assert _review_print(decayed) == _review_print(_entry())


@pytest.mark.parametrize(
    "changes",
    [
        {"reinforcement_count": 3, "last_seen_at": T0 + timedelta(hours=5)},  # reinforcement
        {"reinforcement_count": 3},
        {"last_seen_at": T0 + timedelta(hours=5)},
        {"content": "Alice moved to Austin in 2026"},  # a tool edit or a merge
        {"tags": ("move", "city", "texas")},
    ],
)
def test_any_write_path_reopens_review(changes: dict) -> None:
    assert _review_print(_entry(**changes)) != _review_print(_entry())


def test_review_stamp_differs_from_the_corpus_fingerprint() -> None:
    assert _review_print(_entry()) != _corpus_print(_entry())


def test_skill_fingerprint_treats_see_also_as_a_set() -> None:
    base = skill_fingerprint("mcp/guide", "When to use which", "body", ["mcp/a", "mcp/b"])
    assert skill_fingerprint("mcp/guide", "When to use which", "body", ["mcp/b", "mcp/a"]) == base
    assert skill_fingerprint("mcp/guide", "When to use which", "body v2", ["mcp/a", "mcp/b"]) != base
    assert skill_fingerprint("mcp/guide", "When to use which", "body", ["mcp/a"]) != base


def _events(n: int) -> list[tuple[datetime, str]]:
    return [(T0 + timedelta(minutes=i), f'{{"i": {i}}}') for i in range(n)]


def test_watermark_ignores_the_oldest_event_ageing_out() -> None:
    events = _events(10)
    assert event_watermark_fingerprint(events[1:]) == event_watermark_fingerprint(events)
    assert event_watermark_fingerprint(events[5:]) == event_watermark_fingerprint(events)


def test_watermark_changes_when_an_event_is_appended() -> None:
    events = _events(10)
    later = events + [(T0 + timedelta(hours=2), '{"i": "new"}')]
    same_instant = events + [(events[-1][0], '{"i": "tie"}')]
    base = event_watermark_fingerprint(events)
    assert event_watermark_fingerprint(later) != base
    assert event_watermark_fingerprint(same_instant) != base
    assert event_watermark_fingerprint(same_instant + [(events[-1][0], '{"i": "tie"}')]) != (
        event_watermark_fingerprint(same_instant)
    )


def test_watermark_does_not_depend_on_read_order() -> None:
    events = _events(6) + [(T0 + timedelta(minutes=5), '{"i": "tie"}')]
    assert event_watermark_fingerprint(events) == event_watermark_fingerprint(list(reversed(events)))


def test_empty_log_has_a_fixed_watermark() -> None:
    assert event_watermark_fingerprint([]) == EMPTY_WATERMARK
    assert event_watermark_fingerprint(_events(1)) != EMPTY_WATERMARK
