"""Merge arithmetic and candidate gating of memory consolidation, as pure functions (spec "Temporal-field arithmetic
on merge" and "Candidate gating")."""

from __future__ import annotations

import json
from datetime import timedelta

import pytest

from dream_assets.model import MemoryEntry
from dream_assets.passes.memory_consolidation.merge import (
    build_merged_entry,
    merge_subject_time,
    rejected_cluster_id,
)
from dream_assets.passes.memory_consolidation.select import (
    CLUSTER_LEFT_AT_KEY,
    CLUSTER_SET_KEY,
    REVIEWED_KEY,
    cluster_set_id,
    review_hash,
    select_candidates,
)
from dream_assets.text.similarity import DuplicateClusters

from ..conftest import NOW


def entry(
    ident: str,
    content: str = "A fact.",
    *,
    reinforced: int = 1,
    seen_days: float = 1,
    created_days: float = 10,
    importance: float = 0.5,
    metadata: dict | None = None,
    reviewed: bool = False,
) -> MemoryEntry:
    e = MemoryEntry(
        id=ident,
        content=content,
        category="facts",
        tags=(),
        importance=importance,
        created_at=NOW - timedelta(days=created_days),
        updated_at=NOW,
        last_seen_at=NOW - timedelta(days=seen_days),
        reinforcement_count=reinforced,
        metadata=dict(metadata or {}),
    )
    return e.with_(metadata={**e.metadata, REVIEWED_KEY: review_hash(e)}) if reviewed else e


# ----------------------------------------------------------------------------------------------- subject time
@pytest.mark.parametrize(
    "sources,expected",
    [
        ([{}, {}], {}),
        ([{"subjectTime": "2026-05-12"}, {}], {"subjectTime": "2026-05-12"}),
        # A point prefers the most specific of compatible values.
        ([{"subjectTime": "2026-05"}, {"subjectTime": "2026-05-12"}], {"subjectTime": "2026-05-12"}),
        (
            [{"subjectTime": "2026-05-12"}, {"subjectTime": "2026-05-12T09:30:00+02:00"}],
            {"subjectTime": "2026-05-12T07:30:00Z"},
        ),
        # Ranges widen.
        (
            [
                {"subjectTimeStart": "2026-05-12", "subjectTimeEnd": "2026-05-14"},
                {"subjectTimeStart": "2026-05-11", "subjectTimeEnd": "2026-05-13"},
            ],
            {"subjectTimeStart": "2026-05-11", "subjectTimeEnd": "2026-05-14"},
        ),
        # A month as an end bound reaches to the month's end.
        (
            [
                {"subjectTimeStart": "2026-04-01", "subjectTimeEnd": "2026-05"},
                {"subjectTimeStart": "2026-04-03", "subjectTimeEnd": "2026-05-20"},
            ],
            {"subjectTimeStart": "2026-04-01", "subjectTimeEnd": "2026-05"},
        ),
        # Distinct moments are never collapsed onto one of them: they become an honest range.
        (
            [{"subjectTime": "2026-09-14"}, {"subjectTime": "2026-02-03"}],
            {"subjectTimeStart": "2026-02-03", "subjectTimeEnd": "2026-09-14"},
        ),
        # A point outside a source's range widens the range; the point itself is kept.
        (
            [
                {"subjectTime": "2026-05-20"},
                {"subjectTimeStart": "2026-05-11", "subjectTimeEnd": "2026-05-16"},
            ],
            {"subjectTime": "2026-05-20", "subjectTimeStart": "2026-05-11", "subjectTimeEnd": "2026-05-20"},
        ),
        # Free text that cannot be ordered is kept whole rather than guessed.
        (
            [{"subjectTime": "last summer"}, {"subjectTime": "spring 2025"}],
            {"subjectTime": "last summer / spring 2025"},
        ),
    ],
)
def test_subject_time_merge(sources, expected):
    assert merge_subject_time(sources) == expected


# ----------------------------------------------------------------------------------------------- merged entry
def test_merged_entry_takes_its_temporal_fields_from_the_sources():
    a = entry(
        "a",
        reinforced=214,
        seen_days=40,
        created_days=400,
        importance=0.3,
        metadata={"decayAppliedThrough": "2026-09-01T00:00:00Z", "origin": "import"},
    )
    b = entry(
        "b",
        reinforced=2,
        seen_days=3,
        created_days=20,
        importance=0.6,
        metadata={"decayAppliedThrough": "not a time"},
    )
    merged = build_merged_entry(
        [a, b], entry_id="m", content="  Merged.  ", category="facts", tags=["x", "x", " y "], now=NOW
    )
    assert (merged.created_at, merged.last_seen_at) == (NOW - timedelta(days=400), NOW - timedelta(days=3))
    assert merged.reinforcement_count == 216 and merged.importance == 0.6 and merged.updated_at == NOW
    assert merged.content == "Merged." and merged.tags == ("x", "y")
    assert merged.metadata == {
        "mergedFrom": json.dumps(["a", "b"]),
        "mergedAt": "2026-11-30T12:00:00Z",
        "decayAppliedThrough": "2026-09-01T00:00:00Z",
        "userCorrection": "false",  # the host's decision: no source is a user correction
    }


def test_rejected_cluster_id_ignores_order_and_repeats():
    assert rejected_cluster_id(["b", "a"]) == rejected_cluster_id(["a", "b", "a"]) != rejected_cluster_id(["a", "c"])


# ----------------------------------------------------------------------------------------------- gating
def clusters(*groups: list[str]):
    return lambda: DuplicateClusters(clusters=[list(g) for g in groups], method="tfidf", pairs=len(groups))


def test_only_new_changed_and_open_cluster_members_are_eligible():
    left_apart = {CLUSTER_SET_KEY: cluster_set_id(["r2", "r3"]), CLUSTER_LEFT_AT_KEY: "2026-01-01T00:00:00Z"}
    live = [
        entry("r1", reviewed=True),
        entry("r2", reviewed=True, metadata=left_apart),
        entry("r3", reviewed=True, metadata=left_apart),
        entry("r4", reviewed=True),
        entry("new"),
    ]
    sel = select_candidates(live, clusters(["r1", "new"], ["r2", "r3"]))
    assert list(sel.eligible) == ["r1", "new"]
    assert sel.clusters == [["r1", "new"]] and sel.settled_clusters == 1 and sel.withheld == 3


def test_a_changed_stamp_counts_as_unreviewed():
    stale = entry("s", reviewed=True).with_(reinforcement_count=2)
    sel = select_candidates([stale, entry("r", reviewed=True)], clusters())
    assert list(sel.eligible) == ["s"] and sel.unreviewed == 1


def test_scan_failure_degrades_to_unreviewed_only():
    def boom():
        raise RuntimeError("index unavailable")

    sel = select_candidates([entry("r", reviewed=True), entry("n")], boom)
    assert list(sel.eligible) == ["n"] and sel.clusters == [] and "scan failed" in sel.warnings[0]


def test_a_busy_or_damaged_store_during_the_scan_is_not_degraded_around():
    from dream_assets.store.connection import StoreBusy

    def busy():
        raise StoreBusy("store.duckdb is held by another process")

    with pytest.raises(StoreBusy):
        select_candidates([entry("r", reviewed=True), entry("n")], busy)
