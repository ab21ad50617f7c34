"""The log warehouse: day-partitioned Parquet copies of log lines, kept after retention trims the JSONL.

Layout under ``profile.warehouse_dir``: ``<kind>/date=YYYY-MM-DD/part-*.parquet``, partitioned by each line's
own event timestamp (UTC day). A line whose timestamp cannot be read goes to ``<kind>/date=unknown`` with a
null ``event_ts``: it is kept, never dropped (spec "Pass 0 — Log retention": history outlives retention).

Writes are idempotent. Every row carries ``line_key`` = sha256(kind, source file name, raw line); a key already
present in its partition is not written again, so re-archiving the same lines (a retention run that crashed
between archiving and trimming, a repeated ``dream import-logs``) adds no rows. A consequence worth knowing:
two byte-identical lines of the same source file are one row.

Lines are archived in batches of up to ``BATCH_ROWS`` lines or ``BATCH_BYTES`` bytes, keyed and dated a whole
batch at a time (``line_batch``: lines in the shape the log writer emits are read in bulk, any other line with
``json.loads`` as before), and each batch writes one part per day partition. ``archive_file_ranges`` reads log
files in blocks of ``BATCH_BYTES`` without handling lines one by one in Python, which is what makes a 1 GiB
prefix take seconds. Memory stays bounded by the batch, not the log. The keys of the partitions being written
are held as a set (about 100 bytes per row of those partitions), for at most ``CACHED_PARTITIONS`` partitions.

Hostile lines never stop an archive. A line that is not a readable record (not JSON, nested too deeply, the wrong
shape, not UTF-8) is archived as raw text in ``date=unknown``, and counted and named (file and line number) in what
``archive_file_ranges`` returns. A line longer than ``line_batch.MAX_LINE_BYTES`` cannot be stored as one Parquet
string of a batch: it is not archived, and is counted and named as unarchivable, so a caller that removes it (log
retention, the conversation clear) says so.

A part is written as a temp file renamed into place; a writer killed before the rename leaves the temp file behind.
``temp_files`` lists those (log retention deletes the ones old enough that no writer can still be writing them).
"""

from __future__ import annotations

import logging
import os
import re
import uuid
from collections import OrderedDict
from collections.abc import Callable, Iterable, Iterator, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field, fields
from datetime import date, datetime, timedelta
from pathlib import Path
from typing import Any, TypeVar

import duckdb
import numpy as np

from dream_assets.file_safety import atomic_path
from dream_assets.model import parse_ts, utc
from dream_assets.profile import SESSION_LOGS, AgentProfile
from dream_assets.store import line_batch
from dream_assets.store.frames import texts, timestamps
from dream_assets.store.line_batch import (
    EventFields,
    LineBatch,
    Lines,
    MalformedLine,
    classify,
    connect,
    key_base,
    lines_of_block,
    parse_json_line,
    read_line_blocks,
)
from dream_assets.store.locks import path_lock
from dream_assets.store.log_bytes import iter_raw_lines
from dream_assets.store.log_records import LOG_KINDS, parse_line
from dream_assets.store.parquet import connect as parquet_connection
from dream_assets.store.parquet import read_columns, read_parquet, write_parquet

BATCH_ROWS = 50_000
BATCH_BYTES = 16 << 20
# Batches smaller than this are read line by line: starting DuckDB would cost more than it saves.
FAST_PATH_MIN_LINES = 500
CACHED_PARTITIONS = 4
UNKNOWN_DAY = "unknown"
MAX_PROBLEMS = 20

#: The columns of a part file and their types (every one but session_id and event_ts holds a value in every row).
SCHEMA: dict[str, str] = {
    "line_key": "VARCHAR",
    "kind": "VARCHAR",
    "source": "VARCHAR",
    "session_id": "VARCHAR",
    "event_ts": "TIMESTAMPTZ",
    "raw": "VARCHAR",
    "archived_at": "TIMESTAMPTZ",
}


@dataclass(frozen=True)
class _Rows:
    """The rows of one batch before they are split by day, as columns: ``seq`` is the line's place in the batch (it
    orders ties); text columns hold objects (None for null), ``event_ts`` datetime64[us] in UTC (NaT for null)."""

    seq: np.ndarray
    line_key: np.ndarray
    source: np.ndarray
    session_id: np.ndarray
    event_ts: np.ndarray
    raw: np.ndarray
    day: np.ndarray

    def __len__(self) -> int:
        return len(self.seq)

    def take(self, index: np.ndarray | slice) -> _Rows:
        return _Rows(*(getattr(self, f.name)[index] for f in fields(self)))

    @classmethod
    def concat(cls, parts: list[_Rows]) -> _Rows:
        return cls(*(np.concatenate([getattr(p, f.name) for p in parts]) for f in fields(cls)))


_KIND = re.compile(r"^[a-z][a-z0-9-]{0,63}$")
log = logging.getLogger("dream_assets.warehouse")
_T = TypeVar("_T")


class WarehouseError(ValueError):
    pass


def line_key(kind: str, source: str, raw: str) -> str:
    """The identity of one archived line: the same line of the same file always gets the same key."""
    h = key_base(kind, source)
    h.update(raw.encode("utf-8", "surrogateescape"))
    return h.hexdigest()


# --- writing -----------------------------------------------------------------------------------------------


def archive_lines(profile: AgentProfile, kind: str, source: str, lines: Iterable[str], now: datetime) -> int:
    """Archive lines of one source file (its file name, e.g. ``s1.jsonl``). Returns the rows actually added."""
    return archive_source_lines(profile, kind, ((source, line) for line in lines), now)


def archive_source_lines(profile: AgentProfile, kind: str, items: Iterable[tuple[str, str]], now: datetime) -> int:
    """Archive ``(source file name, line)`` pairs of many files of one kind in one streamed write.

    Blank lines are not archived. Returns the rows actually added (lines already present are not counted).
    """
    with _Writer(profile, _check_kind(kind), utc(now)) as writer:
        for source, line in items:
            writer.add_line(source, line)
        return writer.close()


@dataclass
class RangeArchive:
    """What ``archive_file_ranges`` did, with one entry per range in the order given."""

    added: int = 0  # rows added to the warehouse
    lines: list[int] = field(default_factory=list)  # lines read, blank and unarchivable ones included
    errors: list[OSError | None] = field(default_factory=list)  # why a range could not be read to its end
    unarchivable: list[int] = field(default_factory=list)  # lines too long to archive (not in the warehouse)
    undated: int = 0  # lines archived as raw text without a readable record (``date=unknown``)
    #: ``(file name, line number, reason)`` of the first ``MAX_PROBLEMS`` unarchivable or undated lines. The number
    #: counts from the start of the range (from the start of the file for a range that starts at 0).
    problems: list[tuple[str, int, str]] = field(default_factory=list)

    def note(self, source: str, lineno: int, reason: str) -> None:
        if len(self.problems) < MAX_PROBLEMS:
            self.problems.append((source, lineno, reason))


#: Called with ``k`` and the archive's ``RangeArchive`` once the lines of the first ``k`` ranges are all written.
Archived = Callable[[int, RangeArchive], None]


def archive_file_ranges(
    profile: AgentProfile,
    kind: str,
    ranges: Sequence[tuple[Path, int, int | None]],
    now: datetime,
    *,
    on_archived: Archived | None = None,
) -> RangeArchive:
    """Archive the lines in the byte ranges ``[start, end)`` of log files (``end`` None: to the end of the file).

    The rows are those ``archive_source_lines`` writes for ``(file name, line)`` of ``logs.iter_lines_between``
    over each range, but the files are read in blocks, not line by line. All ranges go into one streamed write,
    so a directory of thousands of session files costs one set of part files. A range that cannot be read is
    reported in ``errors`` and the others are still archived; a failed warehouse write raises.

    ``on_archived(k, result)`` is called each time the lines of the first ``k`` ranges are all in the warehouse (their
    parts written, synced and renamed into place), ``k`` growing, and with ``k = len(ranges)`` before this returns;
    ``result``'s entries for those ranges are final then. Calls come one at a time, from the archive's own threads: a
    caller that removes what was archived (log retention) can start on the first files while the rest are archived.
    """
    result = RangeArchive(lines=[0] * len(ranges), errors=[None] * len(ranges), unarchivable=[0] * len(ranges))
    with _Writer(profile, _check_kind(kind), utc(now), result, on_archived) as writer:
        for group, done in _read_ahead(_range_lines(ranges, result)):
            for block in group:
                writer.add_block(block)
            writer.done = done
        result.added = writer.close()
    if on_archived is not None:
        on_archived(len(ranges), result)
    return result


@dataclass(frozen=True)
class _Block:
    """Lines read from files, in order: ``counts[k]`` lines of ``sources[k]``, each with its line number there."""

    sources: list[str]
    counts: np.ndarray
    lines: Lines
    numbers: np.ndarray  # per line, its number in its file counted from 1

    @classmethod
    def of_file(cls, source: str, lines: Lines, first_lineno: int) -> _Block:
        n = len(lines)
        return cls([source], np.array([n]), lines, np.arange(first_lineno, first_lineno + n, dtype=np.int64))


class _SmallRanges:
    """Whole ranges of small files, read with one call each and split into lines together: for thousands of session
    files, the per-file work of the block reader would cost more than the reading itself."""

    def __init__(self) -> None:
        self.sources: list[str] = []  # per chunk: the file it was read from
        self.indexes: list[int] = []  # per chunk: its range's place in the ranges given
        self.chunks: list[bytes] = []  # whole lines, the last one ended by a newline
        self.nbytes = 0

    def add(self, index: int, source: str, data: bytes) -> None:
        if not data:
            return
        if not data.endswith(b"\n"):
            data += b"\n"  # a last line without its newline is a line too (as ``read_line_blocks`` reads it)
        self.sources.append(source)
        self.indexes.append(index)
        self.chunks.append(data)
        self.nbytes += len(data)

    def take(self, result: RangeArchive) -> _Block:
        """The lines collected so far, counted on their ranges in ``result``; the collection starts again empty."""
        data = np.frombuffer(b"".join(self.chunks), np.uint8)
        ends = np.flatnonzero(data == ord("\n"))
        # Every chunk ends with a newline, so a chunk's lines are the newlines before its end.
        bounds = np.cumsum([len(chunk) for chunk in self.chunks])
        counts = np.diff(np.searchsorted(ends, bounds, side="left"), prepend=0)
        for index, count in zip(self.indexes, counts.tolist(), strict=True):
            result.lines[index] += count
        first_line = np.repeat(np.cumsum(counts) - counts, counts)
        block = _Block(self.sources, counts, lines_of_block(data, ends), np.arange(len(ends)) - first_line + 1)
        self.sources, self.indexes, self.chunks, self.nbytes = [], [], [], 0
        return block


#: A range of at most this many bytes is read whole with others (``_SmallRanges``); a longer one block by block.
SMALL_RANGE_BYTES = 1 << 20


def _read_range(path: Path, start: int, end: int) -> bytes:
    """Bytes ``[start, end)`` of a file, fewer if it ends sooner."""
    fd = os.open(path, os.O_RDONLY | getattr(os, "O_CLOEXEC", 0))
    try:
        parts = []
        while start < end and (part := os.pread(fd, end - start, start)):
            parts.append(part)
            start += len(part)
        return parts[0] if len(parts) == 1 else b"".join(parts)
    finally:
        os.close(fd)


def _range_lines(
    ranges: Sequence[tuple[Path, int, int | None]], result: RangeArchive
) -> Iterator[tuple[list[_Block], int]]:
    """The ranges' lines block by block, in groups of about ``BATCH_BYTES`` (thousands of small session files are
    handed over together, as one block), each with the number of leading ranges read to their end once the group is
    taken. A range that cannot be read is recorded, and the next one read; a line too long to archive is counted and
    left out."""
    group: list[_Block] = []
    size = 0
    small = _SmallRanges()
    # A small range cannot hold a line too long to archive (nor can it grow into one: its end is given).
    small_limit = min(SMALL_RANGE_BYTES, line_batch.MAX_LINE_BYTES)
    for i, (path, start, end) in enumerate(ranges):
        name = os.path.basename(path)
        if end is not None and end - start <= small_limit:
            try:
                small.add(i, name, _read_range(path, start, end) if end > start else b"")
            except OSError as exc:  # only reading is forgiven: a failed warehouse write raises
                result.errors[i] = exc
            if small.nbytes >= BATCH_BYTES:
                yield [*group, small.take(result)], i + 1
                group, size = [], 0
            continue
        if small.chunks:  # the lines stay in the order of the ranges
            group.append(small.take(result))
            size += group[-1].lines.nbytes

        def oversized(offset: int, length: int, i: int = i, name: str = name) -> None:
            result.lines[i] += 1
            result.unarchivable[i] += 1
            result.note(
                name,
                result.lines[i],
                f"line of {length:,} bytes is longer than the "
                f"{line_batch.MAX_LINE_BYTES:,}-byte limit; it was not archived",
            )

        try:
            for data, ends in read_line_blocks(Path(path), start, end, BATCH_BYTES, oversized=oversized):
                first_lineno = result.lines[i] + 1
                result.lines[i] += len(ends)
                group.append(_Block.of_file(name, lines_of_block(data, ends), first_lineno))
                size += group[-1].lines.nbytes
                if size >= BATCH_BYTES:
                    yield group, i
                    group, size = [], 0
        except OSError as exc:  # only reading is forgiven: a failed warehouse write raises
            result.errors[i] = exc
    if small.chunks:
        group.append(small.take(result))
    if group:
        yield group, len(ranges)


def _read_ahead(items: Iterator[_T]) -> Iterator[_T]:
    """What ``items`` yields, the next item being produced by a thread meanwhile (reading overlaps archiving)."""
    with ThreadPoolExecutor(max_workers=1, thread_name_prefix="warehouse-read") as pool:
        pending = pool.submit(next, items, None)
        while (item := pending.result()) is not None:
            pending = pool.submit(next, items, None)
            yield item


@dataclass
class ImportResult:
    """What ``import_jsonl`` did with one file. Only lines that are valid records of the kind are imported."""

    imported: int = 0  # rows added to the warehouse
    valid: int = 0  # valid records of the kind: the imported ones and those the warehouse already held
    malformed: int = 0  # not a record of any log kind: not JSON, missing or wrong fields, too long, not UTF-8
    wrong_kind: int = 0  # a valid record of another log kind (``other_kinds`` says which)
    other_kinds: dict[str, int] = field(default_factory=dict)
    #: ``"<file>:<line>: <reason>"`` of the first ``MAX_PROBLEMS`` lines that were not imported.
    problems: list[str] = field(default_factory=list)

    @property
    def already_there(self) -> int:
        return self.valid - self.imported

    def refuse(self, where: str, reason: str, other_kind: str | None = None) -> None:
        if other_kind is None:
            self.malformed += 1
        else:
            self.wrong_kind += 1
            self.other_kinds[other_kind] = self.other_kinds.get(other_kind, 0) + 1
        if len(self.problems) < MAX_PROBLEMS:
            self.problems.append(f"{where}: {reason}")


def import_kinds() -> tuple[str, ...]:
    """The log kinds ``import_jsonl`` takes: those with a record schema."""
    return tuple(LOG_KINDS)


def check_import_kind(kind: str) -> str:
    if kind not in import_kinds():
        raise WarehouseError(f"unknown log kind {kind!r}: use one of {', '.join(import_kinds())}")
    return kind


def import_jsonl(profile: AgentProfile, kind: str, path: Path, now: datetime) -> ImportResult:
    """Archive a historical JSONL file of ``kind`` (``dream import-logs``), streamed.

    Each line is read by the rules the log readers apply (``logs.parse_line``: the same field rules and hostile-line
    limits). A valid record is archived like a retained log line (same key, so importing a file twice, or a file whose
    lines retention archived before, adds nothing); any other line is left out and counted: as of another kind when
    it is a valid record of one, else as malformed. A per-session kind takes the file name as the session id of lines
    without their own, as the live log does. An unknown kind, or a path that is not a readable file, raises
    ``WarehouseError`` before anything is written.
    """
    check_import_kind(kind)
    path = Path(path)
    if not path.exists():
        raise WarehouseError(f"cannot import {path}: no such file")
    if not path.is_file():
        raise WarehouseError(f"cannot import {path}: not a file")
    result = ImportResult()
    file_session = path.stem if kind in SESSION_LOGS else None
    others = [k for k in import_kinds() if k != kind]

    def parses_as(other: str, raw: bytes) -> bool:
        try:
            parse_line(other, raw)
        except MalformedLine:
            return False
        return True

    def oversized(lineno: int, size: int) -> None:
        result.refuse(
            f"{path.name}:{lineno}",
            f"line of {size:,} bytes is longer than the {line_batch.MAX_LINE_BYTES:,}-byte limit",
        )

    def valid_lines() -> Iterator[tuple[str, str]]:
        for lineno, text in iter_raw_lines(path, on_oversized=oversized):
            if not text.strip():
                continue
            raw = text.encode("utf-8", "surrogateescape")
            try:
                parse_line(kind, raw, file_session)
            except MalformedLine as exc:
                other = next((k for k in others if parses_as(k, raw)), None)
                reason = f"a {other} record, not a {kind} record" if other else str(exc)
                result.refuse(f"{path.name}:{lineno}", reason, other)
                continue
            result.valid += 1
            yield path.name, text

    try:
        result.imported = archive_source_lines(profile, kind, valid_lines(), now)
    except OSError as exc:
        if exc.filename is not None and Path(exc.filename) != path:
            raise  # a warehouse write failed: not the file's fault
        raise WarehouseError(f"cannot import {path}: {exc.strerror or exc}") from exc
    return result


@dataclass
class _Partition:
    parts: set[str] = field(default_factory=set)  # part files whose keys are in ``keys``
    keys: set[str] = field(default_factory=set)


class _Writer:
    """Collects lines into batches; each batch is keyed, dated and written as one part per day partition.

    Batches are archived in the background, one at a time, while the caller collects the next one. Within that,
    the steps of consecutive batches overlap: a worker hashes a batch's lines (Python, holding the GIL) while
    DuckDB dates them (C, without the GIL) and another worker writes the previous batch's parts. Partition writes
    stay one at a time and in batch order.
    """

    def __init__(
        self,
        profile: AgentProfile,
        kind: str,
        archived_at: datetime,
        result: RangeArchive | None = None,
        on_archived: Archived | None = None,
    ) -> None:
        self.profile, self.kind, self.archived_at = profile, kind, archived_at
        self.result = result if result is not None else RangeArchive()  # undated lines are noted here
        self.on_archived = on_archived
        self.done = 0  # ranges whose lines were all added (``archive_file_ranges``)
        self.per_session_log = kind in SESSION_LOGS
        self.sources: dict[str, int] = {}  # source file names of the pending batch
        self.lines: list[bytes] = []  # pending lines given as text, encoded
        self.line_sources: list[int] = []
        self.pieces: list[tuple[np.ndarray, Lines, np.ndarray]] = []  # pending lines read from files
        self.buffered_rows = 0
        self.buffered_bytes = 0
        self.known: OrderedDict[str, _Partition] = OrderedDict()
        self.added = 0
        self.con: duckdb.DuckDBPyConnection | None = None  # classifies lines (the archiving thread's)
        self.write_con: duckdb.DuckDBPyConnection | None = None  # writes parts (the writing thread's)
        # At most one batch being archived, one being hashed for it and one being written: three workers.
        self.pool = ThreadPoolExecutor(max_workers=3, thread_name_prefix="warehouse")
        self.archiving: Future[None] | None = None
        self.writing: Future[int] | None = None

    def __enter__(self) -> _Writer:
        return self

    def __exit__(self, *exc_info: object) -> None:
        try:  # let work in flight finish; close() raises its errors, if any
            if self.archiving is not None:
                self.archiving.exception()
            if self.writing is not None:
                self.writing.exception()
        finally:
            self.pool.shutdown()
            for con in (self.con, self.write_con):
                if con is not None:
                    con.close()

    def add_line(self, source: str, line: str) -> None:
        if not line.strip():
            return  # blank lines are not archived
        # Surrogate escapes turn back into the log's original bytes, which are what the key hashes.
        data = line.encode("utf-8", "surrogateescape")
        if len(data) > line_batch.MAX_LINE_BYTES:
            reason = f"line of {len(data):,} bytes is longer than the {line_batch.MAX_LINE_BYTES:,}-byte limit"
            log.warning("%s: %s; it was not archived", source, reason)
            self.result.note(source, 0, f"{reason}; it was not archived")
            return
        self.lines.append(data)
        self.line_sources.append(self.sources.setdefault(source, len(self.sources)))
        self.buffered_rows += 1
        self.buffered_bytes += len(data)
        if self.buffered_rows >= BATCH_ROWS or self.buffered_bytes >= BATCH_BYTES:
            self.flush()

    def add_block(self, block: _Block) -> None:
        """Raw lines read from files (blank ones included; they are skipped when read)."""
        lines = block.lines
        if self.buffered_bytes and self.buffered_bytes + lines.nbytes > BATCH_BYTES:
            self.flush()  # a block of a large file makes a batch of its own rather than be copied into one
        ids = np.array([self.sources.setdefault(source, len(self.sources)) for source in block.sources], np.int32)
        self.pieces.append((np.repeat(ids, block.counts), lines, block.numbers))
        self.buffered_rows += len(lines)
        self.buffered_bytes += lines.nbytes
        if self.buffered_rows >= BATCH_ROWS or self.buffered_bytes >= BATCH_BYTES:
            self.flush()

    def close(self) -> int:
        self.flush()
        self._wait_for_archiving()
        self._wait_for_write()
        return self.added

    def flush(self) -> None:
        sources = tuple(self.sources)
        batches = []
        if self.pieces:
            batches.append(LineBatch.from_pieces(self.pieces, sources))
        if self.lines:
            batches.append(LineBatch.from_lines(self.lines, self.line_sources, sources))
        self.sources, self.lines, self.line_sources, self.pieces = {}, [], [], []
        self.buffered_rows = self.buffered_bytes = 0
        parts = [part for batch in batches for part in batch.slices(BATCH_ROWS)]
        for k, part in enumerate(parts):
            # Every line added so far is in these parts: once the last is written, so are the ranges done so far.
            self._archive(part, self.done if k == len(parts) - 1 else None)

    def _archive(self, batch: LineBatch, done: int | None = None) -> None:
        self._wait_for_archiving()  # one batch at a time in the background keeps memory bounded
        self.archiving = self.pool.submit(self._archive_in_background, batch, done)

    def _wait_for_archiving(self) -> None:
        if self.archiving is not None:
            archiving, self.archiving = self.archiving, None
            archiving.result()

    def _archive_in_background(self, batch: LineBatch, done: int | None) -> None:
        hashing = self.pool.submit(batch.keys, self.kind)
        if len(batch) < FAST_PATH_MIN_LINES:  # too few lines to be worth starting DuckDB: read them in Python
            keys = hashing.result()
            rows = self._slow_rows(batch, keys, range(len(batch)))
        else:
            if self.con is None:
                self.con = connect()
            fields = classify(self.con, batch.raw)
            keys = hashing.result()
            rows = _Rows.concat(
                [
                    self._fast_rows(batch, keys, fields),
                    self._slow_rows(batch, keys, np.flatnonzero(~fields.fast).tolist()),
                ]
            )
        self._wait_for_write()
        if len(rows):  # a batch of blank lines has none
            self.writing = self.pool.submit(self._write_days, rows, keys, done)
        elif done:  # the batches before it are written
            self._archived(done)

    def _wait_for_write(self) -> None:
        if self.writing is not None:
            writing, self.writing = self.writing, None
            self.added += writing.result()

    def _fast_rows(self, batch: LineBatch, keys: list[str], fields: EventFields) -> _Rows:
        index = np.flatnonzero(fields.fast)
        source_ids = batch.source_ids[index]
        file_session = texts(self._file_session(s) for s in batch.sources)[source_ids]
        own_session = fields.session_id[index]
        return _Rows(
            seq=index.astype(np.int64),
            line_key=texts(keys)[index],
            source=texts(batch.sources)[source_ids],
            session_id=np.where(np.equal(own_session, None), file_session, own_session),
            event_ts=fields.event_ts[index],
            raw=fields.text[index],  # valid UTF-8, so stored as it is
            day=fields.day[index],
        )

    def _slow_rows(self, batch: LineBatch, keys: list[str], lines: Iterable[int]) -> _Rows:
        """Rows for the given lines of a batch, each read on its own with ``json.loads`` (any shape of line)."""
        rows = []
        for i in lines:
            raw = batch.line(i).decode("utf-8", "surrogateescape")
            if not raw.strip():
                continue  # blank lines are not archived
            source = batch.sources[batch.source_ids[i]]
            ts, session_id, problem = _event_fields(raw)
            if session_id is None:
                session_id = self._file_session(source)
            if ts is None:  # archived as it is, and said: archiving runs one batch at a time, so no lock
                self.result.undated += 1
                self.result.note(source, int(batch.line_numbers[i]), f"archived as raw text: {problem}")
            day = ts.date().isoformat() if ts is not None else UNKNOWN_DAY
            rows.append((i, keys[i], source, session_id, to_naive_utc(ts), _storable(raw), day))
        seq, line_keys, sources, sessions, stamps, raws, days = zip(*rows, strict=True) if rows else [()] * 7
        return _Rows(
            np.array(seq, dtype=np.int64),
            texts(line_keys),
            texts(sources),
            texts(sessions),
            timestamps(stamps),
            texts(raws),
            texts(days),
        )

    def _file_session(self, source: str) -> str | None:
        """Per-session logs: a line without its own sessionId belongs to the session its file is named after."""
        if self.per_session_log and source.endswith(".jsonl"):
            return source[: -len(".jsonl")]
        return None

    def _archived(self, done: int) -> None:
        if self.on_archived is not None:
            self.on_archived(done, self.result)

    def _write_days(self, rows: _Rows, keys: list[str], done: int | None = None) -> int:
        """Writes a batch's rows, one part per day; ``keys`` are the batch's line keys, indexed by ``seq``. Then the
        first ``done`` ranges are archived (writes go one at a time, in batch order)."""
        written = self._write_batch(rows, keys)
        if done:
            self._archived(done)
        return written

    def _write_batch(self, rows: _Rows, keys: list[str]) -> int:
        # Rows in event-time order, ties in the order the lines came, undated rows last in that order: each day's
        # rows are then one slice, already in the order its part keeps them.
        order = np.lexsort((rows.seq, _undated_last(rows.event_ts)))
        if not np.array_equal(order, np.arange(len(order))):
            rows = rows.take(order)
        seq = rows.seq
        if not np.array_equal(seq, np.arange(len(keys))):
            keys = [keys[i] for i in seq.tolist()]
        days = rows.day
        starts = [0, *(np.flatnonzero(days[1:] != days[:-1]) + 1).tolist()]
        ends = [*starts[1:], len(days)]
        return sum(
            self._write_partition(days[a], rows.take(slice(a, b)), keys[a:b]) for a, b in zip(starts, ends, strict=True)
        )

    def _write_partition(self, day: str, rows: _Rows, keys: list[str]) -> int:
        pdir = _partition_dir(self.profile, self.kind, day)
        # The lock makes "read the keys, then write the rows they do not cover" atomic across processes.
        with path_lock(_lock_path(self.profile, self.kind)):
            known = self._known(day, pdir)
            batch_keys = set(keys)
            if len(batch_keys) == len(keys) and known.keys.isdisjoint(batch_keys):
                known.keys |= batch_keys  # the usual case, all new: checked in bulk
            else:
                fresh = []
                for i, key in enumerate(keys):
                    if key not in known.keys:
                        known.keys.add(key)
                        fresh.append(i)
                if not fresh:
                    return 0
                rows = rows.take(np.array(fresh, dtype=np.int64))
            n = len(rows)
            values = {
                "line_key": rows.line_key,
                "kind": texts([self.kind] * n),
                "source": rows.source,
                "session_id": rows.session_id,
                "event_ts": rows.event_ts,
                "raw": rows.raw,
                "archived_at": timestamps([to_naive_utc(self.archived_at)] * n),
            }
            name = f"part-{self.archived_at:%Y%m%dT%H%M%S}-{uuid.uuid4().hex[:12]}.parquet"
            pdir.mkdir(parents=True, exist_ok=True)
            if self.write_con is None:
                self.write_con = parquet_connection()
            with atomic_path(pdir / name) as tmp:
                columns = {column: (sql_type, values[column]) for column, sql_type in SCHEMA.items()}
                write_parquet(tmp, columns, options=", COMPRESSION zstd", conn=self.write_con)
            known.parts.add(name)
            return n

    def _known(self, day: str, pdir: Path) -> _Partition:
        known = self.known.pop(day, None) or _Partition()
        self.known[day] = known
        while len(self.known) > CACHED_PARTITIONS:
            self.known.popitem(last=False)
        # Parts written since we last looked (by another process, or not yet read) add their keys.
        for part in _parts(pdir):
            if part.name not in known.parts:
                known.keys.update(read_columns(part, ["line_key"])["line_key"].tolist())
                known.parts.add(part.name)
        return known


def _event_fields(raw: str) -> tuple[datetime | None, str | None, str]:
    """The event time and session id of a line; without a time, why it has none."""
    try:
        obj = parse_json_line(raw)
    except MalformedLine as exc:
        return None, None, str(exc)
    if not isinstance(obj, dict):
        return None, None, f"a record must be a JSON object, got {type(obj).__name__}"
    session_id = obj.get("sessionId") if isinstance(obj.get("sessionId"), str) else None
    if session_id is not None:
        # A JSON escape can make a lone surrogate ("\ud800"), which no UTF-8 column holds: kept as its escape text.
        session_id = session_id.encode("utf-8", "backslashreplace").decode("utf-8")
    try:
        return parse_ts(obj.get("timestamp")), session_id, ""
    except (ValueError, TypeError, OverflowError):
        return None, session_id, "no readable ISO-8601 'timestamp'"


def to_naive_utc(ts: datetime | None) -> datetime | None:
    """An aware time as the naive UTC time a part's timestamp columns are written from."""
    return None if ts is None else utc(ts).replace(tzinfo=None)


def _undated_last(event_ts: np.ndarray) -> np.ndarray:
    """Sort keys of event times (microseconds), a missing time after every other."""
    keys = event_ts.astype("datetime64[us]").view(np.int64).copy()
    keys[np.isnat(event_ts)] = np.iinfo(np.int64).max
    return keys


def _storable(raw: str) -> str:
    """Bytes that were not UTF-8 in the log are kept visibly as ``\\xNN`` escapes (Parquet strings are UTF-8)."""
    try:
        raw.encode("utf-8")
        return raw
    except UnicodeEncodeError:
        return raw.encode("utf-8", "surrogateescape").decode("utf-8", "backslashreplace")


# --- reading -----------------------------------------------------------------------------------------------


def days(profile: AgentProfile, kind: str) -> list[date]:
    """The UTC days that hold archived lines of ``kind`` (the ``unknown`` partition is not a day)."""
    base = profile.warehouse_dir / _check_kind(kind)
    if not base.is_dir():
        return []
    found = []
    for d in base.iterdir():
        if d.is_dir() and d.name.startswith("date=") and d.name != f"date={UNKNOWN_DAY}" and _parts(d):
            try:
                found.append(date.fromisoformat(d.name[len("date=") :]))
            except ValueError:
                continue
    return sorted(found)


def read_day(profile: AgentProfile, kind: str, day: date) -> list[dict[str, Any]]:
    """The archived records of one UTC day, parsed, sorted by event time."""
    return _records(_read_partition(profile, _check_kind(kind), day.isoformat(), ["event_ts", "raw"]))


def read_window(profile: AgentProfile, kind: str, start: datetime, end: datetime) -> list[dict[str, Any]]:
    """The archived records with ``start <= event time < end``, parsed, sorted by event time."""
    return _records(_window_table(profile, kind, start, end, ["event_ts", "raw"]))


def read_window_lines(profile: AgentProfile, kind: str, start: datetime, end: datetime) -> list[tuple[str, str]]:
    """``(source file name, raw line)`` of the archived lines with ``start <= event time < end``, by event time (ties
    in the order they were archived), for a reader that applies the log's own record rules to them."""
    table = _by_event_time(_window_table(profile, kind, start, end, ["event_ts", "source", "raw"]))
    return list(zip(table["source"].tolist(), table["raw"].tolist(), strict=True))


def _window_table(
    profile: AgentProfile, kind: str, start: datetime, end: datetime, columns: list[str]
) -> dict[str, np.ndarray]:
    start, end = utc(start), utc(end)
    tables = []
    day = start.date()
    last = (end - timedelta(microseconds=1)).date()
    while end > start and day <= last:
        tables.append(
            _read_partition(
                profile,
                _check_kind(kind),
                day.isoformat(),
                columns,
                "event_ts >= ? AND event_ts < ?",
                (start, end),
            )
        )
        day += timedelta(days=1)
    return _concat(tables, columns)


def read_unknown(profile: AgentProfile, kind: str) -> list[str]:
    """Raw lines archived without a readable timestamp (partition ``date=unknown``)."""
    return _read_partition(profile, _check_kind(kind), UNKNOWN_DAY, ["raw"])["raw"].tolist()


def iter_rows(profile: AgentProfile, kind: str) -> Iterator[dict[str, Any]]:
    """Every archived row of ``kind`` with all its columns, one part file at a time (for audits and exports)."""
    base = profile.warehouse_dir / _check_kind(kind)
    if not base.is_dir():
        return
    for pdir in sorted(d for d in base.iterdir() if d.is_dir() and d.name.startswith("date=")):
        for part in _parts(pdir):
            yield from read_parquet(part, list(SCHEMA))


def _read_partition(
    profile: AgentProfile, kind: str, day: str, columns: list[str], where: str = "", params: tuple[Any, ...] = ()
) -> dict[str, np.ndarray]:
    """``columns`` of a partition's rows (those ``where`` holds), part after part in name order, each in its order."""
    parts = _parts(_partition_dir(profile, kind, day))
    return _concat([read_columns(p, columns, where, params) for p in parts], columns)


def _concat(tables: list[dict[str, np.ndarray]], columns: list[str]) -> dict[str, np.ndarray]:
    if not tables:
        return {c: texts([]) for c in columns}
    return {c: np.ma.concatenate([t[c] for t in tables]) if len(tables) > 1 else tables[0][c] for c in columns}


def _by_event_time(table: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """The rows sorted by event time, ties in the order they come (a missing time last)."""
    ts = table["event_ts"]
    if not len(ts):
        return table
    keys = np.ma.filled(ts.astype("datetime64[us]").view(np.int64), np.iinfo(np.int64).max)
    order = np.argsort(keys, kind="stable")
    return {c: v[order] for c, v in table.items()}


def _records(table: dict[str, np.ndarray]) -> list[dict[str, Any]]:
    out = []
    for raw in _by_event_time(table)["raw"].tolist():
        try:
            out.append(parse_json_line(raw))
        except MalformedLine:  # a dated row is valid JSON when written; guard against hand-edited parts
            out.append({"raw": raw})
    return out


# --- paths -------------------------------------------------------------------------------------------------


def _check_kind(kind: str) -> str:
    if not isinstance(kind, str) or not _KIND.fullmatch(kind):
        raise WarehouseError(
            f"invalid warehouse kind {kind!r}: use a log kind such as tool-call or conversation "
            "(lower-case letters, digits and '-')"
        )
    return kind


def _partition_dir(profile: AgentProfile, kind: str, day: str) -> Path:
    return profile.warehouse_dir / kind / f"date={day}"


def _lock_path(profile: AgentProfile, kind: str) -> Path:
    return profile.warehouse_dir / ".locks" / f"{kind}.lock"


def _parts(pdir: Path) -> list[Path]:
    return sorted(pdir.glob("part-*.parquet")) if pdir.is_dir() else []


def temp_files(profile: AgentProfile) -> list[Path]:
    """Temp files of part writes (``.part-*.parquet.<random>.tmp``, and ``.part-*.parquet.tmp`` of earlier versions):
    a writer killed before its rename leaves one behind."""
    base = profile.warehouse_dir
    if not base.is_dir():
        return []
    return sorted(base.glob("*/date=*/.part-*.parquet*.tmp"))
