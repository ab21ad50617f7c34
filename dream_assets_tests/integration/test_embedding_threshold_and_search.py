"""The near-duplicate threshold follows the embedding model (the measured table, a calibration on the agent's own
entries, the option when a user sets it) and ``dream status`` says which; search fuses BM25 and embeddings when a
model is configured, is BM25 alone without one, and falls back to BM25 (saying so) when the endpoint fails.

Against the local OpenAI-compatible test server (deterministic bag-of-words vectors: texts sharing words are close)
and real DuckDB stores under tmp_path, through the memory service as every interface calls it."""

from __future__ import annotations

import re
from collections.abc import Iterator
from datetime import timedelta

import numpy as np
import pytest

from dream_assets import service
from dream_assets.llm.embedding_index import EmbeddingIndex
from dream_assets.llm.embedding_threshold import (
    CALIBRATION_MIN_ENTRIES,
    DEFAULT_THRESHOLD,
    calibrate,
    similarity_threshold,
)
from dream_assets.llm.embeddings import build_embedding_provider
from dream_assets.options import DreamOptions
from dream_assets.options_loader import dream_options
from dream_assets.profile import AgentProfile
from dream_assets.store import open_store
from dream_assets.store.embeddings import EmbeddingCache
from dream_assets_tests.conftest import NOW
from dream_assets_tests.openai_server import OpenAITestServer, embedding_vector, server_error

MOVE = "Jon moved to Berlin in May 2023 for a job at a robotics startup."
MOVE_MORE = MOVE + " He cycles to Kreuzberg."
E5 = "multilingual-e5-small-q4"
UNKNOWN = "test-embedding"
PEOPLE = ["Ana", "Bo", "Cyd", "Dee", "Eli", "Fay", "Gus", "Hal", "Ivy", "Jay", "Kim", "Lou", "Max", "Ned", "Oz"]
DOINGS = [
    "plays chess on Sundays",
    "keeps bees behind the barn",
    "restores vintage motorbikes",
    "teaches pottery at the college",
    "sings in a gospel choir",
    "breeds koi carp",
]


def facts(n: int, start: int = 0) -> list[str]:
    """``n`` different facts (a person and a pastime: few shared words)."""
    out = []
    for i in range(start, start + n):
        person, doing = PEOPLE[i % len(PEOPLE)], DOINGS[(i // len(PEOPLE) + i) % len(DOINGS)]
        out.append(f"{person}{i} {doing} in town {i}.")
    return out


@pytest.fixture
def server() -> Iterator[OpenAITestServer]:
    with OpenAITestServer() as s:
        yield s


def _options(server: OpenAITestServer | None, model: str = UNKNOWN, **kw) -> DreamOptions:
    options = dream_options().replace(LlmTimeout=timedelta(seconds=30), **kw)
    if server is not None:
        options = options.replace(EmbeddingModel=model, EmbeddingBaseUrl=server.base_url)
    return options


def _agent(tmp_path, name: str) -> AgentProfile:
    return AgentProfile(tmp_path / "agents" / name).ensure()


def _save_all(profile: AgentProfile, options: DreamOptions, texts: list[str]) -> None:
    for i, text in enumerate(texts):
        service.save(profile, text, options=options, now=NOW + timedelta(seconds=i))


def _embed_live(profile: AgentProfile, options: DreamOptions) -> None:
    """Every live entry's vector, as the consolidation pass's near-duplicate scan fetches them."""
    store = open_store(profile, options)
    try:
        EmbeddingIndex(store, build_embedding_provider(options), now=NOW).vectors(store.memories.list_live())
    finally:
        store.close()


def _threshold(profile: AgentProfile, options: DreamOptions, **kw):
    store = open_store(profile, options)
    try:
        return similarity_threshold(options, store, now=NOW + timedelta(days=1), **kw)
    finally:
        store.close()


# --------------------------------------------------------------------------------------------- threshold
def test_the_restatement_a_generic_threshold_joins_is_kept_apart_for_e5_whose_measured_threshold_is_higher(
    tmp_path, server
):
    cosine = float(np.dot(embedding_vector(MOVE), embedding_vector(MOVE_MORE)))
    assert DEFAULT_THRESHOLD <= cosine < 0.95  # the premise: between the default and e5's measured threshold

    unknown = _options(server, UNKNOWN)
    profile = _agent(tmp_path, "unknown")
    _save_all(profile, unknown, [MOVE])
    joined = service.save(profile, MOVE_MORE, options=unknown, now=NOW + timedelta(days=1))
    assert joined.outcome == "extended"

    e5 = _options(server, E5)
    profile = _agent(tmp_path, "e5")
    _save_all(profile, e5, [MOVE])
    apart = service.save(profile, MOVE_MORE, options=e5, now=NOW + timedelta(days=1))
    assert apart.outcome == "created"
    assert sorted(m.content for m in service.list_memories(profile, options=e5).items) == sorted([MOVE, MOVE_MORE])
    threshold = _threshold(profile, e5)
    assert (threshold.value, threshold.source) == (0.95, "table")


def test_a_user_set_threshold_wins_over_the_table(tmp_path, server):
    options = _options(server, E5, EmbeddingSimilarityThreshold=0.85)
    profile = _agent(tmp_path, "option")
    _save_all(profile, options, [MOVE])
    joined = service.save(profile, MOVE_MORE, options=options, now=NOW + timedelta(days=1))
    assert joined.outcome == "extended"  # 0.85 set by hand: the pair at 0.89 is one fact
    assert "0.850 (option EmbeddingSimilarityThreshold)" in service.status(profile, options=options).embeddings


def test_an_unknown_model_is_calibrated_on_the_agents_entries_kept_with_its_model_and_size_and_redone(tmp_path, server):
    options = _options(server, UNKNOWN)
    profile = _agent(tmp_path, "calibrated")
    _save_all(profile, options, facts(CALIBRATION_MIN_ENTRIES - 1))
    _embed_live(profile, options)
    few = _threshold(profile, options)
    assert (few.source, few.value, few.entries) == ("default", DEFAULT_THRESHOLD, CALIBRATION_MIN_ENTRIES - 1)

    # The save that finds 30 entries with vectors calibrates, and keeps the value with the model and the count.
    _save_all(profile, options, facts(11, start=CALIBRATION_MIN_ENTRIES - 1))
    _embed_live(profile, options)
    first = _threshold(profile, options)
    assert first.source == "calibrated" and CALIBRATION_MIN_ENTRIES <= first.entries <= CALIBRATION_MIN_ENTRIES + 10
    store = open_store(profile, options)
    kept = EmbeddingCache(store.connection).calibration(UNKNOWN)
    store.close()
    assert (kept["model"], kept["entries"], kept["threshold"]) == (UNKNOWN, first.entries, first.value)
    figures = calibrate(
        np.asarray([embedding_vector(t) for t in facts(CALIBRATION_MIN_ENTRIES + 10)], dtype=np.float32)
    )
    # these facts share few words: the calibrated cosine sits well below the default, well above their mean
    assert figures["pair_mean"] < first.value < DEFAULT_THRESHOLD
    assert first.value == pytest.approx(figures["threshold"], abs=0.05)

    # Read back as kept while the corpus has not doubled; calibrated again once it has.
    grown = 2 * first.entries - (CALIBRATION_MIN_ENTRIES + 10)
    _save_all(profile, options, facts(grown - 1, start=CALIBRATION_MIN_ENTRIES + 10))
    _embed_live(profile, options)
    assert _threshold(profile, options, keep=False).entries == first.entries
    _save_all(profile, options, facts(1, start=CALIBRATION_MIN_ENTRIES + 10 + grown))
    _embed_live(profile, options)
    assert _threshold(profile, options).entries == 2 * first.entries

    # Another model: nothing of the first one's calibration applies; it is calibrated on its own vectors.
    other = _options(server, "another-embedding")
    assert _threshold(profile, other).source == "default"
    _embed_live(profile, other)
    switched = _threshold(profile, other)
    assert switched.source == "calibrated" and switched.model == "another-embedding"


def test_status_shows_the_threshold_in_use_and_where_it_came_from(tmp_path, server):
    profile = _agent(tmp_path, "status")
    options = _options(server, UNKNOWN)
    _save_all(profile, options, facts(CALIBRATION_MIN_ENTRIES + 5))
    _embed_live(profile, options)

    line = service.status(profile, options=options).embeddings
    assert re.search(rf"threshold 0\.\d{{3}} \(calibrated on \d+ entries of EmbeddingModel {UNKNOWN} at 2026-", line)
    assert "table: multilingual-e5-small" in service.status(profile, options=_options(server, E5)).embeddings
    assert "none (EmbeddingModel is empty)" in service.status(profile, options=_options(None)).embeddings


# --------------------------------------------------------------------------------------------- search
GINA = "Gina cycles along the river every morning."
BACKGROUND = [
    "Invoices are due on the 5th of each month.",
    "Standup is at 9:30 on weekdays.",
    "Jon plays the piano every evening.",
    "The robotics team meets on Fridays.",
    GINA,
]
QUERY = "who enjoys cycling"  # no word of it is in GINA as written ("cycles"): BM25 alone cannot find her


def test_search_fuses_embeddings_with_bm25_and_finds_what_bm25_alone_misses(tmp_path, server):
    options = _options(server, UNKNOWN)
    profile = _agent(tmp_path, "fused")
    _save_all(profile, options, BACKGROUND)
    _embed_live(profile, options)
    server.requests.clear()

    fused = service.search(profile, QUERY, limit=3, options=options, now=NOW + timedelta(days=1))
    assert fused.method == "bm25+embeddings" and fused.note is None
    assert fused.hits[0].content == GINA
    assert len(server.embedding_requests) == 1  # the query's vector only: the entries' are kept in the store

    alone = service.search(profile, QUERY, limit=3, options=_options(None), now=NOW + timedelta(days=1))
    assert alone.method == "bm25" and GINA not in [h.content for h in alone.hits]
    # A question both find: the entry BM25 ranks first stays first
    both = service.search(profile, "piano evening", limit=3, options=options, now=NOW + timedelta(days=1))
    assert both.hits[0].content == "Jon plays the piano every evening."


def test_without_an_embedding_model_search_is_bm25_alone_and_asks_nothing(tmp_path, server):
    options = _options(None, LlmBaseUrl=server.base_url, LlmModel="qwen")
    profile = _agent(tmp_path, "offline")
    _save_all(profile, options, BACKGROUND)
    result = service.search(profile, "robotics team", limit=3, options=options, now=NOW)
    store = open_store(profile, options)
    try:
        from dream_assets import recall_index

        expected = [e.id for e, _ in recall_index.search(store.memories, "robotics team", limit=3)]
    finally:
        store.close()
    assert [h.id for h in result.hits] == expected and expected
    assert result.method == "bm25" and result.note is None
    assert server.requests == []


def test_a_failing_endpoint_at_search_time_falls_back_to_bm25_and_says_so(tmp_path, server):
    options = _options(server, UNKNOWN, LlmMaxRetries=0)
    profile = _agent(tmp_path, "failing")
    _save_all(profile, options, BACKGROUND)
    server.script(server_error(500))

    result = service.search(profile, "robotics team", limit=3, options=options, now=NOW + timedelta(days=1))
    assert result.method == "bm25" and result.hits[0].content == "The robotics team meets on Fridays."
    assert result.note is not None and "embeddings failed" in result.note and "BM25 alone" in result.note
    assert server.embedding_requests  # it was asked, and its failure did not fail the search
    # The endpoint comes back: the next search fuses again.
    _embed_live(profile, options)
    back = service.search(profile, QUERY, limit=3, options=options, now=NOW + timedelta(days=2))
    assert back.method == "bm25+embeddings" and back.note is None and back.hits[0].content == GINA


# --------------------------------------------------------------------------------------------- input prefixes
def test_an_e5_model_reads_passage_before_a_memory_and_query_before_a_search_and_caches_apart(tmp_path, server):
    options = _options(server, E5)
    profile = _agent(tmp_path, "prefixed")
    _save_all(profile, options, BACKGROUND)
    _embed_live(profile, options)
    sent = [text for r in server.embedding_requests for text in r.body["input"]]
    assert sent and all(text.startswith("passage: ") for text in sent)
    server.requests.clear()

    found = service.search(profile, QUERY, limit=3, options=options, now=NOW + timedelta(days=1))
    assert found.method == "bm25+embeddings"
    assert [r.body["input"] for r in server.embedding_requests] == [[f"query: {QUERY}"]]
    store = open_store(profile, options)
    try:
        cache = EmbeddingCache(store.memories.connection)
        assert cache.live_count(f"{E5} [passage: ]") == len(BACKGROUND) and cache.live_count(E5) == 0
    finally:
        store.close()


def test_a_model_without_prefixes_gets_its_texts_as_they_are(tmp_path, server):
    options = _options(server, UNKNOWN)
    profile = _agent(tmp_path, "plain")
    _save_all(profile, options, BACKGROUND[:2])
    _embed_live(profile, options)
    service.search(profile, QUERY, limit=3, options=options, now=NOW + timedelta(days=1))
    sent = [text for r in server.embedding_requests for text in r.body["input"]]
    assert QUERY in sent and set(BACKGROUND[:2]) <= set(sent)
