"""Log lines in bulk for the warehouse: read in large blocks, keyed and dated a whole batch at a time.

Archiving a 1 GiB log prefix line by line in Python (``json.loads``, then a hash, then row appends) costs tens of
microseconds a line. Here a batch is one Arrow array of raw lines, and the work per line is done in C: newlines are
found with numpy, the timestamp and session id are read by one DuckDB query (RE2 regular expressions plus yyjson
validation), and only the sha256 line key is computed in a Python loop: existing warehouses hold keys made by
``hashlib`` (the same bytes give the same digest anywhere), and DuckDB's own ``sha256`` is many times slower.

The bulk reading is deliberately narrow. A line is *fast* only when its event fields are certain without Python's
``json`` module: it is valid UTF-8, starts ``{"timestamp":"<ISO-8601 UTC time>"`` (optionally followed by
``"sessionId":"<plain string>"``), is a JSON object DuckDB reads with neither key repeated, and shows none of the
shapes DuckDB's JSON reader accepts but Python's does not (trailing commas, ``nan``/``inf`` spellings). Every other
line is handed back as not fast, and the warehouse reads it the old way, so the rows written are the same either way
(spec "Pass 0 — Log retention": malformed lines are kept, never dropped).
"""

from __future__ import annotations

import hashlib
import itertools
import math
import os
import time
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

import duckdb
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from dream_assets.model import parse_ts

EVENT_TS = pa.timestamp("us", tz="UTC")
_GIL_SLICE = 1024   # lines hashed between chances for other threads to take the GIL

# JSON whitespace inside one line (a newline ends the line). Python's json also allows "\n" between tokens, which
# only a line given as text can contain: such a line fails the prefix and takes the slow path.
_WS = r"[ \t\r]*"
# Only the forms whose Arrow parse is known to equal model.parse_ts: 1-6 fraction digits, "Z" or "+00:00".
_TS = (r"[1-9][0-9]{3}-(?:0[1-9]|1[0-2])-(?:0[1-9]|[12][0-9]|3[01])T(?:[01][0-9]|2[0-3]):[0-5][0-9]:[0-5][0-9]"
       r"(?:\.[0-9]{1,6})?(?:Z|\+00:00)")
_PLAIN = r'[^"\\\x00-\x1f]*'   # a JSON string body without escapes: its text is its value
_PREFIX = (rf'^{_WS}\{{{_WS}"timestamp"{_WS}:{_WS}"({_TS})"'
          rf'({_WS},{_WS}"sessionId"{_WS}:{_WS}"({_PLAIN})")?')
# What DuckDB's JSON reader (yyjson) accepts and Python's json.loads does not: a trailing comma, and "nan"/"inf"
# numbers in spellings other than NaN, Infinity, -Infinity. Each pattern starts with one literal character, which
# keeps RE2 fast; a string that merely contains such text sends its line the slow way, which is only slower.
_ANY_WS = r"[ \t\r\n]*"
_NAN_INF = r"[-+]?[nNiI][aAnN][nNfF]"
_NOT_PYTHON_JSON = (rf",{_ANY_WS}(?:[\]}}]|{_NAN_INF})", rf":{_ANY_WS}{_NAN_INF}", rf"\[{_ANY_WS}{_NAN_INF}")

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
       AND {" AND ".join(f"NOT regexp_matches(raw, '{pattern}')" for pattern in _NOT_PYTHON_JSON)} AS fast
FROM parsed
"""


def connect() -> duckdb.DuckDBPyConnection:
    """An in-memory DuckDB for classifying batches (no database file, so no store lock is involved).

    One thread: the archive's own threads keep the other cores busy hashing and writing, and DuckDB's memory stays
    smaller. Rows come back in the order they went in, which the results are matched by.
    """
    return duckdb.connect(config={"threads": 1, "preserve_insertion_order": True})


@dataclass(frozen=True)
class LineBatch:
    """Raw lines (bytes, newline removed) with the source file each came from."""

    raw: pa.LargeBinaryArray
    source_ids: np.ndarray          # per line, an index into ``sources``
    sources: tuple[str, ...]

    @classmethod
    def from_pieces(cls, pieces: list[tuple[int, pa.LargeBinaryArray]], sources: tuple[str, ...]) -> LineBatch:
        """Lines from ``lines_of_block``, each piece tagged with its source's index."""
        raw = pieces[0][1] if len(pieces) == 1 else pa.concat_arrays([lines for _, lines in pieces])
        source_ids = np.repeat(np.array([i for i, _ in pieces], np.int32), [len(lines) for _, lines in pieces])
        return cls(raw, source_ids, sources)

    @classmethod
    def from_lines(cls, lines: list[bytes], source_ids: list[int], sources: tuple[str, ...]) -> LineBatch:
        """Encoded lines, which may contain newlines of their own (they are not split)."""
        offsets = np.zeros(len(lines) + 1, np.int64)
        np.cumsum([len(line) for line in lines], out=offsets[1:])
        raw = pa.Array.from_buffers(pa.large_binary(), len(lines),
                                    [None, pa.py_buffer(offsets), pa.py_buffer(b"".join(lines))])
        return cls(raw, np.array(source_ids, np.int32), sources)

    def __len__(self) -> int:
        return len(self.raw)

    def slices(self, rows: int) -> Iterator[LineBatch]:
        for start in range(0, len(self), max(rows, 1)):
            yield LineBatch(self.raw.slice(start, rows), self.source_ids[start:start + rows], self.sources)

    def line(self, i: int) -> bytes:
        return self.raw[i].as_py()

    def keys(self, kind: str) -> list[str]:
        """``warehouse.line_key`` of every line: sha256 over kind, NUL, source, NUL, the line's bytes."""
        offsets_buffer, data_buffer = self.raw.buffers()[1:]
        start = self.raw.offset
        offsets = np.frombuffer(offsets_buffer, np.int64)[start:start + len(self) + 1].tolist()
        data = memoryview(data_buffer) if data_buffer is not None else memoryview(b"")
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

    fast: np.ndarray            # bool per line
    text: pa.Array              # the lines as UTF-8 text (large_string); "" for a line that is not UTF-8
    event_ts: pa.Array          # timestamp[us, UTC]; null where not fast
    day: pa.Array               # "YYYY-MM-DD"; null where not fast
    session_id: pa.Array        # the line's own sessionId; null where absent or not fast


def classify(con: duckdb.DuckDBPyConnection, raw: pa.LargeBinaryArray) -> EventFields:
    text = _as_text(raw)
    con.register("lines", pa.table({"raw": text}))
    try:
        result = con.sql(_CLASSIFY).to_arrow_table()
    finally:
        con.unregister("lines")
    fast = pc.fill_null(result.column("fast"), False).to_numpy()
    mask = pa.array(fast)
    ts_text = pc.if_else(mask, result.column("ts"), None)
    try:
        event_ts = pc.cast(ts_text, EVENT_TS)
    except pa.ArrowInvalid:
        # A date the regular expression lets through but the calendar does not (2024-02-30): such lines go slow.
        event_ts = pa.array([_parse_or_none(t) for t in ts_text.to_pylist()], EVENT_TS)
        fast &= event_ts.is_valid().to_numpy(zero_copy_only=False)
        mask = pa.array(fast)
    session_id = pc.if_else(pc.and_(mask, result.column("with_session")), result.column("session_id"), None)
    day = pc.if_else(mask, pc.utf8_slice_codeunits(ts_text, 0, 10), None)
    return EventFields(fast, text, event_ts, day, session_id)


def _as_text(raw: pa.LargeBinaryArray) -> pa.LargeStringArray:
    """The lines as UTF-8 text; a line that is not valid UTF-8 becomes "" (so it is not fast) — its bytes are kept."""
    try:
        return raw.cast(pa.large_string())
    except pa.ArrowInvalid:
        valid = [_is_utf8(line) for line in raw.to_pylist()]
        return pc.if_else(pa.array(valid), raw, b"").cast(pa.large_string())


def _is_utf8(line: bytes) -> bool:
    try:
        line.decode("utf-8")
        return True
    except UnicodeDecodeError:
        return False


def _parse_or_none(text: str | None) -> datetime | None:
    if text is None:
        return None
    try:
        return parse_ts(text)
    except ValueError:
        return None


def read_line_blocks(path: Path, start: int, end: int | None,
                     block_bytes: int) -> Iterator[tuple[np.ndarray, np.ndarray]]:
    """The lines of ``path`` in the byte range ``[start, end)`` (to the end of the file when ``end`` is None), as
    blocks of whole lines: ``(bytes, positions of the newlines)``. A last line without a newline (a range or a file
    that ends mid-line) is given one. These are the lines ``logs.iter_lines_between`` yields.

    The bytes are overwritten by the next block (reusing one buffer is much cheaper than fresh memory): use them
    before asking for it, as ``lines_of_block`` does.
    """
    with open(path, "rb") as f:
        remaining = max((os.fstat(f.fileno()).st_size if end is None else end) - start, 0)
        # A small file gets a small buffer; one that grows while being read takes more blocks.
        buf = np.empty(max(min(block_bytes, remaining), 1) + 1, np.uint8)   # + a spare byte for a last newline
        newline = np.empty(len(buf), np.bool_)
        kept = 0                                       # an unfinished line, moved to the front of ``buf``
        if end is None:
            remaining = math.inf
        f.seek(start)
        while True:
            want = int(min(len(buf) - 1 - kept, remaining))
            got = f.readinto(memoryview(buf)[kept:kept + want]) if want else 0
            remaining -= got
            size = kept + got
            ends = np.flatnonzero(np.equal(buf[:size], ord("\n"), out=newline[:size]))
            if got < want or remaining == 0:           # the end of the file or of the range
                if size and (not len(ends) or ends[-1] != size - 1):
                    buf[size] = ord("\n")
                    ends = np.append(ends, size)
                    size += 1
                if size:
                    yield buf[:size], ends
                return
            if not len(ends):                          # one line longer than the buffer: make room
                buf = np.concatenate([buf[:size], np.empty(len(buf), np.uint8)])
                newline = np.empty(len(buf), np.bool_)
                kept = size
                continue
            cut = int(ends[-1]) + 1
            yield buf[:cut], ends
            kept = size - cut
            buf[:kept] = buf[cut:size]


def lines_of_block(data: np.ndarray, ends: np.ndarray) -> pa.LargeBinaryArray:
    """The lines of a block from ``read_line_blocks`` without their newlines, copied out of the block."""
    offsets = np.zeros(len(ends) + 1, np.int64)
    offsets[1:] = ends + 1
    with_newlines = pa.Array.from_buffers(pa.large_binary(), len(ends),
                                          [None, pa.py_buffer(offsets), pa.py_buffer(data)])
    return pc.binary_slice(with_newlines, 0, -1)
