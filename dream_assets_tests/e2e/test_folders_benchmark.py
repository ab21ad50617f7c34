"""The memory-folder benchmark's CI-sized run (200 notes per format): an idle cycle rewrites no file and no name,
number or date of a note is lost. The full run (2,000 notes per format) is `python benchmarks/folders.py`."""

import pytest

from dream_assets_tests.benchmark_run import run_benchmark


@pytest.mark.slow  # reason: three generated folders read, dreamed over and written back (about a minute)
def test_quick_folder_run_rewrites_nothing_when_idle_and_loses_no_fact():
    run = run_benchmark("folders.py", "--quick")
    metrics = {name: m["value"] for name, m in run.by_name.items()}
    for fmt in ("claude-code", "openclaw", "markdown"):
        assert metrics[f"folders.{fmt}.files_rewritten_idle"] == 0, run.stderr[-3000:]
        assert metrics[f"folders.{fmt}.facts_lost"] == 0, run.stderr[-3000:]
        assert metrics[f"folders.{fmt}.import_cpu_s"] > 0
    # the dream really changed something that was written back
    assert metrics["folders.openclaw.files_written"] + metrics["folders.markdown.files_written"] > 0
