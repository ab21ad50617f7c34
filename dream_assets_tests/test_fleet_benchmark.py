"""The fleet benchmark's CI-sized run: 100 agents on PostgreSQL (or embedded storage, said in fleet.postgres). Every
tick ends inside Dagster's sensor timeout, and after a full cycle the gate sensors of the idle fleet request nothing.
How fast the ticks are (and an idle tick against a deciding one) are the benchmark's figures, not this test's: they
depend on the machine. The full run (1,000 agents, the daemon against in-process) is `python benchmarks/fleet.py`."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
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
