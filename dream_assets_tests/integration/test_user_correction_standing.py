"""User-correction standing is the host's: a consolidation merge is a user correction exactly when one of its sources
was, whatever tags the model gives it, and a contradiction sweep then never lets an agent claim supersede it."""

from __future__ import annotations

import pytest

from dream_assets.passes.contradiction_sweep import judge
from dream_assets.passes.memory_consolidation.merge import fold_into
from dream_assets.store.standing import STANDING_KEY, USER_CORRECTION_TAG, is_user_correction

from ..conftest import NOW
from .test_memory_consolidation import Run, answer, created, entry, live_ids, merge

CORRECTION = {"feedbackKind": "Correction"}


@pytest.fixture
def run(profile, store) -> Run:
    return Run(profile, store)


def _supersedes(winner, loser) -> bool:
    shown = {winner.id: winner, loser.id: loser}
    (verdict,) = judge([(winner.id, loser.id, "")], shown, set(shown), offered={frozenset(shown)})
    return verdict.accepted


def test_a_merge_the_model_tags_as_a_user_correction_is_not_one(run, store):
    store.memories.put_many(
        [
            entry("c1", "Alice lives in Paris near the Louvre."),
            entry("c2", "Alice lives in Paris, near the Louvre!"),
            entry("fix", "Alice lives in Lyon near the Louvre museum copy.", metadata=CORRECTION),
        ]
    )
    before = live_ids(store)
    report = run(answer(merge("Alice lives in Paris near the Louvre.", "c1", "c2", tags=[USER_CORRECTION_TAG])))
    assert report.counts["merged"] == 1
    (merged,) = created(store, before)
    assert not is_user_correction(merged)
    assert USER_CORRECTION_TAG not in merged.tags and merged.metadata[STANDING_KEY] == "false"
    # The forged claim cannot supersede the real correction.
    assert not _supersedes(merged, store.memories.get("fix"))


def test_a_correction_merged_with_its_restatement_keeps_its_standing(run, store):
    store.memories.put_many(
        [
            entry("fix", "Alice lives in Lyon, not Paris.", metadata=CORRECTION),
            entry("again", "Alice lives in Lyon, not Paris!"),
            entry("claim", "Alice lives in Paris again, near the Louvre.", metadata={"subjectTime": "2026-11"}),
        ]
    )
    before = live_ids(store)
    # The model drops the source's tags and metadata: the merged entry is still the user's correction.
    report = run(answer(merge("Alice lives in Lyon, not Paris.", "fix", "again", tags=["people"])))
    assert report.counts["merged"] == 1
    (merged,) = created(store, before)
    assert is_user_correction(merged)
    assert USER_CORRECTION_TAG in merged.tags and merged.metadata[STANDING_KEY] == "true"
    assert not _supersedes(store.memories.get("claim"), merged)


def test_a_fold_is_a_user_correction_exactly_when_keeper_or_a_source_was():
    agent = entry("agent", "Alice lives in Lyon.")
    fix = entry("fix", "Alice lives in Lyon.", metadata=CORRECTION)
    assert is_user_correction(fold_into(agent, [fix], now=NOW))
    assert is_user_correction(fold_into(fix, [agent], now=NOW))
    forged = fold_into(agent, [entry("other", "Alice lives in Lyon!")], tags=[USER_CORRECTION_TAG], now=NOW)
    assert not is_user_correction(forged) and USER_CORRECTION_TAG not in forged.tags


def test_a_new_entry_the_model_proposes_never_carries_the_standing(run, store):
    store.memories.put_many([entry("k", "Kestrel ships on Fridays."), entry("h", "Heron tests run on Mondays.")])
    before = live_ids(store)
    run(answer({"content": "Alice lives in Marseille.", "category": "people", "tags": [USER_CORRECTION_TAG]}))
    (new,) = created(store, before)
    assert not is_user_correction(new) and USER_CORRECTION_TAG not in new.tags
