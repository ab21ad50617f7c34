"""What a search reads: the rows of its first places, and below them only the rows of entries that say they are a
later version of a fact (store/recall.py ``rows_needed``), which the recall index keeps track of. The answer is the one
reading every candidate gives, whatever the entries are: change words, user corrections by tag, by metadata or by the
host's recorded decision, restored superseded entries whose successor ranks further down, archived entries."""

from __future__ import annotations

import random
from datetime import timedelta

import pytest

from dream_assets import recall_index as recall
from dream_assets.model import MemoryEntry
from dream_assets.save_pipeline import save_memory
from dream_assets.store.connection import StoreConnection
from dream_assets.store.memory import MemoryStore
from dream_assets.store.recall import SUPERSEDED_BY_KEY, candidate_count, later_version, rank
from dream_assets.store.standing import STANDING_KEY
from dream_assets.text.tokens import tokenize
from dream_assets_tests.conftest import NOW

WORDS = ["manager", "lisbon", "team", "office", "budget", "coffee", "standup", "report"]


def read_everything(memories: MemoryStore, query: str, limit: int) -> list[tuple[str, float]]:
    """The search as it was before it read selectively: every candidate's row read, then ranked."""
    tokens = tokenize(query)
    index = recall.of(memories)
    with memories.connection.session() as conn:
        index.ensure(conn)
        hits = index.bm25.search(tokens, limit=candidate_count(limit, memories.options))
        by_id = {e.id: e for e in memories.cached_rows(conn, [h for h, _ in hits])}
    live = [(by_id[h], s) for h, s in hits if h in by_id and not by_id[h].is_archived]
    return [(e.id, s) for e, s in rank(live, tokens, memories.options, limit)]


def searched(memories: MemoryStore, query: str, limit: int) -> list[tuple[str, float]]:
    return [(e.id, s) for e, s in recall.search(memories, query, limit=limit)]


def expected_later(memories: MemoryStore) -> set[str]:
    return {e.id for e in memories.list_live() if later_version(e.content, e.category, e.tags, e.metadata)}


def hostile_corpus(memories: MemoryStore, rng: random.Random) -> list[MemoryEntry]:
    """Entries over few words (long runs of candidates, ties in score), a share of them later versions by each sign
    there is, or carrying a decision that withdraws the sign; some restored superseded entries; some archived."""
    saved = []
    for i in range(300):
        words = rng.sample(WORDS, rng.randint(1, 3))
        text = " ".join(words)
        kind = rng.random()
        metadata, tags, category = {}, [], rng.choice(["people/work", "notes"])
        if kind < 0.08:
            text += " moved now"
        elif kind < 0.12:
            tags = ["user-correction"]
        elif kind < 0.16:
            metadata = {"source": "user"}
        elif kind < 0.19:
            metadata = {"feedbackKind": "Correction"}
        elif kind < 0.22:
            metadata, tags = {STANDING_KEY: "false"}, ["user-correction"]  # the host's decision withdraws the tag
        elif kind < 0.24:
            category, tags = "feedback/from-user", ["correction"]
        entry = save_memory(
            memories,
            f"{text} {i % 7}",
            category=category,
            metadata=metadata,
            tags=tags,
            now=NOW - timedelta(days=rng.randint(0, 300)),
            dedupe=False,
        ).entry
        saved.append(entry)
    for loser in rng.sample(saved, 12):  # restored superseded entries naming a successor that may rank anywhere
        winner = rng.choice(saved)
        if winner.id != loser.id:
            memories.update(loser.id, metadata={**loser.metadata, SUPERSEDED_BY_KEY: winner.id}, now=NOW)
    for gone in rng.sample(saved, 25):
        memories.archive(gone.id, now=NOW)
    return saved


QUERIES = [" ".join(pair) for pair in zip(WORDS, WORDS[1:], strict=False)] + WORDS + ["manager lisbon team office"]


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_a_search_answers_as_reading_every_candidate_would(store, seed):
    memories = store.memories
    hostile_corpus(memories, random.Random(seed))
    assert recall.of(memories).later == expected_later(memories)
    # Metadata written later can grant the standing or withdraw it: the index follows.
    plain = next(e for e in memories.list_live() if not e.metadata and not e.tags and "moved" not in e.content)
    marked = next(e for e in memories.list_live() if e.metadata.get("source") == "user")
    memories.set_metadata({plain.id: {"source": "user"}, marked.id: {STANDING_KEY: "false"}})
    assert plain.id in recall.of(memories).later and marked.id not in recall.of(memories).later
    assert recall.of(memories).later == expected_later(memories)
    for query in QUERIES:
        for limit in (1, 3, 10, 15, 25):
            assert searched(memories, query, limit) == read_everything(memories, query, limit), (query, limit)


def test_a_process_that_loads_the_index_file_or_catches_up_on_another_process_keeps_the_same_later_versions(
    store, profile, options
):
    rng = random.Random(4)
    hostile_corpus(store.memories, rng)
    recall.search(store.memories, "manager")
    assert recall.persist(store.memories)
    # Writes the file does not hold: a correction by metadata, a change word taken out, one archived.
    fresh = save_memory(
        store.memories, "manager team", category="people/work", metadata={"source": "user"}, now=NOW
    ).entry
    changed = next(e for e in store.memories.list_live() if "moved now" in e.content)
    store.memories.update(changed.id, content="manager office plain", now=NOW)
    expected = expected_later(store.memories)
    assert fresh.id in expected and changed.id not in expected
    store.close()
    conn = StoreConnection(profile.store_path, profile.store_lock_path, timeout_s=30)
    try:
        memories = MemoryStore(conn, options)
        recall.prepare(memories)
        index = recall.of(memories)
        assert index.changes_since_file is not None  # loaded from the file, then caught up
        assert index.later == expected
        for query in QUERIES:
            assert searched(memories, query, 10) == read_everything(memories, query, 10), query
    finally:
        conn.close()


def test_a_search_reads_no_row_below_its_first_places_unless_an_entry_there_says_it_is_a_later_version(store):
    memories = store.memories
    for i in range(15):  # fifteen answers outscore the longer one saved below, which ranks 16th of 20 candidates
        save_memory(memories, f"Manager note {i}.", category="notes", now=NOW - timedelta(days=i), dedupe=False)
    recall.search(memories, "manager")  # builds the index
    memories.forget_cached_rows()
    before = memories.rows_read
    assert len(recall.search(memories, "manager", limit=10)) == 10
    assert memories.rows_read - before == 10
    moved = "My manager moved to Lisbon and is now based there with the whole team of the office."
    save_memory(memories, moved, category="people/work", now=NOW, dedupe=False)
    memories.forget_cached_rows()
    before = memories.rows_read
    assert recall.search(memories, "manager", limit=20)[-1][0].content == moved
    memories.forget_cached_rows()
    before = memories.rows_read
    recall.search(memories, "manager", limit=10)
    assert memories.rows_read - before == 11  # the one that says it moved, from further down


def test_a_restored_superseded_entry_goes_below_its_successor_when_that_ranks_below_the_first_places(store):
    memories = store.memories
    for i in range(12):
        save_memory(memories, f"Manager note {i}.", category="notes", now=NOW, dedupe=False)
    successor = save_memory(
        memories, "The manager of the platform team is Ana Ruiz, in the Lisbon office.", category="people", now=NOW
    ).entry
    loser = save_memory(memories, "Manager.", category="people", now=NOW - timedelta(days=9), dedupe=False).entry
    memories.update(loser.id, metadata={SUPERSEDED_BY_KEY: successor.id}, now=NOW)  # restored by hand
    assert successor.id not in recall.of(memories).later
    everything = read_everything(memories, "manager", 20)
    assert [mid for mid, _ in everything].index(loser.id) > 10  # BM25 put it first; rule 3 moved it down
    found = searched(memories, "manager", 10)
    assert found == read_everything(memories, "manager", 10)
    assert loser.id not in {mid for mid, _ in found}
