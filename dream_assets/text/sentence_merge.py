"""A merge that keeps every sentence: the sentences of texts, each once, in order (the offline merge of memory
consolidation, its repair, and the checks and benchmarks that verify nothing was dropped).

A sentence equal to an earlier one after white-space, case and final-punctuation normalisation (``sentence_key``) is
kept once.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from dream_assets.text.sentences import sentence_lines

_FINAL_PUNCT = ".!?;:,…"


def split_sentences(text: str) -> list[list[str]]:
    """Lines of sentences (text/sentences.py: a line break always ends a sentence; so does . ! or ? before white
    space, except the period of an abbreviation or an initial)."""
    return sentence_lines(text)


def sentence_key(sentence: str) -> str:
    """Normalised form for duplicate detection: white space collapsed, case folded, final punctuation dropped."""
    return " ".join(sentence.split()).casefold().rstrip(_FINAL_PUNCT + " ")


def merge_keeping_every_sentence(texts: Iterable[str]) -> str:
    """All sentences of all texts, in order, each distinct sentence once; line structure kept per text."""
    seen: set[str] = set()
    blocks: list[str] = []
    for text in texts:
        kept_lines: list[str] = []
        for line in split_sentences(text):
            kept = []
            for sentence in line:
                key = sentence_key(sentence)
                if key not in seen:
                    seen.add(key)
                    kept.append(sentence)
            if kept:
                kept_lines.append(" ".join(kept))
        if kept_lines:
            blocks.append("\n".join(kept_lines))
    return "\n".join(blocks)


def sentences_of(texts: Sequence[str]) -> set[str]:
    """Normalised sentences of ``texts`` (what a merge must keep)."""
    return {sentence_key(s) for t in texts for line in split_sentences(t) for s in line}
