"""Long-term memory store on DuckDB: the rows of saves, archive/restore/purge, reinforce, and the SQL on them.

Rows only: recall (the BM25 index over the live entries, dream_assets/recall_index.py) follows the rows through a
narrow hook. Every change to a searchable field or to the archive state bumps the row's ``seq`` (a purge leaves a
record with one), and every write of this module tells the connection's row observers
(``StoreConnection.add_row_observer``) what it wrote, so an index of this process is kept in step without this module
knowing it; writes of other processes are read by ``seq`` (``row_events_since``) when the file is opened again.

The rows a search or a save-time comparison reads by id stay in a small cache (``_RowCache``): fetching a few rows by
id costs DuckDB about a millisecond a query at a million entries, more than the rest of a search but the BM25 lookup.
It holds exactly what the file holds: it is emptied whenever the file is opened again (another process may have
written it meanwhile) and when a transaction rolls back, and every write drops the rows it changes.

What a save does (reinforce, extend, create) is decided by the save pipeline (dream_assets/save_pipeline.py); this
class keeps the rows and the SQL it reads (``live_entries``, ``cached_rows``, ``live_texts``) and the writes it makes
(``insert_saved``, ``overwrite``).
"""

from __future__ import annotations

import hashlib
import itertools
import json
import logging
from collections.abc import Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import duckdb
import numpy as np

from dream_assets.model import MemoryEntry, iso, utc, utc_or_now
from dream_assets.options import DreamOptions
from dream_assets.store.connection import StoreConnection
from dream_assets.store.frames import registered, texts, timestamps
from dream_assets.store.recall import SUPERSEDED_BY_KEY, later_version
from dream_assets.store.schema import (
    KEPT_SUMS_SQL,
    ensure_schema,
    fingerprint_sums_sql,
    from_db,
    row_hash_columns_sql,
    to_db,
)
from dream_assets.store.standing import STANDING_METADATA_KEYS
from dream_assets.text.similarity import DuplicateClusters, find_duplicate_clusters

log = logging.getLogger("dream_assets.store.memory")

_COLUMNS = (
    "id, content, category, tags, importance, created_at, updated_at, last_seen_at, "
    "reinforcement_count, metadata, archived_at"
)
_MAX_CATEGORY = 200
_MAX_TAGS = 50
#: Supersession metadata: the archived loser names its winner (and when and why); the winner lists what it superseded
#: (comma-separated ids).
SUPERSEDED_AT_KEY = "supersededAt"
SUPERSESSION_REASON_KEY = "supersessionReason"
SUPERSEDES_KEY = "supersedes"
#: An archived entry brought in by an import, which holds no change row of its archiving: the entry its fact was
#: merged into, and why it was archived (the change log says both for an entry archived here).
MERGED_INTO_KEY = "mergedInto"
ARCHIVED_REASON_KEY = "archivedReason"


class ContentError(ValueError):
    """A memory that cannot be stored as given; the message names the field and the limit."""


class NotFound(KeyError):
    pass


@dataclass(frozen=True)
class SaveResult:
    action: str  # "created" | "reinforced" | "extended"
    entry: MemoryEntry
    matched_id: str | None = None
    similarity: float | None = None
    reason: str | None = None  # why dedup reinforced, extended, or kept apart from matched_id
    #: The change-log cycle of an extend (``dream undo --cycle <it>`` puts the entry back as it was); None otherwise.
    change_cycle: str | None = None
    before: MemoryEntry | None = None  # the entry reinforced or extended, as it was before this save


def _row_to_entry(row: Sequence[Any]) -> MemoryEntry:
    return MemoryEntry(
        id=row[0],
        content=row[1],
        category=row[2],
        tags=tuple(json.loads(row[3])),
        importance=float(row[4]),
        created_at=from_db(row[5]),
        updated_at=from_db(row[6]),
        last_seen_at=from_db(row[7]),  # type: ignore[arg-type]
        reinforcement_count=int(row[8]),
        metadata=json.loads(row[9]),
        archived_at=from_db(row[10]),
    )


_SCAN_JSON = json.JSONDecoder().scan_once


def _json_value(text: str) -> Any:
    """``json.loads`` of the JSON this module writes (no surrounding white space), without the generic entry's
    overhead; anything else goes through ``json.loads``."""
    try:
        value, end = _SCAN_JSON(text, 0)
    except StopIteration:
        return json.loads(text)
    return value if end == len(text) else json.loads(text)


def _entries_of_columns(columns: Sequence[list[Any]]) -> list[MemoryEntry]:
    """``_row_to_entry`` over column lists (in ``_COLUMNS`` order), a column at a time: tags and metadata texts repeat
    across a corpus, so each distinct one is parsed once (every entry still gets its own metadata dict)."""
    ids, contents, categories, tags, importance, created, updated, seen, counts, metadata, archived = columns
    tag_values: dict[str, tuple[str, ...]] = {}
    meta_values: dict[str, dict[str, str]] = {}

    def tags_of(text: str) -> tuple[str, ...]:
        found = tag_values.get(text)
        if found is None:
            found = tag_values[text] = tuple(_json_value(text))
        return found

    def meta_of(text: str) -> dict[str, str]:
        found = meta_values.get(text)
        if found is None:
            found = meta_values[text] = _json_value(text)
        return dict(found)

    def times(values: list[Any]) -> list[Any]:
        return [None if v is None else v.replace(tzinfo=UTC) for v in values]

    return [
        MemoryEntry(i, c, cat, tg, float(imp), cr, up, ls, int(rc), md, ar)
        for i, c, cat, tg, imp, cr, up, ls, rc, md, ar in zip(
            ids,
            contents,
            categories,
            map(tags_of, tags),
            importance,
            times(created),
            times(updated),
            times(seen),
            counts,
            map(meta_of, metadata),
            times(archived),
            strict=True,
        )
    ]


def _fingerprint_part(entry: MemoryEntry) -> tuple[int, int]:
    """The row's part of the corpus fingerprint, stored with it (``fp_h1``, ``fp_h2``): the two 64-bit halves of the
    hash of its id, content, category and tags (store/schema.py ``ROW_HASH_SQL``, computed here). Archived rows
    keep theirs too; the fingerprint sums the live rows only."""
    fields = (entry.id, entry.content, entry.category, json.dumps(list(entry.tags)))
    text = "|".join(f"{len(f.encode())}:{f}" for f in fields)
    digest = hashlib.sha256(text.encode()).digest()
    return int.from_bytes(digest[:8], "big"), int.from_bytes(digest[8:16], "big")


def _rows_by_id(conn: duckdb.DuckDBPyConnection, ids: Sequence[str]) -> list[tuple[Any, ...]]:
    """The rows of ``ids`` (archived ones too: a filter on another column next to the id list makes DuckDB scan the
    whole table, ten times slower at a million rows, so callers drop archived rows themselves). A few ids go in as an
    IN list of parameters: a third cheaper than the list parameter for one to three ids at a million rows, and still
    a little cheaper up to ``_ID_LIST_MAX``; more go in as one list."""
    if not ids:
        return []
    if len(ids) <= _ID_LIST_MAX:
        marks = ", ".join("?" * len(ids))
        return conn.execute(f"SELECT {_COLUMNS} FROM memories WHERE id IN ({marks})", list(ids)).fetchall()
    return conn.execute(f"SELECT {_COLUMNS} FROM memories WHERE id IN (SELECT unnest(?::VARCHAR[]))", [ids]).fetchall()


_ID_LIST_MAX = 16


#: Rows the row cache of a file holds at most (a few MB): the hits of recent searches and save-time comparisons.
ROW_CACHE_SIZE = 2048


class _RowCache:
    """Rows of ``memories`` by id, as this process last read them, so the hits a search or a save-time comparison
    read a moment ago are not fetched from the file again (an id lookup costs DuckDB about 0.1 ms a row and 1 ms a
    query at a million rows). Exact, not approximate: no other process writes the file while this one has it open
    (store/connection.py), so the cache is emptied whenever the file is opened again and when a transaction rolls
    back, and every write of this module drops the rows it changes (``drop``) before it changes them. Holds at most
    ``ROW_CACHE_SIZE`` rows, the oldest read leaving first."""

    def __init__(self, size: int = ROW_CACHE_SIZE) -> None:
        self.size = size
        self._rows: dict[str, tuple[Any, ...]] = {}
        self.last_read = 0  # rows the latest ``rows_by_id`` read from the file

    def __len__(self) -> int:
        return len(self._rows)

    def rows_by_id(self, conn: duckdb.DuckDBPyConnection, ids: Sequence[str]) -> list[tuple[Any, ...]]:
        """``_rows_by_id`` for the ids this cache does not hold, the others from the cache (in no particular
        order)."""
        found, missing = [], []
        for mid in ids:
            row = self._rows.get(mid)
            if row is None:
                missing.append(mid)
            else:
                found.append(row)
        self.last_read = 0
        if missing:
            read = _rows_by_id(conn, missing)
            self.last_read = len(read)
            for row in read:
                self._rows[row[0]] = row
            excess = len(self._rows) - self.size
            if excess > 0:
                for mid in list(itertools.islice(self._rows, excess)):
                    del self._rows[mid]
            found += read
        return found

    def drop(self, ids: Iterable[str]) -> None:
        for mid in ids:
            self._rows.pop(mid, None)

    def on_open(self, _conn: duckdb.DuckDBPyConnection) -> None:
        self._rows.clear()  # the file may have been written by another process since this one last had it

    def clear(self) -> None:
        self._rows.clear()


_NO_LIMIT = 2**62
#: Entries a bulk housekeeping write (importance decay) changes per transaction: about 25 ms of the store's CPU each
#: (2,000 took 110 ms at 100k entries, then the longest session of a cycle).
WRITE_CHUNK = 500
#: A category as its labels: split on "/", empty parts dropped (langgraph_store.namespace_of in SQL).
_CATEGORY_LABELS_SQL = "list_filter(string_split(category, '/'), lambda x: x <> '')"
_LIVE_ROWS_SQL = (
    "SELECT id, content, category, tags, metadata, seq FROM memories WHERE archived_at IS NULL AND {where} "
    "ORDER BY seq LIMIT ?"
)


def top_seq(conn: duckdb.DuckDBPyConnection) -> int:
    """The highest ``seq`` of the file: rows and purge records."""
    return int(
        conn.execute(
            "SELECT greatest((SELECT coalesce(max(seq), 0) FROM memories), "
            "(SELECT coalesce(max(seq), 0) FROM memory_purges))"
        ).fetchone()[0]  # type: ignore[index]
    )


def live_index_rows(
    conn: duckdb.DuckDBPyConnection, *, after: int | None = None, top: int | None = None, limit: int = _NO_LIMIT
) -> dict[str, Any]:
    """Columns ``id``, ``content``, ``category``, ``tags``, ``metadata`` and ``seq`` (NumPy arrays) of the live rows
    with ``after < seq <= top`` (either bound left out: none), in ``seq`` order, at most ``limit``: what a recall
    index is built from."""
    where, params = ["TRUE"], []
    if after is not None:
        where.append("seq > ?")
        params.append(after)
    if top is not None:
        where.append("seq <= ?")
        params.append(top)
    if len(where) > 1:
        where = where[1:]
    return conn.execute(_LIVE_ROWS_SQL.format(where=" AND ".join(where)), [*params, limit]).fetchnumpy()


def row_events_since(conn: duckdb.DuckDBPyConnection, seq: int) -> list[tuple[int, tuple[Any, ...]]]:
    """The changes of the file after ``seq``, in sequence order: ``(seq, (id, content, category, tags, archived_at,
    metadata))`` for a row changed (written, archived, restored) and ``(seq, (id,))`` for a row purged (``tags`` and
    ``metadata`` as the JSON text the row holds). In order: an entry purged and later put back (an undone purge) must
    end up as its row says."""
    rows = conn.execute(
        "SELECT id, content, category, tags, archived_at, metadata, seq FROM memories WHERE seq > ? ORDER BY seq", [seq]
    ).fetchall()
    purged = conn.execute("SELECT id, seq FROM memory_purges WHERE seq > ? ORDER BY seq", [seq]).fetchall()
    return sorted(
        [(r[6], r[:6]) for r in rows] + [(at, (mid,)) for mid, at in purged],
        key=lambda ev: ev[0],
    )


def normalise_tags(tags: Iterable[str]) -> tuple[str, ...]:
    """Tags are a set: trimmed, de-duplicated, sorted (so the corpus fingerprint does not see their order)."""
    return tuple(sorted({str(t).strip() for t in tags if str(t).strip()}))


def _observed(entry: MemoryEntry) -> tuple[Any, ...]:
    """What the rows' observers (the recall index, the embeddings cache) hold of an entry: its searchable fields,
    whether it is archived, and whether it says it is a later version of a fact (store/recall.py; its metadata can
    make it a user correction). A write that changes any of it bumps the row's ``seq``."""
    return (
        entry.content,
        entry.category,
        entry.tags,
        entry.archived_at,
        later_version(entry.content, entry.category, entry.tags, entry.metadata),
    )


def _row_values(entry: MemoryEntry) -> list[Any]:
    """Every stored column of ``entry`` after its id, in the table's order, as the database takes them."""
    return [
        entry.content,
        entry.category,
        json.dumps(list(entry.tags)),
        entry.importance,
        to_db(entry.created_at),
        to_db(entry.updated_at),
        to_db(entry.last_seen_at),
        entry.reinforcement_count,
        json.dumps(entry.metadata, sort_keys=True),
        to_db(entry.archived_at),
    ]


def _bulk_insert(conn: duckdb.DuckDBPyConnection, entries: Sequence[MemoryEntry]) -> int:
    """Insert validated new rows in one statement, each with its own sequence number in order; returns the last."""
    start = int(conn.execute("SELECT nextval('row_seq')").fetchall()[0][0])
    if len(entries) > 1:  # reserve a block of sequence numbers for the batch
        conn.execute(f"SELECT nextval('row_seq') FROM range({len(entries) - 1})").fetchall()
    columns = {
        "id": texts(e.id for e in entries),
        "content": texts(e.content for e in entries),
        "category": texts(e.category for e in entries),
        "tags": texts(json.dumps(list(e.tags)) for e in entries),
        "importance": np.array([e.importance for e in entries], dtype=np.float64),
        "created_at": timestamps(to_db(e.created_at) for e in entries),
        "updated_at": timestamps(to_db(e.updated_at) for e in entries),
        "last_seen_at": timestamps(to_db(e.last_seen_at) for e in entries),
        "reinforcement_count": np.array([e.reinforcement_count for e in entries], dtype=np.int32),
        "metadata": texts(json.dumps(e.metadata, sort_keys=True) for e in entries),
        "archived_at": timestamps(to_db(e.archived_at) for e in entries),
        "seq": np.arange(start, start + len(entries), dtype=np.int64),
    }
    with registered(conn, "_incoming", columns):
        conn.execute(
            f"INSERT INTO memories ({_COLUMNS}, seq, fp_h1, fp_h2) "
            f"SELECT {_COLUMNS}, seq, {row_hash_columns_sql('_incoming')}"
        )
    return start + len(entries) - 1


def _row_cache(conn: StoreConnection) -> _RowCache:
    """The row cache of this process on the file of ``conn``: emptied whenever the file is opened again (another
    process may have written it meanwhile) and when a transaction rolls back (the rows may be ones it wrote)."""
    cache = getattr(conn, "_row_cache", None)
    if cache is None:
        cache = _RowCache()
        conn.add_open_hook(ensure_schema)
        conn.add_open_hook(cache.on_open)
        conn.add_rollback_hook(cache.clear)
        conn._row_cache = cache  # type: ignore[attr-defined]
    return cache


class MemoryStore:
    """The rows of ``memories`` and the SQL on them. What follows the rows in memory (the recall index,
    dream_assets/recall_index.py) observes them through the connection (``StoreConnection.add_row_observer``): every
    write tells the observers what it wrote (``_live``, ``_gone``, ``_written``), so this class imports none of them."""

    def __init__(self, conn: StoreConnection, options: DreamOptions) -> None:
        self._conn = conn
        self._options = options
        self._rows = _row_cache(conn)
        #: Rows the reads of this store brought out of the file: what a read costs, whatever the machine's load.
        self.rows_read = 0
        # New rows of a ``batched`` block not yet inserted (id -> entry, in save order); None outside one.
        self._pending: dict[str, MemoryEntry] | None = None

    # ------------------------------------------------------------------ validation
    def validate(
        self, content: str, category: str, tags: Sequence[str], importance: float, metadata: Mapping[str, str]
    ) -> tuple[str, str, tuple[str, ...], float, dict[str, str]]:
        if not isinstance(content, str) or not content.strip():
            raise ContentError("memory content is empty: field 'content' must hold the fact to remember")
        if len(content) > self._options.MaxContentChars:
            raise ContentError(
                f"memory content is {len(content)} characters, over the limit of {self._options.MaxContentChars} "
                "(option MaxContentChars): split it into several memories"
            )
        category = (category or "general").strip()
        if len(category) > _MAX_CATEGORY or any(ord(c) < 32 for c in category):
            raise ContentError(
                f"memory category {category[:40]!r} must be at most {_MAX_CATEGORY} printable characters"
            )
        tags = normalise_tags(tags)
        if len(tags) > _MAX_TAGS:
            raise ContentError(f"memory has {len(tags)} tags; at most {_MAX_TAGS} are accepted")
        try:
            importance = float(importance)
        except (TypeError, ValueError):
            raise ContentError(f"memory importance {importance!r} must be a number between 0 and 1") from None
        if not 0.0 <= importance <= 1.0:
            raise ContentError(f"memory importance {importance} must be between 0 and 1")
        if not all(isinstance(k, str) and isinstance(v, str) for k, v in metadata.items()):
            raise ContentError("memory metadata must map strings to strings")
        return content.strip(), category, tags, importance, dict(metadata)

    def _next_seq(self, conn: duckdb.DuckDBPyConnection) -> int:
        seq = int(conn.execute("SELECT nextval('row_seq')").fetchone()[0])  # type: ignore[index]
        return seq

    def _validated(self, entry: MemoryEntry) -> MemoryEntry:
        content, category, tags, importance, meta = self.validate(
            entry.content, entry.category, entry.tags, entry.importance, entry.metadata
        )
        return entry.with_(content=content, category=category, tags=tags, importance=importance, metadata=meta)

    # ------------------------------------------------------------------ reads
    def get(self, entry_id: str, *, include_archived: bool = True) -> MemoryEntry | None:
        with self._conn.session() as conn:
            row = conn.execute(f"SELECT {_COLUMNS} FROM memories WHERE id = ?", [entry_id]).fetchone()
        if row is None:
            return None
        self.rows_read += 1
        entry = _row_to_entry(row)
        if entry.is_archived and not include_archived:
            return None
        return entry

    def get_many(self, ids: Iterable[str]) -> dict[str, MemoryEntry]:
        ids = list(dict.fromkeys(ids))
        if not ids:
            return {}
        with self._conn.session() as conn:
            rows = conn.execute(f"SELECT {_COLUMNS} FROM memories WHERE id IN (SELECT unnest(?))", [ids]).fetchall()
        self.rows_read += len(rows)
        return {r[0]: _row_to_entry(r) for r in rows}

    def live_page(
        self, *, labels: Sequence[str] = (), limit: int, offset: int = 0, after: tuple[datetime, str] | None = None
    ) -> list[MemoryEntry]:
        """Live entries whose category, split on ``/`` (empty parts dropped), begins with ``labels``, the most recently
        updated first (ties by id): ``offset`` of them skipped, at most ``limit`` returned, and with ``after`` (the
        ``(updated_at, id)`` of the last entry of a previous page) only those after it. The store reads the page
        alone (LIMIT and OFFSET in the query), so its cost is bounded by the page, not by the corpus."""
        if limit <= 0:
            return []
        where, params = ["archived_at IS NULL"], []
        if labels:
            where.append(f"{_CATEGORY_LABELS_SQL}[1:{len(labels)}] = ?::VARCHAR[]")
            params.append(list(labels))
        if after is not None:
            where.append("(updated_at < ? OR (updated_at = ? AND id > ?))")
            params += [to_db(after[0]), to_db(after[0]), after[1]]
        with self._conn.session() as conn:
            rows = conn.execute(
                f"SELECT {_COLUMNS} FROM memories WHERE {' AND '.join(where)} "
                "ORDER BY updated_at DESC, id LIMIT ? OFFSET ?",
                [*params, int(limit), max(0, int(offset))],
            ).fetchall()
        self.rows_read += len(rows)
        return [_row_to_entry(r) for r in rows]

    def live_categories(self) -> list[str]:
        """The distinct categories of the live entries, sorted (one query: the rows read are the categories)."""
        with self._conn.session() as conn:
            rows = conn.execute(
                "SELECT DISTINCT category FROM memories WHERE archived_at IS NULL ORDER BY category"
            ).fetchall()
        self.rows_read += len(rows)
        return [r[0] for r in rows]

    def list_live(self) -> list[MemoryEntry]:
        return self._list("archived_at IS NULL")

    def live_created_after(self, since: datetime) -> list[MemoryEntry]:
        """The live entries created after ``since``, oldest first."""
        return self._list(f"archived_at IS NULL AND created_at > '{to_db(utc(since))}'")

    def list_archived(self) -> list[MemoryEntry]:
        return self._list("archived_at IS NOT NULL")

    def list_all(self) -> list[MemoryEntry]:
        return self._list("TRUE")

    def _list(self, where: str) -> list[MemoryEntry]:
        return _entries_of_columns(self._columns(_COLUMNS, where))

    def _columns(self, columns: str, where: str) -> list[list[Any]]:
        """``columns`` of the rows ``where`` holds, ordered by (created_at, id), as lists. The session only reads numpy
        columns (a third of the store time of fetching Python rows at 100k entries); ordering them and turning them
        into Python values happen after the session, so other processes wait less (store/connection.py: fair
        turns). A NULL is a masked value, which becomes None."""
        with self._conn.session() as conn:
            sql = f"SELECT {columns}, created_at AS _at, id AS _id FROM memories WHERE {where}"
            fetched = conn.execute(sql).fetchnumpy()
        values = list(fetched.values())
        self.rows_read += len(values[-1])
        order = np.lexsort((values[-1], values[-2]))
        return [column[order].tolist() for column in values[:-2]]

    def counts(self) -> dict[str, int]:
        with self._conn.session() as conn:
            live, archived = conn.execute(
                "SELECT count(*) FILTER (WHERE archived_at IS NULL), "
                "count(*) FILTER (WHERE archived_at IS NOT NULL) FROM memories"
            ).fetchone()  # type: ignore[misc]
        return {"live": int(live), "archived": int(archived)}

    def forget_cached_rows(self) -> None:
        """Empty this process's cache of rows read for this file (``_RowCache``): the next reads come from the file
        (for benchmarks of a first read; results never depend on it)."""
        with self._conn.session():  # the cache is only ever used inside a session
            self._rows.clear()

    def fingerprint(self) -> str:
        """Order-independent hash of the live corpus: id, content, category and tags only (not importance, not
        timestamps, not reinforcement), each field length-prefixed so field boundaries are unambiguous (spec: "The
        change gate"). Every write stores its row's part with the row (store/schema.py), so reading it sums two
        integer columns and hashes nothing."""
        with self._conn.session() as conn:
            n, h1, h2 = conn.execute(KEPT_SUMS_SQL).fetchone()  # type: ignore[misc]
        return f"memories:{n}:{int(h1):016x}{int(h2):016x}"

    def recomputed_fingerprint(self) -> str:
        """The fingerprint computed from every live row (what ``fingerprint`` must equal; for audits and tests)."""
        with self._conn.session() as conn:
            n, h1, h2 = conn.execute(fingerprint_sums_sql("memories")).fetchone()  # type: ignore[misc]
        return f"memories:{n}:{int(h1):016x}{int(h2):016x}"

    def similarity_measure(self) -> tuple[str, float]:
        """The lexical measure and its save-time threshold as the options configure them: the overlap measure uses
        one threshold for save time and clustering alike; TF-IDF cosine ``DedupeSimilarityThreshold`` at save time
        (and memory consolidation's ``similarity_threshold`` for clusters, spec: keep them aligned)."""
        if self._options.LexicalSimilarityMeasure == "overlap":
            return "overlap", self._options.LexicalOverlapThreshold
        return "auto", self._options.DedupeSimilarityThreshold

    def _clustering(self) -> Any:
        """Memory consolidation's options section, which holds the clustering threshold and cluster cap; the store
        is handed them by the pass, and reads them here only for a scan called without them."""
        own = self._options.passes.get("memory_consolidation")
        if own is None:
            raise ValueError(
                "duplicate_clusters: give threshold and max_cluster_size (these options know no memory_consolidation "
                "section)"
            )
        return own

    def duplicate_clusters(
        self,
        *,
        threshold: float | None = None,
        max_cluster_size: int | None = None,
        method: str | None = None,
        scopes: Mapping[str, str] | None = None,
    ) -> DuplicateClusters:
        """Near-duplicate clusters of the live corpus, by the configured measure unless ``method`` names one.
        ``scopes``: id -> scope (dream_assets/scope.py; an id not in it is in the shared pool ""): a cluster holds
        entries of one scope only."""
        method = method or self.similarity_measure()[0]
        if threshold is None:
            threshold = (
                self._options.LexicalOverlapThreshold
                if method == "overlap"
                else self._clustering().similarity_threshold
            )
        # Only ids and texts, in list_live's order: a scan of a large corpus does not build every entry.
        docs = list(zip(*self._columns("id, content", "archived_at IS NULL"), strict=True))
        return find_duplicate_clusters(
            docs,
            threshold,
            self._clustering().max_cluster_size if max_cluster_size is None else max_cluster_size,
            method=method,
            groups=None if scopes is None else [scopes.get(d[0], "") for d in docs],
        )

    @property
    def options(self) -> DreamOptions:
        return self._options

    @property
    def connection(self) -> StoreConnection:
        return self._conn

    # ------------------------------------------------------------------ writes
    # ------------------------------------------------------------------ what a save reads and writes
    @contextmanager
    def session(self, *, transaction: bool) -> Iterator[duckdb.DuckDBPyConnection]:
        """One session on the file (one transaction with ``transaction``): what a save reads in
        (recall_index.save_session keeps the recall index in step inside it)."""
        with self._conn.transaction() if transaction else self._conn.session() as conn:
            yield conn

    def save_write(self, *, creates: bool) -> Any:
        """Where a save writes inside its session: one statement when it creates an entry
        (``StoreConnection.statement``: no explicit BEGIN and COMMIT), else a transaction."""
        return self._conn.statement() if creates else self._conn.transaction()

    def cached_rows(self, conn: duckdb.DuckDBPyConnection, ids: Sequence[str]) -> list[MemoryEntry]:
        """The entries of ``ids`` (archived ones too), read through the row cache, in no particular order."""
        found = self._rows.rows_by_id(conn, list(ids))
        self.rows_read += self._rows.last_read
        return [_row_to_entry(r) for r in found]

    def live_texts(self, conn: duckdb.DuckDBPyConnection, ids: Sequence[str]) -> list[tuple[str, str]]:
        """(id, content) of the live entries among ``ids``, in no particular order."""
        rows = conn.execute(
            "SELECT id, content, archived_at FROM memories WHERE id IN (SELECT unnest(?::VARCHAR[]))", [list(ids)]
        ).fetchall()
        return [(str(r[0]), str(r[1])) for r in rows if r[2] is None]

    def live_entries(self, conn: duckdb.DuckDBPyConnection, ids: Sequence[str]) -> list[MemoryEntry]:
        """The live entries among ``ids`` (read through the row cache), in no particular order."""
        self._flush_pending(conn, ids)
        return [e for e in map(_row_to_entry, self._rows.rows_by_id(conn, list(ids))) if not e.is_archived]

    def insert_saved(self, conn: duckdb.DuckDBPyConnection, entry: MemoryEntry, derived: object = None) -> None:
        """Insert the new entry of a save (a fresh id); ``derived``, what the save derived from its text, goes to
        the rows' observers as it is (the recall index takes it)."""
        self._insert(conn, entry, fresh_id=True, derived=derived)

    def overwrite(self, conn: duckdb.DuckDBPyConnection, entry: MemoryEntry, *, was: MemoryEntry) -> None:
        """Overwrite every field of the existing row ``was`` on ``conn`` with ``entry``."""
        self._write(conn, entry, was=was)

    def put(self, entry: MemoryEntry) -> MemoryEntry:
        """Insert a fully specified entry as is (no dedup). Used by merges, imports and the demo generator."""
        entry = self._validated(entry)
        with self._conn.transaction() as conn:
            self._insert(conn, entry)
        return entry

    def put_many(self, entries: Sequence[MemoryEntry]) -> int:
        """Bulk insert (validated) in one transaction — for imports, demo profiles and benchmarks."""
        checked = [self._validated(e) for e in entries]
        if not checked:
            return 0
        with self._conn.transaction() as conn:
            self._rows.drop(e.id for e in checked)
            _bulk_insert(conn, checked)
            for observer in self._conn.row_observers:
                observer.rows_inserted(conn)
        return len(checked)

    @contextmanager
    def batched(self) -> Iterator[None]:
        """Many saves as one transaction whose new rows go into the table in one bulk insert (a row-by-row insert
        costs DuckDB milliseconds each): the rows a save creates wait in memory, already in the recall index, and
        are inserted when the block ends, or sooner when a later save of the block reads one of them (an exact or
        near duplicate). Everything in the block commits together or not at all; only saves belong in it (another
        read would not see the waiting rows). The saves of the block need the recall index: the caller builds it
        before (recall_index.prepare), so it is not built while the store is held."""
        if self._pending is not None:  # nested: the outer block inserts
            yield
            return
        with self._conn.transaction() as conn:
            self._pending = {}
            try:
                yield
                self._flush_pending(conn)
            finally:
                self._pending = None

    def _flush_pending(self, conn: duckdb.DuckDBPyConnection, ids: Iterable[str] | None = None) -> None:
        """Insert the waiting rows of a ``batched`` block (all of them, or only when one of ``ids`` waits)."""
        pending = self._pending
        if not pending or (ids is not None and not any(i in pending for i in ids)):
            return
        self._rows.drop(pending)
        top = _bulk_insert(conn, list(pending.values()))
        pending.clear()
        self._written(top)  # the rows are in the observers since their save

    # ------------------------------------------------------------------ the rows' observers
    def _live(self, entry: MemoryEntry, derived: object = None) -> None:
        for observer in self._conn.row_observers:
            observer.row_live(entry.id, entry.content, entry.category, entry.tags, derived, entry.metadata)

    def _gone(self, entry_id: str) -> None:
        for observer in self._conn.row_observers:
            observer.row_gone(entry_id)

    def _written(self, seq: int) -> None:
        for observer in self._conn.row_observers:
            observer.rows_written(seq)

    def _insert(
        self,
        conn: duckdb.DuckDBPyConnection,
        entry: MemoryEntry,
        *,
        fresh_id: bool = False,
        derived: object = None,
    ) -> None:
        """Insert a new row. ``fresh_id``: the id was just drawn (a random UUID), so no row can hold it and the
        check is skipped: a save makes one round trip fewer. ``derived``: what the save derived from the content
        (the recall index takes it as it is)."""
        if fresh_id and self._pending is not None:
            self._pending[entry.id] = entry
            if entry.archived_at is None:
                self._live(entry, derived)
            return
        self._rows.drop((entry.id,))
        # Checked first rather than left to the key constraint: a constraint error would abort a caller's transaction.
        if not fresh_id and conn.execute("SELECT 1 FROM memories WHERE id = ?", [entry.id]).fetchone() is not None:
            raise ContentError(f"a memory with id {entry.id!r} already exists")
        live = entry.archived_at is None
        if live and fresh_id:
            # A fresh id is no other entry's: indexed first, so the statement is the save's last step that can fail
            # (StoreConnection.statement: a failure before it leaves nothing written, the index forgotten).
            self._live(entry, derived)
        try:
            # The row takes its sequence number in the same statement. Read to its end: outside a transaction
            # (StoreConnection.statement) the statement commits when its result is done, not at a later statement.
            seq = int(
                conn.execute(
                    f"INSERT INTO memories ({_COLUMNS}, fp_h1, fp_h2, seq) "
                    "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, nextval('row_seq')) RETURNING seq",
                    [entry.id, *_row_values(entry), *_fingerprint_part(entry)],
                ).fetchall()[0][0]
            )
        except duckdb.ConstraintException as exc:
            raise ContentError(f"a memory with id {entry.id!r} already exists") from exc
        if live and not fresh_id:
            self._live(entry, derived)
        self._written(seq)

    def _write(self, conn: duckdb.DuckDBPyConnection, entry: MemoryEntry, *, was: MemoryEntry) -> None:
        """Overwrite every field of the existing row ``was``, its fingerprint part with it. When what the rows'
        observers hold of it changes (``_observed``), its ``seq`` is bumped and they are told."""
        bump = _observed(entry) != _observed(was)
        self._rows.drop((entry.id,))
        params = [*_row_values(entry), *_fingerprint_part(entry)]
        sql = (
            "UPDATE memories SET content = ?, category = ?, tags = ?, importance = ?, created_at = ?, updated_at = ?, "
            "last_seen_at = ?, reinforcement_count = ?, metadata = ?, archived_at = ?, fp_h1 = ?, fp_h2 = ?"
        )
        if bump:
            seq = self._next_seq(conn)
            conn.execute(sql + ", seq = ? WHERE id = ?", [*params, seq, entry.id])
            if entry.archived_at is None:
                self._live(entry)
            else:
                self._gone(entry.id)
            self._written(seq)
        else:
            conn.execute(sql + " WHERE id = ?", [*params, entry.id])

    def replace(self, entry: MemoryEntry) -> MemoryEntry:
        """Write a whole record back (validated). Used by passes that compute the new record themselves, and by undo."""
        entry = self._validated(entry)
        with self._conn.transaction() as conn:
            current = self._require(conn, entry.id)
            self._write(conn, entry, was=current)
        return entry

    def _require(self, conn: duckdb.DuckDBPyConnection, entry_id: str) -> MemoryEntry:
        row = conn.execute(f"SELECT {_COLUMNS} FROM memories WHERE id = ?", [entry_id]).fetchone()
        if row is None:
            raise NotFound(f"no memory with id {entry_id!r}")
        return _row_to_entry(row)

    def update(
        self,
        entry_id: str,
        *,
        now: datetime | None = None,
        content: str | None = None,
        category: str | None = None,
        tags: Sequence[str] | None = None,
        importance: float | None = None,
        metadata: Mapping[str, str] | None = None,
    ) -> MemoryEntry:
        """Edit fields of a live or archived entry (a tool edit). Sets updated_at; never touches last_seen_at."""
        now = utc_or_now(now)
        with self._conn.transaction() as conn:
            cur = self._require(conn, entry_id)
            c, cat, tg, imp, meta = self.validate(
                cur.content if content is None else content,
                cur.category if category is None else category,
                cur.tags if tags is None else tags,
                cur.importance if importance is None else importance,
                cur.metadata if metadata is None else metadata,
            )
            new = cur.with_(content=c, category=cat, tags=tg, importance=imp, metadata=meta, updated_at=utc(now))
            self._write(conn, new, was=cur)
        return new

    def reinforce(self, entry_id: str, *, now: datetime | None = None) -> MemoryEntry:
        """Episode reinforcement: last_seen_at = now, reinforcement_count + 1, content untouched."""
        now = utc_or_now(now)
        with self._conn.transaction() as conn:
            cur = self._require(conn, entry_id)
            new = cur.with_(last_seen_at=utc(now), reinforcement_count=cur.reinforcement_count + 1, updated_at=utc(now))
            self._write(conn, new, was=cur)
        return new

    def archive(self, entry_id: str, *, now: datetime | None = None) -> MemoryEntry:
        """Hide an entry from recall; it stays retrievable by id (and restorable) until the archive purge."""
        now = utc_or_now(now)
        return self._set_archived(entry_id, archived_at=now, now=now)

    def restore(self, entry_id: str, *, now: datetime | None = None) -> MemoryEntry:
        return self._set_archived(entry_id, archived_at=None, now=utc_or_now(now))

    def supersede(
        self, loser_id: str, winner_id: str, *, now: datetime, reason: str = ""
    ) -> tuple[tuple[MemoryEntry, MemoryEntry], tuple[MemoryEntry, MemoryEntry]]:
        """``winner_id`` supersedes ``loser_id``: the loser is archived (never deleted) with ``supersededBy`` (and
        ``supersededAt``, ``supersessionReason``), the winner's ``supersedes`` gains the loser's id. Both must be live
        and distinct. One transaction (a caller's, when one is open: record the change rows inside it). Returns
        ``((loser_before, loser_after), (winner_before, winner_after))``."""
        if not loser_id or not winner_id or loser_id == winner_id:
            raise ContentError(f"a supersession needs two different ids, got {loser_id!r} and {winner_id!r}")
        now = utc(now)
        with self._conn.transaction() as conn:
            loser, winner = self._require(conn, loser_id), self._require(conn, winner_id)
            for entry in (loser, winner):
                if entry.is_archived:
                    raise ContentError(
                        f"memory {entry.id!r} is archived; only live entries take part in a supersession"
                    )
            loser_meta = {**loser.metadata, SUPERSEDED_BY_KEY: winner.id, SUPERSEDED_AT_KEY: iso(now) or ""}
            if reason.strip():
                loser_meta[SUPERSESSION_REASON_KEY] = reason.strip()[:500]
            new_loser = loser.with_(archived_at=now, metadata=loser_meta)
            earlier = [i for i in winner.metadata.get(SUPERSEDES_KEY, "").split(",") if i]
            new_winner = winner.with_(
                metadata={**winner.metadata, SUPERSEDES_KEY: ",".join(dict.fromkeys([*earlier, loser.id]))}
            )
            self._write(conn, new_loser, was=loser)
            self._write(conn, new_winner, was=winner)
        return (loser, new_loser), (winner, new_winner)

    def _set_archived(self, entry_id: str, *, archived_at: datetime | None, now: datetime) -> MemoryEntry:
        with self._conn.transaction() as conn:
            cur = self._require(conn, entry_id)
            if cur.is_archived == (archived_at is not None):
                return cur
            # Archiving freezes the record as it was; restoring is an edit, so it sets updated_at.
            new = (
                cur.with_(archived_at=archived_at) if archived_at else cur.with_(archived_at=None, updated_at=utc(now))
            )
            self._write(conn, new, was=cur)
        return new

    def purge(self, entry_ids: Iterable[str], *, now: datetime) -> list[MemoryEntry]:
        """Hard delete of archived entries (the archive purge pass only). Live entries are refused.
        Each purge leaves a record (id, time, content) so an audit can tell purges from unexplained losses."""
        purged: list[MemoryEntry] = []
        with self._conn.transaction() as conn:
            for eid in dict.fromkeys(entry_ids):
                row = conn.execute(f"SELECT {_COLUMNS} FROM memories WHERE id = ?", [eid]).fetchone()
                if row is None:
                    continue
                entry = _row_to_entry(row)
                if not entry.is_archived:
                    raise ContentError(f"memory {eid!r} is live; only archived entries can be purged")
                seq = self._next_seq(conn)
                conn.execute(
                    "INSERT INTO memory_purges VALUES (?, ?, ?, ?, ?)",
                    [eid, to_db(utc(now)), to_db(entry.archived_at), entry.content, seq],
                )
                self._rows.drop((eid,))
                conn.execute("DELETE FROM memories WHERE id = ?", [eid])
                self._gone(eid)
                self._written(seq)
                purged.append(entry)
        return purged

    def purged_ids(self) -> set[str]:
        with self._conn.session() as conn:
            return {r[0] for r in conn.execute("SELECT id FROM memory_purges").fetchall()}

    def set_importance(
        self,
        updates: Mapping[str, float],
        *,
        now: datetime,
        stamps: Mapping[str, Mapping[str, str]] | None = None,
    ) -> int:
        """Bulk importance rewrite (importance decay): changes score and updated_at, never content or review state.
        ``stamps`` (metadata merged in) are written in the same transaction as the entry's importance, so a crash
        cannot decay twice. The entries are written ``WRITE_CHUNK`` at a time, each chunk one transaction, so the
        store is never held for a whole corpus: a crash between chunks leaves each entry either decayed and stamped
        or untouched, and the pass run again decays the rest (a caller's open transaction makes it one unit)."""
        stamps = stamps or {}
        ids = list(dict.fromkeys([*updates, *stamps]))
        for start in range(0, len(ids), WRITE_CHUNK):
            chunk = ids[start : start + WRITE_CHUNK]
            with self._conn.transaction() as conn:
                values = {i: float(updates[i]) for i in chunk if i in updates}
                self._rows.drop(values)
                if values:
                    imp = {"id": texts(values), "importance": np.array(list(values.values()), dtype=np.float64)}
                    with registered(conn, "_imp", imp):
                        conn.execute(
                            "UPDATE memories SET importance = _imp.importance, updated_at = ? FROM _imp "
                            "WHERE memories.id = _imp.id AND memories.archived_at IS NULL",
                            [to_db(utc(now))],
                        )
                chunk_stamps = {i: stamps[i] for i in chunk if i in stamps}
                if chunk_stamps:
                    self._merge_metadata(conn, chunk_stamps)
        return len(updates)

    def put_scores(self, entries: Iterable[MemoryEntry]) -> int:
        """Bulk write of importance, updated_at and metadata exactly as ``entries`` hold them (the undo of a decay):
        not a content change, so no fingerprint or index moves. Joins an open transaction."""
        entries = [self._validated(e) for e in entries]
        if not entries:
            return 0
        with self._conn.transaction() as conn:
            self._rows.drop(e.id for e in entries)
            scores = {
                "id": texts(e.id for e in entries),
                "importance": np.array([float(e.importance) for e in entries], dtype=np.float64),
                "updated_at": timestamps(to_db(e.updated_at) for e in entries),
                "metadata": texts(json.dumps(dict(e.metadata), sort_keys=True) for e in entries),
            }
            with registered(conn, "_scores", scores):
                conn.execute(
                    "UPDATE memories SET importance = _scores.importance, updated_at = _scores.updated_at, "
                    "metadata = _scores.metadata FROM _scores WHERE memories.id = _scores.id"
                )
        return len(entries)

    def set_metadata(self, updates: Mapping[str, Mapping[str, str]]) -> int:
        """Bulk metadata merge (review stamps and similar housekeeping): not a content change, updated_at untouched."""
        if not updates:
            return 0
        with self._conn.transaction() as conn:
            return self._merge_metadata(conn, updates)

    def _merge_metadata(self, conn: duckdb.DuckDBPyConnection, updates: Mapping[str, Mapping[str, str]]) -> int:
        standing = {i: u for i, u in updates.items() if STANDING_METADATA_KEYS.intersection(u)}
        written = 0
        if standing:  # it can change what recall holds of the entry (``_observed``): written as any edit is
            for was in map(_row_to_entry, _rows_by_id(conn, list(standing))):
                self._write(conn, was.with_(metadata={**was.metadata, **standing[was.id]}), was=was)
                written += 1
            updates = {i: u for i, u in updates.items() if i not in standing}
        return written + self._merge_housekeeping(conn, updates)

    def _merge_housekeeping(self, conn: duckdb.DuckDBPyConnection, updates: Mapping[str, Mapping[str, str]]) -> int:
        if not updates:
            return 0
        self._rows.drop(updates)
        rows = conn.execute(
            "SELECT id, metadata FROM memories WHERE id IN (SELECT unnest(?))", [list(updates)]
        ).fetchall()
        merged = {rid: json.dumps({**json.loads(meta), **updates[rid]}, sort_keys=True) for rid, meta in rows}
        if merged:
            with registered(conn, "_meta", {"id": texts(merged), "metadata": texts(merged.values())}):
                conn.execute("UPDATE memories SET metadata = _meta.metadata FROM _meta WHERE memories.id = _meta.id")
        return len(merged)
