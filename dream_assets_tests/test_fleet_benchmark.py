"""The fleet benchmark's CI-sized run: 100 agents on PostgreSQL (or embedded storage, said in fleet.postgres). Every
tick stays far inside Dagster's sensor timeout, and after a full cycle the gate sensors of the idle fleet request
nothing. The full run (1,000 agents, and the daemon against in-process) is `python benchmarks/fleet.py`."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


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
        assert metrics[name]["value"] <= 10, f"{name} = {metrics[name]['value']} s: {problems}"
    assert metrics["fleet.idle_runs_launched"]["value"] == 0, problems
    assert metrics["fleet.gate_after_cycle_runs_launched"]["value"] == 0, problems
    # an idle tick costs a fraction of the tick that decided every agent
    assert metrics["fleet.gate_idle_tick_s"]["value"] < metrics["fleet.gate_tick_s"]["value"] / 4
    assert metrics["fleet.cycles_per_hour"]["value"] > 0
