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
from dream_assets.options_loader import dream_options
from dream_assets.passes.registry import model_call
from dream_assets.profile import AgentProfile
from dream_assets_tests.consolidation_corpus import corpus as _corpus
from dream_assets_tests.consolidation_corpus import review as _review
from dream_assets_tests.openai_server import OpenAITestServer, reply

from ..conftest import NOW

ANSWER = json.dumps({"findings": [], "failurePatterns": [], "skillAnnotations": [], "promotionNotes": {}})


def _ids(n: int, seed: int = 0) -> str:
    """Text full of ids, as a model pass shows them (what packs about 2.1 bytes a token)."""
    return "\n".join(
        f"- id=m{seed + k:05d}a sourceIds=[m{k:05d}b, s{k * 7:06d}] ts=2026-11-{k % 28 + 1:02d}" for k in range(n)
    )


def _options(server: OpenAITestServer, **kw) -> DreamOptions:
    return dream_options(LlmBaseUrl=server.base_url, LlmModel="qwen", LlmMaxRetries=0, **kw)


@pytest.mark.slow  # a 160-entry review through HTTP, every entry counted by /tokenize
def test_a_prompt_is_counted_by_the_endpoints_tokenize_and_nothing_is_sent_over_the_window(tmp_path):
    """The issue's case: a tokenizer at 2.1 bytes a token and a 4,096-token window. Counting 3 bytes a token, batches
    went over the window; counted by the endpoint's own ``/tokenize``, no prompt is."""
    options = dream_options(
        ConsolidationMinInterval=timedelta(0),
        ConsolidationCallShape="batch",  # the batch shape plans to the window; a small one would pick clusters
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


# --- calls sized to the endpoint's speed --------------------------------------------------------------------------
def _measured(profile: AgentProfile, server: OpenAITestServer, prompt_tps: float, gen_tps: float) -> None:
    EndpointProfile(profile.endpoint_profile_path).update(
        endpoint_key(server.base_url, "qwen"), prompt_tps=prompt_tps, gen_tps=gen_tps
    )


def test_each_calls_timeout_follows_the_measured_speed(tmp_path, monkeypatch):
    """The timeout is 2 x (prompt / prompt speed + reserve / answer speed) + slack: with the floor and the slack set to
    zero here, an endpoint measured fast gets a 1 s timeout (an answer taking 3 s times out), one measured slow gets
    10 s (the same answer arrives). LlmTimeout is left at its default: it bounds nothing."""
    from dream_assets.llm import endpoint_profile

    monkeypatch.setattr(endpoint_profile, "TIMEOUT_FLOOR_S", 0.0)
    monkeypatch.setattr(endpoint_profile, "TIMEOUT_SLACK_S", 0.0)
    profile = AgentProfile(tmp_path / "a").ensure()
    with OpenAITestServer(default=reply(ANSWER, delay_s=3.0)) as server:
        options = _options(server, LlmContextTokens=8192, LlmMaxTokens=50)
        for gen_tps, answered, timeout in ((100.0, False, 1.0), (10.0, True, 10.0)):
            _measured(profile, server, prompt_tps=1e6, gen_tps=gen_tps)
            client = build_model_client(options, profile)
            result = client.call(client.request(model_call("tier_routing_review"), "stats"))
            assert result.ok is answered, result.error
            assert result.usage.timeout_s == pytest.approx(timeout, rel=0.01)
            if not answered:
                assert "within 1s (measured speed)" in result.error


def test_the_timeout_is_the_formula_and_llm_timeout_bounds_it_only_when_set():
    from dream_assets.llm.endpoint_profile import (
        TIMEOUT_CEILING_S,
        TIMEOUT_FLOOR_S,
        TIMEOUT_SAFETY,
        TIMEOUT_SLACK_S,
        EndpointFacts,
        call_timing,
    )

    slow = EndpointFacts(prompt_tps=10.0, gen_tps=1.5)  # the 1.5B model on the busy 2-core machine
    timing = call_timing(3000, 1024, slow, 120.0)  # LlmTimeout at its default
    worst = 3000 / 10 + 1024 / 1.5
    assert timing.worst_s == pytest.approx(worst)
    assert timing.timeout_s == pytest.approx(TIMEOUT_SAFETY * worst + TIMEOUT_SLACK_S) and not timing.capped
    assert not timing.explains_timeout  # the speed says it answers well within its timeout
    capped = call_timing(3000, 1024, slow, 600.0)  # set by the user: an upper bound
    assert capped.timeout_s == 600.0 and capped.capped and capped.explains_timeout
    assert call_timing(10, 10, EndpointFacts(prompt_tps=1e5, gen_tps=1e4), 120.0).timeout_s == pytest.approx(
        TIMEOUT_FLOOR_S, abs=0.01
    )
    assert call_timing(10**6, 4096, EndpointFacts(prompt_tps=0.5, gen_tps=0.1), 120.0).timeout_s == TIMEOUT_CEILING_S
    assert call_timing(3000, 1024, EndpointFacts(), 120.0).timeout_s == 120.0  # not measured: LlmTimeout


def test_a_timeout_the_measured_speed_explains_is_not_retried(tmp_path):
    profile = AgentProfile(tmp_path / "a").ensure()
    with OpenAITestServer(default=reply(ANSWER, delay_s=3.0)) as server:
        _measured(profile, server, prompt_tps=100.0, gen_tps=1.0)  # 100 answer tokens: up to 100 s
        options = _options(server, LlmContextTokens=8192, LlmMaxTokens=100, LlmTimeout=timedelta(seconds=1))
        options = options.replace(LlmMaxRetries=3)
        client = build_model_client(options, profile)
        result = client.call(client.request(model_call("tier_routing_review"), "stats"))
        assert not result.ok and "measured speed explains it, so the call is not retried" in result.error
        assert len(server.requests) == 1 and result.usage.attempts == 1


def test_check_model_measures_the_endpoint_and_keeps_it_in_the_profile(tmp_path):
    from dream_assets.model_check import measure_endpoint, recommend, store_measurement

    profile = AgentProfile(tmp_path / "a").ensure()
    with OpenAITestServer(
        default=reply(ANSWER), speed=(400.0, 40.0), tokenize=True, context_limit=8192, bytes_per_token=2.1
    ) as server:
        measured = measure_endpoint(_options(server))
        assert not measured.problems
        assert (measured.prompt_tps, measured.gen_tps, measured.window) == (400.0, 40.0, 8192)
        assert measured.json_schema is True and measured.tokenizer and measured.timings_reported
        facts = store_measurement(profile, measured)
        assert EndpointProfile(profile.endpoint_profile_path).get(endpoint_key(server.base_url, "qwen")) == facts
        advice = recommend(_options(server, LlmMaxTokens=4096), facts, [])
        assert advice.window == 8192 and advice.worst_call_s == pytest.approx((8192 - 4096) / 400 + 4096 / 40)
        assert advice.calls_per_pass >= 1
    with OpenAITestServer(default=reply(ANSWER), response_formats=("json_object",)) as server:  # no json_schema
        measured = measure_endpoint(_options(server))
        assert measured.json_schema is False and measured.window is None and not measured.tokenizer
        assert measured.prompt_tps is not None and not measured.timings_reported


def test_a_tokenize_answer_fewer_than_any_tokenizer_makes_is_not_believed():
    with OpenAITestServer(default=reply(ANSWER), tokenize=lambda text: []) as server:
        budget = build_model_client(_options(server, LlmContextTokens=8192), None).budget
        text = _ids(40)
        assert "tokenize" in budget.method and budget.count(text) == math.ceil(len(text.encode()) / 3)


def test_one_answers_reported_speed_moves_the_measured_one_at_most_fourfold(tmp_path):
    profile = AgentProfile(tmp_path / "a").ensure()
    # a freak (or hostile) report
    with OpenAITestServer(default=reply(ANSWER, completion_tokens=40), speed=(1e6, 1e6)) as server:
        _measured(profile, server, prompt_tps=10.0, gen_tps=1.0)
        client = build_model_client(_options(server, LlmContextTokens=8192), profile)
        assert client.call(client.request(model_call("tier_routing_review"), _ids(40))).ok
        facts = client.endpoint_facts()
        assert (facts.prompt_tps, facts.gen_tps) == (25.0, 2.5)  # halfway to 4x, not to a million


def test_an_endpoints_too_long_answer_calibrates_the_estimate(tmp_path):
    """Before any answer the estimate (3 bytes a token) lets a dense prompt through; the endpoint's refusal names its
    token count, and the next prompt is counted with what it taught, so it is not sent over the window again."""
    from dream_assets.llm.budget import prompt_tokens_in_refusal
    from dream_assets_tests.openai_server import CONTEXT_ERRORS

    for shape, make in CONTEXT_ERRORS.items():
        _, body = make(4096, 5543)
        assert prompt_tokens_in_refusal(json.dumps(body)) == 5543, shape
    profile = AgentProfile(tmp_path / "a").ensure()
    window, reserve = 2048, 64
    with OpenAITestServer(
        default=reply(ANSWER), bytes_per_token=2.1, context_limit=window, context_error="llamacpp"
    ) as server:
        client = build_model_client(_options(server, LlmContextTokens=window, LlmMaxTokens=reserve), profile)
        call = model_call("tier_routing_review")
        n = 1
        while client.budget.fits(client.request(call, "").system, _ids(n + 1)):
            n += 1
        request = client.request(call, _ids(n))
        result = client.call(request)
        assert result.context_exceeded and server.context_refusals == 1  # the estimate let it through
        assert not client.budget.fits(request.system, request.prompt)  # now counted as the endpoint counts
        assert "calibrated" in client.budget.method


def test_a_timeout_of_an_endpoint_never_measured_says_how_to_measure_it(tmp_path):
    profile = AgentProfile(tmp_path / "a").ensure()
    with OpenAITestServer(default=reply(ANSWER, delay_s=2.0)) as server:
        options = _options(server, LlmContextTokens=8192, LlmTimeout=timedelta(seconds=0.5))
        client = build_model_client(options, profile)
        result = client.call(client.request(model_call("tier_routing_review"), "stats"))
    assert not result.ok and "within 0.5s (LlmTimeout)" in result.error
    assert "the endpoint's speed is not measured: dream check-model measures it" in result.error
