"""The recall index of an agent's memories: BM25 over the live entries, with the save-time tables (content tokens,
overlap stems and their counts, exact keys), kept in memory by the process beside the rows the store keeps.

The store (store/memory.py) keeps the rows and the SQL only; this index follows the rows through a narrow hook
(``StoreConnection.add_row_observer``): every change to a searchable field or to the archive state bumps the row's
``seq``, this process's own writes tell the index what they wrote (``row_live``, ``row_gone``, ``rows_written``), and
whenever this process (re)opens the file the index applies the rows with a higher ``seq`` and the purge records
(``sync``), so writes from other processes are seen. The store never imports this module.

The index is built on first use by a search or a save (``index_of`` then ``prepare`` or ``ensure``); other writes only
keep an index that exists in step, so a process that never searches (a pass) never builds it. The build does not hold
the store: the live rows are read in short sessions, indexed outside them, and the rows committed meanwhile applied in
one more (``RecallIndex.prepare``), so an agent saving during a cycle waits for one chunk read at most, not for a
whole build.

A build is written beside the store (store/index_file.py: the documents, overlap stems and exact keys per entry,
stamped with the ``seq`` watermark and a token the store records) after the build, at the end of a cycle
(``persist_recall_indexes``), on a server's shutdown and when a process ends with many changes unwritten. A process
that finds the file current loads it instead of building (the BM25 index at once, from the file's arrays in one
kernel call; a save looks up the file's arrays until the save-time tables are made, when a pass or the file needs
them, ``RecallIndex._lookups``) and applies the rows changed since its watermark (``sync``); one it cannot trust is
logged and the index built.

The reads of the index (``search``, ``same_fact``, ``find_exact``, ``exact_matches``, ``recall_candidates``,
``lexical_matches``) take the ``MemoryStore`` whose rows they read, and the session a save reads in
(``save_session``) keeps the index in step with the file.
"""

from __future__ import annotations

import atexit
import json
import logging
import operator
import os
import threading
from collections import Counter
from collections.abc import Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from functools import cached_property
from pathlib import Path
from typing import Any

import duckdb

from dream_assets.model import MemoryEntry
from dream_assets.store import index_file
from dream_assets.store.connection import StoreConnection
from dream_assets.store.memory import MemoryStore, live_index_rows, row_events_since, top_seq
from dream_assets.store.recall import candidate_count, later_rows, later_version, rows_complete, rows_needed
from dream_assets.store.recall import rank as rank_recall
from dream_assets.text.bm25 import Bm25Index
from dream_assets.text.similarity import (
    exact_key,
    overlap_score,
    overlap_similarity,
    overlap_token_sets,
    overlap_tokens,
    smooth_idf,
    tfidf_cosine,
    unframed,
)
from dream_assets.text.tokens import content_token_list, document_tokens, label_tokens, tokenize

log = logging.getLogger("dream_assets.recall_index")

#: Live rows a first index build reads per store session (``RecallIndex.prepare``): about 20 ms of the store each
#: at 100k entries, so an agent's save waits for one chunk at most, never for the whole read.
INDEX_READ_CHUNK = 10_000
_INDEX_COLUMNS = ("id", "content", "category", "tags", "metadata")


def _table(name: str) -> property:
    """One of the index's save-time tables: made from the index file when first read after a load (``_make``)."""
    attr = "_" + name

    def get(self: RecallIndex) -> Any:
        if self._unmade is not None:
            self._make()
        return getattr(self, attr)

    def put(self: RecallIndex, value: Any) -> None:
        setattr(self, attr, value)

    return property(get, put)


class RecallIndex:
    """BM25 index over the live entries of one database file, shared by every MemoryStore of this process on that
    file (``index_of``), kept in step with the rows as their observer (``row_live``, ``row_gone``, ``rows_written``,
    ``rows_inserted``) and by their ``seq`` (``sync``).

    Loaded from the index file, the BM25 index is made at once and the save-time tables (content tokens, labels,
    overlap stems and their counts, exact keys) when first read: a search from the shell never needs them, and a
    save answers from the file's arrays meanwhile (``_lookups``). Changes meanwhile go into the BM25 index at once
    and are replayed on the tables when they are made."""

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
        self._pending: list[tuple[str, _Change]] = []
        # What a save looks up before the tables are made: the file's arrays with the changes on top (``_lookups``).
        self._view: _Unmade | None = None
        self._making = threading.Lock()
        # Tables ``make_ahead`` made from the file outside the store, and when they are done (None: none on the way).
        self._ahead: tuple[index_file.LoadedFile, dict[str, Any]] | None = None
        self._ahead_done: threading.Event | None = None
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
        # The live entries that say they are a later version of a fact (store/recall.py ``later_version``): a search
        # reads the rows below the first places only for these (``rows_needed``).
        self.later: set[str] = set()
        self.synced_seq = 0
        self.ready = False
        #: Entries added or removed since the index file was last written or read (None: no file holds this index).
        self.changes_since_file: int | None = None
        self._building = threading.Lock()  # one build at a time (outside the store: see prepare)

    def on_open(self, conn: duckdb.DuckDBPyConnection) -> None:
        """The file was (re)opened: another process may have written it since this one last had it."""
        if self.ready:
            self.sync(conn)

    def sync(self, conn: duckdb.DuckDBPyConnection) -> None:
        """Apply the rows and purge records with a ``seq`` above the index's watermark, in order."""
        top = self.synced_seq
        for seq, row in row_events_since(conn, self.synced_seq):
            if len(row) == 1 or row[4] is not None:
                self.remove(row[0])
            else:
                tags = json.loads(row[3])
                self.add(row[0], row[1], row[2], tags, later=later_version(row[1], row[2], tags, row[5]))
            top = max(top, seq)
        self.synced_seq = top

    # ------------------------------------------------------------------ the rows' observer (store/memory.py)
    def row_live(
        self,
        mid: str,
        content: str,
        category: str,
        tags: Sequence[str],
        derived: object | None = None,
        metadata: Mapping[str, str] | None = None,
    ) -> None:
        """This process wrote (or is about to write) a live row: indexed at once when the index is built (one that
        is not is built from the rows later). ``derived``: what a save derived from the text (``SaveText``)."""
        if self.ready:
            text = derived if isinstance(derived, SaveText) else None
            self.add(mid, content, category, tags, text, later=later_version(content, category, tags, metadata))

    def row_gone(self, mid: str) -> None:
        """This process archived or purged a row."""
        if self.ready:
            self.remove(mid)

    def rows_written(self, seq: int) -> None:
        """This process's own writes reach ``seq``: they are in the index already."""
        self.mark_synced(seq)

    def rows_inserted(self, conn: duckdb.DuckDBPyConnection) -> None:
        """Rows were inserted in bulk on ``conn``: read them by their ``seq``."""
        if self.ready:
            self.sync(conn)

    def ensure(self, conn: duckdb.DuckDBPyConnection) -> None:
        """Build the index inside the caller's session when it is not built yet (``prepare`` builds it outside)."""
        if not self.ready:
            top = top_seq(conn)
            loaded = self._loaded(conn, self.file)
            if loaded is not None:
                self._take(loaded)
            else:
                columns = live_index_rows(conn)
                self._take(RecallIndex.built(*(columns[c].tolist() for c in _INDEX_COLUMNS), top))
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
                fresh = RecallIndex.built(*columns, top)
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
    def _loaded(cls, conn: StoreConnection | duckdb.DuckDBPyConnection, path: Path | None) -> RecallIndex | None:
        """The index the file at ``path`` holds when it is current for this store (at its watermark: the caller
        syncs), else None; a file that cannot be used is logged and left for the next write to replace. ``conn``: the
        store, or the caller's session on it."""
        if path is None:
            return None
        with index_file.no_cyclic_gc():
            return cls._loaded_from(conn, path)

    @classmethod
    def _loaded_from(cls, conn: StoreConnection | duckdb.DuckDBPyConnection, path: Path) -> RecallIndex | None:
        try:
            loaded = index_file.open_file(path)
        except FileNotFoundError:
            return None
        except index_file.IndexFileError as exc:
            log.warning("recall index file %s is not used, the index is built from the store: %s", path, exc)
            return None
        if isinstance(conn, StoreConnection):
            with conn.session() as db:
                vouched, top = index_file.store_stamp(db), top_seq(db)
        else:
            vouched, top = index_file.store_stamp(conn), top_seq(conn)
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
        log.info("recall index loaded from %s (%d entries, row sequence %d)", path, loaded.entries, loaded.synced_seq)
        return index

    @classmethod
    def from_file(cls, loaded: index_file.LoadedFile) -> RecallIndex:
        """The index of a checked index file, synced up to its watermark: the BM25 index now, the tables on first
        use."""
        index = cls()
        documents, loaded.documents = loaded.documents, None  # the kernel holds them now
        if documents is None:
            raise ValueError("the file's documents were taken by another index already")
        index.bm25.add_arrays(*documents)
        index._unmade, index._pending = loaded, []
        index.later = loaded.later_ids()
        index.synced_seq = loaded.synced_seq
        return index

    def _make(self) -> None:
        """Make the tables from the file and replay the changes made since it was loaded. Tables ``make_ahead`` is
        making already are waited for and taken, not made a second time."""
        with self._making, index_file.no_cyclic_gc():
            loaded = self._unmade
            if loaded is None:
                return
            if self._ahead_done is not None:
                self._ahead_done.wait()
            ahead, self._ahead, self._ahead_done = self._ahead, None, None
            if ahead is not None and ahead[0] is loaded:
                tables = ahead[1]
            else:
                tables = self._tables(loaded.ids, *loaded.rest())
            self._set_tables(tables)
            pending, self._unmade, self._pending, self._view = self._pending, None, [], None
            for mid, change in pending:
                if change is None:
                    self._remove_tables(mid)
                else:
                    self._add_tables(mid, *change)

    @property
    def tables_made(self) -> bool:
        """Whether the save-time tables are made (a loaded index makes them when first read, or ``make_ahead``)."""
        return self._unmade is None

    def due_for_tables(self) -> bool:
        """Whether a loaded index's tables are still to be made, none is making them and the changes since the load
        reached ``TABLES_AFTER_CHANGES``: a server then makes them in a thread of their own (``make_ahead``)."""
        return self._unmade is not None and self._ahead_done is None and len(self._pending) >= TABLES_AFTER_CHANGES

    def make_ahead(self, conn: StoreConnection) -> bool:
        """Make the save-time tables of a loaded index now, ahead of the pass or file write that reads them (a server
        whose agent's changes since the load piled up, an index about to be written; at a million entries they take
        seconds): made from the file outside any store session (a read of the tables meanwhile waits for these, it
        does not make its own), then put in place
        inside one, where every save reads and changes them, so none sees them half made and the store is held only
        for the changes made since the load. Whether there were tables to make."""
        done = threading.Event()
        with self._making:
            loaded = self._unmade
            if loaded is None or self._ahead_done is not None:
                return False
            self._ahead_done = done
        try:
            with index_file.no_cyclic_gc():
                self._ahead = (loaded, self._tables(loaded.ids, *loaded.rest()))
        finally:
            done.set()
        with conn.session():
            self._make()
        return True

    def _set_tables(self, tables: dict[str, Any]) -> None:
        """Put the save-time tables ``_tables`` made in place."""
        for name, value in tables.items():
            setattr(self, name, value)

    @staticmethod
    def _tables(
        ids: list[str],
        content: list[tuple[str, ...]],
        labels: list[tuple[str, ...]],
        stems: list[frozenset[str]],
        stem_df: Counter[str],
        exact_of: list[tuple[str, str]],
    ) -> dict[str, Any]:
        """The save-time tables of these entries, by attribute."""
        exact: dict[tuple[str, str], set[str]] = {}
        for mid, key in zip(ids, exact_of, strict=True):
            found = exact.get(key)
            if found is None:
                exact[key] = {mid}
            else:
                found.add(mid)
        return {
            "_content_tokens": dict(zip(ids, content, strict=True)),
            "_labels": dict(zip(ids, labels, strict=True)),
            "_overlap": dict(zip(ids, stems, strict=True)),
            "_stem_df": stem_df,
            "_exact_of": dict(zip(ids, exact_of, strict=True)),
            "_exact": exact,
        }

    @classmethod
    def from_state(cls, state: index_file.IndexState) -> RecallIndex:
        """The index of ``state`` (entries in its order), synced up to its watermark."""
        index = cls()
        index.bm25.add_many(state.ids, list(map(operator.add, state.content, state.labels)))
        stem_df = state.stem_df
        if stem_df is None:
            stem_df = Counter()
            for stems in state.stems:
                stem_df.update(stems)
        index._set_tables(
            cls._tables(state.ids, state.content, state.labels, state.stems, Counter(stem_df), state.exact)
        )
        index.later = set(state.later)
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
            later=frozenset(self.later),
        )

    def persist(self, conn: StoreConnection, *, min_changes: int = 1) -> bool:
        """Write the index file when this index is built and at least ``min_changes`` entries changed since the file
        was last written or read (an index no file holds counts as changed in every entry). Holds the store to copy
        the index's tables and to record the file's token, not while encoding and writing. Whether it wrote the file;
        a failure is logged, never raised (the file only saves the next process time)."""
        path = self.file
        if path is None or conn.in_session or not conn.db_path.exists():  # a store removed meanwhile stays removed
            return False
        behind = self.changes_since_file
        if self.ready and not self.tables_made and (len(self.bm25) if behind is None else behind) >= min_changes:
            self.make_ahead(conn)  # outside the store: inside, only the changes since the load are replayed
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
        """The highest ``seq`` and the live rows at or below it (ids, contents, categories, tags, metadata in ``seq``
        order), read a chunk per session."""
        out: tuple[list[Any], ...] = tuple([] for _ in _INDEX_COLUMNS)
        top: int | None = None
        after = 0
        while True:
            with conn.session() as db:
                if top is None:
                    top = top_seq(db)
                chunk = live_index_rows(db, after=after, top=top, limit=INDEX_READ_CHUNK)
            for values, column in zip(out, _INDEX_COLUMNS, strict=True):
                values.extend(chunk[column].tolist())
            if len(chunk["seq"]) < INDEX_READ_CHUNK:
                return top, out
            after = int(chunk["seq"][-1])

    @classmethod
    def built(
        cls, ids: list[str], contents: list[str], categories: list[str], tags: list[str], metadata: list[str], top: int
    ) -> RecallIndex:
        """An index of the given live rows (``tags`` and ``metadata`` as the JSON text of the row; in ``seq`` order:
        what ``sync`` from nothing arrives at, a corpus at a time), synced up to ``top``."""
        index = cls()
        index.later = later_rows(ids, contents, categories, tags, metadata)
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

    def _take(self, other: RecallIndex) -> None:
        """Hold what ``other`` holds (not yet ready: the caller syncs, then marks it ready)."""
        self.bm25, self._content_tokens, self._overlap = other.bm25, other._content_tokens, other._overlap
        self._stem_df, self._exact, self._exact_of = other._stem_df, other._exact, other._exact_of
        self._labels, self.synced_seq, self.later = other._labels, other.synced_seq, other.later
        self._unmade, self._pending, self._view = other._unmade, other._pending, None
        self.changes_since_file = other.changes_since_file

    def add(
        self,
        mid: str,
        content: str,
        category: str,
        tags: Sequence[str],
        text: SaveText | None = None,
        *,
        later: bool = False,
    ) -> None:
        """Index an entry; ``text``: what a save derived from ``content`` already (used only when it is of
        ``content``); ``later``: it says it is a later version of a fact (store/recall.py ``later_version``)."""
        if text is None or text.content != content:
            text = SaveText(content)
        self.remove(mid)
        labels = label_tokens(category, tags)
        self.bm25.add(mid, [*text.words, *labels])
        if later:
            self.later.add(mid)
        if self.changes_since_file is not None:
            self.changes_since_file += 1
        if self._unmade is not None:
            self._pending.append((mid, (category, content, labels, text)))
            if self._view is not None:
                self._view.note(mid, self._pending[-1][1])
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
        self.later.discard(mid)
        if self.changes_since_file is not None:
            self.changes_since_file += 1
        if self._unmade is not None:
            self._pending.append((mid, None))
            if self._view is not None:
                self._view.note(mid, None)
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
        """``overlap_idf`` of each of ``terms`` (from the file while the tables are not made: ``_lookups``)."""
        view = self._lookups()
        if view is None:
            n, df = len(self.overlap), self.stem_df.get
            return {t: smooth_idf(n, df(t, 0)) for t in terms}
        n = len(self.bm25)  # the entries the tables will hold: the file's and the changes since
        terms = list(terms)
        return {t: smooth_idf(n, count) for t, count in zip(terms, view.stem_counts(terms), strict=True)}

    def stems(self, mid: str) -> frozenset[str] | None:
        """The overlap stems of the live entry ``mid`` (None: not indexed)."""
        view = self._lookups()
        return self.overlap.get(mid) if view is None else view.stems(mid)

    def exact_ids(self, key: tuple[str, str]) -> set[str]:
        """The live entries whose (category, exact-duplicate key) is ``key``."""
        view = self._lookups()
        return set(self.exact.get(key, ())) if view is None else view.exact_ids(key)

    def _lookups(self) -> _Unmade | None:
        """What a save looks up while the tables of a loaded index are not made (None once they are): the file's
        arrays with the changes since the load on top, so the first save after a load does not wait for tables a
        million entries take seconds to make, and that a server's background thread making them would slow down.
        Each change since the load is applied to these lookups once, so they stay as cheap however many there are;
        the tables are made when a pass or the index file needs them, or in the background once the changes pile up
        (``due_for_tables``). The caller holds the store (no change meanwhile)."""
        if self._unmade is None:
            return None
        if self._view is None:
            self._view = _Unmade(self._unmade, self._pending)
        return self._view

    def invalidate(self) -> None:
        """A transaction rolled back: entries added from its rows may never have been committed; rebuild on next use."""
        self.ready = False

    def mark_synced(self, seq: int) -> None:
        # Our own writes go into the index directly; nobody else writes while this process holds the file.
        if self.ready:
            self.synced_seq = max(self.synced_seq, seq)


#: A change since the load of an index file, while its tables are not made: (category, content, label tokens, what a
#: save derives from the content) of an entry indexed, None for one removed.
_Change = tuple[str, str, tuple[str, ...], "SaveText"] | None
#: Changes since the load after which a server makes a loaded index's tables in the background (``due_for_tables``):
#: until then saves look up the file (``RecallIndex._lookups``) and the changes wait in memory to be replayed.
TABLES_AFTER_CHANGES = 1000
_FILE = object()  # an entry no change since the load touched: the file says what it holds


class _Unmade:
    """The save-time lookups of a loaded index whose tables are not made: each answer the tables would give, read from
    the file's arrays (index_file.LoadedFile: positions, stems, stem counts, exact keys) with the changes since the
    load on top. Each change is applied once (``note``): its stems counted, the file's stems of the entry it replaces
    or removes uncounted, its exact key kept."""

    def __init__(self, loaded: index_file.LoadedFile, pending: list[tuple[str, _Change]]) -> None:
        self.loaded = loaded
        self.latest: dict[str, _Change] = {}  # entry -> its state now, for entries a change touched
        self.df: Counter[str] = Counter()  # stem counts to add to the file's
        self.exact: dict[tuple[str, str], set[str]] = {}  # of entries a change indexed
        for mid, change in pending:
            self.note(mid, change)

    def note(self, mid: str, change: _Change) -> None:
        before = self.latest.get(mid, _FILE)
        if before is _FILE:
            at = self.loaded.position(mid)
            if at is not None:
                self.df.subtract(self.loaded.stems_at(at))
        elif before is not None:
            self.df.subtract(before[3].stems)
            key = (before[0], before[3].key)
            self.exact[key].discard(mid)
            if not self.exact[key]:
                del self.exact[key]
        self.latest[mid] = change
        if change is not None:
            self.df.update(change[3].stems)
            self.exact.setdefault((change[0], change[3].key), set()).add(mid)

    def stems(self, mid: str) -> frozenset[str] | None:
        change = self.latest.get(mid, _FILE)
        if change is _FILE:
            at = self.loaded.position(mid)
            return None if at is None else self.loaded.stems_at(at)
        return None if change is None else change[3].stems

    def stem_counts(self, terms: list[str]) -> list[int]:
        held, df = self.loaded.stem_counts(terms), self.df
        return [held[t] + df.get(t, 0) for t in terms]

    def exact_ids(self, key: tuple[str, str]) -> set[str]:
        found = {self.loaded.id_at(at) for at in self.loaded.exact_positions(*key)}
        return {mid for mid in found if mid not in self.latest} | self.exact.get(key, set())


def index_of(conn: StoreConnection) -> RecallIndex:
    """The recall index of this process on the file of ``conn`` (made, not built, on first call: it follows the
    rows from then on)."""
    index = getattr(conn, "_recall_index", None)
    if index is None:
        with _indexed_guard:
            index = getattr(conn, "_recall_index", None)
            if index is None:
                index = RecallIndex(index_file.index_path(conn.db_path))
                conn.add_open_hook(index.on_open)
                conn.add_rollback_hook(index.invalidate)
                conn.add_row_observer(index)
                conn._recall_index = index  # type: ignore[attr-defined]
                _indexed.append((os.getpid(), conn))
    return index


#: What the recall index of one live entry holds in memory, about (the compiled kernel's postings, the save-time
#: tables, the ids): 1.8 kB measured at 30,000 entries. What a server counts an agent's index at (service/warm.py).
BYTES_PER_ENTRY = 2000


def current(conn: StoreConnection) -> RecallIndex | None:
    """The recall index of this process on the file of ``conn`` when one is built, else None."""
    index = getattr(conn, "_recall_index", None)
    return index if index is not None and index.ready else None


def footprint(conn: StoreConnection) -> int:
    """About how many bytes the recall index of this process on the file of ``conn`` holds (0: none built)."""
    index = getattr(conn, "_recall_index", None)
    return 0 if index is None or not index.ready else len(index.bm25) * BYTES_PER_ENTRY


def release(conn: StoreConnection, *, min_changes: int = 1) -> bool:
    """Let go of the recall index of this process on the file of ``conn`` (a server evicting an idle agent): written
    to its file first when at least ``min_changes`` entries changed since it was (0: never), then no longer kept in
    step; the next use loads the file again and catches up on the rows changed since it was written. Whether there
    was one."""
    with _indexed_guard:
        index = getattr(conn, "_recall_index", None)
        if index is None:
            return False
        del conn._recall_index  # type: ignore[attr-defined]
        _indexed[:] = [(pid, c) for pid, c in _indexed if c is not conn]
    if min_changes > 0 and index.ready:
        try:
            index.persist(conn, min_changes=min_changes)
        except Exception as exc:  # noqa: BLE001 - the file only saves the next load time
            log.warning("recall index of %s not written: %s", conn.db_path, exc)
    conn.remove_observer(index, index.on_open, index.invalidate)
    return True


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


# --- reads of the index, for the rows of a MemoryStore ---------------------------------------------------------------
def of(memories: MemoryStore) -> RecallIndex:
    """The recall index of the file ``memories`` reads (made on first call, built on first use)."""
    return index_of(memories.connection)


def prepare(memories: MemoryStore) -> None:
    """Build this process's recall index now if it is not built, without holding the store for the build
    (``RecallIndex.prepare``): for a caller about to search or save inside its own transactions, where a first
    build would have to hold the store all along. A no-op once built, and inside a session."""
    of(memories).prepare(memories.connection)


def persist(memories: MemoryStore, *, min_changes: int = 1) -> bool:
    """Write this process's recall index to its file beside the store (store/index_file.py) when it is built and
    at least ``min_changes`` entries changed since the file was written; whether it wrote it."""
    return of(memories).persist(memories.connection, min_changes=min_changes)


@contextmanager
def save_session(memories: MemoryStore, *, transaction: bool) -> Iterator[duckdb.DuckDBPyConnection]:
    """The session a save reads in (one transaction with ``transaction``), the recall index in step with the
    file: no other process or thread writes the store meanwhile."""
    index = of(memories)
    with memories.session(transaction=transaction) as conn:
        index.ensure(conn)
        yield conn


def search(memories: MemoryStore, query: str, limit: int = 10) -> list[tuple[MemoryEntry, float]]:
    """Live entries for ``query``, best first: BM25 over content, category and tags finds them, and the current
    version of a fact comes before a stale one (store/recall.py: correction standing, subject time or save time,
    supersession, and the ``RecallRecencyWeight`` / ``RecallReinforcementWeight`` signals). Archived entries are
    never returned."""
    if limit <= 0:
        return []
    tokens = tokenize(query)
    index = of(memories)
    index.prepare(memories.connection)
    with memories.connection.session() as conn:
        index.ensure(conn)
        hits = index.bm25.search(tokens, limit=candidate_count(limit, memories.options))
        if not hits:
            return []
        ids = [h for h, _ in hits]
        by_id = {e.id: e for e in memories.cached_rows(conn, rows_needed(ids, limit, memories.options, index.later))}
        if len(by_id) < len(ids) and not rows_complete(ids, limit, by_id):
            by_id.update((e.id, e) for e in memories.cached_rows(conn, [i for i in ids if i not in by_id]))
    live = [(by_id[h], score) for h, score in hits if h in by_id and not by_id[h].is_archived]
    return rank_recall(live, tokens, memories.options, limit)


def same_fact(memories: MemoryStore, a: str, b: str) -> bool:
    """Whether two texts are near duplicates by the save-time measure (``MemoryStore.similarity_measure``), with the
    idf of the live corpus as save-time dedup and clustering weigh words."""
    measure, threshold = memories.similarity_measure()
    index = of(memories)
    index.prepare(memories.connection)
    with memories.connection.session() as conn:
        index.ensure(conn)
    if measure == "overlap":
        return overlap_similarity(a, b, idf=index.overlap_idf) >= threshold - 1e-12
    return tfidf_cosine(a, b, index.bm25) >= threshold


def find_exact(memories: MemoryStore, content: str, category: str) -> list[MemoryEntry]:
    """Live entries of ``category`` whose content equals ``content`` after normalising case, white space and
    punctuation (text/similarity.exact_key), oldest first."""
    index = of(memories)
    index.prepare(memories.connection)
    with memories.connection.session() as conn:
        index.ensure(conn)
        return exact_matches(memories, conn, exact_key(content), category)


def exact_matches(memories: MemoryStore, conn: duckdb.DuckDBPyConnection, key: str, category: str) -> list[MemoryEntry]:
    """The live entries of ``category`` whose exact-duplicate key (text/similarity.exact_key) is ``key``, oldest
    first."""
    ids = sorted(of(memories).exact_ids((category, key)))
    if not ids:
        return []
    return sorted(memories.live_entries(conn, ids), key=lambda e: (e.created_at, e.id))


def recall_candidates(
    memories: MemoryStore, conn: duckdb.DuckDBPyConnection, text: SaveText, *, limit: int
) -> list[tuple[str, str]]:
    """(id, content) of the live entries BM25 ranks highest for ``text`` (its words without frame dates), best
    first, at most ``limit``."""
    tokens = text.unframed_words or text.words
    hits = [cid for cid, _ in of(memories).bm25.search(tokens, limit=limit)] if tokens else []
    if not hits:
        return []
    order = {cid: i for i, cid in enumerate(hits)}
    return sorted(memories.live_texts(conn, hits), key=lambda d: order[d[0]])


def lexical_matches(memories: MemoryStore, conn: duckdb.DuckDBPyConnection, text: SaveText) -> list[tuple[str, float]]:
    """(id, similarity) of the indexed entries at or above the save-time threshold of the lexical measure
    (``MemoryStore.similarity_measure``), with the idf of the live corpus, as clustering measures them."""
    # Stopwords are not in the index (df 0 would give them the highest idf): vectors use content tokens only.
    index = of(memories)
    measure, threshold = memories.similarity_measure()
    q_tokens = text.words
    if not q_tokens:
        return []
    close: list[tuple[str, float]] = []
    if measure == "overlap":
        stems = text.stems
        query = text.unframed_words or q_tokens
        stems_of = index.stems
        candidates = [(cid, c) for cid, _ in index.bm25.search(query, limit=20) if (c := stems_of(cid))]
        weight = index.overlap_weights(stems.union(*(c for _, c in candidates))).__getitem__  # each idf once
        q_total = sum(map(weight, stems))
        for cid, c_stems in candidates:
            sim = overlap_score(sum(map(weight, stems & c_stems)), q_total, sum(map(weight, c_stems)))
            if sim >= threshold - 1e-12:
                close.append((cid, sim))
        return close
    q_vec = index.bm25.tfidf_vector(q_tokens)
    for cid, _score in index.bm25.search(q_tokens, limit=10):
        c_tokens = index.content_tokens.get(cid)
        if not c_tokens:
            continue
        sim = index.bm25.cosine(q_vec, index.bm25.tfidf_vector(c_tokens))
        if sim >= threshold:
            close.append((cid, sim))
    return close
