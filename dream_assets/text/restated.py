"""Restated sentences: a sentence of a merged text that another kept sentence already says.

A merge keeps every source sentence, so two wordings of one fact ("The user prefers dark mode in VS Code." and
"User prefers dark mode in VS Code.") would both stay. A sentence is restated by another when the other carries
every one of its content words (stopwords aside, case aside, the word as written: "works" is not "worked") and
every one of its specifics (names, acronyms, numbers, dates: the merge coverage check's; a name or acronym
written the same way), with the same negation
("not", "never", "no", "n't") and its names in the same order ("Sam paid Evan" is not "Evan paid Sam"). Such a
sentence can go without losing anything the coverage and content checks protect; of two that restate each other,
the first is kept.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from dream_assets.text.coverage import (
    BASELINE_VOCABULARY,
    CoverageSource,
    CoverageVocabulary,
    check_merge_coverage,
    specifics_of,
)
from dream_assets.text.sentences import sentence_pieces, sentence_spans
from dream_assets.text.tokens import STOPWORDS, tokenize

_NEGATIONS = frozenset({"not", "no", "never", "nor", "neither", "none", "nothing", "nobody", "cannot", "without"})
_CONTRACTED_NOT = re.compile(r"n['’]t\b", re.IGNORECASE)


def _words(sentence: str) -> frozenset[str]:
    return frozenset(t for t in tokenize(sentence) if t not in STOPWORDS)


def negations(sentence: str) -> frozenset[str]:
    """The negations of ``sentence`` ("not", "never", "no", ...; "n't" as "not")."""
    found = set(_words(sentence) & _NEGATIONS)
    if _CONTRACTED_NOT.search(sentence):
        found.add("not")
    return frozenset(found)


def _name_positions(sentence: str, other: str, category: str, vocab: CoverageVocabulary) -> list[int] | None:
    """Where the names and acronyms of ``sentence`` occur in ``other`` in ``sentence``'s order, each found after the
    one before (a name said twice, "Ann met Bo and Ann", is looked for twice); None when ``other`` does not write one
    of them the same way ("Github" against "GitHub" may be a correction) or not in that order."""
    positions: list[int] = []
    for sp in specifics_of(sentence, category, vocab):
        if sp.kind not in ("name", "acronym"):
            continue
        # A sentence opener's capital is positional: that word may be written in any case.
        flags = 0 if sp.case_sensitive else re.IGNORECASE
        pattern = re.compile(rf"(?<![^\W_]){re.escape(sp.text)}(?![^\W_])", flags)
        m = pattern.search(other, positions[-1] + 1 if positions else 0)
        if m is None:
            return None
        positions.append(m.start())
    return positions


def carries(
    kept: str, sentence: str, category: str = "general", vocab: CoverageVocabulary = BASELINE_VOCABULARY
) -> bool:
    """Whether ``kept`` says everything ``sentence`` says (see the module docstring)."""
    words = _words(sentence)
    if not words or not words <= _words(kept) or negations(sentence) != negations(kept):
        return False
    if not check_merge_coverage([CoverageSource(sentence, category)], kept, vocab).ok:
        return False
    positions = _name_positions(sentence, kept, category, vocab)
    return positions is not None  # found in the sentence's order, each after the one before


def _carries_every_piece(
    kept: str, sentence: str, category: str = "general", vocab: CoverageVocabulary = BASELINE_VOCABULARY
) -> bool:
    """``carries`` for ``sentence`` whole, and for each piece of it between sentence breaks by one piece of ``kept``: a
    sentence goes as restated only when nothing of it could be a sentence of its own that no one sentence of ``kept``
    says ("A. 0" is not restated by "0 0": "A." has no content word that could show it is said; "0 00" is not restated
    by "0 A. 00", whose pieces each say only half of it)."""
    if not carries(kept, sentence, category, vocab):
        return False
    kept_pieces = sentence_pieces(kept)
    return all(any(carries(k, p, category, vocab) for k in kept_pieces) for p in sentence_pieces(sentence))


def drop_restated(
    sentences: Sequence[str], category: str = "general", vocab: CoverageVocabulary = BASELINE_VOCABULARY
) -> list[int]:
    """The indexes of ``sentences`` to keep: every sentence but those another kept sentence carries, each piece of it
    included (of two that carry each other, the first stays)."""
    kept = list(range(len(sentences)))
    for i in range(len(sentences)):
        for j in kept:
            if j == i or not _carries_every_piece(sentences[j], sentences[i], category, vocab):
                continue
            if j < i or not _carries_every_piece(sentences[i], sentences[j], category, vocab):
                kept.remove(i)
                break
    return kept


def without_restated_sentences(
    text: str, category: str = "general", vocab: CoverageVocabulary = BASELINE_VOCABULARY
) -> str:
    """``text`` less its restated sentences; the kept sentences stay as written, each after the white space that
    preceded it (a line break stays a line break)."""
    pieces: list[tuple[str, str]] = []  # (white space before, sentence)
    pos = 0
    for start, end in sentence_spans(text):
        pieces.append((text[pos:start], text[start:end]))
        pos = end
    keep = drop_restated([s for _, s in pieces], category, vocab)
    if len(keep) == len(pieces):
        return text
    out = []
    kept, broken = set(keep), False
    for i, (gap, sentence) in enumerate(pieces):
        # A line break before a dropped sentence stays before the next kept one: two lines never fuse into one.
        broken = broken or "\n" in gap
        if i in kept:
            out.append(("" if not out else "\n" if broken else " ") + sentence)
            broken = False
    return "".join(out)
