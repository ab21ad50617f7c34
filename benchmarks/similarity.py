"""Near-duplicate measures on public paraphrase sets: how many paraphrases cluster, how many different facts do.

Each set is read in place from ../shared/eval-data (MRPC, STS-B, SICK; nothing is copied). Every sentence of a set
is one document of a corpus; a pair "clusters" when its two sentences reach the threshold of a measure with the idf
fitted on that corpus, the way the store's scan sees a pair among the live entries.

* paraphrases: MRPC label 1; STS-B similarity >= 4.0; SICK relatedness >= 4.0 with the label ENTAILMENT.
* non-paraphrases with different specifics: MRPC label 0; STS-B <= 2.5; SICK relatedness < 3.0 or CONTRADICTION;
  kept only when one sentence carries a name, number or date (the merge coverage check's specifics) that the other
  does not. These may cluster (a cluster only offers a pair to the model); they are what a merge must not join.
* framed re-observations: each paraphrase's first sentence against the same sentence re-observed with a frame
  ("<name> said again on 12 May 2023 that ..."): a re-observation must cluster.

Prints one JSON object per line, {"name", "n", "value", "unit"}:
  similarity.<set>.<measure>.paraphrase_clustered (percent), .different_specifics_clustered (percent),
  similarity.<set>.<measure>.framed_clustered (percent), for the measures overlap (LexicalOverlapThreshold) and
  tfidf (ConsolidationSimilarityThreshold), and similarity.overlap_pairs_throughput (documents per second).

Usage: .venv/bin/python benchmarks/similarity.py [--quick] [--data DIR] [--overlap 0.8] [--tfidf 0.88]
"""

from __future__ import annotations

import argparse
import json
import time
from collections.abc import Iterator
from pathlib import Path

import numpy as np

from dream_assets.options_loader import dream_options
from dream_assets.text.coverage import BASELINE_VOCABULARY, CoverageSource, check_merge_coverage
from dream_assets.text.similarity import overlap_pairs, overlap_tokens, tfidf_matrix

DEFAULT_DATA = Path(__file__).resolve().parents[2] / "shared" / "eval-data"
QUICK_PAIRS = 400
FRAMES = (
    "{name} said again on 12 May 2023 that {lower}",
    "On 3 June 2023, {name} mentioned that {lower}",
    "{text} (mentioned again on 9 July 2023)",
    "As of 14 August 2023, {lower}",
)

Pair = tuple[str, str, bool]  # sentence 1, sentence 2, is a paraphrase


def _rows(path: Path, encoding: str = "utf-8") -> Iterator[list[str]]:
    with path.open(encoding=encoding) as handle:
        for line in handle:
            yield line.rstrip("\r\n").split("\t")


def read_sets(root: Path, limit: int | None) -> dict[str, list[Pair]]:
    """name -> labelled pairs; ambiguous middle grades (STS-B 2.5..4, SICK 3..4 without a contradiction) left out."""
    sets: dict[str, list[Pair]] = {"mrpc": [], "stsb": [], "sick": []}
    for relative in ("mrpc/msr_paraphrase_test.txt", "mrpc/msr_paraphrase_train.txt"):
        for row in _rows(root / relative, "utf-8-sig"):
            if len(row) >= 5 and row[0] in ("0", "1"):
                sets["mrpc"].append((row[3], row[4], row[0] == "1"))
    for relative in ("stsb/sts-dev.csv", "stsb/sts-test.csv"):
        for row in _rows(root / relative):
            try:
                score = float(row[4])
            except (IndexError, ValueError):
                continue
            if len(row) >= 7 and (score >= 4.0 or score <= 2.5):
                sets["stsb"].append((row[5], row[6], score >= 4.0))
    for row in _rows(root / "sick/SICK_test_annotated.txt"):
        try:
            score = float(row[3])
        except (IndexError, ValueError):
            continue
        label = row[4].strip() if len(row) > 4 else ""
        if score >= 4.0 and label == "ENTAILMENT":
            sets["sick"].append((row[1], row[2], True))
        elif score < 3.0 or label == "CONTRADICTION":
            sets["sick"].append((row[1], row[2], False))
    if limit is not None:
        sets = {k: v[:limit] for k, v in sets.items()}
    return {k: v for k, v in sets.items() if v}


def different_specifics(a: str, b: str) -> bool:
    """One sentence has a name, number or date the other does not carry."""
    return (
        not check_merge_coverage([CoverageSource(a, "general")], b, BASELINE_VOCABULARY).ok
        or not check_merge_coverage([CoverageSource(b, "general")], a, BASELINE_VOCABULARY).ok
    )


def framed(text: str, n: int) -> str:
    words = text.split()
    lower = (words[0][:1].lower() + words[0][1:] + " " + " ".join(words[1:])) if words else text
    return FRAMES[n % len(FRAMES)].format(name="Alex", text=text.rstrip("."), lower=lower)


def _pairs_found(measure: str, texts: list[str], threshold: float) -> set[tuple[int, int]]:
    if measure == "overlap":
        rows, cols, _ = overlap_pairs([overlap_tokens(t) for t in texts], threshold)
    else:
        x = tfidf_matrix(texts)
        rows, cols = [], []
        # pairs are (2k, 2k+1): their exact cosine, no join needed
        dots = np.asarray(x[0::2].multiply(x[1::2]).sum(axis=1)).ravel()
        hit = np.flatnonzero(dots >= threshold - 1e-12)
        rows, cols = (2 * hit).tolist(), (2 * hit + 1).tolist()
        return set(zip(rows, cols, strict=True))
    return set(zip(rows.tolist(), cols.tolist(), strict=True))


def measure_set(name: str, pairs: list[Pair], thresholds: dict[str, float]) -> list[dict]:
    texts = [t for a, b, _ in pairs for t in (a, b)]
    para = [k for k, p in enumerate(pairs) if p[2]]
    diff = [k for k, p in enumerate(pairs) if not p[2] and different_specifics(p[0], p[1])]
    framed_texts = [t for k in para for t in (pairs[k][0], framed(pairs[k][0], k))]
    out = []
    for measure, threshold in thresholds.items():
        found = _pairs_found(measure, texts, threshold)
        hits = {k for k in range(len(pairs)) if (2 * k, 2 * k + 1) in found}
        framed_found = _pairs_found(measure, framed_texts, threshold)
        framed_hits = sum(1 for j in range(len(para)) if (2 * j, 2 * j + 1) in framed_found)
        base = f"similarity.{name}.{measure}"
        out += [
            {
                "name": f"{base}.paraphrase_clustered",
                "n": len(para),
                "value": round(100.0 * len(hits & set(para)) / max(1, len(para)), 2),
                "unit": "percent",
                "threshold": threshold,
            },
            {
                "name": f"{base}.different_specifics_clustered",
                "n": len(diff),
                "value": round(100.0 * len(hits & set(diff)) / max(1, len(diff)), 2),
                "unit": "percent",
                "threshold": threshold,
            },
            {
                "name": f"{base}.framed_clustered",
                "n": len(para),
                "value": round(100.0 * framed_hits / max(1, len(para)), 2),
                "unit": "percent",
                "threshold": threshold,
            },
        ]
    return out


def main(argv: list[str] | None = None) -> None:
    defaults = dream_options()
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", type=Path, default=DEFAULT_DATA)
    parser.add_argument("--quick", action="store_true", help=f"first {QUICK_PAIRS} pairs of each set")
    parser.add_argument("--overlap", type=float, default=defaults.LexicalOverlapThreshold)
    parser.add_argument("--tfidf", type=float, default=defaults.ConsolidationSimilarityThreshold)
    args = parser.parse_args(argv)
    sets = read_sets(args.data, QUICK_PAIRS if args.quick else None)
    thresholds = {"overlap": args.overlap, "tfidf": args.tfidf}
    all_texts: list[str] = []
    for name, pairs in sets.items():
        for row in measure_set(name, pairs, thresholds):
            print(json.dumps(row), flush=True)
        all_texts += [t for a, b, _ in pairs for t in (a, b)]
    started = time.process_time()
    overlap_pairs([overlap_tokens(t) for t in all_texts], args.overlap)
    spent = max(time.process_time() - started, 1e-9)
    print(
        json.dumps(
            {
                "name": "similarity.overlap_pairs_throughput",
                "n": len(all_texts),
                "value": round(len(all_texts) / spent, 1),
                "unit": "documents/s",
            }
        ),
        flush=True,
    )


if __name__ == "__main__":
    main()
