"""Byte-level primitives over log files, shared by the log readers, log retention and the conversation clear: lines
streamed in blocks (a line too long to hold is reported, never read whole), line counts and cut offsets found
without holding the file, and the rewrite of a file as its tail.

A rewrite goes through ``file_safety.atomic_writer`` (temp file ``.<name>.<random>.tmp`` next to the log, fsync,
atomic rename, folder fsync); the caller holds the log's lock, so no append is lost to it.
"""

from __future__ import annotations

import os
import shutil
import stat
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

from dream_assets.file_safety import atomic_writer
from dream_assets.profile import SESSION_LOGS, AgentProfile
from dream_assets.store import line_batch
from dream_assets.store.line_batch import read_line_blocks

BLOCK = 1 << 20


@dataclass(frozen=True)
class Oversized:
    """A line too long to read (``line_batch.MAX_LINE_BYTES``): where it starts and how long it is."""

    offset: int
    size: int

    @property
    def reason(self) -> str:
        return f"line of {self.size:,} bytes is longer than the {line_batch.MAX_LINE_BYTES:,}-byte limit"


def raw_lines(path: Path, start: int, end: int | None) -> Iterator[bytes | Oversized]:
    """Lines of a file in ``[start, end)`` without their newline, a final partial line included; a line too long to
    hold is an ``Oversized`` in its place (so line numbers stay right)."""
    skipped: list[Oversized] = []
    for data, ends in read_line_blocks(
        path, start, end, BLOCK, oversized=lambda offset, size: skipped.append(Oversized(offset, size))
    ):
        if skipped:
            yield from skipped
            skipped.clear()
        block = data.tobytes()
        begin = 0
        for stop in ends.tolist():
            yield block[begin:stop]
            begin = stop + 1
    yield from skipped


def iter_raw_lines(path: Path, *, on_oversized: Callable[[int, int], None] | None = None) -> Iterator[tuple[int, str]]:
    """``(line number, text)`` of every line, numbered from 1, without the newline.

    Bytes that are not UTF-8 are kept as surrogate escapes, so ``text.encode("utf-8", "surrogateescape")``
    gives the original bytes back. A line longer than ``line_batch.MAX_LINE_BYTES`` is not read: it is left out,
    and ``on_oversized(line number, size)`` is called.
    """
    for lineno, raw in enumerate(raw_lines(path, 0, None), start=1):
        if isinstance(raw, Oversized):
            if on_oversized is not None:
                on_oversized(lineno, raw.size)
            continue
        yield lineno, raw.decode("utf-8", "surrogateescape")


def iter_lines_between(
    path: Path, start: int, end: int, *, on_oversized: Callable[[int, int], None] | None = None
) -> Iterator[str]:
    """The lines of ``path`` in the byte range ``[start, end)``, streamed (surrogate-escaped like iter_raw_lines;
    a line too long to read is left out and reported to ``on_oversized`` with its number in the range)."""
    for lineno, raw in enumerate(raw_lines(path, start, end), start=1):
        if isinstance(raw, Oversized):
            if on_oversized is not None:
                on_oversized(lineno, raw.size)
            continue
        yield raw.decode("utf-8", "surrogateescape")


def count_lines_between(path: Path, start: int, end: int) -> int:
    """Lines in ``[start, end)`` (``end`` on a line boundary), counted in blocks without holding the range."""
    count, pos = 0, start
    with open(path, "rb") as f:
        f.seek(start)
        while pos < end:
            block = f.read(min(BLOCK, end - pos))
            if not block:
                break
            count += block.count(b"\n")
            pos += len(block)
    return count


def find_cut_offset(path: Path, keep_lines: int) -> int:
    """The byte offset where the last ``keep_lines`` complete lines start; 0 when there is nothing to drop.

    Reads blocks backwards from the end, so the cost depends on what is kept, not on the file's size. A final
    line without a newline is a write in progress: it is always kept, is never split, and is not counted.
    """
    if keep_lines < 0:
        raise ValueError(f"keep_lines must be 0 or more, got {keep_lines}")
    need = keep_lines + 1  # the newline just before the first kept line
    with open(path, "rb") as f:
        pos = f.seek(0, os.SEEK_END)
        seen = 0
        while pos > 0:
            start = max(0, pos - BLOCK)
            f.seek(start)
            block = f.read(pos - start)
            found = block.count(b"\n")
            if seen + found >= need:
                idx = len(block)
                for _ in range(need - seen):
                    idx = block.rfind(b"\n", 0, idx)
                return start + idx + 1
            seen += found
            pos = start
    return 0


def file_identity(st: os.stat_result) -> tuple[int, int]:
    """Device and inode: a rewrite (temp file + rename) gives a file a new identity, an append does not."""
    return st.st_dev, st.st_ino


def replace_with_tail(path: Path, cut: int, *, sync_dir: bool = True) -> None:
    """Rewrite ``path`` as its bytes from ``cut`` to the end, atomically (``file_safety.atomic_writer``).

    The caller holds the log's lock. Permissions and the last-write time are kept, so a trim does not make an
    idle session file look recently written (age pruning reads the last-write time). ``sync_dir=False`` leaves
    the folder's fsync to a caller that rewrites many files of one folder (``fsync_dir`` once at the end).
    """
    with open(path, "rb") as src:
        st = os.fstat(src.fileno())
        src.seek(cut)
        with atomic_writer(
            path,
            permissions=stat.S_IMODE(st.st_mode),
            times_ns=(st.st_atime_ns, st.st_mtime_ns),
            sync_dir=sync_dir,
        ) as dst:
            shutil.copyfileobj(src, dst, BLOCK)


def temp_files(profile: AgentProfile) -> list[Path]:
    """Temp files of log rewrites (``.<name>.<random>.tmp``, see ``replace_with_tail``) in the log folders and the
    profile root: a trim or clear killed before its rename leaves one behind."""
    folders = [profile.root, profile.logs_dir, *(profile.session_log_dir(kind) for kind in SESSION_LOGS)]
    return sorted(p for folder in folders if folder.is_dir() for p in folder.glob(".*.jsonl.*.tmp"))
