"""The serve benchmark's CI-sized run: every figure is printed for both transports, no tool call fails and no save is
lost while a cycle runs. The latencies are the benchmark's to report, not this test's to judge (a loaded machine)."""

import pytest

from dream_assets_tests.benchmark_run import run_benchmark


@pytest.mark.slow  # two `dream serve` processes, each with a dream cycle beside it (about two minutes)
def test_quick_serve_run_reports_every_figure_and_loses_no_save():
    lines = run_benchmark("serve.py", "--quick").lines
    names = {m["name"] for m in lines}
    for transport in ("stdio", "http"):
        for figure in ("save", "search", "cycle_save", "cycle_search"):
            for q in ("p50_ms", "p99_ms"):
                assert f"serve.{transport}.{figure}_{q}" in names, names
        for figure in ("first_call_s", "first_save_s", "warm_up_cpu_s", "server_cpu_per_save_ms"):
            assert f"serve.{transport}.{figure}" in names, names
        saves = next(m for m in lines if m["name"] == f"serve.{transport}.cycle_saves")
        assert saves["value"] >= 20
    for figure in ("library_save_cpu_ms", "library_search_cpu_ms", "sdk_floor_save_cpu_ms", "sdk_floor_search_cpu_ms"):
        assert f"serve.{figure}" in names, names
    assert [m["value"] for m in lines if m["name"] == "serve.saves_lost"] == [0, 0]
    assert [m["value"] for m in lines if m["name"] == "serve.errors"] == [0, 0]
    assert all(m["value"] > 0 for m in lines if m["name"].endswith("_ms"))
