"""Long-term memory store on DuckDB: the rows of saves, BM25 recall, archive/restore/purge, reinforce.

Recall and dedup use one in-process BM25 index per store, kept in step with the file through a row sequence:
every change to a searchable field or to the archive state bumps ``seq``; whenever this process (re)opens the
file it applies the rows with a higher ``seq`` (and the purge records), so writes from other processes are seen.
The index is built on first use by a search or a save; other writes only keep an index that exists in step, so a
process that never searches (a pass) never builds it. The build does not hold the store: the live rows are read in
short sessions, indexed outside them, and the rows committed meanwhile applied in one more (``_RecallIndex.prepare``),
so an agent saving during a cycle waits for one chunk read at most, not for a whole build.

A build is written beside the store (store/index_file.py: the documents, overlap stems and exact keys per entry,
stamped with the ``seq`` watermark and a token the store records) after the build, at the end of a cycle
(``persist_recall_indexes``) and when a process ends with many changes unwritten. A process that finds the file
current loads it instead of building (the BM25 index at once, the save-time tables on first use, ``_RecallIndex._make``)
and applies the rows changed since its watermark (``sync``); one it cannot trust is logged and the index built.

The rows a search or a save-time comparison reads by id stay in a small cache beside the index (``_RowCache``):
fetching a few rows by id costs DuckDB about a millisecond a query at a million entries, more than the rest of a
search but the BM25 lookup. It holds exactly what the file holds: it is emptied whenever the file is opened again
(another process may have written it meanwhile) and when a transaction rolls back, and every write drops the rows it
changes.

What a save does (reinforce, extend, create) is decided by the save pipeline (dream_assets/save_pipeline.py); this
class keeps the rows, the SQL and the recall index it reads (``exact_matches``, ``recall_candidates``,
``lexical_matches``, ``live_entries``) and the writes it makes (``insert_saved``, ``overwrite``).
"""

from __future__ import annotations

import atexit
import hashlib
import itertools
import json
import logging
import operator
import os
import threading
import warnings
from collections import Counter
from collections.abc import Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime
from functools import cached_property
from pathlib import Path
from typing import Any

import duckdb
import pyarrow as pa

from dream_assets.model import MemoryEntry, iso, utc, utc_or_now
from dream_assets.options import DreamOptions
from dream_assets.store import index_file
from dream_assets.store.connection import StoreConnection
from dream_assets.store.recall import SUPERSEDED_BY_KEY, candidate_count
from dream_assets.store.recall import rank as rank_recall
from dream_assets.store.schema import (
    KEPT_SUMS_SQL,
    ensure_schema,
    fingerprint_sums_sql,
    from_db,
    row_hash_columns_sql,
    to_db,
)
from dream_assets.text.bm25 import Bm25Index
from dream_assets.text.similarity import (
    DuplicateClusters,
    exact_key,
    find_duplicate_clusters,
    overlap_score,
    overlap_similarity,
    overlap_token_sets,
    overlap_tokens,
    smooth_idf,
    tfidf_cosine,
    unframed,
)
from dream_assets.text.tokens import content_token_list, document_tokens, label_tokens, tokenize

log = logging.getLogger("dream_assets.store.memory")
# An Arrow fetch of an ``execute`` result copies the rows once more than a relation's would; still half the store
# time of a NumPy fetch, and ``execute`` sees the caller's open transaction, which a new relation may not.
warnings.filterwarnings("ignore", message="Arrow output on a DB-API result makes an extra copy", category=UserWarning)

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

    def clear(self) -> None:
        self._rows.clear()


#: Live rows a first index build reads per store session (``_RecallIndex.prepare``): about 20 ms of the store each
#: at 100k entries, so an agent's save waits for one chunk at most, never for the whole read.
INDEX_READ_CHUNK = 10_000
_NO_LIMIT = 2**62
#: Entries a bulk housekeeping write (importance decay) changes per transaction: about 25 ms of the store's CPU each
#: (2,000 took 110 ms at 100k entries, then the longest session of a cycle).
WRITE_CHUNK = 500
_INDEX_COLUMNS = ("id", "content", "category", "tags")
#: A category as its labels: split on "/", empty parts dropped (langgraph_store.namespace_of in SQL).
_CATEGORY_LABELS_SQL = "list_filter(string_split(category, '/'), lambda x: x <> '')"
_LIVE_ROWS_SQL = (
    "SELECT id, content, category, tags, seq FROM memories WHERE archived_at IS NULL AND {where} ORDER BY seq LIMIT ?"
)


def _top_seq(conn: duckdb.DuckDBPyConnection) -> int:
    """The highest ``seq`` of the file: rows and purge records."""
    return int(
        conn.execute(
            "SELECT greatest((SELECT coalesce(max(seq), 0) FROM memories), "
            "(SELECT coalesce(max(seq), 0) FROM memory_purges))"
        ).fetchone()[0]  # type: ignore[index]
    )


def normalise_tags(tags: Iterable[str]) -> tuple[str, ...]:
    """Tags are a set: trimmed, de-duplicated, sorted (so the corpus fingerprint does not see their order)."""
    return tuple(sorted({str(t).strip() for t in tags if str(t).strip()}))


def _table(name: str) -> property:
    """One of the index's save-time tables: made from the index file when first read after a load (``_make``)."""
    attr = "_" + name

    def get(self: _RecallIndex) -> Any:
        if self._unmade is not None:
            self._make()
        return getattr(self, attr)

    def put(self: _RecallIndex, value: Any) -> None:
        setattr(self, attr, value)

    return property(get, put)


class _RecallIndex:
    """BM25 index over the live entries of one database file, shared by every MemoryStore of this process on that
    file.

    Loaded from the index file, the BM25 index is made at once and the save-time tables (content tokens, labels,
    overlap stems and their counts, exact keys) when first read: a search from the shell never needs them. Changes
    meanwhile go into the BM25 index at once and are replayed on the tables when they are made."""

    content_tokens = _table("content_tokens")
    labels = _table("labels")
    overlap = _table("overlap")
    stem_df = _table("stem_df")
    exact = _table("exact")
    exact_of = _table("exact_of")

    def __init__(self, file: Path | None = None) -> None:
        self.file = file  # the index file (store/index_file.py); None: none is kept
        # The file the tables are still to be made from, and the changes to replay on them (None: made).
        self._unmade: index_file.LoadedFile | None = None
        self._pending: list[tuple[str, tuple[str, str, tuple[str, ...], SaveText] | None]] = []
        self._making = threading.Lock()
        self.bm25 = Bm25Index()
        self.content_tokens: dict[str, tuple[str, ...]] = {}
        # The overlap measure's stems per entry and their document frequencies over the live corpus (the idf that
        # clustering fits on the same corpus), and live ids by (category, exact key) for exact duplicates.
        self.overlap: dict[str, frozenset[str]] = {}
        self.stem_df: Counter[str] = Counter()
        self.exact: dict[tuple[str, str], set[str]] = {}
        self.exact_of: dict[str, tuple[str, str]] = {}
        # Category and tag tokens per entry (the BM25 document is its content tokens and these): what the index file
        # (store/index_file.py) needs to give the kernel the same documents. The tuples are shared across entries.
        self.labels: dict[str, tuple[str, ...]] = {}
        self.synced_seq = 0
        self.ready = False
        #: Entries added or removed since the index file was last written or read (None: no file holds this index).
        self.changes_since_file: int | None = None
        self.rows = _RowCache()  # not part of the index: a build (``_take``) keeps it
        self._building = threading.Lock()  # one build at a time (outside the store: see prepare)

    def on_open(self, conn: duckdb.DuckDBPyConnection) -> None:
        self.rows.clear()  # the file may have been written by another process since this one last had it
        ensure_schema(conn)
        if self.ready:
            self.sync(conn)

    def sync(self, conn: duckdb.DuckDBPyConnection) -> None:
        rows = conn.execute(
            "SELECT id, content, category, tags, archived_at, seq FROM memories WHERE seq > ? ORDER BY seq",
            [self.synced_seq],
        ).fetchall()
        purged = conn.execute(
            "SELECT id, seq FROM memory_purges WHERE seq > ? ORDER BY seq", [self.synced_seq]
        ).fetchall()
        # Apply in sequence order: an entry purged and later put back (an undone purge) must end up as its row says.
        events = sorted([(r[5], r) for r in rows] + [(seq, (mid,)) for mid, seq in purged], key=lambda ev: ev[0])
        top = self.synced_seq
        for seq, row in events:
            if len(row) == 1 or row[4] is not None:
                self.remove(row[0])
            else:
                self.add(row[0], row[1], row[2], json.loads(row[3]))
            top = max(top, seq)
        self.synced_seq = top

    def ensure(self, conn: duckdb.DuckDBPyConnection) -> None:
        """Build the index inside the caller's session when it is not built yet (``prepare`` builds it outside)."""
        if not self.ready:
            top = _top_seq(conn)
            loaded = self._loaded(conn, self.file)
            if loaded is not None:
                self._take(loaded)
            else:
                columns = conn.execute(_LIVE_ROWS_SQL.format(where="TRUE"), [_NO_LIMIT]).fetchnumpy()
                self._take(_RecallIndex.built(*(columns[c].tolist() for c in _INDEX_COLUMNS), top))
            self.sync(conn)
            self.ready = True

    def prepare(self, conn: StoreConnection) -> None:
        """Build the index, when it is not built yet, without holding the store for the build: the live rows are read
        in short sessions of ``INDEX_READ_CHUNK`` rows each (other processes take their turns in between), tokenised
        and indexed outside any session, and the index is then brought up to date in one short session with what was
        committed meanwhile (``sync``). Exact: every write after the first read carries a higher ``seq`` than that
        read saw, so a row the chunks missed or saw in an older state is applied by ``sync``, in order, and the
        index holds what a build inside one session would. A caller already inside a session (a save inside a
        caller's transaction) does nothing here: ``ensure`` builds inside that session, which must see its
        uncommitted rows."""
        if self.ready or conn.in_session:
            return
        with self._building:
            if self.ready:
                return
            fresh = self._loaded(conn, self.file)
            if fresh is None:
                top, columns = self._read_live(conn)
                fresh = _RecallIndex.built(*columns, top)
                del columns
            with conn.session() as db:
                if not self.ready:  # a build inside a session may have come first
                    self._take(fresh)
                    self.sync(db)
                    self.ready = True
            if fresh.changes_since_file is None:
                self.persist(conn)  # built from the rows: the next process loads it instead

    # ------------------------------------------------------------------ the index file (store/index_file.py)
    @classmethod
    def _loaded(cls, conn: StoreConnection | duckdb.DuckDBPyConnection, path: Path | None) -> _RecallIndex | None:
        """The index the file at ``path`` holds when it is current for this store (at its watermark: the caller
        syncs), else None; a file that cannot be used is logged and left for the next write to replace. ``conn``: the
        store, or the caller's session on it."""
        if path is None:
            return None
        with index_file.no_cyclic_gc():
            return cls._loaded_from(conn, path)

    @classmethod
    def _loaded_from(cls, conn: StoreConnection | duckdb.DuckDBPyConnection, path: Path) -> _RecallIndex | None:
        try:
            loaded = index_file.open_file(path)
        except FileNotFoundError:
            return None
        except index_file.IndexFileError as exc:
            log.warning("recall index file %s is not used, the index is built from the store: %s", path, exc)
            return None
        if isinstance(conn, StoreConnection):
            with conn.session() as db:
                vouched, top = index_file.store_stamp(db), _top_seq(db)
        else:
            vouched, top = index_file.store_stamp(conn), _top_seq(conn)
        reason = index_file.stale_reason(loaded.stamp, vouched, top)
        if reason is not None:
            log.warning("recall index file %s is not used, the index is built from the store: %s", path, reason)
            return None
        try:
            index = cls.from_file(loaded)
        except ValueError as exc:  # an id twice
            log.warning("recall index file %s is not used, the index is built from the store: %s", path, exc)
            return None
        index.changes_since_file = 0
        log.info("recall index loaded from %s (%d entries, row sequence %d)", path, len(loaded.ids), loaded.synced_seq)
        return index

    @classmethod
    def from_file(cls, loaded: index_file.LoadedFile) -> _RecallIndex:
        """The index of a checked index file, synced up to its watermark: the BM25 index now, the tables on first
        use."""
        index = cls()
        documents, loaded.documents = loaded.documents, None  # the kernel holds them now
        index.bm25.add_many(loaded.ids, documents)
        index._unmade, index._pending = loaded, []
        index.synced_seq = loaded.synced_seq
        return index

    def _make(self) -> None:
        """Make the tables from the file and replay the changes made since it was loaded."""
        with self._making, index_file.no_cyclic_gc():
            loaded = self._unmade
            if loaded is None:
                return
            content, labels, stems, stem_df, exact = loaded.rest()
            self._set_tables(loaded.ids, content, labels, stems, stem_df, exact)
            pending, self._unmade, self._pending = self._pending, None, []
            for mid, change in pending:
                if change is None:
                    self._remove_tables(mid)
                else:
                    self._add_tables(mid, *change)

    def _set_tables(
        self,
        ids: list[str],
        content: list[tuple[str, ...]],
        labels: list[tuple[str, ...]],
        stems: list[frozenset[str]],
        stem_df: Counter[str],
        exact_of: list[tuple[str, str]],
    ) -> None:
        self._content_tokens = dict(zip(ids, content, strict=True))
        self._labels = dict(zip(ids, labels, strict=True))
        self._overlap = dict(zip(ids, stems, strict=True))
        self._stem_df = stem_df
        self._exact_of = dict(zip(ids, exact_of, strict=True))
        exact: dict[tuple[str, str], set[str]] = {}
        for mid, key in zip(ids, exact_of, strict=True):
            found = exact.get(key)
            if found is None:
                exact[key] = {mid}
            else:
                found.add(mid)
        self._exact = exact

    @classmethod
    def from_state(cls, state: index_file.IndexState) -> _RecallIndex:
        """The index of ``state`` (entries in its order), synced up to its watermark."""
        index = cls()
        index.bm25.add_many(state.ids, list(map(operator.add, state.content, state.labels)))
        stem_df = state.stem_df
        if stem_df is None:
            stem_df = Counter()
            for stems in state.stems:
                stem_df.update(stems)
        index._set_tables(state.ids, state.content, state.labels, state.stems, Counter(stem_df), state.exact)
        index.synced_seq = int(state.synced_seq)
        return index

    def state(self) -> index_file.IndexState:
        """What this index holds, for the index file (the caller holds the store: the tables do not change)."""
        ids = list(self.content_tokens)
        labels, overlap, exact_of = self.labels, self.overlap, self.exact_of
        return index_file.IndexState(
            ids=ids,
            content=list(self.content_tokens.values()),
            labels=[labels[m] for m in ids],
            stems=[overlap[m] for m in ids],
            exact=[exact_of[m] for m in ids],
            synced_seq=self.synced_seq,
        )

    def persist(self, conn: StoreConnection, *, min_changes: int = 1) -> bool:
        """Write the index file when this index is built and at least ``min_changes`` entries changed since the file
        was last written or read (an index no file holds counts as changed in every entry). Holds the store to copy
        the index's tables and to record the file's token, not while encoding and writing. Whether it wrote the file;
        a failure is logged, never raised (the file only saves the next process time)."""
        path = self.file
        if path is None or conn.in_session or not conn.db_path.exists():  # a store removed meanwhile stays removed
            return False
        try:
            with conn.session():
                if not self.ready:
                    return False
                behind = self.changes_since_file
                if (len(self.bm25) if behind is None else behind) < min_changes:
                    return False
                state = self.state()
                self.changes_since_file = 0  # changes from here on are after the state written
        except Exception as exc:  # noqa: BLE001 - see above
            log.warning("recall index file %s not written: %s", path, exc)
            return False
        token = index_file.new_token()
        try:
            size = index_file.write(path, state, token)
            with conn.session() as db:
                index_file.record_stamp(db, token, state.synced_seq)
        except Exception as exc:  # noqa: BLE001 - see above
            # The changes the file was to hold are still unwritten (a count: a race only moves the next rewrite).
            self.changes_since_file = None if behind is None else (self.changes_since_file or 0) + behind
            log.warning("recall index file %s not written: %s", path, exc)
            return False
        log.info("recall index written to %s (%d entries, %d bytes)", path, len(state.ids), size)
        return True

    @staticmethod
    def _read_live(conn: StoreConnection) -> tuple[int, tuple[list[Any], ...]]:
        """The highest ``seq`` and the live rows at or below it (ids, contents, categories, tags in ``seq`` order),
        read a chunk per session."""
        out: tuple[list[Any], ...] = ([], [], [], [])
        top: int | None = None
        after = 0
        while True:
            with conn.session() as db:
                if top is None:
                    top = _top_seq(db)
                chunk = db.execute(
                    _LIVE_ROWS_SQL.format(where="seq > ? AND seq <= ?"), [after, top, INDEX_READ_CHUNK]
                ).fetchnumpy()
            for values, column in zip(out, _INDEX_COLUMNS, strict=True):
                values.extend(chunk[column].tolist())
            if len(chunk["seq"]) < INDEX_READ_CHUNK:
                return top, out
            after = int(chunk["seq"][-1])

    @classmethod
    def built(
        cls, ids: list[str], contents: list[str], categories: list[str], tags: list[str], top: int
    ) -> _RecallIndex:
        """An index of the given live rows (in ``seq`` order: what ``sync`` from nothing arrives at, a corpus at a
        time), synced up to ``top``."""
        index = cls()
        extra: dict[tuple[str, str], list[str]] = {}  # category and tags -> their index tokens
        words = [content_token_list(content) for content in contents]
        documents: list[list[str]] = []
        for content_words, category, tag_text in zip(words, categories, tags, strict=True):
            found = extra.get((category, tag_text))
            if found is None:
                found = extra[(category, tag_text)] = document_tokens("", category, json.loads(tag_text))
            documents.append(content_words + found if found else content_words)
        index.bm25.add_many(ids, documents)
        del documents
        index.content_tokens = {mid: tuple(w) for mid, w in zip(ids, words, strict=True)}
        del words
        stems, index.stem_df = overlap_token_sets(contents)
        index.overlap = dict(zip(ids, stems, strict=True))
        for mid, content, category in zip(ids, contents, categories, strict=True):
            key = (category, exact_key(content))
            index.exact.setdefault(key, set()).add(mid)
            index.exact_of[mid] = key
        labels = {key: tuple(found) for key, found in extra.items()}
        index.labels = {mid: labels[(c, t)] for mid, c, t in zip(ids, categories, tags, strict=True)}
        index.synced_seq = int(top)
        return index

    def _take(self, other: _RecallIndex) -> None:
        """Hold what ``other`` holds (not yet ready: the caller syncs, then marks it ready)."""
        self.bm25, self._content_tokens, self._overlap = other.bm25, other._content_tokens, other._overlap
        self._stem_df, self._exact, self._exact_of = other._stem_df, other._exact, other._exact_of
        self._labels, self.synced_seq = other._labels, other.synced_seq
        self._unmade, self._pending = other._unmade, other._pending
        self.changes_since_file = other.changes_since_file

    def add(self, mid: str, content: str, category: str, tags: Sequence[str], text: SaveText | None = None) -> None:
        """Index an entry; ``text``: what a save derived from ``content`` already (used only when it is of
        ``content``)."""
        if text is None or text.content != content:
            text = SaveText(content)
        self.remove(mid)
        labels = label_tokens(category, tags)
        self.bm25.add(mid, [*text.words, *labels])
        if self.changes_since_file is not None:
            self.changes_since_file += 1
        if self._unmade is not None:
            self._pending.append((mid, (category, content, labels, text)))
        else:
            self._add_tables(mid, category, content, labels, text)

    def _add_tables(self, mid: str, category: str, content: str, labels: tuple[str, ...], text: SaveText) -> None:
        self._content_tokens[mid] = tuple(text.words)
        self._labels[mid] = labels
        stems = text.stems
        self._overlap[mid] = stems
        self._stem_df.update(stems)
        key = (category, text.key)
        self._exact.setdefault(key, set()).add(mid)
        self._exact_of[mid] = key

    def remove(self, mid: str) -> None:
        if mid not in self.bm25:
            return
        self.bm25.remove(mid)
        if self.changes_since_file is not None:
            self.changes_since_file += 1
        if self._unmade is not None:
            self._pending.append((mid, None))
        else:
            self._remove_tables(mid)

    def _remove_tables(self, mid: str) -> None:
        self._content_tokens.pop(mid, None)
        self._labels.pop(mid, None)
        stems = self._overlap.pop(mid, None)
        if stems:
            self._stem_df.subtract(stems)
        key = self._exact_of.pop(mid, None)
        if key is not None:
            ids = self._exact.get(key)
            if ids is not None:
                ids.discard(mid)
                if not ids:
                    del self._exact[key]

    def overlap_idf(self, term: str) -> float:
        return smooth_idf(len(self.overlap), self.stem_df.get(term, 0))

    def overlap_weights(self, terms: Iterable[str]) -> dict[str, float]:
        """``overlap_idf`` of each of ``terms``."""
        n, df = len(self.overlap), self.stem_df.get
        return {t: smooth_idf(n, df(t, 0)) for t in terms}

    def invalidate(self) -> None:
        """A transaction rolled back: entries added from its rows may never have been committed; rebuild on next use.
        The cached rows may be ones it wrote."""
        self.ready = False
        self.rows.clear()

    def mark_synced(self, seq: int) -> None:
        # Our own writes go into the index directly; nobody else writes while this process holds the file.
        if self.ready:
            self.synced_seq = max(self.synced_seq, seq)


def _recall_index(conn: StoreConnection) -> _RecallIndex:
    index = getattr(conn, "_recall_index", None)
    if index is None:
        index = _RecallIndex(index_file.index_path(conn.db_path))
        conn._recall_index = index  # type: ignore[attr-defined]
        conn.add_open_hook(index.on_open)
        conn.add_rollback_hook(index.invalidate)
        with _indexed_guard:
            _indexed.append((os.getpid(), conn))
    return index


#: How long a process that ends waits for a store another process holds to write its index file (then it leaves it).
EXIT_WAIT_S = 3.0
_indexed: list[tuple[int, StoreConnection]] = []  # (process, connection) of every recall index made
_indexed_guard = threading.Lock()


def persist_recall_indexes(*, min_changes: int = 1, db_path: Path | None = None, wait_s: float | None = None) -> int:
    """Bring the index file of every store this process has a built recall index of (of ``db_path`` only, when given)
    up to date when at least ``min_changes`` entries changed since it was written (store/index_file.py): at the end
    of a cycle, on shutdown. ``wait_s``: wait at most this long for a store another process holds (then skip it).
    How many files it wrote."""
    with _indexed_guard:
        mine = [conn for pid, conn in _indexed if pid == os.getpid()]
    if db_path is not None:
        mine = [conn for conn in mine if conn.db_path.resolve() == Path(db_path).resolve()]
    written = 0
    for conn in mine:
        index = getattr(conn, "_recall_index", None)
        if index is None or not index.ready:
            continue
        timeout_s = conn.timeout_s
        if wait_s is not None:
            conn.timeout_s = min(timeout_s, wait_s)
        try:
            written += index.persist(conn, min_changes=min_changes)
        except Exception as exc:  # noqa: BLE001 - the file only saves the next process time
            log.warning("recall index of %s not written: %s", conn.db_path, exc)
        finally:
            conn.timeout_s = timeout_s
    return written


@atexit.register
def _persist_at_exit() -> None:
    """A process that leaves many changes unwritten (a server, a long cycle) writes the file as it ends, so the next
    one does not catch up on them row by row; a few are cheaper to catch up on than to write."""
    persist_recall_indexes(min_changes=index_file.REWRITE_AFTER_CHANGES, wait_s=EXIT_WAIT_S)


class SaveText:
    """What a save derives from its text, each computed once when first needed: the exact-duplicate key, the content
    words (the BM25 document, the TF-IDF vector), the content words without frame dates (the near-duplicate lookup's
    query) and the overlap stems. The exact check, the near-duplicate lookup and the recall index of a created entry
    read the same forms, where each used to tokenise the text again (six times a save)."""

    def __init__(self, content: str) -> None:
        self.content = content

    @cached_property
    def key(self) -> str:
        return exact_key(self.content)

    @cached_property
    def words(self) -> list[str]:
        return content_token_list(self.content)

    @cached_property
    def unframed_words(self) -> list[str]:
        """``content_token_list(unframed(content))``: ``words`` itself when the text holds no frame date."""
        core = unframed(self.content)
        return self.words if core is self.content else content_token_list(core)

    @cached_property
    def stems(self) -> frozenset[str]:
        return overlap_tokens(self.content, self.unframed_words)


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
    table = pa.table(
        {
            "id": [e.id for e in entries],
            "content": [e.content for e in entries],
            "category": [e.category for e in entries],
            "tags": [json.dumps(list(e.tags)) for e in entries],
            "importance": [e.importance for e in entries],
            "created_at": [to_db(e.created_at) for e in entries],
            "updated_at": [to_db(e.updated_at) for e in entries],
            "last_seen_at": [to_db(e.last_seen_at) for e in entries],
            "reinforcement_count": pa.array([e.reinforcement_count for e in entries], pa.int32()),
            "metadata": [json.dumps(e.metadata, sort_keys=True) for e in entries],
            "archived_at": pa.array([to_db(e.archived_at) for e in entries], pa.timestamp("us")),
            "seq": [start + i for i in range(len(entries))],
        }
    )
    conn.register("_incoming", table)
    try:
        conn.execute(
            f"INSERT INTO memories ({_COLUMNS}, seq, fp_h1, fp_h2) "
            f"SELECT {_COLUMNS}, seq, {row_hash_columns_sql('_incoming')}"
        )
    finally:
        conn.unregister("_incoming")
    return start + len(entries) - 1


class MemoryStore:
    def __init__(self, conn: StoreConnection, options: DreamOptions) -> None:
        self._conn = conn
        self._options = options
        self._idx = _recall_index(conn)
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
        """``columns`` of the rows ``where`` holds, ordered by (created_at, id), as lists. The session only reads an
        Arrow table (a third of the store time of a NumPy fetch at 100k entries); ordering it and turning it into
        Python values happen after the session, so other processes wait less (store/connection.py: fair turns)."""
        with self._conn.session() as conn:
            sql = f"SELECT {columns}, created_at AS _at, id AS _id FROM memories WHERE {where}"
            table = conn.execute(sql).to_arrow_table()
        self.rows_read += table.num_rows
        table = table.sort_by([("_at", "ascending"), ("_id", "ascending")])
        return [table.column(i).to_numpy(zero_copy_only=False).tolist() for i in range(table.num_columns - 2)]

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
            self._idx.rows.clear()

    def persist_recall_index(self, *, min_changes: int = 1) -> bool:
        """Write this process's recall index to its file beside the store (store/index_file.py) when it is built and
        at least ``min_changes`` entries changed since the file was written; whether it wrote it."""
        return self._idx.persist(self._conn, min_changes=min_changes)

    def prepare_recall(self) -> None:
        """Build this process's recall index now if it is not built, without holding the store for the build
        (``_RecallIndex.prepare``): for a caller about to search or save inside its own transactions, where a first
        build would have to hold the store all along. A no-op once built, and inside a session."""
        self._idx.prepare(self._conn)

    def search(self, query: str, limit: int = 10) -> list[tuple[MemoryEntry, float]]:
        """Live entries for ``query``, best first: BM25 over content, category and tags finds them, and the current
        version of a fact comes before a stale one (store/recall.py: correction standing, subject time or save time,
        supersession, and the ``RecallRecencyWeight`` / ``RecallReinforcementWeight`` signals). Archived entries are
        never returned."""
        if limit <= 0:
            return []
        tokens = tokenize(query)
        self._idx.prepare(self._conn)
        with self._conn.session() as conn:
            self._idx.ensure(conn)
            hits = self._idx.bm25.search(tokens, limit=candidate_count(limit, self._options))
            if not hits:
                return []
            rows = self._idx.rows.rows_by_id(conn, [h for h, _ in hits])
        self.rows_read += self._idx.rows.last_read
        by_id = {r[0]: _row_to_entry(r) for r in rows}
        live = [(by_id[h], score) for h, score in hits if h in by_id and not by_id[h].is_archived]
        return rank_recall(live, tokens, self._options, limit)

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

    def similarity_measure(self) -> tuple[str, float, float]:
        """The lexical measure and its thresholds (clustering, save time) as the options configure them: the overlap
        measure uses one threshold for both; TF-IDF cosine its two aligned ones (spec: keep them aligned)."""
        if self._options.LexicalSimilarityMeasure == "overlap":
            t = self._options.LexicalOverlapThreshold
            return "overlap", t, t
        return "auto", self._options.ConsolidationSimilarityThreshold, self._options.DedupeSimilarityThreshold

    def same_fact(self, a: str, b: str) -> bool:
        """Whether two texts are near duplicates by the save-time measure (``similarity_measure``), with the idf of
        the live corpus as save-time dedup and clustering weigh words."""
        measure, _, threshold = self.similarity_measure()
        self._idx.prepare(self._conn)
        with self._conn.session() as conn:
            self._idx.ensure(conn)
        if measure == "overlap":
            return overlap_similarity(a, b, idf=self._idx.overlap_idf) >= threshold - 1e-12
        return tfidf_cosine(a, b, self._idx.bm25) >= threshold

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
                else self._options.ConsolidationSimilarityThreshold
            )
        # Only ids and texts, in list_live's order: a scan of a large corpus does not build every entry.
        docs = list(zip(*self._columns("id, content", "archived_at IS NULL"), strict=True))
        return find_duplicate_clusters(
            docs,
            threshold,
            self._options.ConsolidationMaxClusterSize if max_cluster_size is None else max_cluster_size,
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
    def save_session(self, *, transaction: bool) -> Iterator[duckdb.DuckDBPyConnection]:
        """The session a save reads in (one transaction with ``transaction``), the recall index in step with the
        file: no other process or thread writes the store meanwhile."""
        with self._conn.transaction() if transaction else self._conn.session() as conn:
            self._idx.ensure(conn)
            yield conn

    def save_write(self, *, creates: bool) -> Any:
        """Where a save writes inside its session: one statement when it creates an entry
        (``StoreConnection.statement``: no explicit BEGIN and COMMIT), else a transaction."""
        return self._conn.statement() if creates else self._conn.transaction()

    def find_exact(self, content: str, category: str) -> list[MemoryEntry]:
        """Live entries of ``category`` whose content equals ``content`` after normalising case, white space and
        punctuation (text/similarity.exact_key), oldest first."""
        self._idx.prepare(self._conn)
        with self._conn.session() as conn:
            self._idx.ensure(conn)
            return self.exact_matches(conn, exact_key(content), category)

    def exact_matches(self, conn: duckdb.DuckDBPyConnection, key: str, category: str) -> list[MemoryEntry]:
        """The live entries of ``category`` whose exact-duplicate key (text/similarity.exact_key) is ``key``, oldest
        first."""
        ids = sorted(self._idx.exact.get((category, key), ()))
        if not ids:
            return []
        self._flush_pending(conn, ids)
        live = (e for e in map(_row_to_entry, self._idx.rows.rows_by_id(conn, ids)) if not e.is_archived)
        return sorted(live, key=lambda e: (e.created_at, e.id))

    def recall_candidates(
        self, conn: duckdb.DuckDBPyConnection, text: SaveText, *, limit: int
    ) -> list[tuple[str, str]]:
        """(id, content) of the live entries BM25 ranks highest for ``text`` (its words without frame dates), best
        first, at most ``limit``."""
        tokens = text.unframed_words or text.words
        hits = [cid for cid, _ in self._idx.bm25.search(tokens, limit=limit)] if tokens else []
        if not hits:
            return []
        rows = conn.execute(
            "SELECT id, content, archived_at FROM memories WHERE id IN (SELECT unnest(?::VARCHAR[]))", [hits]
        ).fetchall()
        order = {cid: i for i, cid in enumerate(hits)}
        return sorted(((str(r[0]), str(r[1])) for r in rows if r[2] is None), key=lambda d: order[d[0]])

    def lexical_matches(self, conn: duckdb.DuckDBPyConnection, text: SaveText) -> list[tuple[str, float]]:
        """(id, similarity) of the indexed entries at or above the save-time threshold of the lexical measure
        (``similarity_measure``), with the idf of the live corpus, as clustering measures them."""
        # Stopwords are not in the index (df 0 would give them the highest idf): vectors use content tokens only.
        measure, _, threshold = self.similarity_measure()
        q_tokens = text.words
        if not q_tokens:
            return []
        close: list[tuple[str, float]] = []
        if measure == "overlap":
            stems = text.stems
            query = text.unframed_words or q_tokens
            stems_of = self._idx.overlap.get
            candidates = [(cid, c) for cid, _ in self._idx.bm25.search(query, limit=20) if (c := stems_of(cid))]
            weight = self._idx.overlap_weights(stems.union(*(c for _, c in candidates))).__getitem__  # each idf once
            q_total = sum(map(weight, stems))
            for cid, c_stems in candidates:
                sim = overlap_score(sum(map(weight, stems & c_stems)), q_total, sum(map(weight, c_stems)))
                if sim >= threshold - 1e-12:
                    close.append((cid, sim))
            return close
        q_vec = self._idx.bm25.tfidf_vector(q_tokens)
        for cid, _score in self._idx.bm25.search(q_tokens, limit=10):
            c_tokens = self._idx.content_tokens.get(cid)
            if not c_tokens:
                continue
            sim = self._idx.bm25.cosine(q_vec, self._idx.bm25.tfidf_vector(c_tokens))
            if sim >= threshold:
                close.append((cid, sim))
        return close

    def live_entries(self, conn: duckdb.DuckDBPyConnection, ids: Sequence[str]) -> list[MemoryEntry]:
        """The live entries among ``ids`` (read through the row cache), in no particular order."""
        self._flush_pending(conn, ids)
        return [e for e in map(_row_to_entry, self._idx.rows.rows_by_id(conn, list(ids))) if not e.is_archived]

    def insert_saved(self, conn: duckdb.DuckDBPyConnection, entry: MemoryEntry, text: SaveText) -> None:
        """Insert the new entry of a save (a fresh id), indexed with the forms the save derived from its text."""
        self._insert(conn, entry, fresh_id=True, text=text)

    def overwrite(self, conn: duckdb.DuckDBPyConnection, entry: MemoryEntry, *, bump: bool) -> None:
        """Overwrite every field of an existing row on ``conn`` (``bump`` when searchable fields or the archive state
        changed)."""
        self._write(conn, entry, bump=bump)

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
            self._idx.rows.drop(e.id for e in checked)
            _bulk_insert(conn, checked)
            if self._idx.ready:
                self._idx.sync(conn)
        return len(checked)

    @contextmanager
    def batched(self) -> Iterator[None]:
        """Many saves as one transaction whose new rows go into the table in one bulk insert (a row-by-row insert
        costs DuckDB milliseconds each): the rows a save creates wait in memory, already in the recall index, and
        are inserted when the block ends, or sooner when a later save of the block reads one of them (an exact or
        near duplicate). Everything in the block commits together or not at all; only saves belong in it (another
        read would not see the waiting rows)."""
        if self._pending is not None:  # nested: the outer block inserts
            yield
            return
        self._idx.prepare(self._conn)  # the saves of the block need the index: built before the store is held
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
        self._idx.rows.drop(pending)
        top = _bulk_insert(conn, list(pending.values()))
        pending.clear()
        self._idx.mark_synced(top)  # the rows are in the index since their save

    def _insert(
        self,
        conn: duckdb.DuckDBPyConnection,
        entry: MemoryEntry,
        *,
        fresh_id: bool = False,
        text: SaveText | None = None,
    ) -> None:
        """Insert a new row. ``fresh_id``: the id was just drawn (a random UUID), so no row can hold it and the
        check is skipped: a save makes one round trip fewer. ``text``: what the save derived from the content (the
        recall index takes it as it is)."""
        if fresh_id and self._pending is not None:
            self._pending[entry.id] = entry
            if entry.archived_at is None and self._idx.ready:
                self._idx.add(entry.id, entry.content, entry.category, entry.tags, text)
            return
        self._idx.rows.drop((entry.id,))
        # Checked first rather than left to the key constraint: a constraint error would abort a caller's transaction.
        if not fresh_id and conn.execute("SELECT 1 FROM memories WHERE id = ?", [entry.id]).fetchone() is not None:
            raise ContentError(f"a memory with id {entry.id!r} already exists")
        indexed = entry.archived_at is None and self._idx.ready
        if indexed and fresh_id:
            # A fresh id is no other entry's: indexed first, so the statement is the save's last step that can fail
            # (StoreConnection.statement: a failure before it leaves nothing written, the index forgotten).
            self._idx.add(entry.id, entry.content, entry.category, entry.tags, text)
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
        if indexed and not fresh_id:
            self._idx.add(entry.id, entry.content, entry.category, entry.tags, text)
        self._idx.mark_synced(seq)

    def _write(
        self,
        conn: duckdb.DuckDBPyConnection,
        entry: MemoryEntry,
        *,
        bump: bool = True,
    ) -> None:
        """Overwrite every field of an existing row, its fingerprint part with it. ``bump`` when searchable fields or
        the archive state changed."""
        self._idx.rows.drop((entry.id,))
        params = [*_row_values(entry), *_fingerprint_part(entry)]
        sql = (
            "UPDATE memories SET content = ?, category = ?, tags = ?, importance = ?, created_at = ?, updated_at = ?, "
            "last_seen_at = ?, reinforcement_count = ?, metadata = ?, archived_at = ?, fp_h1 = ?, fp_h2 = ?"
        )
        if bump:
            seq = self._next_seq(conn)
            conn.execute(sql + ", seq = ? WHERE id = ?", [*params, seq, entry.id])
            if self._idx.ready:
                if entry.archived_at is None:
                    self._idx.add(entry.id, entry.content, entry.category, entry.tags)
                else:
                    self._idx.remove(entry.id)
            self._idx.mark_synced(seq)
        else:
            conn.execute(sql + " WHERE id = ?", [*params, entry.id])

    def replace(self, entry: MemoryEntry) -> MemoryEntry:
        """Write a whole record back (validated). Used by passes that compute the new record themselves, and by undo."""
        entry = self._validated(entry)
        with self._conn.transaction() as conn:
            current = self._require(conn, entry.id)
            bump = (current.content, current.category, current.tags, current.archived_at) != (
                entry.content,
                entry.category,
                entry.tags,
                entry.archived_at,
            )
            self._write(conn, entry, bump=bump)
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
            self._write(conn, new, bump=(c, cat, tg) != (cur.content, cur.category, cur.tags))
        return new

    def reinforce(self, entry_id: str, *, now: datetime | None = None) -> MemoryEntry:
        """Episode reinforcement: last_seen_at = now, reinforcement_count + 1, content untouched."""
        now = utc_or_now(now)
        with self._conn.transaction() as conn:
            cur = self._require(conn, entry_id)
            new = cur.with_(last_seen_at=utc(now), reinforcement_count=cur.reinforcement_count + 1, updated_at=utc(now))
            self._write(conn, new, bump=False)
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
            self._write(conn, new_loser, bump=True)
            self._write(conn, new_winner, bump=False)
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
            self._write(conn, new, bump=True)
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
                self._idx.rows.drop((eid,))
                conn.execute("DELETE FROM memories WHERE id = ?", [eid])
                self._idx.remove(eid)
                self._idx.mark_synced(seq)
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
                self._idx.rows.drop(values)
                if values:
                    conn.register("_imp", pa.table({"id": list(values), "importance": list(values.values())}))
                    try:
                        conn.execute(
                            "UPDATE memories SET importance = _imp.importance, updated_at = ? FROM _imp "
                            "WHERE memories.id = _imp.id AND memories.archived_at IS NULL",
                            [to_db(utc(now))],
                        )
                    finally:
                        conn.unregister("_imp")
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
            self._idx.rows.drop(e.id for e in entries)
            conn.register(
                "_scores",
                pa.table(
                    {
                        "id": [e.id for e in entries],
                        "importance": [float(e.importance) for e in entries],
                        "updated_at": pa.array([to_db(e.updated_at) for e in entries], pa.timestamp("us")),
                        "metadata": [json.dumps(dict(e.metadata), sort_keys=True) for e in entries],
                    }
                ),
            )
            try:
                conn.execute(
                    "UPDATE memories SET importance = _scores.importance, updated_at = _scores.updated_at, "
                    "metadata = _scores.metadata FROM _scores WHERE memories.id = _scores.id"
                )
            finally:
                conn.unregister("_scores")
        return len(entries)

    def set_metadata(self, updates: Mapping[str, Mapping[str, str]]) -> int:
        """Bulk metadata merge (review stamps and similar housekeeping): not a content change, updated_at untouched."""
        if not updates:
            return 0
        with self._conn.transaction() as conn:
            return self._merge_metadata(conn, updates)

    def _merge_metadata(self, conn: duckdb.DuckDBPyConnection, updates: Mapping[str, Mapping[str, str]]) -> int:
        self._idx.rows.drop(updates)
        rows = conn.execute(
            "SELECT id, metadata FROM memories WHERE id IN (SELECT unnest(?))", [list(updates)]
        ).fetchall()
        merged = {rid: json.dumps({**json.loads(meta), **updates[rid]}, sort_keys=True) for rid, meta in rows}
        if merged:
            conn.register("_meta", pa.table({"id": list(merged), "metadata": list(merged.values())}))
            try:
                conn.execute("UPDATE memories SET metadata = _meta.metadata FROM _meta WHERE memories.id = _meta.id")
            finally:
                conn.unregister("_meta")
        return len(merged)
