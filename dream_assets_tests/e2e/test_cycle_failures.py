"""Failures are failures: a failed pass is not green, a dead endpoint costs one pass's retries per cycle, and one bad
agent never stops the schedule or the sensors for the others. Real Dagster instances, real stores, a real HTTP
server."""

from __future__ import annotations

import logging
from datetime import UTC, datetime, timedelta

import dagster as dg
import pytest

from dream_assets.cycle import run_cycle as run_cycle_directly
from dream_assets.definitions import build_definitions
from dream_assets.enrolment import enrol
from dream_assets.folders import READ_STEP
from dream_assets.gates import GATED_PASSES, gate_status
from dream_assets.llm.base import ModelCallError
from dream_assets.llm.offline import OfflineBackend
from dream_assets.llm.scripted import ScriptedBackend
from dream_assets.model import Skill
from dream_assets.options import DreamOptions
from dream_assets.options_loader import dream_options
from dream_assets.orchestration.deployment import NOW_TAG, DreamDeployment
from dream_assets.orchestration.partitions import AGENTS
from dream_assets.orchestration.resources import ModelResource
from dream_assets.passes.registry import PASSES
from dream_assets.profile import AgentProfile
from dream_assets.store import open_store
from dream_assets.store.ledger import PassLedger
from dream_assets.store.log_records import (
    ConversationTurn,
    FeedbackEvent,
    SkillUsageEvent,
    TierRoutingEvent,
    WispExecutionEvent,
)
from dream_assets.store.logs import append_event
from dream_assets_tests.openai_server import OpenAITestServer, hang, refusing_base_url, reply

NOW = datetime(2026, 11, 30, 12, 0, tzinfo=UTC)
MODEL_PASSES = [p.name for p in PASSES if p.uses_model]
FAIL_FAST = "could not reach it earlier in this cycle"


def deployment(root, now: datetime | None = None) -> DreamDeployment:
    return DreamDeployment(profile_root=str(root), now=now.isoformat() if now else "")


def _fails_for(*pass_names: str, message: str = "HTTP 503 from the endpoint: overloaded"):
    """A backend that fails the named passes' calls and answers every other pass like the offline backend."""
    offline = OfflineBackend()
    return ScriptedBackend(
        lambda req: ModelCallError(message) if req.pass_name in pass_names else offline.complete(req)
    )


def _checks(result) -> dict[str, dg.AssetCheckEvaluation]:
    return {
        e.event_specific_data.asset_key.to_user_string(): e.event_specific_data
        for e in result.all_events
        if e.event_type_value == "ASSET_CHECK_EVALUATION"
    }


def _statuses(result) -> dict[str, str]:
    out = {}
    for ev in result.get_asset_materialization_events():
        mat = ev.event_specific_data.materialization
        if "status" in mat.metadata:
            out[mat.asset_key.to_user_string()] = mat.metadata["status"].value
    return out


def _run(defs, instance, agent="demo", selection=None, now=NOW):
    return defs.resolve_job_def("dream_cycle").execute_in_process(
        instance=instance,
        partition_key=agent,
        tags={NOW_TAG: now.isoformat()},
        asset_selection=selection,
        raise_on_error=False,
    )


# ---------------------------------------------------------------- a failed pass is never green
@pytest.mark.slow  # a whole cycle with a failing model call
def test_a_failed_pass_fails_its_check_and_the_run_while_the_rest_of_the_cycle_runs(root, demo, instance):
    instance.add_dynamic_partitions(AGENTS, ["demo"])
    defs = build_definitions(deployment(root), model=ModelResource.with_backend(_fails_for("skill_gap_detection")))
    result = _run(defs, instance)

    assert not result.success
    assert instance.get_run_by_id(result.run_id).status == dg.DagsterRunStatus.FAILURE
    statuses = _statuses(result)
    assert statuses["skill_gap_detection"] == "failed"
    # every other pass ran, downstream of the failed one included, and the snapshot was still taken
    assert set(statuses) == {p.name for p in PASSES} | {READ_STEP}  # and the memory-folder read before them
    assert all(s in {"completed", "skipped"} for name, s in statuses.items() if name != "skill_gap_detection")
    assert "corpus_snapshot" in {e.asset_key.to_user_string() for e in result.get_asset_materialization_events()}
    checks = _checks(result)
    failed = checks["skill_gap_detection"]
    assert not failed.passed and failed.severity == dg.AssetCheckSeverity.ERROR
    assert "agent demo" in failed.description and "HTTP 503 from the endpoint" in failed.description
    assert all(c.passed for name, c in checks.items() if name != "skill_gap_detection")
    # the run fails at its last step, which names the failed pass, the agent and the reason
    failures = result.get_step_failure_events()
    assert [f.step_key for f in failures] == ["corpus_snapshot"]
    message = failures[0].event_specific_data.error.message
    assert "skill_gap_detection failed for agent demo" in message and "HTTP 503" in message


@pytest.mark.slow  # runs with a failing model call
def test_a_failed_pass_run_on_its_own_fails_its_run(root, demo, instance):
    """A change-gate sensor runs one pass alone: that pass is the last step and fails the run itself."""
    instance.add_dynamic_partitions(AGENTS, ["demo"])
    defs = build_definitions(deployment(root), model=ModelResource.with_backend(_fails_for("memory_consolidation")))
    result = _run(defs, instance, selection=[dg.AssetKey("memory_consolidation")])
    assert not result.success
    assert _statuses(result) == {"memory_consolidation": "failed"}
    [failure] = result.get_step_failure_events()
    assert failure.step_key == "memory_consolidation"
    assert "memory_consolidation failed for agent demo" in failure.event_specific_data.error.message


@pytest.mark.slow  # a whole cycle
def test_skipped_and_deferred_passes_stay_green_with_their_reason(root, demo, instance, monkeypatch):
    monkeypatch.setenv("DREAM__SkillGapEnabled", "false")
    monkeypatch.setenv("DREAM__BusyMaxWait", "0")
    lease = demo.root / "model-busy.lease"
    lease.write_text("")  # the agent's own model is busy: model passes defer at once
    instance.add_dynamic_partitions(AGENTS, ["demo"])
    defs = build_definitions(deployment(root), model=ModelResource.with_backend(_fails_for()))
    result = _run(defs, instance)
    statuses = _statuses(result)
    assert statuses["skill_gap_detection"] == "skipped" and statuses["memory_consolidation"] == "deferred"
    assert result.success
    checks = _checks(result)
    assert all(c.passed for c in checks.values())
    assert "skipped for agent demo: disabled (SkillGapEnabled = false)" in checks["skill_gap_detection"].description
    assert "deferred for agent demo" in checks["memory_consolidation"].description


# ---------------------------------------------------------------- a dead or hanging endpoint
def _openai(options: DreamOptions, base_url: str) -> DreamOptions:
    return options.replace(
        LlmBaseUrl=base_url,
        LlmModel="test-model",
        LlmTimeout=timedelta(seconds=0.3),
        LlmMaxRetries=1,
        LlmJsonMode="off",
    )


@pytest.mark.slow  # a fault run: a hanging endpoint's timeouts
def test_a_hanging_endpoint_costs_one_pass_its_attempts_and_the_other_passes_nothing(demo):
    with OpenAITestServer(default=hang(3.0)) as server:
        options = _openai(dream_options(), server.base_url)
        reports = {r.pass_name: r for r in run_cycle_directly(demo, options, NOW, cycle_id="cycle-1")}
        first = reports[MODEL_PASSES[0]]  # the first model pass of the cycle
        assert first.status == "failed" and "(LlmTimeout)" in first.reason
        assert len(server.requests) == 2  # its two attempts, and no other pass's
        for report in [reports[name] for name in MODEL_PASSES[1:]]:
            assert report.status == "failed", (report.pass_name, report.reason)
            assert f"{first.pass_name} {FAIL_FAST}" in report.reason and "(LlmTimeout)" in report.reason
            assert "tried again next cycle" in report.reason
            assert report.model_calls == 0

        # the next cycle tries the endpoint again
        server.default = reply('{"findings": []}')
        again = {
            r.pass_name: r
            for r in run_cycle_directly(demo, options, NOW, cycle_id="cycle-2", only=["tier_routing_review"])
        }
        assert again["tier_routing_review"].status == "completed"
        assert len(server.requests) == 3


@pytest.mark.slow  # a whole cycle against a refused endpoint
def test_a_refused_connection_fails_the_later_model_passes_without_calling(demo):
    with refusing_base_url() as url:
        reports = {
            r.pass_name: r for r in run_cycle_directly(demo, _openai(dream_options(), url), NOW, cycle_id="cycle-1")
        }
    assert "connection to" in reports[MODEL_PASSES[0]].reason
    assert reports[MODEL_PASSES[0]].model_calls == 1
    for name in MODEL_PASSES[1:]:
        assert reports[name].status == "failed" and FAIL_FAST in reports[name].reason, name
        assert reports[name].model_calls == 0
    # passes that need no model are unaffected
    assert reports["archive_purge"].status == "completed" and reports["log_retention"].status == "completed"


@pytest.mark.slow  # a whole cycle against a dead endpoint
def test_in_dagster_the_passes_of_one_run_share_the_dead_endpoint_verdict(root, demo, instance, monkeypatch):
    """Each pass is its own step with its own model client: the verdict crosses steps through the profile."""
    monkeypatch.setenv("DREAM__LlmMaxRetries", "1")
    monkeypatch.setenv("DREAM__LlmJsonMode", "off")
    instance.add_dynamic_partitions(AGENTS, ["demo"])
    with OpenAITestServer(default=hang(3.0)) as server:
        model = ModelResource(backend="openai", base_url=server.base_url, model="test-model", timeout_s=0.3)
        result = _run(build_definitions(deployment(root), model=model), instance)
        assert len(server.requests) == 2
    assert not result.success
    checks = _checks(result)
    for name in MODEL_PASSES:
        assert not checks[name].passed and "failed for agent demo" in checks[name].description, name
    # Dagster picks the order: exactly one pass called the endpoint, every other one names it
    [first] = [name for name in MODEL_PASSES if FAIL_FAST not in checks[name].description]
    assert "(LlmTimeout)" in checks[first].description
    for name in MODEL_PASSES:
        if name != first:
            assert f"{first} {FAIL_FAST}" in checks[name].description, name
    assert all(checks[p.name].passed for p in PASSES if not p.uses_model)


# ---------------------------------------------------------------- one bad agent never stops the others
def _agent(root, name: str) -> AgentProfile:
    """An agent set up for dreaming (as `dream init` does), with a store and one event in each log a gated pass
    needs, so every gate sensor requests it."""
    profile = AgentProfile(root / name).ensure()
    enrol(profile, NOW)
    store = open_store(profile)
    store.skills.put(Skill("mcp/email", "Send an email", "Draft, confirm, send.", created_at=NOW, updated_at=NOW))
    store.close()
    when = NOW - timedelta(hours=1)
    append_event(profile, "skill-usage", SkillUsageEvent(when, "s1", "mcp/email"))
    append_event(profile, "feedback", FeedbackEvent(when, "s1", "Correction", "It went to the wrong person."))
    for session in ("s1", "s2"):  # one request type in two sessions: something for skill gap detection to ask
        append_event(profile, "conversation", ConversationTurn(when, session, "user", "Convert this invoice to a row"))
    append_event(profile, "wisp-executions", WispExecutionEvent(when, "w1", "Sync the CRM", success=True))
    append_event(profile, "tier-routing", TierRoutingEvent(when, "live", "small", "t1", "success"))
    return profile


BREAKAGES = {
    "invalid option": lambda p: p.options_path.write_text('Interval = "often"\n'),
    "unknown option": lambda p: p.options_path.write_text("NoSuchOption = 1\n"),
    "not UTF-8": lambda p: p.options_path.write_bytes(b'Interval = "\xff\xfe"\n'),
}


def _break_store(profile: AgentProfile) -> None:
    profile.store_path.write_bytes(b"this is not a DuckDB database" * 100)


class _Warnings(logging.Handler):
    def __init__(self) -> None:
        super().__init__()
        self.messages: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        if record.levelno >= logging.WARNING:
            self.messages.append(record.getMessage())


def _schedule(defs, instance, root, when=NOW):
    warnings = _Warnings()
    with dg.build_schedule_context(
        instance=instance, scheduled_execution_time=when, resources={"deployment": deployment(root)}
    ) as ctx:
        ctx.log.addHandler(warnings)
        return defs.get_schedule_def("dream_cycle_schedule")(ctx), warnings.messages


def _sensor(sensor, instance, root, *, cursor=None, now=None):
    warnings = _Warnings()
    with dg.build_sensor_context(
        instance=instance, cursor=cursor, resources={"deployment": deployment(root, now)}
    ) as ctx:
        ctx.log.addHandler(warnings)
        return sensor(ctx), warnings.messages


@pytest.mark.parametrize("breakage", list(BREAKAGES))
def test_a_bad_dream_toml_skips_that_agent_in_the_schedule_and_every_gate_sensor(root, instance, breakage):
    _agent(root, "good")
    bad = _agent(root, "bad")
    BREAKAGES[breakage](bad)
    instance.add_dynamic_partitions(AGENTS, ["bad", "good"])
    defs = build_definitions(deployment(root))

    requests, warnings = _schedule(defs, instance, root)
    assert [r.partition_key for r in requests] == ["good"]
    assert any("agent bad skipped" in w and str(bad.options_path) in w for w in warnings), warnings

    for pass_name in GATED_PASSES:
        result, warnings = _sensor(defs.get_sensor_def(f"{pass_name}_change_gate"), instance, root)
        assert [r.partition_key for r in result.run_requests] == ["good"], pass_name
        assert any("agent bad skipped" in w and str(bad.options_path) in w for w in warnings), (
            pass_name,
            warnings,
        )


def test_with_only_the_bad_agent_the_skip_reason_names_it_and_the_file(root, instance):
    bad = _agent(root, "bad")
    BREAKAGES["unknown option"](bad)
    instance.add_dynamic_partitions(AGENTS, ["bad"])
    defs = build_definitions(deployment(root))
    skip, _ = _schedule(defs, instance, root)
    assert isinstance(skip, dg.SkipReason)
    assert "agent bad skipped" in skip.skip_message and str(bad.options_path) in skip.skip_message
    assert "NoSuchOption" in skip.skip_message
    result, _ = _sensor(defs.get_sensor_def("skill_consolidation_change_gate"), instance, root)
    assert not result.run_requests
    assert "agent bad skipped" in result.skip_reason.skip_message
    assert str(bad.options_path) in result.skip_reason.skip_message


def test_a_corrupt_store_skips_that_agent_in_the_store_gate_sensors(root, instance):
    _agent(root, "good")
    bad = _agent(root, "bad")
    _break_store(bad)
    instance.add_dynamic_partitions(AGENTS, ["bad", "good"])
    defs = build_definitions(deployment(root))
    for pass_name in ("memory_consolidation", "skill_consolidation"):
        result, warnings = _sensor(defs.get_sensor_def(f"{pass_name}_change_gate"), instance, root)
        assert [r.partition_key for r in result.run_requests] == ["good"], pass_name
        assert any("agent bad skipped" in w and str(bad.store_path) in w for w in warnings), warnings
    # the cycle is still requested for both: the bad agent's run fails at its passes, naming the store
    requests, _ = _schedule(defs, instance, root)
    assert sorted(r.partition_key for r in requests) == ["bad", "good"]


def test_a_missing_profile_folder_skips_that_agent(root, instance):
    _agent(root, "good")
    instance.add_dynamic_partitions(AGENTS, ["gone", "good"])
    defs = build_definitions(deployment(root))
    requests, warnings = _schedule(defs, instance, root)
    assert [r.partition_key for r in requests] == ["good"]
    assert any("agent gone skipped" in w and str(root / "gone") in w for w in warnings)
    result, warnings = _sensor(defs.get_sensor_def("tier_routing_review_change_gate"), instance, root)
    assert [r.partition_key for r in result.run_requests] == ["good"]
    assert any("agent gone skipped" in w and "is missing" in w for w in warnings)
    discovery, warnings = _sensor(defs.get_sensor_def("agent_discovery_sensor"), instance, root)
    assert "gone" in discovery.skip_reason.skip_message and "missing" in discovery.skip_reason.skip_message
    # each warning says how to end it: remove the agent's partition
    assert f"dream remove --profile {root / 'gone'}" in discovery.skip_reason.skip_message
    assert any(f"dream remove --profile {root / 'gone'}" in w for w in warnings)


def test_the_startup_sensor_launches_every_good_agent(root, instance):
    _agent(root, "good")
    bad = _agent(root, "bad")
    BREAKAGES["invalid option"](bad)
    instance.add_dynamic_partitions(AGENTS, ["bad", "good"])
    sensor = build_definitions(deployment(root)).get_sensor_def("dream_startup_sensor")
    first, _ = _sensor(sensor, instance, root, now=NOW)
    launch, warnings = _sensor(sensor, instance, root, cursor=first.cursor, now=NOW + timedelta(minutes=6))
    assert [r.partition_key for r in launch.run_requests] == ["good"]
    assert any("agent bad skipped" in w and str(bad.options_path) in w for w in warnings)


def test_discovery_registers_the_good_agents_and_names_a_folder_it_cannot_register(root, instance):
    _agent(root, "good")
    odd = AgentProfile(root / "has space").ensure()
    open_store(odd).close()
    result, warnings = _sensor(
        build_definitions(deployment(root)).get_sensor_def("agent_discovery_sensor"), instance, root
    )
    assert result.dynamic_partitions_requests[0].partition_keys == ["good"]
    assert any(str(odd.root) in w and "invalid agent id" in w for w in warnings)


def test_observing_inputs_goes_on_past_an_agent_with_a_corrupt_store(root, instance):
    good = _agent(root, "good")
    bad = _agent(root, "bad")
    _break_store(bad)
    instance.add_dynamic_partitions(AGENTS, ["bad", "good"])
    result = build_definitions(deployment(root)).resolve_job_def("observe_inputs").execute_in_process(instance=instance)
    assert result.success
    corpus = dg.AssetKey("memory_corpus")
    assert instance.get_latest_data_version_record(corpus, is_source=True, partition_key="good") is not None
    assert instance.get_latest_data_version_record(corpus, is_source=True, partition_key="bad") is None
    # the inputs that do not live in the store are still observed for the bad agent
    assert (
        instance.get_latest_data_version_record(dg.AssetKey("tier_routing_log"), is_source=True, partition_key="bad")
        is not None
    )
    messages = [e.user_message for e in instance.all_logs(result.run_id)]
    assert any("memory_corpus: agent bad skipped" in m and str(bad.store_path) in m for m in messages)
    assert good.store_path.exists()


# ---------------------------------------------------------------- the change gate off, a pass disabled
def test_with_the_change_gate_off_the_sensors_request_nothing_and_the_cycle_runs_the_pass(
    root, demo, instance, monkeypatch
):
    monkeypatch.setenv("DREAM__DreamPassChangeGateEnabled", "false")
    instance.add_dynamic_partitions(AGENTS, ["demo"])
    defs = build_definitions(deployment(root))
    for pass_name in GATED_PASSES:
        for tick in range(2):  # tick after tick: never a request (it used to request one on every tick)
            result, _ = _sensor(
                defs.get_sensor_def(f"{pass_name}_change_gate"),
                instance,
                root,
                now=NOW + timedelta(minutes=5 * tick),
            )
            assert not result.run_requests, pass_name
            assert f"change gate disabled: {pass_name} runs with every cycle" in result.skip_reason.skip_message
    requests, _ = _schedule(defs, instance, root)
    assert set(GATED_PASSES) <= {k.to_user_string() for k in requests[0].asset_selection}


@pytest.mark.parametrize(
    "pass_name,option",
    [
        ("memory_consolidation", "MemoryConsolidationEnabled"),
        ("skill_consolidation", "SkillConsolidationEnabled"),
        ("wisp_failure_analysis", "WispFailureAnalysisEnabled"),
        ("tier_routing_review", "TierRoutingReviewEnabled"),
    ],
)
def test_a_disabled_pass_is_never_requested_by_its_gate_sensor(root, demo, instance, monkeypatch, pass_name, option):
    instance.add_dynamic_partitions(AGENTS, ["demo"])
    sensor = build_definitions(deployment(root)).get_sensor_def(f"{pass_name}_change_gate")
    enabled, _ = _sensor(sensor, instance, root, now=NOW)
    assert len(enabled.run_requests) == 1  # never run: due
    (demo.root / "dream.toml").write_text(f"{option} = false\n")
    disabled, _ = _sensor(sensor, instance, root, now=NOW)
    assert not disabled.run_requests
    assert f"{pass_name} for demo: disabled ({option} = false)" in disabled.skip_reason.skip_message


def test_gate_sensors_take_their_clock_from_the_deployment(root, demo, instance):
    instance.add_dynamic_partitions(AGENTS, ["demo"])
    sensor = build_definitions(deployment(root)).get_sensor_def("skill_consolidation_change_gate")
    status = gate_status("skill_consolidation", demo, dream_options(), NOW)
    PassLedger(demo).stamp("skill_consolidation", status.fingerprint, NOW)
    soon, _ = _sensor(sensor, instance, root, now=NOW + timedelta(hours=1))
    assert not soon.run_requests and "next forced run at 2026-12-07T12:00:00Z" in soon.skip_reason.skip_message
    later, _ = _sensor(sensor, instance, root, now=NOW + timedelta(days=8))
    assert len(later.run_requests) == 1
