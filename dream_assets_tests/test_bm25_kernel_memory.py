"""The compiled index's compact bookkeeping: each document's id, length and term list in one varint record, hash tags
in the tables, capacity handed back at compaction. Removals, replacements and compactions must still undo exactly
what an add did, for ids and terms of any length and script, so the numpy index is the reference throughout."""

import random

from dream_assets.text.bm25 import Bm25Index, CompiledBm25Index, NumpyBm25Index

# Lengths around the varint boundaries (127/128 bytes, 16,383/16,384) and the empty id.
ODD_IDS = ["", "é", "日本", "🦉" * 3, "x" * 127, "y" * 128, "z" * 129, "ü" * 300, "w" * 16_384, "d-01"]
ODD_TERMS = ["a", "é", "日本語", "🦉", "t" * 127, "u" * 128, "ß" * 200, "v" * 16_385]


def _both() -> tuple[Bm25Index, Bm25Index]:
    compiled, numpy_index = Bm25Index(compiled=True), Bm25Index(compiled=False)
    assert isinstance(compiled, CompiledBm25Index) and isinstance(numpy_index, NumpyBm25Index)
    return compiled, numpy_index


def _agree(compiled: Bm25Index, numpy_index: Bm25Index, terms: list[str], queries: list[list[str]]) -> None:
    assert len(compiled) == len(numpy_index) and list(compiled) == list(numpy_index)
    assert compiled.average_length == numpy_index.average_length
    for doc_id in numpy_index:
        assert doc_id in compiled
    for term in terms:
        assert compiled.doc_freq(term) == numpy_index.doc_freq(term), term
    for query in queries:
        assert compiled.search(query, 20) == numpy_index.search(query, 20), query
        assert compiled._search_unpruned(query, 20) == numpy_index._search_unpruned(query, 20)


def test_odd_ids_and_terms_survive_removals_replacements_and_compactions() -> None:
    rng = random.Random(7)
    vocabulary = ODD_TERMS + [f"k{i}" for i in range(300)]
    queries = [[t] for t in ODD_TERMS] + [rng.sample(vocabulary, 3) for _ in range(40)]
    compiled, numpy_index = _both()
    fillers = [f"f{i}" for i in range(2500)]
    for doc_id in ODD_IDS + fillers:
        words = rng.choices(vocabulary, k=rng.randint(0, 60))  # past 32 distinct terms the list is sorted otherwise
        for index in (compiled, numpy_index):
            index.add(doc_id, words)
    _agree(compiled, numpy_index, vocabulary, queries)
    # Remove most fillers (compacting), replace the odd ids, remove some, then add them back with other terms.
    for doc_id in fillers[:2200]:
        for index in (compiled, numpy_index):
            index.remove(doc_id)
    assert compiled._index.stats()[1] < 1024  # dead slots were compacted away
    _agree(compiled, numpy_index, vocabulary, queries)
    for round_ in range(3):
        for doc_id in ODD_IDS:
            words = rng.choices(ODD_TERMS, k=rng.randint(1, 5)) + [f"r{round_}"]
            for index in (compiled, numpy_index):
                if round_ == 1:
                    index.remove(doc_id)
                else:
                    index.add(doc_id, words)
        _agree(compiled, numpy_index, vocabulary + ["r0", "r1", "r2"], queries + [["r0"], ["r2"]])
    assert compiled.doc_freq("r0") == 0  # what a replaced document held no longer counts
    assert {doc_id for doc_id, _ in compiled.search(["r2"], 50)} == set(ODD_IDS)
    for doc_id in [*ODD_IDS, *fillers]:  # removing everything undoes every document frequency
        for index in (compiled, numpy_index):
            index.remove(doc_id)
    assert len(compiled) == 0 and all(compiled.doc_freq(t) == 0 for t in vocabulary)
    assert compiled.search(["a"], 5) == []


def test_many_distinct_terms_renumbered_by_compaction_still_undo_exactly() -> None:
    # 60,000 distinct terms: the term table grows several times and term ids need three-byte gaps in the records.
    compiled, numpy_index = _both()
    n = 12_000
    for i in range(n):
        words = ["shared", f"u{i}", f"v{i}", f"w{i % 997}", f"x{i}", f"y{i}", "shared", f"z{i // 3}"]
        for index in (compiled, numpy_index):
            index.add(f"doc{i}", words)
    held = compiled._index.memory()["terms"]
    for i in range(0, n, 4):  # three quarters go: enough to compact, dropping their unique terms
        for j in (i, i + 1, i + 2):
            for index in (compiled, numpy_index):
                index.remove(f"doc{j}")
    assert compiled._index.memory()["terms"] < held * 0.6  # a compaction ran and renumbered the terms
    probes = [f"u{i}" for i in range(0, n, 7)] + [f"w{i}" for i in range(0, 997, 13)] + ["shared", "z1", "z4000"]
    _agree(compiled, numpy_index, probes, [[t] for t in probes[::5]] + [["shared", "w5", "z3999"]])
    for i in range(3, n, 4):  # the survivors' term ids were renumbered: their removal must still find every term
        for index in (compiled, numpy_index):
            index.remove(f"doc{i}")
    assert len(compiled) == 0 and all(compiled.doc_freq(t) == 0 for t in probes)


def test_an_id_replaced_past_the_id_table_size_keeps_resolving() -> None:
    # Ten ids replaced over and over leave more dead slots than the smallest id table has positions before a
    # compaction: every live id must still be found, and only once.
    compiled, numpy_index = _both()
    for step in range(1500):
        doc_id = f"id{step % 10}"
        for index in (compiled, numpy_index):
            index.add(doc_id, [f"s{step}", "same", f"m{step % 3}"])
    _agree(compiled, numpy_index, ["same", "m0", "s1499", "s5"], [["same"], ["m1", "same"], ["s1495"]])
    assert sorted(compiled) == [f"id{i}" for i in range(10)]


def test_the_bookkeeping_stays_small_per_document_and_compaction_hands_memory_back() -> None:
    compiled = Bm25Index(compiled=True)
    n = 20_000
    for i in range(n):  # ~11 distinct terms, one of them unique, 10-byte ids: the benchmark corpus's shape
        words = [f"c{(i * 7 + j) % 400}" for j in range(10)] + [f"ticket-{i}"]
        compiled.add(f"m-{i:08d}", words)
    memory = compiled._index.memory()
    terms = n + 400
    assert memory["terms"] <= 32 * terms  # no stored hash or length per term
    assert memory["slots"] <= 5 * n  # alive flag and record offset
    assert memory["records"] <= 32 * n  # id 10 + 1, length 1, count 1, 11 term ids as gaps
    assert memory["term_table"] <= 4 * 2 * terms and memory["id_table"] <= 4 * 2 * n  # up to 3/4 full
    for i in range(n - 2_000):
        compiled.remove(f"m-{i:08d}")
    after = compiled._index.memory()
    assert len(compiled) == 2_000 and compiled._index.stats()[1] < 1024
    assert after["records_capacity"] <= memory["records"] / 5
    assert after["slots_capacity"] <= memory["slots"] / 5
    assert after["terms"] <= memory["terms"] / 5
    assert after["postings_capacity"] == after["postings"]
    assert compiled.search(["ticket-19999"], 3)[0][0] == "m-00019999"
