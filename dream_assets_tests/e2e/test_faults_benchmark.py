"""The fault benchmark's CI-sized run: kills at write steps, fuzzed model answers, hostile logs, concurrent saves,
fuzzed contradiction-sweep answers with the purge after them, a hostile embeddings endpoint, and the review path
(kills in an apply and a reject of a pending set, fuzzed change ids, an apply twice), and linked memory folders (a
person's edits of every kind between cycles, two agents on one folder, a symlinked archive/, a save during a
write-back, and the undo of a review set written out to a folder killed at each step and run again).

Every trial must lose no fact, leave no answer half applied, report no failure as completed or skipped, and undo
every cycle exactly. The full run (10,000 answers) is `python benchmarks/faults.py`."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.slow
def test_quick_fault_run_loses_nothing_and_misreports_nothing():
    proc = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / "faults.py"), "--quick"],
        capture_output=True,
        text=True,
        timeout=900,
        cwd=ROOT,
    )
    metrics = {m["name"]: m["value"] for m in (json.loads(line) for line in proc.stdout.splitlines() if line.strip())}
    problems = proc.stderr[-3000:]
    assert metrics, f"the benchmark printed no metrics: {problems}"
    for name in (
        "faults.facts_lost",
        "faults.partial_applies",
        "faults.misreported",
        "faults.undo_failures",
        "faults.superseded_purged",
        "faults.embedding_failures",
        "faults.person_edits_lost",
        "faults.cross_namespace_leaks",
    ):
        assert metrics[name] == 0, f"{name} = {metrics[name]}: {problems}"
    # The run really attacked something: every section ran trials.
    assert metrics["faults.kill_trials"] >= 20 and metrics["faults.apply_writes"] > 10
    assert metrics["faults.review_trials"] >= 40 and metrics["faults.review_apply_writes"] > 10
    assert metrics["faults.review_reject_writes"] > 0
    assert metrics["faults.fuzz_trials"] >= 200
    assert metrics["faults.hostile_log_trials"] == 1
    assert metrics["faults.concurrent_saves"] > 20 and metrics["faults.concurrent_cycles"] > 2
    assert metrics["faults.hostile_file_trials"] >= 8
    assert metrics["faults.hostile_file_failures"] == 0 and metrics["faults.hostile_file_stuck"] == 0, problems
    assert metrics["faults.sweep_trials"] >= 8 and metrics["faults.sweep_superseded"] > 0
    assert metrics["faults.embedding_saves"] >= 20
    assert metrics["faults.folder_trials"] >= 8
    assert metrics["faults.folder_undo_trials"] >= 6 and metrics["faults.folder_undo_file_steps"] >= 3
    assert metrics["faults.langgraph_trials"] >= 3 and metrics["faults.langgraph_refused"] > 0
    assert proc.returncode == 0, problems
