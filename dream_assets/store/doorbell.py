"""Word that another process waits for a store file, without polling for it (the fair turns of store/connection.py).

A process that finds the file held writes a waiting marker into ``<lock file>.waiting/``, and the holder, idle
between its sessions, has to notice it soon. Looking into that folder every tick (10 ms) cost each open, idle
connection about 2 ms of CPU time a second: a server with 40 warm agents spent 76 ms a second doing nothing. On Linux
one inotify instance per process watches the waiting folders of the files the process holds open and rings the
connections whose folder got a new entry, so an idle connection sleeps until someone waits (or its linger ends).
Elsewhere, or when inotify cannot be had (its per-user limits), ``watch`` says so and the connection looks every
tick as before; when the watch of a folder ends (the folder was removed) or the reading thread stops, the rung
connection is told so (``lost``) and looks every tick from then on.

A forked child does not inherit the instance: its copy of the descriptor is closed at the fork (the parent's reading
thread does not exist in the child), and the child's first ``watch`` makes its own."""

from __future__ import annotations

import ctypes
import logging
import os
import struct
import threading
from collections.abc import Callable
from pathlib import Path

log = logging.getLogger(__name__)

_IN_CLOEXEC = os.O_CLOEXEC  # inotify_init1's IN_CLOEXEC is this flag
_IN_MOVED_TO = 0x80
_IN_CREATE = 0x100
_IN_Q_OVERFLOW = 0x4000
_IN_IGNORED = 0x8000
_EVENT = struct.Struct("iIII")  # wd, mask, cookie, len (then len bytes of name)
_READ_SIZE = 64 * 1024

#: A ring: called with ``lost=True`` when the watch ended (its folder removed), so the connection looks for itself.
Ring = Callable[[bool], None]


class _Doorbell:
    """The process's inotify instance and the thread that reads it."""

    def __init__(self) -> None:
        libc = ctypes.CDLL(None, use_errno=True)
        self._add, self._rm = libc.inotify_add_watch, libc.inotify_rm_watch  # AttributeError: not Linux
        self._add.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_uint32]
        self._rm.argtypes = [ctypes.c_int, ctypes.c_int]
        # Blocking reads in a thread of its own: no select(), which refuses descriptors past 1023 (a busy server).
        fd = libc.inotify_init1(_IN_CLOEXEC)
        if fd < 0:
            raise OSError(ctypes.get_errno(), "inotify_init1")
        self.fd = fd
        self.pid = os.getpid()
        self._lock = threading.Lock()
        self._rings: dict[int, list[Ring]] = {}
        self._watches: dict[Ring, int] = {}
        self.reading = True
        threading.Thread(target=self._read, name="store-doorbell", daemon=True).start()

    def watch(self, folder: Path, ring: Ring) -> bool:
        with self._lock:
            if not self.reading:
                return False
            self._forget(ring)  # watched again (a reopen without a close): one entry, the latest folder's
            wd = self._add(self.fd, os.fsencode(folder), _IN_CREATE | _IN_MOVED_TO)
            if wd < 0:
                log.info(
                    "no watch on %s (%s): its holder looks for waiters every tick",
                    folder,
                    os.strerror(ctypes.get_errno()),
                )
                return False
            self._rings.setdefault(wd, []).append(ring)
            self._watches[ring] = wd
            return True

    def unwatch(self, ring: Ring) -> None:
        with self._lock:
            self._forget(ring)

    def _forget(self, ring: Ring) -> None:
        wd = self._watches.pop(ring, None)
        rings = self._rings.get(wd) if wd is not None else None
        if rings is None:
            return
        rings.remove(ring)
        if not rings:  # the folder's last watcher in this process (a watch is per folder, shared)
            del self._rings[wd]
            self._rm(self.fd, wd)  # EINVAL when the folder is already gone: nothing to undo

    def _read(self) -> None:
        while True:
            try:
                data = os.read(self.fd, _READ_SIZE)
            except OSError as exc:
                self._stop(exc)
                return
            rang: list[tuple[Ring, bool]] = []
            with self._lock:
                offset = 0
                while offset + _EVENT.size <= len(data):
                    wd, mask, _, size = _EVENT.unpack_from(data, offset)
                    offset += _EVENT.size + size
                    if mask & _IN_Q_OVERFLOW:  # events were dropped: every watcher looks
                        rang += [(r, False) for rings in self._rings.values() for r in rings]
                    elif mask & _IN_IGNORED:  # the folder went away: its watchers look for themselves
                        for ring in self._rings.pop(wd, []):
                            self._watches.pop(ring, None)
                            rang.append((ring, True))
                    else:
                        rang += [(r, False) for r in self._rings.get(wd, ())]
            for ring, lost in rang:
                ring(lost)

    def _stop(self, exc: OSError) -> None:
        """The instance cannot be read any more: nobody would be rung, so every watcher is told to look for itself."""
        with self._lock:
            self.reading = False
            rings = [r for rs in self._rings.values() for r in rs]
            self._rings.clear()
            self._watches.clear()
        if os.getpid() == self.pid:
            log.warning("store waiters are polled for from now on: the inotify instance failed (%s)", exc)
        for ring in rings:
            ring(True)


_doorbell: _Doorbell | None = None
_unavailable = False
_guard = threading.Lock()


def watch(folder: Path, ring: Ring) -> bool:
    """Call ``ring(False)`` whenever an entry appears in ``folder`` (which must exist), from a thread of this
    module, until ``unwatch(ring)``; False when that cannot be done here (the caller polls instead)."""
    global _doorbell, _unavailable
    with _guard:
        if _doorbell is not None and _doorbell.pid != os.getpid():
            _doorbell = None  # a child forked without the fork hooks: its copy is left open, the number may be reused
        if _doorbell is not None and not _doorbell.reading:
            _doorbell, _unavailable = None, True  # it failed once: poll rather than fail again with every open
        if _doorbell is None and not _unavailable:
            try:
                _doorbell = _Doorbell()
            except (AttributeError, OSError) as exc:
                _unavailable = True
                log.info("store waiters are polled for: no inotify here (%s)", exc)
        bell = _doorbell
    return bell is not None and bell.watch(folder, ring)


def unwatch(ring: Ring) -> None:
    bell = _doorbell
    if bell is not None and bell.pid == os.getpid():
        bell.unwatch(ring)


def _after_fork_in_child() -> None:
    global _doorbell, _guard
    _guard = threading.Lock()  # another thread of the parent may have held it at the fork
    bell, _doorbell = _doorbell, None
    if bell is not None:
        try:
            os.close(bell.fd)
        except OSError:
            pass


os.register_at_fork(after_in_child=_after_fork_in_child)
