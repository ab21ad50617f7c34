"""Save-time dedup over embeddings: with ``EmbeddingModel`` set a save finds its near-duplicates by embedding cosine
and the model's threshold (llm/embedding_threshold.py), the measure clustering uses; vectors come from the store's
cache when they can, a failing endpoint never fails the save, and without an embedding model nothing is ever requested.

Against the real OpenAI-compatible test server on 127.0.0.1 (deterministic bag-of-words vectors) and real DuckDB
stores under tmp_path."""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator
from datetime import timedelta

import pytest

from dream_assets.llm.embedding_threshold import DEFAULT_THRESHOLD
from dream_assets.options import DreamOptions
from dream_assets.options_loader import dream_options
from dream_assets.profile import AgentProfile
from dream_assets.save_pipeline import save_memory
from dream_assets.store import DreamStore, open_store
from dream_assets.store.embeddings import EmbeddingCache, content_hash
from dream_assets_tests.conftest import NOW
from dream_assets_tests.openai_server import OpenAITestServer, Reply, hang, refusing_base_url

BACKGROUND = [
    "The user drinks green tea in the afternoon.",
    "Invoices are due on the 5th of each month.",
    "Standup is at 9:30 on weekdays.",
    "Jon plays the piano every evening.",
    "Jon visits Berlin museums on weekends.",
    "The robotics team meets on Fridays.",
]
MOVE = "Jon moved to Berlin in May 2023 for a job at a robotics startup."
MOVE_MORE = MOVE + " He cycles to Kreuzberg."
MODEL = "test-embedding"


@pytest.fixture
def server() -> Iterator[OpenAITestServer]:
    with OpenAITestServer() as s:
        yield s


def _options(base_url: str | None, **kw) -> DreamOptions:
    # TF-IDF cosine is the lexical measure that misses these restatements: it weighs the added words' high idf.
    options = dream_options().replace(LexicalSimilarityMeasure="tfidf", LlmTimeout=timedelta(seconds=30), **kw)
    if base_url is not None:
        options = options.replace(EmbeddingModel=MODEL, EmbeddingBaseUrl=base_url)
    return options


def _store(tmp_path, name: str, options: DreamOptions) -> DreamStore:
    store = open_store(AgentProfile(tmp_path / "agents" / name).ensure(), options)
    for text in BACKGROUND:
        save_memory(store.memories, text, now=NOW)
    return store


def _live(store: DreamStore) -> list[str]:
    return sorted(e.content for e in store.memories.list_live())


@pytest.mark.parametrize(
    ("stored", "incoming", "action", "content"),
    [
        (MOVE, MOVE_MORE, "extended", MOVE_MORE),
        (MOVE_MORE, MOVE, "reinforced", MOVE_MORE),
    ],
    ids=["adds-a-sentence", "says-less"],
)
def test_a_restatement_the_lexical_measure_misses_is_absorbed_when_the_embeddings_match(
    tmp_path, server, stored, incoming, action, content
):
    lexical = _store(tmp_path, "lexical", _options(None))
    save_memory(lexical.memories, stored, now=NOW)
    missed = save_memory(lexical.memories, incoming, now=NOW + timedelta(days=1))
    assert missed.action == "created"  # the lexical measure keeps a twin
    lexical.close()

    store = _store(tmp_path, "embedded", _options(server.base_url))
    first = save_memory(store.memories, stored, now=NOW).entry
    result = save_memory(store.memories, incoming, now=NOW + timedelta(days=1))

    assert result.action == action and result.matched_id == first.id
    # An unknown model on a store too small to calibrate on: the default threshold applies.
    assert result.similarity is not None and result.similarity >= DEFAULT_THRESHOLD
    assert _live(store) == sorted([*BACKGROUND, content])  # one entry for the fact, holding every sentence
    assert store.memories.get(first.id).reinforcement_count == 2
    assert server.embedding_requests and {r.body["model"] for r in server.embedding_requests} == {MODEL}
    store.close()


def test_the_embedding_threshold_decides_not_the_lexical_one(tmp_path, server):
    # The same pair with EmbeddingSimilarityThreshold above its cosine: kept apart although the lexical
    # overlap measure (the default) would have extended it.
    store = _store(
        tmp_path,
        "strict",
        dream_options().replace(
            EmbeddingModel=MODEL, EmbeddingBaseUrl=server.base_url, EmbeddingSimilarityThreshold=0.99
        ),
    )
    save_memory(store.memories, MOVE, now=NOW)
    result = save_memory(store.memories, MOVE_MORE, now=NOW)
    assert result.action == "created"
    assert _live(store) == sorted([*BACKGROUND, MOVE, MOVE_MORE])
    assert server.embedding_requests
    store.close()


def test_an_identical_resave_and_a_save_whose_vectors_are_cached_make_no_embedding_request(tmp_path, server):
    store = _store(tmp_path, "cached", _options(server.base_url))
    server.requests.clear()
    first = save_memory(store.memories, MOVE, now=NOW)
    assert first.action == "created" and len(server.embedding_requests) == 1  # it and its candidates, one batch
    cache = EmbeddingCache(store.connection)
    assert cache.get(MODEL, [content_hash(MOVE)])  # the saved text's vector is kept for clustering

    server.requests.clear()
    again = save_memory(store.memories, MOVE, now=NOW + timedelta(days=1))
    assert again.action == "reinforced" and again.entry.id == first.entry.id
    # the same words in another category: not an exact twin, so it is measured, from cached vectors only, and saved
    # apart (a category is part of what a memory means)
    other = save_memory(store.memories, MOVE, category="people/jon", now=NOW + timedelta(days=2))
    assert other.action == "created" and other.matched_id == first.entry.id and "category" in other.reason
    assert server.embedding_requests == []
    assert store.memories.get(first.entry.id).reinforcement_count == 2
    store.close()


def test_a_dead_endpoint_falls_back_to_the_lexical_measure_and_the_save_succeeds(tmp_path, caplog):
    with refusing_base_url() as dead:
        store = _store(tmp_path, "dead", dream_options().replace(EmbeddingModel=MODEL, EmbeddingBaseUrl=dead))
        save_memory(store.memories, MOVE, now=NOW)
        with caplog.at_level(logging.WARNING, logger="dream_assets.store.memory"):
            result = save_memory(store.memories, MOVE_MORE, now=NOW + timedelta(minutes=1))
    # the default lexical (overlap) measure matched it, and the save says embeddings were not used
    assert result.action == "extended" and result.entry.content == MOVE_MORE
    assert "embeddings failed" in result.reason and "lexical measure" in result.reason
    assert any("embeddings failed" in r.getMessage() for r in caplog.records)
    assert _live(store) == sorted([*BACKGROUND, MOVE_MORE])
    store.close()


def test_an_embeddings_body_nested_100000_deep_never_fails_the_save(tmp_path, server, caplog):
    deep = b'{"data": ' + b"[" * 100_000 + b"]" * 100_000 + b"}"
    server.script(*[Reply(status=200, body=deep, headers={"Content-Type": "application/json"})] * 8)
    store = _store(tmp_path, "deep", _options(server.base_url))
    save_memory(store.memories, MOVE, now=NOW)
    with caplog.at_level(logging.WARNING, logger="dream_assets.store.memory"):
        result = save_memory(store.memories, MOVE + " He works at a robotics startup.", now=NOW + timedelta(minutes=1))
    assert server.embedding_requests  # the endpoint was asked, and its answer could not be used
    assert "nested too deeply" in result.reason and "lexical measure" in result.reason
    assert any("embeddings failed" in r.getMessage() for r in caplog.records)
    assert result.entry.content in _live(store)  # saved (the TF-IDF measure keeps it apart from MOVE)
    store.close()


#: How long the hanging endpoint keeps a request without an answer (its handler thread sleeps; nobody waits for it).
HANG_S = 300.0


@pytest.mark.slow  # waits out a hanging endpoint
def test_a_hanging_endpoint_delays_one_save_by_one_timeout_then_is_left_alone_for_a_while(profile, server):
    server.script(*[hang(HANG_S)] * 4)
    store = open_store(
        profile,
        dream_options().replace(
            EmbeddingModel=MODEL, EmbeddingBaseUrl=server.base_url, LlmTimeout=timedelta(seconds=0.5)
        ),
    )
    studio = "Gina opened her dance studio downtown in June."
    save_memory(store.memories, studio, now=NOW)
    assert server.embedding_requests == []  # nothing to compare with: nothing embedded

    started = time.monotonic()
    first = save_memory(store.memories, f"{studio} It has two rooms.", now=NOW + timedelta(minutes=1))
    took = time.monotonic() - started
    assert first.action == "extended" and "embeddings failed" in first.reason
    # At least the 0.5 s timeout, and less than the hang: the save cannot have waited for the answer, however slow the
    # machine. The request count says there was no retry.
    assert 0.4 <= took < HANG_S
    assert len(server.embedding_requests) == 1

    second = save_memory(
        store.memories, f"{studio} It has two rooms. Classes start at six.", now=NOW + timedelta(minutes=2)
    )
    assert second.action == "extended" and "lexical measure" in second.reason
    assert len(server.embedding_requests) == 1  # within the pause: not tried again
    assert [e.content for e in store.memories.list_live()] == [f"{studio} It has two rooms. Classes start at six."]
    store.close()


def test_without_an_embedding_model_no_request_is_ever_made(tmp_path, server):
    options = dream_options().replace(LlmBaseUrl=server.base_url, LlmModel="qwen")
    store = _store(tmp_path, "offline", options)
    save_memory(store.memories, MOVE, now=NOW)
    result = save_memory(store.memories, MOVE_MORE, now=NOW)
    assert result.action == "extended" and result.reason == "adds 1 sentence"
    assert server.requests == []
    store.close()


def test_a_save_inside_a_callers_transaction_never_calls_the_endpoint(tmp_path, server):
    store = _store(tmp_path, "held", _options(server.base_url))
    save_memory(store.memories, MOVE, now=NOW)
    server.requests.clear()
    with store.transaction():
        result = save_memory(store.memories, MOVE_MORE, now=NOW)
        assert server.embedding_requests == []  # the store is held: no request
    assert result.action == "created"  # the lexical (tfidf) measure decided
    store.close()
