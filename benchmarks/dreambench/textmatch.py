"""How the benchmark reads text, the same for every adapter and with no model: the specifics of a sentence (names,
numbers, dates), its content words, and whether an entry still holds a fact.

Deliberately independent of the memory systems measured (none of their code is used), so an adapter cannot score
itself with its own rules."""

from __future__ import annotations

import re
from collections.abc import Iterable

MONTHS = (
    "January",
    "February",
    "March",
    "April",
    "May",
    "June",
    "July",
    "August",
    "September",
    "October",
    "November",
    "December",
)
#: Share of a fact's content words an entry must hold to hold the fact (besides every specific).
WORDS_KEPT = 0.6

_WORD = re.compile(r"[A-Za-z][A-Za-z'’&.-]*[A-Za-z]|[A-Za-z]|\d+(?:[.,]\d+)*")
_ISO = re.compile(r"\b(\d{4})-(\d{2})-(\d{2})\b")
# Capitalised words that are not names: sentence openers, pronouns, days and other common words.
_COMMON = frozenset(
    """a about after again also an and another any are as at because before both but by can correction could did do
    does during each even every for from had has have he her here hers him his how i if in into is it its just last
    later lately like many me more most my new next no not now of on once one only or other our over recently she
    since so some still that the their them then there these they this those though through to today too under until
    up very was we were what when where which while who why will with would yes yesterday you your monday tuesday
    wednesday thursday friday saturday sunday ok okay wow thanks thank oh hey hi sure well mr mrs ms dr""".split()
)
_STOP = _COMMON | frozenset(
    """am be been being get got go goes going gone make made much really s t than very went want wants wanted way
    mentioned again said says told tells shared talk talked brought up came chat""".split()
)


def _norm_number(token: str) -> str:
    return token.replace(",", "").rstrip(".")


def expand(text: str) -> str:
    """``text`` with ISO dates spelled out (2023-05-08 -> "8 May 2023"), so a date written either way counts as the
    same date."""

    def spell(m: re.Match) -> str:
        year, month, day = m.groups()
        if not 1 <= int(month) <= 12:
            return m.group()
        return f"{int(day)} {MONTHS[int(month) - 1]} {year}"

    return _ISO.sub(spell, text)


def words(text: str) -> list[str]:
    return [w.strip("'’.-") for w in _WORD.findall(expand(text)) if w.strip("'’.-")]


def read(text: str) -> list[tuple[str, str]]:
    """The words of ``text``, each with "not " when it is a name or number the text denies ("..., not 12000"), else
    "": a denied value is not the value stated, in a fact and in an entry alike."""
    out: list[tuple[str, str]] = []
    previous = ""
    for w in words(text):
        out.append((w, "not " if previous == "not" and (w[0].isdigit() or w[0].isupper()) else ""))
        previous = w.lower()
    return out


def specifics(text: str) -> frozenset[str]:
    """Names, numbers and dates of ``text``, lower-cased: capitalised words that are not common words (anywhere in the
    sentence: "Caroline went ..." names Caroline), numbers (thousands separators dropped) and month names; one the
    text denies with "not" marked so ("not 12000")."""
    out: set[str] = set()
    for w, mark in read(text):
        if w[0].isdigit():
            out.add(mark + _norm_number(w))
        elif w[0].isupper() and w.lower() not in _COMMON and len(w) > 1:
            out.add(mark + w.lower().replace("’", "'").removesuffix("'s"))
    return frozenset(out)


def _stem(w: str) -> str:
    w = w.lower().replace("’", "'").removesuffix("'s")
    for suffix in ("ing", "ed", "es", "s"):
        if len(w) > len(suffix) + 3 and w.endswith(suffix):
            return w[: -len(suffix)]
    return w


def content_words(text: str) -> frozenset[str]:
    return frozenset(mark + _stem(w) for w, mark in read(text) if w.lower() not in _STOP and len(w) > 1)


def entry_tokens(text: str) -> frozenset[str]:
    """What an entry offers for matching: its lower-cased words and numbers, and their stems; a name or number it
    denies marked "not " ("Donna has 15000 in savings, not 12000" does not state 12000)."""
    out: set[str] = set()
    for w, mark in read(text):
        low = w.lower().replace("’", "'").removesuffix("'s")
        out.add(mark + (_norm_number(low) if low[0].isdigit() else low))
        out.add(mark + _stem(w))
    return frozenset(out)


class Fact:
    """The parts of a fact the scoring compares (computed once)."""

    __slots__ = ("text", "specifics", "words")

    def __init__(self, text: str) -> None:
        self.text = text
        self.specifics = specifics(text)
        self.words = content_words(text)


class Entry:
    """The parts of an entry the scoring compares (computed once)."""

    __slots__ = ("text", "tokens", "live")

    def __init__(self, text: str, live: bool = True) -> None:
        self.text = text
        self.live = live
        self.tokens = entry_tokens(text)


def missing(fact: Fact, entry: Entry) -> tuple[int, float]:
    """(specifics of ``fact`` that ``entry`` lacks, share of the fact's content words it has)."""
    lacking = sum(1 for s in fact.specifics if s not in entry.tokens)
    share = len(fact.words & entry.tokens) / len(fact.words) if fact.words else 1.0
    return lacking, share


def holds(fact: Fact, entry: Entry) -> bool:
    lacking, share = missing(fact, entry)
    return lacking == 0 and share >= WORDS_KEPT


class EntryIndex:
    """Entries by token, so a fact is compared only with the entries sharing one of its words."""

    def __init__(self, entries: Iterable[Entry]) -> None:
        self.entries = list(entries)
        self.by_token: dict[str, list[int]] = {}
        for i, e in enumerate(self.entries):
            for t in e.tokens:
                self.by_token.setdefault(t, []).append(i)

    def candidates(self, fact: Fact) -> list[Entry]:
        """The entries that may hold ``fact``: those carrying its rarest specific that any entry carries (an entry
        holding the fact carries every specific); for a fact without specifics, those sharing a content word."""
        if not fact.specifics:
            seen = sorted({i for w in fact.words for i in self.by_token.get(w, ())})
            return [self.entries[i] for i in seen]
        keys = [k for k in fact.specifics if self.by_token.get(k)]
        if not keys:
            return []
        rarest = min(keys, key=lambda k: (len(self.by_token[k]), k))
        return [self.entries[i] for i in self.by_token[rarest]]

    def best(self, fact: Fact) -> tuple[Entry | None, int, float]:
        """The entry that keeps most of ``fact`` (fewest specifics lacking, then most words): (entry, lacking,
        share); (None, every specific, 0) when no entry shares a word with it."""
        best: tuple[Entry | None, int, float] = (None, len(fact.specifics), 0.0)
        for e in self.candidates(fact):
            lacking, share = missing(fact, e)
            if best[0] is None or (lacking, -share) < (best[1], -best[2]):
                best = (e, lacking, share)
                if lacking == 0 and share >= 1.0:
                    break
        return best

    def holders(self, fact: Fact, *, live_only: bool = True) -> list[Entry]:
        return [e for e in self.candidates(fact) if (e.live or not live_only) and holds(fact, e)]
