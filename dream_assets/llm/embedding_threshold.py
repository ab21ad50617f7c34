"""The cosine at which two entries are near duplicates, for the embedding model in use.

Cosines are not comparable across embedding models: multilingual-e5-small puts unrelated facts of one agent at about
0.85 and rewordings at 0.92 to 0.99, where another model puts unrelated texts near 0.2. One fixed threshold (0.88)
joined different facts with e5 (a run collapsed 109 live entries to 43). So save-time dedup and the near-duplicate
clusters take their threshold from, in order:

1. **the option**: ``EmbeddingSimilarityThreshold`` set to anything above 0 (its default, 0, means "follow the
   model");
2. **the table** of models measured here (``KNOWN_THRESHOLDS``, matched by name: ``multilingual-e5-small-q4`` and
   ``intfloat/multilingual-e5-small`` are both e5-small);
3. **a calibration on the agent's own entries** for any other model: over the vectors of (a sample of)
   ``CALIBRATION_SAMPLE`` live entries, ``mean + CALIBRATION_SHARE * (1 - mean)``, where ``mean`` is the mean cosine of
   all their pairs (nearly all pairs of an agent's memory are different facts), and never below the
   ``CALIBRATION_FLOOR_QUANTILE`` quantile of those pairs (so at most 1 % of pairs of different facts reach it).
   The share is what e5's measured threshold is on LoCoMo conversations (mean of pairs 0.851 -> 0.950), so a
   model whose cosines spread over more of [-1, 1] gets a threshold as far up its own scale. The value is kept in
   the store's ``meta`` table with the model and the number of entries it came from, and calibrated again when the
   model changes (it is kept per model) or the live entries with vectors have doubled since;
4. **the default** ``DEFAULT_THRESHOLD`` while fewer than ``CALIBRATION_MIN_ENTRIES`` live entries have vectors of
   an unknown model (too few pairs to measure anything).

``dream status`` shows the threshold in use and where it came from (``SimilarityThreshold.describe``).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import numpy as np

from dream_assets.llm.embeddings import vector_key
from dream_assets.model import iso
from dream_assets.options import DreamOptions
from dream_assets.store.embeddings import EmbeddingCache, connection_of

__all__ = [
    "CALIBRATION_MIN_ENTRIES",
    "DEFAULT_THRESHOLD",
    "KNOWN_THRESHOLDS",
    "SimilarityThreshold",
    "calibrate",
    "similarity_threshold",
    "table_threshold",
]

log = logging.getLogger("dream_assets.llm.embedding_threshold")

#: (a part of the model name, threshold, how it was measured). Matched case-insensitively as a substring, the
#: first that matches wins. benchmarks/embeddings.py measures them again.
KNOWN_THRESHOLDS: tuple[tuple[str, float, str], ...] = (
    (
        "multilingual-e5-small",
        0.95,
        "benchmarks/embeddings.py on LoCoMo conv-26 and conv-30: rewordings of one fact 0.917-0.999 (median 0.954), "
        "the nearest other observation median 0.941, all pairs mean 0.851; at 0.95 60 % of reworded pairs and 0.4 % "
        "of all pairs reach it (0.88: 98 % and 26 %)",
    ),
)
#: The threshold of an unknown model while too few of its vectors are kept to calibrate (the former fixed value).
DEFAULT_THRESHOLD = 0.88
#: Live entries with vectors an unknown model needs before its threshold is calibrated on them.
CALIBRATION_MIN_ENTRIES = 30
#: Entries (an even sample of them) whose pairs a calibration measures: 1,000 give 499,500 pairs.
CALIBRATION_SAMPLE = 1000
#: How far from the mean cosine of pairs towards 1 the threshold sits (see the module docstring).
CALIBRATION_SHARE = 0.67
#: The calibrated threshold is never below this quantile of the pairs' cosines.
CALIBRATION_FLOOR_QUANTILE = 0.99
#: Calibrated again once the live entries with vectors are this many times those it was calibrated on.
RECALIBRATE_GROWTH = 2.0
#: The highest threshold a calibration gives (a cosine of 1 would join only identical vectors).
CALIBRATION_CEILING = 0.99

OPTION, TABLE, CALIBRATED, DEFAULT = "option", "table", "calibrated", "default"


@dataclass(frozen=True)
class SimilarityThreshold:
    """The cosine in use for ``model`` and where it came from: ``source`` is ``option``, ``table``, ``calibrated``
    (on ``entries`` live entries, at ``at``) or ``default`` (``entries`` is how many have vectors so far)."""

    value: float
    source: str
    model: str
    entries: int = 0
    at: str | None = None
    matched: str = ""

    def describe(self) -> str:
        if self.source == OPTION:
            return f"{self.value:.3f} (option EmbeddingSimilarityThreshold)"
        if self.source == TABLE:
            return f"{self.value:.3f} (table: {self.matched}, EmbeddingModel {self.model})"
        if self.source == CALIBRATED:
            when = f" at {self.at}" if self.at else ""
            return f"{self.value:.3f} (calibrated on {self.entries} entries of EmbeddingModel {self.model}{when})"
        return (
            f"{self.value:.3f} (default: {self.entries} live entries have vectors of EmbeddingModel {self.model}, "
            f"calibration needs {CALIBRATION_MIN_ENTRIES})"
        )


def table_threshold(model: str) -> SimilarityThreshold | None:
    """The measured threshold of ``model`` from ``KNOWN_THRESHOLDS``; None for a model not in it."""
    name = model.strip().lower()
    for part, value, _how in KNOWN_THRESHOLDS:
        if part in name:
            return SimilarityThreshold(value, TABLE, model.strip(), matched=part)
    return None


def calibrate(matrix: np.ndarray) -> dict[str, float]:
    """The threshold for vectors like the rows of ``matrix`` (unit rows of one model, two or more), with the figures
    it came from: ``threshold``, ``pair_mean`` and ``pair_q99`` (the mean and the 99th percentile of the cosines of
    all pairs of different rows: rows repeated, one text saved twice, count once)."""
    m = np.asarray(matrix, dtype=np.float32)
    if m.ndim != 2 or m.shape[0] < 2:
        raise ValueError(f"calibrate: {m.shape[0] if m.ndim else 0} vector(s); at least 2 are needed")
    norms = np.linalg.norm(m, axis=1, keepdims=True)
    m = np.divide(m, norms, out=np.zeros_like(m), where=norms > 0)
    # Entries of one text share one vector: a pair of them is one fact saved twice, not two different facts, and a
    # corpus not yet consolidated holds enough of them to put the 99th percentile at 1.0 (no near-duplicate found).
    m = np.unique(m, axis=0)
    if m.shape[0] < 2:
        raise ValueError("calibrate: the vectors are all one; at least 2 different ones are needed")
    sims = m @ m.T
    pairs = sims[np.triu_indices(m.shape[0], 1)].astype(np.float64)
    mean = float(pairs.mean())
    floor = float(np.quantile(pairs, CALIBRATION_FLOOR_QUANTILE))
    value = min(CALIBRATION_CEILING, max(mean + CALIBRATION_SHARE * (1.0 - mean), floor))
    return {"threshold": round(value, 4), "pair_mean": round(mean, 4), "pair_q99": round(floor, 4)}


def similarity_threshold(
    options: DreamOptions, store: Any, *, now: datetime, keep: bool = True
) -> SimilarityThreshold | None:
    """The near-duplicate cosine for ``options.EmbeddingModel`` on ``store`` (DreamStore, MemoryStore or
    StoreConnection); None when no embedding model is set (the lexical measure applies). Reads only vectors already
    kept: never calls the endpoint. ``keep``: a new calibration is written to the store (False for a reader such as
    ``dream status``, or a caller inside its own transaction)."""
    model = options.EmbeddingModel.strip()
    if not model:
        return None
    if options.EmbeddingSimilarityThreshold > 0:
        return SimilarityThreshold(float(options.EmbeddingSimilarityThreshold), OPTION, model)
    found = table_threshold(model)
    if found is not None:
        return found
    cache = EmbeddingCache(connection_of(store))
    key = vector_key(model)  # the vectors of memories are cached under it (with the model's input prefix)
    kept = _usable(cache.calibration(key))
    count = cache.live_count(key)
    if kept is not None and count < RECALIBRATE_GROWTH * kept.entries:
        return kept
    if count < CALIBRATION_MIN_ENTRIES:
        return kept or SimilarityThreshold(DEFAULT_THRESHOLD, DEFAULT, model, entries=count)
    _, matrix = cache.live_vectors(key, limit=CALIBRATION_SAMPLE)
    try:
        figures = calibrate(matrix)
    except ValueError:  # every entry one text: nothing to measure yet
        return kept or SimilarityThreshold(DEFAULT_THRESHOLD, DEFAULT, model, entries=count)
    at = iso(now)
    record = {"model": model, "entries": count, "calibrated_at": at, **figures}
    if keep:
        cache.keep_calibration(key, record)
    log.info(
        "similarity threshold for EmbeddingModel %r calibrated on %d entries: %.4f (mean of pairs %.4f, 99th "
        "percentile %.4f)",
        model,
        count,
        figures["threshold"],
        figures["pair_mean"],
        figures["pair_q99"],
    )
    return SimilarityThreshold(figures["threshold"], CALIBRATED, model, entries=count, at=at)


def _usable(record: dict[str, Any] | None) -> SimilarityThreshold | None:
    if not record:
        return None
    try:
        value, entries = float(record["threshold"]), int(record["entries"])
    except (KeyError, TypeError, ValueError):
        return None
    if not 0.0 < value <= 1.0 or entries < CALIBRATION_MIN_ENTRIES:
        return None
    return SimilarityThreshold(
        value, CALIBRATED, str(record.get("model") or ""), entries=entries, at=record.get("calibrated_at")
    )
