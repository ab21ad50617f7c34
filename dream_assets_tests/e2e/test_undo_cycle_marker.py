"""`dream undo` refuses while a cycle of the agent is in progress — between two of its passes too, where no pass lock
is held — for the in-process cycle and the Dagster job alike; once the cycle is done the undo goes through, and the
marker a killed cycle left behind never blocks undo for good (store/cycle_marker.py)."""

from __future__ import annotations

import json
import os
import signal
import socket
import time
from datetime import timedelta

import dagster as dg
import pytest

from dream_assets import cycle
from dream_assets.cli import main
from dream_assets.cycle import run_cycle
from dream_assets.definitions import build_definitions
from dream_assets.defs import passes as defs_passes
from dream_assets.options_loader import dream_options
from dream_assets.orchestration.deployment import NOW_TAG, DreamDeployment
from dream_assets.orchestration.partitions import AGENTS
from dream_assets.passes import runner
from dream_assets.store import open_store
from dream_assets.store.connection import close_all

from ..conftest import NOW, held_by_another_process

FIRST = "cycle-1"
LATER = NOW + timedelta(hours=1)
#: The passes of the cycle that runs while the undo is tried: the undo is attempted just before the second starts.
PAUSED_PASSES = ("log_retention", "importance_decay")


@pytest.fixture
def cycled(demo):
    """The small demo after a first cycle that changed entries (what the undo puts back)."""
    run_cycle(demo, dream_options(), NOW, cycle_id=FIRST, only=["archive_purge", "importance_decay"])
    store = open_store(demo)
    assert [c for c in store.changes.list(FIRST) if c.kind != "review-stamp"]
    close_all()
    return demo


def _undo(profile, capsys) -> tuple[int, str]:
    code = main(["undo", "--profile", str(profile.root), "--cycle", FIRST, "--now", LATER.isoformat()])
    return code, capsys.readouterr().err


def _records(profile) -> dict:
    """What an undo puts back of each entry (importance and stamps are housekeeping a later pass changes)."""
    store = open_store(profile)
    records = {e.id: (e.content, e.category, tuple(e.tags), e.archived_at) for e in store.memories.list_all()}
    close_all()
    return records


@pytest.fixture
def undo_between_passes(monkeypatch, capsys, cycled):
    """Tries `dream undo` of the first cycle when the second of PAUSED_PASSES is about to start (the first is done, no
    pass lock is held): (exit code, stderr) per try."""
    tries: list[tuple[int, str]] = []
    real = runner.run_pass

    def run(spec, ctx):
        if spec.name == PAUSED_PASSES[1]:
            tries.append(_undo(cycled, capsys))
        return real(spec, ctx)

    for caller in (cycle, defs_passes):  # the in-process cycle and the Dagster pass assets
        monkeypatch.setattr(caller, "run_pass", run)
    return tries


def test_an_undo_between_two_passes_of_a_running_cycle_is_refused_and_works_once_the_cycle_is_done(
    cycled, undo_between_passes, capsys
):
    before = _records(cycled)
    run_cycle(cycled, dream_options(), LATER, cycle_id="cycle-2", only=PAUSED_PASSES)
    [(code, err)] = undo_between_passes
    assert code == 2
    assert "undo refused: cycle cycle-2 (pid " in err and "of agent 'demo' is running" in err
    assert "nothing was changed" in err
    assert _records(cycled) == before  # nothing was put back under the running cycle
    assert not list(cycled.cycle_markers_dir.glob("*.json"))  # the cycle's close removed its marker
    code, err = _undo(cycled, capsys)
    assert code == 0, err
    assert _records(cycled) != before


@pytest.mark.slow  # a Dagster run of two passes
def test_an_undo_between_two_passes_of_a_dagster_cycle_run_is_refused(cycled, undo_between_passes, instance, capsys):
    instance.add_dynamic_partitions(AGENTS, ["demo"])
    defs = build_definitions(DreamDeployment(profile_root=str(cycled.root.parent)))
    result = defs.resolve_job_def("dream_cycle").execute_in_process(
        instance=instance,
        partition_key="demo",
        tags={NOW_TAG: LATER.isoformat()},
        asset_selection=[dg.AssetKey(name) for name in PAUSED_PASSES],
        raise_on_error=False,
    )
    assert result.success
    [(code, err)] = undo_between_passes
    assert code == 2 and f"undo refused: cycle {result.run_id} (pid {os.getpid()}" in err
    assert not list(cycled.cycle_markers_dir.glob("*.json"))  # released after the run's last step
    assert _undo(cycled, capsys)[0] == 0


def test_the_marker_of_a_killed_cycle_never_blocks_undo_and_the_undo_says_it_was_stale(cycled, capsys):
    """A cycle killed with its marker held: on this machine its process is gone, so the marker is stale at once."""
    with held_by_another_process(
        f"""
        from dream_assets.profile import AgentProfile
        from dream_assets.store.cycle_marker import CycleHold
        CycleHold(AgentProfile({str(cycled.root)!r}), "killed-cycle", stale_after_s=300).start()
        """
    ) as holder:
        code, err = _undo(cycled, capsys)
        assert code == 2 and "undo refused: cycle killed-cycle" in err  # alive: refused
        holder.send_signal(signal.SIGKILL)
        holder.wait(timeout=30)
    assert [p.stem for p in cycled.cycle_markers_dir.glob("*.json")] == ["killed-cycle"]  # left behind
    code, err = _undo(cycled, capsys)
    assert code == 0, err
    assert "ignored the marker of a cycle that is no longer running" in err and "killed-cycle" in err
    assert "is gone" in err
    assert not list(cycled.cycle_markers_dir.glob("*.json"))


def _foreign_marker(profile, *, age_s: float) -> None:
    """The marker of a cycle running on another machine, whose last heartbeat is ``age_s`` old."""
    profile.cycle_markers_dir.mkdir(parents=True, exist_ok=True)
    beat = time.time() - age_s
    body = {"cycle_id": "remote-cycle", "host": f"not-{socket.gethostname()}", "pid": 4242, "heartbeat": beat}
    (profile.cycle_markers_dir / "remote-cycle.json").write_text(json.dumps(body))


def test_a_marker_from_another_machine_blocks_undo_until_its_heartbeat_is_older_than_the_run_timeout(
    cycled, capsys, monkeypatch
):
    monkeypatch.setenv("DREAM__RunTimeout", "120")
    _foreign_marker(cycled, age_s=10)
    code, err = _undo(cycled, capsys)
    assert code == 2 and "undo refused: cycle remote-cycle (pid 4242 on not-" in err
    _foreign_marker(cycled, age_s=300)
    code, err = _undo(cycled, capsys)
    assert code == 0, err
    assert "remote-cycle" in err and "no heartbeat for 300 s, over RunTimeout (120 s)" in err


def test_a_damaged_marker_is_named_removed_and_does_not_block_undo(cycled, capsys):
    cycled.cycle_markers_dir.mkdir(parents=True, exist_ok=True)
    (cycled.cycle_markers_dir / "broken.json").write_text("{" * 100_000)
    code, err = _undo(cycled, capsys)
    assert code == 0, err
    assert "broken.json (unreadable" in err
