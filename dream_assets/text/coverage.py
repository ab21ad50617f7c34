"""Merge coverage check (spec: Pass 1 — Memory consolidation, "Merge coverage check").

Before a merge is applied, every specific in its sources — proper nouns, acronyms, multi-digit numbers
and dates — must appear in the merged text; a single missing one rejects the merge. The check is
deliberately biased toward rejection: a false rejection leaves a duplicate alive for a cycle, a false
acceptance destroys the only record of how a fact was worded. Wherever the spec is silent, the choice
below is the one that rejects more, and the comment says so.

What counts as a specific:

* A word token with an upper-case letter (``Austin``, ``MCP``, ``iOS``, ``EC2``), unless it is ordinary
  language by one of the rules of "Vocabulary is per-deployment" and "Corpus evidence beats position":
  ``alwaysSpecificWords`` wins over everything; otherwise ``extraCommonWords`` (any position), a lower-case
  spelling in any of the merge's sources, or the built-in baseline (sentence-initial, Title-case only)
  make it ordinary. The baseline is a reviewed hand list plus the most frequent English words from the
  wordfreq package, less the ones that are mostly names (see FREQUENCY_BASELINE_SIZE; the list ships as
  frequency_baseline.txt, so the install needs no wordfreq); month and weekday names are never in it. The
  period of an abbreviation ("Dr.", "Mr.", "St.", "e.g.", an initial) does not end a sentence, so the word
  after it is mid-sentence.
* A name or acronym is kept by the same word in another case as long as the merge still writes it with a
  capital ("iPhone" by "IPHONE" or "Iphone"); the all-lowercase word keeps it only when the source's
  capital was positional (a sentence opener). Words listed in ``alwaysSpecificWords`` are matched in
  their exact case: they are listed because the lowercase word means something else ("Will", "will").
* A number with two or more digits. The unit is a digit run together with its decimal points, time
  colons and thousands commas (``3.11``, ``14:30``, ``1,200``), so ``$1,200`` cannot be "covered" by a
  stray ``200`` and ``2:30 PM`` is not covered by ``14:30`` (the spec's known 12h→24h false positive).
  A number range ("30-60", "30 to 60", "between 30 and 60") is one unit, kept only by a range with the
  same two ends.
* A date: a month name adjacent to a day or a year (``August 19, 2026``, ``19 August``, ``Aug 2026``) or
  a numeric date (``2026-08-19``, ``8/19/2026``). A date is covered by the same date in any of those
  spellings ("Equivalent date spellings"), with the spec's two guards.

Entries in a numeric-exempt category skip the number and numeric-date check; a month-name date in them
still requires its month word (or an equivalent date).

:func:`invented_specifics` is the other direction: the specifics a merged text states that no source
carries (a swapped figure, a wrong year, a new name).

:func:`dropped_content` guards what the specifics leave out: a source sentence whose ordinary words the merged
text no longer carries ("a dropped sentence", a sentence rewritten down to half its words).
"""

from __future__ import annotations

import functools
import importlib.resources
import json
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import date
from pathlib import Path

from dream_assets.text.framing import FRAMING_WORDS
from dream_assets.text.sentences import ABBREVIATIONS, DOTTED_INITIALS, split_sentences
from dream_assets.text.tokens import content_token_list, stem, tokenize

#: Built into every vocabulary and not removable (spec: "Numbers can be exempted by category").
BUILT_IN_NUMERIC_EXEMPT = "anti-patterns/routing"

# Generic English that is ordinary language when it opens a sentence (spec: "The two lists are scoped
# differently, on purpose"). It applies only sentence-initially and only to Title-case tokens, so a
# character named May or Will keeps protection mid-sentence. Deliberately absent: nouns that name real
# things in product and course titles (Personal, Class, Benefit, Extended, Online, Office, Teams ...),
# given names that are also words (Mark, Bill, Rose, Grace, Frank ...), language and tool names (Go,
# Rust, Swift, Make ...), and weekday and month names — those are specifics wherever they appear. May is
# here as the modal verb; a month-name date ("May 6, 2026") is a date and is protected regardless.
BASELINE_COMMON_WORDS: frozenset[str] = frozenset(
    """
    a an the this that these those each every either neither any all both some many much more most few
    fewer less least several other another such no none own same enough
    you he she it we they me him her us them my your his its our their mine yours hers ours theirs
    myself yourself himself herself itself ourselves yourselves themselves
    one two three four five six seven eight nine ten
    someone somebody something anyone anybody anything everyone everybody everything nobody nothing
    who whom whose which what whatever whoever whichever where when why how wherever whenever however
    be am is are was were been being have has had having do does did doing done
    can could may might must shall should will would ought need needs cannot
    let
    about above across after against along among around as at before behind below beneath beside besides
    between beyond but by despite down during except for from in inside into like near of off on onto out
    outside over past per since than then through throughout till to toward towards under underneath
    unlike until up upon via with within without
    and or nor so yet if unless because although though while whereas whether once
    also even just only still already always never often sometimes usually rarely seldom now today
    tomorrow yesterday here there again instead otherwise therefore thus hence meanwhile moreover
    furthermore additionally finally first second third last next previously currently recently later
    earlier soon perhaps maybe probably possibly likely generally typically normally actually really very
    quite rather too almost nearly mostly especially particularly specifically simply clearly obviously
    apparently overall similarly likewise accordingly consequently besides regardless nevertheless
    nonetheless anyway anyhow altogether basically essentially ideally hopefully unfortunately
    fortunately importantly notably interestingly
    yes not ok okay please thanks hi hello note
    use uses using used check checks run runs call calls makes made add adds set sets get gets got
    put keep keeps avoid prefer prefers ensure try tries see sees ask asks tell tells remember consider
    look find create update remove delete send save read write open close start stop include includes
    follow verify confirm show give take want wants know think says said say goes went
    met saw told asked added fixed learned noticed moved switched changed started stopped tried decided
    likes needed works worked failed returned requires required supports returns lives lived
    valid invalid direct alternative new old good bad best better worse worst main different similar
    important useful possible impossible available unavailable current previous recent default common
    general specific various certain full whole entire single multiple real true false correct incorrect
    wrong simple high low large small big long short early late little same each
    user users following together according including regarding given
    """.split()
)

# The rest of the baseline comes from a maintained English word-frequency source (wordfreq, whose word
# lists ship inside the package): the most frequent English words, minus the ones that are mostly names.
# wordfreq folds case, so "john" and "austin" rank like ordinary words; a name is told apart by being
# about as frequent in other Latin-script languages as in English (names and brands cross languages,
# "eventually" and "sadly" do not). A word is left out when, in at least _NAME_LANGUAGES_NEEDED of
# _NAME_CHECK_LANGUAGES, it is at least _NAME_FREQUENCY_RATIO as frequent as in English. Loanwords and
# cognates ("hotel", "personal") are left out with the names: that errs toward keeping them specific.
# Measured on the paraphrase sets under eval-data (benchmarks/coverage.py, coverage.baseline_* lines):
# size 10k / 25k / 30k / 40k makes 82 / 103 / 107 / 111 of 114 discourse openers ("Eventually",
# "Admittedly", "Conversely" ...) ordinary, while 1.7 / 4.0 / 4.6 / 5.4 % of the capitalised words those
# sets never write in lower case (mostly names, and demonyms such as "Albanian") would lose protection
# when they open a sentence; mid-sentence the baseline never applies. Ratio and language count: with
# 2 of 6 languages at 5 %, no name among a list of common given names, cities and brands is let in and
# no listed opener is left out; stricter settings drop openers, looser ones let names in.
FREQUENCY_BASELINE_SIZE = 30_000
_NAME_CHECK_LANGUAGES = ("ca", "es", "fr", "it", "nl", "pt")
_NAME_LANGUAGES_NEEDED = 2
_NAME_FREQUENCY_RATIO = 0.05
# Reviewed exclusions: never ordinary, even sentence-initially. Month and weekday names are specifics
# wherever they appear (May stays in the hand list as the modal verb; a May date is a date regardless),
# and the words the hand list leaves out on purpose stay out.
NEVER_COMMON_WORDS: frozenset[str] = frozenset(
    """
    january february march april june july august september october november december
    jan feb mar apr jun jul aug sep sept oct nov dec
    monday tuesday wednesday thursday friday saturday sunday mon tue tues wed thu thur thurs fri sat sun
    personal class benefit extended online office teams mark bill rose grace frank go rust swift make
    """.split()
)

# Stems of negative contractions ("Don't" splits into "Don" and "t"). Ordinary only when an apostrophe
# follows, so Don and Won as names keep their protection.
_CONTRACTION_STEMS = frozenset(
    "don doesn didn isn aren wasn weren won wouldn couldn shouldn hasn haven hadn mustn needn ain".split()
)

# English orthography capitalizes the pronoun in every position, so it is never evidence of a name.
_ORTHOGRAPHIC_CAPITALS = frozenset({"I"})

_MONTHS: dict[str, int] = {
    "january": 1,
    "february": 2,
    "march": 3,
    "april": 4,
    "may": 5,
    "june": 6,
    "july": 7,
    "august": 8,
    "september": 9,
    "october": 10,
    "november": 11,
    "december": 12,
    "jan": 1,
    "feb": 2,
    "mar": 3,
    "apr": 4,
    "jun": 6,
    "jul": 7,
    "aug": 8,
    "sep": 9,
    "sept": 9,
    "oct": 10,
    "nov": 11,
    "dec": 12,
}

# Word tokens: maximal runs of letters and digits (apostrophes split, so "Rocky's" yields "Rocky").
_WORD = re.compile(r"[^\W_]+")
# A word as a unit to keep: an identifier ending in a number keeps that number's thousands groups
# ("$US346,807" is one unit, the same as "$US346807"); compare them with _word_key.
_WORD_UNIT = re.compile(r"[^\W_]+(?:(?<=[0-9]),[0-9]{3}(?![0-9]))*")
# A number: an ASCII digit run with decimal points, time colons and thousands groups kept together.
# A comma followed by one or two digits is a decimal comma ("1,2 million"): one unit, compared as written.
_NUMBER = re.compile(r"(?<![0-9])[0-9]+(?:[.:][0-9]+|,[0-9]{3}(?![0-9])|,[0-9]{1,2}(?![0-9]))*")
_THOUSANDS = re.compile(r"[0-9]{1,3}(?:,[0-9]{3})+(?:\.[0-9]+)?")
# A number range is one unit ("30-60", "30 to 60", "between 30 and 60"): its two ends belong together, so
# "30-59" is not carried by a "30-60" in one place and a "59" in another.
_SP = r"[ \t\u00a0]"  # white space inside one line: dates and ranges do not continue on the next line
_NUM = r"[0-9]+(?:[.:][0-9]+|,[0-9]{3}(?![0-9])|,[0-9]{1,2}(?![0-9]))*"
_RANGE_END = r"(?![0-9]|[.,:/-][0-9])"
_RANGES = (
    re.compile(
        rf"(?<![0-9.,:/-])(?P<a>{_NUM})%?(?:{_SP}*[-–—]{_SP}*|{_SP}+(?:to|through|until|till){_SP}+)[$€£]?"
        rf"(?P<b>{_NUM}){_RANGE_END}"
    ),
    re.compile(rf"\b[Bb]etween{_SP}+[$€£]?(?P<a>{_NUM})%?{_SP}+and{_SP}+[$€£]?(?P<b>{_NUM}){_RANGE_END}"),
)

# Month names are recognised when written as a name (Title case or all capitals), not as "may" the verb.
_MONTH_ALTERNATION = "|".join(
    form for name in sorted(_MONTHS, key=len, reverse=True) for form in (name.capitalize(), name.upper())
)
_MONTH = rf"(?P<month>\b(?:{_MONTH_ALTERNATION})\b)\.?"
_DAY_AFTER_MONTH = r"(?P<day>[0-9]{1,2})(?:st|nd|rd|th)?(?![0-9]|[.,:][0-9]|[^\W_])"
_YEAR = r"(?P<year>[0-9]{4})(?![0-9])"
# Guard 1 of "Equivalent date spellings": the month must be adjacent to a day or a year.
# A date is written on one line: a month word ending one line and a number opening the next are not one.
_MONTH_FIRST = re.compile(
    rf"{_MONTH}(?:{_SP}+{_DAY_AFTER_MONTH}(?:{_SP}*,?{_SP}+{_YEAR})?|{_SP}*,?{_SP}+(?P<year_only>[0-9]{{4}})(?![0-9]))"
)
_DAY_FIRST = re.compile(
    rf"(?<![0-9.,:/])\b(?P<day>[0-9]{{1,2}})(?:st|nd|rd|th)?{_SP}+(?:of{_SP}+)?{_MONTH}(?:{_SP}*,?{_SP}+{_YEAR})?"
)
_ISO_DATE = re.compile(
    r"(?<![0-9.,:/-])(?P<year>[0-9]{4})(?P<sep>[-/])(?P<month>[0-9]{1,2})(?P=sep)(?P<day>[0-9]{1,2})(?![0-9])"
)
_SLASH_DATE = re.compile(r"(?<![0-9./])(?P<a>[0-9]{1,2})/(?P<b>[0-9]{1,2})/(?P<year>[0-9]{4})(?![0-9/])")

# Sentence-initial (spec: "A capitalized word is only evidence of a proper noun when it is not
# sentence-initial"): first word of the text or of a line, after a bullet or list marker, or after
# . ! ? : followed by white space. Opening quotes and brackets in between do not change that.
# At most one letter marker ("a. ", "B) "), so "J. R. R. Tolkien" opening a line is not three list markers.
_LINE_OPENING = re.compile(r"\s*(?:(?:[-*+•>#]+|[0-9]+[.)])\s+)*(?:[A-Za-z][.)]\s+)?[\"'“‘(\[*_]*$")
_AFTER_STOP = re.compile(r"(?P<stop>[.!?:])[\"'”’)\]*_]*\s+[\"'“‘(\[*_]*$")
_STOP_WINDOW = 16
# The period of an abbreviation is not a sentence end. Titles and Latin abbreviations precede more of the
# same sentence ("Dr. May", "Mr. Will Turner", "St. Paul", "e.g. Python"), and so does a single initial
# ("J. R. R. Tolkien"): the word after them is mid-sentence, whatever it is (rejection-biased).
_ABBREVIATIONS = ABBREVIATIONS
# These end a name or a figure as often as a sentence ("etc.", "Inc.", "5 p.m.", "the U.S."): the next
# word opens a new sentence only when it is common English ("etc. Then ...").
_AMBIGUOUS_ABBREVIATIONS = frozenset("etc inc ltd co corp bros llc plc a.m p.m no nos".split())
_DOTTED_INITIALS = DOTTED_INITIALS
_WORD_BEFORE_STOP = re.compile(r"(?<![^\W_])((?:[^\W\d_]\.)*[^\W\d_]+)$")

# Lower-case words joined to a neighbour by one of these are parts of identifiers (calendar-mcp,
# github.com/austin, api_key), not prose; they are not corpus evidence (rejection-biased choice).
_JOINERS = frozenset("-_/.@#:\\+=")


def _normalise_category(category: str) -> str:
    return "/".join(_category_segments(category))


def _category_segments(category: str) -> tuple[str, ...]:
    return tuple(part.strip().lower() for part in category.split("/") if part.strip())


@dataclass(frozen=True)
class CoverageVocabulary:
    extra_common_words: frozenset[str] = frozenset()  # lower-cased
    always_specific_words: frozenset[str] = frozenset()  # lower-cased
    numeric_exempt_categories: tuple[str, ...] = (BUILT_IN_NUMERIC_EXEMPT,)

    def __post_init__(self) -> None:
        # The built-in routing exemption cannot be removed, whoever constructs the vocabulary.
        listed = (_normalise_category(c) for c in self.numeric_exempt_categories)
        categories = tuple(dict.fromkeys(c for c in (BUILT_IN_NUMERIC_EXEMPT, *listed) if c))
        object.__setattr__(self, "numeric_exempt_categories", categories)
        object.__setattr__(self, "extra_common_words", frozenset(w.lower() for w in self.extra_common_words))
        object.__setattr__(self, "always_specific_words", frozenset(w.lower() for w in self.always_specific_words))

    def is_numeric_exempt(self, category: str) -> bool:
        """Segment-aware: ``anti-patterns/routing`` covers ``anti-patterns/routing/high-tier`` but not
        ``anti-patterns/routing-notes``. Categories compare case-insensitively; they are identifiers."""
        segments = _category_segments(category)
        for exempt in self.numeric_exempt_categories:
            prefix = _category_segments(exempt)
            if prefix and segments[: len(prefix)] == prefix:
                return True
        return False


BASELINE_VOCABULARY = CoverageVocabulary()


@dataclass(frozen=True)
class CoverageSource:
    content: str
    category: str


@dataclass(frozen=True)
class DateRef:
    """A calendar date as written; a month-name date may lack its day or its year."""

    month: int
    day: int | None
    year: int | None

    def credited_by(self, other: DateRef) -> bool:
        # Guard 2: a year in the source must be carried, identically, by the covering date; so must a day.
        # Extra precision in the covering date ("August 2026" -> "2026-08-19") drops nothing.
        return (
            other.month == self.month
            and (self.day is None or other.day == self.day)
            and (self.year is None or other.year == self.year)
        )


@dataclass(frozen=True)
class Specific:
    """One thing a merge must keep. ``text`` is the exact source string, reported when it is missing."""

    text: str
    kind: str  # "name" | "acronym" | "number" | "range" | "date"
    date: DateRef | None = None
    # False only for a Title-case word opening a sentence: its capital is positional, so "Deploy ..."
    # is kept by "... the deploy ...". Otherwise the merge must still write the word with a capital
    # ("IPHONE" keeps "iPhone", "will" does not keep Will), and a word listed in alwaysSpecificWords
    # in its exact case.
    case_sensitive: bool = True


@dataclass(frozen=True)
class CoverageResult:
    ok: bool
    missing: tuple[str, ...]  # exact source strings absent from the merged text; first-seen order, deduplicated
    specifics: tuple[str, ...]  # everything that was required; first-seen order, deduplicated


# --------------------------------------------------------------------------------------------------
# Vocabulary file
# --------------------------------------------------------------------------------------------------

_VOCAB_FIELDS = {
    "extraCommonWords": "extra_common_words",
    "alwaysSpecificWords": "always_specific_words",
    "numericExemptCategories": "numeric_exempt_categories",
}


def load_vocabulary(path: Path) -> tuple[CoverageVocabulary, str | None]:
    """Read merge-coverage-vocabulary.json; return the vocabulary and a warning, if any.

    Missing file -> the baseline, no warning. Unreadable or malformed file (bad JSON, a field that is
    not a list, an item that is not a single word / category) -> the baseline and a warning that names
    the file, the field and the fix: coverage checking is never disabled by bad config (spec:
    "Vocabulary is per-deployment"). An unknown key (usually a misspelt field) is reported with the
    field names; the known fields still apply, since falling back would also drop whatever
    alwaysSpecificWords the file does grant.
    """
    try:
        raw = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return BASELINE_VOCABULARY, None
    except (OSError, UnicodeDecodeError) as exc:
        return BASELINE_VOCABULARY, f"{path}: cannot be read ({exc}); using the built-in coverage vocabulary"

    def malformed(problem: str) -> tuple[CoverageVocabulary, str]:
        return (
            BASELINE_VOCABULARY,
            f"{path}: {problem}; using the built-in coverage vocabulary until it is fixed",
        )

    try:
        data = json.loads(raw)
    except json.JSONDecodeError as exc:
        return malformed(f"is not valid JSON ({exc.msg} at line {exc.lineno} column {exc.colno})")
    if not isinstance(data, dict):
        return malformed(
            'must be a JSON object like {"extraCommonWords": [...], "alwaysSpecificWords": [...], '
            '"numericExemptCategories": [...]}'
        )

    values: dict[str, list[str]] = {}
    for key, attr in _VOCAB_FIELDS.items():
        if key not in data:
            values[attr] = []
            continue
        items = data[key]
        if not isinstance(items, list):
            return malformed(f'field "{key}" must be a list of strings, got {type(items).__name__}')
        for index, item in enumerate(items):
            if not isinstance(item, str):
                return malformed(f'field "{key}" item {index} must be a string, got {json.dumps(item)}')
            text = item.strip()
            if key == "numericExemptCategories":
                if not _category_segments(text):
                    return malformed(
                        f'field "{key}" item {index} must be a category such as "metrics/cost", got {item!r}'
                    )
            elif not _WORD.fullmatch(text):
                return malformed(f'field "{key}" item {index} must be one word (letters and digits), got {item!r}')
        values[attr] = [item.strip() for item in items]

    vocab = CoverageVocabulary(
        extra_common_words=frozenset(values["extra_common_words"]),
        always_specific_words=frozenset(values["always_specific_words"]),
        numeric_exempt_categories=tuple(values["numeric_exempt_categories"]),
    )
    unknown = sorted(set(data) - set(_VOCAB_FIELDS))
    if unknown:
        return vocab, (
            f"{path}: unknown field(s) {', '.join(json.dumps(k) for k in unknown)} ignored; "
            f"the fields are {', '.join(_VOCAB_FIELDS)}"
        )
    return vocab, None


# --------------------------------------------------------------------------------------------------
# Extraction
# --------------------------------------------------------------------------------------------------


def lowercase_words(texts: Iterable[str]) -> set[str]:
    """Words the texts write in all-lowercase form, as standalone prose words (spec: "Corpus evidence
    beats position"). Parts of identifiers joined by -, _, /, . and the like are not counted."""
    words: set[str] = set()
    for text in texts:
        for match in _WORD.finditer(text):
            token = match.group()
            if token != token.lower() or token == token.upper():
                continue  # has a capital, or has no cased letter at all (digits)
            if _is_joined(text, match.start(), match.end()):
                continue
            words.add(token)
    return words


def _is_joined(text: str, start: int, end: int) -> bool:
    before = start >= 2 and text[start - 1] in _JOINERS and text[start - 2].isalnum()
    after = end + 1 < len(text) and text[end] in _JOINERS and text[end + 1].isalnum()
    return before or after


def _is_sentence_initial(text: str, start: int) -> bool:
    line_start = text.rfind("\n", 0, start) + 1
    if _LINE_OPENING.match(text, line_start, start):
        return True
    window_start = max(line_start, start - _STOP_WINDOW)
    stop = _AFTER_STOP.search(text, window_start, start)
    if stop is None:
        return False
    if stop.group("stop") != ".":
        return True
    before = _WORD_BEFORE_STOP.search(text, max(line_start, stop.start() - 24), stop.start())
    if before is None:
        return True
    abbreviation = before.group(1)
    lowered = abbreviation.lower()
    if lowered in _ABBREVIATIONS:
        return False
    if len(abbreviation) == 1 and abbreviation.isupper() and abbreviation not in _ORTHOGRAPHIC_CAPITALS:
        return False  # a single initial
    dotted_initials = len(lowered) > 1 and _DOTTED_INITIALS.fullmatch(lowered) is not None  # "U.S", "p.m"
    if lowered in _AMBIGUOUS_ABBREVIATIONS or dotted_initials:
        following = _WORD.match(text, start)
        return following is not None and _is_common_word(following.group().lower())
    return True


def _month_name_dates(text: str) -> list[tuple[int, int, DateRef]]:
    """(start, end, date) of every month-name date; where two readings overlap ("19 August 2026" is
    also "August 2026") the longer one wins."""
    found: list[tuple[int, int, DateRef]] = []
    for pattern in (_DAY_FIRST, _MONTH_FIRST):
        for m in pattern.finditer(text):
            month = _MONTHS[m.group("month").lower()]
            groups = m.groupdict()
            day = int(groups["day"]) if groups.get("day") else None
            year_text = groups.get("year") or groups.get("year_only")
            year = int(year_text) if year_text else None
            if _valid_date(year, month, day):
                found.append((m.start(), m.end(), DateRef(month, day, year)))
    return _non_overlapping(found)


def _numeric_dates(text: str) -> list[tuple[int, int, DateRef]]:
    found: list[tuple[int, int, DateRef]] = []
    for m in _ISO_DATE.finditer(text):
        year, month, day = int(m.group("year")), int(m.group("month")), int(m.group("day"))
        if _valid_date(year, month, day):
            found.append((m.start(), m.end(), DateRef(month, day, year)))
    for m in _SLASH_DATE.finditer(text):
        a, b, year = int(m.group("a")), int(m.group("b")), int(m.group("year"))
        # M/D/YYYY; read day-first only when the first part cannot be a month. An ambiguous 05/06/2026
        # is read one way only, so a merge that re-spells it the other way is rejected, not guessed at.
        month, day = (a, b) if a <= 12 else (b, a)
        if _valid_date(year, month, day):
            found.append((m.start(), m.end(), DateRef(month, day, year)))
    return _non_overlapping(found)


def _valid_date(year: int | None, month: int, day: int | None) -> bool:
    try:
        date(year if year is not None else 2000, month, day if day is not None else 1)  # 2000: leap year
    except ValueError:
        return False
    return True


def _non_overlapping(spans: list[tuple[int, int, DateRef]]) -> list[tuple[int, int, DateRef]]:
    kept: list[tuple[int, int, DateRef]] = []
    for span in sorted(spans, key=lambda s: -(s[1] - s[0])):
        if all(span[1] <= k[0] or span[0] >= k[1] for k in kept):
            kept.append(span)
    return sorted(kept, key=lambda s: s[0])


def _inside(start: int, end: int, spans: Sequence[tuple[int, int, object]]) -> bool:
    return any(s <= start and end <= e for s, e, _ in spans)


def _ranges(text: str, dates: Sequence[tuple[int, int, DateRef]] = ()) -> list[tuple[int, int, tuple[str, str]]]:
    """(start, end, (low, high)) of every number range outside a date; the ends normalised like numbers."""
    found: list[tuple[int, int, tuple[str, str]]] = []
    for pattern in _RANGES:
        for m in pattern.finditer(text):
            span = (m.start(), m.end())
            if any(span[0] < e and s < span[1] for s, e, _ in dates):
                continue
            if any(span[0] < e and s < span[1] for s, e, _ in found):
                continue
            found.append((span[0], span[1], (_normalise_number(m.group("a")), _normalise_number(m.group("b")))))
    return sorted(found, key=lambda r: r[0])


def _range_key(text: str) -> tuple[str, str] | None:
    found = _ranges(text)
    return found[0][2] if found else None


def _normalise_number(text: str) -> str:
    return text.replace(",", "") if _THOUSANDS.fullmatch(text) else text


def _word_kind(token: str) -> str:
    capitals = sum(ch.isupper() for ch in token)
    internal_capital = any(ch.isupper() for ch in token[1:]) and not token.isupper()
    has_digit = any(ch.isdigit() for ch in token)
    if capitals >= 2 or internal_capital or (has_digit and capitals) or not token[0].isupper():
        return "acronym"
    return "name"


def _is_title_case(token: str) -> bool:
    return token[0].isupper() and token[1:] == token[1:].lower() and not any(ch.isdigit() for ch in token)


def extract_specifics(
    source: CoverageSource, vocab: CoverageVocabulary, sibling_lowercase_words: set[str]
) -> list[Specific]:
    """Every specific in one source entry, in text order (duplicates kept).

    ``sibling_lowercase_words`` are the all-lowercase words of the merge's sources (this one included;
    see :func:`lowercase_words`): a capitalized word written lowercase there is ordinary language.
    """
    text = source.content
    exempt = vocab.is_numeric_exempt(source.category)
    word_dates = _month_name_dates(text)
    # Numeric dates are not recognised where a month-name date already is ("19 August 2026" has no
    # numeric date inside, but guard against overlaps all the same).
    number_dates = [d for d in _numeric_dates(text) if not any(_overlaps(d, w) for w in word_dates)]
    found: list[tuple[int, Specific]] = []

    for start, end, ref in word_dates:
        if exempt:
            # The numeric check is skipped, dates included, but the month word is still caught by the
            # capitalized-word pass — and may still be credited by the same date in numbers.
            found.append((start, Specific(_month_word(text, start, end), "name", ref)))
        else:
            # A month adjacent to a day or year is a date even when the word is in the baseline ("May")
            # or written lowercase elsewhere ("may"): protecting it is the rejection-biased reading.
            found.append((start, Specific(text[start:end], "date", ref)))
    if not exempt:
        for start, end, ref in number_dates:
            found.append((start, Specific(text[start:end], "date", ref)))

    all_dates = word_dates + number_dates
    ranges = _ranges(text, all_dates)
    if not exempt:
        for start, end, (low, high) in ranges:
            if sum(ch.isdigit() for ch in low) >= 2 or sum(ch.isdigit() for ch in high) >= 2:
                found.append((start, Specific(text[start:end], "range")))
    for m in _WORD_UNIT.finditer(text):
        token = m.group()
        if token.islower() or not any(ch.isupper() for ch in token):
            continue
        if token.lower() in _MONTHS and _inside(m.start(), m.end(), word_dates):
            continue  # the month of a month-name date: covered by the date specific above
        if _is_ordinary(token, text, m.start(), vocab, sibling_lowercase_words):
            continue
        positional = (
            _is_title_case(token)
            and token.lower() not in vocab.always_specific_words
            and _is_sentence_initial(text, m.start())
        )
        found.append((m.start(), Specific(token, _word_kind(token), case_sensitive=not positional)))

    if not exempt:
        for m in _NUMBER.finditer(text):
            if sum(ch.isdigit() for ch in m.group()) < 2 or _inside(m.start(), m.end(), all_dates):
                continue
            if _inside(m.start(), m.end(), ranges):
                continue  # one end of a range: the range is the unit
            found.append((m.start(), Specific(m.group(), "number")))

    found.sort(key=lambda item: item[0])
    return [specific for _, specific in found]


def _month_word(text: str, start: int, end: int) -> str:
    match = re.search(_MONTH, text[start:end])
    return match.group("month") if match else text[start:end]


def _overlaps(a: tuple[int, int, DateRef], b: tuple[int, int, DateRef]) -> bool:
    return a[0] < b[1] and b[0] < a[1]


def _is_common_word(lowered: str) -> bool:
    """In the built-in generic-English baseline (which applies sentence-initially only)."""
    return lowered in BASELINE_COMMON_WORDS or lowered in frequency_baseline()


#: The wordfreq part of the baseline as shipped with the package: build_frequency_baseline(FREQUENCY_BASELINE_SIZE),
#: one word a line after a header of "#" lines. wordfreq itself (60 MB of word lists in many languages) is needed only
#: to rebuild it (write_frequency_baseline; the test and bench extras have it).
FREQUENCY_BASELINE_FILE = "frequency_baseline.txt"
_FREQUENCY_BASELINE_HEADER = """\
# The frequency part of dream_assets' generic-English baseline (dream_assets/text/coverage.py: build_frequency_baseline
# at FREQUENCY_BASELINE_SIZE): the most frequent English words that are not mostly names, one a line, sorted.
# Derived from the word lists of wordfreq {version} (Robyn Speer, https://github.com/rspeer/wordfreq), whose data is
# under CC BY-SA 4.0 (https://creativecommons.org/licenses/by-sa/4.0/), and so is this list. wordfreq's data credits
# Google Books Ngrams (http://books.google.com/ngrams), the Leeds Internet Corpus, Wikipedia, ParaCrawl, OPUS
# OpenSubtitles 2018 (OpenSubtitles, http://www.opensubtitles.org/), Twitter, and the SUBTLEX word lists by Marc
# Brysbaert et al., which are freely available data (http://crr.ugent.be/programs-data/subtitle-frequencies).
# Rebuilt by dream_assets.text.coverage.write_frequency_baseline() (needs wordfreq).
"""


@functools.cache
def frequency_baseline() -> frozenset[str]:
    """The wordfreq part of the baseline, read from the packaged list once per process on first use."""
    text = importlib.resources.files(__package__).joinpath(FREQUENCY_BASELINE_FILE).read_text(encoding="utf-8")
    return frozenset(line for line in text.splitlines() if line and not line.startswith("#"))


def frequency_baseline_text(words: Iterable[str], version: str) -> str:
    """The packaged list's text for ``words``, built from wordfreq ``version``."""
    return _FREQUENCY_BASELINE_HEADER.format(version=version) + "".join(f"{w}\n" for w in sorted(words))


def write_frequency_baseline(path: Path | None = None) -> Path:
    """Rebuild the packaged list (at ``path``; default: beside this module) from the installed wordfreq."""
    from importlib.metadata import version

    target = path or Path(__file__).with_name(FREQUENCY_BASELINE_FILE)
    text = frequency_baseline_text(build_frequency_baseline(FREQUENCY_BASELINE_SIZE), version("wordfreq"))
    target.write_text(text, encoding="utf-8")
    return target


def build_frequency_baseline(
    size: int,
    languages: Sequence[str] = _NAME_CHECK_LANGUAGES,
    languages_needed: int = _NAME_LANGUAGES_NEEDED,
    ratio: float = _NAME_FREQUENCY_RATIO,
) -> frozenset[str]:
    """The ``size`` most frequent English words (letters only) that are not mostly names; see
    FREQUENCY_BASELINE_SIZE. Reads wordfreq's packaged lists directly so none of them stays cached. Needs wordfreq,
    which the base install leaves out (the shipped list is frequency_baseline())."""
    import math

    from dream_assets.extras import require

    wordfreq = require("wordfreq", "bench", "building the frequency baseline from word lists")

    lists = wordfreq.available_languages("large")
    english: dict[str, int] = {}  # word -> centibels below certainty (its rank bucket)
    for centibels, bucket in enumerate(wordfreq.read_cBpack(lists["en"])):
        for word in bucket:
            if word.isalpha() and (len(word) > 1 or word == "a") and word not in NEVER_COMMON_WORDS:
                english[word] = centibels
        if len(english) >= size:
            break
    margin = 100 * math.log10(1 / ratio)  # "at least ``ratio`` as frequent", in centibels
    crossings = dict.fromkeys(english, 0)
    deepest = max(english.values(), default=0) + margin
    for language in languages:
        for centibels, bucket in enumerate(wordfreq.read_cBpack(lists[language])):
            if centibels > deepest:
                break
            for word in bucket:
                home = english.get(word)
                if home is not None and centibels <= home + margin:
                    crossings[word] += 1
    return frozenset(word for word, count in crossings.items() if count < languages_needed)


def _is_ordinary(token: str, text: str, start: int, vocab: CoverageVocabulary, siblings: set[str]) -> bool:
    lowered = token.lower()
    if lowered in vocab.always_specific_words:
        return False  # wins over the baseline, extraCommonWords and corpus evidence
    if token in _ORTHOGRAPHIC_CAPITALS:
        return True
    if lowered in vocab.extra_common_words:
        return True  # an explicit, corpus-specific judgement: every position
    if lowered in siblings:
        return True  # corpus evidence beats position
    # The baseline is generic English no operator chose: sentence-initial only, and only for a word
    # written as an ordinary capitalized word — "IT" or "US" in capitals stays an acronym.
    end = start + len(token)
    common = _is_common_word(lowered) or (lowered in _CONTRACTION_STEMS and text[end : end + 1] in ("'", "’"))
    return common and _is_title_case(token) and _is_sentence_initial(text, start)


# --------------------------------------------------------------------------------------------------
# Coverage
# --------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class _MergedText:
    text: str
    words: frozenset[str]
    lowered_words: frozenset[str]
    # Lower-cased forms of the words written with at least one capital: what still reads as a name.
    capitalised_words: frozenset[str]
    numbers: frozenset[str]
    ranges: frozenset[tuple[str, str]]
    dates: tuple[DateRef, ...]

    @classmethod
    def of(cls, text: str) -> _MergedText:
        spans = _month_name_dates(text) + _numeric_dates(text)
        words = [_word_key(m.group()) for m in _WORD_UNIT.finditer(text)]
        return cls(
            text=text,
            words=frozenset(words),
            lowered_words=frozenset(w.lower() for w in words),
            capitalised_words=frozenset(w.lower() for w in words if w != w.lower()),
            numbers=frozenset(_normalise_number(m.group()) for m in _NUMBER.finditer(text)),
            ranges=frozenset(key for _, _, key in _ranges(text, spans)),
            dates=tuple(ref for _, _, ref in spans),
        )

    def covers(self, specific: Specific, vocab: CoverageVocabulary) -> bool:
        if specific.date is not None and any(specific.date.credited_by(d) for d in self.dates):
            return True
        if specific.kind == "number":
            return _normalise_number(specific.text) in self.numbers
        if specific.kind == "range":
            return _range_key(specific.text) in self.ranges
        if specific.kind == "date":
            # The exact spelling, as a whole phrase (not "August 19" inside "August 190"), wrapped across lines or not.
            spelling = r"\s+".join(re.escape(part) for part in specific.text.split())
            return re.search(rf"(?<![^\W_]){spelling}(?![^\W_])", self.text) is not None
        key = _word_key(specific.text)
        lowered = key.lower()
        if lowered in vocab.always_specific_words:
            return key in self.words  # the operator's listed words keep their exact case
        if not specific.case_sensitive:
            return lowered in self.lowered_words  # the capital was only positional
        # A name or acronym is kept by the same word in another case as long as it is still written as a
        # name ("iPhone" by "IPHONE" or "Iphone"), not by the all-lowercase word ("Will" is not "will").
        return lowered in self.capitalised_words


@functools.lru_cache(maxsize=16)
def _merged_text(text: str) -> _MergedText:
    # Checking many entries against one long text (every other live entry) indexes that text once.
    return _MergedText.of(text)


def check_merge_coverage(
    sources: Sequence[CoverageSource], merged_text: str, vocab: CoverageVocabulary
) -> CoverageResult:
    """Whether ``merged_text`` keeps every specific of every source. ``missing`` lists the exact source
    strings it dropped, which is what a repair call is asked to put back (spec: "A rejected merge gets
    one repair attempt")."""
    siblings = lowercase_words(source.content for source in sources)
    merged = _merged_text(merged_text)
    required: dict[str, None] = {}
    missing: dict[str, None] = {}
    for source in sources:
        for specific in extract_specifics(source, vocab, siblings):
            required.setdefault(specific.text)
            if not merged.covers(specific, vocab):
                missing.setdefault(specific.text)
    return CoverageResult(ok=not missing, missing=tuple(missing), specifics=tuple(required))


def specifics_of(
    text: str, category: str = "general", vocab: CoverageVocabulary = BASELINE_VOCABULARY
) -> list[Specific]:
    """Every specific of one text on its own, in text order (duplicates kept): the text's own lower-case
    words are its corpus evidence. For comparing entries outside a merge (removal guard, save-time dedup)."""
    return extract_specifics(CoverageSource(text, category), vocab, lowercase_words([text]))


@dataclass(frozen=True)
class _SourcePool:
    """Everything the sources write, whether or not it is a specific there: what can carry a merged one."""

    words: frozenset[str]  # lower-cased
    exact_words: frozenset[str]
    numbers: frozenset[str]
    ranges: frozenset[tuple[str, str]]
    dates: tuple[DateRef, ...]

    @classmethod
    def of(cls, texts: Sequence[str]) -> _SourcePool:
        words: set[str] = set()
        numbers: set[str] = set()
        ranges: set[tuple[str, str]] = set()
        dates: list[DateRef] = []
        for text in texts:
            words.update(_word_key(m.group()) for m in _WORD_UNIT.finditer(text))
            numbers.update(_normalise_number(m.group()) for m in _NUMBER.finditer(text))
            spans = _month_name_dates(text) + _numeric_dates(text)
            dates.extend(ref for _, _, ref in spans)
            ranges.update(key for _, _, key in _ranges(text, spans))
        return cls(
            frozenset(w.lower() for w in words),
            frozenset(words),
            frozenset(numbers),
            frozenset(ranges),
            tuple(dates),
        )

    def carries(self, specific: Specific, vocab: CoverageVocabulary) -> bool:
        if specific.date is not None:
            if specific.kind != "date":
                # A month word in a numeric-exempt merge: the month itself is what must come from a source.
                return specific.text.lower() in self.words or any(d.month == specific.date.month for d in self.dates)
            # The same date in any spelling, with nothing stated that no source date states (a year added
            # to a source's "August 19" is invented).
            return any(specific.date.credited_by(d) for d in self.dates)
        if specific.kind == "number":
            return _normalise_number(specific.text) in self.numbers
        if specific.kind == "range":
            return _range_key(specific.text) in self.ranges
        if specific.kind == "date":
            return False  # a date spelling that parses to nothing no source date credits
        key = _word_key(specific.text)
        if key.lower() in vocab.always_specific_words:
            return key in self.exact_words  # "Will" is not carried by "will" when Will is listed
        return any(form in self.words for form in _word_forms(key.lower()))


def _word_key(token: str) -> str:
    return token.replace(",", "")


def _word_forms(lowered: str) -> tuple[str, ...]:
    """The word and its plural / singular ("API" is carried by "APIs", "IDs" by "ID")."""
    forms = [lowered, lowered + "s", lowered + "es"]
    if lowered.endswith("es") and len(lowered) > 3:
        forms.append(lowered[:-2])
    if lowered.endswith("s") and len(lowered) > 2:
        forms.append(lowered[:-1])
    return tuple(forms)


def invented_specifics(
    sources: Sequence[CoverageSource], merged_text: str, vocab: CoverageVocabulary
) -> tuple[str, ...]:
    """The specifics the merged text states that no source carries: a swapped figure, a wrong year, a new
    name. Exact merged-text strings, first-seen order, deduplicated; empty when the merge invents nothing.

    Each specific of the merged text is judged as the unit it is in its own sentence — a number with its
    decimals, time colons and thousands groups, a number range ("30-59", "30 to 59", "between 30 and
    59"), a date — so a "30-60" elsewhere (in the merged text or in a source) does not excuse "30-59", and
    a "19" and a "2026" scattered through the sources do not excuse "August 19, 2026". What carries it:

    * a number: the same number anywhere in a source, thousands separators aside ("1200" = "1,200"),
      including as the end of a range or the part of a date;
    * a range: a source range with the same two ends, in any of the range spellings;
    * a date: a source date, in any spelling, that states everything the merged date states (month, and
      the day and year where the merged date has them): "2026-08-19" is carried by "August 19, 2026";
      "August 19, 2026" is not carried by "August 19";
    * a name or acronym: the same word in any case in a source ("Deploy" by "deploy", "IPHONE" by
      "iPhone"), or its plural / singular; a word in alwaysSpecificWords only in its exact case.

    Sentence-opening capitals, the common-word baseline and extraCommonWords make a merged word ordinary,
    exactly as they do for a source (corpus evidence is the sources' lower-case words). Single-digit
    numbers are not specifics here either.

    Numeric-exempt categories: when every source is in one, numbers and numeric dates are skipped here
    too — those figures are recomputed every cycle, so the merge may carry a newer value no source has;
    a month word still has to come from a source. When any source is outside the exemption, numbers are
    checked (the rejection-biased reading).
    """
    exempt = bool(sources) and all(vocab.is_numeric_exempt(source.category) for source in sources)
    if exempt:
        category = sources[0].category
    else:
        category = next((s.category for s in sources if not vocab.is_numeric_exempt(s.category)), "general")
        if vocab.is_numeric_exempt(category):
            category = ""  # no category at all is never exempt
    siblings = lowercase_words(source.content for source in sources)
    pool = _SourcePool.of([source.content for source in sources])
    invented: dict[str, None] = {}
    for specific in extract_specifics(CoverageSource(merged_text, category), vocab, siblings):
        if not pool.carries(specific, vocab):
            invented.setdefault(specific.text)
    return tuple(invented)


# --------------------------------------------------------------------------------------------------
# Content: the words between the specifics
# --------------------------------------------------------------------------------------------------

# A source sentence is judged when it has at least CONTENT_MIN_WORDS content stems, and kept when at least
# CONTENT_KEPT_SHARE of them are stems of the merged text. Measured on the paraphrase sets under eval-data
# (benchmarks/coverage.py, coverage.content_* lines; --content-sweep for other shares): a merge that keeps every
# source sentence, verbatim, re-cased, re-punctuated, re-ordered or with dates and thousands re-spelled, keeps
# every stem, so it is never rejected at any share (0 % of 144,211 on all 21,607 pairs). At 0.7, 99.5 % of
# dropped sentences without a name, number or date and 97.5 % / 96.0 % of sentences rewritten down to the first /
# last half of their words are caught. On --quick, 0.6 catches 88 % / 67 % of the halved ones against 99 % / 98 %
# at 0.7, and 0.8 no more than 0.7. The price: a paraphrase put in place of a source sentence (a model's light
# rewording, built from the sets' own paraphrase pairs) is rejected 24 % of the time at 0.7 (--quick: 19 % at 0.6,
# 35 % at 0.7, 47 % at 0.8) and goes to the repair call, which restores the sentence. Two content stems are
# enough to judge a sentence ("A man is speaking."): with three, 6 % of dropped short sentences went unseen.
CONTENT_KEPT_SHARE = 0.7
CONTENT_MIN_WORDS = 2

_CALENDAR_WORDS = frozenset(_MONTHS) | frozenset(
    "monday tuesday wednesday thursday friday saturday sunday mon tue tues wed thu thur thurs fri sat sun".split()
)


def content_sentences(text: str) -> list[str]:
    """The sentences of ``text`` (text/sentences.py: a line break ends one; so does . ! or ? before white space,
    except the period of an abbreviation or an initial: "Dr. May", "J. R. R. Tolkien", "e.g. Python")."""
    return split_sentences(text)


def content_stems(text: str) -> frozenset[str]:
    """The stems that carry a sentence's content: content words (tokens.py's tokenizer and stemmer, stopwords
    out), less framing words ("said again", "mentioned"), numbers and calendar words. Numbers and dates are the
    specifics check's business, in any spelling; here "2026-08-19" and "19 August 2026" must not differ."""
    return (
        frozenset(
            stem(t) for t in content_token_list(text) if not any(c.isdigit() for c in t) and t not in _CALENDAR_WORDS
        )
        - FRAMING_WORDS
    )


def content_kept_share(source_sentence: str, merged_text: str) -> float:
    """The share of ``source_sentence``'s content stems that are stems of ``merged_text`` (1.0 when it has none)."""
    own = content_stems(source_sentence)
    if not own:
        return 1.0
    merged = _merged_stems(merged_text)
    return len(own & merged) / len(own)


@functools.lru_cache(maxsize=16)
def _merged_stems(text: str) -> frozenset[str]:
    return frozenset(stem(t) for t in tokenize(text))


def dropped_content(
    sources: Sequence[CoverageSource] | Sequence[str],
    merged_text: str,
    *,
    threshold: float = CONTENT_KEPT_SHARE,
    min_words: int = CONTENT_MIN_WORDS,
) -> tuple[str, ...]:
    """The source sentences whose content is not substantially in ``merged_text``: sentences with at least
    ``min_words`` content stems of which less than ``threshold`` are stems of the merged text (word order and
    inflection aside). Exact source sentences, first-seen order, deduplicated; empty when nothing was dropped.
    Whatever a sentence's words, its names, numbers and dates are :func:`check_merge_coverage`'s to require."""
    merged = _merged_stems(merged_text)
    dropped: dict[str, None] = {}
    for source in sources:
        text = source.content if isinstance(source, CoverageSource) else str(source)
        for sentence in content_sentences(text):
            own = content_stems(sentence)
            if len(own) < max(1, min_words):
                continue
            if len(own & merged) < threshold * len(own):
                dropped.setdefault(sentence)
    return tuple(dropped)
