"""An incremental Okapi BM25 index: the recall surface every memory the dream cycle keeps is found through.

The store keeps one index per process and updates it as rows change, so add and remove are
O(tokens of the document) and a search touches only the postings of its query terms.

Layout. Each document gets an integer slot. A term's postings are two append-only ``array``s
(slots, term frequencies) that numpy reads without copying, so scoring a term is a handful of
vectorised operations however long its postings are. Removing a document only clears its slot's
``alive`` flag and adjusts the statistics; dead postings are dropped in one compaction once they
outnumber live documents, which keeps remove O(tokens) amortised.

Top-k search is MaxScore: query terms are scored rarest first, and as soon as the k-th best score so
far is out of reach for a document holding only the remaining (common) terms, only the documents that
can still reach it are scored further. Each term's reach is bounded by its idf, its highest term
frequency and its shortest document (kept per term on first use and updated as documents are added;
a removal leaves it a valid, looser bound), so the bound is close to what a document can really gain.
Pruning never changes the result: the same documents, scores and order as scoring every posting.

Two implementations share that contract. ``Bm25Index()`` gives the compiled one (``_bm25kernel.c``, built at install
time when a C compiler is there): terms and ids in hash tables over byte arenas, each term's postings (slot, tf,
document length) packed 64 at a time at the fewest bits each chunk needs, and MaxScore over them (see the C file for
how), so a query reads only the postings it walks. Without the compiled module it is the numpy index described above.
Both give the same results, scores bit for bit included (``Bm25Index(compiled=False)`` asks for the numpy one).

A first build takes the documents as token lists (``add_many``) or as arrays (``add_arrays``: UTF-8 ids and vocabulary
with offsets, each document's terms as ids into the vocabulary), which is how a persisted recall index is loaded:
the compiled index reads them without making a Python object per id or token, checking every offset and id first.
"""

from __future__ import annotations

import itertools
import logging
import math
import threading
from array import array
from collections import Counter
from collections.abc import Container, Iterator, Sequence

import numpy as np

try:
    from dream_assets.text import _bm25kernel
except ImportError:  # built without a C compiler: the numpy index serves
    _bm25kernel = None

log = logging.getLogger("dream_assets.text.bm25")

K1 = 1.2
B = 0.75
#: How to get the compiled kernel where it is missing (what the numpy fallback's warning and `dream status` say).
COMPILED_KERNEL_HINT = (
    "install a C compiler (Debian/Ubuntu: apt-get install build-essential python3-dev) and reinstall dream_assets "
    "(pip install --force-reinstall --no-deps <its source folder>)"
)


def kernel_in_use() -> str:
    """Which BM25 index ``Bm25Index()`` gives in this process: "compiled" or "numpy"."""
    return "compiled" if _bm25kernel is not None else "numpy"


def kernel_description() -> str:
    """One line naming the recall index in use, for `dream status` and the server's start line."""
    if _bm25kernel is not None:
        return "compiled BM25 kernel (dream_assets/text/_bm25kernel.c)"
    return (
        "numpy BM25 index: the compiled kernel is not built (about 11x slower recall and 17x the memory at a "
        f"million entries); to get it, {COMPILED_KERNEL_HINT}"
    )


_fallback_warned = False
_warn_guard = threading.Lock()


def _warn_fallback_once() -> None:
    """The numpy fallback serves because the compiled kernel is missing: said once per process, with how to fix it."""
    global _fallback_warned
    with _warn_guard:
        if _fallback_warned:
            return
        _fallback_warned = True
    log.warning("recall uses the %s", kernel_description())


# Query terms with longer postings than this are candidates for MaxScore pruning (see search).
_PRUNE_MIN_DF = 2048


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


def _settled(scores: np.ndarray, want: int, rest_bound: float) -> np.ndarray | None:
    """The documents that can still reach the ``want`` best when every other one is out of their reach.

    ``scores`` are partial (the terms scored so far) and only grow; a document gains at most ``rest_bound`` from
    the terms left. Once at least ``want`` documents already score above ``rest_bound``, their ``want``-th best is
    a floor for the final ``want``-th best that no unscored document can reach, and a scored one only stays in if
    its score plus ``rest_bound`` reaches that floor. None when pruning is not possible yet.
    """
    # The slack absorbs float32 rounding in the contributions the float64 bounds are compared against.
    slack = rest_bound * 1e-6 + 1e-9
    above = np.flatnonzero(scores > rest_bound + slack)
    if above.size < want:
        return None
    floor = _kth_largest(scores[above], want)
    return np.flatnonzero(scores >= floor - rest_bound - slack * 2 - floor * 1e-6)


def check_arrays(
    ids_utf8: np.ndarray,
    ids_off: np.ndarray,
    vocab_utf8: np.ndarray,
    vocab_off: np.ndarray,
    term_ids: np.ndarray,
    doc_off: np.ndarray,
) -> None:
    """Check the arrays ``add_arrays`` takes, a ``ValueError`` naming the first that is wrong: document i's id is
    ``ids_utf8[ids_off[i]:ids_off[i + 1]]`` (UTF-8 bytes) and its tokens ``vocab[term_ids[j]]`` for j in
    ``doc_off[i]:doc_off[i + 1]``, term t being ``vocab_utf8[vocab_off[t]:vocab_off[t + 1]]``; the blobs uint8, the
    offsets int64, the term ids int32, each one-dimensional."""
    named = {"ids_utf8": ids_utf8, "ids_off": ids_off, "vocab_utf8": vocab_utf8, "vocab_off": vocab_off}
    named |= {"term_ids": term_ids, "doc_off": doc_off}
    kinds = {"ids_utf8": np.uint8, "vocab_utf8": np.uint8, "term_ids": np.int32}
    for name, values in named.items():
        if not isinstance(values, np.ndarray) or values.ndim != 1 or values.dtype != kinds.get(name, np.int64):
            raise ValueError(f"add_arrays: {name} is not a one-dimensional {np.dtype(kinds.get(name, np.int64))} array")
    for off, size, name in ((ids_off, ids_utf8.size, "ids_off"), (vocab_off, vocab_utf8.size, "vocab_off")):
        _check_offsets(off, size, name)
    _check_offsets(doc_off, term_ids.size, "doc_off")
    if doc_off.size != ids_off.size:
        raise ValueError("add_arrays: doc_off and ids_off are of different lengths")
    if term_ids.size and (int(term_ids.min()) < 0 or int(term_ids.max()) >= vocab_off.size - 1):
        raise ValueError("add_arrays: term_ids names a term the vocabulary does not hold")


def _check_offsets(off: np.ndarray, size: int, name: str) -> None:
    if off.size < 1 or off[0] != 0 or off[-1] != size or bool(np.any(off[1:] < off[:-1])):
        raise ValueError(f"add_arrays: {name} has offsets out of order or out of range")


def _strings_of(blob: np.ndarray, off: np.ndarray) -> list[str]:
    """The UTF-8 strings ``blob[off[i]:off[i + 1]]`` (offsets checked)."""
    data, bounds = blob.tobytes(), off.tolist()
    try:
        return [data[a:b].decode("utf-8") for a, b in zip(bounds[:-1], bounds[1:], strict=True)]
    except UnicodeDecodeError as exc:
        raise ValueError(f"add_arrays: a string is not UTF-8 text ({exc.reason})") from None


def _documents_of(
    ids_utf8: np.ndarray,
    ids_off: np.ndarray,
    vocab_utf8: np.ndarray,
    vocab_off: np.ndarray,
    term_ids: np.ndarray,
    doc_off: np.ndarray,
) -> tuple[list[str], list[list[str]]]:
    """The ids and token lists of checked arrays (``check_arrays``), as ``add_many`` takes them."""
    table = np.empty(vocab_off.size - 1, dtype=object)
    table[:] = _strings_of(vocab_utf8, vocab_off)
    tokens, bounds = table[term_ids].tolist(), doc_off.tolist()
    return _strings_of(ids_utf8, ids_off), [tokens[a:b] for a, b in zip(bounds[:-1], bounds[1:], strict=True)]


class _NoneExcluded:
    """An exclude container without a length: the numpy index then scores every posting (no pruning)."""

    def __contains__(self, item: object) -> bool:
        return False


class Bm25Index:
    """Okapi BM25 (k1=1.2, b=0.75, idf = ln(1 + (N - df + 0.5) / (df + 0.5))) over string doc ids.

    ``compiled``: None takes the compiled index when it is built, else the numpy one; True requires the compiled one;
    False takes the numpy one.
    """

    k1: float
    b: float
    _lock: threading.RLock

    def __new__(cls, k1: float = K1, b: float = B, *, compiled: bool | None = None) -> Bm25Index:
        if cls is Bm25Index:
            if compiled and _bm25kernel is None:
                raise RuntimeError(
                    "the compiled BM25 index dream_assets/text/_bm25kernel.c is not built: reinstall with a C compiler"
                )
            use = _bm25kernel is not None if compiled is None else compiled
            if compiled is None and not use:
                _warn_fallback_once()
            cls = CompiledBm25Index if use else NumpyBm25Index
        return super().__new__(cls)

    def __len__(self) -> int:
        raise NotImplementedError

    def search(
        self, query_tokens: Sequence[str], limit: int = 10, *, exclude: Container[str] = ()
    ) -> list[tuple[str, float]]:
        """The ``limit`` best (doc_id, score) pairs, best first, ties by doc_id ascending.

        Only documents sharing at least one query term are returned. A query term repeated counts
        once. Ids in ``exclude`` are skipped without reducing the number of results returned.
        """
        if limit <= 0:
            return []
        return self._search(query_tokens, limit, exclude)

    def _search(self, query_tokens: Sequence[str], limit: int, exclude: Container[str]) -> list[tuple[str, float]]:
        """``search`` for a ``limit`` of 1 or more."""
        raise NotImplementedError

    def doc_freq(self, term: str) -> int:
        raise NotImplementedError

    @property
    def n_docs(self) -> int:
        return len(self)

    def idf(self, term: str) -> float:
        """The BM25 idf: ln(1 + (N - df + 0.5) / (df + 0.5)); always positive."""
        n = len(self)
        df = self.doc_freq(term)
        return math.log(1.0 + (n - df + 0.5) / (df + 0.5))

    def idf_tfidf(self, term: str) -> float:
        """scikit-learn's smooth idf, ln((1 + N) / (1 + df)) + 1, over this index's corpus."""
        return math.log((1.0 + len(self)) / (1.0 + self.doc_freq(term))) + 1.0

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

    @staticmethod
    def _check_many(doc_ids: Sequence[str], token_lists: Sequence[Sequence[str]]) -> None:
        if len(doc_ids) != len(token_lists):
            raise ValueError(f"add_many: {len(doc_ids)} doc ids but {len(token_lists)} token lists")
        if len(set(doc_ids)) != len(doc_ids):
            raise ValueError("add_many: a doc id appears more than once; pass each document once")


class CompiledBm25Index(Bm25Index):
    """The compiled index (``_bm25kernel.Index``): the same contract as :class:`NumpyBm25Index`."""

    def __init__(self, k1: float = K1, b: float = B, *, compiled: bool | None = None) -> None:
        self.k1 = k1
        self.b = b
        self._lock = threading.RLock()
        self._index = _bm25kernel.Index(k1, b)  # type: ignore[union-attr]

    def clear(self) -> None:
        with self._lock:
            self._index.clear()

    def add(self, doc_id: str, tokens: Sequence[str]) -> None:
        """Index ``tokens`` under ``doc_id``, replacing whatever that id held before."""
        with self._lock:
            self._index.add(doc_id, tokens)

    def add_many(self, doc_ids: Sequence[str], token_lists: Sequence[Sequence[str]]) -> None:
        """``add`` of each document in turn into an empty index (a first build)."""
        self._check_many(doc_ids, token_lists)
        with self._lock:
            if len(self._index):
                raise ValueError("add_many builds an empty index; use add to change one that holds documents")
            self._index.add_many(doc_ids, token_lists)

    def add_arrays(
        self,
        ids_utf8: np.ndarray,
        ids_off: np.ndarray,
        vocab_utf8: np.ndarray,
        vocab_off: np.ndarray,
        term_ids: np.ndarray,
        doc_off: np.ndarray,
    ) -> None:
        """``add_many`` of the documents the arrays hold (see :func:`check_arrays`), into an empty index: the kernel
        reads them as they are, checking every offset and term id, with no Python object made per id or token."""
        check_arrays(ids_utf8, ids_off, vocab_utf8, vocab_off, term_ids, doc_off)
        if not hasattr(self._index, "add_arrays"):  # a kernel built from an older source: the same, through lists
            self.add_many(*_documents_of(ids_utf8, ids_off, vocab_utf8, vocab_off, term_ids, doc_off))
            return
        with self._lock:
            if len(self._index):
                raise ValueError("add_arrays builds an empty index; use add to change one that holds documents")
            self._index.add_arrays(ids_utf8, ids_off, vocab_utf8, vocab_off, term_ids, doc_off)

    def remove(self, doc_id: str) -> None:
        """Forget ``doc_id``; a no-op when it is not indexed."""
        with self._lock:
            self._index.remove(doc_id)

    def __len__(self) -> int:
        return len(self._index)

    def __contains__(self, doc_id: object) -> bool:
        return self._index.contains(doc_id)

    def __iter__(self) -> Iterator[str]:
        with self._lock:
            return iter(self._index.ids())

    @property
    def average_length(self) -> float:
        live, _dead, total, _scored = self._index.stats()
        return total / live if live else 0.0

    def doc_freq(self, term: str) -> int:
        return self._index.doc_freq(term)

    def _search(self, query_tokens: Sequence[str], limit: int, exclude: Container[str]) -> list[tuple[str, float]]:
        # An exclude set of known size is covered by asking for that many more; one without a size by asking again.
        want = limit + len(exclude) if hasattr(exclude, "__len__") else limit  # type: ignore[arg-type]
        with self._lock:
            while True:
                hits = self._index.search(query_tokens, want)
                out = [hit for hit in hits if hit[0] not in exclude][:limit] if exclude else hits[:limit]
                if len(out) == limit or len(hits) < want:
                    return out
                want *= 2

    def _search_unpruned(self, query_tokens: Sequence[str], limit: int) -> list[tuple[str, float]]:
        """Every posting of the query terms scored (no pruning): what :meth:`search` must equal."""
        with self._lock:
            return self._index.search(query_tokens, limit, prune=False)


class NumpyBm25Index(Bm25Index):
    """The index in numpy arrays (see the module's description)."""

    def __init__(self, k1: float = K1, b: float = B, *, compiled: bool | None = None) -> None:
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
            # term -> (highest tf, shortest document length) over its postings: the MaxScore bound's inputs.
            self._reach: dict[str, tuple[float, float]] = {}

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
            reach = self._reach
            for term, tf in counts.items():
                entry = postings.get(term)
                if entry is None:
                    entry = postings[term] = (array("i"), array("f"))
                entry[0].append(slot)
                entry[1].append(float(tf))
                df[term] = df.get(term, 0) + 1
                known = reach.get(term)
                if known is not None and (tf > known[0] or length < known[1]):
                    reach[term] = (max(known[0], float(tf)), min(known[1], float(length)))
            self._maybe_compact()

    def add_many(self, doc_ids: Sequence[str], token_lists: Sequence[Sequence[str]]) -> None:
        """``add`` of each document in turn into an empty index (a first build): the same postings, statistics and
        slots, with the postings of each term written at once instead of one append per document and term."""
        self._check_many(doc_ids, token_lists)
        n = len(doc_ids)
        lengths = np.fromiter((len(t) for t in token_lists), dtype=np.int64, count=n)
        vocabulary: dict[str, int] = {}  # in order of first use, as add meets them
        flat = itertools.chain.from_iterable(token_lists)
        count = int(lengths.sum())
        term_ids = np.fromiter((vocabulary.setdefault(t, len(vocabulary)) for t in flat), np.int64, count=count)
        self._build(doc_ids, list(vocabulary), term_ids, lengths, [tuple(dict.fromkeys(t)) for t in token_lists])

    def add_arrays(
        self,
        ids_utf8: np.ndarray,
        ids_off: np.ndarray,
        vocab_utf8: np.ndarray,
        vocab_off: np.ndarray,
        term_ids: np.ndarray,
        doc_off: np.ndarray,
    ) -> None:
        """``add_many`` of the documents the arrays hold (see :func:`check_arrays`), into an empty index."""
        check_arrays(ids_utf8, ids_off, vocab_utf8, vocab_off, term_ids, doc_off)
        doc_ids, token_lists = _documents_of(ids_utf8, ids_off, vocab_utf8, vocab_off, term_ids, doc_off)
        if len(set(doc_ids)) != len(doc_ids):
            raise ValueError("add_arrays: a doc id appears more than once")
        self.add_many(doc_ids, token_lists)

    def _build(
        self,
        doc_ids: Sequence[str],
        terms: list[str],
        term_ids: np.ndarray,
        lengths: np.ndarray,
        terms_of: list[tuple[str, ...]],
    ) -> None:
        """Lay out documents ``doc_ids`` (distinct) of ``lengths`` tokens, their tokens ``terms[term_ids]`` one
        document after another, ``terms_of`` each one's distinct terms, in an empty index."""
        with self._lock:
            if self._id_of:
                raise ValueError("add_many builds an empty index; use add to change one that holds documents")
            n = len(doc_ids)
            slots = np.repeat(np.arange(n, dtype=np.int64), lengths)
            # (term, slot) pairs sorted by term then slot, with their counts: each term's postings in slot order.
            keys = np.sort(term_ids * max(n, 1) + slots)
            first = np.concatenate(([True], keys[1:] != keys[:-1])) if keys.size else np.zeros(0, dtype=bool)
            starts = np.flatnonzero(first)
            tf = np.diff(np.concatenate((starts, [keys.size]))).astype(np.float32)
            pair_term, pair_slot = keys[starts] // max(n, 1), (keys[starts] % max(n, 1)).astype(np.int32)
            bounds = np.searchsorted(pair_term, np.arange(len(terms) + 1))
            # Slicing bytes is far cheaper than slicing arrays, and there is a term per rare word of the corpus.
            slot_bytes, tf_bytes, at = pair_slot.tobytes(), tf.tobytes(), (bounds * 4).tolist()
            used = [k for k, df in enumerate(np.diff(bounds).tolist()) if df]  # a term with no posting is none
            self._postings = {
                terms[k]: (array("i", slot_bytes[at[k] : at[k + 1]]), array("f", tf_bytes[at[k] : at[k + 1]]))
                for k in used
            }
            self._df = {terms[k]: (at[k + 1] - at[k]) // 4 for k in used}
            self._id_of = list(doc_ids)
            self._slot_of = {d: i for i, d in enumerate(self._id_of)}
            self._terms_of = terms_of
            self._alive = array("b", b"\x01" * n)
            self._length = array("f", lengths.astype(np.float32).tobytes())
            self._total_length = int(lengths.sum())
            self._norm_cache = None

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
                self._reach.pop(term, None)
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
        self._reach = {}

    # ----------------------------------------------------------------- statistics

    def __len__(self) -> int:
        return len(self._slot_of)

    def __contains__(self, doc_id: object) -> bool:
        return doc_id in self._slot_of

    def __iter__(self) -> Iterator[str]:
        return iter(list(self._slot_of))

    @property
    def average_length(self) -> float:
        n = len(self._slot_of)
        return self._total_length / n if n else 0.0

    def doc_freq(self, term: str) -> int:
        return self._df.get(term, 0)

    # ----------------------------------------------------------------- search

    def _search(self, query_tokens: Sequence[str], limit: int, exclude: Container[str]) -> list[tuple[str, float]]:
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
            want = limit + len(exclude) if hasattr(exclude, "__len__") else None  # type: ignore[arg-type]
            bound: list[float] = []
            if want is not None and len(present) > 1 and present[-1][0] > _PRUNE_MIN_DF:
                # What a document can gain from terms i..end at most: bound[i].
                avgdl = self._total_length / n
                reach = [
                    idf * self._term_reach(term, slots_arr, tf_arr, avgdl)
                    for idf, (_, term, (slots_arr, tf_arr)) in zip(idfs, present, strict=True)
                ]
                bound = np.cumsum(reach[::-1])[::-1].tolist()
            # Postings of terms i..end: pruning costs two passes over every slot, so it is only worth trying when
            # the postings it may skip are many times that (a common term is left).
            left = np.cumsum([df for df, _, _ in present][::-1])[::-1].tolist()
            candidates: np.ndarray | None = None
            for i, (df, _, (slots_arr, tf_arr)) in enumerate(present):
                idf = np.float32(idfs[i])
                slots = np.frombuffer(slots_arr, dtype=np.int32)
                tf = np.frombuffer(tf_arr, dtype=np.float32)
                if (
                    candidates is None
                    and bound
                    and i
                    and df > _PRUNE_MIN_DF
                    and left[i] * 4 > norm.size
                    and bound[0] - bound[i] > bound[i]  # else no document can have left the others behind yet
                ):
                    candidates = _settled(scores, want, bound[i])  # type: ignore[arg-type]
                if candidates is None or candidates.size * 8 >= slots.size:
                    # Every posting (cheaper than looking candidates up when they are many; the others no longer
                    # matter).
                    contribution = idf * (tf * tf_scale) / (tf + norm[slots])
                    if alive is not None:  # dead slots keep postings until compaction
                        contribution *= alive[slots]
                    scores[slots] += contribution
                else:
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

    def _search_unpruned(self, query_tokens: Sequence[str], limit: int) -> list[tuple[str, float]]:
        """Every posting of the query terms scored (no pruning): what :meth:`search` must equal."""
        return self.search(query_tokens, limit, exclude=_NoneExcluded())

    def _term_reach(self, term: str, slots_arr: array, tf_arr: array, avgdl: float) -> float:
        """The most one occurrence set of ``term`` adds to a document's score, per unit of idf."""
        known = self._reach.get(term)
        if known is None:
            slots = np.frombuffer(slots_arr, dtype=np.int32)
            tfs = np.frombuffer(tf_arr, dtype=np.float32)
            lengths = np.frombuffer(self._length, dtype=np.float32)
            known = self._reach[term] = (float(tfs.max()), float(lengths[slots].min()))
            del slots, tfs, lengths
        top_tf, shortest = known
        return top_tf * (self.k1 + 1.0) / (top_tf + self.k1 * (1.0 - self.b + self.b * shortest / avgdl))

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
        """Best-first selection without sorting every candidate: partition, then order the few (a group of equal
        scores by id, so only the ids of the tied are compared)."""
        id_of = self._id_of
        want = limit + (len(exclude) if hasattr(exclude, "__len__") else 0)  # type: ignore[arg-type]
        while True:
            if want >= len(candidates):
                chosen = candidates
            else:
                cand_scores = scores[candidates]
                kth = _kth_largest(cand_scores, want)
                # Everything tied with the cut-off comes along so ties break by id, not by position.
                chosen = candidates[cand_scores >= kth]
            chosen_scores = scores[chosen]
            out: list[tuple[str, float]] = []
            for value in np.unique(chosen_scores)[::-1]:
                score = float(value)
                tied = chosen[chosen_scores == value]
                ids = (id_of[s] for s in tied.tolist())
                for doc_id in sorted(d for d in ids if d is not None and d not in exclude):
                    out.append((doc_id, score))
                    if len(out) == limit:
                        return out
            if len(chosen) == len(candidates):
                return out
            want *= 2
