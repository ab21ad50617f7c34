"""Framing: the words around a fact that say when or how it came up, not what it is.

A fact the agent hears again is often saved with a frame: "Melanie said again on 12 May that she loves pottery",
"As of 3 June 2023, Jon works at a bank", "Gina loves dancing (mentioned again on 9 July)". The frame's date is when
the fact was observed, not when the thing it talks about happened. Two measures need to see through it:

* similarity (text/similarity.py) leaves framing words and frame dates out, so a framed re-observation is as close
  to the plain fact as the plain fact is to itself;
* the offline backend's distinct-moment guard compares the specifics of the facts without their frame dates, so two
  re-observations of one fact on different days are one fact, while "went hiking on 7 May" and "went hiking on
  20 June" stay two moments.

A date counts as a frame date only in a narrow set of positions, so an event date is never mistaken for one:
right after a reporting verb ("said on 12 May", "mentioned again in June 2023"), right before a short subject and a
reporting verb ("On 12 May, Melanie mentioned ..."; not one that shares a thing: "On 12 May, John shares a photo"),
after "as of", or inside a parenthesis that holds a reporting verb or "again", or anywhere in a sentence that only
reports ("This came up again in a chat on 9 July 2023").
"Caroline said she went hiking on 7 May" keeps 7 May: words stand between the verb and the date; so does "We met
again on 3 May 2023 at the park": that sentence says more than that something came up.
"""

from __future__ import annotations

import re

from dream_assets.text.sentences import sentence_spans
from dream_assets.text.tokens import STOPWORDS, stem

_MONTHS = (
    r"(?:january|february|march|april|may|june|july|august|september|october|november|december"
    r"|jan|feb|mar|apr|jun|jul|aug|sept|sep|oct|nov|dec)\.?"
)
_WEEKDAY = r"(?:(?:monday|tuesday|wednesday|thursday|friday|saturday|sunday),?\s+)?"
_DAY = r"[0-9]{1,2}(?:st|nd|rd|th)?"
#: A written date: ISO, slash, "12 May 2023", "12th of May", "May 12, 2023", "May 2023".
DATE = (
    rf"{_WEEKDAY}(?:[0-9]{{4}}-[0-9]{{2}}-[0-9]{{2}}|[0-9]{{1,2}}/[0-9]{{1,2}}/[0-9]{{4}}"
    rf"|{_DAY}\s+(?:of\s+)?{_MONTHS},?(?:\s+[0-9]{{4}})?"
    rf"|{_MONTHS}\s+{_DAY}(?:,?\s+[0-9]{{4}})?(?![0-9])"
    rf"|{_MONTHS}\s+[0-9]{{4}})"
)
#: Verbs that report an observation rather than state a fact (any inflection).
REPORTING = (
    r"(?:says?|said|mention(?:s|ed)?|note[sd]?|tell(?:s)?|told|share[sd]?|report(?:s|ed)?|repeat(?:s|ed)?"
    r"|reiterate[sd]?|confirm(?:s|ed)?|reconfirm(?:s|ed)?|recall(?:s|ed)?|brought\s+up|bring(?:s)?\s+up"
    r"|talk(?:s|ed)?\s+about|explain(?:s|ed)?|state[sd]?|add(?:s|ed)|remark(?:s|ed)?|came\s+up"
    r"|comes\s+up|restate[sd]?)"
)
_SUBJECT = r"(?:[^\s,.;:()]+\s+){1,3}?"  # a short subject: "Melanie", "she", "the user", "Jon's wife"

# "said (again) (on|in) DATE", "reconfirmed DATE"
_AFTER_VERB = re.compile(
    rf"\b{REPORTING}(?:\s+(?:it|this|that|so))?(?:\s+again)?\s+(?:(?:on|in|during)\s+)?"
    rf"(?P<date>{DATE})",
    re.IGNORECASE,
)
# "(On|In) DATE, Melanie (again) mentioned"
_BEFORE_VERB = re.compile(
    rf"(?:\b(?:on|in|during)\s+)?(?P<date>{DATE}),?\s+{_SUBJECT}(?:again\s+|also\s+)?"
    rf"(?P<verb>{REPORTING})\b",
    re.IGNORECASE,
)
#: A reporting word used as a noun after a verb that takes it as its object ("Maria takes notes", "keeps notes"): an
#: event, not a report, so "On 28 February 2023, Maria takes notes about local politics" keeps its date.
_NOUN_AFTER = re.compile(
    r"\b(?:take[sn]?|took|taking|make[s]?|made|making|keep(?:s|ing)?|kept|write[s]?|wrote|writing|written|ha[sd]|have"
    r"|having|give[sn]?|gave|giving|leave[s]?|left|leaving|send[s]?|sent|sending|read(?:s|ing)?|compare[sd]?"
    r"|comparing|swap(?:s|ped|ping)?|trade[sd]?|trading|exchange[sd]?|exchanging|post(?:s|ed|ing)?)\s+$",
    re.IGNORECASE,
)
#: Sharing a thing is an event, not a report: "On 27 December 2023, John shares a photo of the forest" keeps its date.
_SHARES_A_THING = re.compile(
    r"share[sd]?\s+(?:a|an|the|some|his|her|their|my|our|your|its|photos?|pictures?|pics?)\b", re.IGNORECASE
)
# "As of DATE", "As at DATE"
_AS_OF = re.compile(rf"\b(?:as\s+of|as\s+at)\s+(?P<date>{DATE})", re.IGNORECASE)
# A parenthesis, dash clause or trailing clause that only reports: "(mentioned again on 9 July)"
_PAREN = re.compile(r"\(([^()]*)\)")
_REPORTING_WORD = re.compile(rf"\b(?:{REPORTING}|again|as\s+of)\b", re.IGNORECASE)
_WORD = re.compile(r"[^\W_]+")
#: A sentence that reports and says nothing else ("This came up again in a chat with Gina on 9 July 2023.") is a
#: frame as a whole: at most this many of its words are neither framing, stop, name nor date words.
_FRAME_SENTENCE_WORDS = 1

#: Words that frame an observation (compared after stemming): left out of similarity.
FRAMING_WORDS: frozenset[str] = frozenset(
    stem(w)
    for w in """
    say says said mention mentions mentioned note notes noted tell tells told share shares shared report reports
    reported repeat repeats repeated reiterate reiterates reiterated confirm confirms confirmed reconfirm
    reconfirmed recall recalls recalled explain explains explained state states stated remark remarks remarked
    restate restated talk talks talked brought came again still also really indeed later earlier previously
    recently once more conversation chat session while talking
    """.split()
)


def frame_date_spans(text: str) -> list[tuple[int, int]]:
    """Character spans of the dates in ``text`` that frame an observation (see the module docstring)."""
    spans: list[tuple[int, int]] = []
    for pattern in (_AFTER_VERB, _BEFORE_VERB, _AS_OF):
        for m in pattern.finditer(text):
            if pattern is _BEFORE_VERB and (
                _SHARES_A_THING.match(text, m.start("verb")) or _NOUN_AFTER.search(text, m.start(), m.start("verb"))
            ):
                continue
            spans.append(m.span("date"))
    for m in _PAREN.finditer(text):
        inner = m.group(1)
        if _REPORTING_WORD.search(inner):
            for d in re.finditer(DATE, inner, re.IGNORECASE):
                spans.append((m.start(1) + d.start(), m.start(1) + d.end()))
    for start, end in sentence_spans(text):
        sentence = text[start:end]
        if not _REPORTING_WORD.search(sentence):
            continue
        dates = list(re.finditer(DATE, sentence, re.IGNORECASE))
        if not dates:
            continue
        rest = sentence
        for d in reversed(dates):
            rest = rest[: d.start()] + " " + rest[d.end() :]
        rest = re.sub(REPORTING, " ", rest, flags=re.IGNORECASE)
        words = [
            w
            for w in _WORD.findall(rest)
            if not w[:1].isupper() and w.lower() not in STOPWORDS and stem(w.lower()) not in FRAMING_WORDS
        ]
        if len(words) <= _FRAME_SENTENCE_WORDS:
            spans += [(start + d.start(), start + d.end()) for d in dates]
    merged: list[tuple[int, int]] = []
    for start, end in sorted(spans):
        if merged and start <= merged[-1][1]:
            merged[-1] = (merged[-1][0], max(end, merged[-1][1]))
        else:
            merged.append((start, end))
    return merged


def without_frame_dates(text: str) -> str:
    """``text`` with its frame dates blanked out; every other character stays where it was."""
    spans = frame_date_spans(text)
    if not spans:
        return text
    out, last = [], 0
    for start, end in spans:
        out.append(text[last:start])
        out.append(" ")
        last = end
    out.append(text[last:])
    return "".join(out)
