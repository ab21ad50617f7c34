"""Replacing a file so that a reader, or the next start after a crash, sees the old file or the new one, never a
mix, and never a temp file left behind by a write that failed.

Every rewrite of a file the project keeps goes through ``atomic_write`` (a whole text or bytes value) or
``atomic_writer`` (a handle for a writer that streams: a copy, a Parquet writer). Both write a temp file in the
destination's folder (``.<name>.<random>.tmp``: a rename is only atomic within one file system), flush it and fsync
it, rename it over the destination with ``os.replace``, then fsync the folder so the rename itself survives a power
loss. On any failure, an exception or a ``KeyboardInterrupt`` included, the temp file is removed and the destination
is untouched. A process killed outright leaves at most the temp file, which ``is_temp_file`` recognises.
"""

from __future__ import annotations

import io
import json
import os
import re
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

_TEMP = re.compile(r"^\..+\.[0-9a-f]{12}\.tmp$")


def temp_path(path: Path) -> Path:
    """A fresh temp name next to ``path``: ``.<name>.<12 hex digits>.tmp``."""
    return path.with_name(f".{path.name}.{uuid.uuid4().hex[:12]}.tmp")


def is_temp_file(path: Path) -> bool:
    """Whether ``path`` is named like a temp file of an atomic write (one left by a killed writer, or in progress)."""
    return bool(_TEMP.fullmatch(path.name))


@contextmanager
def atomic_writer(
    path: Path,
    *,
    text: bool = False,
    permissions: int | None = None,
    times_ns: tuple[int, int] | None = None,
    sync_dir: bool = True,
) -> Iterator[IO[Any]]:
    """A handle on a temp file that replaces ``path`` when the ``with`` block ends without an exception.

    ``text=True`` gives a UTF-8 text handle (newlines written as given), else a binary one. ``permissions`` (mode
    bits) and ``times_ns`` (access and modification time, as ``os.utime(ns=...)`` takes them) are set on the new
    file before it is synced; by default it gets the permissions a newly created file gets. ``sync_dir=False``
    leaves the folder's fsync to a caller that replaces many files of one folder (``fsync_dir`` once at the end).
    The destination's folder must exist.
    """
    path = Path(path)
    tmp = temp_path(path)
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_CLOEXEC", 0), 0o666)
    try:
        raw = os.fdopen(fd, "wb")
    except BaseException:
        os.close(fd)
        tmp.unlink(missing_ok=True)
        raise
    try:
        with raw:
            if text:
                handle = io.TextIOWrapper(raw, encoding="utf-8", newline="")
                yield handle
                handle.flush()
                handle.detach()
            else:
                yield raw
            raw.flush()
            if permissions is not None:
                os.fchmod(raw.fileno(), permissions)
            if times_ns is not None:
                os.utime(raw.fileno(), ns=times_ns)
            os.fsync(raw.fileno())
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    if sync_dir:
        fsync_dir(path.parent)


@contextmanager
def atomic_path(path: Path, *, sync_dir: bool = True) -> Iterator[Path]:
    """A temp file name next to ``path`` for a writer that writes a file by its name (DuckDB's ``COPY``): when the
    block ends without an exception, the file written there is synced and replaces ``path``, as ``atomic_writer``
    does; on any failure it is removed and ``path`` is untouched."""
    path = Path(path)
    tmp = temp_path(path)
    try:
        yield tmp
        fd = os.open(tmp, os.O_RDONLY | getattr(os, "O_CLOEXEC", 0))
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    if sync_dir:
        fsync_dir(path.parent)


def atomic_write(
    path: Path,
    data: str | bytes,
    *,
    permissions: int | None = None,
    times_ns: tuple[int, int] | None = None,
    sync_dir: bool = True,
) -> None:
    """Replace ``path`` with ``data`` (``str`` is written as UTF-8), atomically and durably; see ``atomic_writer``."""
    if isinstance(data, str):
        data = data.encode("utf-8")
    with atomic_writer(path, permissions=permissions, times_ns=times_ns, sync_dir=sync_dir) as fh:
        fh.write(data)


def fsync_dir(folder: Path) -> None:
    """Make renames and deletions in ``folder`` durable (best effort: not every platform can fsync a folder)."""
    try:
        fd = os.open(folder, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


#: The largest agent-writable JSON file read (a lease, a pass record, the deferred-pass list are a few kilobytes).
READ_JSON_MAX_BYTES = 32 * 1024 * 1024


class UnreadableFile(ValueError):
    """A file that exists but cannot be used: the message names the file and says why."""


def read_json_file(path: Path, *, max_bytes: int = READ_JSON_MAX_BYTES) -> Any:
    """The JSON value in ``path``, read defensively: the file is one an agent or a person may have written.

    UTF-8 (with or without a byte-order mark), UTF-16 and UTF-32 are read (``json.loads`` detects them: PowerShell
    writes UTF-16). Raises ``FileNotFoundError`` when the file is absent and ``UnreadableFile`` (naming the file) for
    anything else that makes it unusable: a folder or unreadable file, more than ``max_bytes``, undecodable text,
    invalid JSON, or nesting too deep for the parser. Never anything else, so a caller that treats an unreadable file
    as absent catches exactly these two."""
    path = Path(path)
    try:
        with open(path, "rb") as fh:
            raw = fh.read(max_bytes + 1)
    except FileNotFoundError:
        raise
    except OSError as exc:
        raise UnreadableFile(f"{path}: cannot be read ({exc.strerror or exc})") from None
    if len(raw) > max_bytes:
        raise UnreadableFile(f"{path}: larger than {max_bytes} bytes")
    try:
        return json.loads(raw)
    except RecursionError:
        raise UnreadableFile(f"{path}: JSON nested too deeply to read") from None
    except (UnicodeDecodeError, ValueError) as exc:
        raise UnreadableFile(f"{path}: not valid JSON ({str(exc)[:200]})") from None


# --- replacing a file another person may be editing ----------------------------------------------------------------

_RENAME_EXCHANGE = 2
_AT_FDCWD = -100


def _exchange(a: Path, b: Path) -> bool:
    """Swap the files at ``a`` and ``b`` in one step (Linux ``renameat2(RENAME_EXCHANGE)``); False when the platform
    or the file system cannot."""
    try:
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        renameat2 = libc.renameat2
    except (OSError, AttributeError):
        return False
    if renameat2(_AT_FDCWD, os.fsencode(a), _AT_FDCWD, os.fsencode(b), _RENAME_EXCHANGE) == 0:
        return True
    err = ctypes.get_errno()
    if err in (22, 38, 95):  # EINVAL, ENOSYS, EOPNOTSUPP: not supported here
        return False
    raise OSError(err, os.strerror(err), str(b))


def _read_or_none(path: Path) -> bytes | None:
    try:
        return path.read_bytes()
    except FileNotFoundError:
        return None


@dataclass
class Replaced:
    """What ``replace_unless_changed`` did: ``written``, or not because the file held ``found`` (None: absent) instead
    of the bytes expected. ``kept`` names a file holding bytes a person wrote in the instant of the replace when they
    could not be put back in place (never silently dropped)."""

    written: bool
    found: bytes | None = None
    kept: Path | None = None


def replace_unless_changed(
    path: Path,
    data: str | bytes,
    expected: bytes | None,
    *,
    permissions: int | None = None,
    before_replace: Callable[[Path], None] | None = None,
) -> Replaced:
    """Replace ``path`` with ``data`` only while it still holds ``expected`` (None: while it does not exist), so a
    person's save is never overwritten. A plain file system has no compare-and-swap, so the window is closed from
    both sides: the bytes are compared immediately before the replace, and the replace itself is an exchange
    (``renameat2(RENAME_EXCHANGE)``) that hands back exactly the file it took out; when that is not ``expected``
    (a save landed in between) it is exchanged back into place. A new file is created with a hard link, which fails
    when a file appeared meanwhile. Where an exchange is not available the plain replace follows the comparison
    (the window is then the few microseconds between them). ``before_replace`` runs between the comparison and the
    replace (a test widens the window with it)."""
    path = Path(path)
    if isinstance(data, str):
        data = data.encode("utf-8")
    tmp = temp_path(path)
    try:
        with open(tmp, "xb") as fh:
            fh.write(data)
            fh.flush()
            if permissions is not None:
                os.fchmod(fh.fileno(), permissions)
            os.fsync(fh.fileno())
        found = _read_or_none(path)
        if found != expected:
            return Replaced(False, found)
        if before_replace is not None:
            before_replace(path)
        if expected is None:
            try:
                os.link(tmp, path)  # fails if a file appeared since the comparison
            except FileExistsError:
                return Replaced(False, _read_or_none(path))
            fsync_dir(path.parent)
            return Replaced(True)
        if not _exchange(tmp, path):
            os.replace(tmp, path)
            fsync_dir(path.parent)
            return Replaced(True)
        taken = _read_or_none(tmp)
        if taken == expected:
            fsync_dir(path.parent)
            return Replaced(True)
        _exchange(tmp, path)  # a save landed in the window: it goes back in place
        back = _read_or_none(tmp)
        if back != data:  # and another one after it: keep that one beside the file, never drop it
            kept = path.with_name(f"{path.name}.edited-{uuid.uuid4().hex[:8]}")
            os.rename(tmp, kept)
            fsync_dir(path.parent)
            return Replaced(False, taken, kept)
        fsync_dir(path.parent)
        return Replaced(False, taken)
    finally:
        tmp.unlink(missing_ok=True)
