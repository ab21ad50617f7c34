"""The ``embeddings`` table of a store: unit vectors of texts keyed by (sha256 of the text, embedding model), so an
unchanged entry is never embedded twice and an idle agent makes zero embedding calls.

The store only keeps the vectors; asking an endpoint for them, comparing and clustering them is the model layer's
(``dream_assets.llm.embedding_index``), so the store makes no network call and knows nothing of the model layer.
"""

from __future__ import annotations

import hashlib
import json
import logging
from collections.abc import Sequence
from datetime import datetime
from typing import Any

import numpy as np

from dream_assets.store.connection import StoreConnection
from dream_assets.store.schema import ensure_schema, to_db

__all__ = ["EmbeddingCache", "connection_of", "content_hash"]

#: The ``meta`` key a model's calibrated similarity threshold is kept under (one row per embedding model).
_CALIBRATION_KEY = "embedding_threshold:"

log = logging.getLogger("dream_assets.store.embeddings")


def content_hash(text: str) -> str:
    """The cache key of a text: sha256 of its UTF-8 bytes, lower-case hex (DuckDB's ``sha256(content)`` agrees)."""
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def connection_of(store: Any) -> StoreConnection:
    for attr in ("connection", "_conn"):  # DreamStore, MemoryStore
        conn = getattr(store, attr, None)
        if isinstance(conn, StoreConnection):
            return conn
    if isinstance(store, StoreConnection):
        return store
    raise TypeError(
        f"the embeddings cache needs a DreamStore, MemoryStore or StoreConnection, not {type(store).__name__}"
    )


class EmbeddingCache:
    """The ``embeddings`` table of one store: unit vectors keyed by (content hash, model)."""

    def __init__(self, connection: StoreConnection) -> None:
        self._conn = connection
        connection.add_open_hook(ensure_schema)

    @property
    def connection(self) -> StoreConnection:
        return self._conn

    def _tell(self, conn: Any, model: str, **change: Any) -> None:
        """Tell what follows the rows of this process (``StoreConnection.add_row_observer``: the dense index of a
        search, dream_assets/dense_index.py) that vectors changed; the store imports none of them."""
        for observer in self._conn.row_observers:
            told = getattr(observer, "vectors_changed", None)
            if told is not None:
                told(conn, model, **change)

    def get(self, model: str, hashes: Sequence[str]) -> dict[str, np.ndarray]:
        """The cached vectors among ``hashes`` for ``model``."""
        wanted = sorted(set(hashes))
        if not wanted:
            return {}
        with self._conn.session() as conn:
            found = conn.execute(
                "SELECT content_hash, vector FROM embeddings WHERE model = ? AND content_hash IN "
                "(SELECT unnest(?::VARCHAR[]))",
                [model, wanted],
            ).fetchnumpy()
        return {
            key: np.asarray(vector, dtype=np.float32)
            for key, vector in zip(found["content_hash"].tolist(), found["vector"], strict=True)
        }

    def put(self, model: str, hashes: Sequence[str], matrix: np.ndarray, *, now: datetime) -> int:
        """Store one row of ``matrix`` per hash (an existing (hash, model) row is kept). Returns rows written."""
        if len(hashes) != len(matrix):
            raise ValueError(f"EmbeddingCache.put: {len(hashes)} hashes for {len(matrix)} vectors")
        if not len(hashes):
            return 0
        matrix = np.asarray(matrix, dtype=np.float32)
        created = to_db(now)
        rows = [
            [h, model, int(matrix.shape[1]), vector, created] for h, vector in zip(hashes, matrix.tolist(), strict=True)
        ]
        with self._conn.transaction() as conn:
            before = self._count(conn, model)
            conn.executemany(
                "INSERT OR IGNORE INTO embeddings (content_hash, model, dim, vector, created_at) "
                "VALUES (?, ?, ?, ?, ?)",
                rows,
            )
            put: dict[str, np.ndarray] = {}
            for h, vector in zip(hashes, matrix, strict=True):
                put.setdefault(h, vector)  # of one hash twice, the first row is the one kept
            self._tell(conn, model, put=put)
            return self._count(conn, model) - before

    def delete(self, model: str, hashes: Sequence[str]) -> int:
        """Drop the vectors of ``hashes`` for ``model`` (unusable ones, embedded again). Returns rows deleted."""
        wanted = sorted(set(hashes))
        if not wanted:
            return 0
        with self._conn.transaction() as conn:
            before = self._count(conn, model)
            conn.execute(
                "DELETE FROM embeddings WHERE model = ? AND content_hash IN (SELECT unnest(?::VARCHAR[]))",
                [model, wanted],
            )
            self._tell(conn, model, deleted=wanted)
            return before - self._count(conn, model)

    def dims(self, model: str) -> set[int]:
        """The vector sizes cached for ``model`` (one, for a healthy endpoint)."""
        with self._conn.session() as conn:
            rows = conn.execute("SELECT DISTINCT dim FROM embeddings WHERE model = ?", [model]).fetchall()
        return {int(r[0]) for r in rows}

    def count(self, model: str | None = None) -> int:
        with self._conn.session() as conn:
            return self._count(conn, model)

    @staticmethod
    def _count(conn: Any, model: str | None) -> int:
        if model is None:
            return int(conn.execute("SELECT count(*) FROM embeddings").fetchall()[0][0])
        return int(conn.execute("SELECT count(*) FROM embeddings WHERE model = ?", [model]).fetchall()[0][0])

    def prune_orphans(self) -> int:
        """Delete vectors whose text is no memory's content (live or archived): e.g. after a purge or an edit.
        Returns the rows deleted. Vectors of texts only ever compared (a save that reinforced) go too."""
        with self._conn.transaction() as conn:
            before = self._count(conn, None)
            conn.execute("DELETE FROM embeddings WHERE content_hash NOT IN (SELECT sha256(content) FROM memories)")
            for model in {o.model for o in self._conn.row_observers if hasattr(o, "vectors_changed")}:
                self._tell(conn, model)  # no row's vector went, but the fingerprint of the model's vectors changed
            return before - self._count(conn, None)

    # --- what the model layer searches and calibrates over: the live entries' vectors ----------------------------
    def live_count(self, model: str) -> int:
        """Live memories with a vector for ``model``."""
        with self._conn.session() as conn:
            return int(
                conn.execute(
                    "SELECT count(*) FROM memories m JOIN embeddings e ON e.content_hash = sha256(m.content) "
                    "AND e.model = ? WHERE m.archived_at IS NULL",
                    [model],
                ).fetchall()[0][0]
            )

    def live_vectors(self, model: str, *, limit: int | None = None) -> tuple[list[str], np.ndarray]:
        """(ids, one unit row per id) of live memories with a vector for ``model``, by id; at most ``limit`` of them
        (a sample spread over the ids: every k-th)."""
        with self._conn.session() as conn:
            found = conn.execute(
                "SELECT m.id, e.vector FROM memories m JOIN embeddings e ON e.content_hash = sha256(m.content) "
                "AND e.model = ? WHERE m.archived_at IS NULL ORDER BY m.id",
                [model],
            ).fetchall()
        if limit is not None and len(found) > limit:
            step = len(found) / limit
            found = [found[int(i * step)] for i in range(limit)]
        if not found:
            return [], np.zeros((0, 0), dtype=np.float32)
        return [str(r[0]) for r in found], np.asarray([r[1] for r in found], dtype=np.float32)

    def nearest_live(self, model: str, vector: np.ndarray, *, limit: int) -> list[tuple[str, float]]:
        """(id, cosine) of the ``limit`` live memories whose vector for ``model`` is closest to the unit ``vector``,
        closest first (ties by id). Computed inside the store: no vector leaves it."""
        query = [float(x) for x in np.asarray(vector, dtype=np.float32).ravel()]
        with self._conn.session() as conn:
            rows = conn.execute(
                "SELECT m.id, list_dot_product(e.vector, ?::FLOAT[]) AS sim FROM memories m JOIN embeddings e "
                "ON e.content_hash = sha256(m.content) AND e.model = ? AND e.dim = ? "
                "WHERE m.archived_at IS NULL ORDER BY sim DESC, m.id LIMIT ?",
                [query, model, len(query), int(limit)],
            ).fetchall()
        return [(str(r[0]), float(r[1])) for r in rows]

    def calibration(self, model: str) -> dict[str, Any] | None:
        """The similarity threshold calibrated for ``model`` on this store, as it was kept; None when there is none
        (or what is kept cannot be read)."""
        with self._conn.session() as conn:
            row = conn.execute("SELECT value FROM meta WHERE key = ?", [_CALIBRATION_KEY + model]).fetchone()
        if row is None:
            return None
        try:
            value = json.loads(row[0])
        except ValueError:
            log.warning("the similarity threshold kept for EmbeddingModel %r is not JSON: calibrating again", model)
            return None
        return value if isinstance(value, dict) else None

    def keep_calibration(self, model: str, value: dict[str, Any]) -> None:
        """Keep ``value`` (JSON-ready) as the calibration of ``model`` on this store, replacing an older one."""
        with self._conn.transaction() as conn:
            key, text = _CALIBRATION_KEY + model, json.dumps(value, sort_keys=True)
            conn.execute("INSERT OR REPLACE INTO meta VALUES (?, ?)", [key, text])
