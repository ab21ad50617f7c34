"""The fleet benchmark's CI-sized run: 100 agents on PostgreSQL (or embedded storage, said in fleet.postgres). Every
tick ends inside Dagster's sensor timeout, and after a full cycle the gate sensors of the idle fleet request nothing.
How fast the ticks are (and an idle tick against a deciding one) are the benchmark's figures, not this test's: they
depend on the machine. The full run (1,000 agents, the daemon against in-process) is `python benchmarks/fleet.py`."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SENSOR_TIMEOUT_S = 60  # dagster's default DAGSTER_SENSOR_GRPC_TIMEOUT_SECONDS


@pytest.mark.slow
def test_quick_fleet_run_ticks_fast_and_an_idle_fleet_launches_nothing():
    proc = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / "fleet.py"), "--quick"],
        capture_output=True,
        text=True,
        timeout=900,
        cwd=ROOT,
    )
    problems = proc.stderr[-3000:]
    assert proc.returncode == 0, problems
    metrics = {m["name"]: m for m in (json.loads(line) for line in proc.stdout.splitlines() if line.strip())}
    assert {m["n"] for name, m in metrics.items() if name != "fleet.cycles_per_hour"} == {100}, metrics
    for name in ("fleet.discovery_tick_s", "fleet.schedule_tick_s", "fleet.gate_tick_s", "fleet.gate_idle_tick_s"):
        # A tick past the sensor timeout (60 s by default) fails in the daemon.
        assert metrics[name]["value"] < SENSOR_TIMEOUT_S, f"{name} = {metrics[name]['value']} s: {problems}"
    assert metrics["fleet.idle_runs_launched"]["value"] == 0, problems
    assert metrics["fleet.gate_after_cycle_runs_launched"]["value"] == 0, problems
    assert metrics["fleet.cycles_per_hour"]["value"] > 0


def _job(kind: str) -> str:
    """A benchmark worker's job: one dies outright, one sits for ever (on a lock, say), the rest answer."""
    import os
    import signal
    import time

    if kind == "die":
        os.kill(os.getpid(), signal.SIGKILL)
    if kind == "sit":
        time.sleep(3600)
    return kind


def test_a_dead_worker_ends_the_benchmark_with_a_clear_error_instead_of_a_hang():
    import threading

    from dream_assets_tests.workers import WorkerDied, map_in_workers, spawn_pool

    outcome: list[BaseException | list] = []

    def run() -> None:
        try:
            with spawn_pool(2) as pool:
                assert map_in_workers(pool, _job, ["a", "b"]) == ["a", "b"]
                outcome.append(map_in_workers(pool, _job, ["sit", "die", "c"]))
        except BaseException as exc:  # noqa: BLE001 - handed to the test thread
            outcome.append(exc)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    thread.join(timeout=300)
    assert not thread.is_alive(), "the pool still waits on a dead worker"
    (error,) = outcome
    assert isinstance(error, WorkerDied), error
    assert "a worker process died while running _job" in str(error) and "the other workers were stopped" in str(error)
