"""The openai backend against a real OpenAI-compatible HTTP server on 127.0.0.1 (no mocks of the client)."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import timedelta

import pytest

from dream_assets.llm.base import ModelRequest
from dream_assets.llm.client import ModelClient, ModelConfigError, build_model_client
from dream_assets.llm.openai_backend import OpenAIBackend
from dream_assets.options import DreamOptions
from dream_assets.options_loader import dream_options
from dream_assets.passes.registry import model_call
from dream_assets_tests.openai_server import (
    OpenAITestServer,
    client_error,
    cut_json,
    hang,
    non_json,
    rate_limited,
    refusing_base_url,
    rejects_json_mode,
    reply,
    server_error,
    slow,
    truncated,
)

ANSWER = '{"findings": [{"content": "Route refactors to the large tier", "tier": "large"}]}'


@pytest.fixture
def server() -> Iterator[OpenAITestServer]:
    with OpenAITestServer() as s:
        yield s


def _options(server: OpenAITestServer, **kw) -> DreamOptions:
    base = {
        "LlmBaseUrl": server.base_url,
        "LlmModel": "qwen2.5:7b",
        "LlmTimeout": timedelta(seconds=2),
        "LlmMaxRetries": 3,
        "LlmTemperature": 0.3,
    }
    return dream_options().replace(**{**base, **kw})


def _client(server: OpenAITestServer, **kw) -> ModelClient:
    """A client whose back-off is short, so retries are quick but still observable on the wire."""
    opts = _options(server, **kw)
    backend = OpenAIBackend(
        model=opts.LlmModel,
        base_url=opts.LlmBaseUrl,
        timeout_s=opts.LlmTimeout.total_seconds(),
        max_retries=opts.LlmMaxRetries,
        temperature=opts.LlmTemperature,
        json_mode=opts.LlmJsonMode,
        max_tokens=opts.LlmMaxTokens,
        backoff_base_s=0.1,
        jitter=lambda: 0.0,
    )
    return ModelClient(backend, profile=None, options=opts)


def _request(prompt: str = "tier stats ...") -> ModelRequest:
    return ModelRequest(model_call("tier_routing_review"), "Answer in JSON.", prompt, {})


def test_a_good_answer_is_validated_and_its_usage_recorded(server: OpenAITestServer) -> None:
    server.script(reply(ANSWER, prompt_tokens=120, completion_tokens=30))
    client = _client(server)
    result = client.call(_request())
    assert result.ok and not result.deferred
    assert result.response.findings[0].tier == "large"
    assert (result.backend, result.model) == ("openai", "test-model")
    body = server.requests[0].body
    assert server.requests[0].path == "/v1/chat/completions"
    assert body["model"] == "qwen2.5:7b" and body["temperature"] == 0.3 and body["max_tokens"] == 4096
    assert body["messages"] == [
        {"role": "system", "content": "Answer in JSON."},
        {"role": "user", "content": "tier stats ..."},
    ]
    totals = client.usage.totals("tier_routing_review")
    assert totals["prompt_tokens"] == 120 and totals["completion_tokens"] == 30 and totals["estimated_calls"] == 0


def test_usage_is_estimated_when_the_endpoint_reports_none(server: OpenAITestServer) -> None:
    server.script(reply(ANSWER, usage=False))
    client = _client(server)
    assert client.call(_request("x" * 400)).ok
    record = client.usage.records[0]
    assert record.estimated
    assert record.prompt_tokens >= 100 and record.completion_tokens >= len(ANSWER) // 4


def test_429_waits_for_retry_after_then_succeeds(server: OpenAITestServer) -> None:
    server.script(rate_limited(retry_after=0.4), reply(ANSWER))
    result = _client(server).call(_request())
    assert result.ok
    first, second = server.requests
    assert second.at - first.at >= 0.4  # honoured the server's Retry-After, not the 0.1 s back-off


def test_retry_after_in_milliseconds_is_honoured(server: OpenAITestServer) -> None:
    server.script(rate_limited(retry_after=350, header="retry-after-ms"), reply(ANSWER))
    assert _client(server).call(_request()).ok
    assert server.requests[1].at - server.requests[0].at >= 0.35


@pytest.mark.slow  # retries with real back-off waits
def test_5xx_is_retried_with_growing_back_off(server: OpenAITestServer) -> None:
    server.script(server_error(500), server_error(502), server_error(503), reply(ANSWER))
    client = _client(server)
    result = client.call(_request())
    assert result.ok
    at = [r.at for r in server.requests]
    gaps = [b - a for a, b in zip(at, at[1:], strict=False)]
    assert len(server.requests) == 4
    assert gaps[0] >= 0.1 and gaps[1] >= 0.2 and gaps[2] >= 0.4  # 0.1 s doubling
    assert client.usage.records[0].attempts == 4


def test_retries_stop_at_the_limit_and_the_call_fails_without_raising(server: OpenAITestServer) -> None:
    server.script(*[server_error(500)] * 3)
    client = _client(server, LlmMaxRetries=2)
    result = client.call(_request())
    assert not result.ok and not result.deferred
    assert "HTTP 500" in result.error and "3 attempt(s)" in result.error
    assert len(server.requests) == 3
    assert client.usage.totals()["failed_calls"] == 1


def test_client_errors_are_not_retried_and_say_what_to_check(server: OpenAITestServer) -> None:
    server.script(client_error(401, "invalid api key"), reply(ANSWER))
    result = _client(server, LlmJsonMode="off").call(_request())
    assert not result.ok
    assert "HTTP 401" in result.error and "LlmApiKeyEnv" in result.error
    assert len(server.requests) == 1


@pytest.mark.slow  # waits out a timeout
def test_a_slow_answer_past_the_timeout_is_retried(server: OpenAITestServer) -> None:
    server.script(slow(120.0, ANSWER), reply(ANSWER))
    client = _client(server, LlmTimeout=timedelta(seconds=5))
    result = client.call(_request())
    assert result.ok
    assert len(server.requests) == 2
    assert client.usage.records[0].attempts == 2


@pytest.mark.slow  # waits out a timeout on every attempt
def test_a_timeout_on_every_attempt_fails_the_call(server: OpenAITestServer) -> None:
    server.script(slow(1.0), slow(1.0))
    result = _client(server, LlmTimeout=timedelta(seconds=0.3), LlmMaxRetries=1).call(_request())
    assert not result.ok
    assert "within 0.3s (LlmTimeout)" in result.error


@pytest.mark.slow  # retries with real back-off waits
def test_truncated_and_non_json_bodies_are_retried(server: OpenAITestServer) -> None:
    server.script(truncated(), cut_json(), non_json(), reply(ANSWER))
    result = _client(server).call(_request())
    assert result.ok
    assert len(server.requests) == 4


def test_a_persistent_html_page_fails_and_hints_at_the_base_url(server: OpenAITestServer) -> None:
    server.script(*[non_json("<html>Open WebUI</html>")] * 2)
    result = _client(server, LlmMaxRetries=1).call(_request())
    assert not result.ok
    assert "not JSON" in result.error and "LlmBaseUrl" in result.error and "Open WebUI" in result.error


def test_json_mode_is_requested_and_dropped_once_the_endpoint_rejects_it(server: OpenAITestServer) -> None:
    server.script(rejects_json_mode(), reply(ANSWER), reply(ANSWER))
    client = _client(server)
    assert client.call(_request()).ok
    assert client.call(_request()).ok
    sent = ["response_format" in r.body for r in server.requests]
    assert sent == [True, False, False]  # fallback remembered for later calls
    assert server.requests[0].body["response_format"] == {"type": "json_object"}


def test_json_mode_off_never_sends_response_format(server: OpenAITestServer) -> None:
    server.script(reply(ANSWER))
    assert _client(server, LlmJsonMode="off").call(_request()).ok
    assert "response_format" not in server.requests[0].body


def test_json_mode_on_does_not_fall_back(server: OpenAITestServer) -> None:
    server.script(rejects_json_mode(), reply(ANSWER))
    result = _client(server, LlmJsonMode="on").call(_request())
    assert not result.ok and "HTTP 400" in result.error
    assert len(server.requests) == 1


def test_an_answer_that_breaks_the_contract_is_a_failed_call_with_the_raw_head(
    server: OpenAITestServer,
) -> None:
    server.script(reply("I think routing is fine overall, nothing to add."))
    client = _client(server)
    result = client.call(_request())
    assert not result.ok and result.response is None
    assert "I think routing is fine" in result.error
    assert result.raw.startswith("I think")
    assert client.usage.records[0].outcome == "invalid-response"


def test_a_cut_off_answer_suggests_raising_the_token_limit(server: OpenAITestServer) -> None:
    server.script(reply('{"findings": [{"content": "Route', finish_reason="length"))
    result = _client(server).call(_request())
    assert not result.ok and "LlmMaxTokens" in result.error


def test_configuration_selects_the_openai_backend_and_sends_the_key(server: OpenAITestServer) -> None:
    server.script(reply(ANSWER))
    opts = _options(server, LlmApiKeyEnv="MY_LLM_KEY")
    client = build_model_client(opts, None, env={"MY_LLM_KEY": "sk-test-123"})
    assert client.backend_name == "openai"
    assert client.call(_request()).ok
    assert server.requests[0].headers.get("authorization") == "Bearer sk-test-123"


def test_a_local_endpoint_without_a_key_gets_a_placeholder(server: OpenAITestServer) -> None:
    server.script(reply(ANSWER))
    client = build_model_client(_options(server), None, env={})
    assert client.call(_request()).ok
    assert server.requests[0].headers.get("authorization", "").startswith("Bearer ")


def test_the_default_openai_endpoint_without_a_key_is_a_configuration_error() -> None:
    opts = dream_options().replace(LlmModel="gpt-4o-mini")
    with pytest.raises(ModelConfigError, match="OPENAI_API_KEY"):
        build_model_client(opts, None, env={})


def test_newer_models_get_max_completion_tokens_and_their_own_temperature(server: OpenAITestServer) -> None:
    server.script(
        client_error(
            400,
            "Unsupported parameter: 'max_tokens' is not supported with this model. "
            "Use 'max_completion_tokens' instead.",
        ),
        client_error(400, "Unsupported value: 'temperature' does not support 0.3 with this model."),
        reply(ANSWER),
        reply(ANSWER),
    )
    client = _client(server, LlmJsonMode="off")
    assert client.call(_request()).ok
    assert client.call(_request()).ok
    first, second, third, fourth = (r.body for r in server.requests)
    assert "max_tokens" in first and "temperature" in first
    assert "max_completion_tokens" in second and "max_tokens" not in second and "temperature" in second
    assert "temperature" not in third and "temperature" not in fourth  # adapted once, remembered


def test_a_400_unrelated_to_json_mode_does_not_switch_it_off_for_good(server: OpenAITestServer) -> None:
    server.script(
        client_error(400, "context length exceeded"),
        client_error(400, "context length exceeded"),
        reply(ANSWER),
    )
    client = _client(server)
    result = client.call(_request())
    assert not result.ok and "context length exceeded" in result.error
    assert client.call(_request()).ok
    assert ["response_format" in r.body for r in server.requests] == [True, False, True]


# ---------------------------------------------------------------- unreachable vs. answered-with-an-error
def test_a_refused_connection_is_an_unreachable_endpoint() -> None:
    with refusing_base_url() as url:
        backend = OpenAIBackend(
            model="m", base_url=url, timeout_s=1, max_retries=1, backoff_base_s=0.05, jitter=lambda: 0.0
        )
        result = ModelClient(backend, profile=None, options=dream_options()).call(_request())
    assert not result.ok and result.unreachable
    assert "connection to" in result.error and "gave up after 2 attempt(s)" in result.error


@pytest.mark.slow  # waits out a hanging endpoint
def test_a_hanging_endpoint_is_unreachable_after_its_attempts(server: OpenAITestServer) -> None:
    server.default = hang(2.0)
    result = _client(server, LlmTimeout=timedelta(seconds=0.3), LlmMaxRetries=1).call(_request())
    assert not result.ok and result.unreachable and "(LlmTimeout)" in result.error
    assert len(server.requests) == 2


@pytest.mark.parametrize(
    "replies",
    [
        [client_error(400, "model not found")],
        [server_error(503), server_error(503)],
        [reply("I cannot answer in JSON, sorry.")],
    ],
    ids=["http-400", "5xx-after-retries", "unusable-answer"],
)
def test_an_endpoint_that_answers_with_an_error_is_not_unreachable(server: OpenAITestServer, replies) -> None:
    server.script(*replies)
    result = _client(server, LlmMaxRetries=1, LlmJsonMode="off").call(_request())
    assert not result.ok and not result.unreachable
    assert len(server.requests) == len(replies)
