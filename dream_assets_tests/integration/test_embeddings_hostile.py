"""A broken embeddings endpoint — the same vector for every text, all-zero vectors, vectors of another size, too few
vectors, NaN — never merges unrelated saves and never poisons the cache: the batch is refused before use and before
caching, saves fall back to the lexical measure and say so, and once the endpoint is fixed embeddings work again.
A save-time extend is a change row that ``dream undo`` reverts.

Against the real OpenAI-compatible test server on 127.0.0.1 and real DuckDB stores under tmp_path."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import timedelta

import numpy as np
import pytest

from dream_assets.cli import main
from dream_assets.llm.embedding_index import EmbeddingIndex
from dream_assets.llm.embeddings import DegenerateEmbeddings, EmbeddingError, build_embedding_provider
from dream_assets.options import DreamOptions
from dream_assets.options_loader import dream_options
from dream_assets.profile import AgentProfile
from dream_assets.save_pipeline import SAVE_EMBEDDING_PAUSE, save_memory
from dream_assets.store import open_store
from dream_assets.store.connection import close_all
from dream_assets.store.embeddings import EmbeddingCache, content_hash
from dream_assets_tests.conftest import NOW
from dream_assets_tests.openai_server import HOSTILE_EMBEDDINGS, OpenAITestServer, hostile_embeddings

MODEL = "test-embedding"
FACTS = [
    "The user drinks green tea in the afternoon.",
    "Invoices are due on the 5th of each month.",
    "Standup is at 9:30 on weekdays.",
    "Jon plays the piano every evening.",
    "The robotics team meets on Fridays.",
    "Priya prefers email over phone calls.",
    "The staging database runs PostgreSQL 16.",
    "Mia has a violin lesson every Thursday.",
    "The office plants are watered on Mondays.",
    "Backups of the wiki run nightly at 02:00.",
]
SAVES = [
    "The cat sleeps on the sofa near the window.",
    "Quarterly taxes go to the accountant Dana Whitfield.",
    "The user's bicycle needs new brake pads.",
    "Lunch orders close at 11:15 on Wednesdays.",
    "The Lisbon trip is booked for late September.",
    "Kestrel releases ship with a changelog link.",
    "The printer on floor 3 jams with thick paper.",
    "Ana collects vintage postcards from Porto.",
    "Heron load tests run against staging.",
    "The garden hose leaks at the tap connector.",
]
MOVE = "Jon moved to Berlin in May 2023 for a job at a robotics startup."
MOVE_MORE = MOVE + " He cycles to Kreuzberg."


@pytest.fixture
def server() -> Iterator[OpenAITestServer]:
    with OpenAITestServer() as s:
        yield s


def _options(server: OpenAITestServer) -> DreamOptions:
    return dream_options().replace(
        LexicalSimilarityMeasure="tfidf",
        LlmTimeout=timedelta(seconds=2),
        LlmMaxRetries=0,
        EmbeddingModel=MODEL,
        EmbeddingBaseUrl=server.base_url,
    )


def _store(tmp_path, server, name="agent"):
    store = open_store(AgentProfile(tmp_path / "agents" / name).ensure(), _options(server))
    for n, text in enumerate(FACTS):
        save_memory(store.memories, text, now=NOW + timedelta(seconds=n), dedupe=False)
    return store


@pytest.mark.parametrize("kind", HOSTILE_EMBEDDINGS)
def test_a_broken_endpoint_merges_nothing_caches_nothing_and_saves_say_the_lexical_measure_was_used(
    tmp_path, server, kind
):
    store = _store(tmp_path, server)
    cache = EmbeddingCache(store.connection)
    if kind == "wrong-dimension":  # only wrong against vectors cached before: cache the corpus while it is healthy
        warm = save_memory(store.memories, MOVE, now=NOW + timedelta(minutes=1))
        assert warm.action == "created" and cache.count(MODEL) > 0
    cached = cache.count(MODEL)
    before = {e.id: e.content for e in store.memories.list_live()}
    server.embeddings = hostile_embeddings(kind)
    results = [
        save_memory(store.memories, text, now=NOW + timedelta(minutes=10, seconds=n)) for n, text in enumerate(SAVES)
    ]
    assert [r.action for r in results] == ["created"] * len(SAVES)  # nothing appended to an unrelated entry
    assert {i: store.memories.get(i).content for i in before} == before
    # Each save that had candidates to compare says it fell back (a save with none needs no vector at all).
    assert sum("the lexical measure was used" in (r.reason or "") for r in results) >= len(SAVES) // 2
    assert cache.count(MODEL) == cached  # no vector of the broken endpoint was kept

    # The endpoint is fixed: after the pause, saves measure by embeddings again and find the restatement.
    server.embeddings = None
    later = NOW + timedelta(minutes=10) + SAVE_EMBEDDING_PAUSE + timedelta(minutes=1)
    if kind != "wrong-dimension":
        assert save_memory(store.memories, MOVE, now=later).action == "created"
    extended = save_memory(store.memories, MOVE_MORE, now=later + timedelta(seconds=1))
    assert extended.action == "extended" and "lexical" not in (extended.reason or "")
    store.close()


def test_identical_vectors_are_refused_by_the_provider_before_anything_uses_them(server):
    server.embeddings = hostile_embeddings("identical")
    provider = build_embedding_provider(_options(server))
    with pytest.raises(DegenerateEmbeddings, match="the same vector .* for obviously different texts"):
        provider.embed(SAVES[:3])
    server.embeddings = hostile_embeddings("zero")
    with pytest.raises(DegenerateEmbeddings, match="all-zero"):
        provider.embed(SAVES[:1])
    server.embeddings = hostile_embeddings("non-finite")
    with pytest.raises(EmbeddingError, match="NaN or infinity"):
        provider.embed(SAVES[:1])


def test_poisoned_vectors_cached_before_they_were_checked_are_dropped_and_embedded_again(tmp_path, server):
    store = _store(tmp_path, server)
    cache = EmbeddingCache(store.connection)
    same = np.ones((len(FACTS), 8), dtype=np.float32) / np.sqrt(8)
    cache.put(MODEL, [content_hash(t) for t in FACTS], same, now=NOW)
    index = EmbeddingIndex(store, build_embedding_provider(_options(server)), now=NOW)
    vectors = index.embed_texts(FACTS)
    assert index.embedded == len(FACTS)  # every poisoned vector was fetched again from the (healthy) endpoint
    assert vectors.shape[1] != 8 and float(vectors[0] @ vectors[1]) < 0.9
    assert {cache.get(MODEL, [content_hash(FACTS[0])])[content_hash(FACTS[0])].shape[0]} == {vectors.shape[1]}
    store.close()


def test_a_save_time_extend_is_recorded_and_dream_undo_puts_the_entry_back(tmp_path, server):
    store = _store(tmp_path, server)
    first = save_memory(store.memories, MOVE, now=NOW + timedelta(minutes=1))
    extended = save_memory(store.memories, MOVE_MORE, now=NOW + timedelta(minutes=2))
    assert extended.action == "extended" and extended.change_cycle
    (row,) = store.changes.list(extended.change_cycle)
    assert (row.pass_name, row.kind, row.target_id) == ("save", "updated", first.entry.id)
    profile_root = store.profile.root
    store.close()
    close_all()
    code = main(
        [
            "undo",
            "--profile",
            str(profile_root),
            "--cycle",
            extended.change_cycle,
            "--now",
            (NOW + timedelta(hours=1)).isoformat(),
        ]
    )
    assert code == 0
    again = open_store(AgentProfile(profile_root))
    assert again.memories.get(first.entry.id).content == MOVE
    again.close()


# ---------------------------------------------------------------- nothing cached yet for the model
def test_with_nothing_cached_a_wrong_size_is_refused_where_embedding_dimensions_fixes_the_size(tmp_path, server):
    """A store that has never cached a vector of the model has nothing to compare the size with: with
    EmbeddingDimensions set, the first answer of another size is refused before anything uses or caches it, saves
    fall back and say so, and a right-sized answer is used once the endpoint is fixed."""
    profile = AgentProfile(tmp_path / "agents" / "agent").ensure()
    options = _options(server).replace(EmbeddingDimensions=256)
    store = open_store(profile, options)
    for n, text in enumerate(FACTS):
        save_memory(store.memories, text, now=NOW + timedelta(seconds=n), dedupe=False)
    cache = EmbeddingCache(store.connection)
    assert cache.count(MODEL) == 0
    server.embeddings = hostile_embeddings("wrong-dimension")
    with pytest.raises(EmbeddingError, match="not the 256 of EmbeddingDimensions"):
        build_embedding_provider(options).embed(SAVES[:2])
    results = [
        save_memory(store.memories, text, now=NOW + timedelta(minutes=10, seconds=n)) for n, text in enumerate(SAVES)
    ]
    assert [r.action for r in results] == ["created"] * len(SAVES)
    assert sum("the lexical measure was used" in (r.reason or "") for r in results) >= len(SAVES) // 2
    assert cache.count(MODEL) == 0  # no vector of the wrong size fixed the model's size

    server.embeddings = None
    later = NOW + timedelta(minutes=10) + SAVE_EMBEDDING_PAUSE + timedelta(minutes=1)
    assert save_memory(store.memories, MOVE, now=later).action == "created"
    extended = save_memory(store.memories, MOVE_MORE, now=later + timedelta(seconds=1))
    assert extended.action == "extended" and "lexical" not in (extended.reason or "")
    assert cache.dims(MODEL) == {256}
    store.close()


def test_cached_vectors_of_another_size_than_embedding_dimensions_are_dropped_and_embedded_again(tmp_path, server):
    store = _store(tmp_path, server)
    cache = EmbeddingCache(store.connection)
    short = np.eye(len(FACTS), 16, dtype=np.float32)  # distinct unit vectors, but of a size the model does not have
    cache.put(MODEL, [content_hash(t) for t in FACTS], short, now=NOW)
    index = EmbeddingIndex(store, build_embedding_provider(_options(server).replace(EmbeddingDimensions=256)), now=NOW)
    vectors = index.embed_texts(FACTS)
    assert index.embedded == len(FACTS) and vectors.shape == (len(FACTS), 256)
    assert cache.dims(MODEL) == {256}
    store.close()


def test_a_first_batch_of_one_text_is_probed_so_a_degenerate_endpoint_is_refused_before_it_is_cached(tmp_path, server):
    """One text alone cannot show that an endpoint gives every text the same vector; with nothing cached for the
    model two obviously different probe texts go with it, so the endpoint is refused before its first vector fixes
    the model's size and poisons the cache. The probe texts are never cached, and a healthy endpoint costs no extra
    request."""
    store = _store(tmp_path, server)
    cache = EmbeddingCache(store.connection)
    server.embeddings = hostile_embeddings("identical")
    index = EmbeddingIndex(store, build_embedding_provider(_options(server)), now=NOW)
    with pytest.raises(DegenerateEmbeddings, match="the same vector"):
        index.embed_texts([MOVE])
    assert cache.count(MODEL) == 0

    server.embeddings = None
    requests = len(server.embedding_requests)
    index = EmbeddingIndex(store, build_embedding_provider(_options(server)), now=NOW)
    assert index.embed_texts([MOVE]).shape == (1, 256)
    assert len(server.embedding_requests) == requests + 1 and index.embedded == 1
    assert server.embedding_requests[-1].body["input"][0] == MOVE
    assert cache.count(MODEL) == 1  # the text's vector, not the probes'
    index.embed_texts([MOVE_MORE])  # the model's size is known now: no probe
    assert server.embedding_requests[-1].body["input"] == [MOVE_MORE]
    store.close()
