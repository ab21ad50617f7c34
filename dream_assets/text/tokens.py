"""Word tokens shared by BM25 recall, TF-IDF similarity and Jaccard duplicate detection.

One tokenizer for all three so that "what recall matches" and "what counts as a duplicate" never
disagree about what a word is (spec "Duplicates are avoided at save time": the save-time and the
consolidation thresholds are kept aligned, which only means something if both see the same tokens).
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Sequence
from functools import lru_cache

# Unicode-aware word runs: letters, digits (so "2026" and "19" survive as tokens) and underscore.
# Hyphens, slashes, apostrophes and other punctuation separate tokens.
_WORD = re.compile(r"\w+")
# Possessive 's / ’s at the end of a word: "Alice's" and "Alice" are the same subject.
_POSSESSIVE = re.compile(r"(?<=\w)['’]s\b")
# Category segments: "anti-patterns/routing_notes" -> anti, patterns, routing, notes.
_CATEGORY_SEPARATORS = re.compile(r"[/\-_]+")

#: A deliberately small English stopword list: function words only. Words that carry meaning in an
#: agent's memory ("not", "never", "no", numbers) are kept, because dropping them would make
#: "X is allowed" and "X is not allowed" look identical to Jaccard.
STOPWORDS: frozenset[str] = frozenset(
    """
    a an the and or but if then else so than that this these those there here
    of to in on at by for from with into onto over under about as via per
    is are was were be been being am do does did done has have had having
    i me my mine we us our ours you your yours he him his she her hers it its they them their theirs
    what which who whom whose when where why how
    will would shall should can could may might must
    also just very too only own same such some any each both all more most other
    up down out off again further once
    """.split()
)


def tokenize(text: str) -> list[str]:
    """Lower-cased word tokens of ``text``, in order, duplicates kept.

    NFKC-normalised first so that full-width digits and ligatures tokenize like their plain forms.
    """
    if not text:
        return []
    # ASCII text is already in NFKC form, and without an apostrophe there is no possessive to strip:
    # both checks are much cheaper than the work they skip.
    normalised = (text if text.isascii() else unicodedata.normalize("NFKC", text)).lower()
    if "'" in normalised or "’" in normalised:
        normalised = _POSSESSIVE.sub("", normalised)
    return _WORD.findall(normalised)


def content_tokens(text: str) -> set[str]:
    """The distinct non-stopword tokens of ``text`` (the Jaccard unit)."""
    return {t for t in tokenize(text) if t not in STOPWORDS}


def content_token_list(text: str) -> list[str]:
    """Non-stopword tokens of ``text`` in order, duplicates kept (term frequency matters for TF-IDF)."""
    return [t for t in tokenize(text) if t not in STOPWORDS]


def category_tokens(category: str) -> list[str]:
    """Segments of a category path split on '/', '-' and '_' ("anti-patterns/routing" -> anti, patterns, routing)."""
    return tokenize(_CATEGORY_SEPARATORS.sub(" ", category or ""))


def document_tokens(
    content: str, category: str, tags: Sequence[str], *, words: Sequence[str] | None = None
) -> list[str]:
    """What BM25 indexes for one memory entry: content tokens, category segments and tag tokens.

    Stopwords are left out of the index: they carry no recall signal and their postings would span
    nearly every document, which is what makes a query slow. ``words``: ``content_token_list(content)``
    when the caller has it already.
    """
    out = content_token_list(content) if words is None else list(words)
    out.extend(_label_tokens(category, tuple(tags or ())))
    return out


def label_tokens(category: str, tags: Sequence[str]) -> tuple[str, ...]:
    """The index tokens of a category and tags: what ``document_tokens`` adds after the content words."""
    return _label_tokens(category, tuple(tags or ()))


@lru_cache(maxsize=4096)
def _label_tokens(category: str, tags: tuple[str, ...]) -> tuple[str, ...]:
    """The index tokens of a category and tags (``document_tokens`` without the content): a corpus has few distinct
    ones, and every save of an agent's usual category would tokenise it again."""
    out = [t for t in category_tokens(category) if t not in STOPWORDS]
    for tag in tags:
        out.extend(t for t in category_tokens(tag) if t not in STOPWORDS)
    return tuple(out)


_VOWELS = frozenset("aeiouy")


def _undouble(stem: str) -> str:
    """ "runn" -> "run", "stopp" -> "stop"; "ss", "ll" and "zz" stay ("miss", "call")."""
    if len(stem) >= 3 and stem[-1] == stem[-2] and stem[-1] not in _VOWELS and stem[-1] not in "slz":
        return stem[:-1]
    return stem


def stem(token: str) -> str:
    """A light English suffix stripper, enough for "loves", "loved", "loving" and "love" to be one unit.

    Only alphabetic lower-case tokens longer than three letters change; numbers, identifiers and short words are
    kept as they are. Plural and verb endings (-s, -es, -ies, -ed, -ied, -ing) are removed, a final "y" after a
    consonant reads as "i" and a final "e" is dropped, so every inflection of a word meets at the same stem. Words
    of different meaning that share a stem ("teacher" and "teach") stay apart: no derivational suffix is removed.
    """
    if len(token) <= 3 or not token.isalpha():
        return token
    word = token
    if word.endswith("sses"):
        word = word[:-2]
    elif word.endswith(("ies", "ied")) and len(word) > 4:
        word = word[:-3] + "i"
    elif word.endswith("s") and not word.endswith(("ss", "us", "is")):
        word = word[:-1]
    if word.endswith("ing") and len(word) > 5 and any(c in _VOWELS for c in word[:-3]):
        word = _undouble(word[:-3])
    elif word.endswith("ed") and len(word) > 4 and any(c in _VOWELS for c in word[:-2]):
        word = _undouble(word[:-2])
    if len(word) > 3 and word.endswith("y") and word[-2] not in _VOWELS:
        word = word[:-1] + "i"
    if len(word) > 3 and word.endswith("e") and not word.endswith("ee"):
        word = word[:-1]
    return word
