"""Pass 0 — log retention, against real files (spec "Pass 0 — Log retention")."""

from __future__ import annotations

import json
import multiprocessing
import os
import threading
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from dream_assets.options import DreamOptions
from dream_assets.options_loader import dream_options
from dream_assets.passes import log_retention
from dream_assets.passes.log_retention import run_log_retention, trim_file_to_last_lines
from dream_assets.profile import SINGLE_FILE_LOGS, AgentProfile
from dream_assets.store import warehouse
from dream_assets.store.log_records import TierRoutingEvent, ToolCallEvent
from dream_assets.store.logs import append_event, read_events

NOW = datetime(2024, 6, 1, 12, 0, tzinfo=UTC)


def opts(**kw: object) -> DreamOptions:
    base = {
        "LogRetentionMaxFileAge": timedelta(days=30),
        "LogRetentionMaxFilesPerDirectory": 1000,
        "LogRetentionMaxLinesPerFile": 50_000,
    }
    return dream_options().replace(**{**base, **kw})


def record(i: int, ts: datetime = NOW - timedelta(days=1), session: str = "s1") -> str:
    return json.dumps(
        {
            "timestamp": (ts + timedelta(seconds=i)).isoformat().replace("+00:00", "Z"),
            "sessionId": session,
            "tool": "shell",
            "success": True,
            "n": i,
        },
        separators=(",", ":"),
    )


def write_session(
    profile: AgentProfile,
    sid: str,
    lines: int,
    *,
    age: timedelta = timedelta(hours=1),
    kind: str = "tool-call",
) -> Path:
    path = profile.session_log_path(kind, sid)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(record(i, session=sid) + "\n" for i in range(lines)))
    stamp = (NOW - age).timestamp()
    os.utime(path, (stamp, stamp))
    return path


def write_single(profile: AgentProfile, kind: str, lines: int, start: int = 0) -> Path:
    path = profile.single_log_path(kind)
    with open(path, "a") as f:
        f.write("".join(record(i) + "\n" for i in range(start, start + lines)))
    return path


def archived(profile: AgentProfile, kind: str) -> list[str]:
    return [r["raw"] for r in warehouse.iter_rows(profile, kind)]


def numbers(lines: list[str]) -> list[int]:
    return [json.loads(x)["n"] for x in lines]


# --- per-session directories ------------------------------------------------------------------------------------


def test_session_files_older_than_the_max_age_are_archived_then_deleted(profile: AgentProfile) -> None:
    old = write_session(profile, "old", 5, age=timedelta(days=31))
    fresh = write_session(profile, "fresh", 5, age=timedelta(days=29))
    old_lines = old.read_text().splitlines()
    report = run_log_retention(profile, opts(), NOW)
    assert not old.exists() and fresh.exists()
    assert sorted(archived(profile, "tool-call")) == sorted(old_lines)
    assert report.counts["files_deleted_age"] == 1 and report.counts["lines_archived"] == 5
    assert [(c.kind, c.target) for c in report.changes] == [("log-deleted", "logs/tool-call/old.jsonl")]
    assert "older than LogRetentionMaxFileAge" in report.changes[0].detail


def test_a_directory_is_capped_at_the_max_file_count_dropping_the_oldest(profile: AgentProfile) -> None:
    for i in range(6):
        write_session(profile, f"s{i}", 3, age=timedelta(hours=10 - i), kind="skill-usage")
    report = run_log_retention(profile, opts(LogRetentionMaxFilesPerDirectory=4), NOW)
    left = sorted(p.stem for p in profile.session_log_dir("skill-usage").glob("*.jsonl"))
    assert left == ["s2", "s3", "s4", "s5"]
    assert report.counts["files_deleted_count"] == 2
    assert len(archived(profile, "skill-usage")) == 6
    assert {r["session_id"] for r in warehouse.iter_rows(profile, "skill-usage")} == {"s0", "s1"}


def test_a_continuously_written_session_file_is_held_to_the_line_cap(profile: AgentProfile) -> None:
    # Never aged out (written now) and never the oldest: only the line cap bounds it (spec "Pass 0").
    for i in range(5):
        write_session(profile, f"idle{i}", 2, age=timedelta(days=i + 1))
    live = profile.session_log_path("tool-call", "cli-session")
    written: list[str] = []
    for cycle in range(3):
        for i in range(40):
            event = ToolCallEvent(NOW + timedelta(minutes=cycle, seconds=i), "cli-session", f"t{cycle}-{i}", True)
            append_event(profile, "tool-call", event)
            written.append(event.tool)
        report = run_log_retention(
            profile,
            opts(LogRetentionMaxFilesPerDirectory=6, LogRetentionMaxLinesPerFile=25),
            NOW + timedelta(minutes=cycle),
        )
        assert report.counts["errors"] == 0
        kept = [e.tool for e in read_events(profile, "tool-call").events if e.session_id == "cli-session"]
        assert kept == written[-25:]
    assert live.exists()
    in_warehouse = [
        json.loads(r)["tool"] for r in archived(profile, "tool-call") if json.loads(r)["sessionId"] == "cli-session"
    ]
    assert sorted(in_warehouse) == sorted(written[:-25])


def test_trimming_keeps_the_last_write_time_so_an_idle_file_still_ages_out(profile: AgentProfile) -> None:
    path = write_session(profile, "idle", 30, age=timedelta(days=20))
    before = path.stat().st_mtime_ns
    run_log_retention(profile, opts(LogRetentionMaxLinesPerFile=10), NOW)
    assert len(path.read_text().splitlines()) == 10
    assert path.stat().st_mtime_ns == before
    run_log_retention(profile, opts(LogRetentionMaxLinesPerFile=10), NOW + timedelta(days=11))
    assert not path.exists()
    assert sorted(numbers(archived(profile, "tool-call"))) == list(range(30))


def test_files_in_sub_directories_are_not_swept(profile: AgentProfile) -> None:
    nested = profile.session_log_dir("feedback") / "team" / "old.jsonl"
    nested.parent.mkdir(parents=True)
    nested.write_text("".join(record(i) + "\n" for i in range(100)))
    stamp = (NOW - timedelta(days=400)).timestamp()
    os.utime(nested, (stamp, stamp))
    report = run_log_retention(profile, opts(LogRetentionMaxFilesPerDirectory=1, LogRetentionMaxLinesPerFile=1), NOW)
    assert len(nested.read_text().splitlines()) == 100
    assert report.changes == []


def test_a_file_written_after_it_was_selected_is_not_deleted(
    profile: AgentProfile, monkeypatch: pytest.MonkeyPatch
) -> None:
    old = write_session(profile, "old", 3, age=timedelta(days=60))
    real = log_retention.archive_file_ranges

    def archive_then_the_agent_writes(*args: object, on_archived) -> object:
        def archived(k: int, result: object) -> None:
            if k and not wrote:  # the file's lines are in the warehouse; it is not removed yet
                wrote.append(append_event(profile, "tool-call", ToolCallEvent(NOW, "old", "late", True)))
            on_archived(k, result)

        wrote: list[object] = []
        return real(*args, on_archived=archived)

    monkeypatch.setattr(log_retention, "archive_file_ranges", archive_then_the_agent_writes)
    report = run_log_retention(profile, opts(), NOW)
    assert old.exists()
    assert [e.tool for e in read_events(profile, "tool-call").events][-1] == "late"
    assert report.counts["files_deleted_age"] == 0 and report.counts["errors"] == 0
    assert any("changed while it was being swept" in line for line in report.lines)


def test_a_file_is_trimmed_or_deleted_only_once_its_lines_are_in_the_warehouse(
    profile: AgentProfile, monkeypatch: pytest.MonkeyPatch
) -> None:
    for i in range(40):
        write_session(profile, f"s{i}", 3 + i % 3, age=timedelta(days=60 if i % 2 else 0, minutes=i))
    monkeypatch.setattr(warehouse, "BATCH_BYTES", 2000)  # many batches: files are removed while others are archived
    real = log_retention._apply_one
    checked: list[str] = []

    def apply_after_archiving(plan, **kwargs):
        stored = {row["source"] for row in warehouse.iter_rows(profile, "tool-call")}
        assert plan.path.name in stored, f"{plan.path.name} removed before its lines were archived"
        checked.append(plan.path.name)
        return real(plan, **kwargs)

    monkeypatch.setattr(log_retention, "_apply_one", apply_after_archiving)
    report = run_log_retention(profile, opts(LogRetentionMaxLinesPerFile=2), NOW)
    assert report.counts["errors"] == 0 and len(checked) == 40
    assert report.counts["files_deleted_age"] == 20 and report.counts["files_trimmed"] == 20


def test_a_deleted_file_with_a_torn_last_line_is_archived_whole(profile: AgentProfile) -> None:
    path = write_session(profile, "crashed", 2, age=timedelta(days=60))
    with open(path, "a") as f:
        f.write('{"timestamp":"2024-04-01T00:00:00Z","sess')
    stamp = (NOW - timedelta(days=60)).timestamp()
    os.utime(path, (stamp, stamp))
    run_log_retention(profile, opts(), NOW)
    assert not path.exists()
    assert warehouse.read_unknown(profile, "tool-call") == ['{"timestamp":"2024-04-01T00:00:00Z","sess']
    assert len(archived(profile, "tool-call")) == 3


# --- single-file logs --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("kind", SINGLE_FILE_LOGS)
def test_a_single_file_log_keeps_its_last_lines_and_archives_the_rest_exactly_once(
    profile: AgentProfile, kind: str
) -> None:
    path = write_single(profile, kind, 120)
    report = run_log_retention(profile, opts(LogRetentionMaxLinesPerFile=50), NOW)
    assert numbers(path.read_text().splitlines()) == list(range(70, 120))
    assert sorted(numbers(archived(profile, kind))) == list(range(70))
    assert report.counts["lines_trimmed"] == 70 and report.counts["lines_archived"] == 70
    write_single(profile, kind, 30, start=120)
    run_log_retention(profile, opts(LogRetentionMaxLinesPerFile=50), NOW)
    run_log_retention(profile, opts(LogRetentionMaxLinesPerFile=50), NOW)
    assert numbers(path.read_text().splitlines()) == list(range(100, 150))
    assert sorted(numbers(archived(profile, kind))) == list(range(100))


def test_a_final_line_being_written_is_never_split(tmp_path: Path) -> None:
    path = tmp_path / "log.jsonl"
    path.write_text("".join(record(i) + "\n" for i in range(10)) + '{"timestamp":"2024-')
    removed = trim_file_to_last_lines(path, 3, tmp_path / "log.lock")
    assert removed == 7
    assert path.read_text() == "".join(record(i) + "\n" for i in range(7, 10)) + '{"timestamp":"2024-'


def test_trim_archives_before_it_removes_and_stops_if_archiving_fails(tmp_path: Path) -> None:
    path = tmp_path / "log.jsonl"
    path.write_text("".join(record(i) + "\n" for i in range(10)))
    seen: list[str] = []
    assert trim_file_to_last_lines(path, 4, tmp_path / "l.lock", archive=seen.extend) == 6
    assert numbers(seen) == list(range(6))

    def broken(lines: object) -> None:
        raise OSError("warehouse volume is read-only")

    before = path.read_bytes()
    path.write_bytes(before + (record(10) + "\n").encode())
    with pytest.raises(OSError, match="read-only"):
        trim_file_to_last_lines(path, 2, tmp_path / "l.lock", archive=broken)
    assert path.read_bytes() == before + (record(10) + "\n").encode()


def test_trim_of_a_file_under_the_cap_or_missing_changes_nothing(tmp_path: Path) -> None:
    path = tmp_path / "log.jsonl"
    assert trim_file_to_last_lines(path, 3, tmp_path / "l.lock") == 0
    path.write_text(record(1) + "\n")
    stat = path.stat()
    assert trim_file_to_last_lines(path, 3, tmp_path / "l.lock") == 0
    assert path.stat().st_ino == stat.st_ino


# --- policy switches, best effort, reporting ----------------------------------------------------------------------


@pytest.mark.parametrize(
    "disabled, still_happens",
    [
        ({"LogRetentionMaxFileAge": timedelta(0)}, {"files_deleted_count", "files_trimmed"}),
        ({"LogRetentionMaxFileAge": timedelta(days=-1)}, {"files_deleted_count", "files_trimmed"}),
        ({"LogRetentionMaxFilesPerDirectory": 0}, {"files_deleted_age", "files_trimmed"}),
        ({"LogRetentionMaxLinesPerFile": -5}, {"files_deleted_age", "files_deleted_count"}),
    ],
)
def test_a_non_positive_value_disables_only_its_dimension(
    profile: AgentProfile, disabled: dict, still_happens: set[str]
) -> None:
    write_session(profile, "ancient", 3, age=timedelta(days=90))
    for i in range(3):
        write_session(profile, f"s{i}", 3, age=timedelta(hours=10 - i))
    write_session(profile, "long", 20, age=timedelta(minutes=1))
    policy = {"LogRetentionMaxFilesPerDirectory": 3, "LogRetentionMaxLinesPerFile": 10, **disabled}
    report = run_log_retention(profile, opts(**policy), NOW)
    acted = {k for k in ("files_deleted_age", "files_deleted_count", "files_trimmed") if report.counts[k]}
    assert acted == still_happens


def test_the_pass_is_skipped_when_disabled(profile: AgentProfile) -> None:
    path = write_single(profile, "wisp-executions", 20)
    report = run_log_retention(profile, opts(LogRetentionEnabled=False, LogRetentionMaxLinesPerFile=1), NOW)
    assert report.status == "skipped" and "LogRetentionEnabled" in report.reason
    assert len(path.read_text().splitlines()) == 20


def test_it_runs_on_a_profile_with_no_store_and_no_memories(tmp_path: Path) -> None:
    # Pass 0 runs before the "fewer than two memories" guard: it needs nothing but the logs.
    profile = AgentProfile(tmp_path / "fresh-agent")
    path = profile.single_log_path("tier-routing")
    path.parent.mkdir(parents=True)
    path.write_text("".join(record(i) + "\n" for i in range(5)))
    report = run_log_retention(profile, opts(LogRetentionMaxLinesPerFile=2), NOW)
    assert report.status == "completed"
    assert len(path.read_text().splitlines()) == 2
    assert not profile.store_path.exists()


def test_an_empty_profile_reports_zeros(profile: AgentProfile) -> None:
    report = run_log_retention(profile, opts(), NOW)
    assert report.status == "completed"
    assert report.summary == (
        "log retention — 0 files deleted (age 0, count 0), 0 files trimmed (0 lines), "
        "0 lines archived to the warehouse, 0 errors"
    )
    assert set(report.counts) == set(log_retention.COUNT_KEYS)


def test_the_summary_counts_every_kind_of_work(profile: AgentProfile) -> None:
    write_session(profile, "a", 4, age=timedelta(days=40))
    write_session(profile, "b", 4, age=timedelta(days=50))
    write_session(profile, "c", 4, age=timedelta(days=2))
    write_session(profile, "d", 2000, age=timedelta(days=1))
    write_single(profile, "tier-routing", 1500)
    report = run_log_retention(profile, opts(LogRetentionMaxFilesPerDirectory=1, LogRetentionMaxLinesPerFile=1000), NOW)
    assert report.summary == (
        "log retention — 3 files deleted (age 2, count 1), 2 files trimmed (1,500 lines), "
        "1,512 lines archived to the warehouse, 0 errors"
    )
    assert len(report.changes) == 5


def test_a_failing_log_does_not_stop_the_others(profile: AgentProfile) -> None:
    # tool-call's warehouse folder is blocked by a file: archiving it fails, so none of its files may lose lines.
    (profile.warehouse_dir / "tool-call").write_text("in the way")
    blocked = write_session(profile, "s1", 30, kind="tool-call")
    other = write_session(profile, "s1", 30, kind="feedback")
    single = write_single(profile, "wisp-executions", 30)
    report = run_log_retention(profile, opts(LogRetentionMaxLinesPerFile=10), NOW)
    assert len(blocked.read_text().splitlines()) == 30
    assert len(other.read_text().splitlines()) == 10
    assert len(single.read_text().splitlines()) == 10
    assert report.counts["errors"] == 1 and report.counts["files_trimmed"] == 2
    assert any("logs/tool-call" in line and "retried next cycle" in line for line in report.lines)


def test_a_failing_file_does_not_stop_its_directory(profile: AgentProfile) -> None:
    stuck = write_session(profile, "stuck", 30)
    fine = write_session(profile, "fine", 30)
    profile.log_lock_path("tool-call", "stuck").mkdir(parents=True)  # its lock cannot be taken
    report = run_log_retention(profile, opts(LogRetentionMaxLinesPerFile=10), NOW)
    assert len(stuck.read_text().splitlines()) == 30
    assert len(fine.read_text().splitlines()) == 10
    assert report.counts["errors"] == 1 and report.counts["files_trimmed"] == 1


# --- concurrency: writers never lose a line to a trim ---------------------------------------------------------------


def _write_records(root: str, tag: str, count: int) -> None:
    profile = AgentProfile(Path(root))
    for i in range(count):
        ts = NOW + timedelta(milliseconds=i)
        append_event(profile, "tier-routing", TierRoutingEvent(ts, "live", "small", f"{tag}-{i}", "success"))
        append_event(profile, "tool-call", ToolCallEvent(ts, "live", f"{tag}-{i}", True))


@pytest.mark.slow  # a fault run: concurrent writers during trims
def test_writers_appending_during_trims_lose_no_line_and_leave_no_partial_line(profile: AgentProfile) -> None:
    count = 600
    ctx = multiprocessing.get_context("spawn")
    procs = [ctx.Process(target=_write_records, args=(str(profile.root), f"p{n}", count)) for n in range(2)]
    thread = threading.Thread(target=_write_records, args=(str(profile.root), "t0", count))
    for p in procs:
        p.start()
    thread.start()
    options = opts(LogRetentionMaxLinesPerFile=40)
    trimmed = 0
    while any(p.is_alive() for p in procs) or thread.is_alive():
        trimmed += run_log_retention(profile, options, NOW).counts["files_trimmed"]
    for p in procs:
        p.join()
        assert p.exitcode == 0
    thread.join()
    trimmed += run_log_retention(profile, options, NOW).counts["files_trimmed"]
    assert trimmed > 0

    expected = sorted(f"{tag}-{i}" for tag in ("p0", "p1", "t0") for i in range(count))
    for kind, path, key in [
        ("tier-routing", profile.single_log_path("tier-routing"), "taskKind"),
        ("tool-call", profile.session_log_path("tool-call", "live"), "tool"),
    ]:
        raw = path.read_bytes()
        assert raw.endswith(b"\n")
        kept = [json.loads(x)[key] for x in raw.decode().splitlines()]  # every line whole and valid
        assert len(kept) == 40
        moved = [json.loads(x)[key] for x in archived(profile, kind)]
        assert not set(kept) & set(moved)
        assert sorted(kept + moved) == expected


# --- temp files left by a killed rewrite ---------------------------------------------------------------------------

_KILLED_REWRITE = """
import os, sys
from datetime import datetime
from pathlib import Path

from dream_assets.profile import AgentProfile
from dream_assets.store import log_bytes, warehouse

def killed(*args, **kwargs):          # the process dies where the temp file would be renamed into place
    os._exit(9)

os.replace = killed
what, root, path = sys.argv[1:4]
if what == "trim":
    log_bytes.replace_with_tail(Path(path), 1)
else:
    warehouse.archive_file_ranges(AgentProfile(Path(root)), "tool-call", [(Path(path), 0, None)],
                                  datetime.fromisoformat("2024-06-01T12:00:00+00:00"))
"""


def _kill_during(what: str, profile: AgentProfile, path: Path) -> None:
    import subprocess
    import sys

    root = Path(__file__).resolve().parents[2]
    done = subprocess.run(
        [sys.executable, "-c", _KILLED_REWRITE, what, str(profile.root), str(path)],
        cwd=root,
        env={**os.environ, "PYTHONPATH": str(root)},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 9, done.stderr


def _age(path: Path, age: timedelta) -> None:
    stamp = (NOW - age).timestamp()
    os.utime(path, (stamp, stamp))


@pytest.mark.slow  # a fault run: trims killed in a subprocess
def test_temp_files_left_by_a_killed_trim_and_archive_are_swept_once_old(profile: AgentProfile) -> None:
    log = write_session(profile, "s1", 5)
    before = log.read_bytes()
    _kill_during("trim", profile, log)
    _kill_during("archive", profile, log)
    left = sorted(log.parent.glob(".s1.jsonl.*.tmp")) + sorted(profile.warehouse_dir.glob("tool-call/*/.part-*.tmp"))
    assert len(left) == 2 and log.read_bytes() == before  # the killed rewrite changed nothing
    for path in left:
        _age(path, timedelta(hours=2))
    fresh = log.parent / ".s2.jsonl.0123456789ab.tmp"  # a rewrite still writing it
    fresh.write_bytes(b"partial")
    _age(fresh, timedelta(minutes=10))

    report = run_log_retention(profile, opts(), NOW)
    assert report.status == "completed" and report.counts["temp_files_removed"] == 2
    assert not any(p.exists() for p in left) and fresh.exists()
    assert {c.target for c in report.changes if c.kind == "temp-removed"} == {
        p.relative_to(profile.root).as_posix() for p in left
    }
    assert "2 leftover temp files removed" in report.summary
    assert log.read_bytes() == before
