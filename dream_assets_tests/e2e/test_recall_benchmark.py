"""The recall benchmark's smoke run: every figure of the comparison is printed for its size, and the ratios to
tantivy whenever tantivy is installed. The full run is `python benchmarks/recall.py`."""

import importlib.util

import pytest

from dream_assets_tests.benchmark_run import run_benchmark


@pytest.mark.slow  # builds two indexes a few times over in forked processes (~10 s)
def test_quick_recall_run_prints_our_figures_and_the_ratios_to_tantivy():
    run = run_benchmark("recall.py", "--quick", timeout=600)
    metrics = run.by_name
    assert {m["n"] for m in metrics.values()} == {3000}, metrics
    for key in ("build_s", "memory_mb", "query_p50_ms", "lookup_p50_ms", "add_1000_s", "save_visible_ms"):
        assert metrics[f"recall.ours.{key}"]["value"] > 0, key
    assert metrics["recall.add_1000_s"]["value"] == metrics["recall.ours.add_1000_s"]["value"]
    ratios = {"recall.query_p50_ratio", "recall.lookup_p50_ratio", "recall.build_ratio", "recall.memory_ratio"}
    if importlib.util.find_spec("tantivy") is None:
        assert "tantivy is not installed" in run.stderr
        assert not ratios & set(metrics)
    else:
        for name in ratios:
            assert metrics[name]["value"] > 0, name
