"""The recall benchmark's smoke run: every figure of the comparison is printed for its size, and the ratios to
tantivy whenever tantivy is installed. The full run is `python benchmarks/recall.py`."""

import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.slow  # builds two indexes a few times over in forked processes (~10 s)
def test_quick_recall_run_prints_our_figures_and_the_ratios_to_tantivy():
    proc = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / "recall.py"), "--quick"],
        capture_output=True,
        text=True,
        timeout=600,
        cwd=ROOT,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    metrics = {m["name"]: m for m in (json.loads(line) for line in proc.stdout.splitlines() if line.strip())}
    assert {m["n"] for m in metrics.values()} == {3000}, metrics
    for key in ("build_s", "memory_mb", "query_p50_ms", "lookup_p50_ms", "add_1000_s", "save_visible_ms"):
        assert metrics[f"recall.ours.{key}"]["value"] > 0, key
    assert metrics["recall.add_1000_s"]["value"] == metrics["recall.ours.add_1000_s"]["value"]
    ratios = {"recall.query_p50_ratio", "recall.lookup_p50_ratio", "recall.build_ratio", "recall.memory_ratio"}
    if importlib.util.find_spec("tantivy") is None:
        assert "tantivy is not installed" in proc.stderr
        assert not ratios & set(metrics)
    else:
        for name in ratios:
            assert metrics[name]["value"] > 0, name
