"""Pool slots of dead runs come back (orchestration/run_liveness.py), on a real Dagster instance: a run that holds
the `llm` slot and died — its process gone on this machine, or no heartbeat for RunTimeout from another — is marked
failed and its slot freed; a live run keeps its slot however long it takes."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time

import dagster as dg
import pytest

from dream_assets.orchestration.run_liveness import (
    HEARTBEAT_TAG,
    HOST_TAG,
    PID_TAG,
    RunHeartbeat,
    free_slots_of_dead_runs,
)

TIMEOUT_S = 60.0


def _dead_pid() -> int:
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()
    return child.pid


def _holding_run(instance: dg.DagsterInstance, tags: dict[str, str]) -> str:
    """A started run that holds the one `llm` slot."""
    run = instance.create_run_for_job(dg.GraphDefinition("g").to_job(), tags=tags)
    instance.handle_run_event(
        run.run_id,
        dg.DagsterEvent(dg.DagsterEventType.RUN_START.value, job_name=run.job_name, message="started"),
    )
    storage = instance.event_log_storage
    storage.set_concurrency_slots("llm", 1)
    assert storage.claim_concurrency_slot("llm", run.run_id, "memory_consolidation").is_claimed
    return run.run_id


def _holders(instance: dg.DagsterInstance) -> list[str]:
    return [slot.run_id for slot in instance.event_log_storage.get_concurrency_info("llm").claimed_slots]


def _status(instance: dg.DagsterInstance, run_id: str) -> dg.DagsterRunStatus:
    return instance.get_run_by_id(run_id).status


def test_a_run_whose_process_is_gone_on_this_machine_loses_its_slot_at_once(instance) -> None:
    run_id = _holding_run(instance, {HOST_TAG: socket.gethostname(), PID_TAG: str(_dead_pid())})
    (dead,) = free_slots_of_dead_runs(instance, timeout_s=TIMEOUT_S)
    assert dead.run_id == run_id and "is gone" in dead.why
    assert _holders(instance) == []
    assert _status(instance, run_id) == dg.DagsterRunStatus.FAILURE
    # the next claim of another run gets the slot
    other = instance.create_run_for_job(dg.GraphDefinition("h").to_job())
    assert instance.event_log_storage.claim_concurrency_slot("llm", other.run_id, "skill_gap").is_claimed


def test_a_live_run_on_this_machine_keeps_its_slot_however_long(instance) -> None:
    run_id = _holding_run(instance, {HOST_TAG: socket.gethostname(), PID_TAG: str(os.getpid())})
    later = time.time() + 10 * TIMEOUT_S
    assert free_slots_of_dead_runs(instance, timeout_s=TIMEOUT_S, now=lambda: later) == []
    assert _holders(instance) == [run_id]


def test_a_run_on_another_machine_is_dead_once_its_heartbeat_is_older_than_the_run_timeout(instance) -> None:
    beat = time.time()
    run_id = _holding_run(instance, {HOST_TAG: "another-host", PID_TAG: "4242", HEARTBEAT_TAG: f"{beat:.3f}"})
    assert free_slots_of_dead_runs(instance, timeout_s=TIMEOUT_S, now=lambda: beat + TIMEOUT_S - 1) == []
    assert _holders(instance) == [run_id]
    (dead,) = free_slots_of_dead_runs(instance, timeout_s=TIMEOUT_S, now=lambda: beat + TIMEOUT_S + 1)
    assert "no sign of life (pid 4242 on another-host)" in dead.why
    assert _holders(instance) == [] and _status(instance, run_id) == dg.DagsterRunStatus.FAILURE


def test_a_run_without_liveness_tags_ages_from_its_start_and_a_finished_one_is_freed(instance) -> None:
    old = _holding_run(instance, {})
    assert free_slots_of_dead_runs(instance, timeout_s=TIMEOUT_S) == []  # just started
    (dead,) = free_slots_of_dead_runs(instance, timeout_s=TIMEOUT_S, now=lambda: time.time() + TIMEOUT_S + 5)
    assert dead.run_id == old and "last start" in dead.why
    finished = _holding_run(instance, {HOST_TAG: socket.gethostname(), PID_TAG: str(os.getpid())})
    instance.report_run_failed(instance.get_run_by_id(finished), "failed")
    (dead,) = free_slots_of_dead_runs(instance, timeout_s=TIMEOUT_S)
    assert dead.run_id == finished and "finished" in dead.why


def test_the_heartbeat_keeps_the_run_alive_from_another_machines_point_of_view(instance) -> None:
    run_id = _holding_run(instance, {})
    heartbeat = RunHeartbeat(instance, run_id, interval_s=0.05).start()
    try:
        deadline = time.monotonic() + 30
        while heartbeat.beats < 3 and time.monotonic() < deadline:
            time.sleep(0.05)
    finally:
        heartbeat.stop()
    tags = instance.get_run_by_id(run_id).tags
    assert tags[HOST_TAG] == socket.gethostname() and tags[PID_TAG] == str(os.getpid())
    assert abs(float(tags[HEARTBEAT_TAG]) - time.time()) < 30
    assert heartbeat.beats >= 3


@pytest.mark.parametrize("timeout_s", [0.0])
def test_a_zero_run_timeout_never_frees_a_silent_run_of_another_machine(instance, timeout_s) -> None:
    _holding_run(instance, {HOST_TAG: "another-host", PID_TAG: "1", HEARTBEAT_TAG: "0"})
    assert free_slots_of_dead_runs(instance, timeout_s=timeout_s) == []


def test_the_daemons_sensor_frees_the_slot_of_a_dead_run(instance, tmp_path) -> None:
    from dream_assets.definitions import build_definitions
    from dream_assets.orchestration.deployment import DreamDeployment

    run_id = _holding_run(instance, {HOST_TAG: socket.gethostname(), PID_TAG: str(_dead_pid())})
    deployment = DreamDeployment(profile_root=str(tmp_path))
    sensor = build_definitions(deployment).get_sensor_def("dead_run_sensor")
    with dg.build_sensor_context(instance=instance, resources={"deployment": deployment}) as ctx:
        result = sensor(ctx)
    assert f"run {run_id}" in result.skip_message and "is gone" in result.skip_message
    assert _holders(instance) == []
    with dg.build_sensor_context(instance=instance, resources={"deployment": deployment}) as ctx:
        assert sensor(ctx).skip_message == "no dead run holds a pool slot"


def test_a_claim_that_lost_the_race_to_create_the_pools_limit_row_claims_again(instance) -> None:
    """Two runs on a fresh PostgreSQL instance both insert the `llm` pool's default limit; the loser's insert fails
    with a unique violation. That run claims again (the row exists now) instead of failing its step."""
    from dream_assets.orchestration.run_liveness import SlotWait

    class IntegrityError(Exception):  # what SQLAlchemy raises for the violated unique key, by name
        pass

    calls: list[str] = []
    real = type(instance.event_log_storage).claim_concurrency_slot

    def racing(storage, key, run_id, step_key, priority=None):  # noqa: ANN001, ANN202
        calls.append(step_key)
        if len(calls) == 1:
            raise IntegrityError('duplicate key value violates unique constraint "concurrency_limits_concurrency_key"')
        return real(storage, key, run_id, step_key, priority)

    instance.event_log_storage.set_concurrency_slots("llm", 1)
    with SlotWait(instance, timeout_s=TIMEOUT_S) as wait:
        status = wait._claim(racing, "llm", "run-a", "memory_consolidation", None)
    assert status.is_claimed and calls == ["memory_consolidation", "memory_consolidation"]

    def broken(storage, key, run_id, step_key, priority=None):  # noqa: ANN001, ANN202
        raise RuntimeError("the database is away")

    with SlotWait(instance, timeout_s=TIMEOUT_S) as wait, pytest.raises(RuntimeError, match="away"):
        wait._claim(broken, "llm", "run-b", "memory_consolidation", None)  # any other error is the step's failure


def test_every_run_creates_the_pools_limit_row_before_a_claim_and_a_lost_race_or_a_failure_never_fails_it(
    tmp_path, caplog
) -> None:
    """On a fresh PostgreSQL instance two runs' first claims both insert the `llm` pool's limit row, and Dagster fails
    the loser's step (one agent's cycle lost in a fleet). Each run makes the row at its start instead: with the
    deployment's default limit it is there before any claim; a run that lost that race, or cannot reach the
    database, goes on (its claim reports a real failure)."""
    from dream_assets.orchestration.run_liveness import LLM_POOL, ensure_pool_rows

    overrides = {"concurrency": {"pools": {"default_limit": 1}}}
    with dg.instance_for_test(temp_dir=str(tmp_path), overrides=overrides) as instance:
        storage = instance.event_log_storage
        assert LLM_POOL not in {pool.name for pool in storage.get_pool_limits()}

        class IntegrityError(Exception):  # what SQLAlchemy raises for the violated unique key, by name
            pass

        def lost_race(key: str) -> bool:
            raise IntegrityError('duplicate key value violates unique constraint "concurrency_limits_concurrency_key"')

        real = storage.initialize_concurrency_limit_to_default
        storage.initialize_concurrency_limit_to_default = lost_race  # type: ignore[method-assign]
        ensure_pool_rows(instance)  # another run is making the row: nothing raised
        storage.initialize_concurrency_limit_to_default = real  # type: ignore[method-assign]

        ensure_pool_rows(instance)
        (pool,) = [pool for pool in storage.get_pool_limits() if pool.name == LLM_POOL]
        assert pool.limit == 1 and pool.from_default
        assert storage.claim_concurrency_slot(LLM_POOL, "run-a", "memory_consolidation").is_claimed

        storage.set_concurrency_slots(LLM_POOL, 2)  # an operator's own limit stays
        ensure_pool_rows(instance)
        assert [pool.limit for pool in storage.get_pool_limits() if pool.name == LLM_POOL] == [2]

        def away() -> list:
            raise RuntimeError("the database is away")

        storage.get_pool_limits = away  # type: ignore[method-assign]
        ensure_pool_rows(instance)
        assert "could not prepare" in caplog.text and "away" in caplog.text
