"""Busy back-off: dream calls wait while the agent's model serves a user turn, and defer past the maximum."""

from __future__ import annotations

import json
import os
import threading
import time
from contextlib import ExitStack
from datetime import UTC, datetime, timedelta

import pytest

from dream_assets.llm.base import ModelRequest
from dream_assets.llm.busy import is_busy, model_busy, read_leases, wait_until_idle
from dream_assets.llm.client import ModelClient
from dream_assets.llm.scripted import ScriptedBackend
from dream_assets.options import DreamOptions
from dream_assets.options_loader import dream_options
from dream_assets.passes.registry import model_call
from dream_assets.profile import AgentProfile

T0 = datetime(2026, 11, 30, 12, 0, tzinfo=UTC)
STALE = timedelta(minutes=10)


class FakeClock:
    """monotonic / wallclock / sleep that only move when the code under test sleeps."""

    def __init__(self, on_sleep=None) -> None:
        self.t = 0.0
        self.sleeps: list[float] = []
        self.on_sleep = on_sleep

    def monotonic(self) -> float:
        return self.t

    def wallclock(self) -> datetime:
        return T0 + timedelta(seconds=self.t)

    def sleep(self, seconds: float) -> None:
        self.sleeps.append(seconds)
        self.t += seconds
        if self.on_sleep:
            self.on_sleep(len(self.sleeps))


def _wait(profile: AgentProfile, options: DreamOptions, clock: FakeClock):
    return wait_until_idle(profile, options, sleep=clock.sleep, monotonic=clock.monotonic, wallclock=clock.wallclock)


def test_the_lease_marks_the_model_busy_only_while_held(profile: AgentProfile) -> None:
    assert not is_busy(profile, T0, STALE)
    with model_busy(profile, now=T0, heartbeat_every=None) as lease:
        assert lease.exists()
        assert is_busy(profile, T0, STALE)
        body = json.loads(lease.read_text())
        assert body["pid"] == os.getpid() and body["acquired_at"] == "2026-11-30T12:00:00Z"
    assert not is_busy(profile, T0, STALE)
    assert read_leases(profile) == []


def test_overlapping_turns_do_not_release_each_other(profile: AgentProfile) -> None:
    with model_busy(profile, now=T0, heartbeat_every=None):
        with model_busy(profile, now=T0, heartbeat_every=None):
            assert len(read_leases(profile)) == 2
        assert is_busy(profile, T0, STALE)  # the first turn is still running
    assert not is_busy(profile, T0, STALE)


def test_a_stale_lease_from_a_crashed_agent_expires(profile: AgentProfile) -> None:
    lease_dir = profile.busy_lease_path
    lease_dir.mkdir(parents=True)
    (lease_dir / "crashed.json").write_text(
        json.dumps(
            {
                "pid": 999999,
                "host": "another-host",
                "acquired_at": "2026-11-30T11:00:00Z",
                "heartbeat": "2026-11-30T11:45:00Z",
            }
        )
    )
    assert is_busy(profile, T0, timedelta(minutes=20))  # 15 minutes old: still fresh
    assert not is_busy(profile, T0, timedelta(minutes=10))  # older than BusyLeaseStaleAfter: expired


def test_a_lease_of_a_dead_process_on_this_host_expires_at_once(profile: AgentProfile) -> None:
    import socket

    lease_dir = profile.busy_lease_path
    lease_dir.mkdir(parents=True)
    (lease_dir / "dead.json").write_text(
        json.dumps({"pid": 2**22 + 12345, "host": socket.gethostname(), "heartbeat": "2026-11-30T12:00:00Z"})
    )
    if os.name == "posix":
        assert not is_busy(profile, T0, STALE)


def test_a_hand_made_lease_file_counts_by_its_modification_time(profile: AgentProfile) -> None:
    lease_dir = profile.busy_lease_path
    lease_dir.mkdir(parents=True)
    (lease_dir / "node-agent").write_text("busy")  # not JSON: still a lease
    now = datetime.now(UTC)
    assert is_busy(profile, now, STALE)
    assert not is_busy(profile, now + timedelta(minutes=11), STALE)


def test_waits_while_held_and_proceeds_when_released(profile: AgentProfile) -> None:
    options = dream_options()
    with ExitStack() as turn:
        turn.enter_context(model_busy(profile, now=T0, heartbeat_every=None))
        clock = FakeClock(on_sleep=lambda n: turn.close() if n == 3 else None)  # the turn ends after 3 polls
        outcome = _wait(profile, options, clock)
    assert not outcome.deferred
    assert outcome.polls == 3
    assert clock.sleeps == [5.0, 5.0, 5.0]  # BusyPollInterval
    assert outcome.waited_s == 15.0


def test_defers_after_the_maximum_wait(profile: AgentProfile) -> None:
    options = dream_options().replace(BusyMaxWait=timedelta(seconds=12), BusyLeaseStaleAfter=timedelta(hours=1))
    clock = FakeClock()
    with model_busy(profile, now=T0, heartbeat_every=None):
        outcome = _wait(profile, options, clock)
    assert outcome.deferred
    assert clock.sleeps == [5.0, 5.0, 2.0]  # never sleeps past BusyMaxWait
    assert outcome.waited_s == 12.0


def test_a_stale_lease_does_not_hold_up_the_dream(profile: AgentProfile) -> None:
    with model_busy(profile, now=T0 - timedelta(hours=2), heartbeat_every=None):
        clock = FakeClock()
        outcome = _wait(profile, dream_options(), clock)
    assert not outcome.deferred and clock.sleeps == []


def test_a_non_positive_maximum_wait_defers_at_once_while_busy(profile: AgentProfile) -> None:
    options = dream_options().replace(BusyMaxWait=timedelta(0))
    clock = FakeClock()
    with model_busy(profile, now=T0, heartbeat_every=None):
        outcome = _wait(profile, options, clock)
    assert outcome.deferred and clock.sleeps == []


def test_the_heartbeat_keeps_a_long_turn_fresh(profile: AgentProfile) -> None:
    refreshed = threading.Event()
    with model_busy(profile, now=T0, heartbeat_every=timedelta(seconds=0.02)) as lease:
        deadline = time.monotonic() + 60  # a guard against a heartbeat that never comes
        while time.monotonic() < deadline:
            if json.loads(lease.read_text())["heartbeat"] != "2026-11-30T12:00:00Z":
                refreshed.set()
                break
            refreshed.wait(0.01)
    assert refreshed.is_set()


def test_a_deferred_call_reaches_no_model_and_is_counted(profile: AgentProfile) -> None:
    options = dream_options().replace(BusyMaxWait=timedelta(seconds=10))
    backend = ScriptedBackend([{"findings": []}])
    clock = FakeClock()
    client = ModelClient(
        backend,
        profile=profile,
        options=options,
        sleep=clock.sleep,
        monotonic=clock.monotonic,
        wallclock=clock.wallclock,
    )
    with model_busy(profile, now=T0, heartbeat_every=None):
        result = client.call(ModelRequest(model_call("tier_routing_review"), "d", "p"))
    assert result.deferred and not result.ok
    assert "still busy" in result.error
    assert backend.requests == []
    totals = client.usage.totals("tier_routing_review")
    assert totals["calls"] == 0 and totals["deferred_calls"] == 1 and totals["busy_wait_s"] == 10.0


def test_a_call_waits_for_the_turn_then_goes_ahead(profile: AgentProfile) -> None:
    backend = ScriptedBackend([{"findings": []}])
    with ExitStack() as turn:
        turn.enter_context(model_busy(profile, now=T0, heartbeat_every=None))
        clock = FakeClock(on_sleep=lambda n: turn.close())
        client = ModelClient(
            backend,
            profile=profile,
            options=dream_options(),
            sleep=clock.sleep,
            monotonic=clock.monotonic,
            wallclock=clock.wallclock,
        )
        result = client.call(ModelRequest(model_call("tier_routing_review"), "d", "p"))
    assert result.ok and len(backend.requests) == 1
    assert client.usage.records[0].waited_s == 5.0


def test_the_offline_backend_never_waits(profile: AgentProfile) -> None:
    from dream_assets.llm.offline import OfflineBackend

    clock = FakeClock()
    client = ModelClient(
        OfflineBackend(),
        profile=profile,
        options=dream_options(),
        sleep=clock.sleep,
        monotonic=clock.monotonic,
        wallclock=clock.wallclock,
    )
    with model_busy(profile, now=T0, heartbeat_every=None):
        assert client.call(ModelRequest(model_call("tier_routing_review"), "d", "p")).ok
    assert clock.sleeps == []


def test_a_plain_file_in_the_way_of_the_lease_folder_is_explained(profile: AgentProfile) -> None:
    profile.busy_lease_path.write_text("busy")
    with pytest.raises(FileExistsError, match="plain file"):
        with model_busy(profile):
            pass
    assert is_busy(profile, datetime.now(UTC), STALE)  # and it is honoured as a lease meanwhile
