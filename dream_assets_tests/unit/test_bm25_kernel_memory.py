"""The compiled index's compact bookkeeping: each document's id (front-coded) and length in one varint record, document
frequencies that catch up with removals when asked for, hash tags in the tables, capacity handed back at compaction.
Removals, replacements and compactions must still undo exactly what an add did, for ids and terms of any length and
script, so the numpy index is the reference throughout."""

import os
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
    assert memory["slots"] == n + 4 * (n // 16)  # an alive flag, a record offset for every 16
    assert memory["postings"] <= 3 * 10 * n  # packed gaps and tfs, the last postings of a term unpacked
    # A record is the bytes its id shares with the one before (none at each 16th), the rest, its length: no list of
    # the document's terms.
    ids = [f"m-{i:08d}" for i in range(n)]
    shared = [0 if i % 16 == 0 else len(os.path.commonprefix([ids[i - 1], ids[i]])) for i in range(n)]
    assert memory["records"] == sum(3 + len(doc_id) - s for doc_id, s in zip(ids, shared, strict=True))
    assert memory["records"] < 5 * n
    assert memory["term_table"] <= 4 * 2 * terms
    assert memory["id_table"] == 0  # added in id order: found by binary search
    for i in range(n - 2_000):
        compiled.remove(f"m-{i:08d}")
    after = compiled._index.memory()
    assert len(compiled) == 2_000 and compiled._index.stats()[1] < 1024
    assert after["records_capacity"] <= memory["records"] / 5
    assert after["removed"] <= 2 * 4 * 1024  # the removals logged since the compaction only
    assert after["slots_capacity"] <= memory["slots"] / 5
    assert after["terms"] <= memory["terms"] / 5
    assert after["postings_capacity"] == after["postings"]
    assert compiled.search(["ticket-19999"], 3)[0][0] == "m-00019999"


def test_a_term_going_from_one_posting_to_many_and_back_keeps_its_frequency_and_bounds() -> None:
    # A term's one posting is inline and its df and bound inputs come from it; from the second posting on they live
    # in the postings' block. Grow terms past one posting, remove back down to one (a compaction moves it inline
    # again), and to none, with tfs and lengths that make the bound inputs matter.
    rng = random.Random(11)
    compiled, numpy_index = _both()
    terms = [f"g{i}" for i in range(40)]
    queries = [[t] for t in terms] + [rng.sample(terms, 3) for _ in range(30)]
    fillers = [f"p{i}" for i in range(1500)]
    for doc_id in fillers:  # enough documents that removing most of them compacts
        for index in (compiled, numpy_index):
            index.add(doc_id, ["filler", f"only-{doc_id}"])
    for round_ in range(4):
        for i, term in enumerate(terms):
            holders = 1 + (i + round_) % 4  # 1 to 4 documents hold each term this round
            for h in range(holders):
                words = [term] * (1 + (h * 3 + i) % 5) + ["pad"] * ((h * 7 + i) % 9)
                for index in (compiled, numpy_index):
                    index.add(f"t{i}-{h}", words)
            for h in range(holders, 4):  # fewer holders than last round: the term shrinks back
                for index in (compiled, numpy_index):
                    index.remove(f"t{i}-{h}")
        _agree(compiled, numpy_index, terms + ["pad"], queries + [["pad", "g1"]])
    for doc_id in fillers[:1400]:
        for index in (compiled, numpy_index):
            index.remove(doc_id)
    assert compiled._index.stats()[1] < 1024  # compacted: terms left with one posting hold it inline again
    _agree(compiled, numpy_index, terms + ["pad", "filler", "only-p1499"], queries + [["filler"], ["only-p1499"]])
    for i in range(len(terms)):
        for h in range(4):
            for index in (compiled, numpy_index):
                index.remove(f"t{i}-{h}")
    assert all(compiled.doc_freq(t) == 0 for t in terms)
    for i, term in enumerate(terms):  # a term no document holds starts over from one inline posting
        for index in (compiled, numpy_index):
            index.add(f"again-{i}", [term, term, "pad"])
    _agree(compiled, numpy_index, terms + ["pad"], queries)


def test_a_first_build_then_adds_and_removals_agree_with_numpy() -> None:
    rng = random.Random(5)
    vocabulary = [f"w{i}" for i in range(200)]
    ids = [f"b{i:05d}" for i in range(3000)]
    docs = [rng.choices(vocabulary, k=rng.randint(1, 12)) + [f"ticket-{i}"] for i in range(3000)]
    compiled, numpy_index = _both()
    order = list(range(3000))
    rng.shuffle(order)
    compiled.add_many([ids[i] for i in order], [docs[i] for i in order])  # laid out in id order whatever the order
    numpy_index.add_many(ids, docs)
    queries = [rng.sample(vocabulary, 3) for _ in range(30)] + [["ticket-7"], ["ticket-7", "w3"]]
    _agree(compiled, numpy_index, vocabulary + ["ticket-7"], queries)
    for step in range(2500):  # singletons and common terms alike gain and lose postings after the build
        doc_id = ids[rng.randrange(3000)] if step % 3 else f"new-{step}"
        words = rng.choices(vocabulary, k=4) + [f"ticket-{step % 40}"]
        for index in (compiled, numpy_index):
            if step % 5 == 4:
                index.remove(doc_id)
            else:
                index.add(doc_id, words)
        if step % 500 == 499:
            _agree(compiled, numpy_index, vocabulary + [f"ticket-{i}" for i in range(40)], queries)


def _varint_size(v: int) -> int:
    return max(1, (v.bit_length() + 6) // 7)


def _front_coded_size(terms: list[str]) -> int:
    """The bytes a first build's sorted terms take: in groups of 16, each term's bytes less those it shares with the
    term before (none for a group's first), behind a byte holding both counts (or a marker and two varints when either
    is 15 or more), and one 4-byte offset a group."""
    keys = sorted(t.encode() for t in terms)
    size = 4 * ((len(keys) + 15) // 16)
    for k, key in enumerate(keys):
        shared = 0
        if k % 16:
            prev = keys[k - 1]
            while shared < min(len(prev), len(key)) and prev[shared] == key[shared]:
                shared += 1
        more = len(key) - shared
        size += more + (1 if shared < 15 and more < 15 else 1 + _varint_size(shared) + _varint_size(more))
    return size


def test_memory_reports_small_singleton_terms_and_the_blocks_headers() -> None:
    compiled = Bm25Index(compiled=True)
    n = 5_000
    compiled.add_many([f"m-{i:06d}" for i in range(n)], [["common", f"c{i % 50}", f"ticket-{i}"] for i in range(n)])
    memory = compiled._index.memory()
    terms = n + 51
    assert memory["terms"] == 8 * terms  # a term is 8 bytes, its one posting inline
    assert memory["term_bytes"] == _front_coded_size(
        ["common"] + [f"c{i}" for i in range(50)] + [f"ticket-{i}" for i in range(n)]
    )
    assert 0 < memory["postings_headers"] <= 56 * 51  # only the 51 terms with more than one posting have a block
    # "common" holds consecutive slots with tf 1 in documents of one length: its 78 full chunks of 64 take no bits,
    # only their 16-byte entries (and an 8-byte pad), and its last 8 postings are unpacked. Each c* term holds every
    # 50th slot: one chunk of 6-bit gaps (48 bytes, entry and pad), then 36 postings unpacked.
    assert memory["postings"] == (78 * 16 + 8 + 8 * 8) + 50 * (16 + 48 + 8 + 36 * 8)
    assert memory["postings_capacity"] >= memory["postings"]


def test_a_first_build_leaves_no_spare_postings_room_and_later_adds_still_grow() -> None:
    compiled, numpy_index = _both()
    n = 4_000
    ids, docs = [f"e{i:05d}" for i in range(n)], [["all", f"k{i % 37}", f"t{i}"] for i in range(n)]
    for index in (compiled, numpy_index):
        index.add_many(ids, docs)
    assert compiled._index.memory()["postings_capacity"] == compiled._index.memory()["postings"]
    for i in range(300):  # the fitted blocks grow again, and removals mark postings in them
        for index in (compiled, numpy_index):
            index.add(f"late{i}", ["all", f"k{i % 5}", "late"])
            if i % 3 == 0:
                index.remove(f"e{i:05d}")
    memory = compiled._index.memory()
    assert memory["postings_capacity"] >= memory["postings"]
    assert memory["postings"] < 8 * (2 * n + 3 * 300) / 2  # what unpacked postings would take, halved
    _agree(compiled, numpy_index, ["all", "k1", "late", "t5", "t3"], [["all"], ["k1", "late"], ["t3"], ["k4", "all"]])


def test_packed_postings_keep_every_score_through_big_counts_removals_and_compaction() -> None:
    # Terms held by hundreds to thousands of documents are packed 64 postings at a time (slot gaps, tfs and lengths at
    # the fewest bits each chunk needs). Chunks must hold irregular gaps, tfs and lengths, a tf and a length past what
    # a posting holds (65,535), documents removed from packed chunks, and repacking by compaction, and every search,
    # short (merged a document at a time) or long (read a window at a time), must still score as the numpy index does.
    rng = random.Random(23)
    compiled, numpy_index = _both()
    dense, sparse = ["all", "most"], [f"s{i}" for i in range(12)]
    vocabulary = dense + sparse + ["rare", "huge"]
    ids = [f"d{i:05d}" for i in range(4000)]
    docs = []
    for i in range(len(ids)):
        words = ["all"] * rng.choice([1, 1, 1, 2, 7])
        if rng.random() < 0.8:
            words.append("most")
        words += rng.sample(sparse, rng.randint(1, 4)) + ["pad"] * rng.choice([0, 1, 5, 40, 300])
        if i % 997 == 5:
            words += ["rare"] * 3
        docs.append(words)
    docs[1234] = ["huge"] * 70_000 + ["all", "s3"]  # a tf and a length past 65,535, in a packed chunk of "all"
    docs[2345] = ["s5"] + ["pad"] * 66_000  # a length past 65,535 alone
    compiled.add_many(ids, docs)
    numpy_index.add_many(ids, docs)
    assert compiled._index.memory()["postings"] < 8 * sum(len(set(d)) for d in docs) / 3  # packed, not 8 bytes each
    queries = [["all"], ["most", "s1"], ["huge"], ["s5", "pad"], ["rare", "all", "most"]]
    queries += [rng.sample(vocabulary, 7) for _ in range(12)] + [vocabulary]
    _agree(compiled, numpy_index, vocabulary + ["pad"], queries)
    removed = rng.sample(ids, 1500)  # removals inside packed chunks: their slots tell, no byte changes
    for doc_id in removed:
        for index in (compiled, numpy_index):
            index.remove(doc_id)
    assert compiled._index.stats()[1] == 1500
    _agree(compiled, numpy_index, vocabulary + ["pad"], queries)
    for i in range(600):  # added after the build: tails fill and pack again
        words = ["all", rng.choice(sparse)] + ["most"] * rng.randint(0, 3) + ["pad"] * rng.randint(0, 70)
        for index in (compiled, numpy_index):
            index.add(f"late{i:04d}", words)
    _agree(compiled, numpy_index, vocabulary + ["pad"], queries)
    for doc_id in [i for i in ids if i not in set(removed)][:1000]:  # enough dead slots to compact: chunks repacked
        for index in (compiled, numpy_index):
            index.remove(doc_id)
    assert compiled._index.stats()[1] < 1024
    _agree(compiled, numpy_index, vocabulary + ["pad"], queries)
    memory = compiled._index.memory()
    assert memory["postings_capacity"] == memory["postings"]  # a compaction leaves no spare room


def test_document_frequencies_catch_up_with_removals_however_many_come_between() -> None:
    """A removal visits none of the document's terms: each term's count is brought up to date when next read, by
    looking up the few removals since (in packed chunks or the tail) or by recounting after many. Asked after one
    removal, after hundreds, after the same id was replaced again and again, and after a term's only document went,
    the counts and every score stay the numpy index's."""
    rng = random.Random(11)
    # "all" in every document (hundreds of chunks), "half"/"tenth" packed and tailed, "p*" a few each, "solo-*" one each
    vocabulary = ["all", "half", "tenth"] + [f"p{i}" for i in range(40)]
    compiled, numpy_index = _both()
    n = 30_000
    ids = [f"d-{i:06d}" for i in range(n)]

    def words(i: int, round_: int) -> list[str]:
        out = ["all"] * (1 + i % 3) + [f"p{rng.randrange(40)}", f"solo-{i}-{round_}"]
        if i % 2 == 0:
            out.append("half")
        if i % 10 == 0:
            out.append("tenth")
        return out

    docs = [words(i, 0) for i in range(n)]
    for index in (compiled, numpy_index):
        index.add_many(ids, docs)
    terms = vocabulary + ["solo-5-0", "solo-6-0", "solo-5-1", "solo-6-1"]
    queries = [["all"], ["half", "tenth"], ["p3", "all", "solo-6-0"], ["solo-5-0"], ["solo-5-1", "half"]]
    queries += [rng.sample(vocabulary, 4) + ["solo-7-0"] for _ in range(10)]
    queries += [rng.sample(vocabulary[3:], 8) for _ in range(10)]  # long enough to be read a window at a time
    _agree(compiled, numpy_index, terms, queries)
    order = rng.sample(range(n), n)
    steps = [1, 1, 3, 60, 700, 5_000, 9_000]  # few (looked up), then many (recounted), never a compaction
    done = 0
    for step in steps:
        for i in order[done : done + step]:
            for index in (compiled, numpy_index):
                index.remove(ids[i])
        done += step
        assert 0 < compiled._index.stats()[1] == done  # every removal is still a dead slot: no compaction ran
        _agree(compiled, numpy_index, terms, queries)
    # replaced, over and over: each add removes the document before (its solo term's only posting) and adds it again
    for round_ in range(1, 4):
        for i in (5, 6, *order[done : done + 50]):
            again = words(i, round_)
            for index in (compiled, numpy_index):
                index.add(ids[i], again)
        _agree(compiled, numpy_index, terms + [f"solo-5-{round_}"], queries)
    assert compiled.doc_freq("solo-5-0") == 0 and compiled.doc_freq("solo-5-3") == 1
    # a term whose only document went is counted 0 and found nowhere; a new document holding it counts again
    compiled.remove(ids[6])
    numpy_index.remove(ids[6])
    assert compiled.doc_freq("solo-6-3") == 0 and compiled.search(["solo-6-3"], 5) == []
    for index in (compiled, numpy_index):
        index.add("late", ["solo-6-3", "all"])
    assert compiled.doc_freq("solo-6-3") == 1
    _agree(compiled, numpy_index, terms + ["solo-6-3"], queries + [["solo-6-3", "all"]])
    # and a compaction leaves the counts exact with an empty log
    for i in order[done : done + 12_000]:
        for index in (compiled, numpy_index):
            index.remove(ids[i])
    assert compiled._index.stats()[1] < 1024
    _agree(compiled, numpy_index, terms, queries)


def test_ids_in_order_are_found_by_their_groups_and_later_ones_by_the_table() -> None:
    # A first build lays ids out in order and keeps no id table: an id is found by binary search over every 16th
    # record, each record holding only what its id does not share with the one before. Ids removed from there, added
    # back (past the ordered slots, in the table), removed again, and ids sharing long prefixes across the groups'
    # edges must be found, listed and ranked as the numpy index does, before and after compactions.
    rng = random.Random(5)
    # Terms sharing their first 8 bytes and more (the binary search's heads), and odd ones.
    vocabulary = [f"w{i}" for i in range(60)] + [f"longshared{i:04d}" for i in range(0, 400, 7)] + ODD_TERMS
    compiled, numpy_index = _both()
    ids = [f"shared-prefix-{i:05d}" for i in range(3000)] + ["", "a", "shared-prefix-", "shared-prefix-0", "zz" * 40]
    docs = {doc_id: rng.choices(vocabulary, k=rng.randint(1, 12)) for doc_id in ids}
    order = list(ids)
    rng.shuffle(order)
    compiled.add_many(order, [docs[doc_id] for doc_id in order])
    numpy_index.add_many(sorted(ids), [docs[doc_id] for doc_id in sorted(ids)])  # the order the compiled one keeps
    memory = compiled._index.memory()
    assert memory["id_table"] == 0
    assert memory["term_table"] == 8 * -(-len(set(vocabulary)) // 16)  # no table: the sorted terms' heads
    queries = [[t] for t in vocabulary[:20]] + [rng.sample(vocabulary, 4) for _ in range(20)]
    _agree(compiled, numpy_index, vocabulary, queries)
    for absent in ["shared-prefix-03000", "shared-prefix-1", "b", "shared-prefix-00000x", "zz" * 41]:
        assert absent not in compiled
    for absent in ["longshared0001", "longshared", "longshared03990", "w", "w600", "", "t" * 128, "zzz"]:
        assert compiled.doc_freq(absent) == 0 and compiled.search([absent], 5) == []
    for round_ in range(3):
        gone = rng.sample(ids, 900)
        for doc_id in gone:
            for index in (compiled, numpy_index):
                index.remove(doc_id)
        assert not any(doc_id in compiled for doc_id in gone)
        back = gone[: 600 - 200 * round_]
        vocabulary += [f"longshared{i:04d}x{round_}" for i in range(0, 400, 9)] + [f"a{round_}", f"w{round_}0"]
        for doc_id in back:  # new terms too: past the sorted ones, in the table
            tokens = rng.choices(vocabulary, k=rng.randint(1, 12))
            for index in (compiled, numpy_index):
                index.add(doc_id, tokens)
        for doc_id in back[:50]:  # replaced where they now lie, past the ordered slots
            for index in (compiled, numpy_index):
                index.add(doc_id, ["w0", doc_id])
        _agree(compiled, numpy_index, vocabulary, queries + [["w0", doc_id] for doc_id in back[:5]])
        assert sorted(compiled) == sorted(numpy_index)
