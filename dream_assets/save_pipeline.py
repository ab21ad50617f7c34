"""The save decision (spec: "Duplicates are avoided at save time"), one pipeline read top to bottom:

    exact twin -> candidates -> measure -> absorb or create -> write with its change row

1. **Exact twin.** A live entry of the same category with the same text (case, white space and punctuation aside,
   text/similarity.exact_key), the same subject time, not a signal, that the save-time rules let the text reinforce
   (a name written with other capitals may be a correction): reinforced, and nothing else is looked at.
2. **Candidates.** The live entries the save may land on, with how similar they are: by embedding cosine when an
   embedding model is set (the entries BM25 ranks highest for the text, ``SAVE_EMBEDDING_CANDIDATES`` of them, at or
   above the model's threshold: ``EmbeddingSimilarityThreshold`` when set, else measured or calibrated for the model,
   llm/embedding_threshold.py), else by the store's lexical measure (``MemoryStore.similarity_measure``).
   Another real-world moment (another subject time) is never a candidate. Most similar first, the older on a tie.
3. **Measure.** Each candidate that is not a signal is held against the text by the save-time rules (store/dedup.py):
   reinforce (the text adds nothing), extend (it only adds sentences) or create (a correction, another fact).
4. **Absorb or create.** The first candidate the text reinforces, else the first it extends, absorbs the save; with
   none, a new entry is created and the result names the closest candidate and why it was kept apart.
5. **Write with its change row.** One statement when the save creates its entry, else one transaction; an extend
   writes its change row (pass ``save``) in that transaction unless the caller records the change itself.

Embeddings are asked for before the store is held (step 2 runs its request first, outside the write), never inside a
caller's transaction (cached vectors only, else the lexical measure). An endpoint that fails makes the save use the
lexical measure and say so, and saves within ``SAVE_EMBEDDING_PAUSE`` after that do not try it. The store keeps the
rows, the recall index and the vectors table; what to do with them is decided here.
"""

from __future__ import annotations

import logging
import threading
import weakref
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import datetime, timedelta
from typing import TYPE_CHECKING

from dream_assets import cycle_ids
from dream_assets import recall_index as recall
from dream_assets.changes_model import Actor, ChangeRow
from dream_assets.llm.embedding_threshold import CALIBRATED, DEFAULT, SimilarityThreshold, similarity_threshold
from dream_assets.model import SUBJECT_TIME_KEYS, MemoryEntry, is_signal, is_signal_entry, new_id, utc_or_now
from dream_assets.recall_index import SaveText
from dream_assets.store.change_rows import insert_change
from dream_assets.store.dedup import EXTEND, REINFORCE, DedupDecision
from dream_assets.store.dedup import decide as decide_dedup
from dream_assets.store.memory import MemoryStore, SaveResult, normalise_tags

if TYPE_CHECKING:
    from dream_assets.llm.embedding_index import EmbeddingIndex

log = logging.getLogger("dream_assets.service.save")

#: Live entries (BM25's best for the incoming text) a save compares by embedding cosine.
SAVE_EMBEDDING_CANDIDATES = 20
#: After a failed embeddings call, saves use the lexical measure for this long without trying the endpoint.
SAVE_EMBEDDING_PAUSE = timedelta(minutes=5)
#: A calibrated (or default) threshold is looked up again after this many saves: the corpus it follows has grown.
THRESHOLD_REFRESH_SAVES = 50
# float32 rounding of a cosine, as clustering allows.
_FLOAT32_SLACK = 1e-6


@dataclass(frozen=True)
class _Candidates:
    """Step 2's answer before the store is held: ``sims`` (id -> embedding cosine) when embeddings chose the
    candidates, None for the lexical measure; ``note`` says why embeddings were not used when they should have been."""

    sims: Mapping[str, float] | None = None
    note: str | None = None
    threshold: float | None = None


@dataclass(frozen=True)
class _Plan:
    """What a save writes: reinforce ``twin``, absorb into ``chosen`` (a candidate and the decision), or create a
    new entry, naming ``near`` (the closest candidate kept apart, and why) when there is one."""

    twin: MemoryEntry | None = None
    chosen: tuple[MemoryEntry, float, DedupDecision] | None = None
    near: tuple[MemoryEntry, float, str] | None = None
    note: str | None = None

    @property
    def creates(self) -> bool:
        return self.twin is None and self.chosen is None


def save_memory(
    memories: MemoryStore,
    content: str,
    *,
    category: str = "general",
    tags: Sequence[str] = (),
    importance: float = 0.5,
    metadata: Mapping[str, str] | None = None,
    now: datetime | None = None,
    dedupe: bool = True,
    record_change: bool = True,
    on_saved: Callable[[SaveResult], None] | None = None,
) -> SaveResult:
    """Save a memory into ``memories`` as the pipeline decides (see the module docstring). Stored text is never
    rewritten. A signal (a user correction, feedback or a capability claim: ``model.is_signal``) neither absorbs nor
    is absorbed. ``now`` defaults to the current UTC time. ``on_saved`` is called with the result inside the write
    transaction (a change-log row written there is committed with the save, or neither is); ``record_change=False``
    leaves an extend's change row to a caller that records the change itself."""
    now = utc_or_now(now)
    content, category, tags_, importance, meta = memories.validate(content, category, tags, importance, metadata or {})
    # Each occurrence of a user correction, feedback or a capability claim is a signal: never absorbed.
    dedupe = dedupe and not is_signal(category, tags_, meta)
    # The recall index and vectors first, outside the write transaction: neither a first index build nor an
    # embeddings request runs while the store is held.
    recall.prepare(memories)
    text = SaveText(content)
    ahead = _embedding_candidates(memories, text, category, meta, now) if dedupe else _Candidates()
    # The plan only reads; what it decides is written by one statement when the save creates its entry, else in a
    # transaction. Both inside the one session, which no other process or thread writes meanwhile; with
    # ``on_saved`` everything is one transaction.
    with recall.save_session(memories, transaction=on_saved is not None) as conn:
        plan = _plan(memories, conn, text, category, meta, ahead) if dedupe else _Plan(note=ahead.note)
        with memories.save_write(creates=plan.creates) as conn:
            result = _write(memories, conn, plan, text, category, tags_, importance, meta, now, record_change)
        if on_saved is not None:
            on_saved(result)
    return result


# --- 1. exact twin ----------------------------------------------------------------------------------------------------
def _exact_twin(
    memories: MemoryStore, conn, text: SaveText, category: str, meta: Mapping[str, str]
) -> MemoryEntry | None:
    """The oldest live exact duplicate in the same category whose subject time does not differ and that the save-time
    rules let the text reinforce ("GitHub" against "Github" may be a correction: not a twin)."""
    incoming = _subject_time(meta)
    for entry in recall.exact_matches(memories, conn, text.key, category):
        if incoming and entry.subject_time and incoming != entry.subject_time:
            continue
        if is_signal_entry(entry):
            continue  # a signal is never reinforced by another occurrence
        if _decide(memories, entry, text.content, category).action == REINFORCE:
            return entry
    return None


# --- 2. candidates ----------------------------------------------------------------------------------------------------
def _embedding_candidates(
    memories: MemoryStore, text: SaveText, category: str, meta: Mapping[str, str], now: datetime
) -> _Candidates:
    """The embedding cosine of the save's candidates, asked for before the store is held; the lexical measure
    (``sims`` None) when no embedding model is set, an exact twin will be reinforced, or embeddings fail."""
    embeddings = store_embeddings(memories)
    index = embeddings.index(memories, now)
    held = embeddings.held_back(now)
    if index is None or held is not None:
        return _Candidates(note=None if held is None else f"{held}: {_LEXICAL}")
    with recall.save_session(memories, transaction=False) as conn:
        if _exact_twin(memories, conn, text, category, meta) is not None:
            return _Candidates()  # reinforced word for word: no vector needed
        docs = recall.recall_candidates(memories, conn, text, limit=SAVE_EMBEDDING_CANDIDATES)
    if not docs:
        return _Candidates(sims={})
    if memories.connection.in_transaction and index.missing([text.content, *(t for _, t in docs)]):
        # A caller holds the store: no request now. Its missing vectors come with the next scan or free save.
        return _Candidates()
    index.now = now
    try:
        sims = dict(index.similar(text.content, docs))
    except Exception as exc:  # noqa: BLE001 - an endpoint failure of any kind never fails the save: lexical measure
        log.warning("save-time dedup used the lexical measure: embeddings failed: %s", exc)
        return _Candidates(note=f"{embeddings.fail(now, exc)}: {_LEXICAL}")
    return _Candidates(sims=sims, threshold=embeddings.threshold(memories, now).value)


def _candidates(
    memories: MemoryStore,
    conn,
    text: SaveText,
    meta: Mapping[str, str],
    sims: Mapping[str, float] | None,
    threshold: float | None,
) -> list[tuple[MemoryEntry, float]]:
    """Live entries at or above the save-time threshold, most similar first (ties: the older entry first): by the
    embedding cosine of ``sims`` and the model's ``threshold``, else by the store's lexical measure. Distinct
    real-world moments (spec: Pass 1 "What the LLM does"): another subject time is not a candidate."""
    if sims is not None:
        floor = (threshold if threshold is not None else 1.0) - _FLOAT32_SLACK
        close = {cid: sim for cid, sim in sims.items() if sim >= floor}
    else:
        close = dict(recall.lexical_matches(memories, conn, text))
    if not close:
        return []
    incoming = _subject_time(meta)
    found = [
        (e, close[e.id])
        for e in memories.live_entries(conn, list(close))
        if not (incoming and e.subject_time and incoming != e.subject_time)
    ]
    return sorted(found, key=lambda m: (-m[1], m[0].created_at, m[0].id))


# --- 3. measure, 4. absorb or create ----------------------------------------------------------------------------------
def _plan(
    memories: MemoryStore, conn, text: SaveText, category: str, meta: Mapping[str, str], ahead: _Candidates
) -> _Plan:
    """What a save will write, decided by reads alone."""
    twin = _exact_twin(memories, conn, text, category, meta)
    if twin is not None:
        return _Plan(twin=twin)
    chosen: tuple[MemoryEntry, float, DedupDecision] | None = None
    first: tuple[MemoryEntry, float, str] | None = None
    for existing, similarity in _candidates(memories, conn, text, meta, ahead.sims, ahead.threshold):
        if is_signal_entry(existing):
            continue  # a signal is never reinforced or extended by another save
        decision = _decide(memories, existing, text.content, category)
        if decision.action == REINFORCE:
            chosen = (existing, similarity, decision)
            break
        if decision.action == EXTEND and chosen is None:
            chosen = (existing, similarity, decision)
        first = first or (existing, similarity, decision.reason)
    if chosen is not None:
        return _Plan(chosen=chosen, note=ahead.note)
    return _Plan(near=first, note=ahead.note)


def _decide(memories: MemoryStore, existing: MemoryEntry, content: str, category: str) -> DedupDecision:
    return decide_dedup(
        existing.content,
        content,
        max_chars=memories.options.MaxContentChars,
        stored_category=existing.category,
        incoming_category=category,
    )


# --- 5. write with its change row -------------------------------------------------------------------------------------
def _write(
    memories: MemoryStore,
    conn,
    plan: _Plan,
    text: SaveText,
    category: str,
    tags: tuple[str, ...],
    importance: float,
    meta: dict[str, str],
    now: datetime,
    record_change: bool,
) -> SaveResult:
    if plan.twin is not None:
        return _reinforce_twin(memories, conn, plan.twin, tags, importance, meta, now)
    if plan.chosen is not None:
        return _noted(_absorb(memories, conn, plan.chosen, tags, importance, meta, now, record_change), plan.note)
    entry = MemoryEntry(
        id=new_id(),
        content=text.content,
        category=category,
        tags=tags,
        importance=importance,
        created_at=now,
        updated_at=now,
        last_seen_at=now,
        reinforcement_count=1,
        metadata=meta,
    )
    memories.insert_saved(conn, entry, text)
    if plan.near is None:
        return _noted(SaveResult("created", entry), plan.note)
    near, similarity, why = plan.near
    return _noted(SaveResult("created", entry, matched_id=near.id, similarity=similarity, reason=why), plan.note)


def _reinforce_twin(
    memories: MemoryStore,
    conn,
    existing: MemoryEntry,
    tags: tuple[str, ...],
    importance: float,
    meta: Mapping[str, str],
    now: datetime,
) -> SaveResult:
    """Seen again word for word: last seen and reinforcement move, the stored record's text, tags and ``updated_at``
    do not (the entry was observed, not edited). Importance never drops; a tag or metadata key only the incoming save
    carries is added, so nothing it says is lost."""
    new_tags = normalise_tags((*existing.tags, *tags))
    updated = existing.with_(
        tags=new_tags,
        importance=max(existing.importance, importance),
        last_seen_at=max(existing.last_seen_at, now),
        reinforcement_count=existing.reinforcement_count + 1,
        metadata={**meta, **existing.metadata},
    )
    memories.overwrite(conn, updated, was=existing)
    return SaveResult(
        "reinforced",
        updated,
        matched_id=existing.id,
        similarity=1.0,
        reason="the same text (case, white space and punctuation aside) in the same category",
        before=existing,
    )


def _absorb(
    memories: MemoryStore,
    conn,
    chosen: tuple[MemoryEntry, float, DedupDecision],
    tags: tuple[str, ...],
    importance: float,
    meta: Mapping[str, str],
    now: datetime,
    record_change: bool,
) -> SaveResult:
    """Reinforce or extend the chosen candidate with the saved text; an extend writes its change row with it."""
    existing, similarity, decision = chosen
    new_content = decision.content if decision.action == EXTEND and decision.content else existing.content
    updated = existing.with_(
        content=new_content,
        tags=normalise_tags((*existing.tags, *tags)),
        importance=max(existing.importance, importance),
        # Observed again is not edited: updated_at moves only when the text does.
        updated_at=now if new_content != existing.content else existing.updated_at,
        last_seen_at=max(existing.last_seen_at, now),
        reinforcement_count=existing.reinforcement_count + 1,
        metadata={**meta, **existing.metadata},
    )
    memories.overwrite(conn, updated, was=existing)
    action = "extended" if new_content != existing.content else "reinforced"
    cycle = None
    if action == "extended" and record_change:
        cycle = cycle_ids.save()
        insert_change(
            conn,
            ChangeRow(
                cycle_id=cycle,
                actor=Actor.SAVE_DEDUP,
                kind="updated",
                target_type="memory",
                target_id=existing.id,
                before=existing,
                after=updated,
                reason=f"save-time dedup extended it with the saved text: {decision.reason}",
            ),
            now=now,
        )
    return SaveResult(
        action,
        updated,
        matched_id=existing.id,
        similarity=similarity,
        reason=decision.reason,
        change_cycle=cycle,
        before=existing,
    )


# --- the save-time embeddings of a store ------------------------------------------------------------------------------
_LEXICAL = "the lexical measure was used"


class _SaveEmbeddings:
    """The embedding index the saves of one store use, built on first need from its options and the environment; why
    it could not be built; the last failed call (saves pause trying after it)."""

    def __init__(self) -> None:
        self._index: EmbeddingIndex | None = None
        self._threshold: SimilarityThreshold | None = None
        self._threshold_uses = 0
        self._tried = False
        self.unavailable: str | None = None
        self.failed: tuple[datetime, str] | None = None

    def index(self, memories: MemoryStore, now: datetime) -> EmbeddingIndex | None:
        """None when no embedding model is configured or the provider cannot be built (``unavailable`` says why). No
        retries: a failing endpoint costs a save at most one ``LlmTimeout`` before it falls back to the lexical
        measure."""
        if self._tried:
            return self._index
        self._tried = True
        if not memories.options.EmbeddingModel.strip():
            return None
        # Loaded with the first model configured: a store without one never imports the embeddings client.
        from dream_assets.llm.embedding_index import EmbeddingIndex
        from dream_assets.llm.embeddings import build_embedding_provider

        try:
            provider = build_embedding_provider(memories.options)
        except Exception as exc:  # noqa: BLE001 - whatever the provider does, the save goes on with the lexical measure
            self.unavailable = str(exc)
            log.warning("save-time dedup uses the lexical measure: the embedding provider cannot be built: %s", exc)
            return None
        if provider is None:
            return None
        provider.max_retries = 0
        self._index = EmbeddingIndex(memories.connection, provider, now=now)
        return self._index

    def held_back(self, now: datetime) -> str | None:
        """Why the embeddings are not to be asked at ``now`` though a model is configured (its provider cannot be
        built, or a call failed within ``SAVE_EMBEDDING_PAUSE``): what a save's or a search's note says; else None."""
        if self.unavailable:
            return f"embeddings unavailable ({short_reason(self.unavailable)})"
        if self.failed is not None:
            failed_at, why = self.failed
            if timedelta(0) <= now - failed_at < SAVE_EMBEDDING_PAUSE:
                return f"embeddings failed at {failed_at.isoformat()} ({short_reason(why)})"
        return None

    def fail(self, now: datetime, exc: Exception) -> str:
        """Note a failed call at ``now`` (calls pause for ``SAVE_EMBEDDING_PAUSE``); what the note says of it."""
        self.failed = (now, str(exc))
        return f"embeddings failed ({short_reason(str(exc))})"

    def threshold(self, memories: MemoryStore, now: datetime) -> SimilarityThreshold:
        """The model's near-duplicate threshold (llm/embedding_threshold.py), looked up once and again after
        ``THRESHOLD_REFRESH_SAVES`` saves when it follows the corpus (calibrated or the default). A new calibration
        is kept in the store unless a caller holds it."""
        stale = self._threshold is not None and self._threshold.source in (CALIBRATED, DEFAULT)
        if self._threshold is None or (stale and self._threshold_uses >= THRESHOLD_REFRESH_SAVES):
            keep = not memories.connection.in_transaction
            found = similarity_threshold(memories.options, memories.connection, now=now, keep=keep)
            if found is None:
                raise ValueError("no embedding model is configured: there is no embedding threshold")
            self._threshold, self._threshold_uses = found, 0
        self._threshold_uses += 1
        return self._threshold


_EMBEDDINGS: weakref.WeakKeyDictionary[MemoryStore, _SaveEmbeddings] = weakref.WeakKeyDictionary()
_EMBEDDINGS_LOCK = threading.Lock()


def store_embeddings(memories: MemoryStore) -> _SaveEmbeddings:
    """The embedding index, threshold and failure pause of ``memories`` that saves and searches share."""
    with _EMBEDDINGS_LOCK:
        found = _EMBEDDINGS.get(memories)
        if found is None:
            found = _EMBEDDINGS[memories] = _SaveEmbeddings()
        return found


# --- helpers ----------------------------------------------------------------------------------------------------------
def _subject_time(meta: Mapping[str, str]) -> dict[str, str]:
    return {k: v for k, v in meta.items() if k in SUBJECT_TIME_KEYS and v}


def short_reason(text: str, limit: int = 160) -> str:
    """``text`` on one line, cut to ``limit`` characters: an error as a note shows it."""
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _noted(result: SaveResult, note: str | None) -> SaveResult:
    if not note:
        return result
    return replace(result, reason=f"{result.reason}; {note}" if result.reason else note)
