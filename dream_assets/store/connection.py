"""The one way to talk to an agent's DuckDB file.

DuckDB lets one process at a time open a database file for writing, and opening an instance costs ~10 ms.
So each process keeps one ``StoreConnection`` per file that:
- holds a file lock (``filelock``) for exactly as long as its DuckDB connection is open, so processes take turns
  instead of failing on DuckDB's own lock;
- lingers for a short, bounded idle time after the last operation (``linger_s``, default 0.25 s) so a burst of
  saves pays the open cost once, then closes and lets other processes in. A caller never holds the connection:
  it gets it for one ``session()`` block, and the helper closes it on its own after the linger;
- retries the DuckDB open with jittered back-off when another program holds the file without our lock.

Within a process, sessions are serialised by a re-entrant thread lock (DuckDB connections are not thread-safe).

Transactions nest: an inner ``transaction()`` joins the outer one, so a caller can make several store writes and
their change-log rows one all-or-nothing unit (``with conn.transaction(): put(...); record(...)``). When the
outermost transaction rolls back, the ``on_rollback`` hooks run (in-process caches built from rows that were never
committed forget them).

Fair turns between processes
----------------------------
Lingering alone lets a busy process (an agent saving every 50 ms) keep the file for ever. So a process that wants the
file and finds it held announces itself: it writes a *waiting marker* ``<lock
file>.waiting/<time_ns>-<pid>-<nonce>.wait``
and polls the file lock every few milliseconds until it gets it (or its ``timeout_s`` runs out), then removes the
marker. A holder looks for markers of other processes:
- at the end of every outermost session, once it has held the file for at least ``turn_s`` (default 0.05 s): if
  someone waits, it closes at once instead of lingering;
- while idle, as soon as a marker appears (store/doorbell.py: the waiting folder is watched, so an idle connection
  costs no CPU time; where it cannot be watched, it is looked into every ``tick_s``, 10 ms): if someone waits, it
  closes without finishing its linger.
A process about to open the file does not jump the queue: when it finds the file free but a live marker of another
process older than its own request exists (markers are ordered by their time), it lets go again and keeps polling, so
the earlier waiter gets the turn. Bounded: a waiter that leaves the file free and unused for ``fair_wait_s`` (0.25 s;
a stopped or stuck process) is passed over, and this process ignores that marker from then on. Markers of processes
that no longer exist, or older than ten minutes, are ignored and removed. Process ids are only meaningful within one
host (and pid namespace): processes sharing a store across hosts still exclude each other, but without fair turns.
Together: with an agent saving 20 times a second, a pass waits for at most one of the agent's saves plus a reopen,
and the agent waits for at most one pass session (``benchmarks/store.py``). A loop of many short transactions (an
undo puts back one target per transaction) takes the file in turns of ``turn_budget_s`` (0.3 s, ``in_turns``) instead
of one per transaction: handing the file over costs both sides a reopen, which made such a loop 20 times slower while
the agent saved (3.6 times with turns: ``store.undo_under_saves_ratio``).

Failures
--------
Every failure to get at the file is a ``StoreError`` that names it. ``StoreBusy``: the file was held for longer than
``timeout_s`` (retry later; the next cycle). ``StoreCorrupt``: the file is not a readable DuckDB database — corrupt,
empty or truncated, found when opening it or when a read hits a damaged block; it is raised at once, since waiting
cannot help, and says how to recover from the newest Parquet snapshot. DuckDB reports "the file is locked by another
process" and "the file is damaged" both as ``IOException``; the message text tells them apart (``classify``).
"""

from __future__ import annotations

import atexit
import os
import random
import sys
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import duckdb
from filelock import FileLock, Timeout

from dream_assets.store import doorbell

T = TypeVar("T")
_DUCKDB_CONFIG = {"threads": 2, "autoinstall_known_extensions": False, "autoload_known_extensions": False}
_POLL_S = 0.005  # how often a waiting process tries the file lock
_STALE_MARKER_NS = 600 * 10**9

# What DuckDB says (2.x) when the file is damaged, against when someone else holds it. Checked in this order.
_CORRUPT_SIGNS = (
    "not a valid duckdb database file",
    "could not read enough bytes",
    "corrupt database file",
    "does not match stored checksum",
)
_BUSY_SIGNS = ("could not set lock", "conflicting lock")


class StoreError(RuntimeError):
    """The store file cannot be used right now; the message names the file."""


class StoreBusy(StoreError):
    """Another process (or thread) kept the store for longer than the wait limit: try again later (the next cycle)."""


class StoreCorrupt(StoreError):
    """The store file is not a readable DuckDB database: corrupt, empty or truncated. Waiting will not help."""


def classify(exc: BaseException) -> str:
    """ "corrupt", "busy" or "other" for an error DuckDB raised while opening or reading the file."""
    text = str(exc).lower()
    if any(s in text for s in _CORRUPT_SIGNS):
        return "corrupt"
    if isinstance(exc, duckdb.IOException) and any(s in text for s in _BUSY_SIGNS):
        return "busy"
    return "other"


def connect_quietly(
    database: str = ":memory:", *, read_only: bool = False, config: dict[str, object] | None = None
) -> duckdb.DuckDBPyConnection:
    """``duckdb.connect`` with DuckDB's progress bar off. The bar is on by default and prints to stdout once a query
    runs for two seconds (a loaded machine, a large archive), which would corrupt the MCP stdio server's JSON-RPC
    stream and the JSON lines of a benchmark or a shell command. It cannot be set in ``config`` (DuckDB rejects it
    as a global option), so it is switched off on the connection right after it opens."""
    conn = duckdb.connect(database, read_only=read_only, config=config or {})
    try:
        conn.execute("SET enable_progress_bar = false")
    except BaseException:
        conn.close()
        raise
    return conn


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:  # exists, owned by someone else
        return True
    return True


@dataclass(frozen=True)
class SessionHold:
    """How long one outermost session kept the file: wall and the process's CPU time (DuckDB's threads too), and
    where it was opened (the store call and the first caller outside the store package): the figure behind a waiting
    agent's latency."""

    wall_s: float = 0.0
    cpu_s: float = 0.0
    where: str = ""


def _caller_outside_store() -> str:
    """``<store call> < <its caller>``: the innermost frame of the store package that is not this module's and the
    first frame outside the package (only read when a session sets a new longest hold, so rarely)."""
    store_dir = os.path.dirname(__file__)
    inner = outer = ""
    frame = sys._getframe(1)
    while frame is not None:
        path = frame.f_code.co_filename
        here = f"{os.path.basename(path)}:{frame.f_lineno} {frame.f_code.co_name}"
        if os.path.dirname(path) == store_dir:
            if not inner and path != __file__:
                inner = here
        elif "contextlib" not in path:
            outer = here
            break
        frame = frame.f_back
    return " < ".join(p for p in (inner, outer) if p)


class _Bell(threading.Event):
    """One idle watcher's doorbell (store/doorbell.py): set when an entry appears in the waiting folder; ``lost`` once
    the folder cannot be watched (never was, removed, or the watch failed), so the watcher looks every tick."""

    def __init__(self) -> None:
        super().__init__()
        self.lost = True

    def ring(self, lost: bool) -> None:
        if lost:
            self.lost = True
        self.set()


#: How long ``session_if_free`` waits for the store's lock: longer than the idle watcher's look (microseconds, or a
#: scheduling slice on a loaded machine), shorter than any session.
FREE_WAIT_S = 0.005


class StoreConnection:
    def __init__(
        self,
        db_path: Path,
        lock_path: Path,
        *,
        timeout_s: float = 60.0,
        linger_s: float = 0.25,
        on_open: Callable[[duckdb.DuckDBPyConnection], None] | None = None,
        turn_s: float = 0.05,
        fair_wait_s: float = 0.25,
        tick_s: float = 0.01,
        snapshots_dir: Path | None = None,
    ) -> None:
        self.db_path = Path(db_path)
        self.lock_path = Path(lock_path)
        self.timeout_s = timeout_s
        self.linger_s = linger_s
        self.turn_s = turn_s
        #: How long a loop of short transactions (``in_turns``) keeps the file before it lets a waiter in.
        self.turn_budget_s = 0.3
        self.fair_wait_s = fair_wait_s
        self.tick_s = tick_s
        #: The longest an idle connection whose waiting folder is watched sleeps between looks (a safety net).
        self.watched_check_s = 2.0
        self.snapshots_dir = Path(snapshots_dir) if snapshots_dir is not None else None
        self.wait_dir = self.lock_path.with_name(self.lock_path.name + ".waiting")
        self._on_open: list[Callable[[duckdb.DuckDBPyConnection], None]] = [on_open] if on_open else []
        self._on_rollback: list[Callable[[], None]] = []
        self._on_commit: list[Callable[[], None]] = []
        #: What this process keeps in step with the rows of the file (``add_row_observer``).
        self.row_observers: list[Any] = []
        self._tx_depth = 0
        self._lock = threading.RLock()
        self._flock = FileLock(str(self.lock_path), thread_local=False)
        self._conn: duckdb.DuckDBPyConnection | None = None
        self._depth = 0
        self._owner: int | None = None  # the thread in a session
        self._last_used = 0.0
        self._opened_at = 0.0
        self._broken = False
        self._watch_token: object | None = None
        self._bell = _Bell()  # the current idle watcher's: rung when a waiting marker appears (store/doorbell.py)
        self._ignored: set[str] = set()  # waiting markers seen leaving the file unused (stopped or stuck waiters)
        self._pid = os.getpid()
        self.opens = 0  # how many times the file was (re)opened — a process-turn counter, useful in tests
        #: How many times the idle watcher looked for waiters: every tick when the waiting folder is not watched.
        self.idle_checks = 0
        self.last_wait_s = 0.0  # how long the latest outermost session waited for the file (lock, turn, open)
        #: The longest outermost session so far: how long another process could have waited for this one.
        self.longest_hold = SessionHold()

    def add_open_hook(self, hook: Callable[[duckdb.DuckDBPyConnection], None]) -> None:
        """Called with the fresh connection each time the file is (re)opened: the place to notice other processes'
        writes."""
        with self._lock:
            if hook not in self._on_open:
                self._on_open.append(hook)

    def add_row_observer(self, observer: Any) -> None:
        """Something this process keeps in step with the rows of ``memories`` (the recall index): the store's writes
        call its ``row_live(id, content, category, tags, derived, metadata)``, ``row_gone(id)``,
        ``rows_written(seq)`` and ``rows_inserted(conn)`` (store/memory.py), and the embeddings cache its
        ``vectors_changed(conn, model, ...)`` when it has one (store/embeddings.py). Writes of other processes it reads
        by ``seq`` in an open hook."""
        with self._lock:
            if observer not in self.row_observers:
                self.row_observers.append(observer)

    def remove_observer(self, observer: Any, *hooks: Callable[..., None]) -> None:
        """Stop calling ``observer`` (``add_row_observer``) and ``hooks`` (open, rollback or commit hooks): what
        followed the rows in this process is let go (a server evicting an idle agent's recall index)."""
        with self._lock:
            if observer in self.row_observers:
                self.row_observers.remove(observer)
            for hooks_of in (self._on_open, self._on_rollback, self._on_commit):
                for hook in hooks:
                    if hook in hooks_of:
                        hooks_of.remove(hook)

    def add_rollback_hook(self, hook: Callable[[], None]) -> None:
        """Called after the outermost transaction rolled back."""
        with self._lock:
            if hook not in self._on_rollback:
                self._on_rollback.append(hook)

    def add_commit_hook(self, hook: Callable[[], None]) -> None:
        """Called after the outermost transaction committed, still inside its session (a caller that needs the
        boundaries of the writes, such as a review run capturing each decision of a pass, reads them there)."""
        with self._lock:
            if hook not in self._on_commit:
                self._on_commit.append(hook)

    @property
    def is_open(self) -> bool:
        """Is the file open in this process now (held, or lingering after the last session)?"""
        return self._conn is not None

    @property
    def in_transaction(self) -> bool:
        return self._tx_depth > 0

    @property
    def in_session(self) -> bool:
        """Is this thread inside a session (so a new one joins it instead of taking a turn of its own)?"""
        return self._depth > 0 and self._owner == threading.get_ident()

    @contextmanager
    def session(self) -> Iterator[duckdb.DuckDBPyConnection]:
        asked = time.monotonic()
        if not self._lock.acquire(timeout=self.timeout_s):
            raise StoreBusy(
                f"timed out after {self.timeout_s:.0f}s waiting for the store {self.db_path}, "
                "held by another thread of this process"
            )
        try:
            self._check_fork()
            if self._conn is None:
                self._open()
            if self._depth == 0:
                self.last_wait_s = time.monotonic() - asked
                held_at, held_cpu = time.monotonic(), time.process_time()
                self._owner = threading.get_ident()
            self._depth += 1
            try:
                assert self._conn is not None
                yield self._conn
            except duckdb.Error as exc:
                if classify(exc) == "corrupt":
                    self._broken = True
                    raise StoreCorrupt(self._corrupt_message(exc)) from exc
                if isinstance(exc, duckdb.FatalException):
                    self._broken = True  # DuckDB invalidated the instance: the next session opens a fresh one
                raise
            finally:
                self._depth -= 1
                self._last_used = time.monotonic()
                if self._depth == 0:
                    self._owner = None
                    self._note_hold(time.monotonic() - held_at, time.process_time() - held_cpu)
                    self._end_of_session()
        finally:
            self._lock.release()

    @contextmanager
    def session_if_free(self) -> Iterator[duckdb.DuckDBPyConnection | None]:
        """A session at once, or None when it would have to wait: another thread of this process is in a session,
        or the file is not open in this process (opening it may wait for another process's turn). Held for the whole
        block, every session inside it joins this one, so nothing in the block waits for the file either: a server
        answers a call on its event loop only this way (``dream_assets.mcp_server``). The lock is waited for
        ``FREE_WAIT_S`` at most: the idle watcher takes it for a look at the waiting folder, microseconds, while a
        session of another thread is not waited out."""
        if not self._lock.acquire(timeout=FREE_WAIT_S):
            yield None
            return
        try:
            if self._conn is None or self._broken or os.getpid() != self._pid:
                yield None
                return
            with self.session() as conn:  # the lock is this thread's already: no wait
                yield conn
        finally:
            self._lock.release()

    def in_turns(self, items: Iterable[T]) -> Iterator[T]:
        """Each of ``items``, handed out inside sessions of this connection that last about ``turn_budget_s`` each:
        a long loop of short transactions (the undo of a large cycle) pays one open of the file per turn instead of
        one per item while another process waits, and that process still gets the file between turns."""
        it = iter(items)
        while True:
            with self.session():
                started = time.monotonic()
                for item in it:
                    yield item
                    if time.monotonic() - started >= self.turn_budget_s:
                        break
                else:
                    return

    @contextmanager
    def transaction(self) -> Iterator[duckdb.DuckDBPyConnection]:
        """One all-or-nothing unit. Nested calls (same thread) join the outermost transaction: an exception anywhere
        inside rolls back everything the outermost block wrote."""
        with self.session() as conn:
            if self._tx_depth > 0:
                self._tx_depth += 1
                try:
                    yield conn
                finally:
                    self._tx_depth -= 1
                return
            conn.begin()  # the client's own call: no SQL text to parse and plan, twice a transaction
            self._tx_depth = 1
            try:
                yield conn
            except BaseException:
                self._tx_depth = 0
                try:
                    conn.rollback()
                except duckdb.Error:
                    self._broken = True  # the original error matters more; a fresh instance is opened next time
                finally:
                    for hook in list(self._on_rollback):
                        hook()
                raise
            else:
                self._tx_depth = 0
                try:
                    conn.commit()
                except BaseException:
                    for hook in list(self._on_rollback):
                        hook()
                    raise
                for hook in list(self._on_commit):
                    hook()

    @contextmanager
    def statement(self) -> Iterator[duckdb.DuckDBPyConnection]:
        """A unit of work that writes with one statement (a save that creates its entry). Outside a transaction the
        statement runs in DuckDB's own, committed with it and all or nothing like any statement: no explicit BEGIN
        and COMMIT, two round trips that cost such a save at a million rows a third of a millisecond. Inside a
        transaction it joins it, and with commit hooks it is a transaction of its own (the hooks see commits). When
        the block raises, the rollback hooks run as after a rolled-back transaction: in-process state the block built
        from its write is forgotten, whether or not the statement committed."""
        with self.session() as conn:
            if self._tx_depth > 0 or self._on_commit:
                with self.transaction() as joined:
                    yield joined
                return
            try:
                yield conn
            except BaseException:
                for hook in list(self._on_rollback):
                    hook()
                raise

    def close(self) -> None:
        with self._lock:
            self._watch_token = None
            doorbell.unwatch(self._bell.ring)
            self._bell.set()  # the watcher ends now, not at its next wake-up
            self._broken = False
            if self._conn is not None:
                try:
                    self._conn.close()
                except duckdb.Error:
                    pass  # closing a damaged or invalidated instance: nothing left to save
                finally:
                    self._conn = None
                    self._flock.release(force=True)

    def others_waiting(self) -> bool:
        """Does another live process wait for this file (a waiting marker)?"""
        return bool(self._waiters(exclude_pid=os.getpid()))

    # ------------------------------------------------------------------
    def _note_hold(self, wall_s: float, cpu_s: float) -> None:
        if wall_s > self.longest_hold.wall_s:
            self.longest_hold = SessionHold(wall_s, cpu_s, _caller_outside_store())

    def _check_fork(self) -> None:
        # A forked child must not use (or close) the parent's handle or lock.
        if os.getpid() != self._pid:
            self._pid = os.getpid()
            self._conn = None
            self._depth = 0
            self._owner = None
            self._tx_depth = 0
            self._watch_token = None
            self._bell = _Bell()  # the parent's watcher thread is not in this process
            self._flock = FileLock(str(self.lock_path), thread_local=False)

    def _end_of_session(self) -> None:
        if self._broken or self.linger_s <= 0:
            self.close()
        elif time.monotonic() - self._opened_at >= self.turn_s and self.others_waiting():
            self.close()  # someone waits and we had our turn: no lingering

    def _open(self) -> None:
        self.lock_path.parent.mkdir(parents=True, exist_ok=True)
        self.db_path.parent.mkdir(parents=True, exist_ok=True)
        deadline = time.monotonic() + self.timeout_s
        self._acquire_file_lock(deadline)
        delay = 0.01
        while True:
            try:
                self._conn = connect_quietly(str(self.db_path), config=_DUCKDB_CONFIG)
                break
            except duckdb.Error as exc:
                kind = classify(exc)
                if kind == "busy" and time.monotonic() + delay <= deadline:
                    # Someone outside our lock protocol holds the file: back off with jitter, within the same deadline.
                    time.sleep(delay * (0.5 + random.random()))
                    delay = min(delay * 2, 1.0)
                    continue
                self._flock.release(force=True)
                if kind == "corrupt":
                    raise StoreCorrupt(self._corrupt_message(exc)) from exc
                if kind == "busy":
                    raise StoreBusy(
                        f"could not open the store {self.db_path} within {self.timeout_s:.0f}s: another "
                        f"program holds it ({exc})"
                    ) from exc
                raise StoreError(f"could not open the store {self.db_path}: {exc}") from exc
        self.opens += 1
        self._opened_at = time.monotonic()
        try:
            for hook in list(self._on_open):
                hook(self._conn)
        except duckdb.Error as exc:
            self.close()
            if classify(exc) == "corrupt":
                raise StoreCorrupt(self._corrupt_message(exc)) from exc
            raise
        except StoreError as exc:
            self.close()
            raise type(exc)(f"{self.db_path}: {exc}") from exc
        except BaseException:
            self.close()
            raise
        if self.linger_s > 0:
            self._start_watcher()

    # --- fair turns ------------------------------------------------------------------------------------------------
    def _acquire_file_lock(self, deadline: float) -> None:
        my_ts = time.time_ns()
        marker: Path | None = None
        free_since: float | None = None
        try:
            while True:
                now = time.monotonic()
                try:
                    self._flock.acquire(blocking=False)
                except Timeout:
                    free_since = None
                else:
                    older = [name for ts, _, name in self._waiters(exclude_pid=os.getpid()) if ts < my_ts]
                    if not older:
                        return
                    # Free, but another process asked first: let it have its turn — unless it leaves the file
                    # unused for fair_wait_s (stopped or stuck), then take it and stop deferring to that marker.
                    free_since = now if free_since is None else free_since
                    if now - free_since >= self.fair_wait_s:
                        self._ignored.update(older)
                        return
                    self._flock.release(force=True)
                if now >= deadline:
                    raise StoreBusy(
                        f"timed out after {self.timeout_s:.0f}s waiting for the store {self.db_path} (lock "
                        f"{self.lock_path}): another process kept it"
                    )
                if marker is None:
                    marker = self._write_marker(my_ts)
                time.sleep(_POLL_S * (0.5 + random.random()))
        finally:
            if marker is not None:
                marker.unlink(missing_ok=True)

    def _write_marker(self, ts: int) -> Path:
        self.wait_dir.mkdir(parents=True, exist_ok=True)
        pid = os.getpid()
        path = self.wait_dir / f"{ts:020d}-{pid}-{random.getrandbits(32):08x}.wait"
        path.write_text(f"pid {pid} waits for {self.db_path} since {ts} ns\n", encoding="utf-8")
        return path

    def _waiters(self, *, exclude_pid: int) -> list[tuple[int, int, str]]:
        """(time_ns, pid, name) of live waiting markers of other processes, except those found not taking their turn;
        markers of processes that are gone (or older than ten minutes) are removed on the way."""
        try:
            names = os.listdir(self.wait_dir)
        except OSError:
            return []
        out = []
        now_ns = time.time_ns()
        for name in names:
            if not name.endswith(".wait") or name in self._ignored:
                continue
            try:
                ts_text, pid_text, _ = name[:-5].split("-", 2)
                ts, pid = int(ts_text), int(pid_text)
            except ValueError:
                continue
            if pid == exclude_pid:
                continue
            if now_ns - ts > _STALE_MARKER_NS or not _alive(pid):
                try:
                    os.unlink(self.wait_dir / name)
                except OSError:
                    pass
                continue
            out.append((ts, pid, name))
        return out

    def _start_watcher(self) -> None:
        # Each watcher has a bell of its own: the thread of an earlier open, on its way out, or a ring of that open's
        # watch arriving late, cannot clear or ring the current watcher's.
        token, bell = object(), _Bell()
        self._watch_token, self._bell = token, bell
        bell.lost = False  # before the watch begins: a ring of its end (the folder removed at once) is kept
        try:
            self.wait_dir.mkdir(parents=True, exist_ok=True)
            watched = doorbell.watch(self.wait_dir, bell.ring)
        except OSError:
            watched = False
        if not watched:
            bell.lost = True
        threading.Thread(
            target=self._watch, args=(token, bell), name=f"store-linger:{self.db_path.name}", daemon=True
        ).start()

    def _watch(self, token: object, bell: _Bell) -> None:
        """While the file is open and idle: close after the linger, or at once when another process waits. With the
        waiting folder watched it sleeps until a marker appears or the linger ends (and at least every
        ``watched_check_s``); else, or once rung, it looks every tick until nobody waits."""
        alert = True  # the first look, a tick after the open, finds the markers written before the watch began
        while True:
            if alert or bell.lost:
                timeout = self.tick_s
            else:
                left = self._last_used + self.linger_s * 0.9 - time.monotonic()
                timeout = min(self.watched_check_s, max(self.tick_s, left))
            if bell.wait(timeout):
                bell.clear()  # before the look: a marker written during it rings again
                alert = True
            if self._watch_token is not token:
                return
            if not self._lock.acquire(blocking=False):
                continue  # a session is in progress; its end checks for waiters itself
            try:
                if self._watch_token is not token or self._conn is None:
                    return
                if self._depth > 0:
                    continue
                self.idle_checks += 1
                if time.monotonic() - self._last_used >= self.linger_s * 0.9 or self.others_waiting():
                    self.close()
                    return
                alert = False  # nobody waits (or only markers passed over): sleep until the next one appears
            finally:
                self._lock.release()

    # --- messages ------------------------------------------------------------------------------------------------
    def _corrupt_message(self, exc: BaseException) -> str:
        newest = self._newest_snapshot()
        if newest is not None:
            recover = (
                f"`dream rebuild --profile {self.db_path.parent}` rebuilds the store from the newest snapshot "
                f"{newest} (memories.parquet, skills.parquet) and keeps the damaged file aside"
            )
        elif self.snapshots_dir is not None:
            recover = (
                f"no snapshot was found under {self.snapshots_dir}; move {self.db_path.name} aside and restore "
                "it from a backup"
            )
        else:
            recover = f"move {self.db_path.name} aside and restore it from the newest corpus snapshot or a backup"
        return (
            f"the store {self.db_path} is not a readable DuckDB database (corrupt, empty or truncated: {exc}); "
            f"waiting will not help. To recover: {recover}"
        )

    def _newest_snapshot(self) -> Path | None:
        if self.snapshots_dir is None or not self.snapshots_dir.is_dir():
            return None
        found = sorted(
            d
            for d in self.snapshots_dir.iterdir()
            if d.is_dir() and not d.name.endswith(".partial") and (d / "memories.parquet").exists()
        )
        return found[-1] if found else None


_connections: dict[str, StoreConnection] = {}
_connections_guard = threading.Lock()


def store_connection(
    db_path: Path, lock_path: Path, *, timeout_s: float = 60.0, snapshots_dir: Path | None = None
) -> StoreConnection:
    """The process's connection helper for one database file (created on first use). ``snapshots_dir`` is where a
    corrupt-store message looks for the newest snapshot to recover from."""
    key = str(Path(db_path).resolve())
    with _connections_guard:
        conn = _connections.get(key)
        if conn is None or conn._pid != os.getpid():
            conn = _connections[key] = StoreConnection(db_path, lock_path, timeout_s=timeout_s)
        conn.timeout_s = timeout_s  # the latest opener's StoreLockTimeout applies
        if snapshots_dir is not None:
            conn.snapshots_dir = Path(snapshots_dir)
        return conn


def longest_holds() -> dict[str, SessionHold]:
    """The longest outermost session of each store file this process opened (database path -> hold). Without the
    guard, so a signal handler may call it: a copy of the dict's items is taken at once."""
    return {key: conn.longest_hold for key, conn in list(_connections.items())}


def close_all() -> None:
    with _connections_guard:
        for conn in list(_connections.values()):
            conn.close()


atexit.register(close_all)
