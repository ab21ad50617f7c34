"""Files an agent or a person can write (the busy lease, the deferred-pass list, a pass record, the ledger) are read
defensively: a file that cannot be used counts as absent with a warning naming it, a time in the future is at most now,
and one agent's broken file never stops another agent."""

from __future__ import annotations

import json
import logging
import os
import socket
import time
from datetime import UTC, datetime, timedelta

import pytest

from dream_assets.file_safety import UnreadableFile, read_json_file
from dream_assets.llm.busy import is_busy, read_leases
from dream_assets.passes.outcome import deferred_index_path, load_deferred, load_outcome
from dream_assets.profile import AgentProfile
from dream_assets.store.ledger import PassLedger
from dream_assets_tests.conftest import NOW

STALE = timedelta(minutes=10)
DEEP = "[" * 100_000 + "]" * 100_000


def _lease(profile: AgentProfile, name: str, data: str | bytes) -> os.PathLike:
    folder = profile.busy_lease_path
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / name
    (path.write_bytes if isinstance(data, bytes) else path.write_text)(data)
    return path


def test_the_shared_reader_names_the_file_for_every_kind_of_unusable_content(tmp_path) -> None:
    cases = {
        "deep.json": DEEP.encode(),
        "latin1.json": '{"a": "caf\xe9"}'.encode("latin-1"),
        "cut.json": b'{"a": ',
    }
    for name, raw in cases.items():
        (tmp_path / name).write_bytes(raw)
        with pytest.raises(UnreadableFile, match=name):
            read_json_file(tmp_path / name)
    (tmp_path / "big.json").write_bytes(b" " * 100)
    with pytest.raises(UnreadableFile, match="larger than"):
        read_json_file(tmp_path / "big.json", max_bytes=50)
    (tmp_path / "ps.json").write_text('{"pid": 7}', encoding="utf-16")  # what PowerShell writes
    assert read_json_file(tmp_path / "ps.json") == {"pid": 7}
    with pytest.raises(FileNotFoundError):
        read_json_file(tmp_path / "absent.json")


def test_a_utf16_lease_from_powershell_is_honoured_by_its_heartbeat(profile: AgentProfile) -> None:
    body = {"pid": 4242, "host": "windows-box", "heartbeat": "2026-11-30T11:55:00Z"}
    _lease(profile, "turn.json", json.dumps(body).encode("utf-16"))
    (lease,) = read_leases(profile, NOW)
    assert lease.pid == 4242 and lease.host == "windows-box"
    assert is_busy(profile, NOW, STALE)
    assert not is_busy(profile, NOW + timedelta(minutes=6), STALE)  # its own heartbeat ages it, not the file's time


def test_a_deeply_nested_lease_counts_by_its_modification_time_with_a_warning(profile, caplog) -> None:
    path = _lease(profile, "deep.json", DEEP)
    now = datetime.now(UTC)
    with caplog.at_level(logging.WARNING, logger="dream_assets.llm.busy"):
        assert is_busy(profile, now, STALE)
    assert str(path) in caplog.text and "nested too deeply" in caplog.text
    assert not is_busy(profile, now + timedelta(minutes=11), STALE)


@pytest.mark.parametrize("pid", [2**64, 2**31, -5, True, "12"])
def test_a_pid_the_system_cannot_hold_never_fails_the_check(profile: AgentProfile, pid) -> None:
    body = {"pid": pid, "host": socket.gethostname(), "heartbeat": "2026-11-30T11:55:00Z"}
    _lease(profile, "odd.json", json.dumps(body))
    assert is_busy(profile, NOW, STALE)  # counted by its heartbeat, the pid ignored
    assert not is_busy(profile, NOW + timedelta(minutes=6), STALE)


def test_a_heartbeat_in_the_future_does_not_defer_for_ever(profile: AgentProfile, caplog) -> None:
    path = _lease(profile, "future.json", json.dumps({"host": "elsewhere", "heartbeat": "2099-01-01T00:00:00Z"}))
    written = datetime.fromtimestamp(path.stat().st_mtime, UTC)
    with caplog.at_level(logging.WARNING, logger="dream_assets.llm.busy"):
        assert is_busy(profile, written, STALE)  # fresh: its file was written just now
    assert "in the future" in caplog.text and str(path) in caplog.text
    # the heartbeat is not believed: the lease ages from its file's time like any other (simulated days later)
    for day in range(1, 33, 3):
        assert not is_busy(profile, written + timedelta(days=day), STALE)
    # a modification time in the future is at most now, and ages from there
    future = time.time() + 10 * 86400
    os.utime(path, (future, future))
    (lease,) = read_leases(profile, written)
    assert lease.heartbeat == written


def test_a_deeply_nested_pass_record_and_deferred_list_count_as_absent(profile, caplog) -> None:
    record = profile.pass_report_path("contradiction_sweep")
    record.parent.mkdir(parents=True, exist_ok=True)
    record.write_text(DEEP)
    deferred_index_path(profile).write_text('{"passes": ' + DEEP + "}")
    with caplog.at_level(logging.WARNING):
        assert load_outcome(profile, "contradiction_sweep") is None
        assert load_deferred(profile) == {}
    assert str(record) in caplog.text and str(deferred_index_path(profile)) in caplog.text


def test_a_deeply_nested_ledger_runs_every_pass_once_with_a_warning(profile) -> None:
    profile.ledger_path.parent.mkdir(parents=True, exist_ok=True)
    profile.ledger_path.write_text(DEEP)
    ledger = PassLedger(profile, now=NOW)
    assert ledger.get("memory_consolidation") is None
    assert ledger.warning and str(profile.ledger_path) in ledger.warning


def test_a_broken_deferred_list_of_one_agent_leaves_the_others_retried(root, instance) -> None:
    import dagster as dg

    from dream_assets.definitions import build_definitions
    from dream_assets.orchestration.deployment import DreamDeployment
    from dream_assets.orchestration.partitions import AGENTS

    agents = {"broken": '{"passes": ' + DEEP + "}", "fine": None}
    for agent, text in agents.items():
        profile = AgentProfile(root / agent).ensure()
        path = deferred_index_path(profile)
        path.parent.mkdir(parents=True, exist_ok=True)
        body = {"attempt": 1, "retry_at": "2026-11-30T12:05:00Z", "since": "2026-11-30T12:00:00Z", "summary": "d"}
        path.write_text(text or json.dumps({"passes": {"contradiction_sweep": body}}))
    instance.add_dynamic_partitions(AGENTS, list(agents))
    sensor = build_definitions(DreamDeployment(profile_root=str(root))).get_sensor_def("deferred_retry_sensor")
    deployment = DreamDeployment(profile_root=str(root), now=(NOW + timedelta(minutes=5)).isoformat())
    with dg.build_sensor_context(instance=instance, resources={"deployment": deployment}) as ctx:
        result = sensor(ctx)
    (request,) = result.run_requests
    assert request.partition_key == "fine"


def test_dream_status_shows_an_agent_whose_pass_record_is_nested_too_deeply(profile, capsys) -> None:
    from dream_assets.cli import main

    record = profile.pass_report_path("memory_consolidation")
    record.parent.mkdir(parents=True, exist_ok=True)
    record.write_text(DEEP)
    assert main(["status", "--profile", str(profile.root)]) == 0
    assert "memory_consolidation" in capsys.readouterr().out


def _future_leases(profile: AgentProfile, at: datetime) -> None:
    """Four kinds of lease that claim times after ``at``: a plain file touched a year ahead, a JSON lease whose
    heartbeat and file time are both ahead, a lease folder entry with no JSON touched ahead, and an activity lease
    expiring in 9999 written by a clock a month ahead."""
    ahead = (at + timedelta(days=365)).timestamp()
    month = at + timedelta(days=30)
    lease_dir = profile.busy_lease_path
    lease_dir.mkdir(parents=True, exist_ok=True)
    bodies = {
        "both-ahead.json": json.dumps({"host": "elsewhere", "heartbeat": "2099-01-01T00:00:00Z"}),
        "plain": "",
        "active.json": json.dumps(
            {"host": "elsewhere", "heartbeat": month.isoformat(), "expires_at": "9999-12-31T23:59:59Z"}
        ),
    }
    for name, body in bodies.items():
        (lease_dir / name).write_text(body)
        os.utime(lease_dir / name, (ahead, ahead))


@pytest.mark.parametrize("kind", ["folder", "plain-file"])
def test_a_lease_dated_in_the_future_holds_passes_no_longer_than_its_window_after_first_seen(
    profile: AgentProfile, kind: str
) -> None:
    from dream_assets.llm.busy import wait_until_idle
    from dream_assets.options_loader import dream_options

    if kind == "folder":
        _future_leases(profile, NOW)
    else:
        profile.busy_lease_path.write_text("busy")
        ahead = (NOW + timedelta(days=365)).timestamp()
        os.utime(profile.busy_lease_path, (ahead, ahead))
    options = dream_options(BusyMaxWait=timedelta(minutes=30), BusyPollInterval=timedelta(seconds=30))
    waits = []
    for day in (0, 1, 5, 12, 20, 33, 50, 70):  # 8 cycles over 70 days, each a separate call as in separate processes
        clock = {"t": 0.0}
        start = NOW + timedelta(days=day)

        def sleep(seconds: float, clock=clock) -> None:
            clock["t"] += seconds

        outcome = wait_until_idle(
            profile,
            options,
            sleep=sleep,
            monotonic=lambda clock=clock: clock["t"],
            wallclock=lambda clock=clock, start=start: start + timedelta(seconds=clock["t"]),
        )
        assert not outcome.deferred, f"day {day}: a future-dated lease deferred the pass"
        waits.append(outcome.waited_s)
    # the first cycle waits out the window from when the leases were first seen, never more; then no wait at all
    assert STALE.total_seconds() <= waits[0] <= STALE.total_seconds() + options.BusyPollInterval.total_seconds()
    assert waits[1:] == [0.0] * 7


def test_a_future_dated_lease_written_again_is_a_new_turn(profile: AgentProfile) -> None:
    """An agent whose clock runs ahead still holds the model while it keeps writing its lease (each write a turn),
    and its lease expires a window after the last write was first seen."""
    from dream_assets.llm.busy import FirstSeen, active_leases, first_seen_path

    path = _lease(profile, "turn.json", json.dumps({"host": "elsewhere"}))
    for minute, rewrite in ((0, True), (8, False), (12, True), (20, False), (23, False)):
        now = NOW + timedelta(minutes=minute)
        if rewrite:
            ahead = (now + timedelta(days=2)).timestamp()
            os.utime(path, (ahead, ahead))
        seen = FirstSeen(first_seen_path(profile))
        held = active_leases(profile, now, STALE, seen)
        seen.save()
        assert bool(held) == (minute != 23), minute


def test_a_damaged_first_seen_file_only_restarts_the_window(profile: AgentProfile, caplog) -> None:
    from dream_assets.llm.busy import FirstSeen, active_leases, first_seen_path

    path = _lease(profile, "turn.json", "")
    ahead = (NOW + timedelta(days=2)).timestamp()
    os.utime(path, (ahead, ahead))
    first_seen_path(profile).write_text(DEEP)
    with caplog.at_level(logging.WARNING, logger="dream_assets.llm.busy"):
        seen = FirstSeen(first_seen_path(profile))
        assert active_leases(profile, NOW, STALE, seen)
        seen.save()
    assert str(first_seen_path(profile)) in caplog.text
    seen = FirstSeen(first_seen_path(profile))
    assert not active_leases(profile, NOW + STALE + timedelta(seconds=1), STALE, seen)
