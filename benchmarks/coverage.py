"""Merge coverage check on public paraphrase sets (text nobody on this project wrote).

Each sentence pair (PAWS-Wiki, MRPC, SICK, STS-B, read in place from ../shared/eval-data) is a two-source
"merge". Content-preserving merges are built from the pair (both sentences, in either order, with a date
re-spelled, thousands separators changed, or the second sentence's opener lower-cased after a
semicolon) and must never be rejected; merges that drop something are built by leaving sentence 2 out,
or by deleting one name, one number or one date of sentence 2, and must be rejected. What "sentence 2
carries a specific sentence 1 lacks" means is decided by an independent reference below, which never
calls the code under test: a token with a capital that does not open a sentence and that neither
sentence writes in all-lowercase, or a number with two or more digits. A word that opens a sentence is
never a specific to the reference, so sentence-opening common English (the wordfreq baseline) is not
either.

Prints one JSON object per line, {"name", "n", "value", "unit"}:

* coverage.preserving_merge_rejection_rate — merged = s1 + s2; target 0.
* coverage.preserving_reordered_rejection_rate — s2 + s1; target 0.
* coverage.preserving_iso_date_rejection_rate — full dates re-spelled as ISO (and ISO as month names).
* coverage.preserving_thousands_rejection_rate — thousands separators added or removed.
* coverage.preserving_recapitalised_rejection_rate — "s1; s2" with s2's ordinary opener lower-cased.
* coverage.dropped_source_catch_rate — merged = s1 alone where s2 carries a specific s1 lacks; >= 99.
* coverage.dropped_name_catch_rate / dropped_number_catch_rate / dropped_date_catch_rate — s1 + s2 with
  one name / number / date of s2 (one s1 lacks) deleted; >= 99.
* coverage.redundant_drop_rejection_rate — s1 alone where the reference finds nothing missing
  (informational: the check also counts ranges and dates as units, which the reference does not).
* coverage.invented_number_flag_rate / invented_year_flag_rate — s1 + s2 with one number / year of s2
  altered; the altered value must be reported by invented_specifics; target 100.
* coverage.invented_false_flag_rate — invented_specifics on every content-preserving merge; target 0.
* coverage.content_* — the content check (dropped_content), which guards the words between the specifics:
  content_preserving_rejection_rate (every preserving merge above, plus the merge lower-cased and the two
  sentences joined into one; target 0); content_dropped_sentence_catch_rate (sources s1 and a sentence b of
  another row that has no name, number or date; merge = s1 alone; target >= 99);
  content_halved_catch_rate / content_halved_tail_catch_rate (merge = s1 + the first / last half of b's words);
  informational: content_reworded_rejection_rate (a light rewording: sources s1 and b, merge = s1 + b' where
  (b, b') is a pair the set labels a paraphrase), content_paraphrase_drop_rejection_rate and
  content_nonparaphrase_drop_rejection_rate (sources s1 and s2 of one pair, merge = s1 alone). --content-sweep
  repeats them at other shares, suffixed @share.
* coverage.baseline_* — the word-frequency baseline: size, build time, share of discourse openers it
  makes ordinary, share of the corpus's names it would make ordinary when they open a sentence.
* coverage.check_throughput / invented_throughput — calls per CPU second on two-source merges (PAWS-Wiki);
  coverage.guard_throughput — one entry checked against the joined text of 1,000 entries.

Misses are listed on stderr. Usage:
  .venv/bin/python benchmarks/coverage.py [--quick] [--data DIR] [--sweep 10000,25000,40000]
                                          [--content-sweep 0.6,0.7,0.8]
"""

from __future__ import annotations

import argparse
import json
import re
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

from dream_assets.text.coverage import (
    BASELINE_COMMON_WORDS,
    BASELINE_VOCABULARY,
    CONTENT_KEPT_SHARE,
    FREQUENCY_BASELINE_SIZE,
    CoverageSource,
    build_frequency_baseline,
    check_merge_coverage,
    dropped_content,
    invented_specifics,
)

DEFAULT_DATA = Path(__file__).resolve().parents[2] / "shared" / "eval-data"
QUICK_PAIRS_PER_FILE = 250
MISSES_SHOWN = 5

# --------------------------------------------------------------------------------------------------
# Reading the sets (in place; nothing is copied)
# --------------------------------------------------------------------------------------------------


def _rows(path: Path, encoding: str = "utf-8") -> Iterator[list[str]]:
    with path.open(encoding=encoding) as handle:
        for line in handle:
            yield line.rstrip("\r\n").split("\t")


def _is_paraphrase(name: str, row: list[str]) -> bool:
    """The set's own paraphrase judgement (each folder's SOURCE.md): MRPC and PAWS label 1, STS-B score >= 4,
    SICK relatedness >= 4 with ENTAILMENT."""
    try:
        if name == "mrpc":
            return row[0] == "1"
        if name == "paws":
            return row[3].strip() == "1"
        if name == "stsb":
            return float(row[4]) >= 4.0
        if name == "sick":
            return float(row[3]) >= 4.0 and row[4].strip().upper() == "ENTAILMENT"
    except (IndexError, ValueError):
        return False
    return False


def read_labelled(root: Path, limit: int | None) -> dict[str, list[tuple[str, str, bool]]]:
    """name -> (sentence 1, sentence 2, is a paraphrase) rows; each file's column layout is in its folder's
    SOURCE.md."""
    layout: dict[str, list[tuple[str, str, int, int]]] = {
        "paws": [("paws-wiki/dev.tsv", "utf-8", 1, 2)],
        "mrpc": [
            ("mrpc/msr_paraphrase_test.txt", "utf-8-sig", 3, 4),
            ("mrpc/msr_paraphrase_train.txt", "utf-8-sig", 3, 4),
        ],
        "sick": [("sick/SICK_test_annotated.txt", "utf-8", 1, 2)],
        "stsb": [("stsb/sts-dev.csv", "utf-8", 5, 6), ("stsb/sts-test.csv", "utf-8", 5, 6)],
    }
    sets: dict[str, list[tuple[str, str, bool]]] = {}
    for name, files in layout.items():
        pairs: list[tuple[str, str, bool]] = []
        for relative, encoding, a, b in files:
            path = root / relative
            if not path.exists():
                continue
            taken = 0
            for row in _rows(path, encoding):
                if len(row) > max(a, b) and row[a].strip() and row[b].strip():
                    if name == "mrpc" and row[0] not in ("0", "1"):
                        continue  # a header line, if a copy has one
                    pairs.append((row[a], row[b], _is_paraphrase(name, row)))
                    taken += 1
                    if limit is not None and taken >= limit:
                        break
        if pairs:
            sets[name] = pairs
    return sets


def read_sets(root: Path, limit: int | None) -> dict[str, list[tuple[str, str]]]:
    """name -> (sentence 1, sentence 2) pairs."""
    return {name: [(a, b) for a, b, _ in rows] for name, rows in read_labelled(root, limit).items()}


# --------------------------------------------------------------------------------------------------
# The independent reference
# --------------------------------------------------------------------------------------------------

_TOKEN = re.compile(r"[^\W_]+")
_REF_NUMBER = re.compile(r"(?<![0-9])[0-9]+(?:[.,:][0-9]+)*")
_MONTH_NAMES = ("January February March April May June July August September October November December").split()
_MONTH_NUMBER = {name: i + 1 for i, name in enumerate(_MONTH_NAMES)}
_MONTH_NUMBER.update({name[:3]: i + 1 for i, name in enumerate(_MONTH_NAMES)})
_MONTH_NUMBER["Sept"] = 9
_MONTH_WORD = "|".join(sorted(_MONTH_NUMBER, key=len, reverse=True))
_M = rf"(?P<{{}}>(?:{_MONTH_WORD}))\b\.?"
# Dates as the reference reads them: month word with a day and/or year (either order), or ISO.
_REF_DATE = re.compile(
    rf"\b(?:{_M.format('m1')}\s+(?P<d1>[0-9]{{1,2}})(?:st|nd|rd|th)?\b(?:\s*,?\s+(?P<y1>[0-9]{{4}})\b)?"
    rf"|(?P<d2>[0-9]{{1,2}})(?:st|nd|rd|th)?\s+(?:of\s+)?{_M.format('m2')}(?:\s*,?\s+(?P<y2>[0-9]{{4}})\b)?"
    rf"|{_M.format('m3')}\s*,?\s+(?P<y3>[0-9]{{4}})\b"
    rf"|(?P<y4>[0-9]{{4}})-(?P<m4>[0-9]{{2}})-(?P<d4>[0-9]{{2}})\b)"
)
_FULL_DATE = re.compile(
    rf"\b(?:(?P<m1>{'|'.join(_MONTH_NAMES)})\s+(?P<d1>[0-9]{{1,2}})\s*,?\s+(?P<y1>[0-9]{{4}})"
    rf"|(?P<d2>[0-9]{{1,2}})\s+(?P<m2>{'|'.join(_MONTH_NAMES)})\s*,?\s+(?P<y2>[0-9]{{4}}))\b"
)
_ISO = re.compile(r"\b(?P<y>[0-9]{4})-(?P<m>[0-9]{2})-(?P<d>[0-9]{2})\b")
_YEAR = re.compile(r"(?<![0-9.,:])(?:1[0-9]{3}|20[0-9]{2})(?![0-9]|[.,:][0-9])")
_FUNCTION_WORDS = frozenset(
    "the a an this that these those it he she they we there in on at after before when while during his her "
    "their its our some many most both all one two three as by for from with since however according".split()
)

RefDate = tuple[int, int | None, int | None]  # month, day, year


def reference_dates(text: str) -> list[tuple[int, int, RefDate]]:
    found = []
    for m in _REF_DATE.finditer(text):
        g = m.groupdict()
        if g["m4"]:
            month, day, year = int(g["m4"]), int(g["d4"]), int(g["y4"])
        else:
            word = g["m1"] or g["m2"] or g["m3"]
            month = _MONTH_NUMBER[word]
            day_text = g["d1"] or g["d2"]
            year_text = g["y1"] or g["y2"] or g["y3"]
            day = int(day_text) if day_text else None
            year = int(year_text) if year_text else None
        if 1 <= month <= 12 and (day is None or 1 <= day <= 31):
            found.append((m.start(), m.end(), (month, day, year)))
    return found


def _date_carried(date: RefDate, others: list[RefDate]) -> bool:
    month, day, year = date
    return any(o[0] == month and (day is None or o[1] == day) and (year is None or o[2] == year) for o in others)


def _opens_sentence(text: str, start: int) -> bool:
    prefix = text[:start]
    line = prefix[prefix.rfind("\n") + 1 :]
    stripped = line.rstrip(" \t\"'`([{“‘")
    return not stripped or stripped[-1] in ".!?:"


def _lowercase_words(*texts: str) -> set[str]:
    return {t for text in texts for t in _TOKEN.findall(text) if t == t.lower() and not t.isdigit()}


def reference_names(text: str, evidence: set[str]) -> list[tuple[int, str]]:
    names: list[tuple[int, str]] = []
    for m in _TOKEN.finditer(text):
        token = m.group()
        if token == "I" or token.isdigit() or not any(ch.isupper() for ch in token):
            continue
        if _opens_sentence(text, m.start()) or token.lower() in evidence:
            continue
        names.append((m.start(), token))
    return names


def _norm(number: str) -> str:
    return number.replace(",", "")


def reference_numbers(text: str) -> list[tuple[int, str]]:
    return [(m.start(), m.group()) for m in _REF_NUMBER.finditer(text) if sum(ch.isdigit() for ch in m.group()) >= 2]


def _months_written(text: str) -> set[int]:
    return {_MONTH_NUMBER[t] for t in _TOKEN.findall(text) if t in _MONTH_NUMBER} | {
        d[0] for _, _, d in reference_dates(text)
    }


def lacks(s1: str, s2: str) -> tuple[list[str], list[str], list[tuple[int, int, str]]]:
    """Names, numbers and date phrases of sentence 2 that sentence 1 does not carry: names in any case (a
    month word by any spelling of that month), numbers outside dates by value, dates by what they state."""
    evidence = _lowercase_words(s1, s2)
    s1_words = {t.lower() for t in _TOKEN.findall(s1)}
    s1_numbers = {_norm(n) for _, n in reference_numbers(s1)}
    s1_dates = [d for _, _, d in reference_dates(s1)]
    s1_months = _months_written(s1)
    s2_dates = reference_dates(s2)

    def in_date(position: int) -> bool:
        return any(a <= position < b for a, b, _ in s2_dates)

    names = []
    for position, name in reference_names(s2, evidence):
        if name in _MONTH_NUMBER:
            if in_date(position) or _MONTH_NUMBER[name] in s1_months:
                continue  # judged as part of its date, or the month is written in sentence 1
        elif name.lower() in s1_words:
            continue
        names.append(name)
    numbers = [n for position, n in reference_numbers(s2) if not in_date(position) and _norm(n) not in s1_numbers]
    dates = [(a, b, s2[a:b]) for a, b, d in s2_dates if not _date_carried(d, s1_dates)]
    return list(dict.fromkeys(names)), list(dict.fromkeys(numbers)), dates


def _delete(text: str, needle: str, number: bool = False) -> str:
    if number:  # digit-bounded: "11" goes from "11th" and from "uBR7246VXR" alike
        pattern = re.compile(rf"(?<![0-9]){re.escape(needle)}(?![0-9]|[.,:][0-9])")
    else:
        pattern = re.compile(rf"(?<![^\W_]){re.escape(needle)}(?![^\W_])", re.IGNORECASE)
    return re.sub(r"[ \t]{2,}", " ", pattern.sub("", text))


# --------------------------------------------------------------------------------------------------
# Content-preserving variants
# --------------------------------------------------------------------------------------------------


def iso_respelled(text: str) -> str:
    def to_iso(m: re.Match[str]) -> str:
        month = m.group("m1") or m.group("m2")
        day = int(m.group("d1") or m.group("d2"))
        year = m.group("y1") or m.group("y2")
        return f"{year}-{_MONTH_NAMES.index(month) + 1:02d}-{day:02d}"

    def to_words(m: re.Match[str]) -> str:
        month = int(m.group("m"))
        return f"{_MONTH_NAMES[month - 1]} {int(m.group('d'))}, {m.group('y')}" if 1 <= month <= 12 else m.group()

    return _ISO.sub(to_words, _FULL_DATE.sub(to_iso, text))


def thousands_respelled(text: str) -> str:
    def swap(m: re.Match[str]) -> str:
        number = m.group()
        if re.fullmatch(r"[0-9]{1,3}(?:,[0-9]{3})+", number):
            return number.replace(",", "")
        if re.fullmatch(r"[0-9]{5,}", number):
            return f"{int(number):,}"
        return number

    return re.sub(r"(?<![0-9.,:])[0-9][0-9,]*[0-9](?![0-9]|[.:][0-9])", swap, text)


def recapitalised(s1: str, s2: str) -> str | None:
    """'s1; s2' with s2's opening word lower-cased, when that word is ordinary by the reference's lights."""
    m = _TOKEN.search(s2)
    if m is None or not m.group()[0].isupper() or m.group()[1:] != m.group()[1:].lower():
        return None
    word = m.group().lower()
    rest = s2[m.end() :]
    if word not in _FUNCTION_WORDS and word not in _lowercase_words(s1, s2[: m.start()] + rest):
        return None
    return f"{s1.rstrip(' .')}; {s2[: m.start()]}{word}{rest}"


# --------------------------------------------------------------------------------------------------
# Alterations for invented specifics
# --------------------------------------------------------------------------------------------------


def _altered(number: str, taken: set[str], step_digits: str = "123456789") -> str | None:
    for step in step_digits:
        last = int(number[-1])
        candidate = number[:-1] + str((last + int(step)) % 10)
        if _norm(candidate) not in taken:
            return candidate
    return None


def altered_number(s1: str, s2: str) -> tuple[str, str] | None:
    """(s2 with one non-year number changed in its last digit, the new number)."""
    taken = {_norm(n) for _, n in reference_numbers(s1) + reference_numbers(s2)}
    for m in _REF_NUMBER.finditer(s2):
        number = m.group()
        if sum(ch.isdigit() for ch in number) < 2 or _YEAR.fullmatch(number):
            continue
        new = _altered(number, taken)
        if new is not None:
            return s2[: m.start()] + new + s2[m.end() :], new
    return None


def altered_year(s1: str, s2: str) -> tuple[str, str] | None:
    taken = {_norm(n) for _, n in reference_numbers(s1) + reference_numbers(s2)}
    for m in _YEAR.finditer(s2):
        year = int(m.group())
        for new in (year + 1, year - 1, year + 2, year - 2):
            if str(new) not in taken:
                return s2[: m.start()] + str(new) + s2[m.end() :], str(new)
    return None


# --------------------------------------------------------------------------------------------------
# Measurement
# --------------------------------------------------------------------------------------------------


def emit(name: str, n: int, value: float, unit: str) -> None:
    print(json.dumps({"name": name, "n": n, "value": round(value, 4), "unit": unit}), flush=True)


def _sources(s1: str, s2: str) -> list[CoverageSource]:
    return [CoverageSource(s1, "general"), CoverageSource(s2, "general")]


def rejected(s1: str, s2: str, merged: str) -> tuple[bool, tuple[str, ...]]:
    result = check_merge_coverage(_sources(s1, s2), merged, BASELINE_VOCABULARY)
    return not result.ok, result.missing


def invented(s1: str, s2: str, merged: str) -> tuple[str, ...]:
    return invented_specifics(_sources(s1, s2), merged, BASELINE_VOCABULARY)


class Tally:
    def __init__(self, name: str, want: bool) -> None:
        self.name, self.want = name, want
        self.n = 0
        self.hits = 0
        self.misses: list[str] = []

    def add(self, outcome: bool, detail: Callable[[], str]) -> None:
        self.n += 1
        self.hits += outcome
        if outcome != self.want and len(self.misses) < MISSES_SHOWN:
            self.misses.append(detail())

    def emit(self) -> None:
        emit(self.name, self.n, 100 * self.hits / max(1, self.n), "percent")
        for miss in self.misses:
            print(f"[{self.name}] {miss}", file=sys.stderr)


def measure(pairs: list[tuple[str, str]]) -> None:
    preserving = Tally("coverage.preserving_merge_rejection_rate", want=False)
    reordered = Tally("coverage.preserving_reordered_rejection_rate", want=False)
    iso = Tally("coverage.preserving_iso_date_rejection_rate", want=False)
    thousands = Tally("coverage.preserving_thousands_rejection_rate", want=False)
    recap = Tally("coverage.preserving_recapitalised_rejection_rate", want=False)
    dropped = Tally("coverage.dropped_source_catch_rate", want=True)
    drop_name = Tally("coverage.dropped_name_catch_rate", want=True)
    drop_number = Tally("coverage.dropped_number_catch_rate", want=True)
    drop_date = Tally("coverage.dropped_date_catch_rate", want=True)
    redundant = Tally("coverage.redundant_drop_rejection_rate", want=False)
    inv_number = Tally("coverage.invented_number_flag_rate", want=True)
    inv_year = Tally("coverage.invented_year_flag_rate", want=True)
    inv_false = Tally("coverage.invented_false_flag_rate", want=False)

    def preserve(tally: Tally, s1: str, s2: str, merged: str) -> None:
        bad, missing = rejected(s1, s2, merged)
        tally.add(bad, lambda: f"missing={missing} merged={merged!r}")
        extra = invented(s1, s2, merged)
        inv_false.add(bool(extra), lambda: f"invented={extra} merged={merged!r}")

    def catch(tally: Tally, s1: str, s2: str, merged: str, what: str) -> None:
        bad, _ = rejected(s1, s2, merged)
        tally.add(bad, lambda: f"dropped {what!r} not caught: s1={s1!r} s2={s2!r}")

    for s1, s2 in pairs:
        preserve(preserving, s1, s2, f"{s1}\n{s2}")
        preserve(reordered, s1, s2, f"{s2}\n{s1}")
        if _FULL_DATE.search(s1 + "\n" + s2) or _ISO.search(s1 + "\n" + s2):
            preserve(iso, s1, s2, f"{iso_respelled(s1)}\n{iso_respelled(s2)}")
        if thousands_respelled(s1) != s1 or thousands_respelled(s2) != s2:
            preserve(thousands, s1, s2, f"{thousands_respelled(s1)}\n{thousands_respelled(s2)}")
        recap_merge = recapitalised(s1, s2)
        if recap_merge is not None:
            preserve(recap, s1, s2, recap_merge)

        names, numbers, dates = lacks(s1, s2)
        if names or numbers or dates:
            catch(dropped, s1, s2, s1, "sentence 2")
        else:
            bad, _ = rejected(s1, s2, s1)
            redundant.add(bad, lambda s1=s1, s2=s2: f"s1={s1!r} s2={s2!r}")
        if names:
            catch(drop_name, s1, s2, f"{s1}\n{_delete(s2, names[0])}", names[0])
        if numbers:
            catch(drop_number, s1, s2, f"{s1}\n{_delete(s2, numbers[0], number=True)}", numbers[0])
        if dates:
            start, end, phrase = dates[0]
            catch(drop_date, s1, s2, f"{s1}\n{s2[:start]}{s2[end:]}", phrase)

        for alter, tally in ((altered_number, inv_number), (altered_year, inv_year)):
            change = alter(s1, s2)
            if change is not None:
                new_s2, new = change
                merged = f"{s1}\n{new_s2}"
                found = invented(s1, s2, merged)
                tally.add(
                    any(new in item for item in found),
                    lambda merged=merged, found=found, new=new: f"{new!r} not reported: {found} merged={merged!r}",
                )

    for tally in (
        preserving,
        reordered,
        iso,
        thousands,
        recap,
        dropped,
        drop_name,
        drop_number,
        drop_date,
        redundant,
        inv_number,
        inv_year,
        inv_false,
    ):
        tally.emit()


def _halved(text: str, keep_tail: bool = False) -> str:
    """The sentence rewritten down to half its words (the head, or the tail), as a careless rewrite does."""
    words = text.split()
    half = max(1, len(words) // 2)
    kept = words[-half:] if keep_tail else words[:half]
    return " ".join(kept).rstrip(".,;:") + "."


def _specific_free(text: str) -> bool:
    names, numbers, dates = lacks("", text)
    return not (names or numbers or dates)


def measure_content(rows: list[tuple[str, str, bool]], threshold: float, suffix: str = "") -> None:
    """The content check (dropped_content) on the same sets.

    Content-preserving (target 0): every merge :func:`measure` treats as preserving (s1 + s2, s2 + s1, dates and
    thousands re-spelled, "s1; s2" re-cased), plus the whole merge lower-cased and the two sentences re-punctuated
    into one. Dropping (target ~100): the sources are s1 and a sentence b from another row with no name, number
    or date (the reference's reading), and the merge keeps s1 and drops b, or keeps b's first or last half of
    its words. Informational: a light rewording by a model, built from a paraphrase pair (b, b') of another row
    as sources [s1, b] and merge s1 + b' (the set's own paraphrase label); and the merge of a pair that keeps s1
    alone, for pairs the set labels paraphrases and for pairs it does not.
    """

    def dropped(sources: list[str], merged: str) -> tuple[str, ...]:
        return dropped_content([CoverageSource(t, "general") for t in sources], merged, threshold=threshold)

    preserving = Tally(f"coverage.content_preserving_rejection_rate{suffix}", want=False)
    drop_sentence = Tally(f"coverage.content_dropped_sentence_catch_rate{suffix}", want=True)
    halved_head = Tally(f"coverage.content_halved_catch_rate{suffix}", want=True)
    halved_tail = Tally(f"coverage.content_halved_tail_catch_rate{suffix}", want=True)
    reworded = Tally(f"coverage.content_reworded_rejection_rate{suffix}", want=False)
    pair_para = Tally(f"coverage.content_paraphrase_drop_rejection_rate{suffix}", want=False)
    pair_other = Tally(f"coverage.content_nonparaphrase_drop_rejection_rate{suffix}", want=True)

    def preserve(s1: str, s2: str, merged: str) -> None:
        lost = dropped([s1, s2], merged)
        preserving.add(bool(lost), lambda: f"dropped={lost} merged={merged!r}")

    n = len(rows)
    for i, (s1, s2, _) in enumerate(rows):
        preserve(s1, s2, f"{s1}\n{s2}")
        preserve(s1, s2, f"{s2}\n{s1}")
        preserve(s1, s2, f"{s1}\n{s2}".lower())
        preserve(s1, s2, f"{s1.strip().rstrip('.!?')}, and {s2.strip()}")
        preserve(s1, s2, f"{iso_respelled(s1)}\n{iso_respelled(s2)}")
        preserve(s1, s2, f"{thousands_respelled(s1)}\n{thousands_respelled(s2)}")
        recap_merge = recapitalised(s1, s2)
        if recap_merge is not None:
            preserve(s1, s2, recap_merge)

        other, other_b, other_para = rows[(i + n // 2) % n]
        b = other
        if _specific_free(b) and b.strip() != s1.strip():
            drop_sentence.add(bool(dropped([s1, b], s1)), lambda s1=s1, b=b: f"not caught: kept {s1!r} dropped {b!r}")
            for tally, tail in ((halved_head, False), (halved_tail, True)):
                merged = f"{s1}\n{_halved(b, tail)}"
                tally.add(
                    bool(dropped([s1, b], merged)),
                    lambda merged=merged, b=b: f"not caught: {b!r} -> {merged!r}",
                )
        if other_para:
            merged = f"{s1}\n{other_b}"
            lost = dropped([s1, b], merged)
            reworded.add(bool(lost), lambda merged=merged, lost=lost: f"rejected {lost} in {merged!r}")
        tally = pair_para if rows[i][2] else pair_other
        lost = dropped([s1, s2], s1)
        tally.add(bool(lost), lambda s1=s1, s2=s2, lost=lost: f"s1={s1!r} s2={s2!r} dropped={lost}")

    for tally in (preserving, drop_sentence, halved_head, halved_tail, reworded, pair_para, pair_other):
        tally.emit()


# Discourse words that open sentences ("Eventually, ..."); the baseline should make them ordinary there.
DISCOURSE_OPENERS = (
    "eventually sadly meanwhile honestly unfortunately luckily thankfully interestingly admittedly alternatively "
    "conversely incidentally understandably predictably ironically curiously remarkably surprisingly fittingly "
    "tellingly crucially arguably undeniably paradoxically regrettably mercifully oddly strangely happily "
    "fortunately hopefully additionally furthermore moreover nevertheless nonetheless subsequently afterwards "
    "beforehand initially originally ultimately lastly firstly secondly thirdly finally overall anyway otherwise "
    "likewise similarly hence thus consequently accordingly therefore instead besides indeed certainly presumably "
    "supposedly evidently apparently seemingly reportedly allegedly notably importantly significantly essentially "
    "basically frankly candidly truthfully personally generally typically usually often sometimes occasionally "
    "rarely ideally realistically practically theoretically technically traditionally historically increasingly "
    "gradually suddenly immediately quickly slowly recently currently nowadays lately today tomorrow tonight "
    "yesterday thereafter hereafter whereupon alas hmm nope yep oops"
).split()


def corpus_names(pairs: list[tuple[str, str]]) -> set[str]:
    """Title-case words the corpus writes mid-sentence and never in lower case: mostly names."""
    lower: set[str] = set()
    mid: set[str] = set()
    for pair in pairs:
        for text in pair:
            for m in _TOKEN.finditer(text):
                token = m.group()
                if token == token.lower():
                    lower.add(token)
                elif token.isalpha() and token[1:] == token[1:].lower() and not _opens_sentence(text, m.start()):
                    mid.add(token.lower())
    return mid - lower


def measure_baseline(pairs: list[tuple[str, str]], sizes: list[int]) -> None:
    names = corpus_names(pairs)
    for size in sizes:
        suffix = "" if size == FREQUENCY_BASELINE_SIZE else f"@{size}"
        started = time.perf_counter()
        baseline = build_frequency_baseline(size) | BASELINE_COMMON_WORDS
        elapsed = time.perf_counter() - started
        emit(f"coverage.baseline_size{suffix}", size, len(baseline), "words")
        emit(f"coverage.baseline_build_seconds{suffix}", size, elapsed, "s")
        ordinary = sum(word in baseline for word in DISCOURSE_OPENERS)
        emit(
            f"coverage.baseline_discourse_openers_ordinary{suffix}",
            len(DISCOURSE_OPENERS),
            100 * ordinary / len(DISCOURSE_OPENERS),
            "percent",
        )
        emit(
            f"coverage.baseline_name_leak_rate{suffix}",
            len(names),
            100 * len(names & baseline) / max(1, len(names)),
            "percent",
        )


def measure_throughput(pairs: list[tuple[str, str]]) -> None:
    # CPU time of this process, so a busy machine does not read as a slow check.
    merges = [(s1, s2, f"{s1}\n{s2}") for s1, s2 in pairs]
    started = time.process_time()
    for s1, s2, merged in merges:
        rejected(s1, s2, merged)
    emit("coverage.check_throughput", len(merges), len(merges) / (time.process_time() - started), "checks/s")
    started = time.process_time()
    for s1, s2, merged in merges:
        invented(s1, s2, merged)
    emit("coverage.invented_throughput", len(merges), len(merges) / (time.process_time() - started), "checks/s")
    # The removal guard's shape: one entry checked against the text of many live entries.
    entries = [s1 for s1, _ in pairs[:1000]]
    corpus = "\n".join(entries)
    started = time.process_time()
    for entry in entries[:500]:
        check_merge_coverage([CoverageSource(entry, "general")], corpus, BASELINE_VOCABULARY)
    emit(
        "coverage.guard_throughput",
        min(500, len(entries)),
        min(500, len(entries)) / (time.process_time() - started),
        f"checks/s against {len(entries)} entries",
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help=f"first {QUICK_PAIRS_PER_FILE} pairs of each file")
    parser.add_argument("--data", type=Path, default=DEFAULT_DATA, help="the eval-data folder")
    parser.add_argument("--sweep", default="", help="comma-separated baseline sizes to compare, e.g. 10000,40000")
    parser.add_argument(
        "--content-sweep",
        default="",
        help="comma-separated content-check shares to compare, e.g. 0.6,0.7,0.8",
    )
    args = parser.parse_args(argv)

    labelled = read_labelled(args.data, QUICK_PAIRS_PER_FILE if args.quick else None)
    sets = {name: [(a, b) for a, b, _ in rows] for name, rows in labelled.items()}
    if not sets:
        emit("coverage.skipped", 0, 0, f"no paraphrase sets under {args.data}")
        return 0
    pairs = [pair for name in sets for pair in sets[name]]
    print(f"pairs: {', '.join(f'{name} {len(p)}' for name, p in sets.items())}", file=sys.stderr)
    sizes = [FREQUENCY_BASELINE_SIZE] + [int(s) for s in args.sweep.split(",") if s.strip()]
    measure_baseline(pairs, sizes)
    measure(pairs)
    rows = [row for name in labelled for row in labelled[name]]
    measure_content(rows, CONTENT_KEPT_SHARE)
    for share in (float(x) for x in args.content_sweep.split(",") if x.strip()):
        measure_content(rows, share, f"@{share:g}")
    # Throughput on PAWS-Wiki alone, the set earlier runs of this benchmark measured it on.
    measure_throughput(sets.get("paws", pairs))
    return 0


if __name__ == "__main__":
    sys.exit(main())
