"""Log retention benchmarks (spec "Pass 0 — Log retention" targets).

    .venv/bin/python benchmarks/retention.py            # 1 GiB single-file log, 10,000 session files
    .venv/bin/python benchmarks/retention.py --quick    # 64 MiB, 1,000 files
    .venv/bin/python benchmarks/retention.py --sessions-only    # only the 10,000 session files (with --quick: 1,000)

Prints one JSON object per line: {"name": "retention.<metric>", "n": <size>, "value": <num>, "unit": "<unit>"}.

- retention.single_file_trim_s / _peak_mb (n = file size in bytes): ``trim_file_to_last_lines`` keeping the last
  50,000 lines (backwards cut search, count of the removed lines, copy of the kept tail under the lock, rename),
  in a child process whose peak RSS is reported.
- retention.warehouse_archive_s / _peak_mb (n = file size in bytes): streaming the removed prefix into the
  Parquet warehouse as lines, ``archive_lines`` over ``iter_lines_between``.
- retention.warehouse_archive_ranges_s / _peak_mb (n = file size in bytes): the same prefix given as a byte range
  to ``archive_file_ranges``, which reads the file in blocks instead of taking lines one by one.
- retention.single_file_pass_s / _peak_mb (n = file size in bytes): ``run_log_retention`` end to end on a profile
  whose only log is that file (cut search, archive of the removed lines, trim), into an empty warehouse.
- retention.session_dir_s / _cpu_s (n = files): the whole pass over one per-session directory (age + count pruning,
  line trims, and the warehouse archive of everything removed), wall time and processor time of all its threads.

Files are generated in a temporary folder (removed afterwards); they sit in the page cache when measured.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

KEEP_LINES = 50_000
NOW = datetime(2024, 6, 1, tzinfo=UTC)
LINE_BYTES = 1_100  # spec: the wisp log runs ~1.1 KB per line


def emit(name: str, n: int, value: float, unit: str) -> None:
    print(json.dumps({"name": f"retention.{name}", "n": n, "value": round(value, 4), "unit": unit}), flush=True)


def _wisp_line(i: int, ts: datetime, pad: str) -> str:
    return (
        json.dumps(
            {
                "timestamp": ts.isoformat().replace("+00:00", "Z"),
                "wispId": f"w{i:09d}",
                "description": "fetch the weekly report and summarise it",
                "skillName": "reports/weekly",
                "success": i % 7 != 0,
                "failedStep": None,
                "error": None,
                "steps": ["fetch", "parse", pad],
            },
            separators=(",", ":"),
        )
        + "\n"
    )


def make_single_file(path: Path, size: int) -> int:
    """Unique ~1.1 KB wisp lines with timestamps spread over 90 days, written in 8 MiB blocks."""
    probe = _wisp_line(0, NOW, "")
    pad = "x" * (LINE_BYTES - len(probe))
    total = size // LINE_BYTES
    step = timedelta(days=90) / max(total, 1)
    start = NOW - timedelta(days=90)
    written = lines = 0
    with open(path, "w", encoding="utf-8") as f:
        while written < size:
            block = "".join(_wisp_line(lines + k, start + step * (lines + k), pad) for k in range(7_000))
            f.write(block)
            written += len(block)
            lines += 7_000
    return lines


def make_session_dir(profile_root: Path, files: int, lines_per_file: int) -> None:
    """30% of the files last written 40 days ago, the rest within the last day, each with distinct mtimes.

    Each session also gets the (empty) lock file its writer leaves behind, as ``append_event`` does.
    """
    from dream_assets.profile import AgentProfile

    profile = AgentProfile(profile_root).ensure()
    for i in range(files):
        sid = f"s{i:06d}"
        ts0 = NOW - timedelta(days=40 if i % 10 < 3 else 0, minutes=i)
        body = "".join(
            json.dumps(
                {
                    "timestamp": (ts0 + timedelta(seconds=k)).isoformat().replace("+00:00", "Z"),
                    "sessionId": sid,
                    "tool": "shell",
                    "success": True,
                    "error": None,
                    "durationMs": 12.5 + k,
                    "skillName": "ops/deploy",
                },
                separators=(",", ":"),
            )
            + "\n"
            for k in range(lines_per_file)
        )
        path = profile.session_log_path("tool-call", sid)
        path.write_text(body, encoding="utf-8")
        mtime = (ts0 + timedelta(seconds=lines_per_file)).timestamp()
        os.utime(path, (mtime, mtime))
        profile.log_lock_path("tool-call", sid).touch()


# --- children: each measures itself and prints one JSON result ---------------------------------------------


def child_trim(path: str, lock: str) -> None:
    from dream_assets.passes.log_retention import trim_file_to_last_lines

    t0 = time.perf_counter()
    removed = trim_file_to_last_lines(Path(path), KEEP_LINES, Path(lock))
    elapsed = time.perf_counter() - t0
    print(json.dumps({"s": elapsed, "removed": removed, "peak_kb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss}))


def child_archive(path: str, profile_root: str, how: str) -> None:
    from dream_assets.profile import AgentProfile
    from dream_assets.store.log_bytes import find_cut_offset, iter_lines_between
    from dream_assets.store.warehouse import archive_file_ranges, archive_lines

    p = Path(path)
    profile = AgentProfile(Path(profile_root))
    t0 = time.perf_counter()
    cut = find_cut_offset(p, KEEP_LINES)
    if how == "lines":
        rows = archive_lines(profile, "wisp-executions", p.name, iter_lines_between(p, 0, cut), NOW)
    else:
        rows = archive_file_ranges(profile, "wisp-executions", [(p, 0, cut)], NOW).added
    elapsed = time.perf_counter() - t0
    print(json.dumps({"s": elapsed, "rows": rows, "peak_kb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss}))


def child_pass(profile_root: str) -> None:
    from dream_assets.options_loader import dream_options
    from dream_assets.passes.log_retention import run_log_retention
    from dream_assets.profile import AgentProfile

    options = dream_options(LogRetentionMaxLinesPerFile=KEEP_LINES)
    t0 = time.perf_counter()
    report = run_log_retention(AgentProfile(Path(profile_root)), options, NOW)
    elapsed = time.perf_counter() - t0
    print(
        json.dumps(
            {
                "s": elapsed,
                "counts": report.counts,
                "peak_kb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss,
            }
        )
    )


def child_session_dir(profile_root: str, max_lines: int) -> None:
    from dream_assets.options_loader import dream_options
    from dream_assets.passes.log_retention import run_log_retention
    from dream_assets.profile import AgentProfile

    options = dream_options(
        LogRetentionMaxFileAge=timedelta(days=30),
        LogRetentionMaxFilesPerDirectory=1000,
        LogRetentionMaxLinesPerFile=max_lines,
    )
    t0, cpu0 = time.perf_counter(), time.process_time()
    report = run_log_retention(AgentProfile(Path(profile_root)), options, NOW)
    elapsed, cpu = time.perf_counter() - t0, time.process_time() - cpu0
    print(
        json.dumps(
            {
                "s": elapsed,
                "cpu_s": cpu,
                "counts": report.counts,
                "peak_kb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss,
            }
        )
    )


def run_child(*args: str) -> dict:
    out = subprocess.run(
        [sys.executable, __file__, "--child", *args], check=True, capture_output=True, text=True, cwd=ROOT
    )
    return json.loads(out.stdout.strip().splitlines()[-1])


# --- driver --------------------------------------------------------------------------------------------------


def bench_single_file(tmp: Path, size: int) -> None:
    profile_root = tmp / f"single-{size}"
    log = profile_root / "logs" / "wisp-executions.jsonl"
    log.parent.mkdir(parents=True)
    lines = make_single_file(log, size)
    actual = log.stat().st_size
    removed = lines - KEEP_LINES
    for how, metric in (("lines", "warehouse_archive"), ("ranges", "warehouse_archive_ranges")):
        warehouse = profile_root / "warehouse"
        shutil.rmtree(warehouse, ignore_errors=True)
        archived = run_child("archive", str(log), str(profile_root), how)
        assert archived["rows"] == removed, archived
        emit(f"{metric}_s", actual, archived["s"], "s")
        emit(f"{metric}_peak_mb", actual, archived["peak_kb"] / 1024, "MB")
    pass_root = tmp / f"pass-{size}"
    pass_log = pass_root / "logs" / "wisp-executions.jsonl"
    pass_log.parent.mkdir(parents=True)
    shutil.copyfile(log, pass_log)
    trimmed = run_child("trim", str(log), str(profile_root / ".locks" / "logs" / "wisp-executions.lock"))
    assert trimmed["removed"] == removed, trimmed
    emit("single_file_trim_s", actual, trimmed["s"], "s")
    emit("single_file_trim_peak_mb", actual, trimmed["peak_kb"] / 1024, "MB")
    shutil.rmtree(profile_root)
    passed = run_child("pass", str(pass_root))
    c = passed["counts"]
    assert c["errors"] == 0 and c["lines_trimmed"] == c["lines_archived"] == removed, c
    emit("single_file_pass_s", actual, passed["s"], "s")
    emit("single_file_pass_peak_mb", actual, passed["peak_kb"] / 1024, "MB")
    shutil.rmtree(pass_root)


def bench_session_dir(tmp: Path, files: int) -> None:
    profile_root = tmp / f"sessions-{files}"
    make_session_dir(profile_root, files, lines_per_file=40)
    result = run_child("sessions", str(profile_root), "30")
    c = result["counts"]
    left = list((profile_root / "logs" / "tool-call").glob("*.jsonl"))
    assert c["errors"] == 0 and len(left) == min(files - files * 3 // 10, 1000), (c, len(left))
    emit("session_dir_s", files, result["s"], "s")
    emit("session_dir_cpu_s", files, result["cpu_s"], "s")  # all threads of the pass
    emit("session_dir_lines_archived", files, c["lines_archived"], "lines")
    shutil.rmtree(profile_root)


def main() -> None:
    if len(sys.argv) > 1 and sys.argv[1] == "--child":
        what, *rest = sys.argv[2:]
        {
            "trim": child_trim,
            "archive": child_archive,
            "pass": child_pass,
            "sessions": lambda root, n: child_session_dir(root, int(n)),
        }[what](*rest)
        return
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="64 MiB file and 1,000 session files")
    parser.add_argument("--sessions-only", action="store_true", help="only the per-session directory figures")
    args = parser.parse_args()
    sizes = [64 << 20] if args.quick else [64 << 20, 1 << 30]  # the small size shows memory does not grow
    if args.sessions_only:
        sizes = []
    files = 1_000 if args.quick else 10_000
    tmp = Path(tempfile.mkdtemp(prefix="dream-retention-bench-"))
    try:
        for size in sizes:
            bench_single_file(tmp, size)
        bench_session_dir(tmp, files)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
