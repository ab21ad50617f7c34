"""Run one benchmark script as a user would (`python benchmarks/<name>.py ...`) and read the JSON lines it prints."""

from __future__ import annotations

import json
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]


@dataclass(frozen=True)
class BenchmarkRun:
    lines: list[dict[str, Any]]  # every figure printed, in order
    stderr: str

    @property
    def by_name(self) -> dict[str, dict[str, Any]]:
        """The last figure printed under each name."""
        return {m["name"]: m for m in self.lines}


def run_benchmark(script: str, *args: str, timeout: float = 900) -> BenchmarkRun:
    """Run ``benchmarks/<script>`` from the checkout; it must exit 0 (else the assertion shows its stderr's tail)."""
    proc = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / script), *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        cwd=ROOT,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    return BenchmarkRun([json.loads(line) for line in proc.stdout.splitlines() if line.strip()], proc.stderr)
