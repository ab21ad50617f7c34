"""Prompts that fit the window: a first review of a large corpus against an 8k window completes over several calls,
with nothing truncated and the same merges as an unbounded window; an endpoint that says "too long" makes the pass
shrink its batch. Real stores, the real HTTP test server, answers computed from what each prompt shows."""

from __future__ import annotations

import json
import random
import re
from datetime import timedelta

import pytest

from dream_assets.llm.budget import budget_for, estimate_prompt_tokens, is_context_exceeded
from dream_assets.llm.client import build_model_client
from dream_assets.model import MemoryEntry
from dream_assets.options import DreamOptions
from dream_assets.passes.context import PassContext
from dream_assets.passes.memory_consolidation import run_memory_consolidation
from dream_assets.store import open_store
from dream_assets_tests.openai_server import CONTEXT_ERRORS, OpenAITestServer, Reply, reply

from .conftest import NOW

CLUSTER_LINE = re.compile(r"^- cluster \d+: (.+?)(?: \(|$)", re.MULTILINE)
SYLLABLES = "ka lo mi nu re sa ti vo be da fe gi ho ju ly po qua ri ste wu xe zo".split()


def _word(rng: random.Random) -> str:
    return "".join(rng.choice(SYLLABLES) for _ in range(3))


def _entry(ident: str, content: str, stamp) -> MemoryEntry:
    return MemoryEntry(
        id=ident,
        content=content,
        category="facts",
        tags=(),
        importance=0.6,
        created_at=stamp,
        updated_at=stamp,
        last_seen_at=stamp,
        reinforcement_count=1,
        metadata={},
    )


def _corpus(n: int, pairs: int) -> list[MemoryEntry]:
    """``n`` entries: ``pairs`` near-duplicate pairs (the second copy adds one word) and distinct singles."""
    rng = random.Random(21)
    out: list[MemoryEntry] = []
    i = 0
    while len(out) < n:
        words = " ".join(_word(rng) for _ in range(12))
        text = f"Note {i}: the user keeps the {words} records for project K{i} in drawer {i % 97}."
        stamp = NOW - timedelta(days=30, minutes=i)
        out.append(_entry(f"m{i:04d}a", text, stamp))
        if i < pairs:
            out.append(_entry(f"m{i:04d}b", text[:-1] + ", always.", stamp))
        i += 1
    return out[:n]


def _merging_model(contents: dict[str, str]) -> Reply:
    """Merges every cluster a prompt shows into its longest member (which covers the others)."""

    def decide(body):
        prompt = body["messages"][1]["content"]
        saves = []
        for match in CLUSTER_LINE.finditer(prompt):
            ids = [i.strip() for i in match.group(1).split(",")]
            longest = max(ids, key=lambda i: len(contents[i]))
            saves.append({"content": contents[longest], "sourceIds": ids})
        return reply(json.dumps({"toDelete": [], "toSave": saves}))

    return Reply(decide=decide)


def _review(profile, options, corpus, *, server_kw=None, max_cycles=12):
    """Cycles of memory consolidation against the test server until nothing waits: (live contents, merged source
    groups, calls, cycles, server)."""
    store = open_store(profile, options)
    store.memories.put_many(corpus)
    contents = {e.id: e.content for e in corpus}
    with OpenAITestServer(default=_merging_model(contents), **(server_kw or {})) as server:
        opts = options.replace(LlmBaseUrl=server.base_url, LlmModel="test-model", LlmMaxRetries=0)
        client = build_model_client(opts, profile)
        cycles = 0
        for cycles in range(1, max_cycles + 1):
            ctx = PassContext(
                profile, opts, NOW + timedelta(hours=cycles), cycle_id=f"c{cycles}", client_factory=lambda: client
            )
            ctx._store = store
            report = run_memory_consolidation(ctx)
            assert report.status == "completed", report.reason
            if not report.counts.get("backlog"):
                break
        live = sorted(e.content for e in store.memories.list_live())
        calls = len(server.requests)
    store.close()
    return live, calls, cycles, server


@pytest.mark.slow  # a 1,000-entry corpus reviewed twice through HTTP
def test_a_first_review_of_1000_entries_in_an_8k_window_matches_an_unbounded_one(tmp_path):
    from dream_assets.profile import AgentProfile

    corpus = _corpus(1000, pairs=60)
    base = DreamOptions(
        ConsolidationMinInterval=timedelta(0),
        ConsolidationExactFoldEnabled=False,
        LlmJsonMode="off",
        LlmStructuredOutput="off",
        LlmMaxTokens=1024,
    )
    bounded_live, bounded_calls, bounded_cycles, server = _review(
        AgentProfile(tmp_path / "a").ensure(),
        base.replace(LlmContextTokens=8192),
        corpus,
        server_kw={"context_limit": 8192},
    )
    assert server.context_refusals == 0 and server.largest_prompt_tokens <= 8192  # nothing over the window
    assert bounded_calls >= 5  # several calls, each within the window
    unbounded_live, unbounded_calls, _, _ = _review(
        AgentProfile(tmp_path / "b").ensure(),
        base.replace(LlmContextTokens=0, ConsolidationMaxEntriesPerCall=0),
        corpus,
    )
    assert unbounded_calls == 1
    assert bounded_live == unbounded_live  # the same merges
    assert len(bounded_live) == 1000 - 60  # every pair merged once, nothing else lost


@pytest.mark.slow  # three short reviews through HTTP
@pytest.mark.parametrize("shape", sorted(CONTEXT_ERRORS))
def test_an_endpoint_saying_the_prompt_is_too_long_makes_the_pass_shrink_its_batch(tmp_path, shape):
    from dream_assets.profile import AgentProfile

    corpus = _corpus(120, pairs=10)
    options = DreamOptions(
        ConsolidationMinInterval=timedelta(0),
        ConsolidationExactFoldEnabled=False,
        LlmJsonMode="off",
        LlmStructuredOutput="off",
        LlmMaxTokens=512,
        LlmContextTokens=16384,  # the options claim more than the endpoint has
    )
    live, calls, _, server = _review(
        AgentProfile(tmp_path / shape).ensure(),
        options,
        corpus,
        server_kw={"context_limit": 4096, "context_error": shape},
    )
    assert server.context_refusals >= 1
    assert len(live) == 120 - 10  # completed anyway: every pair merged


def test_the_error_shapes_of_real_endpoints_read_as_context_exceeded():
    for shape, make in CONTEXT_ERRORS.items():
        _, body = make(8192, 9000)
        err = body.get("error", body)
        assert is_context_exceeded(f"{err.get('code', '')}: {err['message']}"), shape
    assert not is_context_exceeded("rate limited")


def test_the_estimate_is_conservative_and_the_budget_reserves_the_answer():
    text = "The user prefers green tea in the morning and coffee after lunch. " * 20
    assert estimate_prompt_tokens(text) >= len(text) / 4
    budget = budget_for(8192, 1024)
    assert budget.prompt_limit < 8192 - 1024
    assert budget.fits("system", "x" * 3000) and not budget.fits("system", "x" * 30000)
    assert budget_for(0, 1024).fits("s", "x" * 10**6)
