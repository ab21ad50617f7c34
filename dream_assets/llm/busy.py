"""Busy back-off: dream calls wait while the agent's own model serves a user turn.

Spec, "Scheduling": while the LLM is processing a user request the dream cycle polls every 5 seconds and
waits rather than queuing behind an active turn. The agent says "busy" with a lease in its profile:

- Python: ``with model_busy(profile): serve_turn()``.
- Any other language: while a turn runs, keep a file in the ``model-busy.lease/`` folder of the profile
  (any name not starting with "."; optionally JSON ``{"pid", "host", "acquired_at", "heartbeat"}``) and
  delete it afterwards. A plain file at ``model-busy.lease`` itself is honoured too.

An agent that cannot wrap its turns (it reaches its memory through ``dream serve`` or ``dream memory``) is marked
active instead: each call writes a lease with an ``expires_at`` (``mark_active``, ``AgentActiveWindow`` from now),
so a dream pass waits until the agent has been quiet for that long.

One file per holder, so overlapping turns (threads, processes) never release each other's lease. A lease
whose heartbeat (the JSON field, else the file's modification time) is older than ``BusyLeaseStaleAfter``
is from a crashed agent and has expired; so has a lease written on this host by a process that no longer
exists. ``model_busy`` refreshes its heartbeat in a background thread, so long turns stay held.

A time in the future (a clock ahead, a hand-written ``touch -d 2030`` or ``"heartbeat": "2099-..."``) is not
believed: such a lease counts as fresh from the first time a dream pass saw it, never from the time it claims, so
it holds passes for at most ``BusyLeaseStaleAfter`` after that. When it was first seen is kept beside the leases
(``model-busy.seen.json``) so the rule holds across cycles in separate processes; a lease that is written again
(another turn of an agent whose clock is ahead) starts a new window.

A wait longer than ``BusyMaxWait`` defers the pass: it reports "deferred" and stamps nothing, and the
next cycle tries again. A non-positive ``BusyMaxWait`` means "never wait": defer at once while busy.
"""

from __future__ import annotations

import json
import logging
import os
import socket
import stat as stat_module
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path

from dream_assets.file_safety import UnreadableFile, atomic_write, read_json_file

# Heartbeat and pid_alive were first defined here; dream_assets.liveness is their home, below the store.
from dream_assets.liveness import Heartbeat as Heartbeat
from dream_assets.liveness import pid_alive
from dream_assets.model import iso, parse_ts, utc
from dream_assets.options import DreamOptions
from dream_assets.profile import AgentProfile

log = logging.getLogger("dream_assets.llm.busy")

_HOST = socket.gethostname()


@dataclass(frozen=True)
class Lease:
    path: Path
    pid: int | None
    host: str
    acquired_at: datetime | None
    heartbeat: datetime
    expires_at: datetime | None = None  # a lease for a span of activity, not a turn: over at this time

    def expired(self, now: datetime, stale_after: timedelta) -> bool:
        if self.expires_at is not None and utc(now) >= self.expires_at:
            return True
        if stale_after > timedelta(0) and utc(now) - self.heartbeat > stale_after:
            return True
        return self.host == _HOST and self.pid is not None and not pid_alive(self.pid)

    def describe(self) -> str:
        who = f"pid {self.pid} on {self.host}" if self.pid is not None else "an unknown holder"
        return f"{self.path.name} ({who}, heartbeat {iso(self.heartbeat)})"


@dataclass(frozen=True)
class WaitOutcome:
    waited_s: float
    deferred: bool
    polls: int  # checks that found the model busy


#: Process ids above this are not ids of a live process on any supported system (Linux caps them at 2**22).
_MAX_PID = 2**31 - 1


class FirstSeen:
    """When each future-dated lease was first seen, by file name and the signature of what it held then (its
    modification time, size and claimed heartbeat), persisted in ``path`` (None: kept for this call only, which is
    what a read-only look such as ``dream status`` uses: a future time then reads as now)."""

    def __init__(self, path: Path | None) -> None:
        self.path = path
        self._seen: dict[str, dict[str, str]] = {}
        self._used: set[str] = set()
        self._changed = False
        if path is None:
            return
        try:
            loaded = read_json_file(path)
        except FileNotFoundError:
            return
        except UnreadableFile as exc:  # lost memory only restarts the windows: logged, never fatal
            log.warning("busy lease first-seen times %s; starting them again", exc)
            return
        if isinstance(loaded, dict):
            self._seen = {
                str(name): entry
                for name, entry in loaded.items()
                if isinstance(entry, dict) and isinstance(entry.get("sig"), str) and _ts(entry.get("at")) is not None
            }

    def at(self, name: str, signature: str, now: datetime) -> datetime:
        """The time the lease ``name`` was first seen holding ``signature`` (now, the first time)."""
        self._used.add(name)
        entry = self._seen.get(name)
        if entry is not None and entry["sig"] == signature:
            first = _ts(entry["at"])
            if first is not None and first <= now:
                return first
        self._seen[name] = {"sig": signature, "at": iso(now)}
        self._changed = True
        return now

    def save(self) -> None:
        """Keep what was used in this look (leases gone since are forgotten)."""
        if self.path is None:
            return
        kept = {name: entry for name, entry in self._seen.items() if name in self._used}
        if not self._changed and kept == self._seen:
            return
        try:
            if kept:
                atomic_write(self.path, json.dumps(kept, sort_keys=True))
            else:
                self.path.unlink(missing_ok=True)
        except OSError as exc:
            log.warning("could not keep busy lease first-seen times in %s: %s", self.path, exc)
        self._seen, self._changed = kept, False


def first_seen_path(profile: AgentProfile) -> Path:
    return profile.root / "model-busy.seen.json"


def _read_lease(path: Path, now: datetime | None = None, seen: FirstSeen | None = None) -> Lease | None:
    """A lease file, whatever its content: a file that is present counts, by its modification time, when its JSON
    cannot be read (a half-written, hand-made, UTF-16 or hostile one: logged). A time in the future (a clock ahead,
    a hand-written value) is not believed: the heartbeat falls back to the modification time, and a modification
    time in the future to the time ``seen`` first saw the lease (now, without ``seen``)."""
    try:
        stat = path.stat()
    except (FileNotFoundError, NotADirectoryError):
        return None
    except OSError:
        stat = None
    if stat is not None and not stat_module.S_ISREG(stat.st_mode):
        return None
    now = utc(now) if now is not None else datetime.now(UTC)
    mtime = _mtime(stat) if stat else now
    data: dict = {}
    try:
        loaded = read_json_file(path) if stat is not None and stat.st_size else {}
        data = loaded if isinstance(loaded, dict) else {}
    except FileNotFoundError:
        return None
    except UnreadableFile as exc:
        log.warning("busy lease %s; it counts by its modification time", exc)
    heartbeat = _ts(data.get("heartbeat"))
    if heartbeat is not None and heartbeat > now:
        log.warning(
            "busy lease %s: heartbeat %s is in the future; using its modification time %s",
            path,
            iso(heartbeat),
            iso(mtime),
        )
        heartbeat = None
    if heartbeat is None and mtime > now:
        first = (seen or FirstSeen(None)).at(path.name, _signature(stat, data), now)
        if first < now or seen is None:
            log.warning(
                "busy lease %s: modification time %s is in the future; it counts from %s, when it was first seen",
                path,
                iso(mtime),
                iso(first),
            )
        mtime = first
    pid = data.get("pid")
    valid_pid = isinstance(pid, int) and not isinstance(pid, bool) and 0 < pid <= _MAX_PID
    return Lease(
        path=path,
        pid=pid if valid_pid else None,
        host=str(data.get("host") or "")[:255],
        acquired_at=_ts(data.get("acquired_at")),
        heartbeat=heartbeat or mtime,
        expires_at=_ts(data.get("expires_at")),
    )


def _mtime(stat: os.stat_result) -> datetime:
    try:
        return datetime.fromtimestamp(stat.st_mtime, UTC)
    except (OverflowError, OSError, ValueError):  # a time past the year 9999: in the future all the same
        return datetime.max.replace(tzinfo=UTC)


def _signature(stat: os.stat_result | None, data: dict) -> str:
    """What a lease held: a rewrite (another turn) changes it, a lease left alone keeps it."""
    held = [stat.st_mtime_ns, stat.st_size] if stat else []
    return json.dumps([*held, str(data.get("heartbeat"))[:64]])


def _ts(value: object) -> datetime | None:
    try:
        return parse_ts(value)
    except (TypeError, ValueError, OverflowError):
        return None


def read_leases(profile: AgentProfile, now: datetime | None = None, seen: FirstSeen | None = None) -> list[Lease]:
    """Every lease present, expired or not, in file-name order (a time after ``now`` reads as the time ``seen``
    first saw the lease, at most ``now``)."""
    base = profile.busy_lease_path
    if base.is_file():
        lease = _read_lease(base, now, seen)
        return [lease] if lease else []
    if not base.is_dir():
        return []
    leases = []
    for path in sorted(base.iterdir()):
        if path.name.startswith(".") or not path.is_file():
            continue
        lease = _read_lease(path, now, seen)
        if lease:
            leases.append(lease)
    return leases


def active_leases(
    profile: AgentProfile, now: datetime, stale_after: timedelta, seen: FirstSeen | None = None
) -> list[Lease]:
    return [lease for lease in read_leases(profile, now, seen) if not lease.expired(now, stale_after)]


def is_busy(profile: AgentProfile, now: datetime, stale_after: timedelta) -> bool:
    """True while a lease that has not expired is present."""
    return bool(active_leases(profile, now, stale_after))


def _write_lease(path: Path, body: dict) -> None:
    atomic_write(path, json.dumps(body, sort_keys=True))


@contextmanager
def model_busy(
    profile: AgentProfile,
    *,
    now: datetime | None = None,
    heartbeat_every: timedelta | None = timedelta(seconds=60),
) -> Iterator[Path]:
    """Hold the agent's "model busy" lease for the duration of a user turn. Yields the lease file.

    ``heartbeat_every`` (None = no heartbeat thread) should be well under ``BusyLeaseStaleAfter``.
    """
    base = profile.busy_lease_path
    if base.is_file():
        raise FileExistsError(
            f"{base} is a plain file; model_busy keeps one lease file per holder in a folder of that name. "
            "Delete the file (or have its writer use the folder) and retry."
        )
    base.mkdir(parents=True, exist_ok=True)
    acquired = utc(now) if now is not None else datetime.now(UTC)
    path = base / f"{_HOST}-{os.getpid()}-{uuid.uuid4().hex[:12]}.json"
    body = {"pid": os.getpid(), "host": _HOST, "acquired_at": iso(acquired), "heartbeat": iso(acquired)}
    _write_lease(path, body)
    stop = threading.Event()
    beat: threading.Thread | None = None
    if heartbeat_every is not None and heartbeat_every > timedelta(0):

        def _beat() -> None:
            while not stop.wait(heartbeat_every.total_seconds()):
                try:
                    _write_lease(path, {**body, "heartbeat": iso(datetime.now(UTC))})
                except OSError as exc:  # the turn goes on; the lease may expire, which only lets dreams run
                    log.warning("could not refresh busy lease %s: %s", path, exc)

        beat = threading.Thread(target=_beat, name=f"busy-lease-{path.name}", daemon=True)
        beat.start()
    try:
        yield path
    finally:
        stop.set()
        if beat is not None:
            beat.join()
        path.unlink(missing_ok=True)


#: The expiry of this process's activity lease per lease file, so a burst of calls rewrites it once per half window.
_active_until: dict[Path, datetime] = {}
_active_guard = threading.Lock()


def mark_active(profile: AgentProfile, window: timedelta, *, now: datetime | None = None) -> Path | None:
    """Mark the agent active until ``window`` from ``now``: one lease file per process (pid and host in it, so it
    expires with the process), rewritten only when less than half the window is left. A non-positive window marks
    nothing. Returns the lease file (None when nothing was marked)."""
    if window <= timedelta(0):
        return None
    base = profile.busy_lease_path
    if base.is_file():
        return None  # a hand-made lease at the folder's path: the agent is busy anyway, and there is no folder
    at = utc(now) if now is not None else datetime.now(UTC)
    path = base / f"agent-active-{_HOST}-{os.getpid()}.json"
    with _active_guard:
        until = _active_until.get(path)
        if until is not None and until - at > window / 2 and path.exists():
            return path
        base.mkdir(parents=True, exist_ok=True)
        expires = at + window
        body = {"pid": os.getpid(), "host": _HOST, "acquired_at": iso(at), "heartbeat": iso(at)}
        _write_lease(path, {**body, "expires_at": iso(expires)})
        _active_until[path] = expires
    return path


def clear_expired_leases(
    profile: AgentProfile, now: datetime, stale_after: timedelta, seen: FirstSeen | None = None
) -> list[Path]:
    """Remove leases left by crashed agents (logged, so a person can see who held them)."""
    removed = []
    for lease in read_leases(profile, now, seen):
        if lease.expired(now, stale_after):
            log.info("busy lease %s has expired (stale after %s); removing it", lease.describe(), stale_after)
            try:
                lease.path.unlink(missing_ok=True)
                removed.append(lease.path)
            except OSError as exc:
                log.warning("could not remove expired busy lease %s: %s", lease.path, exc)
    return removed


def wait_until_idle(
    profile: AgentProfile,
    options: DreamOptions,
    *,
    sleep: Callable[[float], None] = time.sleep,
    monotonic: Callable[[], float] = time.monotonic,
    wallclock: Callable[[], datetime] = lambda: datetime.now(UTC),
) -> WaitOutcome:
    """Poll every ``BusyPollInterval`` until no fresh lease is held, or defer after ``BusyMaxWait``."""
    stale_after = options.BusyLeaseStaleAfter
    poll_s = max(options.BusyPollInterval.total_seconds(), 0.01)
    max_wait_s = options.BusyMaxWait.total_seconds()
    start = monotonic()
    polls = 0
    cleared = False
    while True:
        now = wallclock()
        seen = FirstSeen(first_seen_path(profile))
        if not cleared:
            clear_expired_leases(profile, now, stale_after, seen)
            cleared = True
        held = active_leases(profile, now, stale_after, seen)
        seen.save()
        elapsed = monotonic() - start
        if not held:
            if polls:
                log.info("agent model idle again after %.1fs; continuing", elapsed)
            return WaitOutcome(waited_s=elapsed, deferred=False, polls=polls)
        polls += 1
        if polls == 1:
            log.info(
                "agent model busy (%s); polling every %.0fs for up to %s",
                held[0].describe(),
                poll_s,
                options.BusyMaxWait,
            )
        if elapsed >= max_wait_s:
            log.info("agent model still busy after %.1fs (BusyMaxWait %s); deferring", elapsed, options.BusyMaxWait)
            return WaitOutcome(waited_s=elapsed, deferred=True, polls=polls)
        sleep(min(poll_s, max_wait_s - elapsed))
