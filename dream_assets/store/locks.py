"""Process + thread locks on lock files.

``filelock`` serialises processes; a per-path ``threading.RLock`` serialises threads of one process (an
fcntl lock is held by the process, so two threads would otherwise both "own" it). Every writer of a store
or log, and log retention, goes through ``path_lock`` for the same path.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from filelock import FileLock, Timeout

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
        flock = FileLock(str(lock_path), thread_local=False)
        try:
            flock.acquire(timeout=timeout)
        except Timeout as exc:
            raise LockTimeout(
                f"timed out after {timeout:.0f}s waiting for {lock_path} (held by another process)"
            ) from exc
        try:
            yield
        finally:
            flock.release()
    finally:
        tlock.release()
