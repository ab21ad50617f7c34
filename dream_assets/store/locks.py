"""Process + thread locks on lock files.

An exclusive ``flock`` on the lock file serialises processes; a ``threading.RLock`` per lock file serialises threads
of one process (a ``flock`` is held by the open file, which the threads of a process would otherwise share). Every
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


def _thread_lock(key: object) -> threading.RLock:
    with _registry_guard:
        lock = _thread_locks.get(key)
        if lock is None:
            lock = _thread_locks[key] = threading.RLock()
        return lock


def _acquire_thread_lock(key: object, lock_path: Path, timeout: float) -> threading.RLock:
    tlock = _thread_lock(key)
    if not tlock.acquire(timeout=timeout if timeout >= 0 else -1):
        raise LockTimeout(f"timed out after {timeout:.0f}s waiting for {lock_path} (held by another thread)")
    return tlock


@contextmanager
def path_lock(lock_path: Path, timeout: float = 60.0) -> Iterator[None]:
    """Hold the lock for ``lock_path`` (created with its parent folders) across threads and processes.

    The threads of a process are told apart by the lock file itself (device and inode of the file opened), so two
    spellings of one path, a symlink included, are one lock, without resolving the path on every call.
    """
    lock_path = Path(lock_path)
    if fcntl is None:
        tlock = _acquire_thread_lock(str(lock_path.resolve()), lock_path, timeout)
        try:
            lock_path.parent.mkdir(parents=True, exist_ok=True)
            with _filelock(lock_path, timeout):
                yield
        finally:
            tlock.release()
        return
    fd = _open_lock_file(lock_path)
    try:
        st = os.fstat(fd)
        tlock = _acquire_thread_lock((st.st_dev, st.st_ino), lock_path, timeout)
        try:
            _flock(fd, lock_path, timeout)
            try:
                yield
            finally:
                fcntl.flock(fd, fcntl.LOCK_UN)
        finally:
            tlock.release()
    finally:
        os.close(fd)


def _open_lock_file(lock_path: Path) -> int:
    """The lock file opened for ``flock``, created (with its folders) when missing."""
    flags = os.O_RDWR | os.O_CREAT | getattr(os, "O_CLOEXEC", 0)
    try:
        return os.open(lock_path, flags, 0o644)
    except FileNotFoundError:  # a missing folder: the usual case is a lock file that exists, one system call
        lock_path.parent.mkdir(parents=True, exist_ok=True)
        return os.open(lock_path, flags, 0o644)


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
