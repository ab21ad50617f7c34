"""A process that searches again and again (a warm server, a LangGraph handle) keeps the live memories' vectors in
memory (dense_index.py) and ranks with them exactly as the store's SQL does: after saves, a forget, an edit, vectors
added or dropped, and writes of another connection on the same file (standing for another process).

Against the local OpenAI-compatible test server (deterministic bag-of-words vectors) and real DuckDB stores under
tmp_path, through the memory service's handle as the server and the LangGraph store hold it."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import timedelta

import numpy as np
import pytest

from dream_assets import agent_memory, dense_index, recall_fusion
from dream_assets.llm.embedding_index import EmbeddingIndex
from dream_assets.llm.embeddings import build_embedding_provider
from dream_assets.options import DreamOptions
from dream_assets.options_loader import dream_options
from dream_assets.profile import AgentProfile
from dream_assets.store import connection as store_connection
from dream_assets.store import open_store
from dream_assets.store.embeddings import EmbeddingCache, connection_of, content_hash
from dream_assets_tests.conftest import NOW
from dream_assets_tests.openai_server import OpenAITestServer, embedding_vector

MODEL = "test-embedding"
FACTS = [
    "Gina cycles along the river every morning.",
    "Jon plays the piano every evening.",
    "The robotics team meets on Fridays.",
    "Invoices are due on the 5th of each month.",
    "Standup is at 9:30 on weekdays.",
    "Ana keeps bees behind the barn.",
    "Bo restores vintage motorbikes in his garage.",
    "Cyd teaches pottery at the college on Tuesdays.",
]
QUERIES = ["who rides a bike by the river", "piano music in the evening", "bees and honey", "pottery class"]


@pytest.fixture
def server() -> Iterator[OpenAITestServer]:
    with OpenAITestServer() as s:
        yield s


@pytest.fixture
def options(server) -> DreamOptions:
    return dream_options().replace(
        LlmTimeout=timedelta(seconds=30), EmbeddingModel=MODEL, EmbeddingBaseUrl=server.base_url
    )


@pytest.fixture
def profile(tmp_path) -> AgentProfile:
    return AgentProfile(tmp_path / "agents" / "dense").ensure()


@pytest.fixture
def handle(profile, options) -> Iterator[agent_memory.MemoryHandle]:
    h = agent_memory.connect(profile, options)
    h.connection.linger_s = 0  # the file is let go after each call, as when other processes take turns at it
    try:
        yield h
    finally:
        h.close()


@pytest.fixture
def other_process(profile, options, monkeypatch):
    """A store on the same file with a connection of its own (outside this process's shared ones): what another
    process sees and writes, taking turns at the file with ours."""

    def make():
        with monkeypatch.context() as m:
            m.setattr(store_connection, "_connections", {})
            store = open_store(profile, options)
        store.connection.linger_s = 0
        return store

    return make


def _vector(text: str) -> np.ndarray:
    return np.asarray(embedding_vector(text), dtype=np.float32)


def _embed_live(store, options) -> None:
    """Every live entry's vector, as the consolidation pass's near-duplicate scan fetches them."""
    EmbeddingIndex(store, build_embedding_provider(options), now=NOW).vectors(store.memories.list_live())


def _same_as_sql(handle, query: str, limit: int = 50) -> list[str]:
    """The kept vectors' answer for ``query``, checked against the store's SQL: the same ids in the same order (ties
    by id), the same cosines to float32 precision. Returns the ids."""
    cache = EmbeddingCache(connection_of(handle))
    vector = _vector(query)
    kept, path = dense_index.nearest_live(cache, MODEL, vector, limit=limit)
    assert path == dense_index.KEPT
    sql = cache.nearest_live(MODEL, vector, limit=limit)
    assert [i for i, _ in kept] == [i for i, _ in sql]
    assert np.allclose([s for _, s in kept], [s for _, s in sql], rtol=0, atol=1e-6)
    return [i for i, _ in kept]


def _all_same(handle) -> None:
    for query in QUERIES:
        _same_as_sql(handle, query)


def _built(handle, *, unchanged: bool = True) -> dense_index.DenseIndex:
    """Search twice (the first search of a process takes the SQL), so the vectors are kept from then on;
    ``unchanged``: nothing was written between the two, so they find the same."""
    first = recall_fusion.search(handle.memories, QUERIES[0], limit=3, now=NOW + timedelta(days=1))
    second = recall_fusion.search(handle.memories, QUERIES[0], limit=3, now=NOW + timedelta(days=1))
    assert (first.method, first.dense) == ("bm25+embeddings", dense_index.SQL)
    assert (second.method, second.dense) == ("bm25+embeddings", dense_index.KEPT)
    if unchanged:
        assert [e.id for e, _ in first.hits] == [e.id for e, _ in second.hits]
    index = dense_index.index_of(handle.connection, MODEL, len(_vector("x")))
    assert index.ready
    return index


def _save(handle, text: str, i: int) -> str:
    return agent_memory.save(handle, text, now=NOW + timedelta(minutes=i)).id


def test_the_kept_vectors_rank_as_the_store_after_saves_a_forget_and_an_edit(handle, options):
    ids = [_save(handle, text, i) for i, text in enumerate(FACTS)]
    _embed_live(handle, options)
    index = _built(handle)
    assert len(index) == len(FACTS)
    _all_same(handle)

    # A save after the vectors were kept: found by its meaning at once.
    koi = _save(handle, "Dee breeds koi carp in a pond.", 20)
    _embed_live(handle, options)
    assert _same_as_sql(handle, "koi carp pond")[0] == koi
    _all_same(handle)

    # A forget: the entry leaves the dense list.
    agent_memory.forget(handle, ids[0], reason="moved away", now=NOW + timedelta(days=1))
    assert ids[0] not in _same_as_sql(handle, QUERIES[0])
    _all_same(handle)

    # An edit: the old text's vector no longer stands for the entry; the new text's does once it has one.
    agent_memory.put(handle, ids[5], "Ana sold her bees and now grows tomatoes.", now=NOW + timedelta(days=1))
    _all_same(handle)
    _embed_live(handle, options)
    assert _same_as_sql(handle, "Ana grows tomatoes")[0] == ids[5]
    _all_same(handle)


def test_writes_of_another_process_are_caught_up_before_the_next_search(handle, other_process, options):
    ids = [_save(handle, text, i) for i, text in enumerate(FACTS)]
    _embed_live(handle, options)
    _built(handle)

    # Edited here, so without a vector until another process embeds it.
    agent_memory.put(handle, ids[5], "Ana sold her bees and now grows tomatoes.", now=NOW + timedelta(minutes=30))
    assert ids[5] not in _same_as_sql(handle, "Ana grows tomatoes")

    theirs = other_process()  # another process on the same file
    try:
        koi = agent_memory.save(theirs, "Dee breeds koi carp in a pond.", now=NOW + timedelta(hours=1)).id
        _embed_live(theirs, options)
        agent_memory.forget(theirs, ids[1], reason="sold the piano", now=NOW + timedelta(hours=1))
    finally:
        theirs.close()

    found = _same_as_sql(handle, "koi carp pond")
    assert found[0] == koi
    assert _same_as_sql(handle, "Ana grows tomatoes")[0] == ids[5]
    assert ids[1] not in _same_as_sql(handle, QUERIES[1])
    _all_same(handle)
    fused = recall_fusion.search(handle.memories, "koi carp pond", limit=3, now=NOW + timedelta(days=1))
    assert fused.dense == dense_index.KEPT and fused.hits[0][0].id == koi


def test_vectors_dropped_here_or_elsewhere_leave_the_kept_ones_and_come_back_when_embedded_again(
    handle, other_process, options
):
    ids = [_save(handle, text, i) for i, text in enumerate(FACTS)]
    _embed_live(handle, options)
    _built(handle)
    cache = EmbeddingCache(connection_of(handle))
    gina = content_hash(FACTS[0])

    cache.delete(MODEL, [gina])  # this process drops the vector (an unusable one, to embed again)
    assert ids[0] not in _same_as_sql(handle, QUERIES[0])
    _embed_live(handle, options)
    assert _same_as_sql(handle, QUERIES[0])[0] == ids[0]

    theirs = other_process()  # another process drops it
    try:
        EmbeddingCache(connection_of(theirs)).delete(MODEL, [gina])
    finally:
        theirs.close()
    assert ids[0] not in _same_as_sql(handle, QUERIES[0])
    _all_same(handle)


def test_a_matrix_not_told_of_the_other_process_would_answer_stale(handle, other_process, options):
    """The catch-up is what keeps the answer right: the same writes with the index's catch-up switched off leave it
    answering an entry another process forgot (so the checks above can fail)."""
    ids = [_save(handle, text, i) for i, text in enumerate(FACTS)]
    _embed_live(handle, options)
    index = _built(handle)
    handle.connection.remove_observer(index, index.on_open)  # as if it did not follow the file

    theirs = other_process()
    try:
        agent_memory.forget(theirs, ids[0], reason="moved away", now=NOW + timedelta(hours=1))
    finally:
        theirs.close()
    cache = EmbeddingCache(connection_of(handle))
    kept, _ = dense_index.nearest_live(cache, MODEL, _vector(QUERIES[0]), limit=5)
    sql = cache.nearest_live(MODEL, _vector(QUERIES[0]), limit=5)
    assert kept[0][0] == ids[0] and ids[0] not in [i for i, _ in sql]


def test_a_one_shot_search_uses_the_stores_sql_and_keeps_nothing(profile, options):
    store = open_store(profile, options)
    try:
        for i, text in enumerate(FACTS):
            _save(store, text, i)
        _embed_live(store, options)
    finally:
        store.close()
    once = agent_memory.connect(profile, options)
    try:
        found = recall_fusion.search(once.memories, QUERIES[0], limit=3, now=NOW + timedelta(days=1))
        assert found.dense == dense_index.SQL and found.hits[0][0].content == FACTS[0]
        assert dense_index.footprint(once.connection) == 0
    finally:
        once.close()


def test_writes_landing_while_the_matrix_is_built_are_in_it(handle, other_process, options, monkeypatch):
    """The build reads the store in short sessions and makes the matrix outside them: what another process writes
    meanwhile (a forget, a new entry and its vector) is applied before the first search answers."""
    ids = [_save(handle, text, i) for i, text in enumerate(FACTS)]
    _embed_live(handle, options)
    made = dense_index.DenseIndex._made
    written: list[str] = []

    def made_while_others_write(self, hashes, found):
        if not written:
            theirs = other_process()
            try:
                agent_memory.forget(theirs, ids[0], reason="moved away", now=NOW + timedelta(hours=1))
                written.append(agent_memory.save(theirs, "Dee breeds koi carp in a pond.", now=NOW).id)
                _embed_live(theirs, options)
            finally:
                theirs.close()
        return made(self, hashes, found)

    monkeypatch.setattr(dense_index.DenseIndex, "_made", made_while_others_write)
    handle.connection.linger_s = 1  # ours stays open after the build (another process waits for that): no reopen
    # catches up for it, the build does
    _built(handle, unchanged=False)
    assert written
    assert ids[0] not in _same_as_sql(handle, QUERIES[0])
    assert _same_as_sql(handle, "koi carp pond")[0] == written[0]
    _all_same(handle)
