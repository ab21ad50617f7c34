"""What the memory passes share, so no pass imports another: the memory-changes answer (``toDelete`` / ``toSave`` of
memory entries, the shape of memory consolidation's and preference inference's contracts), the protection floor
archive purge and memory consolidation both keep, the metadata stamps importance decay writes and a merge carries
over, and a pass's save of a memory with its change-log row (preference inference, tier routing)."""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import Field, field_validator

from dream_assets import recall_index as recall
from dream_assets.llm.contracts import Contract, IdList, ShownIds, metadata_text
from dream_assets.model import MemoryEntry
from dream_assets.options import DreamOptions
from dream_assets.passes.context import PassContext
from dream_assets.passes.report import PassReport
from dream_assets.save_pipeline import save_memory
from dream_assets.store.memory import SaveResult

#: Importance decay's calendar stamp: the instant an entry's importance has been decayed through.
DECAY_APPLIED_KEY = "decayAppliedThrough"
#: When a merge made the entry (a merge restarts importance decay's grace period).
MERGED_AT_KEY = "mergedAt"


#: The entries a memory-changes answer may name: those the call shows (``inputs["entries"]``); a call that shows none
#: (preference inference) may name none.
EntryIds = Annotated[IdList, ShownIds("entries.id")]


class MemorySave(Contract):
    content: str
    category: str = "general"
    tags: list[str] = Field(default_factory=list)
    source_ids: EntryIds = Field(default_factory=list, alias="sourceIds")
    # Preference inference sets e.g. {"requires_user_permission": "true"} (spec, pass 5).
    metadata: dict[str, str] = Field(default_factory=dict)

    @field_validator("metadata", mode="before")
    @classmethod
    def _metadata_as_text(cls, value: Any) -> Any:
        return metadata_text(value)


class MemoryChanges(Contract):
    to_delete: EntryIds = Field(default_factory=list, alias="toDelete")
    to_save: list[MemorySave] = Field(default_factory=list, alias="toSave")


def is_high_value(entry: MemoryEntry, options: DreamOptions) -> bool:
    """Protected from removal by a pass: important enough, or reinforced often enough."""
    return (
        entry.importance >= options.PruningProtectionImportance
        or entry.reinforcement_count >= options.PruningProtectionReinforcementCount
    )


def save_memory_recorded(
    ctx: PassContext,
    report: PassReport,
    pass_name: str,
    content: str,
    *,
    category: str,
    tags: list[str],
    importance: float,
    metadata: dict[str, str],
    reason: str,
    required_metadata: dict[str, str] | None = None,
) -> tuple[SaveResult, Any]:
    """Save through save-time dedup and record the change so the cycle can be undone; the save and its change-log
    row are one store transaction (a stop between them leaves neither).

    A new entry is recorded as "created". When dedup reinforced or extended an existing entry, that entry's record
    from before the save is recorded as ``before`` ("updated"), so undo puts it back exactly. ``required_metadata``
    is made to hold on the resulting entry even when dedup merged into an entry whose own metadata wins (the
    permission flag must survive a merge). Returns the save result and the entry as stored.
    """
    store = ctx.store.memories
    with ctx.store.transaction():
        # Dedup picks its match among the top BM25 hits of the same tokens; a wider net here holds the match's
        # pre-save record for the change log.
        before_candidates = {e.id: e for e, _ in recall.search(store, content, limit=50)}
        result = save_memory(
            store,
            content,
            category=category,
            tags=tags,
            importance=importance,
            metadata=metadata,
            now=ctx.now,
            record_change=False,  # recorded below, under this cycle
        )
        entry = result.entry
        missing = {k: v for k, v in (required_metadata or {}).items() if entry.metadata.get(k) != v}
        if missing:
            store.set_metadata({entry.id: missing})
            entry = store.get(entry.id) or entry
        if result.action == "created":
            ctx.record(pass_name, "created", entry, before=None, after=entry, reason=reason)
            return result, entry
        before = before_candidates.get(entry.id)
        if before is None:  # cannot happen while dedup searches the same index; never record a false "before"
            report.warn(
                f"memory {entry.id} was {result.action} but its previous record was not captured; "
                "this change cannot be undone automatically"
            )
            before = entry
        ctx.record(
            pass_name,
            "updated",
            entry,
            before=before,
            after=entry,
            reason=f"{reason}: {result.action} an existing entry (save-time dedup, similarity "
            f"{(result.similarity or 0.0):.2f})",
        )
    return result, entry
