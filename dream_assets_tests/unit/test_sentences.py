"""One notion of a sentence: save-time dedup, the merge coverage check, restatement, framing and the offline merges
split a text where text/sentences.py does, so a save and a merge never disagree about what a sentence is."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dream_assets.store.dedup import _sentences as dedup_sentences
from dream_assets.text.coverage import content_sentences
from dream_assets.text.framing import frame_date_spans
from dream_assets.text.restated import without_restated_sentences
from dream_assets.text.sentence_merge import merge_keeping_every_sentence
from dream_assets.text.sentence_merge import split_sentences as offline_sentences
from dream_assets.text.sentences import sentence_pieces, sentence_spans, split_sentences, unwrapped

# Pieces that make sentence ends hard to find: abbreviations, initials, decimals, versions, quotes, list markers.
_PIECES = [
    "Dr.", "Mr.", "e.g.", "i.e.", "J.", "R.", "U.S.", "etc.", "Inc.", "3.5", "v1.2.3", "example.com", "5 p.m.",
    "Ann", "met", "Bo", "the", "tea", "at", "9", "2026-03-06", "$1,200", "said", "again", "on", "12 May 2023",
    ".", "!", "?", "...", "?!", '"', "'", ")", "(", ":", ",", " ", " ", " ", "  ", "\n", "\n\n", "\n- ", "\n1. ",
    "\r\n", "\t",
]  # fmt: skip
texts = st.lists(st.sampled_from(_PIECES), max_size=40).map("".join)


@pytest.mark.parametrize(
    "text,sentences",
    [
        ("Dr. May met J. R. R. Tolkien. He left!", ["Dr. May met J. R. R. Tolkien.", "He left!"]),
        ("Use a linter, e.g. ruff. It is fast.", ["Use a linter, e.g. ruff.", "It is fast."]),
        ('She said "done." Then she left', ['She said "done."', "Then she left"]),
        ("- first point\n- second point", ["- first point", "- second point"]),
        ("The rate is 3.5 now. Version v1.2.3 ships!", ["The rate is 3.5 now.", "Version v1.2.3 ships!"]),
        ("Wait... what?! Yes.", ["Wait...", "what?!", "Yes."]),
        ("The U.S. office opened at 5 p.m. today", ["The U.S. office opened at 5 p.m. today"]),
        ("a show\nat the Lounge.", ["a show", "at the Lounge."]),
        ("  \n\n ", []),
    ],
)
def test_sentences_end_at_stops_and_line_breaks_but_not_at_abbreviations(text: str, sentences: list[str]) -> None:
    assert split_sentences(text) == sentences


def test_pieces_break_at_every_stop_abbreviations_included() -> None:
    assert sentence_pieces("Dr. Lee called. A. 0") == ["Dr.", "Lee called.", "A.", "0"]


def test_a_wrapped_line_is_one_line_for_dedup_but_a_marked_break_is_not() -> None:
    assert split_sentences(unwrapped("a show\nat the Lounge.")) == ["a show at the Lounge."]
    assert split_sentences(unwrapped("Plans:\n- tea\n- cake\n\nDone")) == ["Plans:", "- tea", "- cake", "Done"]


@settings(max_examples=300, deadline=None)
@given(texts)
def test_sentences_cover_the_text_in_order_without_white_space_around_them(text: str) -> None:
    spans = sentence_spans(text)
    assert all(a < b for (_, a), (b, _) in zip(spans, spans[1:], strict=False))  # in order, apart
    for start, end in spans:
        sentence = text[start:end]
        assert sentence and sentence == sentence.strip()
        assert not any(ch in sentence for ch in "\n\r")  # a line break always ends a sentence
    covered = {i for start, end in spans for i in range(start, end)}
    assert all(ch.isspace() for i, ch in enumerate(text) if i not in covered)  # nothing is left out


@settings(max_examples=300, deadline=None)
@given(texts)
def test_the_coverage_check_the_offline_merges_and_dedup_read_the_same_sentences(text: str) -> None:
    sentences = split_sentences(text)
    assert content_sentences(text) == sentences
    assert [s for line in offline_sentences(text) for s in line] == sentences
    # Dedup reads a wrapped line as one line, then the same sentences, at the same places of the text.
    assert [(s.start, s.end) for s in dedup_sentences(text)] == sentence_spans(unwrapped(text))
    if "\n" not in text and "\r" not in text:
        assert [s.text for s in dedup_sentences(text)] == sentences


@settings(max_examples=200, deadline=None)
@given(texts)
def test_a_merge_and_restatement_keep_sentences_of_the_text_whole(text: str) -> None:
    sentences = split_sentences(text)
    merged = split_sentences(merge_keeping_every_sentence([text]))
    assert set(merged) <= set(sentences)
    kept = split_sentences(without_restated_sentences(text))
    assert set(kept) <= set(sentences)


@settings(max_examples=200, deadline=None)
@given(texts, texts)
def test_a_sentence_that_only_reports_is_a_frame_wherever_the_splitter_puts_it(before: str, after: str) -> None:
    frame = "This came up again in a chat on 9 July 2023."
    text = f"{before}\n{frame}\n{after}"
    if frame not in split_sentences(text):
        return
    at = text.index(frame) + frame.index("9 July 2023")
    assert any(start <= at < end for start, end in frame_date_spans(text))
