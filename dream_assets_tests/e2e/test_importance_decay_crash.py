"""Importance decay writes a large corpus in short transactions (store/memory.py ``WRITE_CHUNK`` entries each), so the
store is never held for the whole corpus. A process killed at any write leaves every entry either decayed and
stamped or untouched, never one without the other, and the pass run again ends where an uninterrupted run ends.

Each trial is a real child process (crash_child.py) that dies with ``os._exit`` right after its N-th write statement.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from datetime import timedelta
from pathlib import Path

import pytest

from dream_assets.options_loader import dream_options
from dream_assets.passes.context import PassContext
from dream_assets.passes.importance_decay import APPLIED_KEY, run_importance_decay
from dream_assets.profile import AgentProfile
from dream_assets.store import open_store
from dream_assets.store.connection import close_all

from ..conftest import NOW
from ..crash_child import KILLED
from ..integration.test_maintenance_passes import entry

ROOT = Path(__file__).resolve().parents[2]
CHUNK = 4
OPTIONS = dream_options(ConsolidationMinInterval=timedelta(0), DreamPassChangeGateEnabled=False)


def _child(spec: dict) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "dream_assets_tests.crash_child", json.dumps(spec)],
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        capture_output=True,
        text=True,
        timeout=300,
    )


def _state(root: Path) -> dict[str, tuple[float, str | None]]:
    store = open_store(AgentProfile(root), OPTIONS)
    try:
        return {e.id: (e.importance, e.metadata.get(APPLIED_KEY)) for e in store.memories.list_live()}
    finally:
        store.close()
        close_all()


@pytest.mark.slow  # two child processes, one forking a trial per write, and six reruns (about 30 s)
def test_decay_killed_between_any_two_writes_leaves_no_entry_half_decayed_and_a_rerun_finishes(tmp_path):
    base = AgentProfile(tmp_path / "base").ensure()
    store = open_store(base, OPTIONS)
    store.memories.put_many([entry(i, importance=0.8, seen_days=75 + i) for i in range(10)])
    store.close()
    close_all()
    before = _state(base.root)
    spec = {"pass": "importance_decay", "answers": [], "now": NOW.isoformat(), "cycle": "c", "write_chunk": CHUNK}

    clean = tmp_path / "complete"
    shutil.copytree(base.root, clean)
    done = _child({**spec, "profile": str(clean), "kill_at": 0})
    assert done.returncode == 0, done.stderr
    writes = json.loads(done.stdout.strip().splitlines()[-1])["writes"]
    # Three chunks of at most four entries, each an importance, a stamp and a change-row statement.
    assert writes == 3 * 3
    complete = _state(clean)
    assert all(complete[i][0] < before[i][0] and complete[i][1] for i in before)

    roots = {n: tmp_path / f"kill-{n}" for n in range(1, writes + 1)}
    for root in roots.values():
        shutil.copytree(base.root, root)
    proc = _child({**spec, "trials": [[n, str(root)] for n, root in roots.items()]})
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert set(json.loads(proc.stdout.strip().splitlines()[-1]).values()) == {KILLED}

    decayed_counts = []
    for n, root in roots.items():
        after_kill = _state(root)
        decayed = {i for i, value in after_kill.items() if value != before[i]}
        assert all(after_kill[i] == complete[i] for i in decayed), n  # decayed means decayed and stamped
        decayed_counts.append(len(decayed))
        profile = AgentProfile(root)
        report = run_importance_decay(PassContext(profile, OPTIONS, NOW, cycle_id="again"))
        close_all()
        assert report.status == "completed", (n, report.reason)
        assert _state(root) == complete, n
    # The kills landed inside each chunk's transaction: nothing, one chunk, then two chunks were committed.
    assert decayed_counts == [0, 0, 0, 4, 4, 4, 8, 8, 8]
