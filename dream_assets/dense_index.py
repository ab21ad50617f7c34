"""The dense half of a fused search (recall_fusion.py) in a process that searches again and again (``dream serve``,
a LangGraph store handle): the live memories' vectors for the embedding model in use, one float32 matrix in memory
with their ids, so a search is one matrix-vector product instead of a join that hashes every live row's text and
DuckDB's ``list_dot_product`` over each (150-190 ms at 100k entries of 384 dimensions).

It ranks exactly as ``EmbeddingCache.nearest_live`` (the SQL path): the live rows whose text (by its sha256) has a
vector of the model and size, closest first by cosine (the dot product of unit float32 vectors), ties by id; a live
row without a vector is absent, as there. The cosines agree to float32 precision (the sums are added up in another
order).

Which path a search takes: a process's first dense search on a model (a ``dream memory search`` from the shell) uses
the SQL path, which costs less than building the matrix; from the ``KEEP_AFTER_SEARCHES``-th on, the matrix is built
(once) and kept. ``nearest_live`` says which it took (``KEPT`` or ``SQL``).

Kept in step the way the recall index is (recall_index.py), with the same hooks: a row observer of the store
connection (``row_live``, ``row_gone``, ``rows_written``, ``rows_inserted``), the rows another process wrote read by
their ``seq`` when the file is opened again (``row_events_since``), a rollback dropping the matrix (built again on the
next search). The index keeps each live id's content hash, so no search hashes the rows again; a new or edited row's
vector is read from the embeddings table by its hash on the next search.

The vectors themselves change through ``EmbeddingCache`` (put, delete, prune), which tells the same observers
(``vectors_changed``). Another process's changes are noticed by a fingerprint of the model's vectors (their count
and an XOR of ``hash(content_hash, created_at)``, about 6 ms at 100k, read when the file is opened again): when it
changed, the vectors of the live rows that had none are read; if they explain the change (only additions) they go in
the matrix, else every vector is read again (about 0.3 s at 100k).

Memory: 4 bytes a dimension a live entry: 100,000 x 384 float32 is 154 MB (with up to a quarter more for growth), the
ids and hashes about 25 MB more. float16 would halve it but not rank identically, so it is float32.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterable
from typing import Any

import duckdb
import numpy as np

from dream_assets.store.connection import StoreConnection
from dream_assets.store.embeddings import EmbeddingCache, content_hash
from dream_assets.store.memory import row_events_since, top_seq

__all__ = ["KEEP_AFTER_SEARCHES", "KEPT", "SQL", "DenseIndex", "footprint", "nearest_live", "release"]

log = logging.getLogger("dream_assets.dense_index")

#: The dense search of a process on a model from which the vectors are kept in memory (earlier ones use the SQL).
KEEP_AFTER_SEARCHES = 2
KEPT, SQL = "kept", "sql"

_FINGERPRINT_SQL = (
    "SELECT count(*), coalesce(bit_xor(hash(content_hash, created_at)), 0) FROM embeddings WHERE model = ? AND dim = ?"
)


class DenseIndex:
    """The vectors of the live memories for one (model, size) of one database file, as a matrix with their ids (see
    the module docstring). Every method is called inside a session of the store connection, which serialises them."""

    def __init__(self, model: str, dim: int) -> None:
        self.model, self.dim = model, int(dim)
        self.ready = False
        self.searches = 0
        self._building = threading.Lock()  # one build at a time (outside the store: see prepare)
        self._reset()

    def _reset(self) -> None:
        self.ids: list[str] = []  # the id of each used row of the matrix
        self.row_of: dict[str, int] = {}
        self.matrix = np.zeros((0, self.dim), dtype=np.float32)  # capacity rows, the first len(ids) used
        self.hash_of: dict[str, str] = {}  # every live id -> its content hash (with a vector or not)
        self.unread: set[str] = set()  # live ids whose vector is still to be looked up
        self.absent: dict[str, set[str]] = {}  # content hash -> live ids of it, looked up and with no vector
        self.synced_seq = 0
        self.fingerprint: tuple[int, int] = (0, 0)

    def __len__(self) -> int:
        return len(self.ids)

    @property
    def nbytes(self) -> int:
        """About what the index holds: the matrix and, per live id, its id and hash (about 250 bytes)."""
        return int(self.matrix.nbytes) + 250 * len(self.hash_of)

    # ------------------------------------------------------------------ build and search
    def build(self, conn: duckdb.DuckDBPyConnection) -> None:
        """Read every live row's hash and vector inside the caller's session (``prepare`` builds outside one)."""
        top = top_seq(conn)
        rows = self._live_rows(conn)
        self._take(top, self._hashed(rows), self._fingerprint(conn), self._vectors(conn))

    def prepare(self, conn: StoreConnection) -> None:
        """Build the index, when it is not built, without holding the store for all of it (about 1 s at 100k
        entries): the live rows are read in one short session and hashed outside it, the vectors read in a second,
        the matrix made outside, and what changed meanwhile applied in a third as after a reopen (``on_open``: the
        rows by ``seq``, the vectors by their fingerprint). A caller inside a session does nothing here (``nearest``
        builds inside it)."""
        if self.ready or conn.in_session:
            return
        with self._building:
            if self.ready:
                return
            with conn.session() as db:
                top, rows = top_seq(db), self._live_rows(db)
            hashes = self._hashed(rows)
            del rows
            with conn.session() as db:
                fingerprint, found = self._fingerprint(db), self._vectors(db)
            state = self._made(hashes, found)
            del found
            with conn.session() as db:
                if not self.ready:
                    self._install(top, hashes, fingerprint, state)
                    self.on_open(db)

    @staticmethod
    def _live_rows(conn: duckdb.DuckDBPyConnection) -> dict[str, Any]:
        return conn.execute("SELECT id, content FROM memories WHERE archived_at IS NULL").fetchnumpy()

    @staticmethod
    def _hashed(rows: dict[str, Any]) -> dict[str, str]:
        return {
            mid: content_hash(text) for mid, text in zip(rows["id"].tolist(), rows["content"].tolist(), strict=True)
        }

    def _vectors(self, conn: duckdb.DuckDBPyConnection) -> dict[str, Any]:
        return conn.execute(
            "SELECT content_hash, vector FROM embeddings WHERE model = ? AND dim = ?", [self.model, self.dim]
        ).fetchnumpy()

    def _made(self, hashes: dict[str, str], found: dict[str, Any]) -> tuple[list[str], np.ndarray, dict[str, set[str]]]:
        """(ids with a vector, their matrix, hash -> ids without one) of live ``hashes`` and the vectors ``found``."""
        vector_of = dict(zip(found["content_hash"].tolist(), found["vector"], strict=True))
        ids = [mid for mid, h in hashes.items() if h in vector_of]
        matrix = np.zeros((len(ids), self.dim), dtype=np.float32)
        for i, mid in enumerate(ids):
            matrix[i] = vector_of[hashes[mid]]
        absent: dict[str, set[str]] = {}
        for mid, h in hashes.items():
            if h not in vector_of:
                absent.setdefault(h, set()).add(mid)
        return ids, matrix, absent

    def _take(self, top: int, hashes: dict[str, str], fingerprint: tuple[int, int], found: dict[str, Any]) -> None:
        self._install(top, hashes, fingerprint, self._made(hashes, found))

    def _install(
        self,
        top: int,
        hashes: dict[str, str],
        fingerprint: tuple[int, int],
        state: tuple[list[str], np.ndarray, dict[str, set[str]]],
    ) -> None:
        self._reset()
        self.synced_seq, self.hash_of, self.fingerprint = top, hashes, fingerprint
        self.ids, self.matrix, self.absent = state
        self.row_of = {mid: i for i, mid in enumerate(self.ids)}
        self.ready = True

    def _read_all(self, conn: duckdb.DuckDBPyConnection) -> None:
        """Every vector of the live ids again, from the embeddings table (inside the caller's session)."""
        self._install(
            self.synced_seq, self.hash_of, self._fingerprint(conn), self._made(self.hash_of, self._vectors(conn))
        )

    def nearest(self, conn: duckdb.DuckDBPyConnection, vector: np.ndarray, *, limit: int) -> list[tuple[str, float]]:
        """(id, cosine) of the ``limit`` live rows closest to the unit ``vector``, closest first, ties by id."""
        if not self.ready:
            self.build(conn)
        if self.unread:
            self._look_up(conn, self.unread)
        n = len(self.ids)
        if n == 0 or limit <= 0:
            return []
        query = np.asarray(vector, dtype=np.float32).ravel()
        sims = self.matrix[:n] @ query
        if n > limit:
            kth = np.partition(sims, n - limit)[n - limit]
            candidates = np.flatnonzero(sims >= kth).tolist()  # every row tied with the last one kept, too
        else:
            candidates = range(n)
        ids = self.ids
        best = sorted(candidates, key=lambda i: (-sims[i], ids[i]))[:limit]
        return [(ids[i], float(sims[i])) for i in best]

    # ------------------------------------------------------------------ the rows' observer (store/memory.py)
    def on_open(self, conn: duckdb.DuckDBPyConnection) -> None:
        """The file was (re)opened: another process may have written rows or vectors since."""
        if self.ready:
            self.sync(conn)
            self._check_vectors(conn)

    def sync(self, conn: duckdb.DuckDBPyConnection) -> None:
        """Apply the rows and purge records with a ``seq`` above the watermark, in order."""
        top = self.synced_seq
        for seq, row in row_events_since(conn, self.synced_seq):
            if len(row) == 1 or row[4] is not None:
                self._forget(row[0])
            else:
                self._live(row[0], row[1])
            top = max(top, seq)
        self.synced_seq = top

    def row_live(self, mid: str, content: str, *_fields: object, **_named: object) -> None:
        """A live row (store/connection.py ``add_row_observer``): its vector is looked for by its content alone."""
        if self.ready:
            self._live(mid, content)

    def row_gone(self, mid: str) -> None:
        if self.ready:
            self._forget(mid)

    def rows_written(self, seq: int) -> None:
        if self.ready:
            self.synced_seq = max(self.synced_seq, seq)

    def rows_inserted(self, conn: duckdb.DuckDBPyConnection) -> None:
        if self.ready:
            self.sync(conn)

    def invalidate(self) -> None:
        """A transaction rolled back: what was applied from its rows or vectors may never have been committed."""
        self.ready = False
        self._reset()

    def vectors_changed(
        self,
        conn: duckdb.DuckDBPyConnection,
        model: str,
        *,
        put: dict[str, np.ndarray] | None = None,
        deleted: Iterable[str] = (),
    ) -> None:
        """This process changed the embeddings table on ``conn`` (``EmbeddingCache``): ``put`` the vectors it added
        (by hash), ``deleted`` the hashes it dropped (a prune tells neither: it drops only vectors of no row)."""
        if not self.ready or model != self.model:
            return
        gone = set(deleted)
        for mid in [mid for mid in self.row_of if self.hash_of[mid] in gone] if gone else ():
            self._drop_row(mid)
            self.absent.setdefault(self.hash_of[mid], set()).add(mid)
        for h, vector in (put or {}).items():
            waiting = self.absent.pop(h, None)
            if waiting and len(vector) == self.dim:
                for mid in waiting:
                    self._set_row(mid, vector)
            elif waiting:
                self.absent[h] = waiting
        self.fingerprint = self._fingerprint(conn)

    # ------------------------------------------------------------------
    def _live(self, mid: str, content: str) -> None:
        h = content_hash(content)
        if self.hash_of.get(mid) == h:
            return  # the same text: its vector (or none) is as it was
        self._forget(mid)
        self.hash_of[mid] = h
        self.unread.add(mid)

    def _forget(self, mid: str) -> None:
        h = self.hash_of.pop(mid, None)
        self._drop_row(mid)
        self.unread.discard(mid)
        if h is not None and h in self.absent:
            self.absent[h].discard(mid)
            if not self.absent[h]:
                del self.absent[h]

    def _set_row(self, mid: str, vector: np.ndarray) -> None:
        row = self.row_of.get(mid)
        if row is None:
            row = len(self.ids)
            if row == len(self.matrix):
                grown = np.zeros((max(16, row + row // 4), self.dim), dtype=np.float32)
                grown[:row] = self.matrix[:row]
                self.matrix = grown
            self.ids.append(mid)
            self.row_of[mid] = row
        self.matrix[row] = vector

    def _drop_row(self, mid: str) -> None:
        row = self.row_of.pop(mid, None)
        if row is None:
            return
        last = len(self.ids) - 1
        if row != last:  # the last row moves into the hole
            moved = self.ids[last]
            self.matrix[row] = self.matrix[last]
            self.ids[row] = moved
            self.row_of[moved] = row
        self.ids.pop()

    def _look_up(self, conn: duckdb.DuckDBPyConnection, mids: Iterable[str]) -> tuple[int, int]:
        """Read the vectors of ``mids`` (live ids) by their hashes: into the matrix, or ``absent`` when there is none.
        Returns (how many vectors were found, the XOR of their ``hash(content_hash, created_at)``)."""
        mids = list(mids)
        wanted = sorted({self.hash_of[m] for m in mids if m in self.hash_of})
        found = conn.execute(
            "SELECT content_hash, vector, hash(content_hash, created_at) FROM embeddings WHERE model = ? AND dim = ? "
            "AND content_hash IN (SELECT unnest(?::VARCHAR[]))",
            [self.model, self.dim, wanted],
        ).fetchall()
        vector_of = {r[0]: r[1] for r in found}
        mixed = 0
        for r in found:
            mixed ^= int(r[2])
        for mid in mids:
            h = self.hash_of.get(mid)
            if h is None:
                continue
            self.unread.discard(mid)
            if h in vector_of:
                if h in self.absent:
                    self.absent[h].discard(mid)
                    if not self.absent[h]:
                        del self.absent[h]
                self._set_row(mid, np.asarray(vector_of[h], dtype=np.float32))
            else:
                self.absent.setdefault(h, set()).add(mid)
        return len(found), mixed

    def _check_vectors(self, conn: duckdb.DuckDBPyConnection) -> None:
        """After the file was opened again: when the model's vectors changed, read those of the live rows that had
        none; unless they are all that changed, read every vector again."""
        now = self._fingerprint(conn)
        if now == self.fingerprint:
            return
        count, mixed = self.fingerprint
        waiting = [mid for ids in self.absent.values() for mid in ids]
        added, added_mixed = self._look_up(conn, waiting) if waiting else (0, 0)
        if now != (count + added, mixed ^ added_mixed):
            log.info("vectors of EmbeddingModel %r changed in another process: read again", self.model)
            self._read_all(conn)
        self.fingerprint = now

    def _fingerprint(self, conn: duckdb.DuckDBPyConnection) -> tuple[int, int]:
        row = conn.execute(_FINGERPRINT_SQL, [self.model, self.dim]).fetchone()
        assert row is not None
        return int(row[0]), int(row[1])


# ---------------------------------------------------------------------------------------------------------------------
_guard = threading.Lock()


def _indexes(conn: StoreConnection) -> dict[tuple[str, int], DenseIndex]:
    found = getattr(conn, "_dense_indexes", None)
    if found is None:
        with _guard:
            found = getattr(conn, "_dense_indexes", None)
            if found is None:
                found = {}
                conn._dense_indexes = found  # type: ignore[attr-defined]
    return found


def index_of(conn: StoreConnection, model: str, dim: int) -> DenseIndex:
    """The dense index of this process on the file of ``conn`` for (``model``, ``dim``): made (not built) on first
    call, and following the rows from then on."""
    indexes = _indexes(conn)
    index = indexes.get((model, dim))
    if index is None:
        with _guard:
            index = indexes.get((model, dim))
            if index is None:
                index = DenseIndex(model, dim)
                conn.add_open_hook(index.on_open)
                conn.add_rollback_hook(index.invalidate)
                conn.add_row_observer(index)
                indexes[(model, dim)] = index
    return index


def nearest_live(cache: EmbeddingCache, model: str, vector: np.ndarray, *, limit: int) -> tuple[list[Any], str]:
    """What ``EmbeddingCache.nearest_live`` answers, and the path that answered it: ``SQL`` (the store's join, for a
    process's first dense search on the model) or ``KEPT`` (this process's matrix)."""
    conn = cache.connection
    query = np.asarray(vector, dtype=np.float32).ravel()
    index = index_of(conn, model, len(query))
    index.searches += 1
    if not index.ready and index.searches < KEEP_AFTER_SEARCHES:
        return cache.nearest_live(model, query, limit=limit), SQL
    index.prepare(conn)
    with conn.session() as db:
        return index.nearest(db, query, limit=limit), KEPT


def footprint(conn: StoreConnection) -> int:
    """About how many bytes the dense indexes of this process on the file of ``conn`` hold (0: none built)."""
    return sum(i.nbytes for i in getattr(conn, "_dense_indexes", {}).values() if i.ready)


def release(conn: StoreConnection) -> bool:
    """Let go of the dense indexes of this process on the file of ``conn`` (a server evicting an idle agent): the next
    searches build them again. Whether there were any."""
    with _guard:
        indexes = getattr(conn, "_dense_indexes", None)
        if indexes is None:
            return False
        del conn._dense_indexes  # type: ignore[attr-defined]
    for index in indexes.values():
        conn.remove_observer(index, index.on_open, index.invalidate)
    return bool(indexes)
