"""The code is linted and formatted by ruff with the configured line length: ``make lint`` and this test agree."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PATHS = ["dream_assets", "dream_assets_tests", "benchmarks"]


def _ruff(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "ruff", *args, *PATHS], cwd=ROOT, capture_output=True, text=True)


def test_ruff_check_finds_nothing() -> None:
    result = _ruff("check", "--output-format", "concise")
    assert result.returncode == 0, result.stdout + result.stderr


def test_ruff_format_leaves_every_file_unchanged() -> None:
    result = _ruff("format", "--check")
    assert result.returncode == 0, "run `.venv/bin/ruff format .`:\n" + result.stdout + result.stderr
