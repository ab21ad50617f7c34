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
        # Kept whole by the sentence splitter ("A." could be an initial), but "A." may be a sentence of its own that
        # "0 0" does not say: the longer one stays, and it says "0 0".
        ("0 0\nA. 0", "A. 0"),
        ("Ticket 0 0.\nA. Ticket 0.", "A. Ticket 0."),
        ("0 00\n0 A. 00", "0 00\n0 A. 00"),  # neither "0 A." nor "00" says "0 00"
        ("Bo called Ann\nBo called Ann. Ann replied", "Bo called Ann\nAnn replied"),  # lines never fuse into one
        ("Dr. Lee called.\nDr. Lee called about the lease.", "Dr. Lee called about the lease."),  # pieces said
    ],
)
def test_only_a_sentence_another_carries_whole_goes(text, kept):
    assert without_restated_sentences(text) == kept


def test_a_name_said_twice_is_carried_where_it_is_said_twice_in_order():
    assert carries("Ann met Bo and Ann.", "Ann met Bo and Ann.")
    assert carries("Evan paid Sam. Sam paid Evan.", "Sam paid Evan.")
    assert not carries("Ann met Bo.", "Ann met Bo and Ann.") and not carries("Bo met Ann.", "Ann met Bo.")


def test_carrying_is_one_way_for_a_sentence_with_more_detail():
    assert carries("Melanie went camping on 7 May 2023.", "Melanie went camping.")
    assert not carries("Melanie went camping.", "Melanie went camping on 7 May 2023.")
