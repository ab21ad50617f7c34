"""BM25 recall: ranking, incremental maintenance and the TF-IDF statistics save-time dedup reads.

Every test runs against both implementations: the compiled index ``Bm25Index()`` gives when it is built, and the
numpy index it falls back to without a compiler.
"""

import math
import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dream_assets.text import bm25
from dream_assets.text.bm25 import Bm25Index, CompiledBm25Index, NumpyBm25Index
from dream_assets.text.tokens import document_tokens, tokenize


@pytest.fixture(autouse=True, scope="module", params=["compiled", "numpy"])
def implementation(request: pytest.FixtureRequest):
    """``Bm25Index()`` as an install with the compiled module gives it, then as one built without a compiler."""
    with pytest.MonkeyPatch.context() as patch:
        if request.param == "numpy":
            patch.setattr(bm25, "_bm25kernel", None)
        expected = CompiledBm25Index if request.param == "compiled" else NumpyBm25Index
        assert type(Bm25Index()) is expected  # the compiled module must be built (make setup)
        yield request.param


class _PruningSpy:
    """Records, per search, whether MaxScore pruning left documents unscored, for either implementation."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.pruned: list[bool] = []
        real_settled = bm25._settled

        def spy(*args: object) -> object:
            result = real_settled(*args)  # type: ignore[arg-type]
            self.pruned.append(result is not None)
            return result

        monkeypatch.setattr(bm25, "_settled", spy)

    def search(self, index: Bm25Index, query: list[str], limit: int, exclude: set[str]) -> list[tuple[str, float]]:
        got = index.search(query, limit=limit, exclude=exclude)
        if isinstance(index, CompiledBm25Index):
            scored = index._index.stats()[3]
            index._search_unpruned(query, limit + len(exclude))
            self.pruned.append(scored < index._index.stats()[3])
        return got


def _index(docs: dict[str, str]) -> Bm25Index:
    index = Bm25Index()
    for doc_id, text in docs.items():
        index.add(doc_id, tokenize(text))
    return index


def test_doc_matching_a_rare_term_outranks_one_matching_only_a_common_term() -> None:
    docs = {f"common{i}": f"python note {i}" for i in range(20)}
    docs["rare"] = "kubernetes cluster upgrade"
    index = _index(docs)
    results = index.search(["python", "kubernetes"], limit=3)
    assert results[0][0] == "rare"
    assert results[0][1] > results[1][1]


def test_shorter_document_with_the_same_match_ranks_higher() -> None:
    index = _index(
        {
            "short": "invoice deadline",
            "long": "invoice reminder about the quarterly budget meeting notes and slides",
            "other": "unrelated words here",
        }
    )
    assert [doc_id for doc_id, _ in index.search(["invoice"])] == ["short", "long"]


def test_score_matches_the_okapi_formula() -> None:
    index = _index({"a": "alpha beta beta", "b": "beta gamma", "c": "delta"})
    n, avgdl = 3, (3 + 2 + 1) / 3
    idf = math.log(1 + (n - 2 + 0.5) / (2 + 0.5))
    tf, dl = 2, 3
    expected = idf * tf * 2.2 / (tf + 1.2 * (1 - 0.75 + 0.75 * dl / avgdl))
    assert dict(index.search(["beta"]))["a"] == pytest.approx(expected)


def test_only_documents_sharing_a_query_term_are_returned() -> None:
    index = _index({"a": "alpha", "b": "beta"})
    assert [d for d, _ in index.search(["alpha", "zeta"])] == ["a"]
    assert index.search(["zeta"]) == []
    assert index.search([]) == []
    assert Bm25Index().search(["alpha"]) == []


def test_remove_forgets_a_document_and_its_statistics() -> None:
    index = _index({"a": "alpha beta", "b": "alpha"})
    index.remove("a")
    assert "a" not in index and len(index) == 1
    assert index.doc_freq("beta") == 0 and index.doc_freq("alpha") == 1
    assert index.search(["beta"]) == []
    index.remove("never-added")  # no-op
    assert len(index) == 1


def test_add_with_an_existing_id_replaces_the_document() -> None:
    index = _index({"a": "old words", "b": "old"})
    index.add("a", tokenize("new words"))
    assert len(index) == 2
    assert [d for d, _ in index.search(["old"])] == ["b"]
    assert [d for d, _ in index.search(["new"])] == ["a"]
    assert index.doc_freq("old") == 1


def test_exclude_skips_ids_without_shrinking_the_result() -> None:
    index = _index({f"d{i}": "shared term" for i in range(6)})
    results = index.search(["shared"], limit=3, exclude={"d0", "d1"})
    assert [d for d, _ in results] == ["d2", "d3", "d4"]


def test_exclude_accepts_any_container() -> None:
    class Odd:
        def __contains__(self, item: object) -> bool:
            return isinstance(item, str) and int(item[1:]) % 2 == 1

    index = _index({f"d{i}": "shared term" for i in range(10)})
    assert [d for d, _ in index.search(["shared"], limit=4, exclude=Odd())] == ["d0", "d2", "d4", "d6"]


def test_ties_break_by_doc_id_ascending_regardless_of_insertion_order() -> None:
    ids = ["m", "b", "z", "a", "k"]
    random.Random(3).shuffle(ids)
    index = _index({doc_id: "same text" for doc_id in ids})
    assert [d for d, _ in index.search(["same"], limit=3)] == ["a", "b", "k"]


def test_repeated_query_terms_count_once() -> None:
    index = _index({"a": "alpha", "b": "alpha beta"})
    assert index.search(["alpha", "alpha"]) == index.search(["alpha"])


def test_clear_empties_the_index() -> None:
    index = _index({"a": "alpha"})
    index.clear()
    assert len(index) == 0 and index.search(["alpha"]) == []


def test_index_stays_correct_across_compaction() -> None:
    index = Bm25Index()
    rng = random.Random(11)
    words = [f"w{i}" for i in range(50)]
    live: dict[str, list[str]] = {}
    for _ in range(5000):
        doc_id = f"d{rng.randrange(800)}"
        if rng.random() < 0.4:
            index.remove(doc_id)
            live.pop(doc_id, None)
        else:
            tokens = rng.choices(words, k=rng.randint(1, 8))
            index.add(doc_id, tokens)
            live[doc_id] = tokens
    fresh = Bm25Index()
    for doc_id, tokens in live.items():
        fresh.add(doc_id, tokens)
    assert len(index) == len(live)
    for query in (["w1"], ["w2", "w30"], words[:6]):
        got, want = index.search(query, limit=20), fresh.search(query, limit=20)
        assert [d for d, _ in got] == [d for d, _ in want]
        assert [s for _, s in got] == pytest.approx([s for _, s in want])


@settings(max_examples=60, deadline=None)
@given(
    st.lists(
        st.tuples(st.booleans(), st.integers(0, 9), st.lists(st.sampled_from("abcdef"), max_size=5)),
        max_size=40,
    ),
    st.lists(st.sampled_from("abcdefg"), min_size=1, max_size=3),
)
def test_incremental_updates_match_a_fresh_build(ops: list[tuple[bool, int, list[str]]], query: list[str]) -> None:
    index = Bm25Index()
    live: dict[str, list[str]] = {}
    for is_add, n, tokens in ops:
        doc_id = f"d{n}"
        if is_add:
            index.add(doc_id, tokens)
            live[doc_id] = tokens
        else:
            index.remove(doc_id)
            live.pop(doc_id, None)
    fresh = Bm25Index()
    for doc_id, tokens in live.items():
        fresh.add(doc_id, tokens)
    got, want = index.search(query, limit=10), fresh.search(query, limit=10)
    assert [d for d, _ in got] == [d for d, _ in want]
    assert [s for _, s in got] == pytest.approx([s for _, s in want])
    assert set(index) == set(live)


def test_tfidf_idf_matches_scikit_learn_smooth_idf() -> None:
    from sklearn.feature_extraction.text import TfidfVectorizer

    texts = ["alpha beta", "beta gamma gamma", "beta delta", "epsilon"]
    index = _index({str(i): t for i, t in enumerate(texts)})
    vectorizer = TfidfVectorizer(tokenizer=tokenize, lowercase=False, token_pattern=None).fit(texts)
    for term, col in vectorizer.vocabulary_.items():
        assert index.idf_tfidf(term) == pytest.approx(vectorizer.idf_[col])
    assert index.idf_tfidf("unseen") == pytest.approx(math.log(5 / 1) + 1)


def test_tfidf_vector_is_unit_length_and_cosine_is_bounded() -> None:
    index = _index({"a": "alpha beta", "b": "beta gamma", "c": "delta"})
    vector = index.tfidf_vector(["alpha", "beta", "beta"])
    assert math.sqrt(sum(w * w for w in vector.values())) == pytest.approx(1.0)
    assert Bm25Index.cosine(vector, vector) == pytest.approx(1.0)
    assert Bm25Index.cosine(vector, index.tfidf_vector(["delta"])) == 0.0
    assert index.tfidf_vector([]) == {}
    assert Bm25Index.cosine({}, vector) == 0.0


def test_memory_entries_are_found_by_category_and_tag_words() -> None:
    index = Bm25Index()
    index.add("m1", document_tokens("Prefers short answers", "preferences/communication-style", ["tone"]))
    index.add("m2", document_tokens("Deploys happen on Fridays", "ops/release", []))
    assert [d for d, _ in index.search(tokenize("communication tone"))] == ["m1"]
    assert [d for d, _ in index.search(tokenize("release"))] == ["m2"]


def _reference_bm25(docs: dict[str, list[str]], query: list[str]) -> dict[str, float]:
    n = len(docs)
    avgdl = sum(len(t) for t in docs.values()) / n
    scores: dict[str, float] = {}
    for term in set(query):
        df = sum(term in t for t in docs.values())
        if not df:
            continue
        idf = math.log(1 + (n - df + 0.5) / (df + 0.5))
        for doc_id, tokens in docs.items():
            tf = tokens.count(term)
            if tf:
                norm = 1.2 * (1 - 0.75 + 0.75 * len(tokens) / avgdl)
                scores[doc_id] = scores.get(doc_id, 0.0) + idf * tf * 2.2 / (tf + norm)
    return scores


def test_queries_with_very_common_terms_rank_exactly_like_full_scoring(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    spy = _PruningSpy(monkeypatch)
    rng = random.Random(2)
    rare = [f"r{i}" for i in range(300)]
    docs = {
        f"d{i:04d}": ["user", "note"] * rng.randint(1, 3) + rng.choices(rare, k=rng.randint(1, 6)) for i in range(3000)
    }
    index = Bm25Index()
    for doc_id, tokens in docs.items():
        index.add(doc_id, tokens)
    for query, exclude in [
        (["user", "r1", "r2"], set()),
        (["note", "user", "r7"], {"d0001", "d0002"}),
        (["user", "r5", "r6", "r7", "r8"], set()),
    ]:
        reference = _reference_bm25(docs, query)
        expected = sorted(((-s, d) for d, s in reference.items() if d not in exclude))[:5]
        got = spy.search(index, query, 5, exclude)
        assert [d for d, _ in got] == [d for _, d in expected]
        assert [s for _, s in got] == pytest.approx([-s for s, _ in expected], rel=1e-5)
    assert any(spy.pruned)


class _NoLength:
    """An exclude container without a length: the index then scores every posting (no pruning)."""

    def __contains__(self, item: object) -> bool:
        return False


def test_pruned_top_k_equals_full_scoring_on_a_random_corpus(monkeypatch: pytest.MonkeyPatch) -> None:
    spy = _PruningSpy(monkeypatch)
    rng = random.Random(15)
    common = ["user", "note", "project", "meeting"]
    vocabulary = [f"w{i}" for i in range(400)]
    weights = [1.0 / (i + 1) for i in range(len(vocabulary))]  # Zipf-like: a few frequent words, a long tail
    index = Bm25Index()
    for i in range(6000):
        words = rng.sample(common, rng.randint(1, 3)) + rng.choices(vocabulary, weights, k=rng.randint(1, 8))
        index.add(f"d{i:05d}", words * rng.choice((1, 1, 2)))
    for i in rng.sample(range(6000), 1500):  # dead slots until compaction, and re-added documents
        index.remove(f"d{i:05d}")
        if i % 3 == 0:
            index.add(f"d{i:05d}", rng.choices(vocabulary, k=4) + ["user"])
    for _ in range(150):
        query = rng.sample(common, rng.randint(1, 3)) + rng.choices(vocabulary, weights, k=rng.randint(1, 5))
        limit = rng.choice((1, 5, 10, 20))
        exclude = set(rng.sample([f"d{i:05d}" for i in range(6000)], rng.choice((0, 3))))
        full = index.search(query, limit=limit + len(exclude), exclude=_NoLength())
        expected = [(d, s) for d, s in full if d not in exclude][:limit]
        assert index._search_unpruned(query, limit + len(exclude)) == full
        assert spy.search(index, query, limit, exclude) == expected
    assert sum(spy.pruned) >= 50


@given(st.integers(1, 200_000), st.integers(1, 60), st.sampled_from([3, 50, 10_000]), st.integers(0, 2**32 - 1))
@settings(max_examples=60, deadline=None)
def test_kth_largest_matches_sorting(size: int, k: int, distinct: int, seed: int) -> None:
    import numpy as np

    from dream_assets.text.bm25 import _kth_largest

    k = min(k, size)
    values = np.random.default_rng(seed).integers(0, distinct, size).astype(np.float64) / 7.0  # ties, and few
    assert _kth_largest(values, k) == np.sort(values)[size - k]


def test_add_many_builds_the_index_adding_one_by_one_builds() -> None:
    rng = random.Random(4)
    words = ["kestrel", "alert", "deploy", "grafana", "lisbon", "priya", "budget", "week", "ref", "note"]
    docs = {
        f"d{i:04d}": " ".join(rng.choice(words) for _ in range(rng.randint(1, 12))) + f" {rng.randint(1, 40)}"
        for i in range(600)
    }
    one_by_one = _index(docs)
    at_once = Bm25Index()
    at_once.add_many(list(docs), [tokenize(text) for text in docs.values()])
    assert len(at_once) == len(one_by_one) and at_once.average_length == one_by_one.average_length
    for term in [*words, "7", "39", "absent"]:
        assert at_once.doc_freq(term) == one_by_one.doc_freq(term)
    queries = [[rng.choice(words) for _ in range(rng.randint(1, 4))] for _ in range(100)] + [["7", "ref"]]
    for query in queries:
        assert at_once.search(query, limit=7) == one_by_one.search(query, limit=7)
    # Both go on the same way after the build: replacing, removing and adding documents.
    for index in (at_once, one_by_one):
        index.add("d0001", tokenize("kestrel lisbon"))
        index.remove("d0002")
        index.add("new", tokenize("grafana budget week"))
    for query in queries:
        assert at_once.search(query, limit=7) == one_by_one.search(query, limit=7)
    with pytest.raises(ValueError, match="empty index"):
        at_once.add_many(["other"], [["kestrel"]])
