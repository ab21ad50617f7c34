"""The recall index persisted beside the store, so a new process loads it instead of reading and tokenising every row.

A first build of the in-process recall index (dream_assets/recall_index.py ``RecallIndex``) spends most of its time
reading the live rows and tokenising them; the BM25 kernel itself is a small part. This file keeps what the build
derives from the rows: per live entry its id, its content tokens, its category and tag tokens, its overlap stems and its
exact duplicate key, which entries say they are a later version of a fact (store/recall.py ``later_version``), with
the row-sequence watermark the state is at (``synced_seq``). A process that finds the file
current rebuilds the index from it (no row read, no tokeniser) and then applies the rows changed since the watermark
(``RecallIndex.sync``), arriving at what a fresh build holds: the same documents, so the same scores bit for bit.

Loading makes no Python object per entry or token: the documents' arrays (ids as UTF-8 bytes and offsets, the
vocabulary likewise, each document's terms as ids into it) go to the BM25 kernel as they are, in one call that checks
them again itself (``Bm25Index.add_arrays``); the ids and the save-time tables are decoded when first used
(``LoadedFile.ids``, ``LoadedFile.rest``), which a search from the shell never does.

The file is ``<store file>.recall`` (a NumPy ``.npz`` archive, no pickles), written through file_safety.py (temp file,
fsync, atomic rename). It is stamped with:

- ``FORMAT``: the layout of the file;
- ``tokens_digest()``: a digest of what the tokenisers make of a probe text (content words, category and tag
  tokens, overlap stems, exact keys) and of what decides the later-version flag (the change words, standing on probe
  rows), so a change to any of them makes every older file stale without anyone remembering to bump a number;
- the watermark and a random token that the store itself records (row ``recall_index`` of its ``meta`` table) when
  the file is written: a store replaced by another file, restored from a snapshot or rebuilt does not hold the
  file's token, and a store whose highest ``seq`` is below the watermark is not the one the file was made from.

Nothing in it is trusted blindly: a file that is missing, unreadable, damaged (the archive's CRCs, array shapes,
offsets, ranges and UTF-8 are checked, all before anything is taken from the file), of another format or tokeniser,
or not vouched for by the store is logged and ignored, and the index is built from the rows as before (and the file
written anew).

Writing holds the store only to list the index's per-entry tables (under a second at a million entries, more when a
loaded index's save-time tables are still to be made) and to record the token; encoding and writing the file (several
seconds at a million entries) happen outside any session.
"""

from __future__ import annotations

import codecs
import gc
import hashlib
import itertools
import json
import logging
import operator
import secrets
import zipfile
from collections import Counter
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from dream_assets.file_safety import atomic_writer

if TYPE_CHECKING:
    import duckdb

log = logging.getLogger("dream_assets.store.index_file")

#: The file's layout; a file of another one is rebuilt.
FORMAT = 3
#: The store's ``meta`` row that vouches for the file (``<token>:<watermark>``).
META_KEY = "recall_index"
#: Changes applied since the file was written after which an ending process (recall_index.py ``persist_recall_indexes``)
#: writes it anew:
#: catching up that many rows costs a loading process tens of milliseconds.
REWRITE_AFTER_CHANGES = 1000

_PROBE = (
    "Alice's café léger: the Ｆｕｌｌ-width TESTS were running, stopped and tried; 3.5% of $12:30 notes "
    "(v2_beta) ran—twice! “quoted” naïve"
)


_STANDING_PROBES = [
    (category, tags, metadata)
    for category in ("notes", "feedback/from-user", "feedback/from-user/x")
    for tags in ((), ("user-correction",), ("correction",), ("User-Correction ",))
    for metadata in (
        {},
        {"source": "user"},
        {"source": "user-stated"},
        {"source": "correction"},
        {"source": "agent"},
        {"feedbackKind": "Correction"},
        {"feedbackKind": "praise"},
        {"userCorrection": "true"},
        {"userCorrection": "false"},
    )
]


class IndexFileError(ValueError):
    """A recall index file that cannot be used; the message says why (it is then rebuilt)."""


def index_path(db_path: Path) -> Path:
    """Where the recall index of the store ``db_path`` is kept: beside it."""
    db_path = Path(db_path)
    return db_path.with_name(db_path.name + ".recall")


_tokens_digest: str | None = None


def tokens_digest() -> str:
    """A digest of what the tokenisers make of a probe text: it changes whenever one of them does."""
    global _tokens_digest
    if _tokens_digest is None:
        from dream_assets.store.standing import correction_standing
        from dream_assets.text.change import CHANGE_WORDS
        from dream_assets.text.similarity import exact_key, overlap_tokens
        from dream_assets.text.tokens import content_token_list, document_tokens

        made = [
            content_token_list(_PROBE),
            document_tokens(_PROBE, "anti-patterns/Routing_notes", ["Tag One", "two-2"]),
            sorted(overlap_tokens(_PROBE)),
            exact_key(_PROBE),
            # What decides an entry's later-version flag: the change words, and standing on probe rows.
            CHANGE_WORDS.pattern,
            [correction_standing(c, t, m) for c, t, m in _STANDING_PROBES],
        ]
        _tokens_digest = hashlib.sha256(json.dumps(made, ensure_ascii=False).encode()).hexdigest()[:16]
    return _tokens_digest


@dataclass
class IndexState:
    """What the recall index holds for its live entries, as lists in one order (the file's content)."""

    ids: list[str]
    content: list[tuple[str, ...]]  # content tokens per entry
    labels: list[tuple[str, ...]]  # category and tag tokens per entry (the document is content + labels)
    stems: list[frozenset[str]]  # overlap stems per entry
    exact: list[tuple[str, str]]  # (category, exact key) per entry
    synced_seq: int
    #: How many of the entries hold each stem (computed from ``stems`` when not given).
    stem_df: Counter[str] | None = None
    #: The entries that say they are a later version of a fact (store/recall.py ``later_version``).
    later: frozenset[str] = frozenset()


# ---------------------------------------------------------------------------------------------- encoding


def _strings(values: list[str]) -> tuple[np.ndarray, np.ndarray]:
    """UTF-8 bytes and int64 offsets of ``values`` (string i is ``bytes[offsets[i]:offsets[i + 1]]``)."""
    encoded = [v.encode("utf-8") for v in values]
    off = np.zeros(len(encoded) + 1, dtype=np.int64)
    off[1:] = np.cumsum(np.fromiter(map(len, encoded), dtype=np.int64, count=len(encoded)))
    return np.frombuffer(b"".join(encoded), dtype=np.uint8).copy(), off


def _check_strings(blob: np.ndarray, offsets: np.ndarray, name: str) -> None:
    """Check strings as ``_strings`` lays them out (offsets in order and in range, each string UTF-8) without making
    them: the whole blob is UTF-8 and every non-empty string begins at a character's first byte, so each string is."""
    if offsets.ndim != 1 or offsets.size < 1 or offsets.dtype != np.int64 or blob.ndim != 1 or blob.dtype != np.uint8:
        raise IndexFileError(f"array {name!r} is malformed")
    if offsets[0] != 0 or offsets[-1] != blob.size or np.any(offsets[1:] < offsets[:-1]):
        raise IndexFileError(f"array {name!r} has offsets out of order or out of range")
    try:
        codecs.utf_8_decode(blob.data, "strict", True)  # checked, not kept
    except UnicodeDecodeError as exc:
        raise IndexFileError(f"array {name!r} is not UTF-8 text ({exc.reason})") from None
    starts = offsets[:-1][offsets[1:] > offsets[:-1]]
    if starts.size and bool(np.any((blob[starts] & 0xC0) == 0x80)):
        raise IndexFileError(f"array {name!r} is not UTF-8 text (a string begins inside a character)")


def _decode(blob: np.ndarray, offsets: np.ndarray, name: str) -> list[str]:
    """The strings of ``blob`` at ``offsets``, checked (offsets in order and in range, UTF-8)."""
    _check_strings(blob, offsets, name)
    data, bounds = blob.tobytes(), offsets.tolist()
    return [data[a:b].decode("utf-8") for a, b in zip(bounds[:-1], bounds[1:], strict=True)]


def _term_ids(groups: list[tuple[str, ...]]) -> tuple[list[str], np.ndarray, np.ndarray]:
    """A vocabulary and each group's terms as ids into it (flat int32, int64 offsets)."""
    vocab: dict[str, int] = {}
    flat = np.fromiter((vocab.setdefault(t, len(vocab)) for t in itertools.chain.from_iterable(groups)), dtype=np.int32)
    offsets = np.zeros(len(groups) + 1, dtype=np.int64)
    np.cumsum(np.fromiter((len(g) for g in groups), dtype=np.int64, count=len(groups)), out=offsets[1:])
    return list(vocab), flat, offsets


def _interned(values: list[Any]) -> tuple[list[Any], np.ndarray]:
    """The distinct values (in order of first use) and each value's position among them."""
    seen: dict[Any, int] = {}
    which = np.fromiter((seen.setdefault(v, len(seen)) for v in values), dtype=np.int32, count=len(values))
    return list(seen), which


def encode(state: IndexState, token: str) -> dict[str, np.ndarray]:
    """The file's arrays for ``state``, stamped with ``token``."""
    arrays: dict[str, np.ndarray] = {}

    def put_strings(name: str, values: list[str]) -> None:
        arrays[name + "_utf8"], arrays[name + "_off"] = _strings(values)

    def put_groups(name: str, groups: list[tuple[str, ...]]) -> None:
        vocab, flat, offsets = _term_ids(groups)
        put_strings(name + "_vocab", vocab)
        arrays[name + "_ids"], arrays[name + "_off"] = flat, offsets

    put_strings("ids", state.ids)
    put_groups("docs", [c + la for c, la in zip(state.content, state.labels, strict=True)])
    put_groups("content", state.content)
    distinct_labels, arrays["label_of"] = _interned(state.labels)
    put_groups("labels", distinct_labels)
    put_groups("stems", [tuple(s) for s in state.stems])
    categories, arrays["category_of"] = _interned([c for c, _ in state.exact])
    put_strings("categories", categories)
    put_strings("exact", [k for _, k in state.exact])
    arrays["later"] = np.array([i for i, mid in enumerate(state.ids) if mid in state.later], dtype=np.int32)
    stamp = {
        "format": FORMAT,
        "tokens": tokens_digest(),
        "token": token,
        "synced_seq": int(state.synced_seq),
        "entries": len(state.ids),
    }
    arrays["stamp"] = np.frombuffer(json.dumps(stamp).encode(), dtype=np.uint8)
    return arrays


class _Groups:
    """Groups of terms as the file holds them, checked: each group's terms are ``flat[offsets[i]:offsets[i + 1]]``,
    ids into the vocabulary ``words`` (decoded when first needed)."""

    def __init__(self, arrays: Any, name: str) -> None:
        self.vocab_utf8, self.vocab_off = arrays[name + "_vocab_utf8"], arrays[name + "_vocab_off"]
        _check_strings(self.vocab_utf8, self.vocab_off, name)
        flat, offsets = arrays[name + "_ids"], arrays[name + "_off"]
        if flat.dtype != np.int32 or flat.ndim != 1 or offsets.dtype != np.int64 or offsets.ndim != 1:
            raise IndexFileError(f"array {name!r} is malformed")
        if offsets.size < 1 or offsets[0] != 0 or offsets[-1] != flat.size or np.any(offsets[1:] < offsets[:-1]):
            raise IndexFileError(f"array {name!r} has offsets out of order or out of range")
        if flat.size and (int(flat.min()) < 0 or int(flat.max()) >= self.vocab_off.size - 1):
            raise IndexFileError(f"array {name!r} names a term its vocabulary does not hold")
        self.flat, self.offsets = flat, offsets

    @cached_property
    def words(self) -> list[str]:
        return _decode(self.vocab_utf8, self.vocab_off, "vocabulary")

    def tuples(self) -> list[tuple[str, ...]]:
        return self._slices(tuple)

    def lists(self) -> list[list[str]]:
        return self._slices(list)

    def _slices(self, kind: type) -> list[Any]:
        vocab = np.empty(len(self.words), dtype=object)
        vocab[:] = self.words
        terms = kind(vocab[self.flat].tolist())
        bounds = self.offsets.tolist()
        # Slices in C loops: a million groups in a fraction of a second.
        return list(map(terms.__getitem__, map(slice, bounds[:-1], bounds[1:])))

    @cached_property
    def term_counts(self) -> np.ndarray:
        """How many groups hold each term of the vocabulary, by its id (the groups hold distinct terms)."""
        return np.bincount(self.flat, minlength=self.vocab_off.size - 1)

    def counts(self) -> Counter[str]:
        """``term_counts`` by term."""
        return Counter(dict(zip(self.words, self.term_counts.tolist(), strict=True)))


def _string_at(blob: np.ndarray, offsets: np.ndarray, i: int) -> str:
    return blob[int(offsets[i]) : int(offsets[i + 1])].tobytes().decode("utf-8")


class _Finder:
    """Finds a string among those of ``blob`` at ``offsets`` without decoding them: each string's bytes hashed at
    once (a weighted sum with random 64-bit weights per position, and its length), sorted; a lookup hashes the one
    string, finds its hash by bisection and compares the bytes of the few strings with that hash."""

    def __init__(self, blob: np.ndarray, offsets: np.ndarray) -> None:
        self.blob, self.offsets = blob, offsets
        lengths = np.diff(offsets)
        longest = int(lengths.max()) if lengths.size else 0
        self.weights = np.random.default_rng(0x5EED).integers(1, 2**63, size=longest + 1, dtype=np.uint64)
        within = np.arange(blob.size, dtype=np.int64) - np.repeat(offsets[:-1], lengths)
        terms = blob.astype(np.uint64) * self.weights[within]
        sums = np.zeros(lengths.size, dtype=np.uint64)
        filled = lengths > 0
        if blob.size:
            sums[filled] = np.add.reduceat(terms, offsets[:-1][filled])
        hashes = sums ^ (lengths.astype(np.uint64) * self.weights[-1])
        self._weights: list[int] = self.weights.tolist()
        self.order = np.argsort(hashes, kind="stable")
        self.hashes = hashes[self.order]

    def find(self, text: str) -> int | None:
        return self.find_many([text])[0]

    def find_many(self, texts: list[str]) -> list[int | None]:
        """Where each of ``texts`` is (None: not held), with one bisection for them all."""
        weights, longest = self._weights, len(self._weights) - 1  # sums in Python's integers, modulo 2**64
        wanted = [t.encode("utf-8") for t in texts]
        hashes = np.array(
            [(sum(map(operator.mul, w, weights)) % 2**64) ^ (len(w) * weights[-1] % 2**64) for w in wanted],
            dtype=np.uint64,
        )
        los = np.searchsorted(self.hashes, hashes, "left").tolist()
        his = np.searchsorted(self.hashes, hashes, "right").tolist()
        found: list[int | None] = []
        for w, lo, hi in zip(wanted, los, his, strict=True):
            at = None
            if len(w) <= longest:
                for i in self.order[lo:hi].tolist():
                    if self.blob[int(self.offsets[i]) : int(self.offsets[i + 1])].tobytes() == w:
                        at = i
                        break
            found.append(at)
        return found


def _checked_picks(count: int, which: np.ndarray, n: int, name: str) -> np.ndarray:
    if which.dtype != np.int32 or which.shape != (n,):
        raise IndexFileError(f"array {name!r} is malformed")
    if n and (int(which.min()) < 0 or int(which.max()) >= count):
        raise IndexFileError(f"array {name!r} is out of range")
    return which


def _picked(values: list[Any], which: np.ndarray) -> list[Any]:
    table = np.empty(len(values), dtype=object)
    table[:] = values
    return table[which].tolist()


def read_stamp(arrays: Any) -> dict[str, Any]:
    try:
        stamp = json.loads(bytes(arrays["stamp"]).decode())
    except (KeyError, ValueError) as exc:
        raise IndexFileError(f"its stamp is unreadable ({exc})") from None
    if not isinstance(stamp, dict):
        raise IndexFileError("its stamp is unreadable")
    if stamp.get("format") != FORMAT:
        raise IndexFileError(f"it is of format {stamp.get('format')!r}, this version reads {FORMAT}")
    if stamp.get("tokens") != tokens_digest():
        raise IndexFileError("it was made by another tokeniser")
    if not isinstance(stamp.get("synced_seq"), int) or not isinstance(stamp.get("token"), str):
        raise IndexFileError("its stamp is incomplete")
    return stamp


class LoadedFile:
    """A checked index file: the BM25 documents as the arrays the kernel reads (``documents``), every Python object
    (the ids, the save-time tables: content and label tokens, overlap stems, exact keys) made when first asked for
    (``ids``, ``rest``). Everything is checked before the file is taken (the archive's CRCs, shapes, offsets, ranges,
    UTF-8), so making the objects later cannot find it damaged."""

    def __init__(self, arrays: Any) -> None:
        self.stamp = read_stamp(arrays)
        self._ids_utf8, self._ids_off = arrays["ids_utf8"], arrays["ids_off"]
        _check_strings(self._ids_utf8, self._ids_off, "ids")
        n = self._ids_off.size - 1
        if n != self.stamp.get("entries"):
            raise IndexFileError("its entry count does not match its stamp")
        documents = _Groups(arrays, "docs")
        self._content, self._labels = _Groups(arrays, "content"), _Groups(arrays, "labels")
        self._label_of = _checked_picks(self._labels.offsets.size - 1, arrays["label_of"], n, "label_of")
        self._stems = _Groups(arrays, "stems")
        self._categories_utf8, self._categories_off = arrays["categories_utf8"], arrays["categories_off"]
        _check_strings(self._categories_utf8, self._categories_off, "categories")
        self._category_of = _checked_picks(self._categories_off.size - 1, arrays["category_of"], n, "category_of")
        self._keys_utf8, self._keys_off = arrays["exact_utf8"], arrays["exact_off"]
        _check_strings(self._keys_utf8, self._keys_off, "exact")
        later = arrays["later"]
        if later.dtype != np.int32 or later.ndim != 1:
            raise IndexFileError("array 'later' is malformed")
        if later.size and (int(later[0]) < 0 or int(later[-1]) >= n or bool(np.any(later[1:] <= later[:-1]))):
            raise IndexFileError("array 'later' is out of range or out of order")
        self._later = later
        sizes = (documents.offsets.size, self._content.offsets.size, self._stems.offsets.size, self._keys_off.size)
        if any(size != n + 1 for size in sizes):
            raise IndexFileError("its tables are of different lengths")
        if documents.flat.size != self._content.flat.size + int(
            np.diff(self._labels.offsets)[self._label_of].sum() if n else 0
        ):
            raise IndexFileError("its documents do not hold its content and label tokens")
        #: Each entry's BM25 document (content tokens, then category and tag tokens) as the arrays
        #: ``Bm25Index.add_arrays`` takes: (ids_utf8, ids_off, vocab_utf8, vocab_off, term_ids, doc_off).
        self.documents: tuple[np.ndarray, ...] | None = (
            self._ids_utf8,
            self._ids_off,
            documents.vocab_utf8,
            documents.vocab_off,
            documents.flat,
            documents.offsets,
        )
        self.entries = n
        # What saves looked up before the tables were made (``position``, ``stem_counts``), kept.
        self._position_of: dict[str, int | None] = {}
        self._stem_count_of: dict[str, int] = {}
        self.synced_seq = int(self.stamp["synced_seq"])

    @cached_property
    def ids(self) -> list[str]:
        """The live entries' ids, in the file's order."""
        return _decode(self._ids_utf8, self._ids_off, "ids")

    def rest(
        self,
    ) -> tuple[list[tuple[str, ...]], list[tuple[str, ...]], list[frozenset[str]], Counter[str], list[tuple[str, str]]]:
        """Per entry its content tokens, its label tokens, its overlap stems, how many entries hold each stem, and
        (category, exact key) per entry."""
        content = self._content.tuples()
        labels = _picked(self._labels.tuples(), self._label_of)
        stems = list(map(frozenset, self._stems.tuples()))
        keys = _decode(self._keys_utf8, self._keys_off, "exact")
        exact = list(zip(_picked(self._categories, self._category_of), keys, strict=True))
        return content, labels, stems, self._stems.counts(), exact

    # Lookups of single entries, for a save before the tables are made (``RecallIndex``'s ``_Unmade``): strings are
    # found by a hash of their bytes (``_Finder``) and only those asked for are decoded; nothing is made per entry.
    @cached_property
    def _id_finder(self) -> _Finder:
        return _Finder(self._ids_utf8, self._ids_off)

    def position(self, mid: str) -> int | None:
        """Where the entry ``mid`` is in the file's order (None: the file does not hold it)."""
        known = self._position_of
        if mid not in known:
            known[mid] = self._id_finder.find(mid)
        return known[mid]

    def id_at(self, i: int) -> str:
        return _string_at(self._ids_utf8, self._ids_off, i)

    def later_ids(self) -> set[str]:
        """The entries that say they are a later version of a fact (a few: decoded one by one)."""
        return {self.id_at(i) for i in self._later.tolist()}

    def stems_at(self, i: int) -> frozenset[str]:
        """The overlap stems of the entry at position ``i``."""
        vocab, bounds = self._stems, self._stems.offsets
        return frozenset(
            _string_at(vocab.vocab_utf8, vocab.vocab_off, j) for j in vocab.flat[bounds[i] : bounds[i + 1]].tolist()
        )

    @cached_property
    def _stem_finder(self) -> _Finder:
        return _Finder(self._stems.vocab_utf8, self._stems.vocab_off)

    def stem_counts(self, terms: Iterable[str]) -> dict[str, int]:
        """How many of the file's entries hold each of the overlap stems ``terms`` (kept: saves ask for the same
        words again and again)."""
        known = self._stem_count_of
        new = [t for t in set(terms) if t not in known]
        if new:
            counts = self._stems.term_counts
            for term, at in zip(new, self._stem_finder.find_many(new), strict=True):
                known[term] = 0 if at is None else int(counts[at])
        return known

    @cached_property
    def _categories(self) -> list[str]:
        return _decode(self._categories_utf8, self._categories_off, "categories")

    def exact_positions(self, category: str, key: str) -> list[int]:
        """The positions of the entries of ``category`` whose exact-duplicate key is ``key``: compared byte by byte
        in the file's arrays, the candidates narrowed a byte at a time (no key is decoded)."""
        try:
            which = self._categories.index(category)
        except ValueError:
            return []
        wanted = key.encode("utf-8")
        starts = self._keys_off[:-1]
        rows = np.flatnonzero((np.diff(self._keys_off) == len(wanted)) & (self._category_of == which))
        for k, byte in enumerate(wanted):
            if not rows.size:
                break
            rows = rows[self._keys_utf8[starts[rows] + k] == byte]
        return rows.tolist()

    def state(self) -> IndexState:
        content, labels, stems, stem_df, exact = self.rest()
        later = frozenset(self.ids[i] for i in self._later.tolist())
        return IndexState(self.ids, content, labels, stems, exact, self.synced_seq, stem_df, later)


def decode(arrays: Any) -> tuple[IndexState, dict[str, Any]]:
    """The state the file holds and its stamp; ``IndexFileError`` when anything in it does not add up."""
    loaded = LoadedFile(arrays)
    return loaded.state(), loaded.stamp


# ---------------------------------------------------------------------------------------------- files


def write(path: Path, state: IndexState, token: str) -> int:
    """Write ``state`` to ``path`` atomically (temp file, fsync, rename); returns the bytes written."""
    arrays = encode(state, token)
    with atomic_writer(path) as fh:
        np.savez(fh, allow_pickle=False, **arrays)
        size = fh.tell()
    return size


def peek_stamp(path: Path) -> dict[str, Any]:
    """The stamp of the file at ``path`` without reading the rest (``read`` checks the whole file)."""
    try:
        with np.load(path, allow_pickle=False) as archive:
            return read_stamp({"stamp": archive["stamp"]})
    except FileNotFoundError:
        raise
    except (OSError, ValueError, KeyError, EOFError, MemoryError, zipfile.BadZipFile) as exc:
        raise IndexFileError(f"it is damaged ({type(exc).__name__}: {exc})") from None


def open_file(path: Path) -> LoadedFile:
    """The checked file at ``path``. ``FileNotFoundError`` when there is none; ``IndexFileError`` when it cannot be
    used (damaged, another format or tokeniser)."""
    try:
        with np.load(path, allow_pickle=False) as archive:
            # Reading every member whole makes zipfile check its CRC.
            arrays = {name: archive[name] for name in archive.files}
    except FileNotFoundError:
        raise
    except (OSError, ValueError, KeyError, EOFError, MemoryError, zipfile.BadZipFile) as exc:
        raise IndexFileError(f"it is damaged ({type(exc).__name__}: {exc})") from None
    try:
        return LoadedFile(arrays)
    except IndexFileError:
        raise
    except (KeyError, ValueError, IndexError, TypeError) as exc:
        raise IndexFileError(f"it is damaged ({type(exc).__name__}: {exc})") from None


def read(path: Path) -> tuple[IndexState, dict[str, Any]]:
    """The whole state in ``path`` and its stamp (``open_file`` with everything made)."""
    loaded = open_file(path)
    return loaded.state(), loaded.stamp


@contextmanager
def no_cyclic_gc() -> Iterator[None]:
    """No cyclic garbage collection meanwhile: loading makes millions of tuples and sets (none in a cycle), and the
    collector would walk them again and again (a third of the load's time)."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


def new_token() -> str:
    return secrets.token_hex(8)


def store_stamp(db: duckdb.DuckDBPyConnection) -> str | None:
    """The stamp the store vouches for (``<token>:<watermark>``), or None."""
    row = db.execute("SELECT value FROM meta WHERE key = ?", [META_KEY]).fetchone()
    return None if row is None else str(row[0])


def record_stamp(db: duckdb.DuckDBPyConnection, token: str, synced_seq: int) -> None:
    db.execute("INSERT OR REPLACE INTO meta VALUES (?, ?)", [META_KEY, f"{token}:{int(synced_seq)}"])


def stale_reason(stamp: dict[str, Any], vouched: str | None, top_seq: int) -> str | None:
    """Why a file with ``stamp`` cannot serve a store that vouches for ``vouched`` and whose highest ``seq`` is
    ``top_seq``; None when it can."""
    expected = f"{stamp['token']}:{stamp['synced_seq']}"
    if vouched != expected:
        return "the store does not vouch for it (the store was replaced, restored or rebuilt since it was written)"
    if stamp["synced_seq"] > top_seq:
        return f"it is ahead of the store (row sequence {stamp['synced_seq']} > {top_seq})"
    return None
