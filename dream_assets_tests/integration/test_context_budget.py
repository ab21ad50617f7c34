"""Prompts that fit the window: a first review of a large corpus against an 8k window completes over several calls,
with nothing truncated and the same merges as an unbounded window; an endpoint that says "too long" makes the pass
shrink its batch. Real stores, the real HTTP test server, answers computed from what each prompt shows."""

from __future__ import annotations

from datetime import timedelta

import pytest

from dream_assets.llm.budget import budget_for, estimate_prompt_tokens, is_context_exceeded
from dream_assets.options_loader import dream_options
from dream_assets.passes.memory_consolidation.prompt import render_memory_consolidation
from dream_assets_tests.consolidation_corpus import corpus as _corpus
from dream_assets_tests.consolidation_corpus import review as _review
from dream_assets_tests.openai_server import CONTEXT_ERRORS

from ..conftest import NOW


@pytest.mark.slow  # a 1,000-entry corpus reviewed twice through HTTP
def test_a_first_review_of_1000_entries_in_an_8k_window_matches_an_unbounded_one(tmp_path):
    from dream_assets.profile import AgentProfile

    corpus = _corpus(1000, pairs=60, now=NOW)
    base = dream_options(
        ConsolidationMinInterval=timedelta(0),
        ConsolidationCallShape="batch",  # the batch shape plans to the window; a small one would pick clusters
        ConsolidationExactFoldEnabled=False,
        LlmJsonMode="off",
        LlmStructuredOutput="off",
        LlmMaxTokens=1024,
    )
    bounded_live, bounded_calls, bounded_cycles, server = _review(
        AgentProfile(tmp_path / "a").ensure(),
        base.replace(LlmContextTokens=8192),
        corpus,
        NOW,
        server_kw={"context_limit": 8192},
    )
    assert server.context_refusals == 0 and server.largest_prompt_tokens <= 8192  # nothing over the window
    assert bounded_calls >= 5  # several calls, each within the window
    unbounded_live, unbounded_calls, _, _ = _review(
        AgentProfile(tmp_path / "b").ensure(),
        base.replace(LlmContextTokens=0, ConsolidationMaxEntriesPerCall=0),
        corpus,
        NOW,
    )
    assert unbounded_calls == 1
    assert bounded_live == unbounded_live  # the same merges
    assert len(bounded_live) == 1000 - 60  # every pair merged once, nothing else lost


@pytest.mark.slow  # three short reviews through HTTP
@pytest.mark.parametrize("shape", sorted(CONTEXT_ERRORS))
def test_an_endpoint_saying_the_prompt_is_too_long_makes_the_pass_shrink_its_batch(tmp_path, shape):
    from dream_assets.profile import AgentProfile

    corpus = _corpus(120, pairs=10, now=NOW)
    options = dream_options(
        ConsolidationMinInterval=timedelta(0),
        ConsolidationCallShape="batch",  # the batch shape plans to the window; a small one would pick clusters
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
        NOW,
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


@pytest.mark.slow  # a dozen calls through HTTP
def test_a_cluster_too_large_for_the_window_is_merged_in_parts_with_no_fact_lost(tmp_path):
    from dream_assets.profile import AgentProfile
    from dream_assets_tests.consolidation_corpus import entry, union_model

    base = (
        "The Falcon release train ships from the Dresden plant every second Tuesday; Marta Kuehn owns it, the budget "
        "code is FX-2291, the on-call rota lives in the Orion wiki and rollbacks need sign-off from Pieter Vos."
    )
    facts = [f"Batch {k + 100} passed inspection." for k in range(40)]
    cluster = [
        entry(f"f{k:02d}", f"{base} {fact}", NOW - timedelta(days=40, minutes=k)) for k, fact in enumerate(facts)
    ]
    singles = _corpus(60, pairs=0, now=NOW)
    window, reserve = 4096, 512
    options = dream_options(
        ConsolidationMinInterval=timedelta(0),
        ConsolidationCallShape="batch",  # the batch shape plans to the window; a small one would pick clusters
        ConsolidationExactFoldEnabled=False,
        ConsolidationMaxClusterSize=64,
        LlmJsonMode="off",
        LlmStructuredOutput="off",
        LlmMaxTokens=reserve,
        LlmContextTokens=window,
    )
    profile = AgentProfile(tmp_path / "a").ensure()
    live, calls, _, server = _review(
        profile, options, cluster + singles, NOW, server_kw={"context_limit": window}, model=union_model
    )
    # the 40 members shown together would be over the window, even without the directive: no prompt was
    together = render_memory_consolidation(cluster, [[e.id for e in cluster]], [], NOW)
    assert not budget_for(window, reserve).fits("", together)
    assert server.context_refusals == 0 and server.largest_prompt_tokens <= window
    assert max(r.body["messages"][1]["content"].count("- id=f") for r in server.requests) < 40
    merged = [text for text in live if text.startswith("The Falcon release train")]
    assert len(merged) == 1  # merged over several calls into one entry
    assert all(fact in merged[0] for fact in facts)  # no fact lost
    assert sorted(set(live) - set(merged)) == sorted(e.content for e in singles)  # nothing else touched
