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
"""

from __future__ import annotations

import atexit
import os
import random
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import duckdb
from filelock import FileLock, Timeout

from dream_assets.store.locks import LockTimeout

_DUCKDB_CONFIG = {"threads": 2, "autoinstall_known_extensions": False, "autoload_known_extensions": False}


class StoreConnection:
    def __init__(self, db_path: Path, lock_path: Path, *, timeout_s: float = 60.0, linger_s: float = 0.25,
                 on_open: Callable[[duckdb.DuckDBPyConnection], None] | None = None) -> None:
        self.db_path = Path(db_path)
        self.lock_path = Path(lock_path)
        self.timeout_s = timeout_s
        self.linger_s = linger_s
        self._on_open: list[Callable[[duckdb.DuckDBPyConnection], None]] = [on_open] if on_open else []
        self._on_rollback: list[Callable[[], None]] = []
        self._tx_depth = 0
        self._lock = threading.RLock()
        self._flock = FileLock(str(self.lock_path), thread_local=False)
        self._conn: duckdb.DuckDBPyConnection | None = None
        self._depth = 0
        self._last_used = 0.0
        self._timer: threading.Timer | None = None
        self._pid = os.getpid()
        self.opens = 0  # how many times the file was (re)opened — a process-turn counter, useful in tests

    def add_open_hook(self, hook: Callable[[duckdb.DuckDBPyConnection], None]) -> None:
        """Called with the fresh connection each time the file is (re)opened: the place to notice other processes' writes."""
        with self._lock:
            if hook not in self._on_open:
                self._on_open.append(hook)

    def add_rollback_hook(self, hook: Callable[[], None]) -> None:
        """Called after the outermost transaction rolled back."""
        with self._lock:
            if hook not in self._on_rollback:
                self._on_rollback.append(hook)

    @property
    def in_transaction(self) -> bool:
        return self._tx_depth > 0

    @contextmanager
    def session(self) -> Iterator[duckdb.DuckDBPyConnection]:
        if not self._lock.acquire(timeout=self.timeout_s):
            raise LockTimeout(f"timed out after {self.timeout_s:.0f}s waiting for {self.db_path} inside this process")
        try:
            self._check_fork()
            if self._conn is None:
                self._open()
            self._depth += 1
            try:
                assert self._conn is not None
                yield self._conn
            finally:
                self._depth -= 1
                self._last_used = time.monotonic()
                if self._depth == 0:
                    self._schedule_close()
        finally:
            self._lock.release()

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
            conn.execute("BEGIN TRANSACTION")
            self._tx_depth = 1
            try:
                yield conn
            except BaseException:
                self._tx_depth = 0
                try:
                    conn.execute("ROLLBACK")
                finally:
                    for hook in list(self._on_rollback):
                        hook()
                raise
            else:
                self._tx_depth = 0
                try:
                    conn.execute("COMMIT")
                except BaseException:
                    for hook in list(self._on_rollback):
                        hook()
                    raise

    def close(self) -> None:
        with self._lock:
            if self._timer is not None:
                self._timer.cancel()
                self._timer = None
            if self._conn is not None:
                try:
                    self._conn.close()
                finally:
                    self._conn = None
                    self._flock.release(force=True)

    # ------------------------------------------------------------------
    def _check_fork(self) -> None:
        # A forked child must not use (or close) the parent's handle or lock.
        if os.getpid() != self._pid:
            self._pid = os.getpid()
            self._conn = None
            self._timer = None
            self._flock = FileLock(str(self.lock_path), thread_local=False)

    def _open(self) -> None:
        self.lock_path.parent.mkdir(parents=True, exist_ok=True)
        self.db_path.parent.mkdir(parents=True, exist_ok=True)
        deadline = time.monotonic() + self.timeout_s
        try:
            self._flock.acquire(timeout=self.timeout_s)
        except Timeout as exc:
            raise LockTimeout(
                f"timed out after {self.timeout_s:.0f}s waiting for the store lock {self.lock_path}; "
                "another process is using the store"
            ) from exc
        delay = 0.01
        while True:
            try:
                self._conn = duckdb.connect(str(self.db_path), config=_DUCKDB_CONFIG)
                break
            except duckdb.IOException as exc:
                # Someone outside our lock protocol holds the file: back off with jitter, within the same deadline.
                if time.monotonic() + delay > deadline:
                    self._flock.release(force=True)
                    raise LockTimeout(f"could not open {self.db_path} within {self.timeout_s:.0f}s: {exc}") from exc
                time.sleep(delay * (0.5 + random.random()))
                delay = min(delay * 2, 1.0)
        self.opens += 1
        try:
            for hook in list(self._on_open):
                hook(self._conn)
        except BaseException:
            self.close()
            raise

    def _schedule_close(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
        if self.linger_s <= 0:
            self._close_if_idle()
            return
        self._timer = threading.Timer(self.linger_s, self._close_if_idle)
        self._timer.daemon = True
        self._timer.start()

    def _close_if_idle(self) -> None:
        if not self._lock.acquire(blocking=False):
            return  # busy; the session in progress schedules its own close
        try:
            if self._depth == 0 and self._conn is not None and time.monotonic() - self._last_used >= self.linger_s * 0.9:
                self.close()
        finally:
            self._lock.release()


_connections: dict[str, StoreConnection] = {}
_connections_guard = threading.Lock()


def store_connection(db_path: Path, lock_path: Path, *, timeout_s: float = 60.0) -> StoreConnection:
    """The process's connection helper for one database file (created on first use)."""
    key = str(Path(db_path).resolve())
    with _connections_guard:
        conn = _connections.get(key)
        if conn is None or conn._pid != os.getpid():
            conn = _connections[key] = StoreConnection(db_path, lock_path, timeout_s=timeout_s)
        return conn


def close_all() -> None:
    with _connections_guard:
        for conn in list(_connections.values()):
            conn.close()


atexit.register(close_all)
