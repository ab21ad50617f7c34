"""Structured output where the endpoint has it: the contract's JSON schema goes out as ``response_format``; an
endpoint that rejects it gets JSON mode, one without that gets neither, and the fallback is remembered for the
endpoint. The real HTTP test server with its response_format support switched on or off."""

from __future__ import annotations

import json

import pytest

from dream_assets.llm.client import build_model_client
from dream_assets.options_loader import dream_options
from dream_assets.passes.registry import MODEL_CALLS
from dream_assets.passes.tier_routing_review import TierRoutingResponse
from dream_assets_tests.openai_server import OpenAITestServer, reply

ANSWER = json.dumps({"findings": [{"content": "route short lookups to the small tier", "tags": ["routing"]}]})


def _call(server: OpenAITestServer, **options):
    opts = dream_options(LlmBaseUrl=server.base_url, LlmModel="test-model", LlmMaxRetries=0, **options)
    client = build_model_client(opts, None)
    return client.call(client.request(MODEL_CALLS["tier_routing_review"], "tier stats ...", {}))


def _formats(server: OpenAITestServer) -> list[str]:
    return [(r.body.get("response_format") or {}).get("type", "none") for r in server.requests]


def test_a_json_schema_capable_endpoint_gets_the_contracts_schema():
    with OpenAITestServer(default=reply(ANSWER)) as server:
        result = _call(server)
        assert result.ok
        [request] = server.requests
        sent = request.body["response_format"]
        assert sent["type"] == "json_schema" and sent["json_schema"]["name"] == "tier_routing_review"
        assert sent["json_schema"]["schema"] == TierRoutingResponse.model_json_schema(by_alias=True)


@pytest.mark.parametrize(
    ("accepted", "expected"),
    [
        (("json_object",), ["json_schema", "json_object", "json_object"]),
        ((), ["json_schema", "json_object", "none", "none"]),
    ],
)
def test_an_endpoint_without_the_schema_gets_the_fallback_and_it_is_remembered(accepted, expected):
    with OpenAITestServer(default=reply(ANSWER), response_formats=accepted) as server:
        assert _call(server).ok
        assert _call(server).ok  # a new client (the next pass) starts at what the endpoint accepts
        assert _formats(server) == expected


def test_structured_output_off_and_json_mode_off_send_no_response_format():
    with OpenAITestServer(default=reply(ANSWER)) as server:
        assert _call(server, LlmStructuredOutput="off").ok
        assert _call(server, LlmJsonMode="off").ok
        assert _call(server, LlmStructuredOutput="json_object").ok
        assert _formats(server) == ["none", "none", "json_object"]


def test_a_rejected_schema_is_remembered_in_the_profile_across_processes_and_expires(tmp_path, monkeypatch):
    from datetime import UTC, datetime, timedelta

    from dream_assets.llm import openai_backend
    from dream_assets.model import iso
    from dream_assets.profile import AgentProfile

    profile = AgentProfile(tmp_path / "agent").ensure()
    with OpenAITestServer(default=reply(ANSWER), response_formats=("json_object",)) as server:
        opts = dream_options(LlmBaseUrl=server.base_url, LlmModel="test-model", LlmMaxRetries=0)

        def call_in_a_new_process():
            monkeypatch.setattr(openai_backend, "_REJECTED_FORMATS", {})  # nothing learnt in memory
            client = build_model_client(opts, profile)
            return client.call(client.request(MODEL_CALLS["tier_routing_review"], "tier stats ...", {}))

        assert call_in_a_new_process().ok
        assert call_in_a_new_process().ok  # the next run does not ask for the schema again
        assert _formats(server) == ["json_schema", "json_object", "json_object"]
        saved = json.loads(profile.model_formats_path.read_text())
        assert list(saved["endpoints"]) == [f"{server.base_url}|test-model"]
        assert set(saved["endpoints"][f"{server.base_url}|test-model"]) == {"json_schema"}

        # eight days on, the endpoint (perhaps upgraded) is asked again
        saved["endpoints"][f"{server.base_url}|test-model"]["json_schema"] = iso(datetime.now(UTC) - timedelta(days=8))
        profile.model_formats_path.write_text(json.dumps(saved))
        assert call_in_a_new_process().ok
        assert _formats(server)[3:] == ["json_schema", "json_object"]

        # a damaged file is as good as none: the schema is asked for, and the file is written anew
        profile.model_formats_path.write_text("{not json")
        assert call_in_a_new_process().ok
        assert _formats(server)[5:] == ["json_schema", "json_object"]
        assert (
            "json_schema"
            in json.loads(profile.model_formats_path.read_text())["endpoints"][f"{server.base_url}|test-model"]
        )
