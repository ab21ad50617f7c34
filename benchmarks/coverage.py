"""Merge coverage check on PAWS-Wiki sentence pairs (text nobody on this project wrote).

PAWS non-paraphrases often swap or replace names and numbers, so a pair is a two-source "merge" whose
sentence 2 frequently carries specifics sentence 1 lacks. Prints one JSON object per line:

* coverage.preserving_merge_rejection_rate — merged = sentence 1 + sentence 2; should be 0.
* coverage.dropped_source_catch_rate — merged = sentence 1 only, over pairs where a naive token
  comparison says sentence 2 has a capitalized word or multi-digit number that sentence 1 does not
  write in any case.
* coverage.redundant_drop_rejection_rate — merged = sentence 1 only, over pairs where that naive
  comparison finds nothing missing (the "strict subset" pairs the spec calls genuinely redundant).
* coverage.check_throughput — checks per second on two-source merges.

Usage: .venv/bin/python benchmarks/coverage.py [path/to/dev.tsv]
"""

from __future__ import annotations

import json
import re
import sys
import time
from pathlib import Path

from dream_assets.text.coverage import BASELINE_VOCABULARY, CoverageSource, check_merge_coverage

DEFAULT_DATA = Path(__file__).resolve().parents[2] / "shared" / "eval-data" / "paws-wiki" / "dev.tsv"
_TOKEN = re.compile(r"[^\W_]+")


def read_pairs(path: Path) -> list[tuple[str, str, int]]:
    pairs = []
    for line in path.read_text(encoding="utf-8").splitlines():
        parts = line.rstrip("\r").split("\t")
        if len(parts) == 4 and parts[3] in ("0", "1"):
            pairs.append((parts[1], parts[2], int(parts[3])))
    return pairs


def naive_specifics(sentence: str) -> set[str]:
    """An independent, cruder notion of "specific", lower-cased: any capitalized token that does not
    open a sentence, or any token with two or more digits."""
    found = set()
    for m in _TOKEN.finditer(sentence):
        token = m.group()
        opens = not sentence[: m.start()].strip() or sentence[: m.start()].rstrip().endswith((".", "!", "?", ":"))
        if (token[0].isupper() and not opens) or sum(c.isdigit() for c in token) >= 2:
            found.add(token.lower())
    return found


def lacks(s1: str, s2: str) -> set[str]:
    """Naive specifics of sentence 2 that sentence 1 does not write in any case."""
    return naive_specifics(s2) - {t.lower() for t in _TOKEN.findall(s1)}


def emit(name: str, n: int, value: float, unit: str) -> None:
    print(json.dumps({"name": name, "n": n, "value": round(value, 4), "unit": unit}))


def main(path: Path) -> None:
    if not path.exists():
        print(json.dumps({"name": "coverage.skipped", "n": 0, "value": 0, "unit": f"missing {path}"}))
        return
    pairs = read_pairs(path)

    def rejected(s1: str, s2: str, merged: str) -> bool:
        sources = [CoverageSource(s1, "general"), CoverageSource(s2, "general")]
        return not check_merge_coverage(sources, merged, BASELINE_VOCABULARY).ok

    preserving = sum(rejected(s1, s2, f"{s1}\n{s2}") for s1, s2, _ in pairs)
    emit("coverage.preserving_merge_rejection_rate", len(pairs), 100 * preserving / len(pairs), "percent")

    lacking = [(s1, s2) for s1, s2, _ in pairs if lacks(s1, s2)]
    caught = sum(rejected(s1, s2, s1) for s1, s2 in lacking)
    emit("coverage.dropped_source_catch_rate", len(lacking), 100 * caught / max(1, len(lacking)), "percent")

    redundant = [(s1, s2) for s1, s2, _ in pairs if not lacks(s1, s2)]
    redundant_rejected = sum(rejected(s1, s2, s1) for s1, s2 in redundant)
    emit("coverage.redundant_drop_rejection_rate", len(redundant),
         100 * redundant_rejected / max(1, len(redundant)), "percent")

    started = time.perf_counter()
    for s1, s2, _ in pairs:
        rejected(s1, s2, f"{s1}\n{s2}")
    elapsed = time.perf_counter() - started
    emit("coverage.check_throughput", len(pairs), len(pairs) / elapsed, "checks/s")


if __name__ == "__main__":
    main(Path(sys.argv[1]) if len(sys.argv) > 1 else DEFAULT_DATA)
