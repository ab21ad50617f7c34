"""Similarity between memory texts and near-duplicate clustering for consolidation.

Spec "Duplicates are avoided at save time" and "Clustering comes from IMemoryDuplicateCandidates":
cosine over TF-IDF vectors where it can be computed, Jaccard over content tokens otherwise, both at
the same threshold (Dream:ConsolidationSimilarityThreshold, default 0.88). "The cluster cap bounds
eligibility": clusters are grown from the strongest pairs down and a union that would exceed
Dream:ConsolidationMaxClusterSize is refused.

TF-IDF here is scikit-learn's (smooth idf, L2 norm) over content tokens: stopwords are left out,
as they are from the BM25 index that save-time deduplication reads its idf from, so both sides of
the aligned threshold measure the same thing.

Finding every pair above the threshold in 100,000 documents without an n x n product uses prefix
filtering (Bayardo et al., "Scaling up all pairs similarity search"). Features are ranked from most
to least common. Within each L2-normalised row the most common features whose squared weights sum
to less than threshold² form the row's "common part" Q, the rest its "rare part" P. If x and y share
no feature of P_x, then cos(x, y) = x_Q · y <= ||x_Q|| < threshold; and a pair that reaches the
threshold shares a feature of P_x and of P_y (see cosine_pairs). So candidates come from the sparse
product X_P @ X_Pᵀ, cheap because rare features have short postings, in row chunks so that the
n x n product never exists. A per-bucket Cauchy-Schwarz bound on the unseen x_Q · y discards most
candidates; the survivors are verified exactly.
"""

from __future__ import annotations

import math
import re
import unicodedata
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    import scipy.sparse

from dream_assets.text.bm25 import Bm25Index
from dream_assets.text.framing import FRAMING_WORDS, without_frame_dates
from dream_assets.text.tokens import STOPWORDS, content_token_list, content_tokens, stem, tokenize

METHODS = ("auto", "tfidf", "jaccard", "overlap")
#: How much the longer text's extra weight counts in the overlap measure's denominator (0: pure containment).
OVERLAP_SIZE_PENALTY = 0.15

# Slack for floating-point error in the pruning bounds: pruning may only ever keep too much, never
# drop a pair whose exact cosine reaches the threshold.
_EPS = 1e-9
# Exact cosines carry rounding error of this order; a pair this close to the threshold counts.
_ROUNDING = 1e-12
# Upper bound on the non-zeros one chunk of X_P @ Xᵀ may produce, which bounds peak memory.
_CHUNK_WORK = 4_000_000
# Rank buckets for the per-bucket Cauchy-Schwarz bound (see _bucket_norms) and how many candidate
# pairs one bound evaluation gathers at a time (memory: _BOUND_BATCH x buckets x 2 x 4 bytes).
_RANK_BUCKETS = 32
_BOUND_BATCH = 250_000
# Float32 rounding allowance in that bound; generous, since it only lets more pairs through.
_BOUND_SLACK = 1e-5
# Exact verification handles this many candidate pairs at a time, again to bound memory.
_VERIFY_BATCH = 100_000


# --------------------------------------------------------------------------- sparse rows


@dataclass(frozen=True)
class SparseRows:
    """A sparse matrix as compressed rows (CSR), what the joins below need of one in numpy alone: row i's columns
    are ``indices[indptr[i]:indptr[i + 1]]``, ascending and each once, with ``data`` their values."""

    data: np.ndarray
    indices: np.ndarray  # int64
    indptr: np.ndarray  # int64, one more than the rows
    n_cols: int

    @classmethod
    def of_rows(cls, data: np.ndarray, indices: np.ndarray, indptr: np.ndarray, n_cols: int) -> SparseRows:
        """Rows whose columns come in any order (each at most once in a row), sorted within each row."""
        indices = np.asarray(indices, dtype=np.int64)
        indptr = np.asarray(indptr, dtype=np.int64)
        row_of = np.repeat(np.arange(indptr.size - 1, dtype=np.int64), np.diff(indptr))
        order = np.lexsort((indices, row_of))
        return cls(np.asarray(data)[order], indices[order], indptr, int(n_cols))

    @property
    def shape(self) -> tuple[int, int]:
        return self.indptr.size - 1, self.n_cols

    @property
    def nnz(self) -> int:
        return int(self.indices.size)

    def row_of(self) -> np.ndarray:
        """The row of each entry."""
        return np.repeat(np.arange(self.indptr.size - 1, dtype=np.int64), np.diff(self.indptr))

    def select(self, keep: np.ndarray, data: np.ndarray | None = None) -> SparseRows:
        """The entries where ``keep`` holds, with ``data`` as their values when given."""
        counts = np.bincount(self.row_of()[keep], minlength=self.indptr.size - 1)
        values = self.data[keep] if data is None else data
        return SparseRows(values, self.indices[keep], np.concatenate(([0], np.cumsum(counts))), self.n_cols)

    def transposed(self) -> SparseRows:
        order = np.argsort(self.indices, kind="stable")  # rows stay ascending within each column
        counts = np.bincount(self.indices, minlength=self.n_cols)
        return SparseRows(
            self.data[order], self.row_of()[order], np.concatenate(([0], np.cumsum(counts))), self.indptr.size - 1
        )

    def gather(self, rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """The entries of ``rows`` (in that order, repeats allowed): their positions, and for each the index in
        ``rows`` it belongs to."""
        first = self.indptr[rows]
        counts = self.indptr[rows + 1] - first
        owner = np.repeat(np.arange(rows.size, dtype=np.int64), counts)
        before = np.cumsum(counts) - counts
        return np.arange(int(counts.sum()), dtype=np.int64) - (before - first)[owner], owner


def jaccard(a: set[str], b: set[str]) -> float:
    """|a ∩ b| / |a ∪ b|; two empty sets share nothing, so 0.0."""
    if not a or not b:
        return 0.0
    inter = len(a & b)
    if inter == 0:
        return 0.0
    return inter / (len(a) + len(b) - inter)


def _similarity_tokens(a_text: str, b_text: str) -> tuple[list[str], list[str]]:
    """Content tokens of both texts; all tokens when either text is nothing but stopwords."""
    a, b = content_token_list(a_text), content_token_list(b_text)
    if a and b:
        return a, b
    return tokenize(a_text), tokenize(b_text)


def tfidf_cosine(a_text: str, b_text: str, index: Bm25Index | None = None) -> float:
    """TF-IDF cosine of two texts, in [0, 1].

    With ``index`` the idf comes from that index's corpus (what save-time deduplication compares
    against); without it, from the two texts alone (smooth idf over a two-document corpus).
    Stopwords are left out, as they are in the BM25 index and in clustering.
    """
    a_tokens, b_tokens = _similarity_tokens(a_text, b_text)
    if index is not None:
        return Bm25Index.cosine(index.tfidf_vector(a_tokens), index.tfidf_vector(b_tokens))
    a_tf, b_tf = Counter(a_tokens), Counter(b_tokens)

    def idf(term: str) -> float:
        df = (term in a_tf) + (term in b_tf)
        return math.log(3.0 / (1.0 + df)) + 1.0

    return Bm25Index.cosine({t: tf * idf(t) for t, tf in a_tf.items()}, {t: tf * idf(t) for t, tf in b_tf.items()})


@dataclass
class DuplicateClusters:
    """Near-duplicate clusters of document ids; singletons are omitted."""

    clusters: list[list[str]]
    method: str  # "tfidf", "jaccard" or "overlap": what actually produced the pairs
    pairs: int  # pairs at or above the threshold, before the cluster cap was applied
    warning: str | None = None  # set when "auto" had to fall back from TF-IDF to Jaccard
    threshold: float | None = None  # the threshold the pairs were found at


def find_duplicate_clusters(
    docs: Sequence[tuple[str, str]],
    threshold: float,
    max_cluster_size: int,
    *,
    method: str = "auto",
    groups: Sequence[str] | None = None,
) -> DuplicateClusters:
    """Cluster ``docs`` ((id, text) pairs) whose similarity reaches ``threshold``; with ``groups`` (one per doc),
    only docs of one group are joined (the walls of dream_assets/scope.py).

    ``method``: "tfidf" (cosine over scikit-learn TF-IDF fitted on ``docs``), "jaccard" (over
    content tokens) or "auto" (TF-IDF, falling back to Jaccard with a warning when TF-IDF cannot be
    computed, e.g. an empty vocabulary). Members are listed in input order and clusters ordered by
    their first member's input position, so the result depends only on the input.
    """
    if method not in METHODS:
        raise ValueError(f"find_duplicate_clusters: method={method!r} is unknown; use one of {METHODS}")
    if not 0.0 < threshold <= 1.0:
        raise ValueError(
            f"find_duplicate_clusters: threshold={threshold!r} is outside (0, 1]; "
            "set Dream:ConsolidationSimilarityThreshold to a similarity such as 0.88"
        )
    ids = [doc_id for doc_id, _ in docs]
    if len(set(ids)) != len(ids):
        dup = next(d for d, c in Counter(ids).items() if c > 1)
        raise ValueError(f"find_duplicate_clusters: doc id {dup!r} appears more than once; pass each entry once")
    texts = [text or "" for _, text in docs]

    warning: str | None = None
    used = "jaccard"
    if method == "overlap":
        used = "overlap"
        rows, cols, sims = overlap_text_pairs(texts, threshold)
    elif method in ("auto", "tfidf"):
        try:
            rows, cols, sims = tfidf_pairs(texts, threshold)
            used = "tfidf"
        except (ValueError, MemoryError) as exc:
            if method == "tfidf":
                raise
            warning = (
                f"TF-IDF similarity unavailable ({type(exc).__name__}: {exc}); fell back to Jaccard over content tokens"
            )
    if used == "jaccard":
        rows, cols, sims = jaccard_pairs([content_tokens(t) for t in texts], threshold)

    clusters = cluster_pairs(len(docs), rows, cols, sims, max_cluster_size, groups=groups)
    return DuplicateClusters(
        clusters=[[ids[i] for i in members] for members in clusters],
        method=used,
        pairs=len(rows),
        warning=warning,
        threshold=threshold,
    )


# --------------------------------------------------------------------------- clustering


def cluster_pairs(
    n: int,
    rows: np.ndarray,
    cols: np.ndarray,
    sims: np.ndarray,
    max_cluster_size: int,
    *,
    groups: Sequence[str] | None = None,
) -> list[list[int]]:
    """Greedy capped union-find over pairs, strongest first (ties by positions), as sorted index lists. With
    ``groups`` (one per position) a pair of two groups is no pair: a cluster holds one group's members only."""
    if groups is not None and len(rows):
        if len(groups) != n:
            raise ValueError(f"cluster_pairs: {len(groups)} groups for {n} positions")
        codes = np.unique(np.asarray(list(groups), dtype=object).astype(str), return_inverse=True)[1]
        same = codes[np.asarray(rows)] == codes[np.asarray(cols)]
        rows, cols, sims = np.asarray(rows)[same], np.asarray(cols)[same], np.asarray(sims)[same]
    parent = list(range(n))
    size = [1] * n

    def find(i: int) -> int:
        while parent[i] != i:
            parent[i] = parent[parent[i]]
            i = parent[i]
        return i

    order = np.lexsort((cols, rows, -sims))
    for i, j in zip(rows[order].tolist(), cols[order].tolist(), strict=True):
        ri, rj = find(i), find(j)
        if ri == rj or size[ri] + size[rj] > max_cluster_size:
            continue
        if ri > rj:
            ri, rj = rj, ri
        parent[rj] = ri  # the root is always the earliest member, which keeps ordering trivial
        size[ri] += size[rj]

    groups: dict[int, list[int]] = {}
    for i in range(n):
        if size[find(i)] > 1:
            groups.setdefault(find(i), []).append(i)
    return [groups[root] for root in sorted(groups)]


# --------------------------------------------------------------------------- TF-IDF pairs


def tfidf_matrix(texts: Sequence[str]) -> scipy.sparse.csr_matrix:
    """L2-normalised smooth-idf TF-IDF rows over content tokens. Raises ValueError on an empty vocabulary, and
    MissingExtra when scikit-learn is not installed (the ``tfidf`` extra; the default overlap measure needs none)."""
    from dream_assets.extras import require

    TfidfVectorizer = require(  # noqa: N806 - the class, imported only when this measure is used
        "sklearn.feature_extraction.text", "tfidf", "the TF-IDF measure (LexicalSimilarityMeasure=tfidf)"
    ).TfidfVectorizer
    vectorizer = TfidfVectorizer(
        tokenizer=content_token_list,
        lowercase=False,
        token_pattern=None,
        smooth_idf=True,
        norm="l2",
        dtype=np.float64,
    )
    return vectorizer.fit_transform(texts).tocsr()  # scikit-learn brings SciPy; the base install has neither


def tfidf_pairs(texts: Sequence[str], threshold: float) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Every (i, j, cosine) with i < j and cosine >= threshold, without forming the n x n product."""
    x = tfidf_matrix(texts)
    return cosine_pairs(x, threshold)


def cosine_pairs(
    x: scipy.sparse.csr_matrix | SparseRows, threshold: float
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """All-pairs cosine join of L2-normalised rows (see the module docstring for the pruning)."""
    n, n_features = x.shape
    empty = (np.zeros(0, np.int64), np.zeros(0, np.int64), np.zeros(0, np.float64))
    if n < 2 or x.nnz == 0:
        return empty

    # Renumber features by document frequency, most common first, so every row lists its common
    # part before its rare part.
    df = np.bincount(x.indices, minlength=n_features)
    by_df = np.argsort(-df, kind="stable")
    rank = np.empty(n_features, dtype=np.int64)
    rank[by_df] = np.arange(n_features)
    x = SparseRows.of_rows(x.data.astype(np.float64), rank[x.indices], x.indptr, n_features)

    row_of = np.repeat(np.arange(n, dtype=np.int64), np.diff(x.indptr))
    squares = x.data * x.data
    cum = np.concatenate(([0.0], np.cumsum(squares)))  # cum[k] = sum of squares before entry k
    within_row = cum[1:] - cum[x.indptr[:-1]][row_of]  # inclusive running sum inside each row
    common = within_row < threshold * threshold * (1.0 - _EPS)  # Q: strictly below threshold²
    rare = ~common
    # Rank of each row's first rare feature (rows are rank-sorted and the rare part is a suffix).
    first_rare_at = x.indptr[:-1] + np.bincount(row_of[common], minlength=n)
    has_rare = first_rare_at < x.indptr[1:]
    first_rare = np.full(n, n_features, dtype=np.int64)
    first_rare[has_rare] = x.indices[first_rare_at[has_rare]]
    common_by_bucket, all_by_bucket = _bucket_norms(x, row_of, squares, common)

    x_rare = x.select(rare)
    x_rare_t = x_rare.transposed()

    # If cos(x, y) >= threshold, P_x and P_y share a feature: say x's rare part starts at the rarer
    # rank (first_rare[x] >= first_rare[y]); x shares some feature f of P_x with y, and f, being at
    # least as rare as y's cut, lies in P_y. So candidates come from X_P @ X_Pᵀ, and for that
    # orientation x_P · y_Q = 0: the partial product is x_P · y and the unseen rest is x_Q · y.
    df_rare = np.bincount(x_rare.indices, minlength=n_features)
    work = np.cumsum(np.bincount(row_of[rare], weights=df_rare[x.indices[rare]], minlength=n))

    def bounded(r: np.ndarray, c: np.ndarray, score: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        upper = c > r
        r, c, score = r[upper], c[upper], score[upper]
        r_is_x = first_rare[r] >= first_rare[c]
        xs = np.where(r_is_x, r, c)
        ys = np.where(r_is_x, c, r)
        keep = np.empty(r.size, dtype=bool)
        for lo in range(0, r.size, _BOUND_BATCH):
            sl = slice(lo, lo + _BOUND_BATCH)
            # x_Q · y <= sum over rank buckets of ||x_Q in bucket|| * ||y in bucket||
            # (Cauchy-Schwarz per bucket: tight where x and y use different common words).
            unseen = np.einsum("ij,ij->i", common_by_bucket[xs[sl]], all_by_bucket[ys[sl]])
            keep[sl] = score[sl] + unseen >= threshold - _BOUND_SLACK
        return r[keep], c[keep]

    rows, cols = _chunked_candidates(x_rare, x_rare_t, work, n, bounded, sums=True)
    if rows.size == 0:
        return empty
    sims = _row_dots_of(x, x, rows, cols)
    keep = sims >= threshold - _ROUNDING  # identical texts may sum to 0.9999999999999998
    return rows[keep], cols[keep], np.minimum(sims[keep], 1.0)


def _bucket_norms(
    x: SparseRows, row_of: np.ndarray, squares: np.ndarray, common: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """Per-row L2 norms within rank buckets: of the common part, and of the whole row.

    Buckets hold roughly equal numbers of common-part entries, so the most frequent words get a
    bucket each and the long tail shares a few. Float32 halves the gather cost; the bound check
    leaves _BOUND_SLACK for its rounding.
    """
    n = x.shape[0]
    if not common.any():
        zeros = np.zeros((n, 1), dtype=np.float32)
        return zeros, zeros
    quantiles = np.linspace(0.0, 1.0, _RANK_BUCKETS + 1)[1:-1]
    edges = np.unique(np.quantile(x.indices[common], quantiles).astype(np.int64))
    n_buckets = edges.size + 1
    key = row_of * n_buckets + np.searchsorted(edges, x.indices, side="right")
    size = n * n_buckets
    common_sq = np.bincount(key[common], weights=squares[common], minlength=size)
    all_sq = np.bincount(key, weights=squares, minlength=size)
    return (
        np.sqrt(common_sq).astype(np.float32).reshape(n, n_buckets),
        np.sqrt(all_sq).astype(np.float32).reshape(n, n_buckets),
    )


# --------------------------------------------------------------------------- Jaccard pairs


def jaccard_pairs(sets: Sequence[set[str]], threshold: float) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Every (i, j, jaccard) with i < j and jaccard >= threshold, by exact prefix filtering.

    Tokens are ordered rarest first; a set of size s keeps its first s - ceil(threshold * s) + 1
    tokens as its prefix. Two sets reaching the threshold overlap in at least ceil(threshold * s)
    tokens of each, so their prefixes share a token: candidates come only from the (short) postings
    of rare prefix tokens, are size-filtered (J <= min/max) and then get an exact Jaccard.
    """
    n = len(sets)
    empty = (np.zeros(0, np.int64), np.zeros(0, np.int64), np.zeros(0, np.float64))
    vocabulary, sizes, indices, indptr = _token_columns(sets)
    if n < 2 or not vocabulary:
        return empty

    # Rank tokens rarest first (ties alphabetical, which the vocabulary order already is).
    df = np.bincount(indices, minlength=len(vocabulary))
    rank = np.empty(len(vocabulary), dtype=np.int64)
    rank[np.argsort(df, kind="stable")] = np.arange(len(vocabulary))
    m = SparseRows.of_rows(np.ones(indices.size), rank[indices], indptr, len(vocabulary))

    row_of = np.repeat(np.arange(n, dtype=np.int64), sizes)
    prefix_len = sizes - np.ceil(threshold * sizes - _EPS).astype(np.int64) + 1
    in_prefix = (np.arange(indices.size) - indptr[:-1][row_of]) < prefix_len[row_of]
    m_prefix = m.select(in_prefix)
    m_prefix_t = m_prefix.transposed()

    df_prefix = np.bincount(m_prefix.indices, minlength=len(vocabulary))
    work = np.cumsum(np.bincount(row_of[in_prefix], weights=df_prefix[m.indices[in_prefix]], minlength=n))

    def size_bound(r: np.ndarray, c: np.ndarray, _shared: np.ndarray | None) -> tuple[np.ndarray, np.ndarray]:
        small = np.minimum(sizes[r], sizes[c])
        large = np.maximum(sizes[r], sizes[c])
        keep = (c > r) & (small >= threshold * large - _EPS)
        return r[keep], c[keep]

    rows, cols = _chunked_candidates(m_prefix, m_prefix_t, work, n, size_bound)
    if rows.size == 0:
        return empty
    overlap = _row_dots_of(m, m, rows, cols)
    sims = overlap / (sizes[rows] + sizes[cols] - overlap)
    keep = sims >= threshold - _ROUNDING
    return rows[keep], cols[keep], sims[keep]


def _token_columns(
    sets: Sequence[frozenset[str] | set[str]],
) -> tuple[list[str], np.ndarray, np.ndarray, np.ndarray]:
    """The sorted vocabulary of ``sets`` and the sets as CSR parts over it: (vocabulary, sizes, column indices,
    row pointers)."""
    vocabulary = sorted(set().union(*sets)) if sets else []
    column = {tok: i for i, tok in enumerate(vocabulary)}
    sizes = np.fromiter((len(s) for s in sets), dtype=np.int64, count=len(sets))
    indices = np.fromiter((column[tok] for s in sets for tok in s), dtype=np.int64, count=int(sizes.sum()))
    return vocabulary, sizes, indices, np.concatenate(([0], np.cumsum(sizes)))


def _chunked_candidates(
    prefix: SparseRows,
    other_t: SparseRows,
    work: np.ndarray,
    n: int,
    select: Callable[[np.ndarray, np.ndarray, np.ndarray | None], tuple[np.ndarray, np.ndarray]],
    *,
    sums: bool = False,
) -> tuple[np.ndarray, np.ndarray]:
    """Candidate pairs of a prefix-filter join: the cells of ``prefix @ other_t``, a block of rows at a time so each
    block's postings stay near _CHUNK_WORK (``work`` is the cumulative count per row). ``select(rows, cols, products)``
    keeps, and orders, the pairs of a block worth verifying. With ``sums`` it sees each cell once with its product;
    without, ``products`` is None and it sees each meeting of a row and a column (one per shared feature), its
    verdict on one (row, column) being the same for all, and the pairs it keeps are then made distinct."""
    found_rows: list[np.ndarray] = []
    found_cols: list[np.ndarray] = []
    start = 0
    while start < n:
        done = work[start - 1] if start else 0.0
        stop = int(np.searchsorted(work, done + _CHUNK_WORK, side="right"))
        stop = min(max(stop, start + 1), n)
        # Each entry (row, feature) of the block meets every posting of that feature in other_t.
        lo = prefix.indptr[start]
        features = prefix.indices[lo : prefix.indptr[stop]]
        at, owner = other_t.gather(features)
        rows = np.repeat(np.arange(start, stop, dtype=np.int64), np.diff(prefix.indptr[start : stop + 1]))[owner]
        cols = other_t.indices[at]
        if sums:
            keys = rows * n + cols
            order = np.argsort(keys, kind="stable")
            keys = keys[order]
            products = (prefix.data[lo : prefix.indptr[stop]][owner] * other_t.data[at])[order]
            first = np.flatnonzero(np.concatenate(([True], keys[1:] != keys[:-1]))) if keys.size else keys
            r, c = select(
                keys[first] // n, keys[first] % n, np.add.reduceat(products, first) if keys.size else products
            )
        else:
            r, c = select(rows, cols, None)
            keys = _distinct(r * n + c)
            r, c = keys // n, keys % n
        found_rows.append(r)
        found_cols.append(c)
        start = stop
    return np.concatenate(found_rows), np.concatenate(found_cols)


# --------------------------------------------------------------------------- overlap (weighted containment)
#
# TF-IDF cosine over whole short texts misses what a re-observation looks like: framing words ("said again on
# 12 May that ...") dilute the vector, inflections ("loves", "loved") are different features, and a fact restated
# inside a longer entry is far from it in cosine however completely it is contained. The overlap measure compares
# stems, leaves framing words and frame dates out (text/framing.py), and asks how much of the smaller text's
# idf-weighted content the other carries:
#
#     overlap(A, B) = W(A ∩ B) / (min(W(A), W(B)) + OVERLAP_SIZE_PENALTY * |W(A) - W(B)|)
#
# where W sums smooth idf weights, ln((1 + n) / (1 + df)) + 1, over a set of stems. A small penalty on the size
# difference keeps a two-word entry from matching every long entry that happens to contain its words. Word order is
# ignored on purpose: "pottery is what Melanie loves" and "Melanie loves pottery" are one fact.


# Every date text/framing.DATE matches has one of these shapes (ISO and slash dates hold a digit, a dash or slash and
# a digit; the others a day number and a month name or a month name and a number, with white space between). An
# ASCII text, lower-cased, that has none of them has no date and so no frame date: the full framing patterns, which
# cost about twenty times more, are left out for it. Non-ASCII text always takes the full path (case-insensitive
# matching has non-ASCII equivalents of ASCII letters).
_MONTH_PREFIX = r"(?:jan|feb|mar|apr|may|jun|jul|aug|sep|oct|nov|dec)"
_DATE_SHAPE = re.compile(
    rf"[0-9](?:[-/][0-9]|(?:st|nd|rd|th)?\s+(?:of\s+)?{_MONTH_PREFIX})|{_MONTH_PREFIX}[a-z]*\.?\s+[0-9]"
)
# Stems of the words seen so far (a word's stem never changes); numbers and identifiers, which stem to themselves,
# are not kept, and the size is bounded.
_STEMS: dict[str, str] = {}
_STEM_CACHE_SIZE = 200_000


def _stem(token: str) -> str:
    found = _STEMS.get(token)
    if found is None:
        found = stem(token)
        if len(_STEMS) < _STEM_CACHE_SIZE and token.isalpha():
            _STEMS[token] = found
    return found


def unframed(text: str) -> str:
    """text/framing.without_frame_dates, without running its patterns over text that holds no date."""
    if text.isascii() and _DATE_SHAPE.search(text.lower()) is None:
        return text
    return without_frame_dates(text)


def overlap_tokens(text: str, words: Sequence[str] | None = None) -> frozenset[str]:
    """The stems the overlap measure compares: content words without framing words or frame dates (``words``:
    ``content_token_list(unframed(text))`` when the caller has it already).

    Falls back to every stem of the text when nothing else is left (an entry made only of stopwords)."""
    core = {_stem(t) for t in (content_token_list(unframed(text)) if words is None else words)}
    kept = frozenset(t for t in core if t not in FRAMING_WORDS)
    if kept:
        return kept
    if core:
        return frozenset(core)
    return frozenset(stem(t) for t in tokenize(text))


# A word of an ASCII text as the overlap measure's fast path reads it: a run of [0-9a-z_] in the lower-cased text; or
# the NUL that ends a text where texts are read together.
_ASCII_WORD_OR_END = re.compile(r"[0-9a-z_]+|\x00")


def overlap_token_columns(texts: Sequence[str]) -> tuple[int, np.ndarray, np.ndarray, np.ndarray]:
    """``_token_columns([overlap_tokens(t) for t in texts])`` with the vocabulary's size in place of the vocabulary:
    each text's stems as CSR parts over the sorted stem vocabulary (see _overlap_columns)."""
    vocabulary, sizes, indices, indptr = _overlap_columns(texts)
    return len(vocabulary), sizes, indices, indptr


def overlap_token_sets(texts: Sequence[str]) -> tuple[list[frozenset[str]], Counter[str]]:
    """``[overlap_tokens(t) for t in texts]`` and how many of them hold each stem, a corpus at a time."""
    terms, sizes, indices, indptr = _overlap_columns(texts)
    flat = [terms[i] for i in indices.tolist()]
    bounds = indptr.tolist()
    sets = [frozenset(flat[a:b]) for a, b in zip(bounds[:-1], bounds[1:], strict=True)]
    counts = np.bincount(indices, minlength=len(terms))
    return sets, Counter(dict(zip(terms, counts.tolist(), strict=True)))


def _overlap_columns(texts: Sequence[str]) -> tuple[list[str], np.ndarray, np.ndarray, np.ndarray]:
    """The sorted stem vocabulary and each text's stems as CSR parts over it. Each distinct word is stemmed and
    checked once for what most texts are (ASCII, no apostrophe, no date shape: their words are the runs of letters,
    digits and underscores of the lower-cased text); the rest, and a text left with no stem once stopwords and
    framing words are out, go text by text (overlap_tokens' fallbacks)."""
    n = len(texts)
    if n == 0:
        return [], np.zeros(0, np.int64), np.zeros(0, np.int64), np.zeros(1, np.int64)
    # The candidates for the fast path, lower-cased and read together, each followed by a NUL: neither a date shape
    # nor a word can hold a NUL, so no match runs from one text into the next, and the NULs mark where texts end.
    is_slow = np.fromiter((not t.isascii() or "'" in t or "\0" in t for t in texts), dtype=bool, count=n)
    candidates = np.flatnonzero(~is_slow)
    lowered = [texts[i].lower() for i in candidates.tolist()]
    joined = "".join(f"{t}\0" for t in lowered)
    starts = np.cumsum([0, *(len(t) + 1 for t in lowered)])[:-1]
    dated = [m.start() for m in _DATE_SHAPE.finditer(joined)]
    is_slow[candidates[np.searchsorted(starts, dated, side="right") - 1]] = True
    tokens = _ASCII_WORD_OR_END.findall(joined)
    index = {w: i for i, w in enumerate(dict.fromkeys(tokens))}
    distinct = list(index)
    token_ids = np.fromiter(map(index.__getitem__, tokens), dtype=np.int64, count=len(tokens))
    ends = token_ids == index.get("\0", -1)
    row = candidates[np.cumsum(ends) - ends][~ends]  # the text of each word: how many texts ended before it
    word_of = token_ids[~ends]
    # A word's stem: only alphabetic words longer than three letters change (tokens.stem), and only alphabetic words
    # can be stopwords or framing words, so the rest (numbers, identifiers: most of a large corpus's distinct
    # words) are their own stems without a look at each.
    dropped = np.zeros(len(distinct), dtype=bool)
    stem_ids: dict[str, int] = {}
    stem_of_word = np.zeros(len(distinct), dtype=np.int64)
    for i, word in enumerate(distinct):
        if word == "\0":
            continue  # the end of a text, no word
        stemmed = word
        if word.isalpha():
            stemmed = _stem(word)
            dropped[i] = word in STOPWORDS or stemmed in FRAMING_WORDS
        stem_of_word[i] = stem_ids.setdefault(stemmed, len(stem_ids))
    stem_of = stem_of_word[word_of]
    keep = ~dropped[word_of]
    keep &= ~is_slow[row]  # a dated text's words: it goes text by text
    fast_rows, fast_stems = row[keep], stem_of[keep]
    is_slow |= np.bincount(fast_rows, minlength=n) == 0
    slow_rows = np.flatnonzero(is_slow)
    slow_sets = [overlap_tokens(texts[i]) for i in slow_rows.tolist()]
    stems = list(stem_ids)
    used = np.bincount(fast_stems, minlength=len(stems)) > 0
    vocabulary = sorted({stems[i] for i in np.flatnonzero(used).tolist()}.union(*slow_sets))  # code point order
    column = {term: i for i, term in enumerate(vocabulary)}
    fast_position = np.fromiter((column.get(t, -1) for t in stems), dtype=np.int64, count=len(stems))
    slow_sizes = np.fromiter((len(s) for s in slow_sets), dtype=np.int64, count=len(slow_sets))
    slow_cols = np.fromiter((column[t] for s in slow_sets for t in s), dtype=np.int64, count=int(slow_sizes.sum()))
    # One (row, stem) each, columns ascending within a row: a word met twice in a text counts once.
    width = max(len(vocabulary), 1)
    keys = _distinct(
        np.concatenate((fast_rows, np.repeat(slow_rows, slow_sizes))).astype(np.int64) * width
        + np.concatenate((fast_position[fast_stems], slow_cols)).astype(np.int64)
    )
    sizes = np.bincount(keys // width, minlength=n).astype(np.int64)
    return vocabulary, sizes, keys % width, np.concatenate(([0], np.cumsum(sizes))).astype(np.int64)


def smooth_idf(n_docs: int, df: int) -> float:
    """Smooth idf over ``n_docs`` documents for a term in ``df`` of them (scikit-learn's formula)."""
    return math.log((1.0 + n_docs) / (1.0 + max(df, 0))) + 1.0


def overlap_score(shared: float, weight_a: float, weight_b: float) -> float:
    """The overlap measure from its three weights (see above)."""
    small, large = min(weight_a, weight_b), max(weight_a, weight_b)
    denominator = small + OVERLAP_SIZE_PENALTY * (large - small)
    return 0.0 if denominator <= 0.0 else min(1.0, shared / denominator)


def overlap_similarity(a_text: str, b_text: str, idf: Callable[[str], float] | None = None) -> float:
    """The overlap measure of two texts, in [0, 1]. ``idf`` weighs a stem; without it, smooth idf over the two texts."""
    a, b = overlap_tokens(a_text), overlap_tokens(b_text)
    if not a or not b:
        return 0.0
    if idf is None:

        def idf(term: str) -> float:
            return smooth_idf(2, (term in a) + (term in b))

    weight = {t: idf(t) for t in a | b}
    return overlap_score(sum(weight[t] for t in a & b), sum(weight[t] for t in a), sum(weight[t] for t in b))


def overlap_pairs(
    sets: Sequence[frozenset[str] | set[str]], threshold: float
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Every (i, j, overlap) with i < j and overlap >= threshold, idf fitted on ``sets``, without an n x n product.

    Prefix filtering on containment: order stems rarest first; a set's prefix is its leading stems up to the point
    where what is left weighs less than threshold x its weight. If B shares none of A's prefix, W(A ∩ B) < t W(A),
    and since the denominator is at least min(W(A), W(B)), a pair that reaches the threshold shares a prefix stem
    of its lighter member with the other member. Candidates therefore come from X_prefix @ X_allᵀ, kept where the
    prefix row is the lighter one, and are verified exactly."""
    vocabulary, sizes, indices, indptr = _token_columns(sets)
    return _overlap_pairs(len(sets), len(vocabulary), sizes, indices, indptr, threshold)


def overlap_text_pairs(texts: Sequence[str], threshold: float) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``overlap_pairs([overlap_tokens(t) for t in texts], threshold)``, with the stems found a column at a time."""
    return _overlap_pairs(len(texts), *overlap_token_columns(texts), threshold)


def _overlap_pairs(
    n: int, n_terms: int, sizes: np.ndarray, indices: np.ndarray, indptr: np.ndarray, threshold: float
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """overlap_pairs over ``n`` sets given as CSR parts over a sorted vocabulary of ``n_terms`` stems."""
    empty = (np.zeros(0, np.int64), np.zeros(0, np.int64), np.zeros(0, np.float64))
    if n < 2 or not n_terms:
        return empty
    df = np.bincount(indices, minlength=n_terms)
    idf = np.log((1.0 + n) / (1.0 + df)) + 1.0
    rank = np.empty(n_terms, dtype=np.int64)
    rank[np.lexsort((np.arange(n_terms), df))] = np.arange(n_terms)  # rarest first
    weights = idf[indices]
    m = SparseRows.of_rows(weights, rank[indices], indptr, n_terms)
    binary = SparseRows(np.ones(m.nnz), m.indices, m.indptr, n_terms)
    row_of = np.repeat(np.arange(n, dtype=np.int64), sizes)
    totals = np.bincount(row_of, weights=m.data, minlength=n)
    cum = np.concatenate(([0.0], np.cumsum(m.data)))
    before = cum[:-1] - cum[m.indptr[:-1]][row_of]  # weight of the row's stems before this one
    remaining = totals[row_of] - before  # weight from this stem to the row's end
    in_prefix = remaining >= threshold * totals[row_of] * (1.0 - _EPS) - _EPS
    m_prefix = m.select(in_prefix, np.ones(int(in_prefix.sum())))
    binary_t = binary.transposed()
    postings = np.bincount(m.indices, minlength=n_terms)
    work = np.cumsum(np.bincount(row_of[in_prefix], weights=postings[m.indices[in_prefix]], minlength=n))

    def lighter_first(r: np.ndarray, c: np.ndarray, _shared: np.ndarray | None) -> tuple[np.ndarray, np.ndarray]:
        lighter = (r != c) & (totals[r] <= totals[c] * (1.0 + _EPS) + _EPS)
        r, c = r[lighter], c[lighter]
        return np.minimum(r, c), np.maximum(r, c)

    rows, cols = _chunked_candidates(m_prefix, binary_t, work, n, lighter_first)
    if rows.size == 0:
        return empty
    # A pair of equal weight can come from both of its prefixes: once is enough. One int64 key per pair sorts much
    # faster than rows of two.
    keys = _distinct(rows * n + cols)
    rows, cols = keys // n, keys % n
    shared_weight = _row_dots_of(m, binary, rows, cols)
    small = np.minimum(totals[rows], totals[cols])
    large = np.maximum(totals[rows], totals[cols])
    sims = np.minimum(1.0, shared_weight / (small + OVERLAP_SIZE_PENALTY * (large - small)))
    keep = sims >= threshold - _ROUNDING
    return rows[keep], cols[keep], sims[keep]


def _distinct(values: np.ndarray) -> np.ndarray:
    """The distinct values, ascending (sorting beats np.unique's hashing on large integer arrays)."""
    values = np.sort(values)
    if values.size:
        values = values[np.concatenate(([True], values[1:] != values[:-1]))]
    return values


def _row_dots_of(a: SparseRows, b: SparseRows, rows: np.ndarray, cols: np.ndarray) -> np.ndarray:
    """a[rows[i]] · b[cols[i]] for candidate pairs, in batches (bounded memory). Each dot sums the products of the
    shared columns in column order with numpy's reduction, so a score does not depend on how the rows are stored."""
    out = np.zeros(rows.size, dtype=np.float64)
    width = max(a.n_cols, b.n_cols, 1)
    for lo in range(0, rows.size, _VERIFY_BATCH):
        r, c = rows[lo : lo + _VERIFY_BATCH], cols[lo : lo + _VERIFY_BATCH]
        a_at, a_pair = a.gather(r)
        b_at, b_pair = b.gather(c)
        if not a_at.size or not b_at.size:
            continue
        # Both key lists ascend (pairs in order, columns ascending within a row): a binary search finds the
        # shared columns.
        a_keys = a_pair * width + a.indices[a_at]
        b_keys = b_pair * width + b.indices[b_at]
        found = np.minimum(np.searchsorted(b_keys, a_keys), b_keys.size - 1)
        shared = b_keys[found] == a_keys
        products = a.data[a_at[shared]] * b.data[b_at[found[shared]]]
        counts = np.bincount(a_pair[shared], minlength=r.size)
        some = np.flatnonzero(counts)
        if some.size:
            out[lo + some] = np.add.reduceat(products, (np.cumsum(counts) - counts)[some])
    return out


# --------------------------------------------------------------------------- exact duplicates


_ASCII_PUNCTUATION = "".join(chr(c) for c in range(128) if unicodedata.category(chr(c)).startswith("P"))
_ASCII_PUNCTUATION_TO_SPACE = str.maketrans(_ASCII_PUNCTUATION, " " * len(_ASCII_PUNCTUATION))
_ASCII_PUNCTUATION_IN_NUMBER = re.compile(rf"[0-9][{re.escape(_ASCII_PUNCTUATION)}][0-9]")
# An ASCII punctuation character unless it stands between two digits.
_ASCII_PUNCTUATION_OUTSIDE_NUMBERS = re.compile(
    rf"(?<![0-9])[{re.escape(_ASCII_PUNCTUATION)}]|[{re.escape(_ASCII_PUNCTUATION)}](?![0-9])"
)


def exact_key(text: str) -> str:
    """Content as compared for exact duplicates: case, white space and punctuation normalised away.

    Only punctuation goes (Unicode category P: . , ; : ! ? quotes, brackets, dashes); symbols that carry meaning
    stay ("$3" is not "€3", "50%" is not "50"), and so does punctuation between two digits ("3.5" is not "35",
    "12:30" is not "1230"). NFKC folds full-width forms first."""
    if (text or "").isascii():
        # ASCII is its own NFKC form and casefolds to lower case; its punctuation is _ASCII_PUNCTUATION.
        lowered = text.lower()
        if _ASCII_PUNCTUATION_IN_NUMBER.search(lowered) is None:
            return " ".join(lowered.translate(_ASCII_PUNCTUATION_TO_SPACE).split())
        return " ".join(_ASCII_PUNCTUATION_OUTSIDE_NUMBERS.sub(" ", lowered).split())
    normalised = unicodedata.normalize("NFKC", text or "").casefold()
    out = []
    last = len(normalised) - 1
    for i, ch in enumerate(normalised):
        if unicodedata.category(ch).startswith("P") and not (
            0 < i < last and normalised[i - 1].isdigit() and normalised[i + 1].isdigit()
        ):
            out.append(" ")
        else:
            out.append(ch)
    return " ".join("".join(out).split())
