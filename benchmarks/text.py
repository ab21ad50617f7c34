"""Benchmarks for the text primitives: duplicate clustering, BM25 recall and the 0.88 threshold.

    .venv/bin/python benchmarks/text.py            # full sizes (100,000 documents)
    .venv/bin/python benchmarks/text.py --quick    # 10,000 documents, for a fast look

Prints one JSON object per line: {"name": "text.<metric>", "n": <size>, "value": <num>, "unit": "<unit>"}.
Each measurement runs in its own process so that its peak resident memory is its own.

The synthetic corpus imitates memory entries: 20-40 tokens, about a third of them stopwords, content
words drawn from a Zipf-Mandelbrot distribution over 50,000 word forms, some numbers, and 5% of the
entries near-copies (one or two words changed) of an earlier one. Threshold figures use public
paraphrase data from ../shared/eval-data/ when it is present (read in place, never copied).
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

EVAL_DATA = ROOT.parent / "shared" / "eval-data"
THRESHOLD = 0.88
MAX_CLUSTER = 3


def emit(name: str, n: int, value: float, unit: str) -> None:
    print(
        json.dumps({"name": f"text.{name}", "n": n, "value": round(float(value), 4), "unit": unit}),
        flush=True,
    )


def peak_rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0


def synthetic_corpus(n: int, seed: int = 7) -> list[tuple[str, str]]:
    from dream_assets.text.tokens import STOPWORDS

    rng = np.random.default_rng(seed)
    syllables = [
        "ka",
        "ro",
        "mi",
        "ten",
        "sa",
        "lo",
        "vi",
        "dor",
        "pe",
        "un",
        "ga",
        "shi",
        "ber",
        "tal",
        "no",
        "qui",
    ]
    words: list[str] = []
    seen: set[str] = set()
    while len(words) < 50_000:
        w = "".join(rng.choice(syllables, size=int(rng.integers(2, 5))))
        if w not in seen:
            seen.add(w)
            words.append(w)
    vocab = np.array(words, dtype=object)
    stop = np.array(sorted(STOPWORDS), dtype=object)
    ranks = np.arange(1, vocab.size + 1)
    p = 1.0 / (ranks + 50.0) ** 1.05
    p /= p.sum()

    lengths = rng.integers(20, 41, size=n)
    total = int(lengths.sum())
    content = vocab[rng.choice(vocab.size, size=total, p=p)]
    content = np.where(rng.random(total) < 0.02, rng.integers(1, 3000, size=total).astype(str), content)
    tokens = np.where(rng.random(total) < 0.33, stop[rng.integers(0, stop.size, size=total)], content)
    offsets = np.concatenate(([0], np.cumsum(lengths)))
    texts: list[str] = []
    for i in range(n):
        if i and rng.random() < 0.05:
            base = texts[int(rng.integers(0, i))].split()
            for _ in range(int(rng.integers(1, 3))):
                base[int(rng.integers(0, len(base)))] = vocab[int(rng.choice(vocab.size, p=p))]
            texts.append(" ".join(base))
        else:
            texts.append(" ".join(tokens[offsets[i] : offsets[i + 1]]))
    return [(f"m{i:06d}", t) for i, t in enumerate(texts)]


# --------------------------------------------------------------------------- measurements


def measure_cluster(method: str, n: int) -> None:
    import sklearn.feature_extraction.text  # noqa: F401  (a one-off ~1 s per process, not per call)

    from dream_assets.text.similarity import find_duplicate_clusters

    docs = synthetic_corpus(n)
    start = time.perf_counter()
    result = find_duplicate_clusters(docs, THRESHOLD, MAX_CLUSTER, method=method)
    elapsed = time.perf_counter() - start
    emit(f"cluster_{method}.seconds", n, elapsed, "s")
    emit(f"cluster_{method}.peak_rss", n, peak_rss_mb(), "MB")
    emit(f"cluster_{method}.pairs", n, result.pairs, "pairs")


def msc_persona_sentences() -> list[str]:
    path = EVAL_DATA / "msc-personas-locomo" / "msc_personas_all.json"
    if not path.exists():
        return []
    data = json.loads(path.read_text(encoding="utf-8"))
    return [
        s for split in data.values() for item in split for k, v in item.items() if k.startswith("Speaker") for s in v
    ]


def measure_cluster_msc(method: str, n: int) -> None:
    import sklearn.feature_extraction.text  # noqa: F401  (a one-off ~1 s per process, not per call)

    from dream_assets.text.similarity import find_duplicate_clusters

    sentences = msc_persona_sentences()
    if not sentences:
        return
    docs = [(f"p{i}", s) for i, s in enumerate(sentences)]
    start = time.perf_counter()
    result = find_duplicate_clusters(docs, THRESHOLD, MAX_CLUSTER, method=method)
    elapsed = time.perf_counter() - start
    emit(f"cluster_{method}_msc_personas.seconds", len(docs), elapsed, "s")
    emit(f"cluster_{method}_msc_personas.peak_rss", len(docs), peak_rss_mb(), "MB")
    emit(f"cluster_{method}_msc_personas.pairs", len(docs), result.pairs, "pairs")


def measure_bm25(n: int) -> None:
    from dream_assets.text.bm25 import Bm25Index
    from dream_assets.text.tokens import document_tokens

    docs = synthetic_corpus(n)
    tokens = [document_tokens(text, "notes/general", ["memory"]) for _, text in docs]
    base = peak_rss_mb()
    index = Bm25Index()
    start = time.perf_counter()
    for (doc_id, _), toks in zip(docs, tokens, strict=True):
        index.add(doc_id, toks)
    emit("bm25.build.seconds", n, time.perf_counter() - start, "s")
    emit("bm25.index_rss", n, peak_rss_mb() - base, "MB")

    rng = np.random.default_rng(3)
    queries = []
    for _ in range(600):
        doc = tokens[int(rng.integers(0, n))]
        queries.append([doc[int(j)] for j in rng.integers(0, len(doc), size=6)])
    for q in queries[:50]:  # warm up caches
        index.search(q, 10)
    latencies = []
    for q in queries[50:]:
        t0 = time.perf_counter()
        index.search(q, 10)
        latencies.append(time.perf_counter() - t0)
    emit("bm25.search_p50", n, np.percentile(latencies, 50) * 1000, "ms")
    emit("bm25.search_p95", n, np.percentile(latencies, 95) * 1000, "ms")

    start = time.perf_counter()
    for (doc_id, _), toks in zip(docs[:2000], tokens[:2000], strict=True):
        index.remove(doc_id)
        index.add(doc_id, toks)
    emit("bm25.replace_doc", n, (time.perf_counter() - start) / 2000 * 1e6, "us")


def mrpc_pairs() -> list[tuple[bool, str, str]]:
    path = EVAL_DATA / "mrpc" / "msr_paraphrase_test.txt"
    if not path.exists():
        return []
    pairs = []
    for line in path.read_text(encoding="utf-8-sig").splitlines()[1:]:
        parts = line.split("\t")
        if len(parts) == 5:
            pairs.append((parts[0] == "1", parts[3], parts[4]))
    return pairs


def measure_threshold_mrpc(_n: int) -> None:
    """How the shared 0.88 threshold behaves on labelled paraphrases (MRPC test split).

    0.88 is meant to catch near-copies, so high precision with modest recall is the expected shape:
    MRPC paraphrases are often reworded far more than a near-duplicate memory would be.
    """
    from dream_assets.text.bm25 import Bm25Index
    from dream_assets.text.similarity import tfidf_cosine
    from dream_assets.text.tokens import content_token_list

    pairs = mrpc_pairs()
    if not pairs:
        return
    index = Bm25Index()
    for i, (_, a, b) in enumerate(pairs):
        index.add(f"a{i}", content_token_list(a))
        index.add(f"b{i}", content_token_list(b))
    for label, idx in (("pair_idf", None), ("corpus_idf", index)):
        predicted = [tfidf_cosine(a, b, idx) >= THRESHOLD for _, a, b in pairs]
        tp = sum(p and y for p, (y, _, _) in zip(predicted, pairs, strict=True))
        fp = sum(p and not y for p, (y, _, _) in zip(predicted, pairs, strict=True))
        positives = sum(y for y, _, _ in pairs)
        emit(f"threshold_mrpc_{label}.precision", len(pairs), tp / (tp + fp) if tp + fp else 1.0, "ratio")
        emit(f"threshold_mrpc_{label}.recall", len(pairs), tp / positives, "ratio")


MEASUREMENTS = {
    "cluster_tfidf": lambda n: measure_cluster("tfidf", n),
    "cluster_jaccard": lambda n: measure_cluster("jaccard", n),
    "cluster_msc_tfidf": lambda n: measure_cluster_msc("tfidf", n),
    "cluster_msc_jaccard": lambda n: measure_cluster_msc("jaccard", n),
    "bm25": measure_bm25,
    "threshold_mrpc": measure_threshold_mrpc,
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="10,000 documents instead of 100,000")
    parser.add_argument("--one", nargs=2, metavar=("MEASUREMENT", "N"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.one:
        MEASUREMENTS[args.one[0]](int(args.one[1]))
        return
    big = 10_000 if args.quick else 100_000
    plan = [
        ("cluster_tfidf", 10_000),
        ("cluster_tfidf", big),
        ("cluster_jaccard", big),
        ("cluster_msc_tfidf", 0),
        ("cluster_msc_jaccard", 0),
        ("bm25", big),
        ("threshold_mrpc", 0),
    ]
    seen = set()
    for name, n in plan:
        if (name, n) in seen:
            continue
        seen.add((name, n))
        subprocess.run([sys.executable, __file__, "--one", name, str(n)], check=True)


if __name__ == "__main__":
    main()
