"""Embeddings that help, measured against a real embeddings endpoint: search recall with and without them, and how
often the model's near-duplicate threshold joins sentences labelled different.

Needs an OpenAI-compatible embeddings endpoint: ``DREAM__EmbeddingBaseUrl`` and ``DREAM__EmbeddingModel`` (or
``--base-url`` / ``--model``), e.g. the local multilingual-e5-small of ../shared/local-model/serve.sh::

    DREAM__EmbeddingBaseUrl=http://127.0.0.1:8093/v1 DREAM__EmbeddingModel=multilingual-e5-small-q4 \\
        .venv/bin/python benchmarks/embeddings.py [--quick] [--data DIR]

Without one it says so and exits 2: it never passes silently. Data is read in place from ../shared/eval-data
(``--data`` or ``DREAM_EVAL_DATA``): LoCoMo, MRPC, PAWS-Wiki.

* **Recall.** Per LoCoMo conversation (``--quick``: conv-26 and conv-30) the corpus of benchmarks/quality.py
  (observations, reworded re-observations, look-alike events) is saved into a real store with the embedding model
  configured (save-time dedup at the model's threshold), every live entry's vector is fetched as the consolidation
  scan does, and each QA question (categories 1 to 4) is searched: a hit when every evidence turn has a live entry
  holding one of its facts in the top 10. ``embeddings.recall10_bm25`` is ``recall_index.search`` (BM25 and the
  recall rules), ``embeddings.recall10_fused`` the service's search (``recall_fusion.search``: reciprocal rank
  fusion, k = ``FUSION_K``, the embeddings weighted ``FUSION_DENSE_WEIGHT``), ``embeddings.recall10_gain`` the
  difference in points. Targets: fused >= 0.80 and gain >= 5 points. ``embeddings.evidence_recall10_*`` is the
  LoCoMo paper's retrieval recall beside it: per question, the share of its evidence turns with a live home in the
  top 10, averaged (a question with two evidence turns and one found counts a half, where ``recall10`` counts 0).
* **Threshold.** ``embeddings.threshold`` is the threshold in use for the model on those stores
  (llm/embedding_threshold.py: the option, the table or calibrated); ``embeddings.threshold_calibrated.<corpus>``
  is what calibration on the corpus's own vectors would give (LoCoMo stores, the MRPC sentences).
* **Paraphrase pairs.** For MRPC (test) and PAWS-Wiki (dev), up to ``--pairs`` pairs each: ``<set>.different_merged``
  is the share of pairs labelled different that a save would absorb (the second sentence saved after the first:
  cosine at or above the threshold *and* the save-time rules of store/dedup.py reinforce or extend; target <= 1 %);
  ``<set>.same_merged`` the same for pairs labelled same; ``<set>.different_clustered`` / ``same_clustered`` the
  share whose cosine alone reaches the threshold (what the near-duplicate scan offers the model as one cluster, for
  the host's merge checks to judge).

One JSON object per line: {"name", "n", "value", "unit"}.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import random
import sys
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Sequence
from datetime import timedelta
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.quality import (  # noqa: E402
    QUICK_CONVERSATIONS,
    SEED,
    build_corpus,
    data_dir,
    load_conversations,
    locate,
    save_fact,
    seed_ids,
)
from dream_assets import recall_fusion  # noqa: E402
from dream_assets import recall_index as recall  # noqa: E402
from dream_assets.llm.embedding_index import EmbeddingIndex  # noqa: E402
from dream_assets.llm.embedding_threshold import calibrate, similarity_threshold  # noqa: E402
from dream_assets.llm.embeddings import build_embedding_provider, vector_key  # noqa: E402
from dream_assets.options import DreamOptions  # noqa: E402
from dream_assets.options_loader import load_options
from dream_assets.profile import AgentProfile  # noqa: E402
from dream_assets.store import open_store  # noqa: E402
from dream_assets.store.dedup import EXTEND, REINFORCE  # noqa: E402
from dream_assets.store.dedup import decide as decide_dedup  # noqa: E402
from dream_assets.store.embeddings import EmbeddingCache, connection_of  # noqa: E402

QUICK_PAIRS = 400


def emit(name: str, n: int, value: float, unit: str) -> None:
    print(json.dumps({"name": name, "n": n, "value": round(float(value), 4), "unit": unit}), flush=True)


def endpoint_problem(base_url: str, model: str) -> str | None:
    """Why the endpoint cannot be used (None when it answers ``GET /models`` and embeds one text)."""
    if not base_url or not model:
        return "no embeddings endpoint: set DREAM__EmbeddingBaseUrl and DREAM__EmbeddingModel (or --base-url, --model)"
    try:
        with urllib.request.urlopen(base_url.rstrip("/") + "/models", timeout=5) as response:
            response.read()
    except (urllib.error.URLError, OSError) as exc:
        return f"the embeddings endpoint {base_url} does not answer GET /models: {exc}"
    return None


# ---------------------------------------------------------------------------------------------- recall
def recall10(hits_of: Any, corpus: Any, homes: dict[str, str | None]) -> tuple[int, float]:
    """The questions whose every evidence turn has a live home in the top 10, and the sum over questions of the
    share of their evidence turns that do (the LoCoMo paper's retrieval recall, averaged per question)."""
    hits, share = 0, 0.0
    for question, turns in corpus.qa:
        top = {e.id for e, _ in hits_of(question)}
        found = sum(1 for keys in turns if any(homes.get(k) in top for k in keys))
        hits += found == len(turns)
        share += found / len(turns) if turns else 1.0
    return hits, share


def recall_conversation(conv: dict[str, Any], options: DreamOptions, root: Path, seed: int) -> dict[str, Any]:
    corpus = build_corpus(conv, seed)
    store = open_store(AgentProfile(root / corpus.sample_id).ensure(), options)
    try:
        saved = {f.key: save_fact(store, f) for f in corpus.facts}
        live = store.memories.list_live()
        EmbeddingIndex(store, build_embedding_provider(options), now=corpus.last_at).vectors(live)  # as the scan does
        homes = locate(store, corpus, saved).homes
        now = corpus.last_at + timedelta(days=1)
        methods: set[str] = set()

        def fused(q: str) -> list[Any]:
            found = recall_fusion.search(store.memories, q, 10, now=now)
            methods.add(found.method)
            return found.hits

        bm25, bm25_share = recall10(lambda q: recall.search(store.memories, q, limit=10), corpus, homes)
        both, fused_share = recall10(fused, corpus, homes)
        result = {
            "qa": len(corpus.qa),
            "facts": len(corpus.facts),
            "live": len(live),
            "bm25": bm25,
            "fused": both,
            "bm25_evidence": bm25_share,
            "fused_evidence": fused_share,
            "threshold": similarity_threshold(options, store, now=now, keep=False),
        }
        if methods != {recall_fusion.FUSED}:
            raise SystemExit(f"{corpus.sample_id}: a search was not fused ({sorted(methods)})")
        _, matrix = EmbeddingCache(connection_of(store)).live_vectors(vector_key(options.EmbeddingModel), limit=1000)
        result["calibrated"] = calibrate(matrix)
    finally:
        store.close()
    print(
        f"{corpus.sample_id}: {result['qa']} questions, bm25 {result['bm25']}, fused {result['fused']}", file=sys.stderr
    )
    return result


def run_recall(convs: Sequence[dict[str, Any]], options: DreamOptions, root: Path, seed: int) -> dict[str, Any]:
    counted = ("qa", "bm25", "fused", "bm25_evidence", "fused_evidence", "facts", "live")
    out: dict[str, Any] = {**dict.fromkeys(counted, 0), "thresholds": [], "calibrated": []}
    for conv in convs:
        one = recall_conversation(conv, options, root, seed)
        for key in counted:
            out[key] += one[key]
        out["thresholds"].append(one["threshold"])
        out["calibrated"].append(one["calibrated"])
    return out


# ---------------------------------------------------------------------------------------------- pairs
def mrpc_pairs(root: Path) -> list[tuple[str, str, bool]]:
    rows = (root / "mrpc" / "msr_paraphrase_test.txt").read_text(encoding="utf-8-sig").splitlines()[1:]
    return [(r[3], r[4], r[0] == "1") for r in (line.split("\t") for line in rows) if len(r) == 5]


def paws_pairs(root: Path) -> list[tuple[str, str, bool]]:
    rows = (root / "paws-wiki" / "dev.tsv").read_text(encoding="utf-8").splitlines()
    return [(r[1], r[2], r[3].strip() == "1") for r in (line.split("\t") for line in rows) if len(r) == 4]


def run_pairs(name: str, pairs: list[tuple[str, str, bool]], provider: Any, threshold: float) -> dict[str, Any]:
    a = provider.embed([p[0] for p in pairs])
    b = provider.embed([p[1] for p in pairs])
    cos = np.minimum((a * b).sum(axis=1), 1.0)
    same = np.array([p[2] for p in pairs])
    absorbed = np.array(
        [
            cos[i] >= threshold - 1e-6
            and decide_dedup(p[0], p[1], max_chars=4000, stored_category="general", incoming_category="general").action
            in (REINFORCE, EXTEND)
            for i, p in enumerate(pairs)
        ]
    )
    clustered = cos >= threshold - 1e-6
    sentences = np.vstack([a, b])
    return {
        "n_same": int(same.sum()),
        "n_different": int((~same).sum()),
        "different_merged": float(absorbed[~same].mean()) if (~same).any() else 0.0,
        "same_merged": float(absorbed[same].mean()) if same.any() else 0.0,
        "different_clustered": float(clustered[~same].mean()) if (~same).any() else 0.0,
        "same_clustered": float(clustered[same].mean()) if same.any() else 0.0,
        "calibrated": calibrate(sentences[np.random.default_rng(1).permutation(len(sentences))[:1000]]),
        "name": name,
    }


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help=f"{', '.join(QUICK_CONVERSATIONS)}; {QUICK_PAIRS} pairs")
    parser.add_argument("--data", default=None, help="the shared eval-data folder")
    parser.add_argument("--base-url", default=os.environ.get("DREAM__EmbeddingBaseUrl", ""))
    parser.add_argument("--model", default=os.environ.get("DREAM__EmbeddingModel", ""))
    parser.add_argument("--conversations", default=None, help="comma-separated LoCoMo sample ids")
    parser.add_argument("--pairs", type=int, default=None, help="pairs per paraphrase set (default 2000)")
    parser.add_argument("--seed", type=int, default=SEED)
    args = parser.parse_args(list(argv) if argv is not None else None)
    problem = endpoint_problem(args.base_url, args.model)
    if problem:
        print(f"embeddings benchmark: {problem}; nothing was measured", file=sys.stderr)
        return 2
    logging.disable(logging.WARNING)
    seed_ids(args.seed)
    started = time.perf_counter()
    root = data_dir(args.data)
    options = load_options(
        env={},
        overrides={
            "LlmBackend": "offline",
            "EmbeddingBaseUrl": args.base_url,
            "EmbeddingModel": args.model,
            "LlmTimeout": "PT5M",
        },
    )
    os.environ.setdefault("OPENAI_API_KEY", "local")
    if args.conversations:
        wanted: Sequence[str] | None = [s.strip() for s in args.conversations.split(",") if s.strip()]
    else:
        wanted = QUICK_CONVERSATIONS if args.quick else None
    convs = load_conversations(root, wanted)
    with tempfile.TemporaryDirectory(prefix="dream-bench-embeddings-") as tmp:
        r = run_recall(convs, options, Path(tmp), args.seed)
    n = r["qa"]
    emit("embeddings.conversations", n, len(convs), "count")
    emit("embeddings.facts_saved", n, r["facts"], "count")
    emit("embeddings.live_after_saves", n, r["live"], "count")
    emit("embeddings.recall10_bm25", n, r["bm25"] / n, "fraction")
    emit("embeddings.recall10_fused", n, r["fused"] / n, "fraction")
    emit("embeddings.recall10_gain", n, 100.0 * (r["fused"] - r["bm25"]) / n, "points")
    emit("embeddings.evidence_recall10_bm25", n, r["bm25_evidence"] / n, "fraction")
    emit("embeddings.evidence_recall10_fused", n, r["fused_evidence"] / n, "fraction")
    emit("embeddings.evidence_recall10_gain", n, 100.0 * (r["fused_evidence"] - r["bm25_evidence"]) / n, "points")
    threshold = r["thresholds"][0]
    emit(f"embeddings.threshold.{threshold.source}", r["live"], threshold.value, "cosine")
    for i, figures in enumerate(r["calibrated"]):
        emit(f"embeddings.threshold_calibrated.locomo.{convs[i]['sample_id']}", 0, figures["threshold"], "cosine")
        emit(f"embeddings.pair_mean.locomo.{convs[i]['sample_id']}", 0, figures["pair_mean"], "cosine")
    limit = QUICK_PAIRS if args.quick else (args.pairs or 2000)
    provider = build_embedding_provider(options)
    rng = random.Random(args.seed)
    for name, pairs in (("mrpc", mrpc_pairs(root)), ("paws", paws_pairs(root))):
        rng.shuffle(pairs)
        res = run_pairs(name, pairs[:limit], provider, threshold.value)
        for key in ("different_merged", "same_merged", "different_clustered", "same_clustered"):
            count = res["n_different"] if key.startswith("different") else res["n_same"]
            emit(f"embeddings.{name}.{key}", count, 100.0 * res[key], "percent")
        emit(f"embeddings.threshold_calibrated.{name}", 1000, res["calibrated"]["threshold"], "cosine")
    emit("embeddings.seconds", n, time.perf_counter() - started, "s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
