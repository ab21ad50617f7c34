"""What it costs to make importance decay undoable. Prints one JSON object per line: {"name", "n", "value", "unit"}.

    nice -n 10 .venv/bin/python benchmarks/decay.py            # n = 100,000 entries
    nice -n 10 .venv/bin/python benchmarks/decay.py --quick    # n = 10,000

Decay writes one "decayed" change row per entry it touches (the old and new importance, updated_at and its two
stamps), in the transaction of the decay itself. The corpus is decayed 60 days on, when nearly every entry is due.
CPU time (``time.process_time``), so a loaded machine changes the figures little:

- ``decay.pass_cpu_s``: the pass with its change rows; ``decay.pass_without_rows_cpu_s``: the same pass on a copy of
  the same store with the rows not written; ``decay.rows_share``: the part of the pass the rows cost (ratio).
- ``decay.rows_bytes_per_entry``: how much the store file grows per decayed entry (after a checkpoint).
- ``decay.undo_cpu_s`` and ``decay.undo_per_entry_ms``: ``dream undo`` of that cycle (one transaction per entry).
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import tempfile
import time
from datetime import timedelta
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.store import NOW, build  # noqa: E402
from dream_assets.options_loader import dream_options
from dream_assets.passes.context import PassContext  # noqa: E402
from dream_assets.passes.importance_decay import run_importance_decay  # noqa: E402
from dream_assets.profile import AgentProfile  # noqa: E402
from dream_assets.store import open_store  # noqa: E402
from dream_assets.store.changes import ChangeLog  # noqa: E402

LATER = NOW + timedelta(days=60)


def emit(name: str, n: int, value: float, unit: str) -> None:
    print(json.dumps({"name": name, "n": n, "value": round(value, 4), "unit": unit}), flush=True)


def _store_bytes(profile: AgentProfile) -> int:
    store = open_store(profile, dream_options())
    with store.connection.session() as conn:
        conn.execute("CHECKPOINT")
    store.close()
    return sum(p.stat().st_size for p in profile.root.rglob("*.duckdb*"))


def _decay(profile: AgentProfile, cycle_id: str) -> tuple[float, int]:
    """The decay pass on ``profile``: (CPU seconds, entries decayed)."""
    store = open_store(profile, dream_options())
    t = time.process_time()
    report = run_importance_decay(PassContext(profile, dream_options(), LATER, cycle_id=cycle_id, _store=store))
    cpu = time.process_time() - t
    store.close()
    assert report.status == "completed", report.reason
    return cpu, int(report.counts["decayed"])


def bench(root: Path, n: int) -> None:
    with_rows = build(root, n)
    without_rows = AgentProfile(root / f"copy-{n}")
    shutil.copytree(with_rows.root, without_rows.root)
    size = _store_bytes(with_rows)

    cpu, decayed = _decay(with_rows, "decay")
    real_record_many = ChangeLog.record_many
    ChangeLog.record_many = lambda self, rows, *, now: 0  # type: ignore[method-assign]
    try:
        bare, _ = _decay(without_rows, "decay")
    finally:
        ChangeLog.record_many = real_record_many  # type: ignore[method-assign]
    grown = _store_bytes(with_rows) - _store_bytes(without_rows)
    emit("decay.entries_decayed", n, decayed, "entries")
    emit("decay.pass_cpu_s", n, cpu, "s")
    emit("decay.pass_without_rows_cpu_s", n, bare, "s")
    emit("decay.rows_share", n, (cpu - bare) / cpu if cpu else 0.0, "ratio")
    emit("decay.rows_bytes_per_entry", n, grown / decayed if decayed else 0.0, "bytes")
    emit("decay.store_bytes_per_entry", n, size / n, "bytes")

    store = open_store(with_rows, dream_options())
    t, wall = time.process_time(), time.perf_counter()
    result = store.changes.undo_cycle("decay", now=LATER + timedelta(hours=1))
    undo_cpu, undo_wall = time.process_time() - t, time.perf_counter() - wall
    store.close()
    assert result.ok and len(result.restored) == decayed, (len(result.restored), decayed, result.refused[:2])
    emit("decay.undo_cpu_s", n, undo_cpu, "s")
    emit("decay.undo_wall_s", n, undo_wall, "s")
    emit("decay.undo_per_entry_ms", n, 1000 * undo_cpu / decayed if decayed else 0.0, "ms")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="n = 10,000")
    parser.add_argument("--n", type=int, default=100_000)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        bench(Path(tmp), 10_000 if args.quick else args.n)


if __name__ == "__main__":
    main()
