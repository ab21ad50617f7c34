"""Only agents set up for dreaming are dreamed for: `make dev` with three folders under the profile root, two made by
`dream init` and one made by hand (an agent that wrote its store there), registers and announces the two, with the
time of their first cycle, and never the third."""

from __future__ import annotations

import os
import subprocess
import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path

import dagster as dg
import pytest

from dream_assets import agent_memory as memory
from dream_assets.cli import main
from dream_assets.definitions import build_definitions
from dream_assets.enrolment import MARKER, dream_plan, startup_lines
from dream_assets.orchestration.deployment import DreamDeployment

ROOT = Path(__file__).resolve().parents[2]
NOW = datetime(2026, 12, 6, 22, 0, tzinfo=UTC)


@pytest.fixture
def three(tmp_path: Path) -> Path:
    """alice and bob set up by `dream init`; scratch made by hand, its store written by an agent's save."""
    root = tmp_path / "agents"
    for name in ("alice", "bob"):
        assert main(["init", "--profile", str(root / name)]) == 0
    memory.save(root / "scratch", "A note an agent saved into a folder nobody set up.")
    return root


def test_only_the_agents_dream_init_set_up_are_dreamed_for(three: Path) -> None:
    plan = dream_plan(three, named=set())
    assert plan.agents == ["alice", "bob"]
    assert plan.left_out == ["scratch"]
    assert (three / "alice" / MARKER).is_file() and not (three / "scratch" / MARKER).exists()


def test_an_agent_named_in_the_configuration_is_dreamed_for(three: Path) -> None:
    assert dream_plan(three, named={"scratch"}).agents == ["alice", "bob", "scratch"]
    assert dream_plan(three, named={"nobody"}).named_missing == ["nobody"]


def test_dream_init_if_missing_sets_up_an_existing_folder_and_keeps_its_data(three: Path, capsys) -> None:
    assert main(["init", "--profile", str(three / "scratch"), "--if-missing"]) == 0
    assert "now set up for dreaming" in capsys.readouterr().out
    assert dream_plan(three, named=set()).agents == ["alice", "bob", "scratch"]
    assert memory.search(three / "scratch", "note nobody set up").hits


def _tick(sensor: dg.SensorDefinition, instance: dg.DagsterInstance, root: Path) -> dg.SensorResult:
    deployment = DreamDeployment(profile_root=str(root), now=NOW.isoformat())
    with dg.build_sensor_context(instance=instance, resources={"deployment": deployment}) as context:
        return sensor(context)


def test_the_discovery_sensor_registers_the_two_and_never_the_third(three: Path, instance) -> None:
    sensor = build_definitions(DreamDeployment(profile_root=str(three))).get_sensor_def("agent_discovery_sensor")
    (request,) = _tick(sensor, instance, three).dynamic_partitions_requests
    assert request.partition_keys == ["alice", "bob"]
    instance.add_dynamic_partitions("agents", list(request.partition_keys))
    again = _tick(sensor, instance, three)
    assert not again.dynamic_partitions_requests
    assert "scratch" in again.skip_reason.skip_message and "dream init" in again.skip_reason.skip_message


def test_the_start_up_lines_name_the_agents_and_the_first_cycle(three: Path) -> None:
    lines = startup_lines(
        dream_plan(three, named=set()),
        enabled=True,
        initial_delay=timedelta(minutes=5),
        interval=timedelta(hours=4),
        now=NOW,
    )
    assert lines[:2] == [
        f"dreaming for 2 agent(s) under {three}: alice, bob",
        "first cycle at about 2026-12-06 22:05 UTC (InitialDelay 5m after the daemon starts), then every 4h (Interval)",
    ]
    assert str(three / "scratch") in lines[2] and "not set up with `dream init`" in lines[2]
    assert len(lines) == 3


def test_make_dev_prints_the_start_up_lines_before_it_starts(three: Path) -> None:
    """What the dev target runs before `dagster dev`, as it runs it (DREAM__ProfileRoot set, the wall clock)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("DREAM")}
    env |= {"DREAM__ProfileRoot": str(three), "DREAM__InitialDelay": "10m", "PYTHONPATH": str(ROOT)}
    before = datetime.now(UTC)
    done = subprocess.run(
        [sys.executable, "-m", "dream_assets.enrolment"], capture_output=True, text=True, env=env, timeout=120
    )
    after = datetime.now(UTC)
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines[0] == f"dreaming for 2 agent(s) under {three}: alice, bob"
    first = datetime.strptime(lines[1].split("about ")[1][:16], "%Y-%m-%d %H:%M").replace(tzinfo=UTC)
    assert (before + timedelta(minutes=10)).replace(second=0, microsecond=0) <= first <= after + timedelta(minutes=10)
    assert "scratch" in lines[2] and "alice" not in lines[2]
    with open(ROOT / "Makefile") as makefile:  # the dev target runs exactly this before dagster dev
        dev = makefile.read().split("\ndev: $(STAMP)")[1].split("\n\n")[0]
    assert dev.index("-m dream_assets.enrolment") < dev.index("dagster dev")
