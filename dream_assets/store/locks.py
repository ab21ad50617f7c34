"""Process + thread locks on lock files.

An exclusive ``flock`` on the lock file serialises processes; a per-path ``threading.RLock`` serialises threads of
one process (a ``flock`` is held by the open file, which the threads of a process would otherwise share). Every
writer of a store or log, and log retention, goes through ``path_lock`` for the same path.

The ``flock`` is taken directly rather than through ``filelock``: log retention takes one lock per session file, ten
thousand in a pass, and ``filelock``'s bookkeeping (fork tracking, per-path singletons) costs a hundred times the
system calls themselves. The lock is the one ``filelock`` takes on POSIX (``flock(LOCK_EX)`` on the same file), so
processes using either exclude each other. Where ``flock`` does not exist (Windows), ``filelock`` is used.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from filelock import FileLock, Timeout

try:
    import fcntl
except ImportError:  # Windows: filelock's own locking
    fcntl = None  # type: ignore[assignment]

#: First and longest pause between two tries of a lock held by another process.
_POLL_FIRST_S = 0.001
_POLL_MAX_S = 0.05

_registry_guard = threading.Lock()
_thread_locks: dict[str, threading.RLock] = {}


class LockTimeout(TimeoutError):
    pass


def _thread_lock(key: str) -> threading.RLock:
    with _registry_guard:
        lock = _thread_locks.get(key)
        if lock is None:
            lock = _thread_locks[key] = threading.RLock()
        return lock


@contextmanager
def path_lock(lock_path: Path, timeout: float = 60.0) -> Iterator[None]:
    """Hold the lock for ``lock_path`` (created with its parent folders) across threads and processes."""
    lock_path = Path(lock_path)
    key = str(lock_path.resolve())
    tlock = _thread_lock(key)
    if not tlock.acquire(timeout=timeout if timeout >= 0 else -1):
        raise LockTimeout(f"timed out after {timeout:.0f}s waiting for {lock_path} (held by another thread)")
    try:
        lock_path.parent.mkdir(parents=True, exist_ok=True)
        if fcntl is None:
            with _filelock(lock_path, timeout):
                yield
            return
        fd = os.open(lock_path, os.O_RDWR | os.O_CREAT | getattr(os, "O_CLOEXEC", 0), 0o644)
        try:
            _flock(fd, lock_path, timeout)
            try:
                yield
            finally:
                fcntl.flock(fd, fcntl.LOCK_UN)
        finally:
            os.close(fd)
    finally:
        tlock.release()


def _flock(fd: int, lock_path: Path, timeout: float) -> None:
    """Take the exclusive ``flock`` on ``fd``, trying again with growing pauses until ``timeout`` (negative: no limit;
    0: one try)."""
    deadline = time.monotonic() + timeout
    pause = _POLL_FIRST_S
    while True:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return
        except BlockingIOError:
            pass
        left = deadline - time.monotonic()
        if timeout >= 0 and left <= 0:
            raise LockTimeout(f"timed out after {timeout:.0f}s waiting for {lock_path} (held by another process)")
        time.sleep(pause if timeout < 0 else min(pause, left))
        pause = min(pause * 2, _POLL_MAX_S)


@contextmanager
def _filelock(lock_path: Path, timeout: float) -> Iterator[None]:
    flock = FileLock(str(lock_path), thread_local=False)
    try:
        flock.acquire(timeout=timeout)
    except Timeout as exc:
        raise LockTimeout(f"timed out after {timeout:.0f}s waiting for {lock_path} (held by another process)") from exc
    try:
        yield
    finally:
        flock.release()
