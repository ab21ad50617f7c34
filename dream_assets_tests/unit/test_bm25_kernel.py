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
