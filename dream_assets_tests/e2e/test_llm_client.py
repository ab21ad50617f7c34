"""ModelClient: backend selection, scripted answers, failures as results, per-pass usage totals."""

from __future__ import annotations

import dagster as dg
import pytest

from dream_assets.llm.base import ModelCallError, ModelRequest, RawCompletion
from dream_assets.llm.client import ModelClient, ModelConfigError, build_model_client, resolve_backend_name
from dream_assets.llm.contracts import Contract, ModelCall
from dream_assets.llm.directives import builtin_directive
from dream_assets.llm.offline import OfflineBackend
from dream_assets.llm.scripted import ScriptedBackend
from dream_assets.llm.usage import UsageLedger, UsageRecord
from dream_assets.options_loader import dream_options, load_options
from dream_assets.orchestration.resources import ModelResource
from dream_assets.passes.registry import model_call
from dream_assets.passes.skill_gap_detection import SkillGapResponse


def _client(answers) -> ModelClient:
    return ModelClient(ScriptedBackend(answers), profile=None, options=dream_options())


def _req(pass_name: str = "skill_gap_detection", prompt: str = "sessions ...") -> ModelRequest:
    return ModelRequest(model_call(pass_name), "directive", prompt, {})


@pytest.mark.parametrize(
    "overrides,expected",
    [
        ({}, "offline"),
        ({"DREAM__Llm__BaseUrl": "http://127.0.0.1:11434/v1"}, "openai"),
        ({"DREAM__Llm__Model": "gpt-4o-mini"}, "openai"),
        ({"DREAM__Llm__Model": "llama3", "DREAM__Llm__Backend": "offline"}, "offline"),
        ({"DREAM__LlmBackend": "openai", "DREAM__LlmBaseUrl": "http://127.0.0.1:8000/v1"}, "openai"),
    ],
)
def test_the_backend_is_selected_by_configuration(overrides: dict, expected: str) -> None:
    assert resolve_backend_name(load_options(env=overrides)) == expected


def test_openai_without_a_model_name_is_a_configuration_error() -> None:
    opts = dream_options().replace(LlmBackend="openai", LlmBaseUrl="http://127.0.0.1:11434/v1")
    with pytest.raises(ModelConfigError, match="LlmModel"):
        build_model_client(opts, None, env={})


def test_scripted_answers_come_in_order_and_requests_are_kept() -> None:
    client = _client([{"toSave": [{"name": "a", "content": "x"}]}, SkillGapResponse(), '```json\n{"toSave": []}\n```'])
    results = [client.call(_req(prompt=f"p{i}")) for i in range(3)]
    assert all(r.ok for r in results)
    assert results[0].response.to_save[0].name == "a"
    assert [r.prompt for r in client.backend.requests] == ["p0", "p1", "p2"]


def test_a_scripted_function_answers_from_the_request() -> None:
    client = _client(lambda req: {"toSave": [{"name": req.prompt, "content": "c"}]})
    assert client.call(_req(prompt="email/digest")).response.to_save[0].name == "email/digest"


def test_backend_failures_become_failed_results_not_exceptions() -> None:
    client = _client([ModelCallError("HTTP 503 from endpoint", attempts=4), RuntimeError("socket exploded")])
    first, second = client.call(_req()), client.call(_req())
    assert not first.ok and "HTTP 503" in first.error and not first.deferred
    assert not second.ok and "RuntimeError: socket exploded" in second.error
    assert [r.attempts for r in client.usage.records] == [4, 1]
    assert client.usage.totals()["failed_calls"] == 2


def test_running_out_of_scripted_answers_is_a_failed_call_that_says_so() -> None:
    result = _client([]).call(_req())
    assert not result.ok and "no answer left" in result.error


def test_an_unknown_pass_name_is_a_programming_error() -> None:
    client = _client([{}])
    with pytest.raises(KeyError, match="known passes"):
        client.call(_req(pass_name="dreaming"))
    assert client.backend.requests == []


def test_the_client_uses_the_call_it_is_handed_and_looks_no_name_up(profile) -> None:
    """A call no registry knows: its directive option, its contract and its offline answer are the ones used."""

    class Probe(Contract):
        verdict: str

    call = ModelCall(
        name="probe_call",
        contract=Probe,
        directive_file="merge-repair.md",
        directive_option="DirectivePath",
        offline=lambda inputs: ({"verdict": f"offline saw {inputs['n']}"}, "probe note"),
    )
    (profile.root / "dream.md").write_text("probe directive, JSON only", encoding="utf-8")
    client = ModelClient(OfflineBackend(), profile=profile, options=dream_options())
    request = client.request(call, "prompt", {"n": 3})
    assert request.call is call and request.pass_name == "probe_call"
    assert request.system == "probe directive, JSON only" and request.directive_source == str(profile.root / "dream.md")
    result = client.call(request)
    assert result.ok and result.response == Probe(verdict="offline saw 3") and result.note == "probe note"
    assert client.usage.totals("probe_call")["calls"] == 1

    scripted = _client([{"verdict": 7}, {"other": "no verdict"}])
    first = scripted.call(scripted.request(call, "p"))
    second = scripted.call(scripted.request(call, "p"))
    assert first.ok and first.response.verdict == "7"
    assert scripted.backend.requests[0].system == builtin_directive("merge-repair.md")
    assert not second.ok and "answer for probe_call is unusable" in second.error


def test_usage_totals_per_pass() -> None:
    client = _client(
        [
            RawCompletion('{"toSave": []}', prompt_tokens=100, completion_tokens=10),
            RawCompletion('{"toSave": []}', prompt_tokens=50, completion_tokens=5),
            RawCompletion("not json at all", prompt_tokens=70, completion_tokens=7),
            RawCompletion('{"findings": []}'),  # no usage reported: estimated
        ]
    )
    for _ in range(3):
        client.call(_req("skill_gap_detection"))
    client.call(_req("tier_routing_review", prompt="x" * 40))
    gap = client.usage.totals("skill_gap_detection")
    assert gap["calls"] == 3 and gap["failed_calls"] == 1
    assert gap["prompt_tokens"] == 220 and gap["completion_tokens"] == 22 and gap["total_tokens"] == 242
    tier = client.usage.totals("tier_routing_review")
    assert (
        tier["calls"] == 1 and tier["estimated_calls"] == 1 and tier["prompt_tokens"] == 3 + 10
    )  # ceil(9/4) + ceil(40/4)
    assert client.usage.totals()["calls"] == 4
    assert set(client.usage.by_pass()) == {"skill_gap_detection", "tier_routing_review"}
    outcomes = [r.outcome for r in client.usage.records]
    assert outcomes == ["ok", "ok", "invalid-response", "ok"]
    assert all(r.backend == "scripted" and r.model == "scripted-model" for r in client.usage.records)


def test_usage_since_a_mark_counts_only_later_calls() -> None:
    ledger = UsageLedger()
    ledger.add(UsageRecord("p", "b", "m", 10, 1, False, 0.5, "ok"))
    mark = ledger.mark()
    ledger.add(UsageRecord("p", "b", "m", 20, 2, False, 0.25, "error"))
    assert ledger.totals("p", since=mark) == {
        "calls": 1.0,
        "failed_calls": 1.0,
        "deferred_calls": 0.0,
        "estimated_calls": 0.0,
        "prompt_tokens": 20.0,
        "completion_tokens": 2.0,
        "total_tokens": 22.0,
        "latency_s": 0.25,
        "busy_wait_s": 0.0,
    }


# --- the Dagster resource ---------------------------------------------------------------------------
def test_resource_fields_override_the_options() -> None:
    resource = ModelResource(
        backend="openai",
        base_url="http://127.0.0.1:11434/v1",
        model="llama3.1:8b",
        timeout_s=7,
        temperature=0.0,
    )
    opts = resource.effective_options(dream_options())
    assert (opts.LlmBackend, opts.LlmBaseUrl, opts.LlmModel) == (
        "openai",
        "http://127.0.0.1:11434/v1",
        "llama3.1:8b",
    )
    assert opts.LlmTimeout.total_seconds() == 7 and opts.LlmTemperature == 0.0
    unset = ModelResource().effective_options(dream_options().replace(LlmModel="m", LlmApiKeyEnv="K"))
    assert (unset.LlmModel, unset.LlmApiKeyEnv, unset.LlmBackend) == ("m", "K", "auto")


def test_the_resource_builds_an_offline_client_by_default_and_rejects_unknown_backends() -> None:
    assert ModelResource().client(None, dream_options()).backend_name == "offline"
    with pytest.raises(ModelConfigError, match="ModelResource.backend"):
        ModelResource(backend="claude").client(None, dream_options())


def test_a_scripted_backend_reaches_assets_through_the_resource() -> None:
    backend = ScriptedBackend([{"findings": [{"content": "route refactors to large"}]}])

    @dg.asset
    def routing(model: ModelResource) -> str:
        client = model.client(None, dream_options())
        result = client.call(client.request(model_call("tier_routing_review"), "stats"))
        return f"{client.backend_name}: {result.response.findings[0].content}"

    out = dg.materialize([routing], resources={"model": ModelResource.with_backend(backend)})
    assert out.output_for_node("routing") == "scripted: route refactors to large"
    assert len(backend.requests) == 1


# --- a dead endpoint within one cycle ------------------------------------------------------------------
def _pass_ctx(profile, backend, cycle_id: str):
    from datetime import UTC, datetime

    from dream_assets.passes.context import PassContext

    client = ModelClient(backend, profile=None, options=dream_options())
    return PassContext(
        profile,
        dream_options(),
        datetime(2026, 11, 30, 12, tzinfo=UTC),
        cycle_id=cycle_id,
        client_factory=lambda: client,
    )


def _call(ctx, pass_name: str = "tier_routing_review"):
    from dream_assets.passes.common import call_model
    from dream_assets.passes.report import PassReport

    report = PassReport(pass_name)
    return call_model(ctx, report, model_call(pass_name), "stats", {}), report


def test_after_an_unreachable_endpoint_the_cycle_stops_calling_it_until_the_next_cycle(profile) -> None:
    backend = ScriptedBackend(
        [
            ModelCallError("connection to http://127.0.0.1:9/v1 failed: refused", unreachable=True),
            {"findings": []},
        ]
    )
    first, report = _call(_pass_ctx(profile, backend, "cycle-1"), "skill_gap_detection")
    assert first is None and report.status == "failed" and "refused" in report.reason
    assert "tried again next cycle" in report.reason
    # a later pass of the same cycle (its own client, as a separate Dagster step has) fails without a call
    later, report = _call(_pass_ctx(profile, backend, "cycle-1"))
    assert later is None and report.status == "failed" and len(backend.requests) == 1
    assert "skill_gap_detection could not reach it earlier in this cycle" in report.reason
    assert "refused" in report.reason and report.model_calls == 0
    # the next cycle calls the endpoint again
    answer, report = _call(_pass_ctx(profile, backend, "cycle-2"))
    assert answer is not None and report.status == "completed" and len(backend.requests) == 2


@pytest.mark.parametrize(
    "failure",
    [
        ModelCallError("HTTP 400 from endpoint: bad request"),
        ModelCallError("HTTP 503 from endpoint (gave up after 4 attempt(s))", attempts=4, retryable=True),
        "this is not JSON",
    ],
    ids=["http-400", "5xx", "unusable-answer"],
)
def test_an_endpoint_that_answers_badly_is_still_called_by_later_passes(profile, failure) -> None:
    backend = ScriptedBackend([failure, {"findings": []}])
    first, report = _call(_pass_ctx(profile, backend, "cycle-1"), "skill_gap_detection")
    assert first is None and report.status == "failed"
    answer, _ = _call(_pass_ctx(profile, backend, "cycle-1"))
    assert answer is not None and len(backend.requests) == 2


def test_an_unreadable_endpoint_state_file_only_means_the_endpoint_is_called(profile) -> None:
    profile.endpoint_state_path.write_text("{not json")
    backend = ScriptedBackend([{"findings": []}])
    answer, _ = _call(_pass_ctx(profile, backend, "cycle-1"))
    assert answer is not None and len(backend.requests) == 1
