"""The compiled BM25 index against the numpy one: the same documents, scores (bit for bit) and order, through adds,
replacements, removals and compactions, so an install without a C compiler recalls exactly what one with it does."""

import random

import pytest

from dream_assets.text.bm25 import Bm25Index, CompiledBm25Index, NumpyBm25Index


def _both() -> tuple[Bm25Index, Bm25Index]:
    compiled, numpy_index = Bm25Index(compiled=True), Bm25Index(compiled=False)
    assert isinstance(compiled, CompiledBm25Index) and isinstance(numpy_index, NumpyBm25Index)
    return compiled, numpy_index


def test_the_default_index_is_the_compiled_one() -> None:
    assert type(Bm25Index()) is CompiledBm25Index


def test_compiled_and_numpy_indexes_agree_bit_for_bit_through_churn() -> None:
    rng = random.Random(24)
    common = ["user", "note", "project", "meeting", "ünïcode", "日本"]
    vocabulary = [f"w{i}" for i in range(600)] + ["é", "e", "ab", "a", "b"]
    weights = [1.0 / (i + 1) for i in range(len(vocabulary))]  # Zipf-like
    indexes = _both()
    ids = [f"d{i:05d}" for i in range(5000)]
    for doc_id in ids:
        words = rng.sample(common, rng.randint(0, 3)) + rng.choices(vocabulary, weights, k=rng.randint(0, 9))
        words *= rng.choice((1, 1, 3))
        for index in indexes:
            index.add(doc_id, words)
    # Enough removals to compact more than once, with replacements and re-adds in between.
    for step, i in enumerate(rng.choices(range(5000), k=9000)):
        doc_id = ids[i]
        words = rng.choices(vocabulary, weights, k=rng.randint(1, 6)) + ["user"] * (step % 2)
        for index in indexes:
            if step % 3:
                index.remove(doc_id)
            else:
                index.add(doc_id, words)
    compiled, numpy_index = indexes
    assert len(compiled) == len(numpy_index) and list(compiled) == list(numpy_index)
    assert compiled.average_length == numpy_index.average_length
    for term in [*common, *vocabulary[:50], "absent"]:
        assert compiled.doc_freq(term) == numpy_index.doc_freq(term)
        assert compiled.idf(term) == numpy_index.idf(term)
    for _ in range(600):
        query = rng.sample(common, rng.randint(0, 3)) + rng.choices(vocabulary, weights, k=rng.randint(1, 12))
        limit = rng.choice((1, 3, 10, 20, 200))
        exclude = set(rng.sample(ids, rng.choice((0, 0, 5))))
        expected = numpy_index.search(query, limit, exclude=exclude)
        assert compiled.search(query, limit, exclude=exclude) == expected
        assert compiled._search_unpruned(query, limit) == numpy_index._search_unpruned(query, limit)


def test_ties_are_ordered_by_id_across_the_cut_off() -> None:
    compiled, numpy_index = _both()
    for index in (compiled, numpy_index):
        for i in range(3000):  # every document scores the same: only ids decide who is in the top 10
            index.add(f"id-{(i * 7919) % 3000:04d}", ["same", "words", "here"])
    expected = [(f"id-{i:04d}", compiled.search(["same"], 1)[0][1]) for i in range(10)]
    assert compiled.search(["same", "words"], 10)[0][0] == "id-0000"
    assert compiled.search(["same"], 10) == expected == numpy_index.search(["same"], 10)


def test_a_bad_token_is_refused_and_leaves_the_index_as_it_was() -> None:
    index = Bm25Index(compiled=True)
    index.add("a", ["alpha", "beta"])
    before = index.search(["alpha", "beta"], 5)
    with pytest.raises(TypeError, match="tokens must be str"):
        index.add("b", ["alpha", 3])  # type: ignore[list-item]
    assert "b" not in index and len(index) == 1 and index.doc_freq("alpha") == 1
    assert index.search(["alpha", "beta"], 5) == before
    with pytest.raises(ValueError, match="empty index"):
        index.add_many(["c"], [["gamma"]])
    with pytest.raises(ValueError, match="more than once"):
        Bm25Index(compiled=True).add_many(["c", "c"], [["gamma"], ["delta"]])


def test_add_many_then_changes_match_one_by_one_adds() -> None:
    rng = random.Random(5)
    words = [f"t{i}" for i in range(200)]
    docs = {f"m{i}": rng.choices(words, k=rng.randint(1, 15)) for i in range(3000)}
    at_once, one_by_one = Bm25Index(compiled=True), Bm25Index(compiled=True)
    at_once.add_many(list(docs), list(docs.values()))
    for doc_id, tokens in docs.items():
        one_by_one.add(doc_id, tokens)
    for index in (at_once, one_by_one):
        index.add("m1", ["t1", "t2"])
        index.remove("m2")
    for _ in range(100):
        query = rng.choices(words, k=rng.randint(1, 6))
        assert at_once.search(query, 10) == one_by_one.search(query, 10)


def test_a_term_repeated_past_what_a_posting_holds_scores_exactly() -> None:
    # A posting keeps tf and document length in 16 bits each; beyond that the exact values are kept aside.
    docs = {
        "huge": ["x"] * 70_000 + ["y"] * 3,
        "at-limit": ["x"] * 65_535,
        "below": ["x"] * 65_534 + ["z"],
        "small": ["x", "z"],
    }
    compiled, numpy_index = _both()
    for index in (compiled, numpy_index):
        for doc_id, tokens in docs.items():
            index.add(doc_id, tokens)
        for i in range(3000):
            index.add(f"filler{i}", ["x", "q"])
    queries = (["x"], ["y"], ["z"], ["x", "y", "z"], ["q", "x"])
    for query in queries:
        assert compiled.search(query, 10) == numpy_index.search(query, 10)
    for index in (compiled, numpy_index):  # compactions renumber the slots the kept-aside values belong to
        for i in range(3000):
            index.remove(f"filler{i}")
        index.remove("small")
        index.add("huge", ["x"] * 66_000)
    for query in queries:
        assert compiled.search(query, 10) == numpy_index.search(query, 10)
    assert {d for d, _ in compiled.search(["x"], 10)} == {"huge", "at-limit", "below"}


def test_the_numpy_fallback_warns_once_per_process_with_how_to_get_the_compiled_kernel(monkeypatch, caplog) -> None:
    from dream_assets.text import bm25

    monkeypatch.setattr(bm25, "_bm25kernel", None)
    monkeypatch.setattr(bm25, "_fallback_warned", False)
    caplog.set_level("WARNING", logger="dream_assets.text.bm25")
    assert type(Bm25Index()) is NumpyBm25Index and type(Bm25Index()) is NumpyBm25Index
    warned = [r.getMessage() for r in caplog.records if r.name == "dream_assets.text.bm25"]
    assert len(warned) == 1
    assert "compiled kernel is not built" in warned[0] and "C compiler" in warned[0] and "reinstall" in warned[0]
    assert bm25.kernel_in_use() == "numpy"
    Bm25Index(compiled=False)  # asked for by name: no warning
    assert len([r for r in caplog.records if r.name == "dream_assets.text.bm25"]) == 1


def _arrays(ids: list[str], docs: list[list[str]], vocabulary: list[str]) -> list:
    """The arrays ``add_arrays`` takes for ``docs`` under ``ids``, terms as positions in ``vocabulary``."""
    import numpy as np

    def strings(values: list[str]) -> tuple:
        encoded = [v.encode() for v in values]
        offsets = np.zeros(len(encoded) + 1, dtype=np.int64)
        offsets[1:] = np.cumsum([len(e) for e in encoded])
        return np.frombuffer(b"".join(encoded), dtype=np.uint8).copy(), offsets

    position = {}
    for k, term in enumerate(vocabulary):
        position.setdefault(term, k)
    flat = np.array([position[t] for doc in docs for t in doc], dtype=np.int32)
    doc_off = np.zeros(len(docs) + 1, dtype=np.int64)
    doc_off[1:] = np.cumsum([len(doc) for doc in docs])
    return [*strings(ids), *strings(vocabulary), flat, doc_off]


@pytest.mark.parametrize("in_order", [False, True])
def test_a_build_from_arrays_is_add_many_bit_for_bit_in_both_indexes_and_through_churn(in_order: bool) -> None:
    """What a persisted recall index is loaded with: the same index as a build from the token lists, before and after
    changes (replacements, removals, compactions), whether the documents come in id order or not."""
    rng = random.Random(41)
    vocabulary = [f"w{i}" for i in range(400)] + ["ünïcode", "日本", "é", "e", "a"]
    weights = [1.0 / (i + 1) for i in range(len(vocabulary))]
    ids = [f"m-{i:05d}" for i in rng.sample(range(100_000), 4000)]
    if in_order:
        ids.sort()
    docs = [rng.choices(vocabulary, weights, k=rng.randint(0, 12)) for _ in ids]
    docs[7] = ["w3"] * 70_000 + ["w4"]  # a tf past what a posting holds
    # The vocabulary as a file may hold it: a term twice, a term no document uses.
    arrays = _arrays(ids, docs, [*vocabulary, "w5", "unused"])
    built = [Bm25Index(compiled=c) for c in (True, False)]
    loaded = [Bm25Index(compiled=c) for c in (True, False)]
    for index in built:
        index.add_many(ids, docs)
    for index in loaded:
        index.add_arrays(*arrays)
    indexes = built + loaded
    for step in range(3):
        reference = indexes[1]
        for index in indexes:
            assert len(index) == len(reference) and sorted(index) == sorted(reference)
            assert index.average_length == reference.average_length
            for term in [*vocabulary[:40], "unused", "absent"]:
                assert index.doc_freq(term) == reference.doc_freq(term)
        for _ in range(200):
            query = rng.choices(vocabulary, weights, k=rng.randint(1, 10))
            limit = rng.choice((1, 5, 20, 300))
            expected = reference.search(query, limit)
            assert all(index.search(query, limit) == expected for index in indexes)
            assert all(index._search_unpruned(query, limit) == expected[:limit] for index in indexes)
        for doc_id in rng.sample(ids, 1500 * (step + 1) // 2):  # past the compaction threshold by the end
            words = rng.choices(vocabulary, weights, k=rng.randint(1, 6))
            gone = doc_id in reference and rng.random() < 0.7
            for index in indexes:
                if gone:
                    index.remove(doc_id)
                else:
                    index.add(doc_id, words)


def _bad_arrays() -> dict[str, list]:
    import numpy as np

    good = _arrays(["a", "b", "c"], [["x", "y"], [], ["y", "y", "z"]], ["x", "y", "z"])

    def changed(position: int, value: object) -> list:
        arrays = [a.copy() for a in good]
        arrays[position] = value
        return arrays

    ids_utf8, ids_off, vocab_utf8, vocab_off, term_ids, doc_off = good
    return {
        "an offset past the end": changed(1, np.array([0, 1, 2**40, 3], dtype=np.int64)),
        "a negative offset": changed(3, np.array([0, -1, 2, 3], dtype=np.int64)),
        "offsets backwards": changed(5, np.array([0, 2, 1, 5], dtype=np.int64)),
        "offsets short of the end": changed(5, np.array([0, 2, 2, 4], dtype=np.int64)),
        "a term id past the vocabulary": changed(4, np.array([0, 1, 1, 1, 3], dtype=np.int32)),
        "a negative term id": changed(4, np.array([0, 1, -1, 1, 2], dtype=np.int32)),
        "fewer documents than ids": changed(5, doc_off[:-1].copy()),
        "an id twice": changed(0, np.frombuffer(b"aac", dtype=np.uint8).copy()),
        "an id not UTF-8": changed(0, np.frombuffer(b"a\xffc", dtype=np.uint8).copy()),
        "a surrogate": [
            *_arrays(["a", "b", "c"], [["x"], [], []], ["x", "y", "z"])[:2],
            np.frombuffer(b"x\xed\xa0\x80z", dtype=np.uint8).copy(),
            np.array([0, 1, 4, 5], dtype=np.int64),
            *_arrays(["a", "b", "c"], [["x"], [], []], ["x", "y", "z"])[4:],
        ],
        "a term cut inside a character": [
            ids_utf8,
            ids_off,
            np.frombuffer("xé".encode(), dtype=np.uint8).copy(),
            np.array([0, 2, 2, 3], dtype=np.int64),
            term_ids,
            doc_off,
        ],
        "offsets of the wrong width": changed(1, ids_off.astype(np.int32)),
        "term ids of the wrong width": changed(4, term_ids.astype(np.int64)),
    }


@pytest.mark.parametrize("case", list(_bad_arrays()))
def test_arrays_that_do_not_add_up_are_refused_and_leave_the_index_empty(case: str) -> None:
    arrays = _bad_arrays()[case]
    good = _arrays(["a", "b"], [["x"], ["x", "y"]], ["x", "y"])
    for index in _both():
        with pytest.raises(ValueError, match="add_arrays"):
            index.add_arrays(*arrays)
        assert len(index) == 0
        index.add_arrays(*good)  # and a build can start again
        assert [d for d, _ in index.search(["y"], 5)] == ["b"]
    # The kernel checks every offset and id itself, whatever its caller checked.
    kernel = Bm25Index(compiled=True)._index  # type: ignore[attr-defined]
    try:
        kernel.add_arrays(*arrays)
    except ValueError:
        pass
    else:  # only the widths are the caller's to check: the kernel reads items of the sizes it takes
        assert case.endswith("wrong width")
    assert len(kernel) == 0


def test_a_build_from_arrays_is_refused_on_an_index_that_holds_documents() -> None:
    good = _arrays(["a"], [["x"]], ["x"])
    for index in _both():
        index.add("z", ["q"])
        with pytest.raises(ValueError, match="empty index"):
            index.add_arrays(*good)
        assert list(index) == ["z"]
    kernel = Bm25Index(compiled=True)._index  # type: ignore[attr-defined]
    kernel.add("z", ["q"])
    kernel.remove("z")  # no document, but its term is still there
    with pytest.raises(ValueError, match="empty index"):
        kernel.add_arrays(*good)


def test_the_kernel_refuses_what_is_not_a_buffer() -> None:
    kernel = Bm25Index(compiled=True)._index  # type: ignore[attr-defined]
    good = _arrays(["a"], [["x"]], ["x"])
    with pytest.raises(TypeError):
        kernel.add_arrays("a", *good[1:])
    with pytest.raises(TypeError):
        kernel.add_arrays(*good[:5])
    assert len(kernel) == 0


def test_an_empty_build_from_arrays_gives_an_empty_index_that_takes_documents() -> None:
    """A persisted index of a store with no live entry."""
    compiled, numpy_index = _both()
    for index in (compiled, numpy_index):
        index.add_arrays(*_arrays([], [], []))
        assert len(index) == 0 and index.search(["x"], 3) == []
        index.add("a", ["x", "y"])
        index.add("b", ["x"])
    assert compiled.search(["x", "y"], 3) == numpy_index.search(["x", "y"], 3)
    assert [d for d, _ in compiled.search(["x", "y"], 3)] == ["a", "b"]


def test_a_kernel_built_from_an_older_source_loads_arrays_through_token_lists() -> None:
    """An install whose compiled kernel predates ``add_arrays`` (its source updated, the module not rebuilt) loads a
    persisted recall index all the same, to the same index."""

    class OlderKernel:  # the kernel less its add_arrays
        def __init__(self, kernel: object) -> None:
            self._kernel = kernel

        def __getattr__(self, name: str) -> object:
            if name == "add_arrays":
                raise AttributeError(name)
            return getattr(self._kernel, name)

        def __len__(self) -> int:
            return len(self._kernel)  # type: ignore[arg-type]

    rng = random.Random(3)
    words = [f"t{i}" for i in range(50)]
    ids = [f"m{i}" for i in range(300)]
    docs = [rng.choices(words, k=rng.randint(0, 8)) for _ in ids]
    older, current = Bm25Index(compiled=True), Bm25Index(compiled=True)
    older._index = OlderKernel(older._index)  # type: ignore[attr-defined]
    for index in (older, current):
        index.add_arrays(*_arrays(ids, docs, words))
    for _ in range(50):
        query = rng.choices(words, k=rng.randint(1, 4))
        assert older.search(query, 10) == current.search(query, 10)
    with pytest.raises(ValueError, match="more than once"):
        stale = Bm25Index(compiled=True)
        stale._index = OlderKernel(stale._index)  # type: ignore[attr-defined]
        stale.add_arrays(*_arrays(["a", "a"], [["t1"], ["t2"]], words))
