"""What a sentence is: the one rule every text check and the offline merges split by.

Save-time dedup (store/dedup.py), the merge coverage check (text/coverage.py), restatement (text/restated.py),
framing (text/framing.py) and the offline merge (text/sentence_merge.py) all read the sentences of a text here, so a
save and a merge never disagree about where one ends:

* a line break always ends a sentence (save-time dedup reads a wrapped line as one line first: see
  :func:`unwrapped`);
* so does ``.``, ``!`` or ``?`` (any run of them, with closing quotes or brackets) before white space or the end
  of the line, except the period of an abbreviation or an initial ("Dr. May", "J. R. R. Tolkien", "e.g. Python",
  "the U.S. office"); a decimal ("3.5"), a version ("v1.2.3") or a domain ("example.com") has no white space after
  its period, so it never ends one;
* a sentence is trimmed of the white space around it and is never empty.

:func:`sentence_pieces` is the finer reading: a break at every stop, abbreviations included, for the checks that
must not let a sentence hide a second one behind what may or may not be an initial ("A. 0").
"""

from __future__ import annotations

import re

# The line breaks of str.splitlines.
_LINE_BREAK = re.compile(r"\r\n|[\n\r\v\f\x1c\x1d\x1e\x85\u2028\u2029]")
# A stop: . ! ? (any run), then closing quotes or brackets, before white space or the end of the line.
_STOP = re.compile(r"[.!?]+[\"'”’)\]]*(?=\s|\Z)")
_LAST_TOKEN = re.compile(r"(\S+)$")

#: The period of these is not a sentence end: titles and Latin abbreviations precede more of the same sentence
#: ("Dr. May", "Mr. Will Turner", "St. Paul", "e.g. Python").
ABBREVIATIONS = frozenset(
    """
    dr mr mrs ms mx prof st mt ft jr sr capt gen col lt sgt cpl adm rev hon gov sen rep pres supt insp det
    messrs mme mlle fr sra sr srta
    vs v e.g i.e cf viz approx ca
    """.split()
)
#: Dotted initials: "U.S", "p.m", "e.g".
DOTTED_INITIALS = re.compile(r"(?:[^\W\d_]\.)+[^\W\d_]")


def _lines(text: str) -> list[tuple[int, int]]:
    spans, start = [], 0
    for m in _LINE_BREAK.finditer(text):
        spans.append((start, m.start()))
        start = m.end()
    return [*spans, (start, len(text))]


def _is_abbreviation(text: str, start: int, stop: re.Match[str]) -> bool:
    """Whether the stop is the period of an abbreviation or an initial (the word before it says so)."""
    if not stop.group().startswith(".") or stop.group().startswith(".."):
        return False
    last = _LAST_TOKEN.search(text, start, stop.start())
    word = last.group(1).strip("\"'“‘([").lower() if last else ""
    return word in ABBREVIATIONS or (len(word) == 1 and word.isalpha()) or DOTTED_INITIALS.fullmatch(word) is not None


def _trimmed(text: str, start: int, end: int) -> tuple[int, int] | None:
    while start < end and text[start].isspace():
        start += 1
    while end > start and text[end - 1].isspace():
        end -= 1
    return (start, end) if start < end else None


def _spans(text: str, *, every_stop: bool) -> list[tuple[int, int]]:
    out: list[tuple[int, int]] = []
    for line_start, line_end in _lines(text):
        start = line_start
        for stop in _STOP.finditer(text, line_start, line_end):
            if not every_stop and _is_abbreviation(text, start, stop):
                continue
            if (span := _trimmed(text, start, stop.end())) is not None:
                out.append(span)
            start = stop.end()
        if (span := _trimmed(text, start, line_end)) is not None:
            out.append(span)
    return out


def sentence_spans(text: str) -> list[tuple[int, int]]:
    """(start, end) of each sentence of ``text``, in order (see the module docstring)."""
    return _spans(text, every_stop=False)


def split_sentences(text: str) -> list[str]:
    """The sentences of ``text``, in order, each as written (see the module docstring)."""
    return [text[start:end] for start, end in sentence_spans(text)]


def sentence_lines(text: str) -> list[list[str]]:
    """The sentences of ``text`` line by line (lines without a sentence left out): what keeps a text's line
    structure when its sentences are kept or dropped one by one."""
    lines = []
    for line_start, line_end in _lines(text):
        line = text[line_start:line_end]
        if sentences := split_sentences(line):
            lines.append(sentences)
    return lines


def piece_spans(text: str) -> list[tuple[int, int]]:
    """(start, end) of each piece of ``text`` between sentence breaks, a break at every stop, abbreviations and
    initials included: where a sentence that :func:`split_sentences` keeps whole ("A. Smith came") may still
    hold two."""
    return _spans(text, every_stop=True)


def sentence_pieces(text: str) -> list[str]:
    """The pieces of ``text`` (:func:`piece_spans`), each as written."""
    return [text[start:end] for start, end in piece_spans(text)]


# A line break ends a block only where the text marks one: a blank line, a line ending in a colon, or a next line
# opening with a list or heading marker. Any other line break is a wrapped line: white space inside a sentence. A
# number opens a numbered item only with at most three digits and after a line that does not stop at a comma, so a
# date wrapped before its year ("on February 1,\n2026. The ...") stays one sentence.
_BLOCK_BREAK = re.compile(
    r"[ \t]*\n(?:[ \t]*\n)+|(?<=:)[ \t]*\n|[ \t]*\n(?=[ \t]*[-*•+>#]\s)|(?<![,;\s])[ \t]*\n(?=[ \t]*[0-9]{1,3}[.)]\s)"
)


def unwrapped(text: str) -> str:
    """``text`` with each wrapped line joined to the next: a line break the text does not mark as a break (a blank
    line, a line ending in a colon, a next line opening with a list, heading or numbered-item marker) is a space.
    Every character stays where it was, so a span of the result is the same span of ``text``."""
    hard = {i for m in _BLOCK_BREAK.finditer(text) for i in range(m.start(), m.end())}
    return "".join(" " if (i not in hard and _LINE_BREAK.match(ch)) else ch for i, ch in enumerate(text))
