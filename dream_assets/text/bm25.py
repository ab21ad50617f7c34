"""An incremental Okapi BM25 index: the recall surface every memory the dream cycle keeps is found through.

The store keeps one index per process and updates it as rows change, so add and remove are
O(tokens of the document) and a search touches the postings of its query terms.

Layout. Each document gets an integer slot and each term an integer id. Postings live in two segments: a compact
base, one contiguous run per term in three flat numpy arrays (offsets, slots as int32, term frequencies as uint16),
and a small tail of per-term append-only ``array``s that adds write to. The tail is folded into the base once it
holds an eighth of the base's postings, one O(postings) pass amortised over the adds that filled it. Removing a
document only clears its slot's ``alive`` flag and adjusts the statistics (each slot's term ids are kept for that);
the next fold drops its postings, and once dead slots outnumber live ones a compaction renumbers the slots.

Search. Scoring every posting of the query terms sums each document's weights in one fixed term order: into a
per-slot accumulator while that fits in cache, else by merging the terms' sorted postings (sparse row additions),
which reads them in order instead of missing the cache at every posting. On a large index a top-k search first
tries MaxScore: each term's reach (the most it adds to a score) is bounded by its idf, its highest term frequency
and its shortest document, and the exact scores of a sample (the rarest terms' documents and a spread of the next
rarest term's) give a floor no true top-k score is under. Terms are then taken rarest first, each for the
documents holding none of the terms before it; such a document drops out as soon as the terms after it cannot
lift it to the floor, given its own length, and otherwise looks them up by binary search. Once the terms left
reach less than the floor together, no document holding only them can make the top k. When that would still take
most postings, scoring them all is cheaper and is done instead. The survivors are scored again in the fixed term
order, so pruning never changes the result: the same documents, scores (bit for bit) and order as scoring every
posting. Ties are ordered by id, read off a per-slot key of the id's leading bytes before any id is compared.
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
# Below this many postings over all query terms, or this many slots, a query is scored in full: pruning would not
# pay for itself.
_PRUNE_MIN_POSTINGS = 2048
_PRUNE_MIN_SLOTS = 1 << 18
# Up to this many slots a per-slot score accumulator stays in cache (see _Query.union).
_DENSE_MAX_SLOTS = 1 << 18
# Terms are taken one by one only when that leaves all but 1/_TAKEN_SHARE of the postings alone (see _Query.run).
_TAKEN_SHARE = 3
# How many postings of the rarest common term are scored exactly to find the first floor.
_SEED = 512
# Terms this rare have all their documents in the sample.
_SEED_RARE_DF = 64
# The tail is folded into the base once it holds this many postings and an eighth of the base's.
_FOLD_MIN = 32768
# Term frequencies are stored as uint16; a term repeated more often in one document counts this many times (its
# weight then differs from the unclipped one by under 1e-5 of itself).
_TF_MAX = 65535

_SAMPLE = 2048


def _kth_largest(values: np.ndarray, k: int) -> float:
    """The ``k``-th largest of ``values`` (1 <= k <= size). A full partition costs ~9 ns an element, so a large array
    is first cut by a threshold read off a strided sample, one cheap comparison pass, to the few above it."""
    size = values.size
    if size > 8 * _SAMPLE and k * 64 < size:
        step = size // _SAMPLE
        sample = values[::step]
        # Enough of the sample (about 4k / the sampled fraction) that the cut keeps at least k values.
        rank = min(sample.size, 8 + (4 * k * sample.size) // size)
        cut = np.partition(sample, sample.size - rank)[sample.size - rank]
        above = values[values >= cut]
        if above.size >= k:
            values, size = above, above.size
    return float(np.partition(values, size - k)[size - k])


def _id_key(doc_id: str) -> bytes:
    return doc_id.encode()[:16].ljust(16, b"\0")


def _slack(value: float) -> float:
    """What float32 contributions summed in float64 may be off by, against the float64 bounds they are compared to."""
    return abs(value) * 4e-6 + 1e-9


def _settled(scores: np.ndarray, want: int, rest_bound: float, floor: float) -> tuple[np.ndarray, float] | None:
    """Which candidates can still reach the ``want`` best, and the floor under the ``want``-th best score.

    ``scores`` are partial (the terms scored so far) and only grow, so their ``want``-th best, like the ``floor``
    known before, is a floor for the final ``want``-th best; a candidate gains at most ``rest_bound`` from the terms
    left and stays only if that can lift it to the floor. None when no floor is known yet (nothing can be pruned).
    """
    if scores.size >= want:
        floor = max(floor, _kth_largest(scores, want))
    if floor <= 0.0:
        return None
    return np.flatnonzero(scores >= floor - rest_bound - _slack(floor)), floor


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
            self._alive = array("b")
            self._length = array("f")
            self._id_key = bytearray()  # per slot, the id's first 16 UTF-8 bytes (zero-padded): ties by id, see _top
            # The term ids of slot s are _doc_terms[_doc_start[s]:_doc_start[s + 1]] (repeats allowed), to undo df.
            self._doc_terms = array("i")
            self._doc_start = array("q", [0])
            self._term_id: dict[str, int] = {}
            self._df = array("i")  # per term id: live documents holding it
            # Per term id, the MaxScore bound's inputs: highest tf and shortest document over its postings (an add
            # tightens them; a removal leaves them a valid, looser bound until the next fold recomputes them).
            self._top_tf = array("f")
            self._min_len = array("f")
            # Base segment: term t's postings are _base_slots/_base_tf[_base_off[t]:_base_off[t + 1]], t < terms.
            self._base_off = np.zeros(1, dtype=np.int64)
            self._base_slots = np.zeros(0, dtype=np.int32)
            self._base_tf = np.zeros(0, dtype=np.uint16)
            self._tail: dict[int, tuple[array, array]] = {}  # term id -> (slots 'i', tf 'H'), slots after the base's
            self._tail_postings = 0
            self._total_length = 0
            self._dead = 0
            self._owner = np.zeros(0, dtype=np.int32)  # see _positions
            self._acc = np.zeros(0, dtype=np.float64)  # see _accumulator
            self._seen = np.zeros(0, dtype=np.uint8)  # see _seen_marks

    def _new_term(self, term: str) -> int:
        tid = len(self._df)
        self._term_id[term] = tid
        self._df.append(0)
        self._top_tf.append(0.0)
        self._min_len.append(math.inf)
        return tid

    def add(self, doc_id: str, tokens: Sequence[str]) -> None:
        """Index ``tokens`` under ``doc_id``, replacing whatever that id held before."""
        counts = Counter(tokens)
        with self._lock:
            self._remove_locked(doc_id)
            slot = len(self._id_of)
            self._slot_of[doc_id] = slot
            self._id_of.append(doc_id)
            self._alive.append(1)
            self._id_key += _id_key(doc_id)
            length = sum(counts.values())
            self._length.append(float(length))
            self._total_length += length
            term_id, tail, df, top_tf, min_len = self._term_id, self._tail, self._df, self._top_tf, self._min_len
            doc_terms = self._doc_terms
            for term, tf in counts.items():
                tid = term_id.get(term)
                if tid is None:
                    tid = self._new_term(term)
                entry = tail.get(tid)
                if entry is None:
                    entry = tail[tid] = (array("i"), array("H"))
                tf = min(tf, _TF_MAX)
                entry[0].append(slot)
                entry[1].append(tf)
                df[tid] += 1
                if tf > top_tf[tid]:
                    top_tf[tid] = tf
                if length < min_len[tid]:
                    min_len[tid] = length
                doc_terms.append(tid)
            self._doc_start.append(len(doc_terms))
            self._tail_postings += len(counts)
            self._maybe_fold()

    def add_many(self, doc_ids: Sequence[str], token_lists: Sequence[Sequence[str]]) -> None:
        """``add`` of each document in turn into an empty index (a first build): the same postings, statistics and
        slots, with every term's postings written into the base at once."""
        if len(doc_ids) != len(token_lists):
            raise ValueError(f"add_many: {len(doc_ids)} doc ids but {len(token_lists)} token lists")
        if len(set(doc_ids)) != len(doc_ids):
            raise ValueError("add_many: a doc id appears more than once; pass each document once")
        import pyarrow as pa

        with self._lock:
            if self._id_of:
                raise ValueError("add_many builds an empty index; use add to change one that holds documents")
            n = len(doc_ids)
            lengths = np.fromiter((len(t) for t in token_lists), dtype=np.int64, count=n)
            encoded = pa.array([t for tokens in token_lists for t in tokens], pa.string()).dictionary_encode()
            terms = encoded.dictionary.to_pylist()  # in order of first use, as add meets them
            term_ids = encoded.indices.to_numpy(zero_copy_only=False).astype(np.int32)
            del encoded
            slots = np.repeat(np.arange(n, dtype=np.int64), lengths)
            # (term, slot) pairs sorted by term then slot, with their counts: each term's postings in slot order.
            keys = term_ids.astype(np.int64) * max(n, 1) + slots
            del slots
            keys.sort()
            first = np.concatenate(([True], keys[1:] != keys[:-1])) if keys.size else np.zeros(0, dtype=bool)
            starts = np.flatnonzero(first)
            del first
            tf = np.minimum(np.diff(np.append(starts, keys.size)), _TF_MAX).astype(np.uint16)
            pairs = keys[starts]
            del keys, starts
            pair_term = pairs // max(n, 1)
            self._base_slots = (pairs - pair_term * max(n, 1)).astype(np.int32)
            del pairs
            self._base_tf = tf
            self._base_off = np.searchsorted(pair_term, np.arange(len(terms) + 1)).astype(np.int64)
            del pair_term
            # One int object per number serves as both a slot and a term id.
            numbers = list(range(max(n, len(terms))))
            self._term_id = dict(zip(terms, numbers, strict=False))
            self._id_of = list(doc_ids)
            self._slot_of = dict(zip(self._id_of, numbers, strict=False))
            del numbers, terms
            self._df = array("i", np.diff(self._base_off).astype(np.int32).tobytes())
            self._doc_terms = array("i", term_ids.tobytes())
            self._doc_start = array("q", np.concatenate(([0], np.cumsum(lengths))).astype(np.int64).tobytes())
            self._alive = array("b", b"\x01" * n)
            self._id_key = bytearray(b"".join(_id_key(d) for d in self._id_of))
            self._length = array("f", lengths.astype(np.float32).tobytes())
            self._total_length = int(lengths.sum())
            self._tail, self._tail_postings = {}, 0
            self._recompute_reach()
            pa.default_memory_pool().release_unused()  # the encoding's buffers: Arrow's pool keeps them otherwise

    def remove(self, doc_id: str) -> None:
        """Forget ``doc_id``; a no-op when it is not indexed."""
        with self._lock:
            self._remove_locked(doc_id)
            self._maybe_fold()

    def _remove_locked(self, doc_id: str) -> None:
        slot = self._slot_of.pop(doc_id, None)
        if slot is None:
            return
        self._alive[slot] = 0
        self._id_of[slot] = None
        self._total_length -= int(self._length[slot])
        df = self._df
        for tid in set(self._doc_terms[self._doc_start[slot] : self._doc_start[slot + 1]]):
            df[tid] -= 1
        self._dead += 1

    def _maybe_fold(self) -> None:
        if self._dead > max(1024, len(self._slot_of)):
            self._fold(renumber=True)
        elif self._tail_postings > max(_FOLD_MIN, self._base_slots.size // 8):
            self._fold(renumber=False)

    def _fold(self, *, renumber: bool) -> None:
        """Fold the tail into the base and drop dead postings; ``renumber`` also renumbers the live slots densely
        and forgets terms no live document holds (amortised over the adds and removes that caused it)."""
        n_terms = len(self._df)
        base_counts = np.zeros(n_terms, dtype=np.int64)
        base_counts[: self._base_off.size - 1] = np.diff(self._base_off)
        tail_tids = np.fromiter(self._tail.keys(), dtype=np.int64, count=len(self._tail))
        tail_sizes = np.fromiter((len(e[0]) for e in self._tail.values()), dtype=np.int64, count=len(self._tail))
        tail_slots = np.frombuffer(b"".join(e[0].tobytes() for e in self._tail.values()), dtype=np.int32)
        tail_tf = np.frombuffer(b"".join(e[1].tobytes() for e in self._tail.values()), dtype=np.uint16)
        counts = base_counts.copy()
        counts[tail_tids] += tail_sizes
        off = np.zeros(n_terms + 1, dtype=np.int64)
        np.cumsum(counts, out=off[1:])
        total = int(off[-1])
        slots = np.empty(total, dtype=np.int32)
        tfs = np.empty(total, dtype=np.uint16)
        # A term's base postings come first (their slots are older), then its tail postings.
        base_tid = np.repeat(np.arange(n_terms, dtype=np.int64), base_counts)
        shift = off[: self._base_off.size - 1] - self._base_off[:-1]
        dest = np.arange(self._base_slots.size, dtype=np.int64) + shift[base_tid]
        slots[dest], tfs[dest] = self._base_slots, self._base_tf
        del base_tid, dest
        if tail_tids.size:
            block_start = np.concatenate(([0], np.cumsum(tail_sizes)[:-1]))
            dest = np.arange(tail_slots.size, dtype=np.int64) + np.repeat(
                off[tail_tids] + base_counts[tail_tids] - block_start, tail_sizes
            )
            slots[dest], tfs[dest] = tail_slots, tail_tf
            del dest
        del tail_slots, tail_tf
        alive = np.frombuffer(self._alive, dtype=np.int8).astype(bool)
        keep = alive[slots]
        if not keep.all():
            kept = np.zeros(total + 1, dtype=np.int64)
            np.cumsum(keep, out=kept[1:])
            slots, tfs, off = slots[keep], tfs[keep], kept[off]
            del kept
        del keep
        if renumber:
            new_slot = (np.cumsum(alive, dtype=np.int64) - 1).astype(np.int32)
            slots = new_slot[slots]
            live_terms = np.frombuffer(self._df, dtype=np.int32) > 0
            new_tid = np.cumsum(live_terms, dtype=np.int64) - 1
            sizes = np.diff(off)[live_terms]
            off = np.zeros(sizes.size + 1, dtype=np.int64)
            np.cumsum(sizes, out=off[1:])
            starts = np.frombuffer(self._doc_start, dtype=np.int64)
            doc_terms = np.frombuffer(self._doc_terms, dtype=np.int32)
            owner = np.repeat(np.arange(alive.size), np.diff(starts))
            keep_terms = alive[owner]
            doc_terms = new_tid[doc_terms[keep_terms]].astype(np.int32)
            doc_sizes = np.diff(starts)[alive]
            del owner, keep_terms, starts
            keep_tid = np.flatnonzero(live_terms).tolist()
            old_terms = list(self._term_id)  # in id order: ids are handed out in insertion order
            self._term_id = {old_terms[t]: i for i, t in enumerate(keep_tid)}
            self._df = array("i", np.frombuffer(self._df, dtype=np.int32)[live_terms].tobytes())
            self._top_tf = array("f", bytes(4 * len(keep_tid)))
            self._min_len = array("f", bytes(4 * len(keep_tid)))
            self._doc_terms = array("i", doc_terms.tobytes())
            self._doc_start = array("q", np.concatenate(([0], np.cumsum(doc_sizes))).astype(np.int64).tobytes())
            lengths = np.frombuffer(self._length, dtype=np.float32)[alive]
            self._length = array("f", lengths.tobytes())
            self._id_of = [d for d in self._id_of if d is not None]
            self._slot_of = {d: i for i, d in enumerate(self._id_of)}
            self._alive = array("b", b"\x01" * len(self._id_of))
            self._id_key = bytearray(np.frombuffer(self._id_key, dtype="S16")[alive].tobytes())
            self._dead = 0
            del lengths, doc_terms, new_slot
        del alive
        self._base_off, self._base_slots, self._base_tf = off, slots, tfs
        self._tail, self._tail_postings = {}, 0
        self._recompute_reach()

    def _recompute_reach(self) -> None:
        """Exact highest tf and shortest document per term, from the base (the tail is empty)."""
        n_terms = len(self._df)
        top = np.zeros(n_terms, dtype=np.float32)
        shortest = np.full(n_terms, np.inf, dtype=np.float32)
        off = self._base_off
        held = np.flatnonzero(np.diff(off) > 0)
        if held.size:
            lengths = np.frombuffer(self._length, dtype=np.float32)
            top[held] = np.maximum.reduceat(self._base_tf, off[held]).astype(np.float32)
            shortest[held] = np.minimum.reduceat(lengths[self._base_slots], off[held])
            del lengths
        self._top_tf = array("f", top.tobytes())
        self._min_len = array("f", shortest.tobytes())

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
        tid = self._term_id.get(term)
        return 0 if tid is None else self._df[tid]

    def idf(self, term: str) -> float:
        """The BM25 idf: ln(1 + (N - df + 0.5) / (df + 0.5)); always positive."""
        n = len(self._slot_of)
        df = self.doc_freq(term)
        return math.log(1.0 + (n - df + 0.5) / (df + 0.5))

    def idf_tfidf(self, term: str) -> float:
        """scikit-learn's smooth idf, ln((1 + N) / (1 + df)) + 1, over this index's corpus."""
        n = len(self._slot_of)
        return math.log((1.0 + n) / (1.0 + self.doc_freq(term))) + 1.0

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
            if not self._slot_of:
                return []
            term_id, df = self._term_id, self._df
            present = []
            for term in set(query_tokens):
                tid = term_id.get(term)
                if tid is not None and df[tid] > 0:
                    present.append((df[tid], term, tid))
            if not present:
                return []
            # Rarest terms first (ties by term): the fixed order every score is summed in, so scores are repeatable
            # bit for bit whichever documents pruning scored.
            present.sort()
            want = limit + len(exclude) if hasattr(exclude, "__len__") else None  # type: ignore[arg-type]
            query = _Query(self, [tid for _, _, tid in present])
            try:
                candidates, scores = query.run(want)
            finally:
                query.release()
            return self._top(candidates, scores, limit, exclude)

    def _postings(self, tid: int) -> tuple[np.ndarray, np.ndarray]:
        """Term ``tid``'s postings (slots ascending, tf), dead slots included: base, then tail."""
        off = self._base_off
        if tid < off.size - 1:
            lo, hi = int(off[tid]), int(off[tid + 1])
            slots, tfs = self._base_slots[lo:hi], self._base_tf[lo:hi]
        else:
            slots, tfs = self._base_slots[:0], self._base_tf[:0]
        entry = self._tail.get(tid)
        if entry is not None:
            tail_slots = np.frombuffer(entry[0], dtype=np.int32)
            tail_tf = np.frombuffer(entry[1], dtype=np.uint16)
            slots, tfs = np.concatenate((slots, tail_slots)), np.concatenate((tfs, tail_tf))
            del tail_slots, tail_tf  # release the buffers so the arrays can grow again
        return slots, tfs

    def _seen_marks(self) -> np.ndarray:
        """A uint8 per slot, all zero (every search that sets some clears them again)."""
        if self._seen.size < len(self._id_of):
            self._seen = np.zeros(max(1024, len(self._id_of) + len(self._id_of) // 4), dtype=np.uint8)
        return self._seen

    def _accumulator(self) -> np.ndarray:
        """A float64 per slot, all zero (every search that adds into it zeroes what it touched)."""
        if self._acc.size < len(self._id_of):
            self._acc = np.zeros(max(1024, len(self._id_of) + len(self._id_of) // 4), dtype=np.float64)
        return self._acc

    def _positions(self) -> np.ndarray:
        """An int32 per slot that a search may scribble on (whoever reads it checks what it finds)."""
        if self._owner.size < len(self._id_of):
            self._owner = np.zeros(max(1024, len(self._id_of) + len(self._id_of) // 4), dtype=np.int32)
        return self._owner

    def _top(
        self, candidates: np.ndarray, scores: np.ndarray, limit: int, exclude: Container[str]
    ) -> list[tuple[str, float]]:
        """Best-first selection without sorting every candidate (``scores`` aligned with ``candidates``): partition,
        then order the few (a group of equal scores by id, so only the ids of the tied are compared)."""
        id_of = self._id_of
        want = limit + (len(exclude) if hasattr(exclude, "__len__") else 0)  # type: ignore[arg-type]
        while True:
            if want >= len(candidates):
                chosen, chosen_scores = candidates, scores
            else:
                kth = _kth_largest(scores, want)
                # Everything tied with the cut-off comes along so ties break by id, not by position.
                keep = scores >= kth
                chosen, chosen_scores = candidates[keep], scores[keep]
            out: list[tuple[str, float]] = []
            for value in np.unique(chosen_scores)[::-1]:
                score = float(value)
                tied = chosen[chosen_scores == value]
                # Only the smallest ids of a large tie are needed: as many as there is room for, and those excluded.
                room = limit - len(out) + (len(exclude) if hasattr(exclude, "__len__") else tied.size)  # type: ignore[arg-type]
                if tied.size > 4 * room:
                    # The ids' leading bytes order them (UTF-8 keeps code point order); every id whose key is not
                    # above the room-th smallest key is compared in full.
                    keys = np.frombuffer(self._id_key, dtype="S16")[tied]
                    cut = np.sort(keys)[room - 1]
                    tied = tied[keys <= cut]
                    del keys
                ids = sorted(id_of[s] for s in tied.tolist())
                for doc_id in ids:
                    if doc_id in exclude:
                        continue
                    out.append((doc_id, score))
                    if len(out) == limit:
                        return out
            if len(chosen) == len(candidates):
                return out
            want *= 2


class _Query:
    """One search's terms (in summing order) and the views of the index it reads, released when done."""

    def __init__(self, index: Bm25Index, tids: list[int]) -> None:
        n = len(index._slot_of)
        k1, b = index.k1, index.b
        avgdl = index._total_length / n
        self.index = index
        self.lengths = np.frombuffer(index._length, dtype=np.float32)
        self.alive = np.frombuffer(index._alive, dtype=np.int8) if index._dead else None
        self.a = np.float32(k1 * (1.0 - b))
        self.a1 = np.float32(1.0) + self.a
        self.c = np.float32(k1 * b / avgdl)
        self.tf_scale = np.float32(k1 + 1.0)
        self.postings = [index._postings(tid) for tid in tids]
        self.idfs = [math.log(1.0 + (n - index._df[t] + 0.5) / (index._df[t] + 0.5)) for t in tids]
        self.idf32 = [np.float32(idf) for idf in self.idfs]
        self.idf_scale = [idf * self.tf_scale for idf in self.idf32]
        self.top_tf = [index._top_tf[t] for t in tids]
        # The most term i adds to a document of length L: idf * tf (k1 + 1) / (tf + k1 (1 - b + b L / avgdl)) at the
        # term's highest tf; ``bound`` is that at its shortest document, over every document.
        self.norm_a, self.norm_c = k1 * (1.0 - b), k1 * b / avgdl
        self.bound = [
            idf * tt * (k1 + 1.0) / (tt + self.norm_a + self.norm_c * index._min_len[t])
            for idf, tt, t in zip(self.idfs, self.top_tf, tids, strict=True)
        ]

    def release(self) -> None:
        self.lengths = self.alive = None  # type: ignore[assignment]

    def weight(self, i: int, lengths: np.ndarray, tf: np.ndarray) -> np.ndarray:
        """Term ``i``'s BM25 contribution (float32) to documents of these ``lengths`` holding it ``tf`` times: one
        formula per (tf, length), whichever path asks."""
        weights = self.idf_scale[i] / (self.a1 + self.c * lengths)
        if self.top_tf[i] > 1.0:
            more = np.flatnonzero(tf > 1)
            if more.size:
                tf32 = tf[more].astype(np.float32)
                weights[more] = self.idf32[i] * (tf32 * self.tf_scale) / (tf32 + (self.a + self.c * lengths[more]))
        return weights

    def norm(self, lengths: np.ndarray) -> np.ndarray:
        """k1 (1 - b + b |d| / avgdl) of documents of these ``lengths``, in float64 (the bounds' precision)."""
        return self.norm_a + self.norm_c * lengths.astype(np.float64)

    def reach(self, terms: list[int], norm: np.ndarray) -> np.ndarray:
        """The most ``terms`` can add to each candidate of length normalisation ``norm``."""
        by_tf: dict[float, float] = {}
        for i in terms:
            by_tf[self.top_tf[i]] = by_tf.get(self.top_tf[i], 0.0) + self.idfs[i]
        total = np.zeros(norm.size, dtype=np.float64)
        for top, idf_sum in by_tf.items():
            total += (idf_sum * top * (self.index.k1 + 1.0)) / (top + norm)
        return total

    def live(self, candidates: np.ndarray, scores: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        if self.alive is None:
            return candidates, scores
        keep = self.alive[candidates] == 1
        return candidates[keep], scores[keep]

    def lookup(self, i: int, candidates: np.ndarray, lengths: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Which of ``candidates`` (of these ``lengths``) hold term ``i`` (their positions), and its weight in each."""
        slots, tf = self.postings[i]
        if not slots.size or not candidates.size:
            return np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.float32)
        if slots.size <= 4 * candidates.size:
            # Each posting writes its position at its slot: one pass each way instead of a binary search apiece.
            owner = self.index._positions()
            owner[slots] = np.arange(slots.size, dtype=np.int32)
            pos = owner[candidates]
        else:
            pos = np.searchsorted(slots, candidates)
        np.minimum(pos, slots.size - 1, out=pos)
        hit = np.flatnonzero(slots[pos] == candidates)
        return hit, self.weight(i, lengths[hit], tf[pos[hit]])

    def exact(self, candidates: np.ndarray) -> np.ndarray:
        """The full scores of ``candidates``, summed in term order."""
        scores = np.zeros(candidates.size, dtype=np.float64)
        lengths = self.lengths[candidates]
        for i in range(len(self.postings)):
            hit, weights = self.lookup(i, candidates, lengths)
            scores[hit] += weights
        return scores

    def union(self, terms: list[int]) -> tuple[np.ndarray, np.ndarray]:
        """Every live document holding one of ``terms``, with its weights summed in the order given: into a per-slot
        accumulator while that stays in cache, else as sparse rows added one after the other (each a merge of two
        sorted lists, where scattering into a large accumulator would miss the cache at every posting)."""
        width = max(1, len(self.index._id_of))
        if width <= _DENSE_MAX_SLOTS:
            acc = self.index._accumulator()
            for i in terms:
                slots, tf = self.postings[i]
                acc[slots] += self.weight(i, self.lengths[slots], tf)
            candidates = np.flatnonzero(acc[:width]).astype(np.int32)
            scores = acc[candidates]
            acc[candidates] = 0.0
            return self.live(candidates, scores)
        from scipy import sparse

        total = None
        for i in terms:
            slots, tf = self.postings[i]
            weights = self.weight(i, self.lengths[slots], tf).astype(np.float64)
            row = sparse.csr_array((weights, slots, np.array([0, slots.size], dtype=np.int32)), shape=(1, width))
            row.has_canonical_format = True  # slots ascending, each once
            total = row if total is None else total + row
        assert total is not None
        return self.live(total.indices.astype(np.int32, copy=False), total.data)

    def run(self, want: int | None) -> tuple[np.ndarray, np.ndarray]:
        """The candidates for the top ``want`` (None: no pruning) and their exact scores.

        Terms are taken rarest first, each for the documents holding none of the terms before it (a
        per-slot mark says which were seen). Such a document gains at most the reach of the terms after it, given
        its length; it drops out as soon as that cannot lift it to the floor, and otherwise looks those terms up
        one by one. Once the terms left reach less than the floor together, no document holding only them can make
        the top ``want`` and the search stops."""
        everything = list(range(len(self.postings)))
        total = sum(slots.size for slots, _ in self.postings)
        if want is None or len(everything) == 1 or total <= _PRUNE_MIN_POSTINGS or len(self.lengths) < _PRUNE_MIN_SLOTS:
            return self.union(everything)
        floor = self._seed_floor(want)
        order = everything  # rarest first: the first terms' documents are few, and the later ones' are mostly seen
        suffix = np.cumsum([self.bound[i] for i in order][::-1])[::-1].tolist()
        # Scoring every posting by merges costs little a posting; the terms taken one by one cost several times
        # that for each of theirs, so they are only worth it when they leave most postings alone.
        taken = sum(self.postings[i][0].size for j, i in enumerate(order) if suffix[j] >= floor - _slack(floor))
        if taken * _TAKEN_SHARE > total:
            return self.union(everything)
        seen = self.index._seen_marks()
        found: list[np.ndarray] = []
        lower: list[np.ndarray] = []  # lower bounds of the scores of ``found``: each document once
        marked: list[np.ndarray] = []
        try:
            for j, i in enumerate(order):
                if suffix[j] < floor - _slack(floor):
                    break
                slots, tf = self.postings[i]
                if j:
                    fresh = np.flatnonzero(seen[slots] == 0)
                    candidates, tf = slots[fresh], tf[fresh]
                else:
                    candidates = slots
                seen[slots] = 1
                marked.append(slots)
                if self.alive is not None:
                    keep = np.flatnonzero(self.alive[candidates] == 1)
                    candidates, tf = candidates[keep], tf[keep]
                lengths = self.lengths[candidates]
                partial = self.weight(i, lengths, tf).astype(np.float64)
                norm = self.norm(lengths)
                later = order[j + 1 :]
                for step, t in enumerate(later):
                    settled = _settled(partial, want, self.reach(later[step:], norm), floor)
                    if settled is not None:
                        keep, floor = settled
                        candidates, partial, norm, lengths = candidates[keep], partial[keep], norm[keep], lengths[keep]
                    if not candidates.size:
                        break
                    hit, weights = self.lookup(t, candidates, lengths)
                    partial[hit] += weights
                settled = _settled(partial, want, 0.0, floor)
                if settled is not None:
                    keep, floor = settled
                    candidates, partial = candidates[keep], partial[keep]
                found.append(candidates)
                lower.append(partial)
                if len(found) > 1:
                    pooled = np.concatenate(lower)
                    if pooled.size >= want:
                        floor = max(floor, _kth_largest(pooled, want))
        finally:
            for slots in marked:
                seen[slots] = 0
        final = np.concatenate(found) if found else np.zeros(0, dtype=np.int32)
        return final, self.exact(final)

    def _seed_floor(self, want: int) -> float:
        """The ``want``-th best exact score of a sample (0.0 when the sample is smaller): the rarest terms' documents
        and a spread of the postings of the rarest other."""
        sizes = [slots.size for slots, _ in self.postings]
        seeds = [slots for slots, _ in self.postings if slots.size <= _SEED_RARE_DF]
        common = sorted((size, i) for i, size in enumerate(sizes) if size > _SEED_RARE_DF)[:1]
        for size, i in common:
            seeds.append(self.postings[i][0][:: max(1, size // _SEED)][:_SEED])
        sample = np.unique(np.concatenate(seeds))
        if self.alive is not None:
            sample = sample[self.alive[sample] == 1]
        if sample.size < want:
            return 0.0
        return _kth_largest(self.exact(sample), want)
