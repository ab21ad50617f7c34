"""Cycle-in-progress markers: a running cycle of an agent is visible from its first pass to its close.

Each pass takes its own lock while it runs, so nothing waits on a pass; between two passes of a cycle no lock is held,
yet the cycle is not done: an undo started there would put back what the first passes did while the later ones build
on it. So a cycle holds a marker for its whole span — ``cycles-running/<cycle id>.json`` in the profile, one file per
cycle (two cycles never release each other's marker) — and `dream undo` refuses while a live one is there.

A marker records the holder's host, pid and a heartbeat (seconds since the epoch, refreshed from a background thread
every ``heartbeat_interval``). A crashed cycle cannot leave its marker behind for ever: a marker is stale when it was
written on this host by a process that no longer exists, or when its heartbeat is older than ``stale_after``
(``RunTimeout``: a hung holder, or one on another machine that went away). A stale marker is ignored and removed by
whoever finds it, saying so; an unreadable one (a damaged file) likewise.

The in-process cycle (``dream_assets.cycle.run_cycle``) holds it around its passes; a Dagster run of the dream cycle
holds it from the setup of its resources (before its first step) to their teardown (after its last step).
"""

from __future__ import annotations

import json
import logging
import os
import socket
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

from dream_assets.file_safety import UnreadableFile, atomic_write, read_json_file
from dream_assets.liveness import Heartbeat, pid_alive
from dream_assets.model import iso
from dream_assets.profile import AgentProfile

log = logging.getLogger("dream_assets.store.cycle_marker")

_HOST = socket.gethostname()


def heartbeat_interval(stale_after_s: float) -> float:
    """How often a held marker's heartbeat is refreshed: a fifth of ``stale_after``, between 1 and 30 seconds."""
    return max(1.0, min(30.0, stale_after_s / 5)) if stale_after_s > 0 else 30.0


@dataclass(frozen=True)
class CycleMarker:
    path: Path
    cycle_id: str
    host: str
    pid: int | None
    started_s: float
    heartbeat_s: float

    def why_stale(self, now_s: float, stale_after_s: float) -> str | None:
        """Why this marker no longer stands for a running cycle, or None while it may."""
        if self.host == _HOST and self.pid is not None and not pid_alive(self.pid):
            return f"its process (pid {self.pid} on {self.host}) is gone"
        age = now_s - self.heartbeat_s
        if stale_after_s > 0 and age > stale_after_s:
            return f"no heartbeat for {age:.0f} s, over RunTimeout ({stale_after_s:.0f} s)"
        return None

    def describe(self) -> str:
        who = f"pid {self.pid} on {self.host}" if self.pid is not None else f"on {self.host}"
        return f"cycle {self.cycle_id} ({who}, started {iso_s(self.started_s)})"


def iso_s(seconds: float) -> str:
    return iso(datetime.fromtimestamp(seconds, UTC))


def _number(value: object) -> float | None:
    return float(value) if isinstance(value, int | float) and not isinstance(value, bool) else None


def _read(path: Path, now_s: float) -> CycleMarker:
    """The marker in ``path``. Raises ``FileNotFoundError`` when it is gone, ``UnreadableFile`` for a file that is no
    marker."""
    data = read_json_file(path)
    if not isinstance(data, dict) or not isinstance(data.get("cycle_id"), str):
        raise UnreadableFile(f"{path}: not a cycle marker (no cycle_id)")
    pid = data.get("pid")
    pid = pid if isinstance(pid, int) and not isinstance(pid, bool) and 0 < pid < 2**31 else None
    beat = _number(data.get("heartbeat"))
    if beat is None:
        beat = path.stat().st_mtime
    started = _number(data.get("started")) or beat
    return CycleMarker(
        path=path,
        cycle_id=data["cycle_id"],
        host=str(data.get("host") or "an unknown host"),
        pid=pid,
        started_s=min(started, now_s),
        heartbeat_s=min(beat, now_s),  # a heartbeat in the future is clamped: it never holds for ever
    )


@dataclass
class MarkerCheck:
    running: list[CycleMarker]
    stale: list[str]  # markers ignored and removed, each with why


def check_markers(
    profile: AgentProfile,
    *,
    stale_after_s: float,
    clock: Callable[[], float] = time.time,
    keep: str | None = None,
) -> MarkerCheck:
    """The live cycle markers of the agent, and the stale or unreadable ones (removed, each named with why).
    ``keep``: a cycle whose marker is left out (the caller's own)."""
    check = MarkerCheck([], [])
    folder = profile.cycle_markers_dir
    if not folder.is_dir():
        return check
    now_s = clock()
    for path in sorted(folder.glob("*.json")):
        try:
            marker = _read(path, now_s)
        except FileNotFoundError:
            continue
        except (UnreadableFile, OSError) as exc:
            path.unlink(missing_ok=True)
            check.stale.append(f"{path.name} (unreadable: {exc})")
            log.warning("removed an unreadable cycle marker %s: %s", path, exc)
            continue
        if marker.cycle_id == keep:
            continue
        why = marker.why_stale(now_s, stale_after_s)
        if why is None:
            check.running.append(marker)
            continue
        path.unlink(missing_ok=True)
        check.stale.append(f"{marker.describe()}: {why}")
        log.warning("removed the stale marker of %s: %s", marker.describe(), why)
    return check


class CycleHold(Heartbeat):
    """The marker of one running cycle, written by :meth:`start` and kept fresh from a background thread until
    :meth:`stop` removes it. A heartbeat that cannot be written is logged and tried again at the next beat."""

    def __init__(
        self,
        profile: AgentProfile,
        cycle_id: str,
        *,
        stale_after_s: float,
        clock: Callable[[], float] = time.time,
    ) -> None:
        safe = "".join(ch if ch.isalnum() or ch in "-_." else "_" for ch in cycle_id)[:200] or "cycle"
        self.path = profile.cycle_markers_dir / f"{safe}.json"
        self.cycle_id = cycle_id
        self._clock = clock
        self._started = clock()
        self._warned = False
        super().__init__(heartbeat_interval(stale_after_s), name=f"cycle-marker-{safe[:8]}")

    def start(self) -> CycleHold:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        super().start()
        return self

    def beat(self) -> None:
        body = {
            "cycle_id": self.cycle_id,
            "host": _HOST,
            "pid": os.getpid(),
            "started": self._started,
            "heartbeat": self._clock(),
            "started_at": iso_s(self._started),
        }
        try:
            atomic_write(self.path, json.dumps(body))
            self._warned = False
        except OSError as exc:
            if not self._warned:
                log.warning("could not refresh the cycle marker %s (%s); retrying", self.path, exc)
                self._warned = True

    def stop(self) -> None:
        super().stop()
        self.path.unlink(missing_ok=True)

    def __enter__(self) -> CycleHold:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
