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
from collections.abc import Iterator
from contextlib import contextmanager
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
