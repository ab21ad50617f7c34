"""Embeddings: the provider against a real OpenAI-compatible server on 127.0.0.1, the vector cache in a real DuckDB
store, and clustering over the vectors."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import timedelta

import duckdb
import numpy as np
import pytest

from dream_assets.llm.client import ModelConfigError
from dream_assets.llm.embedding_index import EmbeddingIndex, cosine_clusters
from dream_assets.llm.embeddings import EmbeddingError, EmbeddingProvider, build_embedding_provider
from dream_assets.llm.usage import UsageLedger
from dream_assets.options_loader import dream_options, load_options
from dream_assets.save_pipeline import save_memory
from dream_assets.store import open_store
from dream_assets.store.connection import close_all
from dream_assets.store.embeddings import EmbeddingCache, content_hash
from dream_assets.store.schema import SCHEMA_VERSION
from dream_assets.text.similarity import DuplicateClusters
from dream_assets_tests.conftest import NOW
from dream_assets_tests.openai_server import (
    OpenAITestServer,
    client_error,
    embedding_vector,
    embeddings_ok,
    rate_limited,
    refusing_base_url,
    server_error,
)

CORPUS = [
    "Jon moved to Berlin in May 2023 for a job at a robotics startup",
    "Gina opened her dance studio downtown in June",
    "The user prefers dark mode in every editor",
    "Caroline adopted a golden retriever puppy named Max",
    "Melanie ran a charity race for mental health awareness",
    "The deploy script needs the staging token before it runs",
    "Jon practises the piano every evening after work",
]


@pytest.fixture
def server() -> Iterator[OpenAITestServer]:
    with OpenAITestServer() as s:
        yield s


def _provider(
    server: OpenAITestServer,
    *,
    batch_size: int = 3,
    max_retries: int = 3,
    usage: UsageLedger | None = None,
    **kw,
) -> EmbeddingProvider:
    return EmbeddingProvider(
        model="nomic-embed-text",
        base_url=server.base_url,
        timeout_s=30.0,  # a guard against a hang: every answer here comes at once
        max_retries=max_retries,
        batch_size=batch_size,
        usage=usage,
        backoff_base_s=0.05,
        jitter=lambda: 0.0,
        **kw,
    )


def _inputs(server: OpenAITestServer) -> list[list[str]]:
    return [r.body["input"] for r in server.embedding_requests]


# --------------------------------------------------------------------------- provider


def test_n_texts_go_in_ceil_n_over_batch_requests_and_come_back_in_order_as_unit_vectors(server):
    texts = [f"fact number {i} about topic {i % 3}" for i in range(10)]
    matrix = _provider(server, batch_size=4).embed(texts)

    assert [len(batch) for batch in _inputs(server)] == [4, 4, 2]
    assert [t for batch in _inputs(server) for t in batch] == texts
    assert all(r.body["model"] == "nomic-embed-text" for r in server.embedding_requests)
    assert matrix.shape == (10, 256) and matrix.dtype == np.float32
    assert np.allclose(np.linalg.norm(matrix, axis=1), 1.0, atol=1e-5)
    # row i is text i's vector, not another text's: order survives the batching
    expected = np.asarray([embedding_vector(t) for t in texts], dtype=np.float32)
    assert np.allclose(matrix, expected, atol=1e-5)


def test_usage_is_accounted_per_request_like_chat_calls(server):
    ledger = UsageLedger()
    texts = ["alpha beta gamma", "delta epsilon", "zeta eta theta iota", "kappa"]
    _provider(server, batch_size=3, usage=ledger).embed(texts, pass_name="memory_consolidation")

    totals = ledger.totals("memory_consolidation")
    assert totals["calls"] == 2 and totals["failed_calls"] == 0
    assert totals["prompt_tokens"] == 10 and totals["completion_tokens"] == 0  # the server's reported usage
    assert totals["estimated_calls"] == 0
    assert {r.model for r in ledger.records} == {"nomic-embed-text"}


def test_a_500_then_success_is_retried_and_the_attempts_counted(server):
    ledger = UsageLedger()
    server.script(server_error(500))
    matrix = _provider(server, usage=ledger).embed(["Jon moved to Berlin"])

    assert len(server.embedding_requests) == 2
    assert np.allclose(matrix[0], embedding_vector("Jon moved to Berlin"), atol=1e-5)
    assert [(r.outcome, r.attempts) for r in ledger.records] == [("ok", 2)]


def test_a_429_waits_as_long_as_retry_after_asks(server):
    server.script(rate_limited(retry_after=0.4))
    _provider(server, backoff_max_s=0.05).embed(["Gina opened a studio"])

    first, second = server.embedding_requests
    assert second.at - first.at >= 0.4  # back-off alone would have waited at most 0.05 s


def test_a_retry_after_longer_than_the_limit_fails_at_once_with_a_retryable_error(server):
    server.script(rate_limited(retry_after=600))
    with pytest.raises(EmbeddingError, match="asked to wait 600s") as caught:
        _provider(server, retry_after_max_s=5).embed(["x y z"])
    assert caught.value.retryable and len(server.embedding_requests) == 1


def test_a_persistent_failure_raises_naming_the_endpoint_model_and_options_never_an_empty_result(server):
    ledger = UsageLedger()
    server.script(*[server_error(503)] * 3)
    with pytest.raises(EmbeddingError) as caught:
        _provider(server, max_retries=2, usage=ledger).embed(["a b c"])
    message = str(caught.value)
    assert "HTTP 503" in message and server.base_url in message and "nomic-embed-text" in message
    assert "EmbeddingModel" in message and "LlmMaxRetries=2" in message
    assert len(server.embedding_requests) == 3
    assert [(r.outcome, r.attempts) for r in ledger.records] == [("error", 3)]


def test_a_rejected_request_and_an_unreachable_endpoint_raise_embedding_errors(server):
    server.script(client_error(400, "model 'nomic-embed-text' not found"))
    with pytest.raises(EmbeddingError, match="HTTP 400.*not found"):
        _provider(server).embed(["a"])
    assert len(server.embedding_requests) == 1  # a refusal is not retried

    with refusing_base_url() as url:
        provider = EmbeddingProvider(
            model="m", base_url=url, timeout_s=1.0, max_retries=1, backoff_base_s=0.01, jitter=lambda: 0.0
        )
        with pytest.raises(EmbeddingError) as caught:
            provider.embed(["a"])
    assert caught.value.unreachable


# --------------------------------------------------------------------------- configuration


def test_no_embedding_model_means_no_provider_and_no_call(server):
    options = load_options(env={"DREAM__Llm__BaseUrl": server.base_url, "DREAM__Llm__Model": "qwen"})
    assert build_embedding_provider(options, env={}) is None
    assert server.requests == []


def test_the_embedding_model_shares_the_chat_endpoint_and_key_by_default(server):
    options = load_options(
        env={
            "DREAM__Llm__BaseUrl": server.base_url,
            "DREAM__EmbeddingModel": "bge-m3",
            "DREAM__EmbeddingBatchSize": "2",
        }
    )
    provider = build_embedding_provider(options, env={"OPENAI_API_KEY": "sk-chat"})
    assert provider is not None and provider.model == "bge-m3" and provider.batch_size == 2
    provider.embed(["one", "two", "three"])
    assert len(server.embedding_requests) == 2
    assert {r.headers["authorization"] for r in server.embedding_requests} == {"Bearer sk-chat"}
    assert {r.body["model"] for r in server.embedding_requests} == {"bge-m3"}


def test_a_separate_embedding_endpoint_and_key_are_used_when_set(server):
    with OpenAITestServer() as chat:
        options = load_options(
            env={
                "DREAM__Llm__BaseUrl": chat.base_url,
                "DREAM__Embedding__Model": "text-embedding-3-small",
                "DREAM__EmbeddingBaseUrl": server.base_url,
                "DREAM__EmbeddingApiKeyEnv": "EMBED_KEY",
            }
        )
        provider = build_embedding_provider(options, env={"OPENAI_API_KEY": "sk-chat", "EMBED_KEY": "sk-embed"})
        provider.embed(["one"])
        assert chat.requests == []
    assert [r.headers["authorization"] for r in server.embedding_requests] == ["Bearer sk-embed"]


def test_the_default_openai_endpoint_without_a_key_is_a_config_error_naming_the_options():
    options = dream_options().replace(EmbeddingModel="text-embedding-3-small")
    with pytest.raises(ModelConfigError, match="EmbeddingModel.*OPENAI_API_KEY.*EmbeddingBaseUrl"):
        build_embedding_provider(options, env={})


# --------------------------------------------------------------------------- cache in the store


def test_an_embedded_corpus_is_never_embedded_again_and_an_edit_costs_one_text(server, profile):
    store = open_store(profile)
    entries = [save_memory(store.memories, text, now=NOW).entry for text in CORPUS]

    first = EmbeddingIndex(store, _provider(server, batch_size=3), now=NOW).vectors(entries)
    assert len(server.embedding_requests) == 3  # ceil(7 / 3)
    assert set(first) == {e.id for e in entries}
    store.close()
    close_all()

    # a later cycle: a fresh process view of the same file, a fresh provider — and zero HTTP requests
    server.requests.clear()
    store = open_store(profile)
    live = store.memories.list_live()
    second = EmbeddingIndex(store, _provider(server, batch_size=3), now=NOW).vectors(live)
    assert server.requests == []
    assert all(np.array_equal(first[e.id], second[e.id]) for e in live)

    edited = store.memories.update(entries[0].id, now=NOW, content="Jon moved to Berlin in May 2023 with his cat")
    third = EmbeddingIndex(store, _provider(server), now=NOW).vectors(store.memories.list_live())
    assert _inputs(server) == [[edited.content]]
    assert np.allclose(third[edited.id], embedding_vector(edited.content), atol=1e-5)
    store.close()


def test_equal_texts_are_embedded_once_and_vectors_are_kept_per_model(server, store):
    index = EmbeddingIndex(store, _provider(server, batch_size=10), now=NOW)
    vectors = index.vectors([("a", "same words here"), ("b", "same words here"), ("c", "other words")])
    assert _inputs(server) == [["same words here", "other words"]]
    assert np.array_equal(vectors["a"], vectors["b"])

    other_model = EmbeddingProvider(model="another-model", base_url=server.base_url, batch_size=10)
    EmbeddingIndex(store, other_model, now=NOW).vectors([("a", "same words here")])
    assert len(server.embedding_requests) == 2  # a vector of one model is not another model's
    cache = EmbeddingCache(store.connection)
    assert cache.count("nomic-embed-text") == 2 and cache.count("another-model") == 1


def test_batches_fetched_before_a_failure_stay_cached_and_the_failure_raises(server, store):
    texts = [("a", "first text"), ("b", "second text"), ("c", "third text")]
    server.script(embeddings_ok(), server_error(500))
    with pytest.raises(EmbeddingError, match="HTTP 500"):
        EmbeddingIndex(store, _provider(server, batch_size=2, max_retries=0), now=NOW).vectors(texts)
    assert EmbeddingCache(store.connection).count() == 2

    vectors = EmbeddingIndex(store, _provider(server, batch_size=2), now=NOW).vectors(texts)
    assert _inputs(server)[-1] == ["third text"]  # the next try embeds only what is missing
    assert set(vectors) == {"a", "b", "c"}


def test_similar_ranks_candidates_by_cosine_and_caches_the_incoming_text(server, store):
    index = EmbeddingIndex(store, _provider(server, batch_size=10), now=NOW)
    candidates = [
        ("berlin", "Jon moved to Berlin in May"),
        ("dance", "Gina opened her dance studio"),
        ("berlin2", "Jon moved to Berlin in May for work"),
    ]
    ranked = index.similar("In May Jon moved to Berlin", candidates)
    assert [doc_id for doc_id, _ in ranked][:2] in (["berlin", "berlin2"], ["berlin2", "berlin"])
    assert ranked[0][1] > 0.9 and dict(ranked)["dance"] < 0.3
    assert [d for d, _ in index.similar("In May Jon moved to Berlin", candidates, threshold=0.9)] == [
        d for d, s in ranked if s >= 0.9
    ]
    requests = len(server.embedding_requests)

    fresh = EmbeddingIndex(store, _provider(server), now=NOW)
    fresh.vectors([("new", "In May Jon moved to Berlin")])  # the incoming text was cached when compared
    assert len(server.embedding_requests) == requests
    assert index.similar("anything", []) == [] and len(server.embedding_requests) == requests


def test_vectors_of_different_sizes_for_one_model_raise_instead_of_mixing(server, store):
    EmbeddingCache(store.connection).put("nomic-embed-text", [content_hash("old text")], np.ones((1, 8)), now=NOW)
    with pytest.raises(EmbeddingError, match=r"different sizes \[8, 256\].*DELETE FROM embeddings"):
        EmbeddingIndex(store.memories, _provider(server), now=NOW).vectors([("a", "old text"), ("b", "new text")])


def test_orphan_vectors_are_pruned_and_live_ones_kept(server, store):
    kept = save_memory(store.memories, "Caroline adopted a puppy named Max", now=NOW).entry
    index = EmbeddingIndex(store, _provider(server), now=NOW)
    index.vectors([kept, ("gone", "a text no memory holds")])
    cache = EmbeddingCache(store.connection)
    assert cache.count() == 2
    assert cache.prune_orphans() == 1
    assert set(cache.get("nomic-embed-text", [content_hash(kept.content), content_hash("a text no memory holds")])) == {
        content_hash(kept.content)
    }


def test_a_version_1_store_is_upgraded_in_place_keeping_its_memories(profile, server):
    store = open_store(profile)
    saved = save_memory(store.memories, "Melanie ran a charity race", now=NOW).entry
    store.close()
    close_all()
    with duckdb.connect(str(profile.store_path)) as raw:  # what a store written before embeddings looked like
        raw.execute("DROP TABLE embeddings")
        raw.execute("UPDATE meta SET value = '1' WHERE key = 'schema_version'")

    store = open_store(profile)
    assert [e.id for e in store.memories.list_live()] == [saved.id]
    EmbeddingIndex(store, _provider(server), now=NOW).vectors([saved])
    assert EmbeddingCache(store.connection).count() == 1
    store.close()
    close_all()
    with duckdb.connect(str(profile.store_path)) as raw:
        assert raw.execute("SELECT value FROM meta WHERE key = 'schema_version'").fetchone() == (str(SCHEMA_VERSION),)
        assert raw.execute("SELECT count(*) FROM embeddings").fetchone() == (1,)


# --------------------------------------------------------------------------- clustering


def test_cosine_clusters_groups_paraphrases_and_keeps_other_facts_apart(server, store):
    docs = [
        ("m1", "Jon moved to Berlin in May 2023"),
        ("m2", "Gina opened her dance studio in June"),
        ("m3", "In May 2023 Jon moved to Berlin"),
        ("m4", "The user prefers dark mode"),
        ("m5", "Gina opened a dance studio in June"),
        ("m6", "Jon is learning the piano"),
    ]
    vectors = EmbeddingIndex(store, _provider(server, batch_size=10), now=NOW).vectors(docs)
    found = cosine_clusters([d for d, _ in docs], vectors, 0.8, 3)

    assert isinstance(found, DuplicateClusters) and found.method == "embeddings"
    assert found.clusters == [["m1", "m3"], ["m2", "m5"]]
    assert found.pairs == 2


def test_cosine_clusters_honours_the_cluster_cap_strongest_pairs_first():
    base = np.array([1.0, 0.0, 0.0])
    vectors = {"a": base, "b": base + [0.0, 0.05, 0.0], "c": base + [0.0, 0.0, 0.3], "d": [0.0, 1.0, 0.0]}
    capped = cosine_clusters(["a", "b", "c", "d"], vectors, 0.9, 2)
    assert capped.clusters == [["a", "b"]] and capped.pairs == 3
    assert cosine_clusters(["a", "b", "c", "d"], vectors, 0.9, 3).clusters == [["a", "b", "c"]]


def test_the_lexical_scans_clusters_stay_whole_and_the_embeddings_add_to_them_under_the_cap():
    base = np.array([1.0, 0.0, 0.0])
    # a and b are one fact in other words (cosine 1.0); c and d read alike, but their vectors are far apart, as a
    # small model's can be for two wordings the lexical measure finds near-identical.
    vectors = {"a": base, "b": base, "c": [0.0, 1.0, 0.0], "d": [0.0, 0.0, 1.0], "e": [0.0, 0.7, 0.7]}
    lexical = DuplicateClusters(clusters=[["c", "d"]], method="overlap", pairs=1)
    found = cosine_clusters(["a", "b", "c", "d", "e"], vectors, 0.95, 2, joined=lexical)
    assert found.clusters == [["a", "b"], ["c", "d"]]
    assert (found.method, found.pairs) == ("embeddings+overlap", 2)
    # at a threshold e's pairs with c and d (cosine 0.7) reach, the lexical cluster is joined first: under a cap of
    # 2 no embedding pair grows it, under a cap of 3 e joins it
    assert cosine_clusters(["a", "b", "c", "d", "e"], vectors, 0.6, 2, joined=lexical).clusters == [
        ["a", "b"],
        ["c", "d"],
    ]
    assert cosine_clusters(["a", "b", "c", "d", "e"], vectors, 0.6, 3, joined=lexical).clusters == [
        ["a", "b"],
        ["c", "d", "e"],
    ]


def test_cosine_clusters_across_blocks_matches_a_full_comparison(monkeypatch):
    import dream_assets.llm.embedding_index as emb

    rng = np.random.default_rng(7)
    centres = rng.normal(size=(12, 16))
    matrix = np.vstack([centres[i % 12] + rng.normal(scale=0.05, size=16) for i in range(60)])
    ids = [f"e{i}" for i in range(60)]
    whole = cosine_clusters(ids, matrix, 0.95, 10)
    monkeypatch.setattr(emb, "_BLOCK_CELLS", 70)  # one row per block
    assert cosine_clusters(ids, matrix, 0.95, 10) == whole
    assert len(whole.clusters) == 12 and all(len(c) == 5 for c in whole.clusters)


def test_cosine_clusters_refuses_bad_input_naming_it():
    with pytest.raises(ValueError, match="no vector for id 'b'"):
        cosine_clusters(["a", "b"], {"a": [1.0, 0.0]}, 0.9, 3)
    with pytest.raises(ValueError, match="appears more than once"):
        cosine_clusters(["a", "a"], np.eye(2), 0.9, 3)
    with pytest.raises(ValueError, match="EmbeddingSimilarityThreshold"):
        cosine_clusters(["a", "b"], np.eye(2), 0.0, 3)
    assert cosine_clusters([], {}, 0.9, 3).clusters == []


def test_embedding_options_bind_from_the_environment():
    options = load_options(
        env={
            "DREAM__EmbeddingModel": "nomic-embed-text",
            "DREAM__EmbeddingSimilarityThreshold": "0.9",
            "DREAM__EmbeddingBatchSize": "16",
        }
    )
    assert (options.EmbeddingModel, options.EmbeddingSimilarityThreshold, options.EmbeddingBatchSize) == (
        "nomic-embed-text",
        0.9,
        16,
    )
    assert timedelta(0) < options.LlmTimeout
