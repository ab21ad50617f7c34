"""The log warehouse: day-partitioned Parquet copies of log lines, kept after retention trims the JSONL.

Layout under ``profile.warehouse_dir``: ``<kind>/date=YYYY-MM-DD/part-*.parquet``, partitioned by each line's
own event timestamp (UTC day). A line whose timestamp cannot be read goes to ``<kind>/date=unknown`` with a
null ``event_ts``: it is kept, never dropped (spec "Pass 0 — Log retention": history outlives retention).

Writes are idempotent. Every row carries ``line_key`` = sha256(kind, source file name, raw line); a key already
present in its partition is not written again, so re-archiving the same lines (a retention run that crashed
between archiving and trimming, a repeated ``dream import-logs``) adds no rows. A consequence worth knowing:
two byte-identical lines of the same source file are one row.

Memory stays bounded: lines are buffered up to ``BATCH_ROWS`` rows or ``BATCH_BYTES`` bytes and then written,
so a 1 GiB prefix streams through. The keys of the partitions being written are held as a set (about 100 bytes
per row of those partitions), for at most ``CACHED_PARTITIONS`` partitions at a time.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import uuid
from collections import OrderedDict
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from datetime import date, datetime, timedelta
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from dream_assets.model import parse_ts, utc
from dream_assets.profile import SESSION_LOGS, AgentProfile
from dream_assets.store.locks import path_lock

BATCH_ROWS = 50_000
BATCH_BYTES = 16 << 20
CACHED_PARTITIONS = 4
UNKNOWN_DAY = "unknown"

SCHEMA = pa.schema([
    pa.field("line_key", pa.string(), nullable=False),
    pa.field("kind", pa.string(), nullable=False),
    pa.field("source", pa.string(), nullable=False),
    pa.field("session_id", pa.string()),
    pa.field("event_ts", pa.timestamp("us", tz="UTC")),
    pa.field("raw", pa.string(), nullable=False),
    pa.field("archived_at", pa.timestamp("us", tz="UTC"), nullable=False),
])

_KIND = re.compile(r"^[a-z][a-z0-9-]{0,63}$")


class WarehouseError(ValueError):
    pass


def line_key(kind: str, source: str, raw: str) -> str:
    """The identity of one archived line: the same line of the same file always gets the same key."""
    h = hashlib.sha256()
    h.update(kind.encode())
    h.update(b"\0")
    h.update(source.encode("utf-8", "surrogateescape"))
    h.update(b"\0")
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
    writer = _Writer(profile, _check_kind(kind), utc(now))
    for source, line in items:
        if line.strip():
            writer.add(source, line)
    return writer.close()


def import_jsonl(profile: AgentProfile, kind: str, path: Path, now: datetime) -> int:
    """Archive a historical JSONL file (``dream import-logs``), streamed. Returns the rows added."""
    # Imported here: logs.py archives through this module, so a top-level import would be circular.
    from dream_assets.store.logs import iter_raw_lines

    path = Path(path)
    if not path.is_file():
        raise WarehouseError(f"cannot import {path}: no such file")
    return archive_lines(profile, kind, path.name, (text for _, text in iter_raw_lines(path)), now)


@dataclass
class _Partition:
    parts: set[str] = field(default_factory=set)   # part files whose keys are in ``keys``
    keys: set[str] = field(default_factory=set)


class _Writer:
    def __init__(self, profile: AgentProfile, kind: str, archived_at: datetime) -> None:
        self.profile, self.kind, self.archived_at = profile, kind, archived_at
        self.buffers: dict[str, list[tuple[str, str, str | None, datetime | None, str]]] = {}
        self.buffered_rows = 0
        self.buffered_bytes = 0
        self.known: OrderedDict[str, _Partition] = OrderedDict()
        self.added = 0
        self.per_session_log = kind in SESSION_LOGS

    def add(self, source: str, raw: str) -> None:
        ts, session_id = _event_fields(raw)
        if session_id is None and self.per_session_log and source.endswith(".jsonl"):
            session_id = source[: -len(".jsonl")]   # per-session logs: the file name is the session id
        day = ts.date().isoformat() if ts is not None else UNKNOWN_DAY
        self.buffers.setdefault(day, []).append((line_key(self.kind, source, raw), source, session_id, ts, raw))
        self.buffered_rows += 1
        self.buffered_bytes += len(raw)
        if self.buffered_rows >= BATCH_ROWS or self.buffered_bytes >= BATCH_BYTES:
            self.flush()

    def flush(self) -> None:
        for day, rows in self.buffers.items():
            self.added += self._write_partition(day, rows)
        self.buffers.clear()
        self.buffered_rows = self.buffered_bytes = 0

    def close(self) -> int:
        self.flush()
        return self.added

    def _write_partition(self, day: str, rows: list[tuple[str, str, str | None, datetime | None, str]]) -> int:
        pdir = _partition_dir(self.profile, self.kind, day)
        # The lock makes "read the keys, then write the rows they do not cover" atomic across processes.
        with path_lock(_lock_path(self.profile, self.kind)):
            known = self._known(day, pdir)
            fresh, seen = [], known.keys
            for row in rows:
                if row[0] not in seen:
                    seen.add(row[0])
                    fresh.append(row)
            if not fresh:
                return 0
            if day != UNKNOWN_DAY:
                fresh.sort(key=lambda r: r[3])
            columns = list(zip(*fresh, strict=True))
            table = pa.table({
                "line_key": pa.array(columns[0], pa.string()),
                "kind": pa.array([self.kind] * len(fresh), pa.string()),
                "source": pa.array(columns[1], pa.string()),
                "session_id": pa.array(columns[2], pa.string()),
                "event_ts": pa.array(columns[3], pa.timestamp("us", tz="UTC")),
                "raw": pa.array([_storable(r) for r in columns[4]], pa.string()),
                "archived_at": pa.array([self.archived_at] * len(fresh), pa.timestamp("us", tz="UTC")),
            }, schema=SCHEMA)
            name = f"part-{self.archived_at:%Y%m%dT%H%M%S}-{uuid.uuid4().hex[:12]}.parquet"
            pdir.mkdir(parents=True, exist_ok=True)
            tmp = pdir / f".{name}.tmp"
            try:
                pq.write_table(table, tmp, compression="zstd")
                os.replace(tmp, pdir / name)
            except BaseException:
                tmp.unlink(missing_ok=True)
                raise
            known.parts.add(name)
            return len(fresh)

    def _known(self, day: str, pdir: Path) -> _Partition:
        known = self.known.pop(day, None) or _Partition()
        self.known[day] = known
        while len(self.known) > CACHED_PARTITIONS:
            self.known.popitem(last=False)
        # Parts written since we last looked (by another process, or not yet read) add their keys.
        for part in _parts(pdir):
            if part.name not in known.parts:
                known.keys.update(pq.read_table(part, columns=["line_key"]).column(0).to_pylist())
                known.parts.add(part.name)
        return known


def _event_fields(raw: str) -> tuple[datetime | None, str | None]:
    """The event time and session id of a line, or ``(None, None)`` when it is not a JSON object with a timestamp."""
    try:
        obj = json.loads(raw)
    except ValueError:
        return None, None
    if not isinstance(obj, dict):
        return None, None
    session_id = obj.get("sessionId") if isinstance(obj.get("sessionId"), str) else None
    try:
        return parse_ts(obj.get("timestamp")), session_id
    except (ValueError, TypeError, OverflowError):
        return None, session_id


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
                found.append(date.fromisoformat(d.name[len("date="):]))
            except ValueError:
                continue
    return sorted(found)


def read_day(profile: AgentProfile, kind: str, day: date) -> list[dict[str, Any]]:
    """The archived records of one UTC day, parsed, sorted by event time."""
    table = _read_partition(profile, _check_kind(kind), day.isoformat(), ["event_ts", "raw"])
    return _records(table)


def read_window(profile: AgentProfile, kind: str, start: datetime, end: datetime) -> list[dict[str, Any]]:
    """The archived records with ``start <= event time < end``, parsed, sorted by event time."""
    start, end = utc(start), utc(end)
    if end <= start:
        return []
    tables = []
    day = start.date()
    last = (end - timedelta(microseconds=1)).date()
    while day <= last:
        table = _read_partition(profile, _check_kind(kind), day.isoformat(), ["event_ts", "raw"])
        if table.num_rows:
            ts = table.column("event_ts")
            tables.append(table.filter(pc.and_(pc.greater_equal(ts, pa.scalar(start, ts.type)),
                                               pc.less(ts, pa.scalar(end, ts.type)))))
        day += timedelta(days=1)
    return _records(pa.concat_tables(tables)) if tables else []


def read_unknown(profile: AgentProfile, kind: str) -> list[str]:
    """Raw lines archived without a readable timestamp (partition ``date=unknown``)."""
    table = _read_partition(profile, _check_kind(kind), UNKNOWN_DAY, ["raw"])
    return table.column("raw").to_pylist() if table.num_rows else []


def iter_rows(profile: AgentProfile, kind: str) -> Iterator[dict[str, Any]]:
    """Every archived row of ``kind`` with all its columns, one part file at a time (for audits and exports)."""
    base = profile.warehouse_dir / _check_kind(kind)
    if not base.is_dir():
        return
    for pdir in sorted(d for d in base.iterdir() if d.is_dir() and d.name.startswith("date=")):
        for part in _parts(pdir):
            yield from pq.read_table(part, schema=SCHEMA).to_pylist()


def _read_partition(profile: AgentProfile, kind: str, day: str, columns: list[str]) -> pa.Table:
    parts = _parts(_partition_dir(profile, kind, day))
    if not parts:
        return SCHEMA.empty_table().select(columns)
    return pa.concat_tables([pq.read_table(p, columns=columns, schema=SCHEMA) for p in parts])


def _records(table: pa.Table) -> list[dict[str, Any]]:
    if not table.num_rows:
        return []
    out = []
    for raw in table.sort_by([("event_ts", "ascending")]).column("raw").to_pylist():
        try:
            out.append(json.loads(raw))
        except ValueError:   # a dated row is valid JSON when written; guard against hand-edited parts
            out.append({"raw": raw})
    return out


# --- paths -------------------------------------------------------------------------------------------------

def _check_kind(kind: str) -> str:
    if not isinstance(kind, str) or not _KIND.match(kind):
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
