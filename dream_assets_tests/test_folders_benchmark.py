"""The memory-folder benchmark's CI-sized run (200 notes per format): an idle cycle rewrites no file and no name,
number or date of a note is lost. The full run (2,000 notes per format) is `python benchmarks/folders.py`."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.slow  # reason: three generated folders read, dreamed over and written back (about a minute)
def test_quick_folder_run_rewrites_nothing_when_idle_and_loses_no_fact():
    proc = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / "folders.py"), "--quick"],
        capture_output=True,
        text=True,
        timeout=900,
        cwd=ROOT,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    metrics = {m["name"]: m["value"] for m in (json.loads(line) for line in proc.stdout.splitlines() if line.strip())}
    for fmt in ("claude-code", "openclaw", "markdown"):
        assert metrics[f"folders.{fmt}.files_rewritten_idle"] == 0, proc.stderr[-3000:]
        assert metrics[f"folders.{fmt}.facts_lost"] == 0, proc.stderr[-3000:]
        assert metrics[f"folders.{fmt}.import_cpu_s"] > 0
    # the dream really changed something that was written back
    assert metrics["folders.openclaw.files_written"] + metrics["folders.markdown.files_written"] > 0
