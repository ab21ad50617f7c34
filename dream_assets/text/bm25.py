"""An incremental Okapi BM25 index: the recall surface every memory the dream cycle keeps is found through.

The store keeps one index per process and updates it as rows change, so add and remove are
O(tokens of the document) and a search touches only the postings of its query terms.

Layout. Each document gets an integer slot. A term's postings are two append-only ``array``s
(slots, term frequencies) that numpy reads without copying, so scoring a term is a handful of
vectorised operations however long its postings are. Removing a document only clears its slot's
``alive`` flag and adjusts the statistics; dead postings are dropped in one compaction once they
outnumber live documents, which keeps remove O(tokens) amortised.
"""

from __future__ import annotations

import math
import threading
from array import array
from collections import Counter
from collections.abc import Container, Iterator, Sequence

import numpy as np

K1 = 1.2
B = 0.75
# Query terms with longer postings than this are candidates for MaxScore pruning (see search).
_PRUNE_MIN_DF = 2048


def _settled(scores: np.ndarray, want: int, rest_bound: float) -> np.ndarray | None:
    """The scored documents, if their top ``want`` can no longer be reached by any unscored one."""
    scored = np.flatnonzero(scores > 0.0)
    if scored.size < want:
        return None
    kth = np.partition(scores[scored], scored.size - want)[scored.size - want]
    # The margin absorbs float32 rounding in the contributions the bound is compared against.
    return scored if kth > rest_bound * (1.0 + 1e-6) else None


class Bm25Index:
    """Okapi BM25 (k1=1.2, b=0.75, idf = ln(1 + (N - df + 0.5) / (df + 0.5))) over string doc ids."""

    def __init__(self, k1: float = K1, b: float = B) -> None:
        self.k1 = k1
        self.b = b
        self._lock = threading.RLock()
        self.clear()

    # ----------------------------------------------------------------- maintenance

    def clear(self) -> None:
        with self._lock:
            self._slot_of: dict[str, int] = {}
            self._id_of: list[str | None] = []
            self._terms_of: list[tuple[str, ...]] = []  # distinct terms per slot, to undo df on remove
            self._alive = array("b")
            self._length = array("f")
            self._postings: dict[str, tuple[array, array]] = {}  # term -> (slots 'i', tf 'f')
            self._df: dict[str, int] = {}
            self._total_length = 0
            self._dead = 0
            self._norm_cache: np.ndarray | None = None

    def add(self, doc_id: str, tokens: Sequence[str]) -> None:
        """Index ``tokens`` under ``doc_id``, replacing whatever that id held before."""
        counts = Counter(tokens)
        with self._lock:
            self._norm_cache = None
            self._remove_locked(doc_id)
            slot = len(self._id_of)
            self._slot_of[doc_id] = slot
            self._id_of.append(doc_id)
            self._terms_of.append(tuple(counts))
            self._alive.append(1)
            length = sum(counts.values())
            self._length.append(float(length))
            self._total_length += length
            postings = self._postings
            df = self._df
            for term, tf in counts.items():
                entry = postings.get(term)
                if entry is None:
                    entry = postings[term] = (array("i"), array("f"))
                entry[0].append(slot)
                entry[1].append(float(tf))
                df[term] = df.get(term, 0) + 1
            self._maybe_compact()

    def remove(self, doc_id: str) -> None:
        """Forget ``doc_id``; a no-op when it is not indexed."""
        with self._lock:
            self._remove_locked(doc_id)
            self._maybe_compact()

    def _maybe_compact(self) -> None:
        if self._dead > max(1024, len(self._slot_of)):
            self._compact()

    def _remove_locked(self, doc_id: str) -> None:
        slot = self._slot_of.pop(doc_id, None)
        if slot is None:
            return
        self._norm_cache = None
        self._alive[slot] = 0
        self._id_of[slot] = None
        self._total_length -= int(self._length[slot])
        df = self._df
        for term in self._terms_of[slot]:
            remaining = df[term] - 1
            if remaining:
                df[term] = remaining
            else:
                del df[term]
                del self._postings[term]  # every posting of the term was this slot's or already dead
        self._terms_of[slot] = ()
        self._dead += 1

    def _compact(self) -> None:
        """Renumber live slots densely and drop dead postings (amortised over the removes that caused it)."""
        alive = np.frombuffer(self._alive, dtype=np.int8).astype(bool)
        new_slot = np.cumsum(alive, dtype=np.int64) - 1
        postings: dict[str, tuple[array, array]] = {}
        for term, (slots_arr, tfs_arr) in self._postings.items():
            slots = np.frombuffer(slots_arr, dtype=np.int32)
            tfs = np.frombuffer(tfs_arr, dtype=np.float32)
            keep = alive[slots]
            postings[term] = (
                array("i", new_slot[slots[keep]].astype(np.int32).tobytes()),
                array("f", tfs[keep].tobytes()),
            )
            del slots, tfs
        lengths = np.frombuffer(self._length, dtype=np.float32)[alive]
        self._postings = postings
        self._id_of = [d for d in self._id_of if d is not None]
        self._terms_of = [t for t, a in zip(self._terms_of, alive, strict=True) if a]
        self._slot_of = {d: i for i, d in enumerate(self._id_of) if d is not None}
        self._length = array("f", lengths.tobytes())
        self._alive = array("b", b"\x01" * len(self._id_of))
        self._dead = 0
        self._norm_cache = None

    # ----------------------------------------------------------------- statistics

    def __len__(self) -> int:
        return len(self._slot_of)

    def __contains__(self, doc_id: object) -> bool:
        return doc_id in self._slot_of

    def __iter__(self) -> Iterator[str]:
        return iter(list(self._slot_of))

    @property
    def n_docs(self) -> int:
        return len(self._slot_of)

    @property
    def average_length(self) -> float:
        n = len(self._slot_of)
        return self._total_length / n if n else 0.0

    def doc_freq(self, term: str) -> int:
        return self._df.get(term, 0)

    def idf(self, term: str) -> float:
        """The BM25 idf: ln(1 + (N - df + 0.5) / (df + 0.5)); always positive."""
        n = len(self._slot_of)
        df = self._df.get(term, 0)
        return math.log(1.0 + (n - df + 0.5) / (df + 0.5))

    def idf_tfidf(self, term: str) -> float:
        """scikit-learn's smooth idf, ln((1 + N) / (1 + df)) + 1, over this index's corpus."""
        n = len(self._slot_of)
        return math.log((1.0 + n) / (1.0 + self._df.get(term, 0))) + 1.0

    def tfidf_vector(self, tokens: Sequence[str]) -> dict[str, float]:
        """Raw term frequency times :meth:`idf_tfidf`, L2-normalised. Empty tokens give an empty vector."""
        with self._lock:
            weights = {t: tf * self.idf_tfidf(t) for t, tf in Counter(tokens).items()}
        norm = math.sqrt(sum(w * w for w in weights.values()))
        if norm == 0.0:
            return {}
        return {t: w / norm for t, w in weights.items()}

    @staticmethod
    def cosine(a: dict[str, float], b: dict[str, float]) -> float:
        """Cosine of two sparse vectors (normalised here, so unnormalised input is fine)."""
        if not a or not b:
            return 0.0
        if len(a) > len(b):
            a, b = b, a
        dot = sum(w * b[t] for t, w in a.items() if t in b)
        if dot == 0.0:
            return 0.0
        na = math.sqrt(sum(w * w for w in a.values()))
        nb = math.sqrt(sum(w * w for w in b.values()))
        return max(0.0, min(1.0, dot / (na * nb)))

    # ----------------------------------------------------------------- search

    def search(
        self, query_tokens: Sequence[str], limit: int = 10, *, exclude: Container[str] = ()
    ) -> list[tuple[str, float]]:
        """The ``limit`` best (doc_id, score) pairs, best first, ties by doc_id ascending.

        Only documents sharing at least one query term are returned. A query term repeated counts
        once. Ids in ``exclude`` are skipped without reducing the number of results returned.
        """
        if limit <= 0:
            return []
        with self._lock:
            n = len(self._slot_of)
            if n == 0:
                return []
            # Rarest terms first (ties by term), a fixed order that keeps scores bit-for-bit repeatable.
            present = sorted((self._df[t], t, self._postings[t]) for t in set(query_tokens) if t in self._postings)
            norm = self._length_norm()
            scores = np.zeros(norm.size, dtype=np.float64)
            alive = np.frombuffer(self._alive, dtype=np.int8) if self._dead else None
            tf_scale = np.float32(self.k1 + 1.0)
            idfs = [math.log(1.0 + (n - df + 0.5) / (df + 0.5)) for df, _, _ in present]
            # No document can gain more than idf * (k1 + 1) from one term: bound[i] caps terms i..end.
            bound = np.cumsum([idf * (self.k1 + 1.0) for idf in idfs][::-1])[::-1].tolist()
            want = limit + len(exclude) if hasattr(exclude, "__len__") else None  # type: ignore[arg-type]
            candidates: np.ndarray | None = None
            for i, (df, _, (slots_arr, tf_arr)) in enumerate(present):
                idf = np.float32(idfs[i])
                slots = np.frombuffer(slots_arr, dtype=np.int32)
                tf = np.frombuffer(tf_arr, dtype=np.float32)
                if candidates is None and want is not None and i and df > _PRUNE_MIN_DF:
                    candidates = _settled(scores, want, bound[i])
                if candidates is None:
                    contribution = idf * (tf * tf_scale) / (tf + norm[slots])
                    if alive is not None:  # dead slots keep postings until compaction
                        contribution *= alive[slots]
                    scores[slots] += contribution
                else:
                    # MaxScore: the top `want` are already out of reach for documents that only
                    # have the remaining common terms, so only score those terms for candidates.
                    # Postings are slot-ordered, so a binary search finds each candidate's tf.
                    pos = np.minimum(np.searchsorted(slots, candidates), slots.size - 1)
                    hit = slots[pos] == candidates
                    docs, doc_tf = candidates[hit], tf[pos[hit]]
                    scores[docs] += idf * (doc_tf * tf_scale) / (doc_tf + norm[docs])
                del slots, tf
            del alive  # release the buffer view so the array can grow again
            if candidates is None:
                candidates = np.flatnonzero(scores > 0.0)
            return self._top(candidates, scores, limit, exclude)

    def _length_norm(self) -> np.ndarray:
        """k1 * (1 - b + b * |d| / avgdl) per slot, cached until the next add or remove."""
        if self._norm_cache is None:
            lengths = np.frombuffer(self._length, dtype=np.float32)
            avgdl = (self._total_length / len(self._slot_of)) or 1.0
            self._norm_cache = (self.k1 * (1.0 - self.b + self.b * lengths / np.float32(avgdl))).astype(np.float32)
            del lengths
        return self._norm_cache

    def _top(
        self, candidates: np.ndarray, scores: np.ndarray, limit: int, exclude: Container[str]
    ) -> list[tuple[str, float]]:
        """Best-first selection without sorting every candidate: partition, then order the few."""
        id_of = self._id_of
        want = limit + (len(exclude) if hasattr(exclude, "__len__") else 0)  # type: ignore[arg-type]
        while True:
            if want >= len(candidates):
                chosen = candidates
            else:
                cand_scores = scores[candidates]
                kth = np.partition(cand_scores, len(candidates) - want)[len(candidates) - want]
                # Everything tied with the cut-off comes along so ties break by id, not by position.
                chosen = candidates[cand_scores >= kth]
            ranked = sorted((-float(scores[s]), id_of[s]) for s in chosen)
            out: list[tuple[str, float]] = []
            for neg, doc_id in ranked:
                if doc_id is None or doc_id in exclude:
                    continue
                out.append((doc_id, -neg))
                if len(out) == limit:
                    return out
            if len(chosen) == len(candidates):
                return out
            want *= 2
