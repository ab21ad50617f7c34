"""The compiled index's pruning rules against full scoring and the numpy index: bounds taken at a document's length,
ties at the cut-off settled by id without scoring (and the slots-in-id-order shortcut that lets whole terms go
unread), and postings skipped because their documents cannot reach the k-th best. Each case is built so a rule
decides it: equal scores at the cut-off, removed documents, ids that stop ascending part-way, tf far past 1, and
k1/b away from the defaults."""

import random

import pytest

from dream_assets.text.bm25 import Bm25Index, CompiledBm25Index, NumpyBm25Index


def _both(k1: float = 1.2, b: float = 0.75) -> tuple[CompiledBm25Index, NumpyBm25Index]:
    compiled, numpy_index = Bm25Index(k1, b, compiled=True), Bm25Index(k1, b, compiled=False)
    assert isinstance(compiled, CompiledBm25Index) and isinstance(numpy_index, NumpyBm25Index)
    return compiled, numpy_index


def _scored(index: CompiledBm25Index) -> int:
    return index._index.stats()[3]


def _agree(compiled: CompiledBm25Index, numpy_index: NumpyBm25Index, query: list[str], limit: int) -> list:
    got = compiled.search(query, limit)
    assert got == compiled._search_unpruned(query, limit) == numpy_index.search(query, limit)
    return got


def _assert_agree_and_prune(
    compiled: CompiledBm25Index, numpy_index: NumpyBm25Index, queries: list[list[str]], limits: tuple[int, ...]
) -> None:
    """Every query at every limit ranks as full scoring and the numpy index do, and pruning leaves most documents
    unscored: fewer than a quarter of what full scoring scores."""
    scored_pruned, scored_full = 0, 0
    for query in queries:
        for limit in limits:
            _agree(compiled, numpy_index, query, limit)
            scored_full += _scored(compiled)
            compiled.search(query, limit)
            scored_pruned += _scored(compiled)
    assert scored_pruned * 4 < scored_full


def _recall_corpus(rng: random.Random, n: int) -> list[tuple[str, list[str]]]:
    """Entries shaped like an agent's memory: a person, a topic of two words, fillers to a length of 5 to 8, and
    project entries that name a tool twice; many entries score exactly alike."""
    people, tools, topics = ["lukas", "mei", "ana"], ["kube", "jira"], [("release", "sync"), ("budget", "review")]
    out = []
    for i in range(n):
        if i % 4 == 3:
            tool = rng.choice(tools)
            words = ["project", tool, tool, "stack"]
        else:
            words = [rng.choice(people), *rng.choice(topics)]
            if rng.random() < 0.3:
                words.append(rng.choice(tools))
        words += [f"f{rng.randint(0, 40)}" for _ in range(rng.randint(5, 8) - len(words))]
        out.append((f"m{i:05d}", words))
    return out


def test_a_tie_at_the_cut_off_goes_to_the_earlier_id_even_in_a_slot_added_last() -> None:
    compiled, numpy_index = _both()
    docs = [(f"m{i:05d}", ["lukas", "release", "sync", "f1", "f2"]) for i in range(400)]
    docs += [(f"p{i:05d}", ["project", "kube", "kube", "stack"]) for i in range(400)]  # kube: the highest bound
    docs += [(f"q{i:05d}", ["release", "sync", "g1", "g2", "g3"]) for i in range(400)]
    for index in (compiled, numpy_index):
        index.add_many([d for d, _ in docs], [t for _, t in docs])
    query = ["lukas", "kube", "release", "sync"]
    top = _agree(compiled, numpy_index, query, 5)
    assert [d for d, _ in top] == [f"m{i:05d}" for i in range(5)]
    # Ids ascend with the slots, so once five equal best scores are held every later tie is dropped unscored.
    compiled.search(query, 5)
    assert _scored(compiled) < 50
    # A removed best one leaves; one added last with the earliest id wins the tie though only the terms
    # the search looks up (not reads in full) hold it; a replaced one moves to the end of the slots.
    for index in (compiled, numpy_index):
        index.remove("m00001")
        index.add("a00000", ["lukas", "release", "sync", "f3", "f4"])
        index.add("m00002", ["lukas", "release", "sync", "f5", "f6"])
    top = _agree(compiled, numpy_index, query, 5)
    assert [d for d, _ in top] == ["a00000", "m00000", "m00002", "m00003", "m00004"]
    assert len({s for _, s in top}) == 1


def test_a_first_build_lays_random_ids_out_in_id_order_and_ranks_exactly() -> None:
    """A store's ids are random (uuid4 hex) and its rows arrive in write order: the first build still lays the slots
    out in id order (what ``iter`` walks), so the slots-in-id-order shortcut covers every document it built, not only
    ids that happen to ascend; results are the same either way."""
    rng = random.Random(5)
    docs = [(f"{rng.getrandbits(128):032x}", ["lukas", "release", "sync", "f1", "f2"]) for _ in range(400)]
    docs += [(f"{rng.getrandbits(128):032x}", ["project", "kube", "kube", "stack"]) for _ in range(400)]
    compiled, numpy_index = _both()
    for index in (compiled, numpy_index):
        index.add_many([d for d, _ in docs], [t for _, t in docs])
    query = ["lukas", "kube", "release", "sync"]
    top = _agree(compiled, numpy_index, query, 5)
    assert [d for d, _ in top] == sorted(d for d, t in docs if t[0] == "lukas")[:5]
    assert list(compiled) == sorted(d for d, _ in docs)


def test_a_first_build_that_fails_part_way_leaves_the_index_empty() -> None:
    compiled, _ = _both()
    ids = [f"m{i:03d}" for i in range(10)]
    tokens: list[list] = [["lukas", "sync"] for _ in ids]
    tokens[7] = ["lukas", 7]  # not a token
    with pytest.raises(TypeError, match="tokens must be str"):
        compiled.add_many(ids, tokens)
    assert len(compiled) == 0 and compiled.search(["lukas"], 5) == [] and compiled.doc_freq("lukas") == 0
    compiled.add_many(ids[:3], tokens[:3])  # and a build can start again
    assert [d for d, _ in compiled.search(["lukas"], 5)] == ids[:3]


@pytest.mark.parametrize("seed", range(4))
def test_recall_shaped_queries_with_ties_removals_and_late_ids_rank_like_full_scoring(seed: int) -> None:
    rng = random.Random(seed)
    compiled, numpy_index = _both()
    docs = _recall_corpus(rng, 4000)
    for index in (compiled, numpy_index):
        index.add_many([d for d, _ in docs], [t for _, t in docs])
    for i in rng.sample(range(4000), 1200):  # dead slots, then a compaction, then more dead slots
        for index in (compiled, numpy_index):
            index.remove(f"m{i:05d}")
    late = _recall_corpus(rng, 300)  # ids that sort before every other: the slots stop ascending
    for doc_id, tokens in late:
        for index in (compiled, numpy_index):
            index.add("a" + doc_id, tokens)
    queries = [
        [p, t, *topic]
        for p in ("lukas", "mei")
        for t in ("kube", "jira")
        for topic in (("release", "sync"), ("budget", "review"))
    ]
    _assert_agree_and_prune(compiled, numpy_index, queries, (1, 3, 10, 40))


def test_large_tf_keeps_its_bound_inflated_and_ranks_exactly() -> None:
    compiled, numpy_index = _both()
    rng = random.Random(5)
    docs = []
    for i in range(3000):
        tf = rng.choice((1, 1, 1, 2, 3, 900, 5000, 40_000, 70_000)) if i % 50 == 0 else 1
        docs.append((f"d{i:05d}", ["x"] * tf + ["y", f"f{i % 7}"] * rng.randint(1, 3)))
    for index in (compiled, numpy_index):
        index.add_many([d for d, _ in docs], [t for _, t in docs])
    for query in (["x"], ["x", "y"], ["x", "f1"], ["y", "f2", "x"]):
        for limit in (1, 10, 100):
            _agree(compiled, numpy_index, query, limit)


@pytest.mark.parametrize(("k1", "b"), [(0.0, 0.75), (1.2, 0.0), (1.2, 1.0), (3.0, 0.3), (0.01, 1.0), (40.0, 0.9)])
def test_odd_k1_and_b_rank_exactly_like_full_scoring(k1: float, b: float) -> None:
    rng = random.Random(int(k1 * 100 + b * 10))
    compiled, numpy_index = _both(k1, b)
    docs = _recall_corpus(rng, 2500)
    docs += [(f"t{i:04d}", ["kube"] * rng.randint(1, 30) + ["lukas"] * rng.randint(0, 3)) for i in range(200)]
    for index in (compiled, numpy_index):
        index.add_many([d for d, _ in docs], [t for _, t in docs])
        for i in range(0, 2500, 7):
            index.remove(f"m{i:05d}")
    for query in (["lukas", "kube", "release", "sync"], ["mei", "jira", "budget", "review"], ["kube", "lukas"]):
        for limit in (1, 5, 20):
            _agree(compiled, numpy_index, query, limit)


@pytest.mark.parametrize("seed", range(3))
def test_long_queries_read_a_window_at_a_time_and_rank_like_full_scoring(seed: int) -> None:
    """A save's lookup has many terms: their postings are read a window of slots at a time (windows from 16 slots
    up to 16,384, so this corpus spans several full ones), and only documents whose sum can reach the k-th best are
    read exactly. Ties, removed documents, late ids that sort first and a term far past tf 1 still rank as full
    scoring does."""
    rng = random.Random(seed)
    compiled, numpy_index = _both()
    docs = _recall_corpus(rng, 40_000)
    for i in range(0, 40_000, 97):
        docs[i] = (docs[i][0], [*docs[i][1], "burst", *(["burst"] * rng.choice((1, 5, 300)))])
    for index in (compiled, numpy_index):
        index.add_many([d for d, _ in docs], [t for _, t in docs])
    for i in rng.sample(range(40_000), 9_000):
        for index in (compiled, numpy_index):
            index.remove(f"m{i:05d}")
    for doc_id, tokens in _recall_corpus(rng, 500):
        for index in (compiled, numpy_index):
            index.add("a" + doc_id, tokens)
    words = ["lukas", "mei", "ana", "kube", "jira", "release", "sync", "budget", "review", "project", "stack", "burst"]
    words += [f"f{i}" for i in range(41)]
    queries = [rng.sample(words, rng.randint(6, 14)) for _ in range(30)]
    _assert_agree_and_prune(compiled, numpy_index, queries, (1, 5, 20, 60))
