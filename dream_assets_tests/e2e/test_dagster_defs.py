"""The Dagster layer, against a real (temporary) instance: definitions, the cycle, sensors, schedule, backfills,
audit."""

import json
import re
import shutil
from datetime import UTC, datetime, timedelta
from pathlib import Path

import dagster as dg
import pytest

from dream_assets.definitions import build_definitions
from dream_assets.demo import build_demo_profile
from dream_assets.gates import GATED_PASSES, gate_status
from dream_assets.log_analyses import read_analysis
from dream_assets.options_loader import dream_options
from dream_assets.orchestration.deployment import NOW_TAG, DreamDeployment
from dream_assets.orchestration.partitions import AGENTS
from dream_assets.passes.registry import PASSES
from dream_assets.profile import AgentProfile
from dream_assets.save_pipeline import save_memory
from dream_assets.store import open_store
from dream_assets.store.ledger import PassLedger
from dream_assets.store.warehouse import read_day
from dream_assets_tests.conftest import SMALL_DEMO_MEMORIES

NOW = datetime(2026, 11, 30, 12, 0, tzinfo=UTC)


def deployment(root) -> DreamDeployment:
    """The deployment the tests run on; its clock (what sensors call now) is NOW, never the wall clock."""
    return DreamDeployment(profile_root=str(root), now=NOW.isoformat())


def run_cycle(defs, instance, agent, now=NOW, selection=None):
    job = defs.resolve_job_def("dream_cycle")
    return job.execute_in_process(
        instance=instance, partition_key=agent, tags={NOW_TAG: now.isoformat()}, asset_selection=selection
    )


def materialized(result) -> dict[str, dict]:
    out = {}
    for ev in result.get_asset_materialization_events():
        mat = ev.event_specific_data.materialization
        out[mat.asset_key.to_user_string()] = {k: v.value for k, v in mat.metadata.items()}
    return out


# ---------------------------------------------------------------- definitions snapshot
def test_definitions_snapshot(root):
    defs = build_definitions(deployment(root))
    graph = defs.resolve_asset_graph()
    keys = {k.to_user_string() for k in graph.get_all_asset_keys()}
    assert {
        "memory_corpus",
        "skill_catalog",
        "conversation_log",
        "feedback_log",
        "skill_usage_log",
        "tool_call_log",
        "skill_resource_usage_log",
        "wisp_execution_log",
        "tier_routing_log",
        "dream_pass_ledger",
    } <= keys
    assert {p.name for p in PASSES} == {
        "log_retention",
        "archive_purge",
        "importance_decay",
        "memory_consolidation",
        "skill_gap_detection",
        "skill_consolidation",
        "skill_optimization",
        "preference_inference",
        "wisp_failure_analysis",
        "tier_routing_review",
        "contradiction_sweep",
    }
    assert {p.name for p in PASSES} | {
        "corpus_snapshot",
        "memory_audit",
        "log_warehouse",
        "wisp_failure_history",
        "tier_routing_history",
        "skill_usage_history",
        "recurring_request_history",
    } <= keys
    assert [p.name for p in PASSES][:4] == [
        "log_retention",
        "archive_purge",
        "importance_decay",
        "memory_consolidation",
    ]
    # lineage: each pass depends on the passes before it and on the inputs it reads; the first passes on the read
    # of the agent's linked memory folder
    assert "memory_folder_read" in keys
    for spec in PASSES:
        parents = {k.to_user_string() for k in graph.get(dg.AssetKey(spec.name)).parent_keys}
        assert set(spec.after) | set(spec.reads) | (set() if spec.after else {"memory_folder_read"}) == parents
        node = graph.get(dg.AssetKey(spec.name))
        assert node.group_name in {"logs", "memory", "skills"}
        assert (node.pools == {"llm"}) == spec.uses_model or spec.uses_model is False
    assert {j.name for j in defs.jobs} >= {"dream_cycle", "memory_audit_job", "observe_inputs"}
    assert {s.name for s in defs.schedules} == {
        "dream_cycle_schedule",
        "memory_audit_schedule",
        "observe_inputs_schedule",
        "run_retention_schedule",
    }
    assert {s.name for s in defs.sensors} == {
        "dream_startup_sensor",
        "agent_discovery_sensor",
        "deferred_retry_sensor",
        "dead_run_sensor",
        *(f"{p}_change_gate" for p in GATED_PASSES),
    }
    assert defs.get_schedule_def("dream_cycle_schedule").cron_schedule == "0 */4 * * *"


# ---------------------------------------------------------------- the cycle
@pytest.mark.slow  # the full 320-memory demo, every pass
def test_full_cycle_materializes_every_pass_on_the_demo_agent(root, full_demo, instance):
    instance.add_dynamic_partitions(AGENTS, ["demo"])
    defs = build_definitions(deployment(root))
    result = run_cycle(defs, instance, "demo")
    assert result.success
    mats = materialized(result)
    for spec in PASSES:
        assert spec.name in mats, spec.name
        assert mats[spec.name]["status"] in {"completed", "skipped"}, (spec.name, mats[spec.name])
        assert mats[spec.name]["summary"]
    assert mats["archive_purge"]["summary"] == "6 purged, 2 kept above the high-value floor"
    # the demo's near-duplicate clusters are merged or, when they are exact duplicates, folded without a model call
    # (sources archived, never deleted)
    assert mats["memory_consolidation"]["merged"] >= 5
    assert mats["memory_consolidation"]["merged"] + mats["memory_consolidation"]["folded"] >= 10
    # every row is still there but the 6 purged, plus one per merged entry written
    snapshot = mats["corpus_snapshot"]
    assert snapshot["memories_live"] + snapshot["memories_archived"] == 320 - 6 + mats["memory_consolidation"]["merged"]
    checks = [e.event_specific_data for e in result.all_events if e.event_type_value == "ASSET_CHECK_EVALUATION"]
    assert checks and all(c.passed for c in checks)


@pytest.mark.slow  # whole cycles of two agents
def test_two_agents_keep_separate_ledgers(root, instance):
    for agent in ("alpha", "beta"):
        build_demo_profile(AgentProfile(root / agent), NOW, n_memories=SMALL_DEMO_MEMORIES)
    instance.add_dynamic_partitions(AGENTS, ["alpha", "beta"])
    defs = build_definitions(deployment(root))
    assert run_cycle(defs, instance, "alpha").success
    alpha, beta = PassLedger(AgentProfile(root / "alpha")), PassLedger(AgentProfile(root / "beta"))
    assert alpha.records() and not beta.records()
    assert (root / "alpha" / "dream-pass-ledger.json").exists() and not (
        root / "beta" / "dream-pass-ledger.json"
    ).exists()


# ---------------------------------------------------------------- change-gate sensors
def _gate_sensor(defs, pass_name):
    return defs.get_sensor_def(f"{pass_name}_change_gate")


def _tick(sensor, instance, root, cursor=None):
    with dg.build_sensor_context(instance=instance, cursor=cursor, resources={"deployment": deployment(root)}) as ctx:
        return sensor(ctx)


def _schedule_tick(schedule, instance, root, when):
    with dg.build_schedule_context(
        instance=instance, scheduled_execution_time=when, resources={"deployment": deployment(root)}
    ) as ctx:
        return schedule(ctx)


def test_a_gate_run_of_a_pass_in_review_also_shows_its_pending_set(root, demo, instance):
    """A pass the change gate runs alone, in ApplyMode review, brings the review queue along: its check warns about
    the new pending set at once, not at the next cycle. A pass in auto runs alone."""
    from dream_assets.passes import review
    from dream_assets.store.connection import close_all

    (demo.root / "dream.toml").write_text('MemoryConsolidationApplyMode = "review"\n', encoding="utf-8")
    instance.add_dynamic_partitions(AGENTS, ["demo"])
    defs = build_definitions(deployment(root))
    (req,) = _tick(_gate_sensor(defs, "memory_consolidation"), instance, root).run_requests
    assert req.asset_selection == [dg.AssetKey("memory_consolidation"), dg.AssetKey("review_queue")]
    (auto,) = _tick(_gate_sensor(defs, "skill_consolidation"), instance, root).run_requests
    assert auto.asset_selection == [dg.AssetKey("skill_consolidation")]
    result = defs.resolve_job_def("dream_cycle").execute_in_process(
        instance=instance, partition_key="demo", tags={NOW_TAG: NOW.isoformat()}, asset_selection=req.asset_selection
    )
    assert result.success
    close_all()
    waiting = len(review.decisions(open_store(demo, dream_options())))
    assert waiting > 0  # the demo's first consolidation merges
    (check,) = [
        e.event_specific_data
        for e in result.all_events
        if e.event_type_value == "ASSET_CHECK_EVALUATION"
        and e.event_specific_data.check_name == "nothing_waits_for_review"
    ]
    assert not check.passed and f"agent demo: {waiting} change(s) wait for review" in check.description


def test_gate_sensor_requests_a_pass_never_run_and_skips_it_when_unchanged(root, demo, instance):
    instance.add_dynamic_partitions(AGENTS, ["demo"])
    defs = build_definitions(deployment(root))
    sensor = _gate_sensor(defs, "skill_consolidation")
    first = _tick(sensor, instance, root)
    assert len(first.run_requests) == 1
    req = first.run_requests[0]
    assert req.partition_key == "demo" and req.asset_selection == [dg.AssetKey("skill_consolidation")]
    status = gate_status("skill_consolidation", demo, dream_options(), NOW)
    assert status.fingerprint in req.run_key
    # the pass ran on this fingerprint (stamped now): unchanged -> skip, naming the pass and when it will be forced
    PassLedger(demo).stamp("skill_consolidation", status.fingerprint, NOW)
    second = _tick(sensor, instance, root)
    assert not second.run_requests
    reason = second.skip_reason.skip_message
    assert "skill_consolidation for demo: skipped" in reason and "next forced" in reason and "last ran" in reason


def test_gate_sensor_runs_when_the_input_changed(root, demo, instance):
    instance.add_dynamic_partitions(AGENTS, ["demo"])
    defs = build_definitions(deployment(root))
    status = gate_status("skill_consolidation", demo, dream_options(), NOW)
    PassLedger(demo).stamp("skill_consolidation", status.fingerprint, NOW)
    store = open_store(demo)
    skill = store.skills.get("mcp/weather")
    store.skills.save(skill.with_(content=skill.content + " Include the UV index."), now=NOW)
    result = _tick(_gate_sensor(defs, "skill_consolidation"), instance, root)
    assert len(result.run_requests) == 1
    assert result.run_requests[0].run_key != f"skill_consolidation:demo:{status.fingerprint}"


def test_gate_sensor_forces_a_run_when_the_floor_elapsed(root, demo, instance):
    instance.add_dynamic_partitions(AGENTS, ["demo"])
    defs = build_definitions(deployment(root))
    status = gate_status("skill_consolidation", demo, dream_options(), NOW)
    PassLedger(demo).stamp("skill_consolidation", status.fingerprint, NOW - timedelta(days=8))
    result = _tick(_gate_sensor(defs, "skill_consolidation"), instance, root)
    assert len(result.run_requests) == 1
    assert "DreamPassMaxSkipInterval elapsed" in result.run_requests[0].tags["dream/trigger"]


def test_gate_sensor_treats_a_corrupt_ledger_as_never_run(root, demo, instance):
    instance.add_dynamic_partitions(AGENTS, ["demo"])
    demo.ledger_path.write_text("{oops")
    result = _tick(_gate_sensor(build_definitions(deployment(root)), "skill_consolidation"), instance, root)
    assert len(result.run_requests) == 1


def test_gate_sensor_for_a_time_window_ignores_events_ageing_out(root, demo, instance):
    now = NOW
    status = gate_status("tier_routing_review", demo, dream_options(), now)
    later = gate_status("tier_routing_review", demo, dream_options(), now + timedelta(days=3))
    # three days later some events left the 14-day window, but the newest event is the same: unchanged
    assert status.fingerprint == later.fingerprint


def test_a_disabled_pass_gate_sensor_requests_nothing_and_reads_nothing(root, demo, instance):
    from dream_assets.store.connection import close_all

    instance.add_dynamic_partitions(AGENTS, ["demo"])
    sensor = _gate_sensor(build_definitions(deployment(root)), "skill_consolidation")
    close_all()
    demo.store_path.write_bytes(b"this is not a DuckDB database" * 100)
    enabled = _tick(sensor, instance, root)
    assert not enabled.run_requests  # enabled: the sensor reads the store, finds it unreadable and names it
    assert "agent demo skipped" in enabled.skip_reason.skip_message
    assert str(demo.store_path) in enabled.skip_reason.skip_message
    (demo.root / "dream.toml").write_text("SkillConsolidationEnabled = false\n")
    disabled = _tick(sensor, instance, root)
    assert not disabled.run_requests  # disabled: nothing requested, and the store was never opened
    assert disabled.skip_reason.skip_message == (
        "skill_consolidation for demo: disabled (SkillConsolidationEnabled = false), never requested"
    )


@pytest.mark.slow  # a whole cycle and an observation run
def test_each_gated_pass_stamps_the_data_version_its_input_source_asset_shows(root, demo, instance):
    instance.add_dynamic_partitions(AGENTS, ["demo"])
    defs = build_definitions(deployment(root))
    assert run_cycle(defs, instance, "demo").success
    assert defs.resolve_job_def("observe_inputs").execute_in_process(instance=instance).success
    ledger = PassLedger(demo)
    for spec in PASSES:
        if spec.gate is None or spec.fingerprint is not None:  # those stamp what they sent (test_pass_specs.py)
            continue
        rec = instance.get_latest_data_version_record(dg.AssetKey(spec.gate), is_source=True, partition_key="demo")
        assert ledger.get(spec.name) is not None, spec.name
        assert rec.asset_observation.data_version == ledger.get(spec.name).fingerprint, spec.name


# ---------------------------------------------------------------- schedule and start-up
def test_schedule_holds_consolidation_back_inside_the_minimum_interval(root, demo, instance):
    instance.add_dynamic_partitions(AGENTS, ["demo"])
    defs = build_definitions(deployment(root))
    schedule = defs.get_schedule_def("dream_cycle_schedule")
    PassLedger(demo).stamp("memory_consolidation", "x", NOW - timedelta(hours=2))
    reqs = _schedule_tick(schedule, instance, root, NOW)
    assert len(reqs) == 1
    selected = {k.to_user_string() for k in reqs[0].asset_selection}
    assert "memory_consolidation" not in selected and "log_retention" in selected
    assert "held back until 2026-11-30T16:00:00Z" in reqs[0].tags["dream/held_back"]
    later = _schedule_tick(schedule, instance, root, NOW + timedelta(hours=5))
    assert "memory_consolidation" in {k.to_user_string() for k in later[0].asset_selection}


def test_schedule_skips_with_a_reason_when_dreaming_is_disabled(root, demo, instance, monkeypatch):
    instance.add_dynamic_partitions(AGENTS, ["demo"])
    monkeypatch.setenv("DREAM__Enabled", "false")
    defs = build_definitions(deployment(root))
    skip = _schedule_tick(defs.get_schedule_def("dream_cycle_schedule"), instance, root, NOW)
    assert isinstance(skip, dg.SkipReason) and "Enabled = false" in skip.skip_message


def test_startup_sensor_waits_for_the_initial_delay_then_launches_once(root, demo, instance):
    instance.add_dynamic_partitions(AGENTS, ["demo"])
    sensor = build_definitions(deployment(root)).get_sensor_def("dream_startup_sensor")
    first = _tick(sensor, instance, root)
    assert not first.run_requests and "(InitialDelay)" in first.skip_reason.skip_message
    cursor = json.loads(first.cursor)
    cursor["first_seen"] = (NOW - timedelta(minutes=6)).isoformat()
    second = _tick(sensor, instance, root, cursor=json.dumps(cursor))
    assert len(second.run_requests) == 1 and second.run_requests[0].partition_key == "demo"
    third = _tick(sensor, instance, root, cursor=second.cursor)
    assert not third.run_requests and "already launched" in third.skip_reason.skip_message


def test_discovery_sensor_registers_new_agent_profiles(root, instance, small_demo_template):
    for agent in ("alpha", "beta"):
        shutil.copytree(small_demo_template, root / agent)
    sensor = build_definitions(deployment(root)).get_sensor_def("agent_discovery_sensor")
    result = _tick(sensor, instance, root)
    assert result.dynamic_partitions_requests[0].partition_keys == ["alpha", "beta"]


# ---------------------------------------------------------------- backfills
@pytest.mark.slow  # a backfill of five day partitions, twice
def test_five_day_backfill_gives_five_idempotent_partitions(root, demo, instance):
    instance.add_dynamic_partitions(AGENTS, ["demo"])
    defs = build_definitions(deployment(root))
    assets = [defs.get_assets_def("log_warehouse"), defs.get_assets_def("wisp_failure_history")]
    # the warehouse first holds the last 15 days of logs (the 14-day window of the earliest backfilled day)
    dg.materialize(
        [assets[0]],
        instance=instance,
        resources={"deployment": deployment(root)},
        tags={
            "dagster/asset_partition_range_start": f"demo|{(NOW - timedelta(days=20)).date()}",
            "dagster/asset_partition_range_end": f"demo|{NOW.date()}",
            NOW_TAG: NOW.isoformat(),
        },
    )
    days = [(NOW - timedelta(days=d)).date() for d in range(5, 0, -1)]
    tags = {
        "dagster/asset_partition_range_start": f"demo|{days[0]}",
        "dagster/asset_partition_range_end": f"demo|{days[-1]}",
        NOW_TAG: NOW.isoformat(),
    }
    first = dg.materialize(assets, instance=instance, tags=tags, resources={"deployment": deployment(root)})
    assert first.success
    rows_first = {d: len(read_day(demo, "wisp-executions", d)) for d in days}
    analyses_first = {d: read_analysis(demo, "wisp_failure_history", d) for d in days}
    assert all((demo.analyses_dir / "wisp_failure_history" / f"date={d}").exists() for d in days)
    again = dg.materialize(assets, instance=instance, tags=tags, resources={"deployment": deployment(root)})
    assert again.success
    assert {d: len(read_day(demo, "wisp-executions", d)) for d in days} == rows_first
    assert {d: read_analysis(demo, "wisp_failure_history", d) for d in days} == analyses_first
    last = analyses_first[days[-1]]
    invoice = next(r for r in last if r["description"] == "Convert invoice PDF to spreadsheet row")
    assert invoice["failure_pattern"] is True


# ---------------------------------------------------------------- audit
@pytest.mark.slow  # snapshots and audits over a whole cycle
def test_audit_fails_on_a_hand_deleted_entry_and_passes_after_a_clean_cycle(root, demo, instance):
    instance.add_dynamic_partitions(AGENTS, ["demo"])
    defs = build_definitions(deployment(root))
    snap = [defs.get_assets_def("corpus_snapshot"), defs.get_assets_def("memory_audit")]
    res = {"deployment": deployment(root)}
    assert dg.materialize(snap, instance=instance, partition_key="demo", resources=res).success
    store = open_store(demo)
    victim = store.memories.list_live()[0]
    with store.connection.session() as conn:  # a hard delete outside the archive purge
        conn.execute("DELETE FROM memories WHERE id = ?", [victim.id])
    bad = dg.materialize(snap, instance=instance, partition_key="demo", resources=res, raise_on_error=False)
    evals = {
        e.event_specific_data.check_name: e.event_specific_data
        for e in bad.all_events
        if e.event_type_value == "ASSET_CHECK_EVALUATION"
    }
    assert evals["no_unexplained_deletes"].passed is False
    assert victim.id in evals["no_unexplained_deletes"].metadata["ids"].value
    good = dg.materialize(snap, instance=instance, partition_key="demo", resources=res, raise_on_error=False)
    evals = {
        e.event_specific_data.check_name: e.event_specific_data
        for e in good.all_events
        if e.event_type_value == "ASSET_CHECK_EVALUATION"
    }
    assert all(e.passed for e in evals.values())
    assert len([ln for ln in demo.audit_trend_path.read_text().splitlines() if ln]) == 3


@pytest.mark.slow  # snapshots and audits
def test_audit_pauses_consolidation_on_hard_delete_when_opted_in(root, demo, instance, monkeypatch):
    monkeypatch.setenv("DREAM__AuditPauseOnHardDelete", "true")
    instance.add_dynamic_partitions(AGENTS, ["demo"])
    defs = build_definitions(deployment(root))
    snap = [defs.get_assets_def("corpus_snapshot"), defs.get_assets_def("memory_audit")]
    res = {"deployment": deployment(root)}
    dg.materialize(snap, instance=instance, partition_key="demo", resources=res)
    store = open_store(demo)
    with store.connection.session() as conn:
        conn.execute("DELETE FROM memories WHERE id = (SELECT min(id) FROM memories)")
    dg.materialize(snap, instance=instance, partition_key="demo", resources=res, raise_on_error=False)
    assert demo.consolidation_pause_path.exists()


@pytest.mark.slow  # a whole cycle
def test_after_a_cycle_the_sensors_agree_with_the_passes_that_nothing_is_due(root, demo, instance):
    instance.add_dynamic_partitions(AGENTS, ["demo"])
    assert run_cycle(build_definitions(deployment(root)), instance, "demo").success
    later = NOW + timedelta(minutes=10)
    for pass_name in GATED_PASSES:
        status = gate_status(pass_name, demo, dream_options(), later)
        assert status.decision.skip, (pass_name, status.decision.reason)


@pytest.mark.slow  # three observation runs
def test_observing_the_inputs_records_content_fingerprints_as_data_versions(root, demo, instance):
    instance.add_dynamic_partitions(AGENTS, ["demo"])
    defs = build_definitions(deployment(root))
    job = defs.resolve_job_def("observe_inputs")

    def version(asset: str) -> str:
        rec = instance.get_latest_data_version_record(dg.AssetKey(asset), is_source=True, partition_key="demo")
        return rec.asset_observation.data_version

    assert job.execute_in_process(instance=instance).success
    corpus, skills, wisp = version("memory_corpus"), version("skill_catalog"), version("wisp_execution_log")
    store = open_store(demo)
    store.memories.set_importance({store.memories.list_live()[0].id: 0.2}, now=NOW)  # a drifting statistic
    assert job.execute_in_process(instance=instance).success
    assert (version("memory_corpus"), version("skill_catalog"), version("wisp_execution_log")) == (
        corpus,
        skills,
        wisp,
    )
    save_memory(store.memories, "The user's new laptop is a ThinkPad X1 Carbon.", now=NOW)
    assert job.execute_in_process(instance=instance).success
    assert version("memory_corpus") != corpus and version("skill_catalog") == skills


# ---------------------------------------------------------------- what each partition and pass shows
@pytest.mark.slow  # a backfill of day partitions
def test_each_log_warehouse_day_shows_that_days_rows_per_log_kind(root, demo, instance):
    instance.add_dynamic_partitions(AGENTS, ["demo"])
    defs = build_definitions(deployment(root))
    days = [(NOW - timedelta(days=d)).date() for d in range(3, 0, -1)]
    result = dg.materialize(
        [defs.get_assets_def("log_warehouse")],
        instance=instance,
        resources={"deployment": deployment(root)},
        tags={
            "dagster/asset_partition_range_start": f"demo|{days[0]}",
            "dagster/asset_partition_range_end": f"demo|{days[-1]}",
            NOW_TAG: NOW.isoformat(),
        },
    )
    assert result.success
    shown = {}
    for event in result.get_asset_materialization_events():
        mat = event.event_specific_data.materialization
        shown[mat.partition] = {k: v.value for k, v in mat.metadata.items()}
    assert set(shown) == {f"demo|{d}" for d in days}
    for d in days:
        meta = shown[f"demo|{d}"]
        assert meta["day"] == d.isoformat()
        wisp = len(read_day(demo, "wisp-executions", d))
        tiers = len(read_day(demo, "tier-routing", d))
        assert meta["rows_wisp_executions"] == wisp and meta["rows_tier_routing"] == tiers
        assert meta["dagster/row_count"] >= wisp + tiers
    totals = [shown[f"demo|{d}"]["dagster/row_count"] for d in days]
    assert sum(totals) > 0 and len(set(totals)) > 1, totals  # per day, not one run-wide total repeated


@pytest.mark.slow  # two whole cycles
def test_a_skipped_pass_materializes_the_same_numeric_keys_as_when_it_completed(root, demo, instance):
    instance.add_dynamic_partitions(AGENTS, ["demo"])
    defs = build_definitions(deployment(root))
    first = materialized(run_cycle(defs, instance, "demo"))
    second = materialized(run_cycle(defs, instance, "demo", now=NOW + timedelta(hours=1)))
    assert first["skill_consolidation"]["status"] == "completed"
    assert second["skill_consolidation"]["status"] == "skipped"
    numeric = {k for k, v in first["skill_consolidation"].items() if isinstance(v, int | float)}
    assert numeric and numeric <= set(second["skill_consolidation"])
    assert second["skill_consolidation"]["skills"] == first["skill_consolidation"]["skills"]
    assert second["skill_consolidation"]["merged"] == 0 and second["skill_consolidation"]["model_calls"] == 0
    # the cycle's report is written under the profile
    assert len(list(demo.cycle_reports_dir.glob("*.md"))) == 2
    # memory consolidation: held back by its minimum interval the second time, with the very same keys
    done, held = first["memory_consolidation"], second["memory_consolidation"]
    assert done["status"] == "completed" and held["status"] == "skipped"
    keys = {k for k, v in done.items() if isinstance(v, int | float)}
    assert keys == {k for k, v in held.items() if isinstance(v, int | float)}
    assert done["floored"] == 0 and held["floored"] == 1
    # the counts add up: every count of entries is of the live corpus the pass started from
    assert done["eligible"] + done["withheld"] == done["live"]
    assert done["unreviewed"] <= done["live"] and done["live_after"] <= done["live"]
    # and each count's meaning is in the asset description
    description = defs.resolve_asset_graph().get(dg.AssetKey("memory_consolidation")).description
    undocumented = sorted(k for k in keys if not k.startswith("model_") and f"`{k}`" not in description)
    assert undocumented == [], undocumented


def test_the_lineage_reads_inputs_logs_memory_and_skills_then_audit(root):
    defs = build_definitions(deployment(root))
    graph = defs.resolve_asset_graph()
    stage = {
        "inputs": "1-inputs",
        "logs": "2-logs",
        "memory": "3-memory",
        "skills": "3-skills",
        "audit": "4-audit",
    }
    for key in graph.get_all_asset_keys():
        node = graph.get(key)
        assert node.description and len(node.description.split("\n")[0]) <= 120, key
        assert node.tags.get("stage") == stage[node.group_name], key
        for parent in node.parent_keys:  # every edge goes forward (or stays) in the reading order
            assert stage[graph.get(parent).group_name][0] <= stage[node.group_name][0], (parent, key)
    assert graph.get(dg.AssetKey("wisp_failure_history")).group_name == "logs"


# ---------------------------------------------------------------- the README's list of change-gate sensors
def test_the_change_gate_sensors_are_exactly_the_passes_the_readme_names(root):
    readme = (Path(__file__).resolve().parents[2] / "README.md").read_text()
    bullet = re.search(r"^- `<pass>_change_gate` sensors(.*?)^- ", readme, flags=re.S | re.M)
    assert bullet, "README: the `<pass>_change_gate` sensors bullet"
    passes = {p.name for p in PASSES}
    named = set(re.findall(r"`([a-z_]+)`", bullet.group(1))) & passes
    defs = build_definitions(deployment(root))
    sensors = {s.name.removesuffix("_change_gate") for s in defs.sensors if s.name.endswith("_change_gate")}
    assert sensors == named == set(GATED_PASSES)
    # Every pass that sends a whole window to the model is gated by a sensor, as by the runner.
    assert {"skill_gap_detection", "skill_optimization"} <= sensors
