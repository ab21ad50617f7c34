"""The fleet deployment (deploy/dagster-postgres.yaml) against a real PostgreSQL server on 127.0.0.1: the instance
loads with Postgres storage and the queue limits, cycles for several agents record their runs, materializations and
asset checks there, a backfill of the day partitions runs, and the daemon itself (schedule and sensors) launches a
cycle for every agent through the queued run coordinator.

The server is Debian's ``postgresql`` package started by ``postgres_server.start_postgres``; without it these tests
skip and say why.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

import dagster as dg
import pytest

from dream_assets.definitions import build_definitions
from dream_assets.demo import build_demo_profile
from dream_assets.orchestration.deployment import NOW_TAG, DreamDeployment
from dream_assets.profile import AgentProfile
from dream_assets_tests.daemon import running_daemon
from dream_assets_tests.postgres_server import PostgresUnavailable, start_postgres

ROOT = Path(__file__).resolve().parents[2]
NOW = datetime(2026, 11, 30, 12, 0, tzinfo=UTC)
AGENTS = ("alpha", "bravo", "charlie")


@pytest.fixture(scope="module")
def postgres():
    try:
        with start_postgres() as server:
            yield server
    except PostgresUnavailable as exc:
        pytest.skip(f"no PostgreSQL server for the fleet deployment tests: {exc}")


@pytest.fixture
def fleet_home(postgres, tmp_path, monkeypatch):
    """A DAGSTER_HOME configured from deploy/dagster-postgres.yaml, on a fresh database of the test server."""
    database = postgres.create_database(f"dream_{os.getpid()}_{time.monotonic_ns()}")
    for key, value in postgres.env(database).items():
        monkeypatch.setenv(key, value)
    home = tmp_path / "dagster_home"
    home.mkdir()
    shutil.copy(ROOT / "deploy" / "dagster-postgres.yaml", home / "dagster.yaml")
    monkeypatch.setenv("DAGSTER_HOME", str(home))
    return home


def _agents(root: Path, now: datetime = NOW) -> list[AgentProfile]:
    profiles = []
    for i, agent in enumerate(AGENTS):
        profile = AgentProfile(root / agent)
        build_demo_profile(profile, now, n_memories=24, seed=i + 1)
        profiles.append(profile)
    return profiles


def test_the_fleet_instance_uses_postgres_storage_and_limits_runs_per_agent_and_model_use(fleet_home):
    with dg.DagsterInstance.from_config(str(fleet_home)) as instance:
        assert type(instance.run_storage).__name__ == "PostgresRunStorage"
        assert type(instance.event_log_storage).__name__ == "PostgresEventLogStorage"
        assert type(instance.schedule_storage).__name__ == "PostgresScheduleStorage"
        assert type(instance.run_coordinator).__name__ == "QueuedRunCoordinator"
        queue = instance.get_concurrency_config().run_queue_config
        limits = {limit["key"]: limit for limit in queue.tag_concurrency_limits}
        assert limits["dagster/partition"] == {
            "key": "dagster/partition",
            "value": {"applyLimitPerUniqueValue": True},
            "limit": 1,
        }
        assert limits["dream/uses_model"]["value"] == "true"
        assert instance.run_monitoring_enabled


def test_a_missing_postgres_setting_is_named_when_the_instance_loads(fleet_home, monkeypatch):
    monkeypatch.delenv("DAGSTER_PG_HOST")
    with pytest.raises(Exception, match="DAGSTER_PG_HOST"):
        dg.DagsterInstance.from_config(str(fleet_home))


def _definitions(root: Path) -> dg.Definitions:
    return build_definitions(deployment=DreamDeployment(profile_root=str(root), now=NOW.isoformat()))


@pytest.mark.slow
def test_cycles_of_several_agents_record_runs_materializations_and_checks_in_postgres(fleet_home, tmp_path):
    root = tmp_path / "agents"
    profiles = _agents(root)
    defs = _definitions(root)
    job = defs.resolve_job_def("dream_cycle")
    with dg.DagsterInstance.from_config(str(fleet_home)) as instance:
        instance.add_dynamic_partitions("agents", list(AGENTS))
        for profile in profiles:
            # the run acts at the fleet's NOW, as the schedule and sensors below do (not at the wall clock, which
            # moves the wisp log's 14-day window off the demo's executions as days pass)
            result = job.execute_in_process(
                instance=instance, partition_key=profile.agent_id, raise_on_error=False, tags={NOW_TAG: NOW.isoformat()}
            )
            assert result.success, f"cycle of {profile.agent_id} failed"
        runs = instance.get_runs(filters=dg.RunsFilter(job_name="dream_cycle"))
        assert {run.tags["dagster/partition"] for run in runs} == set(AGENTS)
        assert all(run.status == dg.DagsterRunStatus.SUCCESS for run in runs)
        # every agent's memory consolidation materialized and its pass_completed check passed, in Postgres
        key = dg.AssetKey("memory_consolidation")
        partitions = instance.get_materialized_partitions(key)
        assert partitions == set(AGENTS)
        check = dg.AssetCheckKey(key, "pass_completed")
        records = instance.event_log_storage.get_asset_check_execution_history(check, limit=10)
        assert len(records) == len(AGENTS)
        assert all(r.event.dagster_event.event_specific_data.passed for r in records if r.event)
        # the schedule and the gate sensors read this instance: a cycle per agent is due, no gate is
        deployment = DreamDeployment(profile_root=str(root), now=NOW.isoformat())
        with dg.build_schedule_context(
            instance=instance, scheduled_execution_time=NOW, resources={"deployment": deployment}
        ) as ctx:
            requests = defs.resolve_schedule_def("dream_cycle_schedule")(ctx)
        assert sorted(r.partition_key for r in requests) == sorted(AGENTS)
        for sensor in defs.sensors:
            if sensor.name.endswith("_change_gate"):
                with dg.build_sensor_context(instance=instance, resources={"deployment": deployment}) as ctx:
                    tick = sensor(ctx)
                assert not tick.run_requests, f"{sensor.name}: {tick.run_requests}"


@pytest.mark.slow
def test_a_backfill_of_day_partitions_runs_on_postgres(fleet_home, tmp_path):
    root = tmp_path / "agents"
    profiles = _agents(root, now=datetime.now(UTC))
    agent = profiles[0].agent_id
    today = datetime.now(UTC).date()
    first = today - timedelta(days=2)
    done = subprocess.run(
        [sys.executable, "-m", "dream_assets.launch.backfill", "--profile", str(profiles[0].root)]
        + ["--from", first.isoformat(), "--to", today.isoformat(), "--select", "log_warehouse"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    with dg.DagsterInstance.from_config(str(fleet_home)) as instance:
        assert agent in instance.get_dynamic_partitions("agents")
        days = instance.get_materialized_partitions(dg.AssetKey("log_warehouse"))
        expected = {f"{agent}|{(first + timedelta(days=i)).isoformat()}" for i in range(3)}
        assert days == expected, days
        runs = instance.get_runs()
        assert runs and all(r.status == dg.DagsterRunStatus.SUCCESS for r in runs)


@pytest.mark.slow
def test_the_daemon_registers_every_agent_and_launches_its_cycle_through_the_queue(fleet_home, tmp_path):
    root = tmp_path / "agents"
    _agents(root, now=datetime.now(UTC))
    env = {
        **os.environ,
        "DREAM__ProfileRoot": str(root),
        "DREAM__InitialDelay": "0",
        "DREAM_LOG_LEVEL": "WARNING",
    }
    log = tmp_path / "daemon.log"
    with running_daemon(env, log) as daemon:
        deadline = time.monotonic() + 420
        with dg.DagsterInstance.from_config(str(fleet_home)) as instance:
            while time.monotonic() < deadline:
                runs = instance.get_runs(filters=dg.RunsFilter(job_name="dream_cycle"))
                done = [r for r in runs if r.is_finished]
                if len({r.tags.get("dagster/partition") for r in done}) == len(AGENTS):
                    break
                assert daemon.poll() is None, "the daemon exited:\n" + log.read_text()[-5000:]
                time.sleep(3)
            else:
                pytest.fail(f"the daemon launched {len(runs)} cycle run(s), {len(done)} finished, in 420 s")
            assert set(instance.get_dynamic_partitions("agents")) == set(AGENTS)
            assert all(r.status == dg.DagsterRunStatus.SUCCESS for r in done), [(r.run_id, r.status) for r in done]
            assert {r.tags["dagster/partition"] for r in done} == set(AGENTS)


def _dream_run(profile: AgentProfile, env: dict[str, str], out: Path) -> subprocess.Popen:
    handle = open(out, "w", encoding="utf-8")  # noqa: SIM115 - closed with the process by _finish
    return subprocess.Popen(
        [sys.executable, "-m", "dream_assets.cli", "run", "--profile", str(profile.root)],
        cwd=ROOT,
        env=env,
        stdout=handle,
        stderr=subprocess.STDOUT,
    )


def _until(what: str, check, timeout_s: float = 240.0):
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        found = check()
        if found:
            return found
        time.sleep(0.3)
    pytest.fail(f"{what}: not within {timeout_s:.0f} s")


def _only_waits(instance: dg.DagsterInstance, run_id: str) -> bool:
    """No step of the run is executing (twice in a row, a second apart): it only waits for a slot."""
    for _ in range(2):
        kinds = {dg.DagsterEventType.STEP_START, dg.DagsterEventType.STEP_SUCCESS, dg.DagsterEventType.STEP_FAILURE}
        events = instance.all_logs(run_id, of_type=kinds)
        started = {e.step_key for e in events if e.dagster_event_type == dg.DagsterEventType.STEP_START}
        ended = {e.step_key for e in events if e.dagster_event_type != dg.DagsterEventType.STEP_START}
        if started - ended:
            return False
        time.sleep(1.0)
    return True


def _llm(instance: dg.DagsterInstance):
    return instance.event_log_storage.get_concurrency_info("llm")


@pytest.mark.slow  # three `dream run` processes on PostgreSQL, one of them killed while it holds the `llm` slot
def test_a_killed_dream_run_gives_its_llm_slot_back_and_a_waiting_one_stops_on_sigterm(fleet_home, tmp_path):
    from dream_assets_tests.openai_server import OpenAITestServer, hang

    alpha, bravo, charlie = _agents(tmp_path / "agents", now=datetime.now(UTC))
    env = {**os.environ, "DREAM__RunTimeout": "600", "DREAM_LOG_LEVEL": "WARNING"}
    with OpenAITestServer(default=hang(900)) as server, dg.DagsterInstance.from_config(str(fleet_home)) as instance:
        # alpha's endpoint never answers: its first model step holds the one `llm` slot for as long as it lives
        (alpha.root / "dream.toml").write_text(
            f'LlmBaseUrl = "{server.base_url}"\nLlmModel = "test"\nLlmTimeout = 900\nLlmMaxRetries = 0\n',
            encoding="utf-8",
        )
        holder = _dream_run(alpha, env, tmp_path / "alpha.out")
        try:
            (held,) = _until("alpha holds the llm slot", lambda: server.requests and _llm(instance).claimed_slots)
            waiter = _dream_run(bravo, env, tmp_path / "bravo.out")
            try:
                waiting = _until(
                    "bravo waits for the llm slot",
                    lambda: [s for s in _llm(instance).pending_steps if s.run_id != held.run_id],
                )
                # and does nothing else: every step it could run without the slot has finished
                _until("bravo only waits", lambda: _only_waits(instance, waiting[0].run_id), timeout_s=120)
                waiter.send_signal(signal.SIGTERM)
                assert waiter.wait(timeout=120) == 1  # without the fix it waits for ever
            finally:
                waiter.kill()
            said = (tmp_path / "bravo.out").read_text()
            assert "STOPPED by a signal" in said, said[-3000:]
            (stopped,) = instance.get_runs(filters=dg.RunsFilter(tags={"dagster/partition": "bravo"}))
            assert stopped.status == dg.DagsterRunStatus.FAILURE
            assert [s.run_id for s in _llm(instance).pending_steps if s.run_id == stopped.run_id] == []
            assert holder.poll() is None and [s.run_id for s in _llm(instance).claimed_slots] == [held.run_id]

            holder.send_signal(signal.SIGKILL)
            holder.wait(timeout=60)
        finally:
            holder.kill()
        # the next run of another agent gets the slot of the killed one at once, not after the run timeout
        done = subprocess.run(
            [sys.executable, "-m", "dream_assets.cli", "run", "--profile", str(charlie.root)],
            cwd=ROOT,
            env=env,
            capture_output=True,
            text=True,
            timeout=500,  # under RunTimeout (600 s): only the process check can have freed the slot
        )
        assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
        assert f"freed the pool slots of a dead run — {held.run_id}" in done.stdout, done.stdout[-3000:]
        assert "is gone" in done.stdout
        killed = instance.get_run_by_id(held.run_id)
        assert killed.status == dg.DagsterRunStatus.FAILURE
        assert _llm(instance).claimed_slots == []
