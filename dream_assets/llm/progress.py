"""Progress on long model calls: which call of how many a pass is waiting on, its tokens, the time so far and what the
endpoint's measured speed says it can take.

The client reports each call three ways:

- to its ``progress_listeners`` (``CallProgress`` events: ``start``, ``waiting`` every ``TICK_S`` while the endpoint
  works, ``done`` or ``failed``): the Dagster asset logs them to the run's log;
- in the agent profile's ``model-progress.json`` (``ProgressFile``): the call running now (with the writing process's
  id, so a dead process's call is not shown) and the last calls done, each with a sequence number. ``dream status``
  shows the call a pass is waiting on; ``dream run`` follows the file (``ProgressPrinter``): one progress line
  rewritten in place on a terminal, plain lines (a call starting, every ``PLAIN_EVERY_S`` while it runs, its end)
  otherwise. The file is how a cycle running in another process (the Dagster daemon) is seen too.

A listener or a file that fails never fails the call: progress is reported, not relied on.
"""

from __future__ import annotations

import json
import logging
import os
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any, TextIO

from dream_assets.file_safety import UnreadableFile, atomic_write, read_json_file

log = logging.getLogger("dream_assets.llm.progress")

#: Seconds between ``waiting`` events while a call runs.
TICK_S = 60.0
#: Without a terminal, a running call is said again this often.
PLAIN_EVERY_S = 60.0
#: Calls done kept in the progress file.
RECENT_KEEP = 32


def duration(seconds: float) -> str:
    """1m05s, 2h03m, 42s."""
    seconds = max(0, int(round(seconds)))
    hours, rest = divmod(seconds, 3600)
    minutes, secs = divmod(rest, 60)
    if hours:
        return f"{hours}h{minutes:02d}m"
    return f"{minutes}m{secs:02d}s" if minutes else f"{secs}s"


@dataclass(frozen=True)
class CallProgress:
    """One model call's progress. ``total`` 0: the pass did not say how many calls it makes."""

    pass_name: str
    index: int
    total: int
    prompt_tokens: int
    reserve: int
    started_at: float  # wall clock (epoch seconds)
    elapsed_s: float
    estimate_s: float | None  # the most the measured speed says the call takes (prompt + the whole reserve)
    timeout_s: float
    phase: str  # start | waiting | done | failed
    completion_tokens: int | None = None
    seq: int = 0
    pid: int = 0
    cycle_id: str = ""

    def which(self) -> str:
        return f"model call {self.index} of {self.total}" if self.total else f"model call {self.index}"

    def line(self, now: float | None = None) -> str:
        """One line saying where the call is ("now" recomputes the time so far of a running call)."""
        elapsed = self.elapsed_s if now is None or self.phase in ("done", "failed") else now - self.started_at
        head = f"{self.pass_name}: {self.which()}, {self.prompt_tokens} prompt tokens"
        if self.phase == "done":
            answer = f" + {self.completion_tokens} answer tokens" if self.completion_tokens is not None else ""
            return f"{head}{answer}, answered in {duration(elapsed)}"
        if self.phase == "failed":
            return f"{head}, failed after {duration(elapsed)}"
        estimate = (
            f" of up to {duration(self.estimate_s)} at the endpoint's measured speed"
            if self.estimate_s is not None
            else " (speed not measured: dream check-model)"
        )
        timeout = f", timeout {duration(self.timeout_s)}" if self.timeout_s else ""
        return f"{head}, waiting on the model {duration(elapsed)}{estimate}{timeout}"

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_json(cls, data: Any) -> CallProgress | None:
        """A record from the file, or None when it is not one (a hostile or half-written file shows nothing)."""
        if not isinstance(data, dict):
            return None
        try:
            made = cls(
                pass_name=str(data["pass_name"]),
                index=int(data["index"]),
                total=int(data["total"]),
                prompt_tokens=int(data["prompt_tokens"]),
                reserve=int(data["reserve"]),
                started_at=float(data["started_at"]),
                elapsed_s=float(data["elapsed_s"]),
                estimate_s=None if data.get("estimate_s") is None else float(data["estimate_s"]),
                timeout_s=float(data.get("timeout_s") or 0.0),
                phase=str(data["phase"]),
                completion_tokens=None if data.get("completion_tokens") is None else int(data["completion_tokens"]),
                seq=int(data.get("seq") or 0),
                pid=int(data.get("pid") or 0),
                cycle_id=str(data.get("cycle_id") or ""),
            )
        except (KeyError, TypeError, ValueError, OverflowError):
            return None
        return made if made.phase in ("start", "waiting", "done", "failed") else None


def _alive(pid: int) -> bool:
    if pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


class ProgressFile:
    """The profile's ``model-progress.json``: ``{"seq": n, "current": record | null, "recent": [records]}``."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._lock = threading.Lock()

    def _read(self) -> dict[str, Any]:
        try:
            data = read_json_file(self.path)
        except (FileNotFoundError, UnreadableFile):
            return {}
        return data if isinstance(data, dict) else {}

    def read(self) -> tuple[CallProgress | None, list[CallProgress]]:
        """The call running now (None when none, or when the process making it is gone) and the calls done."""
        data = self._read()
        current = CallProgress.from_json(data.get("current"))
        if current is not None and not _alive(current.pid):
            current = None
        recent = data.get("recent") if isinstance(data.get("recent"), list) else []
        return current, [r for r in map(CallProgress.from_json, recent) if r is not None]

    def record(self, progress: CallProgress) -> CallProgress:
        """Write ``progress`` (a start gets the next sequence number; an end moves the call to the recent list)."""
        with self._lock:
            data = self._read()
            seq = data.get("seq") if isinstance(data.get("seq"), int) else 0
            if progress.phase == "start":
                seq += 1
                progress = replace(progress, seq=seq)
            recent = [r for r in (data.get("recent") or []) if isinstance(r, dict)] if isinstance(data, dict) else []
            if progress.phase in ("done", "failed"):
                recent = [*recent, progress.to_json()][-RECENT_KEEP:]
                current = None
            else:
                current = progress.to_json()
            try:
                atomic_write(self.path, json.dumps({"seq": seq, "current": current, "recent": recent}, indent=1))
            except OSError as exc:
                log.debug("could not write %s (%s); progress is not shown for this call", self.path, exc)
        return progress


class CallReporter:
    """One call's progress, from its start to its end: events to the listeners (a ``waiting`` one every ``TICK_S``)
    and the progress file."""

    def __init__(
        self,
        first: CallProgress,
        listeners: list[Callable[[CallProgress], None]],
        file: ProgressFile | None,
        *,
        tick_s: float = TICK_S,
        wallclock: Callable[[], float] = time.time,
    ) -> None:
        self.listeners = listeners
        self.file = file
        self.tick_s = tick_s
        self._wall = wallclock
        self._stop = threading.Event()
        self.current = self._emit(first)
        self._thread: threading.Thread | None = None
        if listeners and tick_s > 0:
            self._thread = threading.Thread(target=self._tick, name="model-call-progress", daemon=True)
            self._thread.start()

    def _emit(self, progress: CallProgress) -> CallProgress:
        if self.file is not None and progress.phase != "waiting":
            progress = self.file.record(progress)
        for listener in list(self.listeners):
            try:
                listener(progress)
            except Exception:  # noqa: BLE001 - a progress listener never fails the call
                log.debug("a progress listener failed", exc_info=True)
        return progress

    def _tick(self) -> None:
        while not self._stop.wait(self.tick_s):
            now = self._wall()
            self._emit(replace(self.current, phase="waiting", elapsed_s=now - self.current.started_at))

    def finish(self, ok: bool, completion_tokens: int | None) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)
        try:
            elapsed = self._wall() - self.current.started_at
            end = replace(self.current, phase="done" if ok else "failed", elapsed_s=elapsed)
            self._emit(replace(end, completion_tokens=completion_tokens))
        except Exception:  # noqa: BLE001 - progress is reported, never relied on
            log.debug("the end of %s's model call not reported", self.current.pass_name, exc_info=True)


class ProgressPrinter:
    """Follows the progress file while a cycle runs (``with ProgressPrinter(path):``) and prints every model call: on a
    terminal one line rewritten in place, else plain lines."""

    def __init__(
        self, path: Path, stream: TextIO | None = None, *, poll_s: float = 0.5, plain_every_s: float = PLAIN_EVERY_S
    ) -> None:
        self.file = ProgressFile(path)
        self.stream = stream if stream is not None else sys.stdout
        self.tty = bool(getattr(self.stream, "isatty", lambda: False)())
        self.poll_s = poll_s
        self.plain_every_s = plain_every_s
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="model-progress-printer", daemon=True)
        _, recent = self.file.read()
        self._seen_done = max((r.seq for r in recent), default=0)
        self._said_start = self._seen_done
        self._last_plain = 0.0
        self._width = 0

    def __enter__(self) -> ProgressPrinter:
        self._thread.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self._stop.set()
        self._thread.join(timeout=5)
        self.poll()  # what ended between the last poll and the end of the run
        if self.tty and self._width:
            self._write("\r" + " " * self._width + "\r")

    def _write(self, text: str) -> None:
        try:
            self.stream.write(text)
            self.stream.flush()
        except (OSError, ValueError):
            pass

    def _say(self, line: str) -> None:
        if self.tty:
            pad = " " * max(0, self._width - len(line))
            self._write(f"\r{line}{pad}\n")
            self._width = 0
        else:
            self._write(f"{line}\n")

    def _run(self) -> None:
        while not self._stop.wait(self.poll_s):
            self.poll()

    def poll(self) -> None:
        """Print what changed since the last poll."""
        current, recent = self.file.read()
        now = time.time()
        for done in sorted(recent, key=lambda r: r.seq):
            if done.seq > self._seen_done:
                self._seen_done = done.seq
                self._said_start = max(self._said_start, done.seq)
                self._say("  " + done.line())
        if current is None or current.seq <= self._seen_done:
            return
        if self.tty:
            line = "  " + current.line(now)
            self._write("\r" + line + " " * max(0, self._width - len(line)))
            self._width = len(line)
        elif current.seq > self._said_start or now - self._last_plain >= self.plain_every_s:
            self._said_start = current.seq
            self._last_plain = now
            self._say("  " + current.line(now))
