"""The search every interface uses (``agent_memory.search`` and ``recall_entries``: the CLI, MCP, LangGraph, the
folders): BM25 alone, or BM25 and embeddings fused when an embedding model is configured.

With ``EmbeddingModel`` set, a search asks the endpoint for one vector, the query's (one request; the entries'
vectors are those kept at save time and by the near-duplicate scan), takes the
``FUSION_DEPTH`` best of each list (the embeddings' from the vectors a process that searches again keeps in memory,
dense_index.py) and fuses them by weighted reciprocal rank fusion: an entry scores the sum over
the lists it is in of ``weight / (FUSION_K + rank)``, BM25's weight 1, the embeddings' ``FUSION_DENSE_WEIGHT``.
k = 2 and 1.5, not the k = 60 of Cormack, Clarke and Buettcher (SIGIR 2009), were chosen on recall@10 of the QA
questions of LoCoMo conv-26 to conv-43 with multilingual-e5-small and held on conv-44 to conv-50 (benchmarks/
embeddings.py; all ten: BM25 alone 0.565, embeddings alone 0.616, k 60 0.605, k 2 and weight 1.5 0.654): with two
lists a large k lets an entry both lists rank midway push out the top answer of either. The fused list then goes
through the recall rules of store/recall.py (the current version of a fact first, a superseded entry below its
successor), as BM25's does.

Without an embedding model nothing changes: BM25 alone, no request. When the endpoint fails (or failed within
``SAVE_EMBEDDING_PAUSE``, the pause saves observe too), the search answers by BM25 alone and says so in its note;
it never fails for it. An entry without a vector yet is found by BM25 alone.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from datetime import datetime

from dream_assets import dense_index
from dream_assets import recall_index as recall
from dream_assets.model import MemoryEntry
from dream_assets.store.memory import MemoryStore
from dream_assets.store.recall import candidate_count, rank
from dream_assets.text.tokens import tokenize

__all__ = ["BM25", "FUSED", "FUSION_DEPTH", "FUSION_K", "Recall", "fuse_ranks", "search"]

log = logging.getLogger("dream_assets.recall_fusion")

#: The k of reciprocal rank fusion (see the module docstring for why not 60).
FUSION_K = 2
#: The weight of the embeddings' list against BM25's (1).
FUSION_DENSE_WEIGHT = 1.5
#: Candidates taken from each list before fusing.
FUSION_DEPTH = 50

BM25, FUSED = "bm25", "bm25+embeddings"


@dataclass(frozen=True)
class Recall:
    """The entries found (best first, with their scores), how (``BM25`` or ``FUSED``) and, when embeddings should
    have been used but were not, why (``note``); of a fused search, where the embeddings' list came from (``dense``:
    ``dense_index.SQL``, the store's join, or ``dense_index.KEPT``, the vectors this process keeps)."""

    hits: list[tuple[MemoryEntry, float]] = field(default_factory=list)
    method: str = BM25
    note: str | None = None
    dense: str | None = None


def fuse_ranks(
    *lists: list[str], k: int = FUSION_K, weights: tuple[float, ...] | None = None
) -> list[tuple[str, float]]:
    """Reciprocal rank fusion of ranked id lists: (id, sum of weight / (k + rank)), best first (ties: by id);
    ``weights`` one per list (default 1 each)."""
    weights = weights or (1.0,) * len(lists)
    if len(weights) != len(lists):
        raise ValueError(f"fuse_ranks: {len(weights)} weight(s) for {len(lists)} list(s)")
    scores: dict[str, float] = {}
    for ranked, weight in zip(lists, weights, strict=True):
        for place, doc_id in enumerate(ranked, start=1):
            scores[doc_id] = scores.get(doc_id, 0.0) + weight / (k + place)
    return sorted(scores.items(), key=lambda item: (-item[1], item[0]))


def search(memories: MemoryStore, query: str, limit: int, *, now: datetime, k: int = FUSION_K) -> Recall:
    """Live entries for ``query``, best first: fused with embeddings when a model is configured and its endpoint
    answers, else BM25 alone (``recall_index.search``)."""
    if limit <= 0:
        return Recall()
    if not memories.options.EmbeddingModel.strip():
        # No model, so nothing to fuse or to be held back (``store_embeddings`` would say so too): a shell's search
        # does not load the save pipeline and the embeddings' code for it.
        return Recall(recall.search(memories, query, limit=limit), BM25)
    from dream_assets.save_pipeline import store_embeddings

    embeddings = store_embeddings(memories)
    index = embeddings.index(memories, now)
    held = embeddings.held_back(now)
    if index is None or held is not None:
        return Recall(
            recall.search(memories, query, limit=limit), BM25, None if held is None else f"{held}: BM25 alone"
        )
    depth = max(FUSION_DEPTH, candidate_count(limit, memories.options))
    lexical = recall.search(memories, query, limit=depth)
    try:
        vector = index.provider.embed([query], pass_name="search", kind="query")[0]
        dense, path = dense_index.nearest_live(index.cache, index.model, vector, limit=depth)
    except Exception as exc:  # noqa: BLE001 - an endpoint failure of any kind never fails the search: BM25 alone
        log.warning("search used BM25 alone: embeddings failed: %s", exc)
        return Recall(lexical[:limit], BM25, f"{embeddings.fail(now, exc)}: BM25 alone")
    fused = fuse_ranks(
        [e.id for e, _ in lexical], [doc_id for doc_id, _ in dense], k=k, weights=(1.0, FUSION_DENSE_WEIGHT)
    )
    by_id = {e.id: e for e, _ in lexical}
    wanted = [doc_id for doc_id, _ in fused if doc_id not in by_id]
    if wanted:
        with memories.connection.session() as conn:
            by_id.update({e.id: e for e in memories.live_entries(conn, wanted)})
    hits = [(by_id[doc_id], score) for doc_id, score in fused if doc_id in by_id]
    return Recall(rank(hits, tokenize(query), memories.options, limit), FUSED, dense=path)
