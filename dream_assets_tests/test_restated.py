"""Restated sentences: a merge says a sentence once when another kept sentence carries all of it, and never drops
one that says something else (another negation, another order of names, another word, another specific)."""

from __future__ import annotations

import pytest

from dream_assets.text.restated import carries, without_restated_sentences


@pytest.mark.parametrize(
    ("text", "kept"),
    [
        (
            "The user prefers dark mode in VS Code.\nUser prefers dark mode in VS Code.",
            "The user prefers dark mode in VS Code.",
        ),
        (
            "Melanie loves pottery. Melanie said again on 12 May 2023 that she loves pottery.",
            "Melanie said again on 12 May 2023 that she loves pottery.",
        ),
        ("Sam paid Evan. Evan paid Sam.", "Sam paid Evan. Evan paid Sam."),
        ("User likes coffee. User no longer likes coffee.", "User likes coffee. User no longer likes coffee."),
        ("User drinks coffee. User doesn't drink coffee.", "User drinks coffee. User doesn't drink coffee."),
        (
            "Dave works at a car shop. Dave worked at a car shop.",
            "Dave works at a car shop. Dave worked at a car shop.",
        ),
        ("The hosting is on GitHub. The hosting is on Github.", "The hosting is on GitHub. The hosting is on Github."),
        (
            "The review is on 2026-03-06. The review is on 2026-06-03.",
            "The review is on 2026-03-06. The review is on 2026-06-03.",
        ),
    ],
)
def test_only_a_sentence_another_carries_whole_goes(text, kept):
    assert without_restated_sentences(text) == kept


def test_carrying_is_one_way_for_a_sentence_with_more_detail():
    assert carries("Melanie went camping on 7 May 2023.", "Melanie went camping.")
    assert not carries("Melanie went camping.", "Melanie went camping on 7 May 2023.")
