"""A model per pass: ``<Pass>Model`` and ``<Pass>BaseUrl`` send one pass's calls to another model or endpoint, and
the model used is in the pass's report (its materialization metadata) and in the ledger. Real HTTP test servers."""

from __future__ import annotations

import json
from datetime import UTC, datetime

import dagster as dg

from dream_assets.cycle import run_cycle
from dream_assets.definitions import build_definitions
from dream_assets.options_loader import dream_options
from dream_assets.orchestration.deployment import NOW_TAG, DreamDeployment
from dream_assets.orchestration.partitions import AGENTS
from dream_assets.orchestration.resources import ModelResource
from dream_assets.store.ledger import PassLedger
from dream_assets_tests.openai_server import OpenAITestServer, reply

NOW = datetime(2026, 11, 30, 12, 0, tzinfo=UTC)
ANSWER = json.dumps({"findings": [], "failurePatterns": [], "skillAnnotations": [], "promotionNotes": {}})


def test_pass_model_options_override_only_what_is_set():
    options = dream_options(LlmModel="big", LlmBaseUrl="http://127.0.0.1:1/v1", PreferenceInferenceModel="small")
    mine = options.for_pass_model("preference_inference")
    assert (mine.LlmModel, mine.LlmBaseUrl) == ("small", "http://127.0.0.1:1/v1")
    assert options.passes["preference_inference"].model == "small"
    assert options.for_pass_model("memory_consolidation") == options


def test_one_pass_uses_its_own_model_and_endpoint_and_the_ledger_says_so(demo):
    with OpenAITestServer(default=reply(ANSWER)) as main, OpenAITestServer(default=reply(ANSWER)) as other:
        options = dream_options(
            LlmBaseUrl=main.base_url,
            LlmModel="strong",
            LlmMaxRetries=0,
            TierRoutingReviewModel="cheap",
            TierRoutingReviewBaseUrl=other.base_url,
        )
        reports = {
            r.pass_name: r
            for r in run_cycle(demo, options, NOW, cycle_id="c1", only=["tier_routing_review", "wisp_failure_analysis"])
        }
        assert reports["tier_routing_review"].status == "completed", reports["tier_routing_review"].reason
        assert reports["wisp_failure_analysis"].status == "completed", reports["wisp_failure_analysis"].reason
        assert {r.body["model"] for r in other.requests} == {"cheap"}
        assert {r.body["model"] for r in main.requests} == {"strong"}
        assert len(other.requests) >= 1 and len(main.requests) >= 1
    assert reports["tier_routing_review"].extra["llm_model"] == "cheap"
    assert reports["wisp_failure_analysis"].extra["llm_model"] == "strong"
    ledger = PassLedger(demo)
    assert ledger.get("tier_routing_review").model == "openai:cheap"
    assert ledger.get("wisp_failure_analysis").model == "openai:strong"


def test_in_a_dagster_step_the_pass_s_own_model_is_the_one_called_over_the_model_resource_s(
    root, demo, instance, monkeypatch
):
    """The step resolves its options once: the model resource's settings, then the pass's own model. The client calls
    that model, the one the ledger stamps (the resource's settings are not laid over the pass's a second time)."""
    with OpenAITestServer(default=reply(ANSWER)) as main, OpenAITestServer(default=reply(ANSWER)) as other:
        monkeypatch.setenv("DREAM__PASSES__TIER_ROUTING_REVIEW__MODEL", "cheap")
        monkeypatch.setenv("DREAM__PASSES__TIER_ROUTING_REVIEW__BASE_URL", other.base_url)
        monkeypatch.setenv("DREAM__LlmMaxRetries", "0")
        model = ModelResource(backend="openai", base_url=main.base_url, model="strong")
        defs = build_definitions(DreamDeployment(profile_root=str(root), now=NOW.isoformat()), model=model)
        instance.add_dynamic_partitions(AGENTS, ["demo"])
        result = defs.resolve_job_def("dream_cycle").execute_in_process(
            instance=instance,
            partition_key="demo",
            tags={NOW_TAG: NOW.isoformat()},
            asset_selection=[dg.AssetKey("tier_routing_review")],
        )
        assert result.success
        assert {r.body["model"] for r in other.requests} == {"cheap"}
        assert not main.requests
    assert PassLedger(demo).get("tier_routing_review").model == "openai:cheap"
