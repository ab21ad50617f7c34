"""Tokens counted as the endpoint counts them, and calls sized to the endpoint's speed. Real stores, real HTTP against
the local OpenAI-compatible test server: a llama.cpp-style ``/tokenize``, ``usage`` counted by a tokenizer that packs
2.1 bytes a token (Qwen on text full of ids), answers as slow as a test needs."""

from __future__ import annotations

import json
import math
from datetime import timedelta

import pytest

from dream_assets.llm.budget import MESSAGE_OVERHEAD
from dream_assets.llm.client import build_model_client
from dream_assets.llm.endpoint_profile import (
    CALIBRATION_MARGIN,
    DEFAULT_BYTES_PER_TOKEN,
    EndpointProfile,
    endpoint_key,
)
from dream_assets.options import DreamOptions
from dream_assets.passes.registry import model_call
from dream_assets.profile import AgentProfile
from dream_assets_tests.consolidation_corpus import corpus as _corpus
from dream_assets_tests.consolidation_corpus import review as _review
from dream_assets_tests.openai_server import OpenAITestServer, reply

from .conftest import NOW

ANSWER = json.dumps({"findings": [], "failurePatterns": [], "skillAnnotations": [], "promotionNotes": {}})


def _ids(n: int, seed: int = 0) -> str:
    """Text full of ids, as a model pass shows them (what packs about 2.1 bytes a token)."""
    return "\n".join(
        f"- id=m{seed + k:05d}a sourceIds=[m{k:05d}b, s{k * 7:06d}] ts=2026-11-{k % 28 + 1:02d}" for k in range(n)
    )


def _options(server: OpenAITestServer, **kw) -> DreamOptions:
    return DreamOptions(LlmBaseUrl=server.base_url, LlmModel="qwen", LlmMaxRetries=0, **kw)


@pytest.mark.slow  # a 160-entry review through HTTP, every entry counted by /tokenize
def test_a_prompt_is_counted_by_the_endpoints_tokenize_and_nothing_is_sent_over_the_window(tmp_path):
    """The issue's case: a tokenizer at 2.1 bytes a token and a 4,096-token window. Counting 3 bytes a token, batches
    went over the window; counted by the endpoint's own ``/tokenize``, no prompt is."""
    options = DreamOptions(
        ConsolidationMinInterval=timedelta(0),
        ConsolidationExactFoldEnabled=False,
        LlmJsonMode="off",
        LlmStructuredOutput="off",
        LlmMaxTokens=512,
        LlmContextTokens=4096,
    )
    live, calls, _, server = _review(
        AgentProfile(tmp_path / "a").ensure(),
        options,
        _corpus(160, pairs=10, now=NOW),
        NOW,
        server_kw={"context_limit": 4096, "context_error": "llamacpp", "bytes_per_token": 2.1, "tokenize": True},
    )
    assert server.tokenize_requests > 0
    assert server.context_refusals == 0 and server.largest_prompt_tokens <= 4096  # nothing over the window
    assert calls >= 2 and len(live) == 160 - 10  # completed, every pair merged


def test_the_estimate_is_calibrated_from_the_usage_the_endpoint_reports(tmp_path):
    profile = AgentProfile(tmp_path / "a").ensure()
    with OpenAITestServer(default=reply(ANSWER), bytes_per_token=2.1) as server:  # no /tokenize: Ollama, vLLM...
        client = build_model_client(_options(server, LlmContextTokens=8192), profile)
        request = client.request(model_call("tier_routing_review"), _ids(60))
        before = client.budget
        assert before.method.startswith("estimate (3 bytes")
        assert client.call(request).ok
        reported = server.message_tokens(server.requests[-1].body)
        after = client.budget
        assert "calibrated" in after.method
        # uncalibrated, the estimate counted fewer tokens than the endpoint did; calibrated, never fewer
        probe = _ids(80, seed=500)
        assert before.count(probe) < server.count_tokens(probe) <= after.count(probe)
        assert after.tokens(request.system, request.prompt) >= reported
        facts = EndpointProfile(profile.endpoint_profile_path).get(endpoint_key(server.base_url, "qwen"))
        assert facts.calibrated_bytes_per_token < DEFAULT_BYTES_PER_TOKEN
        assert facts.calibrated_bytes_per_token <= 2.1 * CALIBRATION_MARGIN + 0.2


def test_absurd_usage_and_a_hostile_profile_file_never_make_the_count_smaller(tmp_path):
    profile = AgentProfile(tmp_path / "a").ensure()
    key = None
    for prompt_tokens in (1, 0, 10**9, MESSAGE_OVERHEAD):
        with OpenAITestServer(default=reply(ANSWER, prompt_tokens=prompt_tokens)) as server:
            client = build_model_client(_options(server, LlmContextTokens=8192), profile)
            key = client.endpoint_key
            assert client.call(client.request(model_call("tier_routing_review"), _ids(60))).ok
            assert client.endpoint_facts().bytes_per_token == ()  # not one observation taken
    profile.endpoint_profile_path.write_text(
        json.dumps(
            {
                "version": 1,
                "endpoints": {
                    key: {
                        "bytes_per_token": [50.0, "x", -1, 1e9],
                        "prompt_tps": -3,
                        "gen_tps": "fast",
                        "window": 12.5,
                        "json_schema": "yes",
                    }
                },
            }
        )
    )
    facts = EndpointProfile(profile.endpoint_profile_path).get(key)
    assert facts.bytes_per_token == () and not facts.has_speed and facts.window is None and facts.json_schema is None
    profile.endpoint_profile_path.write_text("{not json")
    assert EndpointProfile(profile.endpoint_profile_path).get(key).bytes_per_token == ()


def test_an_endpoint_without_tokenize_is_asked_once_and_the_estimate_counts():
    with OpenAITestServer(default=reply(ANSWER)) as server:
        client = build_model_client(_options(server, LlmContextTokens=8192), None)
        for _ in range(3):
            assert client.budget.method.startswith("estimate")
        assert server.tokenize_requests <= 1 and not server.requests  # the 404 took no scripted reply


def test_tiktoken_that_cannot_load_its_encoding_degrades_to_the_estimate(monkeypatch, caplog):
    import sys
    import types

    from dream_assets.llm import budget

    fake = types.ModuleType("tiktoken")

    def encoding_for_model(model):
        raise ConnectionError("no network")

    fake.encoding_for_model = encoding_for_model
    monkeypatch.setitem(sys.modules, "tiktoken", fake)
    budget._tiktoken_counter.cache_clear()
    try:
        count, method = budget.token_counter("gpt-4o-mini")
        assert method.startswith("estimate") and count("x" * 30) == math.ceil(30 / 3)
        assert "tokens are estimated instead" in caplog.text
    finally:
        budget._tiktoken_counter.cache_clear()
