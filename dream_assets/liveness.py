"""Process liveness: a heartbeat thread and whether a process id is still alive on this host.

Runs (orchestration/run_liveness.py), cycles (store/cycle_marker.py) and the agent's busy leases (llm/busy.py) are
judged alive by the same two signs, so they live here, below all three.
"""

from __future__ import annotations

import os
import threading


class Heartbeat:
    """Calls :meth:`beat` once at :meth:`start`, then every ``interval_s`` from a daemon thread until :meth:`stop`: the
    liveness of a run or a cycle that others judge by how fresh its heartbeat is. ``beat`` never raises into the
    thread: a beat that cannot be written is the subclass's to log and try again at the next one."""

    def __init__(self, interval_s: float, name: str) -> None:
        self._interval_s = interval_s
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name=name, daemon=True)

    def beat(self) -> None:
        raise NotImplementedError

    def start(self) -> Heartbeat:
        self.beat()
        self._thread.start()
        return self

    def _loop(self) -> None:
        while not self._stop.wait(self._interval_s):
            self.beat()

    def stop(self) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout=5)


def pid_alive(pid: int) -> bool:
    if os.name != "posix":  # os.kill(pid, 0) terminates the process on Windows
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except (PermissionError, OSError, OverflowError, ValueError):
        return True
    return True
