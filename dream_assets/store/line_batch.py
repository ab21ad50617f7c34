"""Log lines in bulk for the warehouse: read in large blocks, keyed and dated a whole batch at a time.

Archiving a 1 GiB log prefix line by line in Python (``json.loads``, then a hash, then row appends) costs tens of
microseconds a line. Here a batch is one buffer of raw lines with their offsets (``Lines``), and the work per line is
done in C where it can be: newlines are found with numpy, the timestamp and session id are read by one DuckDB query
(RE2 regular expressions plus yyjson validation), and the sha256 line key is computed in a Python loop (existing
warehouses hold keys made by ``hashlib``: the same bytes give the same digest anywhere, and DuckDB's own ``sha256`` is
many times slower), as is the decoding of the lines to text for DuckDB.

The bulk reading is deliberately narrow. A line is *fast* only when its event fields are certain without Python's
``json`` module: it is valid UTF-8, starts ``{"timestamp":"<ISO-8601 UTC time>"`` (optionally followed by
``"sessionId":"<plain string>"``), is a JSON object DuckDB reads with neither key repeated, and shows none of the
shapes DuckDB's JSON reader accepts but Python's does not (trailing commas, ``nan``/``inf`` spellings, integers
too long for Python, more brackets than a line may nest). Every other line is handed back as not fast, and the
warehouse reads it the old way, so the rows written are the same either way (spec "Pass 0 — Log retention": malformed
lines are kept, never dropped).

Hostile lines. Every log reader (``logs``, the warehouse, the backfills) parses a line with :func:`parse_json_line`,
which turns whatever a line can do to ``json.loads`` into ``MalformedLine`` (a ``ValueError`` naming the reason):
nesting deeper than ``MAX_NESTING`` (``"[" * 100000`` would raise ``RecursionError``), a line longer than
``MAX_LINE_BYTES`` (never held whole: :func:`read_line_blocks` skips it and reports where it was), integers too long
to convert. So a bad line is a malformed line, skipped and counted, never an exception out of a reader.
"""

from __future__ import annotations

import hashlib
import itertools
import json
import math
import os
import re
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

import duckdb
import numpy as np

from dream_assets.model import parse_ts
from dream_assets.store.connection import connect_quietly
from dream_assets.store.frames import registered, texts

_GIL_SLICE = 1024  # lines hashed between chances for other threads to take the GIL

#: The longest line (bytes, newline not counted) any log reader reads. A record of the documented log formats is a
#: few kilobytes; a longer line is a runaway writer or a hostile file. It is never held in memory whole: readers skip
#: it as malformed, and log retention and the conversation clear remove it without archiving it, reporting the file,
#: the line number and its size (the warehouse stores lines as Parquet strings, and one line cannot be a batch).
MAX_LINE_BYTES = 16 << 20
#: The deepest nesting of arrays and objects a log line may have. The documented records nest two levels; Python's
#: json parser recurses per level and would raise RecursionError somewhere near a thousand.
MAX_NESTING = 64


class MalformedLine(ValueError):
    """A log line that is not a readable record; the message is the reason, for a "<file>:<line>: <reason>" report."""


def parse_json_line(text: str) -> Any:
    """``json.loads`` of one log line, with the limits every log reader shares. Raises ``MalformedLine``."""
    if len(text) > MAX_LINE_BYTES:
        raise MalformedLine(f"line of {len(text):,} characters is longer than the {MAX_LINE_BYTES:,}-byte limit")
    if nesting_depth(text) > MAX_NESTING:
        raise MalformedLine(f"nested more than {MAX_NESTING} levels deep")
    try:
        return _DECODER.decode(text)
    except RecursionError:
        raise MalformedLine("nested too deeply to read") from None
    except ValueError as exc:  # json.JSONDecodeError
        raise MalformedLine(f"not valid JSON ({exc})") from None


def _parse_int(text: str) -> int | float:
    """An integer literal; one longer than Python converts (thousands of digits, which DuckDB's reader accepts)
    reads as a float (infinite), which no record field takes, rather than failing the whole line."""
    try:
        return int(text)
    except ValueError:
        return float(text)


_DECODER = json.JSONDecoder(parse_int=_parse_int)
_JSON_STRING = re.compile(r'"(?:[^"\\]++|\\.)*+"', re.DOTALL)


def nesting_depth(text: str) -> int:
    """How deep ``[`` and ``{`` nest outside JSON strings, where it matters: a line with at most ``MAX_NESTING``
    brackets returns their count (an upper bound, within the limit); only a line with more is scanned, with its
    strings removed first."""
    brackets = text.count("[") + text.count("{")
    if brackets <= MAX_NESTING:
        return brackets
    bare = _JSON_STRING.sub("", text).encode("utf-8", "surrogateescape")
    codes = np.frombuffer(bare, np.uint8)
    steps = np.isin(codes, (ord("["), ord("{"))).astype(np.int32) - np.isin(codes, (ord("]"), ord("}"))).astype(
        np.int32
    )
    return int(np.cumsum(steps).max(initial=0))


# JSON whitespace inside one line (a newline ends the line). Python's json also allows "\n" between tokens, which
# only a line given as text can contain: such a line fails the prefix and takes the slow path.
_WS = r"[ \t\r]*"
# Only the forms whose Arrow parse is known to equal model.parse_ts: 1-6 fraction digits, "Z" or "+00:00".
_TS = (
    r"[1-9][0-9]{3}-(?:0[1-9]|1[0-2])-(?:0[1-9]|[12][0-9]|3[01])T(?:[01][0-9]|2[0-3]):[0-5][0-9]:[0-5][0-9]"
    r"(?:\.[0-9]{1,6})?(?:Z|\+00:00)"
)
_PLAIN = r'[^"\\\x00-\x1f]*'  # a JSON string body without escapes: its text is its value
_PREFIX = (
    rf'^{_WS}\{{{_WS}"timestamp"{_WS}:{_WS}"({_TS})"'
    rf'({_WS},{_WS}"sessionId"{_WS}:{_WS}"({_PLAIN})")?'
)
# What DuckDB's JSON reader (yyjson) accepts and Python's json.loads does not: a trailing comma, and "nan"/"inf"
# numbers in spellings other than NaN, Infinity, -Infinity. Each pattern starts with one literal character, which
# keeps RE2 fast; a string that merely contains such text sends its line the slow way, which is only slower.
_ANY_WS = r"[ \t\r\n]*"
_NAN_INF = r"[-+]?[nNiI][aAnN][nNfF]"
_NOT_PYTHON_JSON = (rf",{_ANY_WS}(?:[\]}}]|{_NAN_INF})", rf":{_ANY_WS}{_NAN_INF}", rf"\[{_ANY_WS}{_NAN_INF}")
# More brackets than a line may nest (yyjson reads any depth): only Python can tell (``nesting_depth``) whether the
# line is too deep. Both brackets are one byte, so byte lengths count them.
_BRACKETS = "strlen(raw) - strlen(replace(replace(raw, '[', ''), '{', ''))"

# json_keys decodes the top-level keys, so a repeated key (Python keeps the last value, the prefix reads the
# first) or a key spelled with escapes is seen as what it is.
_CLASSIFY = f"""
WITH parsed AS (
    SELECT raw,
           regexp_extract(raw, '{_PREFIX}', ['ts', 'with_session', 'session_id']) AS m,
           try(json_keys(raw)) AS keys
    FROM lines
)
SELECT m.ts AS ts,
       m.with_session <> '' AS with_session,
       m.session_id AS session_id,
       m.ts <> ''
       AND keys IS NOT NULL
       AND len(list_filter(keys, lambda k: k = 'timestamp')) = 1
       AND len(list_filter(keys, lambda k: k = 'sessionId')) = CASE WHEN m.with_session <> '' THEN 1 ELSE 0 END
       AND {_BRACKETS} <= {MAX_NESTING}
       AND {" AND ".join(f"NOT regexp_matches(raw, '{pattern}')" for pattern in _NOT_PYTHON_JSON)} AS fast
FROM parsed
"""


def connect() -> duckdb.DuckDBPyConnection:
    """An in-memory DuckDB for classifying batches (no database file, so no store lock is involved).

    One thread: the archive's own threads keep the other cores busy hashing and writing, and DuckDB's memory stays
    smaller. Rows come back in the order they went in, which the results are matched by.
    """
    return connect_quietly(config={"threads": 1, "preserve_insertion_order": True})


@dataclass(frozen=True)
class Lines:
    """Raw lines as one buffer: line i is ``data[offsets[i]:offsets[i + 1]]`` (a slice shares the buffer)."""

    data: bytes
    offsets: np.ndarray  # int64, one more than the lines, ascending

    @classmethod
    def of(cls, lines: list[bytes]) -> Lines:
        offsets = np.zeros(len(lines) + 1, np.int64)
        np.cumsum(np.fromiter(map(len, lines), np.int64, count=len(lines)), out=offsets[1:])
        return cls(b"".join(lines), offsets)

    @classmethod
    def concat(cls, parts: list[Lines]) -> Lines:
        if len(parts) == 1:
            return parts[0]
        data = b"".join(memoryview(p.data)[int(p.offsets[0]) : int(p.offsets[-1])] for p in parts)
        sizes = np.concatenate([np.diff(p.offsets) for p in parts])
        offsets = np.zeros(sizes.size + 1, np.int64)
        np.cumsum(sizes, out=offsets[1:])
        return cls(data, offsets)

    def __len__(self) -> int:
        return self.offsets.size - 1

    def __getitem__(self, i: int) -> bytes:
        return self.data[int(self.offsets[i]) : int(self.offsets[i + 1])]

    @property
    def nbytes(self) -> int:
        return int(self.offsets[-1] - self.offsets[0])

    def slice(self, start: int, n: int) -> Lines:
        return Lines(self.data, self.offsets[start : start + n + 1])


@dataclass(frozen=True)
class LineBatch:
    """Raw lines (bytes, newline removed) with the source file each came from and its line number there."""

    raw: Lines
    source_ids: np.ndarray  # per line, an index into ``sources``
    sources: tuple[str, ...]
    line_numbers: np.ndarray  # per line, its number in its source counted from 1; 0 where not known

    @classmethod
    def from_pieces(cls, pieces: list[tuple[np.ndarray, Lines, np.ndarray]], sources: tuple[str, ...]) -> LineBatch:
        """Lines from ``lines_of_block``, each piece with its lines' source indexes and line numbers."""
        raw = Lines.concat([lines for _, lines, _ in pieces])
        source_ids = np.concatenate([ids for ids, _, _ in pieces]).astype(np.int32, copy=False)
        numbers = np.concatenate([numbers for _, _, numbers in pieces]).astype(np.int64, copy=False)
        return cls(raw, source_ids, sources, numbers)

    @classmethod
    def from_lines(
        cls,
        lines: list[bytes],
        source_ids: list[int],
        sources: tuple[str, ...],
        line_numbers: list[int] | None = None,
    ) -> LineBatch:
        """Encoded lines, which may contain newlines of their own (they are not split)."""
        raw = Lines.of(lines)
        numbers = np.array(line_numbers, np.int64) if line_numbers is not None else np.zeros(len(lines), np.int64)
        return cls(raw, np.array(source_ids, np.int32), sources, numbers)

    def __len__(self) -> int:
        return len(self.raw)

    def slices(self, rows: int) -> Iterator[LineBatch]:
        for start in range(0, len(self), max(rows, 1)):
            yield LineBatch(
                self.raw.slice(start, rows),
                self.source_ids[start : start + rows],
                self.sources,
                self.line_numbers[start : start + rows],
            )

    def line(self, i: int) -> bytes:
        return self.raw[i]

    def keys(self, kind: str) -> list[str]:
        """``warehouse.line_key`` of every line: sha256 over kind, NUL, source, NUL, the line's bytes."""
        offsets = self.raw.offsets.tolist()
        data = memoryview(self.raw.data)
        bases = [key_base(kind, source) for source in self.sources]
        lines = zip(self.source_ids.tolist(), itertools.pairwise(offsets), strict=True)
        keys: list[str] = []
        while chunk := list(itertools.islice(lines, _GIL_SLICE)):
            # Hashing holds the GIL throughout. Sleeping now and then (a zero sleep would take the GIL straight back)
            # lets the other archiving threads, which mostly work in C, go on without waiting out the interpreter's
            # switch interval each time they return to Python.
            time.sleep(1e-6)
            for source_id, (a, b) in chunk:
                h = bases[source_id].copy()
                h.update(data[a:b])
                keys.append(h.hexdigest())
        return keys


def key_base(kind: str, source: str) -> hashlib._Hash:
    """A sha256 fed with the key's fixed part, kind NUL source NUL; copies of it take each line."""
    h = hashlib.sha256()
    h.update(kind.encode())
    h.update(b"\0")
    h.update(source.encode("utf-8", "surrogateescape"))
    h.update(b"\0")
    return h


@dataclass(frozen=True)
class EventFields:
    """What the bulk reading could tell about each line of a batch; ``fast`` false means "read it in Python"."""

    fast: np.ndarray  # bool per line
    text: np.ndarray  # the lines as text (objects); "" for a line that is not UTF-8
    event_ts: np.ndarray  # datetime64[us], UTC; NaT where not fast
    day: np.ndarray  # "YYYY-MM-DD" (objects); None where not fast
    session_id: np.ndarray  # the line's own sessionId (objects); None where absent or not fast


def classify(con: duckdb.DuckDBPyConnection, raw: Lines) -> EventFields:
    text = _as_text(raw)
    with registered(con, "lines", {"raw": text}):
        result = con.sql(_CLASSIFY).fetchnumpy()
    fast = np.ma.filled(result["fast"], False).astype(bool)
    ts_text = np.ma.filled(result["ts"], "").tolist()
    # The prefix took only times whose text numpy reads as parse_ts does (the offset is UTC: "Z" or "+00:00").
    pairs = list(zip(ts_text, fast.tolist(), strict=True))
    try:
        event_ts = np.array(
            [t.removesuffix("Z").removesuffix("+00:00") if ok else "NaT" for t, ok in pairs], dtype="datetime64[us]"
        )
    except ValueError:
        # A date the regular expression lets through but the calendar does not (2024-02-30): such lines go slow.
        parsed = [_parse_or_none(t) if ok else None for t, ok in pairs]
        event_ts = np.array(
            [np.datetime64("NaT") if p is None else p.replace(tzinfo=None) for p in parsed], dtype="datetime64[us]"
        )
        fast &= ~np.isnat(event_ts)
    with_session = fast & np.ma.filled(result["with_session"], False).astype(bool)
    session_id = np.where(with_session, np.ma.filled(result["session_id"], None).astype(object), None)
    day = texts(t[:10] if ok else None for t, ok in zip(ts_text, fast.tolist(), strict=True))
    return EventFields(fast, text, event_ts, day, session_id)


def _as_text(raw: Lines) -> np.ndarray:
    """The lines as text; a line that is not valid UTF-8 becomes "" (so it is not fast) — its bytes are kept."""
    bounds = raw.offsets.tolist()
    data = raw.data
    try:
        whole = data[bounds[0] : bounds[-1]].decode("utf-8")
    except UnicodeDecodeError:
        return texts(_decoded_or_empty(data[a:b]) for a, b in itertools.pairwise(bounds))
    if len(whole) == bounds[-1] - bounds[0]:  # ASCII: the byte offsets are character offsets
        first = bounds[0]
        return texts(whole[a - first : b - first] for a, b in itertools.pairwise(bounds))
    return texts(data[a:b].decode("utf-8") for a, b in itertools.pairwise(bounds))


def _decoded_or_empty(line: bytes) -> str:
    try:
        return line.decode("utf-8")
    except UnicodeDecodeError:
        return ""


def _parse_or_none(text: str | None) -> datetime | None:
    if not text:
        return None
    try:
        return parse_ts(text)
    except ValueError:
        return None


def read_line_blocks(
    path: Path,
    start: int,
    end: int | None,
    block_bytes: int,
    *,
    oversized: Callable[[int, int], None] | None = None,
    max_line: int | None = None,
) -> Iterator[tuple[np.ndarray, np.ndarray]]:
    """The lines of ``path`` in the byte range ``[start, end)`` (to the end of the file when ``end`` is None), as
    blocks of whole lines: ``(bytes, positions of the newlines)``. A last line without a newline (a range or a file
    that ends mid-line) is given one. These are the lines ``logs.iter_lines_between`` yields.

    A line longer than ``max_line`` bytes (``MAX_LINE_BYTES``) is never held whole: it is skipped, and
    ``oversized(offset of its first byte, its length)`` is called, after every line before it was yielded.

    The bytes are overwritten by the next block (reusing one buffer is much cheaper than fresh memory): use them
    before asking for it, as ``lines_of_block`` does.
    """
    max_line = MAX_LINE_BYTES if max_line is None else max_line
    with open(path, "rb") as f:
        remaining = max((os.fstat(f.fileno()).st_size if end is None else end) - start, 0)
        # A small file gets a small buffer; one that grows while being read takes more blocks. The buffer never
        # holds more than one longest line and its newline, so any line that fills it is too long.
        capacity = max(min(block_bytes, remaining, max_line + 1), 1)
        buf = np.empty(capacity + 1, np.uint8)  # + a spare byte for a last newline
        newline = np.empty(len(buf), np.bool_)
        kept = 0  # an unfinished line, moved to the front of ``buf``
        offset = start  # the file offset of ``buf[0]``
        skipping: list[int] | None = None  # [offset, length so far] of a line too long to hold
        if end is None:
            remaining = math.inf
        f.seek(start)
        while True:
            want = int(min(len(buf) - 1 - kept, remaining))
            got = f.readinto(memoryview(buf)[kept : kept + want]) if want else 0
            remaining -= got
            size = kept + got
            last = got < want or remaining == 0  # the end of the file or of the range
            ends = np.flatnonzero(np.equal(buf[:size], ord("\n"), out=newline[:size]))
            first = 0  # where this block's lines start
            if skipping is not None:
                if not len(ends):  # still inside the long line
                    skipping[1] += size
                    offset += size
                    kept = 0
                    if last:
                        if oversized is not None:
                            oversized(*skipping)
                        return
                    continue
                skipping[1] += int(ends[0])
                if oversized is not None:
                    oversized(*skipping)
                skipping = None
                first = int(ends[0]) + 1
                ends = ends[1:]
            if last:
                tail = size - (int(ends[-1]) + 1 if len(ends) else first)
                if tail > max_line:  # a final unfinished line that is too long
                    if len(ends):
                        yield buf[first : int(ends[-1]) + 1], ends - first
                    if oversized is not None:
                        oversized(offset + size - tail, tail)
                    return
                if size > first and (not len(ends) or ends[-1] != size - 1):
                    buf[size] = ord("\n")
                    ends = np.append(ends, size)
                    size += 1
                if size > first:
                    yield buf[first:size], ends - first
                return
            if not len(ends):  # one unfinished line fills the buffer
                if size - first > max_line:  # too long to hold: skip to its end
                    skipping = [offset + first, size - first]
                    offset += size
                    kept = 0
                    continue
                kept = size - first
                if first:  # the end of a skipped line made room
                    buf[:kept] = buf[first:size]
                else:  # a long line: make room, up to the longest line
                    grown = min(2 * (len(buf) - 1), max_line + 1)
                    buf = np.concatenate([buf[:size], np.empty(grown + 1 - size, np.uint8)])
                    newline = np.empty(len(buf), np.bool_)
                offset += first
                continue
            cut = int(ends[-1]) + 1
            yield buf[first:cut], ends - first
            kept = size - cut
            buf[:kept] = buf[cut:size]
            offset += cut


def lines_of_block(data: np.ndarray, ends: np.ndarray) -> Lines:
    """The lines of a block from ``read_line_blocks`` without their newlines, copied out of the block."""
    offsets = np.zeros(len(ends) + 1, np.int64)
    offsets[1:] = ends - np.arange(len(ends))  # line i ends before its newline, less the i newlines before it
    # Every newline of a block ends a line, so removing them all leaves the lines one after another.
    return Lines(data.tobytes().replace(b"\n", b""), offsets)
