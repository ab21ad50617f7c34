"""The shared tokenizer: what recall, deduplication and clustering all agree a word is."""

import pytest

from dream_assets.text.tokens import STOPWORDS, category_tokens, content_tokens, document_tokens, tokenize


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("Hello, World!", ["hello", "world"]),
        ("Deploy on 2026-08-19 at 19:30", ["deploy", "on", "2026", "08", "19", "at", "19", "30"]),
        ("state-of-the-art", ["state", "of", "the", "art"]),
        ("Alice's laptop", ["alice", "laptop"]),
        ("Zoë’s café", ["zoë", "café"]),
        ("It's done", ["it", "done"]),
        ("don't", ["don", "t"]),
        ("ÉCOLE Straße", ["école", "straße"]),
        ("Ｆｕｌｌ２０２６", ["full2026"]),  # full-width forms fold to ASCII
        ("snake_case stays whole", ["snake_case", "stays", "whole"]),
        ("v1.2.3", ["v1", "2", "3"]),
        ("東京 タワー", ["東京", "タワー"]),
        ("", []),
        ("  ...!!  ", []),
    ],
)
def test_tokenize_cases(text: str, expected: list[str]) -> None:
    assert tokenize(text) == expected


def test_tokenize_is_deterministic_and_keeps_duplicates() -> None:
    text = "The cat saw the other cat."
    assert tokenize(text) == tokenize(text) == ["the", "cat", "saw", "the", "other", "cat"]


def test_content_tokens_drop_stopwords_but_keep_negation_and_numbers() -> None:
    assert content_tokens("The user does not want a reply before 9") == {
        "user",
        "not",
        "want",
        "reply",
        "before",
        "9",
    }
    assert {"not", "no", "never"}.isdisjoint(STOPWORDS)


def test_all_stopword_text_has_no_content_tokens() -> None:
    assert content_tokens("it is what it is") == set()


@pytest.mark.parametrize(
    ("category", "expected"),
    [
        ("anti-patterns/routing", ["anti", "patterns", "routing"]),
        ("user_prefs/UI-theme", ["user", "prefs", "ui", "theme"]),
        ("", []),
    ],
)
def test_category_segments(category: str, expected: list[str]) -> None:
    assert category_tokens(category) == expected


def test_document_tokens_cover_content_category_and_tags() -> None:
    tokens = document_tokens("The user prefers dark mode", "preferences/ui-theme", ["editor", "night_mode"])
    assert tokens == [
        "user",
        "prefers",
        "dark",
        "mode",
        "preferences",
        "ui",
        "theme",
        "editor",
        "night",
        "mode",
    ]


def test_stem_joins_inflections_and_leaves_numbers_and_short_words():
    from dream_assets.text.tokens import stem

    assert stem("loves") == stem("loved") == stem("loving") == stem("love")
    assert stem("married") == stem("marries") == stem("marry")
    assert stem("running") == stem("runs") == "run"
    assert stem("2023") == "2023" and stem("bus") == "bus" and stem("class") == stem("classes")
    assert stem("teacher") != stem("teach")
