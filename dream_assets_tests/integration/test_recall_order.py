"""Recall that knows what is current: search puts the newest version of a fact, or the user's correction, before the
stale one while both are live (before the contradiction sweep has seen them), never returns an archived entry, ranks
a restored superseded entry below its successor, and weighs recency and reinforcement only as configured."""

from __future__ import annotations

from datetime import timedelta

import pytest

from dream_assets import recall_index as recall
from dream_assets.options import OptionsError
from dream_assets.options_loader import dream_options, load_options
from dream_assets.save_pipeline import save_memory
from dream_assets.store import open_store
from dream_assets_tests.conftest import NOW


def save(store, content, *, days_ago, category="people/work", metadata=None, tags=()):
    return save_memory(
        store.memories,
        content,
        category=category,
        metadata=metadata or {},
        tags=tags,
        now=NOW - timedelta(days=days_ago),
        dedupe=False,
    ).entry


def contents(store, query, limit=10):
    return [e.content for e, _ in recall.search(store.memories, query, limit=limit)]


def test_the_later_fact_ranks_first_while_both_are_live_whichever_words_score_higher(store):
    save(store, "My manager is Tom Becker.", days_ago=60)
    save(store, "My manager is Priya Shah since 2026-11-01.", days_ago=20)
    save(store, "The team meets on Mondays.", days_ago=10)
    assert contents(store, "Who is my manager?") == [
        "My manager is Priya Shah since 2026-11-01.",
        "My manager is Tom Becker.",
    ]
    # Asked for the one best answer, the current version still comes back.
    assert contents(store, "Who is my manager?", limit=1) == ["My manager is Priya Shah since 2026-11-01."]


def test_a_version_from_below_the_results_never_pushes_out_another_answer(store):
    # Nine notes of another category outscore both manager facts: ten results hold the stale fact, not its successor.
    for i in range(9):
        save(store, f"Manager {i}.", days_ago=30, category="notes")
    save(store, "My manager is Tom Becker.", days_ago=60)
    save(store, "My manager is Priya Shah since 2026-11-01 and she sits in Lisbon.", days_ago=20)
    found = contents(store, "manager", limit=14)
    assert found.index("My manager is Priya Shah since 2026-11-01 and she sits in Lisbon.") < found.index(
        "My manager is Tom Becker."
    )
    top = contents(store, "manager", limit=10)
    assert len(top) == 10 and top[-1] == "My manager is Tom Becker."
    assert "My manager is Priya Shah since 2026-11-01 and she sits in Lisbon." not in top


def test_a_version_that_says_it_changed_takes_the_stale_ones_place_from_below_the_results(store):
    # BM25 puts the longer successor below ten other answers; it says a change ("moved", "now"), so it is looked for
    # further down and takes the place of the stale fact it replaces, which drops out of the ten.
    for i in range(9):
        save(store, f"Manager {i}.", days_ago=30, category="notes")
    save(store, "My manager is Tom Becker.", days_ago=60)
    moved = "My manager is now Priya Shah since 2026-11-01, and she moved the team to Lisbon."
    save(store, moved, days_ago=20)
    top = contents(store, "manager", limit=10)
    assert len(top) == 10 and top[-1] == moved and "My manager is Tom Becker." not in top
    assert top[:9] == contents(store, "manager", limit=9)  # the other answers keep their places
    # An older entry that says a change is no later version: the plain fact saved after it comes first.
    save(store, "My manager is Ana Ruiz.", days_ago=5)
    found = contents(store, "manager", limit=12)
    assert found.index("My manager is Ana Ruiz.") < found.index(moved) < found.index("My manager is Tom Becker.")


def test_it_is_the_time_not_the_wording_that_decides(store):
    # The same two texts saved in the other order: the shorter one is now the later fact, and it comes first.
    save(store, "My manager is Priya Shah since 2026-11-01.", days_ago=60)
    save(store, "My manager is Tom Becker.", days_ago=20)
    assert contents(store, "Who is my manager?")[0] == "My manager is Tom Becker."


def test_a_user_correction_ranks_above_the_agents_later_claim(store):
    save(
        store,
        "Caroline's birthday is on March 12, not March 5.",
        days_ago=90,
        category="people/caroline",
        metadata={"feedbackKind": "Correction"},
    )
    save(store, "Caroline's birthday is on March 5.", days_ago=5, category="people/caroline")
    assert contents(store, "When is Caroline's birthday?")[0] == "Caroline's birthday is on March 12, not March 5."
    # The tag form of a user correction counts the same.
    save(store, "Caroline's office is in room 4.", days_ago=3, category="people/caroline")
    save(store, "Caroline's office is in room 12.", days_ago=80, category="people/caroline", tags=("user-correction",))
    assert contents(store, "Caroline's office room")[0] == "Caroline's office is in room 12."


def test_subject_time_outranks_save_time(store):
    save(store, "Ana lives in Porto.", days_ago=200, category="people/ana", metadata={"subjectTime": "2026-09"})
    # Saved later, but about an earlier moment.
    save(store, "Ana lives in Lisbon.", days_ago=2, category="people/ana", metadata={"subjectTime": "2024-03"})
    assert contents(store, "Where Ana lives")[0] == "Ana lives in Porto."


def test_facts_that_answer_other_words_or_other_categories_keep_the_bm25_order(store):
    save(store, "Tom Becker plays chess on Sundays.", days_ago=60, category="people/tom")
    save(store, "Tom Becker likes tea.", days_ago=1, category="hobbies")
    plain = [e.content for e, _ in recall.search(store.memories, "Tom Becker chess", limit=10)]
    assert plain == ["Tom Becker plays chess on Sundays.", "Tom Becker likes tea."]


def test_archived_entries_are_never_returned_and_a_restored_loser_ranks_below_its_successor(store):
    old = save(store, "Ben works as a nurse.", days_ago=100, category="people/ben")
    new = save(store, "Ben left the nurse job and now works as a barista.", days_ago=10, category="people/ben")
    store.memories.supersede(old.id, new.id, now=NOW, reason="changed jobs")
    assert contents(store, "Ben works as a nurse") == ["Ben left the nurse job and now works as a barista."]
    # Archived in another process's view of the file too: a second store on the same profile sees the archive.
    other = open_store(store.profile, dream_options())
    try:
        assert [e.id for e, _ in recall.search(other.memories, "Ben nurse")] == [new.id]
    finally:
        other.close()
    # Restored by hand, it still says who superseded it, and ranks right below that entry.
    store.memories.restore(old.id, now=NOW)
    assert [e.id for e, _ in recall.search(store.memories, "Ben nurse", limit=10)] == [new.id, old.id]
    store.memories.archive(new.id, now=NOW)
    assert [e.id for e, _ in recall.search(store.memories, "Ben nurse", limit=10)] == [old.id]


def test_scores_never_rise_down_the_list_ties_break_by_id_and_the_limit_holds(store):
    for i in range(30):
        save(store, f"Project note {i:02d}: the deploy checklist has a step.", days_ago=30, category="notes")
    hits = recall.search(store.memories, "deploy checklist", limit=7)
    assert len(hits) == 7
    scores = [s for _, s in hits]
    assert scores == sorted(scores, reverse=True)
    again = recall.search(store.memories, "deploy checklist", limit=7)
    assert [e.id for e, _ in again] == [e.id for e, _ in hits]
    assert recall.search(store.memories, "deploy checklist", limit=0) == []
    assert recall.search(store.memories, "nothing matches this", limit=5) == []


def test_recency_and_reinforcement_weigh_only_when_configured(profile):
    def ranked(options):
        store = open_store(profile, options)
        try:
            return [e.content for e, _ in recall.search(store.memories, "budget review", limit=10)]
        finally:
            store.close()

    store = open_store(profile, dream_options())
    try:
        # Different words about one topic (not versions of one fact): the shorter text scores higher by BM25.
        save_memory(store.memories, "Budget review notes.", category="finance", now=NOW - timedelta(days=300))
        seen = save_memory(
            store.memories,
            "The quarterly budget review with the finance team is on Friday.",
            category="planning",
            now=NOW,
        ).entry
    finally:
        store.close()
    assert ranked(dream_options(RecallRecencyWeight=0.0, RecallReinforcementWeight=0.0)) == [
        "Budget review notes.",
        "The quarterly budget review with the finance team is on Friday.",
    ]
    assert ranked(dream_options(RecallRecencyWeight=2.0))[0] == seen.content
    assert ranked(dream_options(RecallRecencyWeight=2.0, RecallRecencyHalfLife=timedelta(days=100_000)))[0] == (
        "Budget review notes."
    )
    store = open_store(profile, dream_options())
    try:
        for day in range(1, 6):
            store.memories.reinforce(seen.id, now=NOW - timedelta(days=400 + day))
    finally:
        store.close()
    assert ranked(dream_options(RecallReinforcementWeight=2.0))[0] == seen.content


@pytest.mark.parametrize(
    "key, value",
    [("RecallRecencyWeight", "-1"), ("RecallReinforcementWeight", "-0.5"), ("RecallRecencyHalfLife", "PT0S")],
)
def test_the_recall_options_refuse_values_without_a_meaning(key, value):
    with pytest.raises(OptionsError, match=key):
        load_options(env={f"DREAM__{key}": value})
