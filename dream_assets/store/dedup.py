"""Save-time dedup decision (spec: "Duplicates are avoided at save time").

The store has found a live entry the incoming text matches (cosine at or above the dedup threshold). This
module decides what the save does with it, without ever losing or rewriting what either text says:

* **reinforce** — the incoming text carries nothing the entry lacks: each of its sentences is one of the
  entry's sentences (the same words in the same order; case, punctuation, spacing and the articles a/an/the
  aside, and a full date may be spelled another way: "March 6, 2026" is "2026-03-06"), and every
  case-sensitive specific it writes (name, acronym, number, date) is written the same way in the entry.
* **extend** — the incoming text is about the same fact: it carries at least one of the entry's sentences and
  only adds sentences that restate none of the entry's, or it continues one of the entry's sentences word for
  word ("... a changelog link" -> "... a changelog link and a rollback plan."). The entry keeps its text and
  gains the new words, provided the result passes the merge coverage check against both texts and fits
  ``MaxContentChars``. A text whose every sentence is new is another fact, however similar its words.
* **create** — anything else, and always when the two are filed under different categories (compared
  case-sensitively: a category is part of what a memory means). A sentence that restates one of the entry's
  with something different (another date, time, amount, the same names in another order, other words) is a
  correction or a different fact; a specific spelled differently ("GitHub" against "Github") may be one too.
  Both are saved as a new entry and the consolidation pass decides later. So is an extension that would not
  fit or not pass coverage.

Sentences are text/sentences.py's, read after joining wrapped lines: a line break ends one only where the text marks a
break (a blank line, a line ending in a colon, a next line opening with a list or heading marker): any other line
break is a wrapped line, so "a show\nat the Lounge." and "a show at the Lounge." are the same sentence.

Numbers and dates are compared as whole units ("2026-03-06", "3.5", "$1,200", "14:30"), in order, so a
swapped date, decimal or amount is never "the same words".
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Sequence
from dataclasses import dataclass

from dream_assets.text.coverage import (
    BASELINE_VOCABULARY,
    CoverageSource,
    CoverageVocabulary,
    check_merge_coverage,
    extract_specifics,
    lowercase_words,
)
from dream_assets.text.sentences import sentence_spans, unwrapped
from dream_assets.text.tokens import STOPWORDS

REINFORCE = "reinforce"
EXTEND = "extend"
CREATE = "create"

_SPACE = re.compile(r"\s+")
_TERMINAL = re.compile(r"[.!?][\"'”’)\]]*$")
# Comparison units: a number with its decimal points, time colons, thousands commas, date and range joiners
# (and a leading minus), a word, or a symbol that carries meaning ($, %, +, @, ...).
_UNIT = re.compile(r"(?:(?<![^\W_])-)?[0-9]+(?:[.,:/\-][0-9]+)*|[^\W_]+|[^\w\s]")
# Punctuation that does not change what a sentence says.
_NOISE = frozenset(".,;:!?'\"“”‘’«»()[]{}-–—…*_`/")
_ARTICLES = frozenset({"a", "an", "the"})
_SLASH_DATE = re.compile(r"[0-9]{1,2}/[0-9]{1,2}/[0-9]{4}")
_MONTH_WORD = re.compile(
    r"\b(?:january|february|march|april|may|june|july|august|september|october|november|december"
    r"|jan|feb|mar|apr|jun|jul|aug|sept|sep|oct|nov|dec)\b",
    re.IGNORECASE,
)
#: An incoming sentence that shares at least this share of its content words with a stored sentence restates it.
RESTATES_SHARE = 0.5


@dataclass(frozen=True)
class DedupDecision:
    action: str  # "reinforce" | "extend" | "create"
    reason: str
    content: str | None = None  # the extended text, for "extend"


@dataclass(frozen=True)
class _Sentence:
    text: str
    start: int
    end: int
    key: tuple[str, ...]  # the comparison units, articles left out
    words: frozenset[str]  # content units: no stopwords, no articles


def _units(text: str) -> list[str]:
    normalised = text if text.isascii() else unicodedata.normalize("NFKC", text)
    return [u for u in _UNIT.findall(normalised.casefold()) if u not in _NOISE]


def _dates_as_iso(sentence: str) -> str:
    """Full dates written with a month name or as ISO read as one unit, ``2026-03-06``, so "March 6, 2026" and
    "6 March 2026" say the same. Slash dates stay as written: 05/06/2026 reads two ways."""
    if not any(ch.isdigit() for ch in sentence):
        return sentence  # every date this reads has a day and a year
    # Case does not matter for the comparison, so "march 6, 2026" is read as the date it is.
    sentence = _MONTH_WORD.sub(lambda m: m.group().capitalize(), sentence)
    for sp in extract_specifics(CoverageSource(sentence, "general"), BASELINE_VOCABULARY, set()):
        ref = sp.date
        if sp.kind == "date" and ref is not None and ref.day and ref.year and not _SLASH_DATE.fullmatch(sp.text):
            sentence = sentence.replace(sp.text, f" {ref.year:04d}-{ref.month:02d}-{ref.day:02d} ", 1)
    return sentence


def _flat(text: str) -> str:
    """White space (a wrapped line included) as single spaces."""
    return _SPACE.sub(" ", text)


def _sentences(text: str) -> list[_Sentence]:
    out: list[_Sentence] = []
    for start, end in sentence_spans(unwrapped(text)):  # a wrapped line is one line
        written = text[start:end]
        units = [u for u in _units(_dates_as_iso(_flat(written))) if u not in _ARTICLES]
        out.append(_Sentence(written, start, end, tuple(units), frozenset(u for u in units if u not in STOPWORDS)))
    return out


def _continuation(incoming: _Sentence, stored: _Sentence) -> str | None:
    """The stored sentence continued, when the incoming one is the stored one, character for character (a wrapped
    line is a space), with more words after it: the stored words as written, then the incoming's new words."""
    written = _TERMINAL.sub("", stored.text)
    head, text = _flat(written), _flat(incoming.text)
    if not head or not text.startswith(head) or len(text) <= len(head):
        return None
    rest = text[len(head) :]
    # More words, not a longer number or word: "at 9" is not continued by "at 9:30" or "at 95".
    if re.match(r"(?:\s|[,;]\s|\s*[—–]\s)\S", rest) is None or not _units(rest):
        return None
    return written + rest


def _restated(incoming: _Sentence, stored: Sequence[_Sentence]) -> _Sentence | None:
    """The stored sentence this one says again with something different, if any (most shared words first)."""
    if not incoming.words:
        return None
    best, best_share = None, 0.0
    for s in stored:
        share = len(incoming.words & s.words) / len(incoming.words)
        if share > best_share:
            best, best_share = s, share
    return best if best_share >= RESTATES_SHARE else None


def _difference(incoming: _Sentence, stored: _Sentence) -> str:
    added = [u for u in dict.fromkeys(incoming.key) if u not in stored.key]
    dropped = [u for u in dict.fromkeys(stored.key) if u not in incoming.key]
    if not added and not dropped:
        return "the same words in another order"
    parts = []
    if added:
        parts.append("adds " + ", ".join(repr(u) for u in added[:5]))
    if dropped:
        parts.append("lacks " + ", ".join(repr(u) for u in dropped[:5]))
    return " and ".join(parts)


def _short(text: str, limit: int = 80) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _whole(text: str, phrase: str) -> bool:
    return phrase in text and re.search(rf"(?<![^\W_]){re.escape(phrase)}(?![^\W_])", text) is not None


def _respelled(result: str, incoming: str, category: str, vocab: CoverageVocabulary) -> list[str]:
    """Case-sensitive specifics of the incoming text that ``result`` does not write the same way (a date may be
    written in an equivalent spelling)."""
    source = CoverageSource(incoming, category)
    specifics = extract_specifics(source, vocab, lowercase_words([incoming]))
    dates_missing: set[str] | None = None
    missing = []
    for sp in specifics:
        if not sp.case_sensitive or _whole(result, sp.text):
            continue
        if sp.kind == "date":
            if dates_missing is None:
                dates_missing = set(check_merge_coverage([source], result, vocab).missing)
            if sp.text not in dates_missing:
                continue
        if sp.text not in missing:
            missing.append(sp.text)
    return missing


def _joined(text: str, addition: str) -> str:
    base = text.rstrip()
    # The stored text is kept exactly; after a text without a sentence end the new sentence starts a new paragraph
    # (a single line break would read as a wrapped line), so the two do not run together into one sentence.
    return base + (" " if _TERMINAL.search(base) else "\n\n") + addition


def decide(
    stored: str,
    incoming: str,
    *,
    max_chars: int,
    stored_category: str = "general",
    incoming_category: str = "general",
    vocab: CoverageVocabulary = BASELINE_VOCABULARY,
) -> DedupDecision:
    """What saving ``incoming`` does to a live entry whose content is ``stored`` (both already validated)."""
    if stored_category != incoming_category:
        return DedupDecision(
            CREATE,
            f"the entry is filed under {stored_category!r}, the save under {incoming_category!r}: a category is "
            "part of what a memory means, so it is saved apart",
        )
    stored_sentences = _sentences(stored)
    stored_keys = {s.key for s in stored_sentences}
    continued: dict[int, str] = {}  # stored sentence index -> the stored sentence continued by the incoming one
    added: list[_Sentence] = []
    anchored = False  # some incoming sentence is one of the entry's: the save is about the same fact
    for sentence in _sentences(incoming):
        if sentence.key in stored_keys:
            anchored = True
            continue
        target, longer = next(
            ((i, c) for i, s in enumerate(stored_sentences) if (c := _continuation(sentence, s)) is not None),
            (None, None),
        )
        if target is not None and longer is not None and target not in continued:
            continued[target] = longer
            continue
        restated = _restated(sentence, stored_sentences)
        if restated is not None:
            return DedupDecision(
                CREATE,
                f"restates the stored sentence {_short(restated.text)!r} with a difference "
                f"({_difference(sentence, restated)}): saved apart for consolidation",
            )
        if all(sentence.key != a.key for a in added):
            added.append(sentence)

    extended = stored
    for index in sorted(continued, reverse=True):  # from the end, so earlier offsets stay valid
        s = stored_sentences[index]
        extended = extended[: s.start] + continued[index] + extended[s.end :]
    for sentence in added:
        extended = _joined(extended, sentence.text)
    respelled = _respelled(extended, incoming, incoming_category, vocab)
    if respelled:
        return DedupDecision(
            CREATE,
            "writes "
            + ", ".join(repr(s) for s in respelled[:5])
            + " differently from the stored entry: saved apart for consolidation",
        )
    if not continued and not added:
        return DedupDecision(REINFORCE, "every sentence is already in the entry")
    if not continued and not anchored:
        return DedupDecision(
            CREATE,
            "restates none of the entry's sentences and continues none: another fact, saved apart",
        )
    what = ", ".join(
        part
        for part in (
            f"continues {len(continued)} of its sentences" if continued else "",
            f"adds {len(added)} sentence{'s' if len(added) != 1 else ''}" if added else "",
        )
        if part
    )
    if len(extended) > max_chars:
        return DedupDecision(
            CREATE,
            f"extending the entry ({what}) would make it {len(extended)} characters, over "
            f"the limit of {max_chars} (option MaxContentChars): saved apart",
        )
    coverage = check_merge_coverage(
        [CoverageSource(stored, stored_category), CoverageSource(incoming, incoming_category)],
        extended,
        vocab,
    )
    if not coverage.ok:
        return DedupDecision(
            CREATE, "the extended text would drop " + ", ".join(coverage.missing[:5]) + ": saved apart"
        )
    return DedupDecision(EXTEND, what, extended)
