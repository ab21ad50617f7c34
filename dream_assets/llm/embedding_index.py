"""Embedding vectors of an agent's memories: cached in its store, compared by cosine, clustered like the lexical
measure.

The spec measures near-duplicates by "cosine over embeddings where available, Jaccard otherwise". This module is the
"where available" half; ``dream_assets.llm.embeddings`` talks to the endpoint. Vectors live in the store's
``embeddings`` table (``dream_assets.store.embeddings.EmbeddingCache``) keyed by (sha256 of the text, embedding
model), so an unchanged entry is never embedded twice and an idle agent makes zero embedding calls; a new or edited
entry costs one embedded text.

API for clustering and save-time dedup (``provider`` is ``build_embedding_provider(options, usage=client.usage)``;
None means no embedding model is configured and the lexical measure applies):

    index = EmbeddingIndex(store, provider, now=now)        # store: DreamStore, MemoryStore or StoreConnection
    index.vectors(entries) -> dict[str, np.ndarray]          # entries: MemoryEntry or (id, text); unit float32 rows
    index.similar(text, candidates, *, threshold=None) -> list[tuple[str, float]]
                                                             # (id, cosine) most similar first; cached like entries
    index.embed_texts(texts) -> np.ndarray                   # (len(texts), dim), one unit row per text
    index.missing(texts) -> list[str]                        # texts embed_texts would send (no provider call)
    cosine_clusters(ids, vectors, threshold, max_cluster_size) -> DuplicateClusters
                                                             # same shape and capped union as find_duplicate_clusters

Clustering with embeddings is therefore::

    vectors = index.vectors(live)
    threshold = similarity_threshold(options, store, now=now)   # llm/embedding_threshold.py: option, table, calibrated
    clusters = cosine_clusters([e.id for e in live], vectors, threshold.value, max_cluster_size)

Failures: any embeddings call that fails after its retries raises ``EmbeddingError`` (from
``dream_assets.llm.embeddings``); vectors already fetched stay cached, nothing partial is returned. A caller
degrades on it (spec: "If the near-duplicate scan fails, the pass degrades to unreviewed-only").

``cosine_clusters`` compares every pair exactly in row blocks (memory bounded, time O(n² · dim)): fine for stores of
tens of thousands of entries.
"""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any

import numpy as np

from dream_assets.llm.embeddings import (
    EMBEDDINGS_PASS,
    EmbeddingError,
    EmbeddingProvider,
    check_vectors,
    normalise_rows,
)
from dream_assets.model import MemoryEntry
from dream_assets.store.embeddings import EmbeddingCache, connection_of, content_hash
from dream_assets.text.similarity import DuplicateClusters, cluster_pairs

__all__ = [
    "EMBEDDING_METHOD",
    "EmbeddingIndex",
    "content_hash",
    "cosine_clusters",
    "cosine_pairs_dense",
]

log = logging.getLogger("dream_assets.llm.embedding_index")

#: ``DuplicateClusters.method`` of clusters found over embeddings.
EMBEDDING_METHOD = "embeddings"
# float32 dot products of unit rows carry rounding of this order: a pair this close to the threshold counts.
_FLOAT32_SLACK = 1e-6
# Cells of one block of the pairwise product (bounds peak memory of cosine_pairs_dense: 4 bytes each).
_BLOCK_CELLS = 4_000_000
#: Sent with the first batch of a model whose store caches nothing for it yet, when that batch is a single text:
#: without them a degenerate endpoint (one vector for every text, a vector too short to tell texts apart) could not
#: be told from a working one, and its first vector would fix the model's size and be compared with later texts.
PROBE_TEXTS = (
    "Volcanic basalt columns cool into hexagonal shapes.",
    "Quarterly payroll invoices are reconciled every Friday.",
)


def _docs(items: Sequence[MemoryEntry | tuple[str, str]]) -> list[tuple[str, str]]:
    docs = [(e.id, e.content) if isinstance(e, MemoryEntry) else (str(e[0]), str(e[1] or "")) for e in items]
    ids = [d for d, _ in docs]
    if len(set(ids)) != len(ids):
        dup = next(d for d, c in Counter(ids).items() if c > 1)
        raise ValueError(f"EmbeddingIndex: id {dup!r} appears more than once; pass each entry once")
    return docs


class EmbeddingIndex:
    """Vectors of texts through the store's cache; only texts never embedded with this model reach the provider.

    Vectors read or fetched are also kept in this object, so repeated calls on one index (save-time dedup over a
    session) do not read the table again."""

    def __init__(
        self, store: Any, provider: EmbeddingProvider, *, now: datetime, pass_name: str = EMBEDDINGS_PASS
    ) -> None:
        self.cache = EmbeddingCache(connection_of(store))
        self.provider = provider
        self.now = now
        self.pass_name = pass_name
        self.embedded = 0  # texts this index sent to the provider
        self._memo: dict[str, np.ndarray] = {}
        self._dims: set[int] | None = None  # vector sizes cached for the model, read on first need

    @property
    def model(self) -> str:
        """What the store caches this provider's vectors under (``embeddings.vector_key``: the model name, with its
        document prefix when it takes one)."""
        return self.provider.key

    def embed_texts(self, texts: Sequence[str]) -> np.ndarray:
        """One unit float32 row per text, in order. Raises ``EmbeddingError`` when the provider fails or answers
        vectors that cannot be used (``check_vectors``: wrong count, size, NaN, all zero, or the same vector for
        obviously different texts — checked against this request's other vectors too); such vectors are never
        cached. Cached vectors of the request that fail the same check (cached before it existed) are dropped from
        the cache and embedded again."""
        hashes = [content_hash(t) for t in texts]
        if not hashes:
            return np.zeros((0, 0), dtype=np.float32)
        missing = [h for h in dict.fromkeys(hashes) if h not in self._memo]
        if missing:
            self._memo.update(self.cache.get(self.model, missing))
        text_of = dict(zip(hashes, texts, strict=True))
        self._drop_unusable([h for h in dict.fromkeys(hashes) if h in self._memo], text_of)
        todo = [h for h in dict.fromkeys(hashes) if h not in self._memo]
        step = max(1, int(getattr(self.provider, "batch_size", len(todo) or 1)))
        for start in range(0, len(todo), step):
            batch = todo[start : start + step]
            known = [h for h in dict.fromkeys(hashes) if h in self._memo]
            texts_sent = [text_of[h] for h in batch]
            probe = self._needs_probe(texts_sent, known)
            matrix = self.provider.embed(texts_sent + list(PROBE_TEXTS) * probe, pass_name=self.pass_name)
            if probe:
                check_vectors(texts_sent + list(PROBE_TEXTS), matrix, where=self._where())
                matrix = matrix[: len(batch)]
            self._check_against_known(batch, matrix, known, text_of)
            self.cache.put(self.model, batch, matrix, now=self.now)  # kept even if a later batch fails
            self._dims = (self._dims or set()) | {int(matrix.shape[1])}
            self.embedded += len(batch)
            self._memo.update(zip(batch, matrix, strict=True))
        return np.vstack([self._memo[h] for h in hashes])

    def _where(self) -> str:
        endpoint = getattr(self.provider, "endpoint", "the embeddings endpoint")
        return f"embeddings from {endpoint} (EmbeddingModel={self.model!r})"

    @property
    def dimensions(self) -> int:
        """The size every vector of the model must have (``EmbeddingDimensions``); 0 when not fixed."""
        return int(getattr(self.provider, "dimensions", 0) or 0)

    def _needs_probe(self, texts: Sequence[str], known: Sequence[str]) -> bool:
        """Whether the probe texts go with this batch: nothing is known or cached for the model yet and the batch is a
        single text (which no check can compare with anything)."""
        if known:
            return False
        if self._dims is None:
            self._dims = self.cache.dims(self.model)
        if self._dims:
            return False
        return len(set(texts)) == 1

    def _check_against_known(
        self, batch: Sequence[str], matrix: np.ndarray, known: Sequence[str], text_of: Mapping[str, str]
    ) -> None:
        """A fetched batch must fit the vectors already known (the size cached for the model, the size
        ``EmbeddingDimensions`` fixes; no obviously different text of this request with the same vector) before it
        is used or cached."""
        if self._dims is None:
            self._dims = self.cache.dims(self.model)
        if self.dimensions and int(matrix.shape[1]) != self.dimensions:
            raise EmbeddingError(
                f"{self._where()}: vectors of size {int(matrix.shape[1])}, not the {self.dimensions} of "
                "EmbeddingDimensions; nothing was cached"
            )
        dims = {self._memo[h].shape[0] for h in known} | ({self.dimensions} if self.dimensions else self._dims)
        if dims and dims != {int(matrix.shape[1])}:
            raise EmbeddingError(
                f"vectors cached for EmbeddingModel {self.model!r} and those just answered have different sizes "
                f"{sorted(dims | {int(matrix.shape[1])})}: the endpoint changed the model's output, and nothing was "
                f"cached; delete the old ones from the store (DELETE FROM embeddings WHERE model = '{self.model}') "
                "and they are embedded again"
            )
        if not known:
            return
        rows = np.vstack([matrix, *(self._memo[h][None, :] for h in known)])
        check_vectors([text_of[h] for h in (*batch, *known)], rows, where=self._where(), fresh=len(batch))

    def _drop_unusable(self, cached: Sequence[str], text_of: Mapping[str, str]) -> None:
        """Cached vectors of this request that ``check_vectors`` refuses (of mixed sizes, all zero, one vector for
        obviously different texts: cached before they were checked) are dropped from the cache, to be embedded
        again, with a warning."""
        if len(cached) < 1:
            return
        dims = {self._memo[h].shape[0] for h in cached}
        try:
            if len(dims) > 1:
                raise EmbeddingError(f"cached vectors of different sizes {sorted(dims)}")
            if self.dimensions and dims != {self.dimensions}:
                raise EmbeddingError(
                    f"cached vectors of size {sorted(dims)}, not the {self.dimensions} of EmbeddingDimensions"
                )
            check_vectors(
                [text_of[h] for h in cached], np.vstack([self._memo[h] for h in cached]), where="cached vectors"
            )
        except EmbeddingError as exc:
            dropped = self.cache.delete(self.model, cached)
            for h in cached:
                self._memo.pop(h, None)
            log.warning(
                "dropped %d cached vector(s) of EmbeddingModel %r, to embed again: %s", dropped, self.model, exc
            )

    def missing(self, texts: Sequence[str]) -> list[str]:
        """The texts (once each, in order) with no vector for this model in this index or the store's cache: what
        ``embed_texts`` would send to the provider. Reads the cache, never calls the provider."""
        hashes = {content_hash(t): t for t in texts}
        unknown = [h for h in hashes if h not in self._memo]
        if unknown:
            self._memo.update(self.cache.get(self.model, unknown))
        return [t for h, t in hashes.items() if h not in self._memo]

    def vectors(self, entries: Sequence[MemoryEntry | tuple[str, str]]) -> dict[str, np.ndarray]:
        """``{id: unit float32 vector}`` for ``entries`` (MemoryEntry or (id, text)); ids must be unique."""
        docs = _docs(entries)
        matrix = self.embed_texts([text for _, text in docs])
        return {doc_id: matrix[i] for i, (doc_id, _) in enumerate(docs)}

    def similar(
        self,
        text: str,
        candidates: Sequence[MemoryEntry | tuple[str, str]],
        *,
        threshold: float | None = None,
    ) -> list[tuple[str, float]]:
        """``(id, cosine)`` of the candidates, most similar first (ties: input order); with ``threshold`` only those
        at or above it. No candidates: no call. ``text``'s vector is cached too, so once saved it costs nothing."""
        docs = _docs(candidates)
        if not docs:
            return []
        matrix = self.embed_texts([text, *(t for _, t in docs)])
        sims = np.minimum(matrix[1:] @ matrix[0], 1.0)
        order = sorted(range(len(docs)), key=lambda i: (-float(sims[i]), i))
        return [
            (docs[i][0], float(sims[i])) for i in order if threshold is None or sims[i] >= threshold - _FLOAT32_SLACK
        ]


# --------------------------------------------------------------------------- clustering


def cosine_pairs_dense(matrix: np.ndarray, threshold: float) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Every (i, j, cosine) with i < j and cosine >= threshold over unit rows, in row blocks of bounded memory."""
    m = np.ascontiguousarray(matrix, dtype=np.float32)
    n = m.shape[0]
    found: list[tuple[np.ndarray, np.ndarray, np.ndarray]] = []
    step = max(1, _BLOCK_CELLS // max(n, 1))
    for start in range(0, n, step):
        stop = min(n, start + step)
        block = m[start:stop] @ m[start:].T  # rows start..stop against columns start..n
        r, c = np.nonzero(block >= threshold - _FLOAT32_SLACK)
        upper = c > r  # global j = c + start > global i = r + start
        r, c = r[upper], c[upper]
        found.append(
            (
                (r + start).astype(np.int64),
                (c + start).astype(np.int64),
                np.minimum(block[r, c].astype(np.float64), 1.0),
            )
        )
    if not found:
        return np.zeros(0, np.int64), np.zeros(0, np.int64), np.zeros(0, np.float64)
    return tuple(np.concatenate(parts) for parts in zip(*found, strict=True))  # type: ignore[return-value]


def cosine_clusters(
    ids: Sequence[str],
    vectors: Mapping[str, np.ndarray] | np.ndarray,
    threshold: float,
    max_cluster_size: int,
    *,
    groups: Sequence[str] | None = None,
    joined: DuplicateClusters | None = None,
) -> DuplicateClusters:
    """Near-duplicate clusters of ``ids`` whose embedding cosine reaches ``threshold``, in the shape of
    ``find_duplicate_clusters``: grown from the strongest pairs down, a union past ``max_cluster_size`` refused,
    members in input order, clusters by first member, singletons left out, ``method`` "embeddings".

    ``vectors``: ``{id: vector}`` (as ``EmbeddingIndex.vectors`` returns) or a matrix with one row per id;
    ``groups``: one per id, only ids of one group are joined (dream_assets/scope.py); ``joined``: clusters another
    measure found (the lexical scan's), joined before any embedding pair, so the embeddings add the near duplicates
    that measure misses (other words for one fact) and never take away one it finds (``method``
    "embeddings+<its method>"). A cluster's guarded decisions (the host's rules, the model's check) are the same
    whichever measure proposed it."""
    ids = [str(i) for i in ids]
    if len(set(ids)) != len(ids):
        dup = next(d for d, c in Counter(ids).items() if c > 1)
        raise ValueError(f"cosine_clusters: id {dup!r} appears more than once; pass each entry once")
    if not 0.0 < threshold <= 1.0:
        raise ValueError(
            f"cosine_clusters: threshold={threshold!r} is outside (0, 1]; set "
            "EmbeddingSimilarityThreshold to a cosine such as 0.88"
        )
    if not ids:
        return DuplicateClusters(clusters=[], method=EMBEDDING_METHOD, pairs=0)
    if isinstance(vectors, Mapping):
        absent = [i for i in ids if i not in vectors]
        if absent:
            raise ValueError(f"cosine_clusters: no vector for id {absent[0]!r} ({len(absent)} id(s) without one)")
        sizes = {np.asarray(vectors[i]).shape for i in ids}
        if len(sizes) > 1:
            raise ValueError(f"cosine_clusters: vectors of different shapes {sorted(sizes)}")
        matrix = np.vstack([np.asarray(vectors[i], dtype=np.float32) for i in ids])
    else:
        matrix = np.asarray(vectors, dtype=np.float32)
        if matrix.ndim != 2 or matrix.shape[0] != len(ids):
            raise ValueError(f"cosine_clusters: a matrix of shape {matrix.shape} for {len(ids)} ids")
    rows, cols, sims = cosine_pairs_dense(normalise_rows(matrix), threshold)
    method, pairs = EMBEDDING_METHOD, len(rows)
    if joined is not None and joined.clusters:
        # Each of its clusters as a chain of pairs from its first member, ranked above every cosine (at most 1).
        at = {doc_id: i for i, doc_id in enumerate(ids)}
        chain = [(at[c[0]], at[m]) for c in joined.clusters for m in c[1:] if c[0] in at and m in at]
        rows = np.concatenate([np.asarray([i for i, _ in chain], dtype=rows.dtype), rows])
        cols = np.concatenate([np.asarray([j for _, j in chain], dtype=cols.dtype), cols])
        sims = np.concatenate([np.full(len(chain), 2.0, dtype=sims.dtype), sims])
        method, pairs = f"{EMBEDDING_METHOD}+{joined.method}", pairs + joined.pairs
    clusters = cluster_pairs(len(ids), rows, cols, sims, max_cluster_size, groups=groups)
    return DuplicateClusters(clusters=[[ids[i] for i in members] for members in clusters], method=method, pairs=pairs)
