"""Similarity and near-duplicate clustering (spec: save-time dedup and consolidation clustering)."""

import itertools
import random

import numpy as np
import pytest

from dream_assets.text import similarity
from dream_assets.text.bm25 import Bm25Index
from dream_assets.text.similarity import (
    cosine_pairs,
    find_duplicate_clusters,
    jaccard,
    jaccard_pairs,
    tfidf_cosine,
    tfidf_matrix,
)
from dream_assets.text.tokens import content_tokens, document_tokens


@pytest.mark.parametrize(
    ("a", "b", "expected"),
    [
        ({"x", "y"}, {"x", "y"}, 1.0),
        ({"x", "y"}, {"z"}, 0.0),
        ({"x", "y", "z"}, {"x", "y", "w"}, 0.5),
        (set(), set(), 0.0),
        ({"x"}, set(), 0.0),
    ],
)
def test_jaccard(a: set[str], b: set[str], expected: float) -> None:
    assert jaccard(a, b) == pytest.approx(expected)


def test_tfidf_cosine_of_identical_texts_is_one_and_of_disjoint_texts_zero() -> None:
    text = "The user prefers dark mode in the editor"
    assert tfidf_cosine(text, text) == pytest.approx(1.0)
    assert tfidf_cosine(text, "Deploys run every Friday afternoon") == 0.0


def test_tfidf_cosine_orders_paraphrase_above_related_above_unrelated() -> None:
    base = "The user prefers dark mode in the code editor"
    paraphrase = "User prefers the code editor in dark mode."
    related = "The user prefers light mode in the terminal"
    unrelated = "Invoices are due on the first Monday of the month"
    scores = [tfidf_cosine(base, other) for other in (paraphrase, related, unrelated)]
    assert scores[0] > scores[1] > scores[2]
    assert scores[0] >= 0.88


def test_tfidf_cosine_ignores_stopwords() -> None:
    assert tfidf_cosine("the cat of the house", "cat house") == pytest.approx(1.0)
    # Texts made only of stopwords still compare rather than being treated as empty.
    assert tfidf_cosine("it is what it is", "it is what it is") == pytest.approx(1.0)


def test_tfidf_cosine_with_an_index_weighs_terms_by_corpus_rarity() -> None:
    index = Bm25Index()
    for i in range(50):
        index.add(f"c{i}", document_tokens(f"user note number {i}", "general", []))
    index.add("r", document_tokens("kubernetes", "general", []))
    shares_common = tfidf_cosine("user kubernetes", "user terraform", index)
    shares_rare = tfidf_cosine("user kubernetes", "kubernetes terraform", index)
    assert shares_rare > shares_common
    assert tfidf_cosine("user kubernetes", "user kubernetes", index) == pytest.approx(1.0)


FACTS = [
    ("a1", "The user's dog is named Biscuit and is a golden retriever"),
    ("b1", "Production deploys are frozen during the last week of December"),
    ("a2", "The user's dog, a golden retriever, is named Biscuit"),
    ("c1", "Invoices for Xebia must be sent before the 5th of each month"),
    ("b2", "Production deploys are frozen in the last week of December"),
    ("d1", "The user prefers answers in British English"),
]


def test_near_duplicates_cluster_and_distinct_facts_do_not() -> None:
    result = find_duplicate_clusters(FACTS, threshold=0.88, max_cluster_size=3)
    assert result.method == "tfidf" and result.warning is None
    assert result.clusters == [["a1", "a2"], ["b1", "b2"]]
    assert result.pairs == 2


def test_cluster_cap_refuses_unions_beyond_the_maximum() -> None:
    group = [
        ("g1", "Alice moved to Austin in March 2026 for her new job at Eventbrite"),
        ("g2", "Alice moved to Austin in March 2026 for her new job at Eventbrite."),
        ("g3", "In March 2026 Alice moved to Austin for her new job at Eventbrite"),
        ("g4", "Alice moved to Austin, in March 2026, for a new job at Eventbrite"),
        ("g5", "Alice moved to Austin in March 2026 for her new job at Eventbrite!"),
    ]
    uncapped = find_duplicate_clusters(group, threshold=0.88, max_cluster_size=10)
    assert uncapped.clusters == [["g1", "g2", "g3", "g4", "g5"]]
    capped = find_duplicate_clusters(group, threshold=0.88, max_cluster_size=3)
    assert sorted(len(c) for c in capped.clusters) == [2, 3]
    assert sorted(itertools.chain.from_iterable(capped.clusters)) == ["g1", "g2", "g3", "g4", "g5"]
    assert find_duplicate_clusters(group, threshold=0.88, max_cluster_size=1).clusters == []


def test_strongest_pairs_are_joined_first() -> None:
    docs = [
        ("x", "alpha beta gamma delta epsilon zeta eta theta"),
        ("y", "alpha beta gamma delta epsilon zeta eta iota"),
        ("z", "alpha beta gamma delta epsilon zeta eta theta"),  # identical to x
    ]
    result = find_duplicate_clusters(docs, threshold=0.5, max_cluster_size=2)
    assert result.clusters == [["x", "z"]]


def test_clusters_are_ordered_by_input_position_and_repeatable() -> None:
    shuffled = FACTS[:]
    random.Random(5).shuffle(shuffled)
    first = find_duplicate_clusters(shuffled, 0.88, 3)
    assert first == find_duplicate_clusters(shuffled, 0.88, 3)
    position = {doc_id: i for i, (doc_id, _) in enumerate(shuffled)}
    for cluster in first.clusters:
        assert [position[m] for m in cluster] == sorted(position[m] for m in cluster)
    assert [position[c[0]] for c in first.clusters] == sorted(position[c[0]] for c in first.clusters)
    assert sorted(map(sorted, first.clusters)) == [["a1", "a2"], ["b1", "b2"]]


def test_jaccard_can_be_forced() -> None:
    docs = FACTS + [("b3", "Production deploys are frozen during the last week of December.")]
    result = find_duplicate_clusters(docs, 0.88, 3, method="jaccard")
    assert result.method == "jaccard" and result.warning is None
    assert result.clusters == [["a1", "a2"], ["b1", "b3"]]  # b2 differs by a content word


def test_auto_falls_back_to_jaccard_when_tfidf_has_no_vocabulary() -> None:
    docs = [("s1", "it is what it is"), ("s2", "it is what it is"), ("s3", "")]
    result = find_duplicate_clusters(docs, 0.88, 3)
    assert result.method == "jaccard"
    assert result.warning is not None and "Jaccard" in result.warning
    assert result.clusters == []


def test_auto_falls_back_to_jaccard_when_tfidf_runs_out_of_memory(monkeypatch: pytest.MonkeyPatch) -> None:
    def boom(texts: object, threshold: float) -> None:
        raise MemoryError("cannot allocate")

    monkeypatch.setattr(similarity, "tfidf_pairs", boom)
    docs = FACTS + [("b3", "Production deploys are frozen during the last week of December.")]
    result = find_duplicate_clusters(docs, 0.88, 3)
    assert result.method == "jaccard" and "MemoryError" in (result.warning or "")
    assert result.clusters == [["a1", "a2"], ["b1", "b3"]]  # b2 differs by a content word


def test_forced_tfidf_reports_an_empty_vocabulary_instead_of_falling_back() -> None:
    with pytest.raises(ValueError):
        find_duplicate_clusters([("a", "the"), ("b", "of")], 0.88, 3, method="tfidf")


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"threshold": 0.0, "max_cluster_size": 3}, "threshold"),
        ({"threshold": 1.5, "max_cluster_size": 3}, "threshold"),
        ({"threshold": 0.88, "max_cluster_size": 3, "method": "embeddings"}, "method"),
    ],
)
def test_bad_arguments_are_rejected_with_the_fix(kwargs: dict, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        find_duplicate_clusters(FACTS, **kwargs)


def test_duplicate_ids_are_rejected() -> None:
    with pytest.raises(ValueError, match="'a1' appears more than once"):
        find_duplicate_clusters(FACTS + [("a1", "again")], 0.88, 3)


def test_fewer_than_two_documents_make_no_clusters() -> None:
    assert find_duplicate_clusters([], 0.88, 3).clusters == []
    assert find_duplicate_clusters([("only", "one entry")], 0.88, 3).clusters == []


def _random_corpus(rng: random.Random, n: int, vocab: int) -> list[str]:
    words = [f"w{i}" for i in range(vocab)]
    weights = [1.0 / (i + 1) for i in range(vocab)]  # Zipf-like: a few words are everywhere
    texts: list[str] = []
    for _ in range(n):
        if texts and rng.random() < 0.3:
            base = rng.choice(texts).split()
            base[rng.randrange(len(base))] = rng.choice(words)
            texts.append(" ".join(base))
        else:
            texts.append(" ".join(rng.choices(words, weights=weights, k=rng.randint(1, 12))))
    return texts


@pytest.mark.parametrize("seed", range(4))
@pytest.mark.parametrize("threshold", [0.3, 0.6, 0.88, 0.97, 1.0])
def test_pruned_cosine_join_finds_exactly_the_brute_force_pairs(seed: int, threshold: float) -> None:
    texts = _random_corpus(random.Random(seed), n=300, vocab=60)
    x = tfidf_matrix(texts)
    dense = (x @ x.T).toarray()
    upper = np.triu_indices(len(texts), k=1)
    expected = {(int(i), int(j)) for i, j in zip(*upper, strict=True) if dense[i, j] >= threshold - 1e-12}
    rows, cols, sims = cosine_pairs(x, threshold)
    assert set(zip(rows.tolist(), cols.tolist(), strict=True)) == expected
    assert np.allclose(sims, dense[rows, cols])


@pytest.mark.parametrize("seed", range(4))
@pytest.mark.parametrize("threshold", [0.2, 0.5, 0.88, 1.0])
def test_prefix_filtered_jaccard_finds_exactly_the_brute_force_pairs(seed: int, threshold: float) -> None:
    sets = [content_tokens(t) for t in _random_corpus(random.Random(seed), n=200, vocab=40)]
    expected = {
        (i, j) for i, j in itertools.combinations(range(len(sets)), 2) if jaccard(sets[i], sets[j]) >= threshold - 1e-12
    }
    rows, cols, sims = jaccard_pairs(sets, threshold)
    assert set(zip(rows.tolist(), cols.tolist(), strict=True)) == expected
    assert sims.tolist() == pytest.approx([jaccard(sets[i], sets[j]) for i, j in zip(rows, cols, strict=True)])


def test_cosine_join_leaves_the_input_matrix_untouched() -> None:
    x = tfidf_matrix(_random_corpus(random.Random(9), n=50, vocab=20))
    before = (x.data.copy(), x.indices.copy(), x.indptr.copy())
    cosine_pairs(x, 0.5)
    assert all(np.array_equal(a, b) for a, b in zip(before, (x.data, x.indices, x.indptr), strict=True))


# ----------------------------------------------------------------------------------------------- overlap measure
def test_overlap_sees_through_framing_inflection_and_word_order():
    from dream_assets.text.similarity import overlap_similarity, tfidf_cosine

    plain = "Melanie loves pottery classes."
    for framed in (
        "Melanie said again on 12 May 2023 that she loved pottery classes.",
        "On 25 May 2023, Melanie mentioned again that pottery classes are what she loves.",
        "Melanie loves pottery classes. This came up again in a chat with Caroline on 2 July 2023.",
    ):
        assert overlap_similarity(plain, framed) >= 0.75 > tfidf_cosine(plain, framed)
    assert overlap_similarity(plain, "Melanie loves painting classes.") < 0.75
    assert overlap_similarity("Jon is a banker.", "Jon met a banker in Paris at a long dinner with Gina.") < 0.75


@pytest.mark.slow  # a property search against a brute-force join
def test_overlap_pairs_match_a_brute_force_join():
    import random
    from collections import Counter

    from dream_assets.text.similarity import overlap_pairs, overlap_score, smooth_idf

    rng = random.Random(7)
    words = [f"w{i}" for i in range(120)]
    sets = [frozenset(rng.sample(words, rng.randint(1, 7))) for _ in range(300)]
    sets += [s | {"extra"} for s in sets[:40]]
    df = Counter(t for s in sets for t in s)
    for threshold in (0.5, 0.75, 0.9):
        rows, cols, sims = overlap_pairs(sets, threshold)
        expected = set()
        for i in range(len(sets)):
            for j in range(i + 1, len(sets)):
                w = {t: smooth_idf(len(sets), df[t]) for t in sets[i] | sets[j]}
                score = overlap_score(
                    sum(w[t] for t in sets[i] & sets[j]),
                    sum(w[t] for t in sets[i]),
                    sum(w[t] for t in sets[j]),
                )
                if score >= threshold - 1e-12:
                    expected.add((i, j))
        assert set(zip(rows.tolist(), cols.tolist(), strict=True)) == expected and (sims <= 1.0).all()


def test_overlap_clusters_and_keeps_distinct_topics_apart():
    docs = [
        ("a", "Melanie loves pottery classes."),
        ("b", "On 25 May 2023, Melanie mentioned again that she loves pottery classes."),
        ("c", "Caroline is researching adoption agencies."),
        ("d", "Jon opened a dance studio downtown."),
    ]
    result = find_duplicate_clusters(docs, 0.75, 3, method="overlap")
    assert result.method == "overlap" and result.clusters == [["a", "b"]]


@pytest.mark.parametrize(
    ("a", "b", "equal"),
    [
        ("The user's badge is 4471.", "the user's   badge is 4471", True),
        ("Kestrel ships on Fridays!", "Kestrel ships on Fridays.", True),
        ("The dose is 3.5 mg.", "The dose is 35 mg.", False),
        ("It costs $3.", "It costs €3.", False),
        ("Meet at 12:30.", "Meet at 1230.", False),
    ],
)
def test_exact_key_normalises_case_space_and_punctuation_only(a, b, equal):
    from dream_assets.text.similarity import exact_key

    assert (exact_key(a) == exact_key(b)) is equal


def test_frame_dates_are_only_dates_that_report_an_observation():
    from dream_assets.text.framing import without_frame_dates

    assert "12 May" not in without_frame_dates("Melanie said again on 12 May 2023 that she loves pottery.")
    assert "9 July" not in without_frame_dates("Gina loves salsa (mentioned again on 9 July 2023).")
    assert "3 June" not in without_frame_dates("As of 3 June 2023, Jon works at a bank.")
    for event in (
        "Caroline said she went hiking on 7 May 2023.",
        "On 7 May 2023 Caroline went hiking.",
        "We met again on 3 May 2023 at the park.",
        "On 28 February 2023, Maria takes notes about local politics in her notebook.",
        "On 3 May 2023, Jon kept notes on the budget.",
    ):
        assert without_frame_dates(event) == event


# Texts that take each path of the column-wise stems: plain ASCII, apostrophes, non-ASCII, dates that frame and dates
# that do not, white space RE2 and Python disagree on, stopword-only and framing-only texts, empty text.
_STEM_CASES = [
    "",
    "the of and",
    "said again",
    "Said again, and again.",
    "Melanie said again on 12 May that she loves pottery.",
    "As of 3 June 2023, Jon works at a bank.",
    "Gina loves dancing (mentioned again on 9 July).",
    "The trip is on 2026-02-03 and the next on 3/4/2027.",
    "Jon noted\x0bMay\x1f12 that he quit.",
    "Jon noted\x1cmay 12th, 2024 that he quit.",
    "Mayday 5 and Marseille 12 are not dates.",
    # texts are read together, each ended by a NUL: one holding a NUL of its own is still one text
    "Kestrel\x00deploys on Fridays",
    "Heron\x00\x00load tests 12 May",
    "Café meetings in Zürich every Tuesday.",
    "The user's dog is called Rex.",
    "Loves LOVED loving lovely",
    "1st of March, noted again.",
    "__init__ foo_bar x_1 42",
    "Ａｂｃ full width 12",
    "ſeptember 12 said again",
    "Dog 42",
    "dog 42!",
    "Sept. 3 was mentioned.",
    "Monday, 3 June 2024 the user said so.",
]


def _random_texts(rng: random.Random, n: int) -> list[str]:
    words = ["Kestrel", "alerts", "deploys", "loved", "said", "again", "the", "user", "Café", "x_y", "May", "on"]
    out = []
    for _ in range(n):
        parts = [rng.choice(words) for _ in range(rng.randint(0, 9))]
        if rng.random() < 0.3:
            parts.insert(rng.randint(0, len(parts)), str(rng.randint(1, 31)))
        out.append(" ".join(parts) + rng.choice(["", ".", "!", " (ref 7)"]))
    return out


@pytest.mark.parametrize("seed", [1, 2])
def test_column_wise_stems_equal_the_stems_of_each_text(seed: int) -> None:
    from dream_assets.text.similarity import _token_columns, overlap_token_columns, overlap_tokens

    texts = _STEM_CASES + _random_texts(random.Random(seed), 400)
    vocabulary, sizes, indices, indptr = _token_columns([overlap_tokens(t) for t in texts])
    n_terms, col_sizes, col_indices, col_indptr = overlap_token_columns(texts)
    assert n_terms == len(vocabulary)
    assert col_sizes.tolist() == sizes.tolist() and col_indptr.tolist() == indptr.tolist()
    for i, text in enumerate(texts):
        expected = {vocabulary[j] for j in indices[indptr[i] : indptr[i + 1]]}
        assert {vocabulary[j] for j in col_indices[col_indptr[i] : col_indptr[i + 1]]} == expected, text


def test_the_date_shape_check_never_hides_a_frame_date() -> None:
    from dream_assets.text.framing import without_frame_dates
    from dream_assets.text.similarity import unframed

    dates = ["12 May", "12th of May", "May 12", "May 12, 2023", "Sept. 3", "2026-02-03", "3/4/2027", "june 2023"]
    dates += ["Monday, 3 June", "3\x1fmay", "may\x0b12", "DECEMBER 1st"]
    for date in dates:
        for text in (f"Jon said again on {date} that he quit.", f"As of {date}, Jon works at a bank.", f"({date})"):
            assert unframed(text) == without_frame_dates(text), text
    assert without_frame_dates("Jon said again on 12 May that he quit.") != "Jon said again on 12 May that he quit."


def test_overlap_pairs_from_texts_equal_those_from_stem_sets() -> None:
    from dream_assets.text.similarity import overlap_pairs, overlap_text_pairs, overlap_tokens

    rng = random.Random(5)
    texts = _STEM_CASES + _random_texts(rng, 600)
    texts += [t.upper() for t in texts[:50]] + [t + " said again" for t in texts[50:100]]
    for threshold in (0.6, 0.75, 0.9):
        expected = overlap_pairs([overlap_tokens(t) for t in texts], threshold)
        found = overlap_text_pairs(texts, threshold)
        assert expected[0].size > 0
        for a, b in zip(found, expected, strict=True):
            assert a.tolist() == b.tolist()


def test_exact_key_of_ascii_text_agrees_with_the_unicode_path() -> None:
    from dream_assets.text.similarity import exact_key

    rng = random.Random(3)
    alphabet = [chr(c) for c in range(128)]
    for _ in range(5000):
        pool = alphabet if rng.random() < 0.5 else "0123456789.,:-'()$%aB "
        text = "".join(rng.choice(pool) for _ in range(rng.randint(0, 14)))
        plain = exact_key(text)
        # A non-ASCII word sends the same text through the Unicode path.
        assert exact_key(text + " é") == (f"{plain} é" if plain else "é"), repr(text)


def test_clusters_with_groups_never_join_two_groups_and_keep_each_groups_own_cluster():
    """Scopes as groups (dream_assets/scope.py): the strongest pairs are across groups (the same words under two
    users), yet each group still forms its own cluster instead of losing its places to the other group's members."""
    from dream_assets.llm.embedding_index import cosine_clusters

    docs = [
        ("a1", "Weekly sync with the platform team on Tuesday at 10:00."),
        ("b1", "Weekly sync with the platform team on Tuesday at 10:00."),
        ("a2", "Weekly sync with the platform team on Tuesday at 10:00 in room B."),
        ("b2", "Weekly sync with the platform team on Tuesday at 10:00 in room C."),
    ]
    groups = ["alice", "bob", "alice", "bob"]
    plain = similarity.find_duplicate_clusters(docs, 0.5, 3, method="jaccard")
    assert any({"a1", "b1"} <= set(c) for c in plain.clusters)
    walled = similarity.find_duplicate_clusters(docs, 0.5, 3, method="jaccard", groups=groups)
    assert sorted(map(sorted, walled.clusters)) == [["a1", "a2"], ["b1", "b2"]]
    vectors = np.array([[1.0, 0.0], [1.0, 0.0], [0.99, 0.1], [0.98, 0.12]])
    found = cosine_clusters([d for d, _ in docs], vectors, 0.9, 3, groups=groups)
    assert sorted(map(sorted, found.clusters)) == [["a1", "a2"], ["b1", "b2"]]
    with pytest.raises(ValueError, match="groups"):
        similarity.cluster_pairs(4, np.array([0]), np.array([1]), np.array([1.0]), 3, groups=["x"])
