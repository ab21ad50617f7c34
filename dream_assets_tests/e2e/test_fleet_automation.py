"""Sensors that scale with what changed, not with the fleet: a gate sensor remembers, per agent, a signature of the
files its decision reads and decides an agent again only when they moved or a time-based rule comes due; a tick has a
time budget and leaves the rest for the next one; the start-up cycle of a fresh instance waits for the agents to be
registered. Real instance, real stores, the deployment's clock fixed."""

from __future__ import annotations

import json
import os
from datetime import UTC, datetime, timedelta

import dagster as dg
import pytest

from dream_assets.cycle import run_cycle
from dream_assets.definitions import build_definitions
from dream_assets.defs import automation
from dream_assets.demo import build_demo_profile
from dream_assets.options_loader import dream_options
from dream_assets.orchestration.deployment import DreamDeployment
from dream_assets.orchestration.partitions import AGENTS
from dream_assets.profile import AgentProfile
from dream_assets.save_pipeline import save_memory
from dream_assets.store import open_store
from dream_assets.store.connection import close_all
from dream_assets.store.log_records import WispExecutionEvent
from dream_assets.store.logs import append_event

NOW = datetime(2026, 11, 30, 12, 0, tzinfo=UTC)
GATE = "memory_consolidation_change_gate"


def _deployment(root, now=NOW) -> DreamDeployment:
    return DreamDeployment(profile_root=str(root), now=now.isoformat())


def _tick(defs, name, instance, root, cursor=None, now=NOW):
    sensor = defs.get_sensor_def(name)
    with dg.build_sensor_context(
        instance=instance, cursor=cursor, resources={"deployment": _deployment(root, now)}
    ) as ctx:
        return sensor(ctx)


@pytest.fixture(autouse=True)
def generous_tick_budget(monkeypatch):
    """A loaded test machine must not turn a tick's time budget into a different outcome (one test sets its own)."""
    monkeypatch.setattr(automation, "GATE_TICK_BUDGET_S", 600.0)


@pytest.fixture
def fleet(tmp_path, instance):
    """Three small agents, each after one cycle at NOW (so every gate is settled), registered in the instance."""
    root = tmp_path / "agents"
    names = ["alpha", "bravo", "charlie"]
    for i, name in enumerate(names):
        profile = AgentProfile(root / name)
        build_demo_profile(profile, NOW - timedelta(days=1), n_memories=12, seed=i + 1, with_logs=False)
        run_cycle(profile, dream_options(), NOW)
    close_all()  # the stores are closed (checkpointed) as an agent that went idle leaves them
    instance.add_dynamic_partitions(AGENTS, names)
    return root, names


def test_an_idle_fleet_is_decided_once_then_not_read_again_until_a_file_moves(fleet, instance):
    root, names = fleet
    defs = build_definitions(_deployment(root))
    first = _tick(defs, GATE, instance, root, now=NOW + timedelta(minutes=5))
    assert not first.run_requests, first.skip_reason
    remembered = json.loads(first.cursor)["agents"]
    assert set(remembered) == set(names)

    # Overwrite bravo's store with garbage of the same size and put its times back: a tick that read the store
    # would report bravo broken; a tick that trusts the unchanged signature does not read it.
    store = root / "bravo" / "store.duckdb"
    st = os.stat(store)
    original = store.read_bytes()
    store.write_bytes(b"\0" * len(original))
    os.utime(store, ns=(st.st_atime_ns, st.st_mtime_ns))
    second = _tick(defs, GATE, instance, root, cursor=first.cursor, now=NOW + timedelta(minutes=10))
    assert not second.run_requests
    assert "memory_consolidation: 3 agent(s) unchanged" in second.skip_reason.skip_message
    assert "bravo skipped" not in second.skip_reason.skip_message
    # each agent not decided again is named with the pass, its last run and its next forced run
    forced = NOW + dream_options().DreamPassMaxSkipInterval
    for name in names:
        assert (
            f"memory_consolidation for {name}: unchanged since its last decision (last ran "
            f"{NOW:%Y-%m-%dT%H:%M:%S}" in second.skip_reason.skip_message
        ), second.skip_reason.skip_message
    assert f"next forced run {forced:%Y-%m-%dT%H:%M:%S}" in second.skip_reason.skip_message
    store.write_bytes(original)
    os.utime(store, ns=(st.st_atime_ns, st.st_mtime_ns))

    # A memory saved by charlie moves its store: only charlie is decided again, and its pass is requested.
    store_c = open_store(AgentProfile(root / "charlie"), dream_options())
    save_memory(store_c.memories, "Charlie moved the build to Tuesday mornings.", now=NOW + timedelta(minutes=12))
    store_c.close()
    # Only charlie is decided again: its input moved, but its minimum interval still holds the pass back until then.
    third = _tick(defs, GATE, instance, root, cursor=second.cursor, now=NOW + timedelta(minutes=15))
    assert not third.run_requests
    message = third.skip_reason.skip_message
    assert (
        "2 agent(s) unchanged" in message and "memory_consolidation for charlie: skipped — minimum interval" in message
    )
    floor = json.loads(third.cursor)["agents"]["charlie"][1]
    assert floor is not None
    due = datetime.fromisoformat(floor.replace("Z", "+00:00")) + timedelta(minutes=1)
    fourth = _tick(defs, GATE, instance, root, cursor=third.cursor, now=due)
    assert [r.partition_key for r in fourth.run_requests] == ["charlie"]
    assert set(json.loads(fourth.cursor)["agents"]) == {"alpha", "bravo"}


def test_time_alone_brings_a_remembered_agent_back_when_its_maximum_skip_interval_elapses(fleet, instance):
    root, names = fleet
    defs = build_definitions(_deployment(root))
    first = _tick(defs, GATE, instance, root, now=NOW + timedelta(minutes=5))
    assert not first.run_requests
    recheck = {a: v[1] for a, v in json.loads(first.cursor)["agents"].items()}
    assert all(recheck.values()), recheck  # each agent says when the maximum skip interval forces its pass
    later = NOW + dream_options().DreamPassMaxSkipInterval + timedelta(minutes=1)
    second = _tick(defs, GATE, instance, root, cursor=first.cursor, now=later)
    assert sorted(r.partition_key for r in second.run_requests) == names


def test_a_tick_over_its_time_budget_leaves_the_rest_for_the_next_tick(fleet, instance, monkeypatch):
    root, names = fleet
    defs = build_definitions(_deployment(root))
    monkeypatch.setattr(automation, "GATE_TICK_BUDGET_S", -1.0)
    starved = _tick(defs, GATE, instance, root, now=NOW + timedelta(minutes=5))
    assert not starved.run_requests
    assert "3 agent(s) left for the next tick" in starved.skip_reason.skip_message
    assert json.loads(starved.cursor)["agents"] == {}
    monkeypatch.setattr(automation, "GATE_TICK_BUDGET_S", 600.0)
    decided = _tick(defs, GATE, instance, root, cursor=starved.cursor, now=NOW + timedelta(minutes=10))
    assert set(json.loads(decided.cursor)["agents"]) == set(names)


def test_an_unreadable_cursor_decides_every_agent_again(fleet, instance):
    root, names = fleet
    defs = build_definitions(_deployment(root))
    tick = _tick(defs, GATE, instance, root, cursor="not json", now=NOW + timedelta(minutes=5))
    assert set(json.loads(tick.cursor)["agents"]) == set(names)


def test_the_start_up_cycle_of_a_fresh_instance_waits_for_the_agents_to_be_registered(tmp_path, instance, monkeypatch):
    monkeypatch.setenv("DREAM__InitialDelay", "0")
    root = tmp_path / "agents"
    build_demo_profile(AgentProfile(root / "alpha"), NOW, n_memories=12, with_logs=False)
    defs = build_definitions(_deployment(root))
    waiting = _tick(defs, "dream_startup_sensor", instance, root)
    assert not waiting.run_requests
    assert "waits for agent_discovery_sensor" in waiting.skip_reason.skip_message
    discovered = _tick(defs, "agent_discovery_sensor", instance, root)
    instance.add_dynamic_partitions(AGENTS, list(discovered.dynamic_partitions_requests[0].partition_keys))
    launched = _tick(defs, "dream_startup_sensor", instance, root, cursor=waiting.cursor)
    assert [r.partition_key for r in launched.run_requests] == ["alpha"]


def test_a_run_that_cannot_see_its_agents_profile_fails_naming_the_path(tmp_path, instance):
    root = tmp_path / "agents"
    root.mkdir()
    instance.add_dynamic_partitions(AGENTS, ["ghost"])
    defs = build_definitions(_deployment(root))
    result = defs.resolve_job_def("dream_cycle").execute_in_process(
        instance=instance, partition_key="ghost", raise_on_error=False
    )
    assert not result.success
    failures = [e for e in result.all_events if e.event_type == dg.DagsterEventType.STEP_FAILURE]
    assert failures
    message = failures[0].event_specific_data.error_display_string
    assert f"no profile at {root / 'ghost'}" in message and "DREAM__ProfileRoot" in message
    assert not (root / "ghost").exists()  # nothing was created in its place


def test_after_a_cycle_an_idle_fleet_launches_nothing_even_for_passes_whose_logs_it_never_wrote(fleet, instance):
    """Agents without wisp, tier-routing or skill-usage logs: those passes skip without a ledger stamp, and their
    gates must not request a run that would only skip again, tick after tick, for every agent."""
    root, names = fleet
    defs = build_definitions(_deployment(root))
    gates = [s.name for s in defs.sensors if s.name.endswith("_change_gate")]
    assert len(gates) >= 5
    cursors = {}
    for name in gates:
        tick = _tick(defs, name, instance, root, now=NOW + timedelta(minutes=5))
        assert not tick.run_requests, f"{name}: {tick.skip_reason}"
        cursors[name] = tick.cursor
    # the first wisp execution of alpha opens its gate, and only alpha's
    append_event(
        AgentProfile(root / "alpha"),
        "wisp-executions",
        WispExecutionEvent(NOW + timedelta(minutes=6), "w1", "Sync the CRM", success=False, failed_step="auth"),
    )
    name = "wisp_failure_analysis_change_gate"
    tick = _tick(defs, name, instance, root, cursor=cursors[name], now=NOW + timedelta(minutes=10))
    assert [r.partition_key for r in tick.run_requests] == ["alpha"]


def test_finished_runs_older_than_the_run_retention_are_deleted_and_newer_ones_kept(tmp_path, instance):
    root = tmp_path / "agents"
    root.mkdir()
    today = datetime.now(UTC)
    job = build_definitions(_deployment(root, now=today)).resolve_job_def("run_retention_job")
    first = job.execute_in_process(instance=instance)
    second = job.execute_in_process(instance=instance)
    assert first.success and second.success
    assert len(instance.get_runs()) == 2  # nothing is old enough yet
    later = build_definitions(_deployment(root, now=today + timedelta(days=31))).resolve_job_def("run_retention_job")
    third = later.execute_in_process(instance=instance)
    assert third.success
    assert [r.run_id for r in instance.get_runs()] == [third.run_id]
    logs = [e.message for e in instance.all_logs(third.run_id) if "deleted 2 finished run(s)" in (e.message or "")]
    assert logs
