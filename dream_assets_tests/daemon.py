"""A real ``dagster-daemon`` for tests and benchmarks: started on the project's workspace in its own process group,
its output written to a file (a pipe nobody reads would block it), and stopped with the group afterwards."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
from collections.abc import Iterator, Mapping
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


@contextlib.contextmanager
def running_daemon(env: Mapping[str, str], log: Path) -> Iterator[subprocess.Popen]:
    """``dagster-daemon run -w workspace.yaml`` with ``env``; the process, stopped (SIGTERM, then SIGKILL) on exit."""
    with open(log, "w", encoding="utf-8") as out:
        daemon = subprocess.Popen(
            [str(Path(sys.executable).parent / "dagster-daemon"), "run", "-w", str(ROOT / "workspace.yaml")],
            cwd=ROOT,
            env=dict(env),
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        try:
            yield daemon
        finally:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(daemon.pid, signal.SIGTERM)
            try:
                daemon.wait(timeout=30)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(daemon.pid, signal.SIGKILL)
                daemon.wait(timeout=30)
