"""What an agent does with its memory, one function per operation: the library the MCP server (``dream serve``),
the ``dream memory`` commands and other agent-facing interfaces call.

Every function takes the agent's ``profile`` (its folder, or an ``AgentProfile``), ``options`` (default: the agent's
own, ``load_agent_options``) and ``now`` (default: the current UTC time), and returns a plain pydantic model (typed,
JSON-ready with ``model_dump(mode="json")``). Errors are ``AgentMemoryError`` subclasses whose message names the field:
``InvalidInput`` (the caller's value breaks a rule), ``NotFound`` (no such memory or skill), ``StoreUnavailable``
(the store stayed held longer than ``StoreLockTimeout``: try again).

Rules shared by every call:

- Text is checked like model text (``passes/model_text.py``): no lone surrogate, no NUL or other control character
  (``\\n``, ``\\t`` and ``\\r\\n`` are fine), memory content at most ``MaxContentChars``.
- Each call marks the agent active for ``AgentActiveWindow`` (the busy lease, ``llm/busy.py``), so a dream pass
  waits for a quiet spell instead of starting a model call in the middle of the agent's conversation.
- No store connection is held against another process between calls (the process's connection helper lets the file
  go within a quarter of a second, a server's warm agents after ``--store-linger`` (service/warm.py), and at once when
  a dream pass waits); a save made while a cycle runs waits its fair turn and is never lost.
- A save applies the save-time rules of ``store/dedup.py`` (created, reinforced or extended, with the reason) and
  records the change in the change log under the day's ``agent-YYYY-MM-DD`` cycle (pass ``agent``), so ``history``
  shows it and ``dream undo`` can take it back. ``put`` (a key-value store's exact put under an id the caller
  chose, the LangGraph store's) skips the save-time rules and is recorded the same way. ``forget`` archives (never
  deletes) under a cycle of its own that ``dream undo --cycle`` reverses.
"""

from __future__ import annotations

import base64
import binascii
import json
from collections.abc import Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Literal

from pydantic import Field

from dream_assets import cycle_ids, recall_fusion
from dream_assets import recall_index as recall

# The errors, results and call opening every operation shares (calls.py), re-exported: this module's API.
from dream_assets.calls import AgentMemoryError as AgentMemoryError
from dream_assets.calls import Call as Call
from dream_assets.calls import CycleReportText as CycleReportText
from dream_assets.calls import DreamStatus as DreamStatus
from dream_assets.calls import InvalidInput as InvalidInput
from dream_assets.calls import MemoryHandle as MemoryHandle
from dream_assets.calls import NotFound as NotFound
from dream_assets.calls import PassState as PassState
from dream_assets.calls import Refused as Refused
from dream_assets.calls import Result, check_value, open_call_store
from dream_assets.calls import ReviewWaits as ReviewWaits
from dream_assets.calls import StoreUnavailable as StoreUnavailable
from dream_assets.calls import begin_call as begin_call
from dream_assets.calls import check_id as check_id
from dream_assets.changes_model import ACTOR_PASS_NAMES, Actor, ChangeRow, SuccessorHow
from dream_assets.model import MemoryEntry, Skill, clock_problem, iso, parse_ts, utc
from dream_assets.names import MAX_NAME_LENGTH
from dream_assets.options import DreamOptions, load_agent_options

# The text limits and vocabularies the checks apply, re-exported for interfaces that show them (schemas, --help).
from dream_assets.passes.model_text import MAX_CATEGORY_CHARS as MAX_CATEGORY_CHARS
from dream_assets.passes.model_text import MAX_ID_CHARS as MAX_ID_CHARS
from dream_assets.passes.model_text import MAX_TAG_CHARS as MAX_TAG_CHARS
from dream_assets.passes.model_text import MAX_TAGS as MAX_TAGS
from dream_assets.profile import AgentProfile, as_profile
from dream_assets.store import DreamStore, open_store
from dream_assets.store.changes import DECAY_KIND, ChangeRecord
from dream_assets.store.connection import StoreError
from dream_assets.store.log_records import FEEDBACK_KINDS as FEEDBACK_KINDS
from dream_assets.store.log_records import RATINGS as RATINGS
from dream_assets.store.log_records import ROLES as ROLES
from dream_assets.store.log_records import SKILL_ACTIONS as SKILL_ACTIONS
from dream_assets.store.log_records import (
    ConversationTurn,
    FeedbackEvent,
    LogRecord,
    SkillUsageEvent,
    ToolCallEvent,
)
from dream_assets.store.memory import (
    ARCHIVED_REASON_KEY,
    MERGED_INTO_KEY,
    SUPERSEDED_BY_KEY,
    SUPERSESSION_REASON_KEY,
    ContentError,
    SaveResult,
)
from dream_assets.store.skills import MAX_SKILL_CHARS as MAX_SKILL_CHARS
from dream_assets.store.skills import SkillError

#: The pass name agent saves are recorded under in the change log, and the prefix of their (daily) cycle id.
AGENT_PASS = ACTOR_PASS_NAMES[Actor.AGENT_SAVE]
#: The pass name and cycle-id prefix of ``forget``.
FORGET_PASS = ACTOR_PASS_NAMES[Actor.AGENT_FORGET]
#: Most hits one search returns.
MAX_SEARCH_LIMIT = 100
#: Most memories one ``list_memories`` page holds.
MAX_LIST_LIMIT = 500
#: Longest skill name.
MAX_NAME_CHARS = MAX_NAME_LENGTH
#: Longest reason of a forget, and longest skill summary.
MAX_REASON_CHARS = 2000
MAX_SUMMARY_CHARS = 2000
#: Longest free text in a log record (a conversation turn, a feedback note, a tool error).
MAX_LOG_TEXT_CHARS = 1_000_000
#: Successors followed from an archived id to the live entry that holds its fact.
MAX_SUCCESSOR_HOPS = 20


# --- results --------------------------------------------------------------------------------------------------------


class SavedMemory(Result):
    """What a save did: ``created`` a new entry, or ``reinforced`` / ``extended`` the live entry ``id``."""

    id: str = Field(description="the entry that now holds the fact")
    outcome: Literal["created", "reinforced", "extended"]
    reason: str | None = Field(None, description="why it was reinforced, extended, or kept apart from matched_id")
    matched_id: str | None = Field(None, description="the near-duplicate live entry the save was compared with")
    similarity: float | None = None
    content: str = Field(description="the entry's text after the save")
    category: str


class MemoryHit(Result):
    id: str
    score: float = Field(description="recall score, higher is better (comparable within one search)")
    content: str
    category: str
    tags: list[str]
    updated_at: str = Field(description="ISO-8601 UTC")


class SearchResult(Result):
    query: str
    hits: list[MemoryHit]
    method: str = Field("bm25", description="bm25, or bm25+embeddings when an embedding model ranked too")
    note: str | None = Field(None, description="why embeddings were not used although a model is configured")


class MemoryRecord(Result):
    """One memory, live or not. For one that is no longer live: why (``archived_reason``), the entry it went into
    (``merged_into`` / ``superseded_by``) and the live entry that now holds its fact (``current_id``)."""

    id: str
    status: Literal["live", "archived", "purged"]
    content: str
    category: str
    tags: list[str]
    importance: float
    created_at: str | None
    updated_at: str | None
    last_seen_at: str | None
    reinforcement_count: int
    archived_at: str | None = None
    archived_reason: str | None = None
    merged_into: str | None = None
    superseded_by: str | None = None
    current_id: str | None = Field(None, description="the live entry that holds this fact now (this id when live)")
    metadata: dict[str, str] = Field(default_factory=dict)


class MemoryListItem(Result):
    id: str
    status: Literal["live", "archived"]
    content: str
    category: str
    tags: list[str]
    importance: float
    created_at: str | None = Field(description="ISO-8601 UTC; the page order is created_at, then id")
    updated_at: str | None
    archived_at: str | None = None


class MemoryPage(Result):
    """One page of ``list_memories``: the oldest first (created time, then id), so a page never shifts when memories
    are saved while a caller pages."""

    items: list[MemoryListItem]
    next_cursor: str | None = Field(
        None, description="give it as cursor to read the next page; null when this page is the last"
    )


class HistoryEvent(Result):
    at: str = Field(description="ISO-8601 UTC")
    event: Literal[
        "created",
        "reinforced",
        "extended",
        "merged in",
        "merged out",
        "superseded",
        "supersedes",
        "updated",
        "archived",
        "restored",
        "purged",
        "decayed",
        "unpurged",
        "decay undone",
        "undone",
    ]
    cycle_id: str
    pass_name: str
    reason: str
    content: str | None = Field(
        None, description="the entry's text after the change (before it, for a purge; unchanged by a decay)"
    )
    importance: float | None = Field(None, description="the entry's importance after the change")
    undone_at: str | None = None
    change_id: str | None = Field(
        None, description="the change's id: `dream undo --change` (or the agent's memory_undo) undoes it alone"
    )


class MemoryHistory(Result):
    id: str
    events: list[HistoryEvent]


class PutMemory(Result):
    """What a put did: ``created`` the entry ``id``, ``updated`` its text, ``restored`` it (it was archived), or
    ``reinforced`` it (the same value put again: the fact came up again, as a save of the same text says)."""

    id: str
    outcome: Literal["created", "updated", "restored", "reinforced"]
    content: str
    category: str
    cycle_id: str = Field(description="the change-log cycle the put is recorded under, for dream undo")


class ForgetResult(Result):
    id: str
    archived: bool = Field(description="false when the entry was archived already (nothing changed)")
    cycle_id: str | None = Field(None, description="the change-log cycle of this forget, for dream undo")
    undo_command: str | None = None


class SkillSummary(Result):
    name: str
    summary: str
    updated_at: str | None
    last_used_at: str | None
    archived: bool


class SkillRecord(SkillSummary):
    content: str
    see_also: list[str]


class SkillList(Result):
    skills: list[SkillSummary]


class Recorded(Result):
    """A log record appended (``log`` is its log, ``timestamp`` the time it carries)."""

    log: str
    session_id: str | None
    timestamp: str


# --- plumbing -------------------------------------------------------------------------------------------------------


def connect(profile: AgentProfile | str | Path, options: DreamOptions | None = None) -> MemoryHandle:
    """An open handle on the agent's store (``options`` default: the agent's own), to pass as ``profile`` to the
    operations of this module; ``close()`` it when done. It holds no connection between calls either."""
    prof = as_profile(profile)
    try:
        return open_store(prof, load_agent_options(prof) if options is None else options)
    except StoreError as exc:
        raise StoreUnavailable(str(exc)) from exc


def _store_errors(exc: Exception) -> AgentMemoryError:
    if isinstance(exc, StoreError):
        return StoreUnavailable(str(exc))
    return InvalidInput(str(exc))


# --- memories -------------------------------------------------------------------------------------------------------


def save(
    profile: AgentProfile | str | Path,
    content: str,
    *,
    category: str = "general",
    tags: Sequence[str] = (),
    importance: float = 0.5,
    metadata: dict[str, str] | None = None,
    options: DreamOptions | None = None,
    now: datetime | None = None,
    active: bool = True,
) -> SavedMemory:
    """Save a fact. The save-time rules decide the outcome: ``created``, or ``reinforced`` / ``extended`` when a live
    entry already says it (``reason`` says why, ``matched_id`` names the near-duplicate kept apart otherwise).
    ``metadata`` (strings to strings, e.g. where the fact came from) is kept on a created entry. ``active=False``
    for a save that is not the agent speaking (a folder read at the start of a cycle): no busy lease."""
    call = begin_call(profile, options, now, active=active)
    _check_save(call, content, category, tags, importance)
    store = open_call_store(call)

    def record(result: SaveResult) -> None:
        store.changes.record(_save_change(call, result), now=call.now)

    try:
        from dream_assets.save_pipeline import save_memory  # the service package imports this module

        result = save_memory(
            store.memories,
            content,
            category=category,
            tags=tags,
            importance=importance,
            metadata=metadata,
            now=call.now,
            on_saved=record,
            record_change=False,  # every outcome is recorded by ``record``, under the agent's day cycle
        )
    except (ContentError, StoreError) as exc:
        raise _store_errors(exc) from exc
    return _saved(result)


#: Saves one ``save_many`` transaction holds the store for at most.
SAVE_MANY_CHUNK = 500


def save_many(
    profile: AgentProfile | str | Path,
    notes: Sequence[dict],
    *,
    options: DreamOptions | None = None,
    now: datetime | None = None,
    active: bool = True,
) -> list[SavedMemory]:
    """``save`` of each of ``notes`` (dicts of ``save``'s keyword arguments: ``content`` and optionally
    ``category``, ``tags``, ``importance``, ``metadata``), in order, with the same outcomes and change-log rows, but
    ``SAVE_MANY_CHUNK`` saves to a transaction, their new rows and change rows inserted in bulk: a folder of
    thousands of notes is read in seconds instead of milliseconds a note. Every note is checked before any is
    saved. With an embedding model configured each save is its own transaction (an embeddings request never runs
    while the store is held)."""
    call = begin_call(profile, options, now, active=active)
    for note in notes:
        _check_save(
            call,
            note["content"],
            note.get("category", "general"),
            note.get("tags", ()),
            note.get("importance", 0.5),
        )
    if call.options.EmbeddingModel.strip():
        return [
            save(call.handle or call.profile, **note, options=call.options, now=call.now, active=False)
            for note in notes
        ]
    from dream_assets.save_pipeline import save_memory  # the service package imports this module

    store = open_call_store(call)
    out: list[SavedMemory] = []
    rows: list[ChangeRow] = []

    def record(result: SaveResult) -> None:
        rows.append(_save_change(call, result))

    try:
        for start in range(0, len(notes), SAVE_MANY_CHUNK):
            rows.clear()
            recall.prepare(store.memories)  # the saves of a block need the index: built before the store is held
            with store.memories.batched():
                for note in notes[start : start + SAVE_MANY_CHUNK]:
                    result = save_memory(
                        store.memories,
                        note["content"],
                        category=note.get("category", "general"),
                        tags=note.get("tags", ()),
                        importance=note.get("importance", 0.5),
                        metadata=note.get("metadata"),
                        now=call.now,
                        on_saved=record,
                        record_change=False,
                    )
                    out.append(_saved(result))
                store.changes.record_many(rows, now=call.now)
    except (ContentError, StoreError) as exc:
        raise _store_errors(exc) from exc
    return out


def _check_save(call: Call, content: object, category: object, tags: Sequence[str], importance: object) -> None:
    check_value(content, "content", "content", max_chars=call.options.MaxContentChars)
    check_value(category, "category", "category")
    check_value(list(tags), "tags", "tags")
    if isinstance(importance, bool) or not isinstance(importance, int | float) or not 0.0 <= importance <= 1.0:
        raise InvalidInput(f"importance {importance!r} must be a number between 0 and 1")


def _save_change(call: Call, result: SaveResult) -> ChangeRow:
    """The change-log row of one save by the agent."""
    kind, reason = (
        ("created", "saved by the agent")
        if result.action == "created"
        else ("updated", f"{result.action} by a save of the agent: {result.reason or 'same fact'}")
    )
    return ChangeRow(
        cycle_id=cycle_ids.agent_day(call.now),
        actor=Actor.AGENT_SAVE,
        kind=kind,
        target_type="memory",
        target_id=result.entry.id,
        before=result.before,
        after=result.entry,
        reason=reason,
    )


def _saved(result: SaveResult) -> SavedMemory:
    entry = result.entry
    return SavedMemory(
        id=entry.id,
        outcome=result.action,  # type: ignore[arg-type]
        reason=result.reason,
        matched_id=result.matched_id,
        similarity=result.similarity,
        content=entry.content,
        category=entry.category,
    )


def search(
    profile: AgentProfile | str | Path,
    query: str,
    *,
    limit: int = 10,
    category: str | None = None,
    tags: Sequence[str] = (),
    options: DreamOptions | None = None,
    now: datetime | None = None,
) -> SearchResult:
    """Live memories that answer ``query``, best first. ``category``: only that category (and its ``/`` children);
    ``tags``: only entries carrying every one of them."""
    call = begin_call(profile, options, now)
    check_value(query, "content", "query", max_chars=call.options.MaxContentChars)
    if isinstance(limit, bool) or not isinstance(limit, int) or not 1 <= limit <= MAX_SEARCH_LIMIT:
        raise InvalidInput(f"limit {limit!r} must be a whole number from 1 to {MAX_SEARCH_LIMIT}")
    if category is not None:
        check_value(category, "category", "category")
    check_value(list(tags), "tags", "tags")
    wanted_tags = {t.strip().lower() for t in tags}
    filtered = category is not None or bool(wanted_tags)
    store = open_call_store(call)
    try:
        found = recall_fusion.search(store.memories, query, limit * 10 if filtered else limit, now=call.now)
    except StoreError as exc:
        raise _store_errors(exc) from exc
    hits = []
    for entry, score in found.hits:
        if category is not None and not (entry.category == category or entry.category.startswith(category + "/")):
            continue
        if wanted_tags and not wanted_tags <= {t.lower() for t in entry.tags}:
            continue
        hits.append(
            MemoryHit(
                id=entry.id,
                score=round(float(score), 6),
                content=entry.content,
                category=entry.category,
                tags=list(entry.tags),
                updated_at=iso(entry.updated_at) or "",
            )
        )
        if len(hits) == limit:
            break
    return SearchResult(query=query, hits=hits, method=found.method, note=found.note)


def successor(entry: MemoryEntry, rows: Sequence[ChangeRecord]) -> tuple[str | None, str | None, str | None]:
    """(merged_into, superseded_by, archived_reason) of an archived entry: where it went is the successor its last
    archiving row names (``successor_id``, ``successor_how``: merged, folded or a duplicate -> merged_into,
    superseded -> superseded_by), the reason is that row's. An imported entry, whose archiving has no row here,
    carries them in its metadata."""
    superseded = entry.metadata.get(SUPERSEDED_BY_KEY) or None
    archived = [r for r in rows if r.kind == "archived" and r.undone_at is None]
    last = archived[-1] if archived else None
    reason = last.reason if last is not None else (entry.metadata.get(ARCHIVED_REASON_KEY) or None)
    if reason is None and superseded:
        reason = f"superseded by {superseded}: {entry.metadata.get(SUPERSESSION_REASON_KEY, '')}".rstrip(": ")
    merged = None
    if last is not None and last.successor_id:
        if last.successor_how is SuccessorHow.SUPERSEDED_BY:
            superseded = superseded or last.successor_id
        else:
            merged = last.successor_id
    if merged is None and superseded is None:
        merged = entry.metadata.get(MERGED_INTO_KEY) or None
    return merged, superseded, reason


def _record_of(store: DreamStore, entry_id: str) -> MemoryRecord | None:
    entry = store.memories.get(entry_id)
    rows = store.changes.for_target("memory", entry_id)
    if entry is None:
        purged = [r for r in rows if r.kind == "purged" and r.before]
        if not purged:
            return None
        entry = MemoryEntry.from_dict(purged[-1].before)  # type: ignore[arg-type]
        status = "purged"
    else:
        status = "archived" if entry.is_archived else "live"
    merged, superseded, reason = successor(entry, rows) if status != "live" else (None, None, None)
    return _as_record(entry, status, reason, merged, superseded)


def live_record(entry: MemoryEntry) -> MemoryRecord:
    """The record of a live entry (nothing to follow: no change-log read)."""
    return _as_record(entry, "live", None, None, None)


def _as_record(
    entry: MemoryEntry, status: str, reason: str | None, merged: str | None, superseded: str | None
) -> MemoryRecord:
    return MemoryRecord(
        id=entry.id,
        status=status,  # type: ignore[arg-type]
        content=entry.content,
        category=entry.category,
        tags=list(entry.tags),
        importance=entry.importance,
        created_at=iso(entry.created_at),
        updated_at=iso(entry.updated_at),
        last_seen_at=iso(entry.last_seen_at),
        reinforcement_count=entry.reinforcement_count,
        archived_at=iso(entry.archived_at),
        archived_reason=reason,
        merged_into=merged,
        superseded_by=superseded,
        current_id=entry.id if status == "live" else None,
        metadata=dict(entry.metadata),
    )


def resolve_record(store: DreamStore, entry_id: str) -> MemoryRecord | None:
    """The record of ``entry_id`` (None when the store never held it) with ``current_id`` set to the live entry its
    fact lives on in, following merges and supersessions (at most ``MAX_SUCCESSOR_HOPS``)."""
    record = _record_of(store, entry_id)
    if record is None:
        return None
    seen = {record.id}
    hop = record
    while hop.status != "live" and len(seen) <= MAX_SUCCESSOR_HOPS:
        nxt = hop.merged_into or hop.superseded_by
        if not nxt or nxt in seen:
            break
        seen.add(nxt)
        found = _record_of(store, nxt)
        if found is None:
            break
        hop = found
    if hop.status == "live":
        record = record.model_copy(update={"current_id": hop.id})
    return record


def get(
    profile: AgentProfile | str | Path,
    entry_id: str,
    *,
    options: DreamOptions | None = None,
    now: datetime | None = None,
) -> MemoryRecord:
    """One memory by id, live, archived or purged. For one that is gone it says where it went and ``current_id`` is
    the live entry its fact lives on in (following merges and supersessions), when there is one."""
    call = begin_call(profile, options, now)
    entry_id = check_id(entry_id)
    store = open_call_store(call)
    try:
        record = resolve_record(store, entry_id)
        if record is None:
            raise NotFound(f"no memory with id {entry_id!r} in agent {call.profile.agent_id}")
    except StoreError as exc:
        raise _store_errors(exc) from exc
    return record


_CURSOR_PREFIX = "m1."
_EPOCH = datetime.fromtimestamp(0, tz=UTC)


def _list_key(entry: MemoryEntry) -> tuple[datetime, str]:
    return (utc(entry.created_at) if entry.created_at is not None else _EPOCH, entry.id)


def _cursor_of(key: tuple[datetime, str]) -> str:
    raw = json.dumps([key[0].isoformat(), key[1]], separators=(",", ":")).encode()
    return _CURSOR_PREFIX + base64.urlsafe_b64encode(raw).decode().rstrip("=")


def _cursor_key(cursor: object) -> tuple[datetime, str]:
    """The (created time, id) a cursor of ``_cursor_of`` continues after; ``InvalidInput`` naming ``cursor``."""
    bad = InvalidInput(
        f"cursor {cursor!r} is not a cursor memory_list returned: give the next_cursor of the previous page "
        "(or no cursor for the first page)"
    )
    if not isinstance(cursor, str) or not cursor.startswith(_CURSOR_PREFIX) or len(cursor) > 1000:
        raise bad
    body = cursor[len(_CURSOR_PREFIX) :]
    try:
        at, entry_id = json.loads(base64.urlsafe_b64decode(body + "=" * (-len(body) % 4)))
        when = datetime.fromisoformat(at)
    except (ValueError, TypeError, binascii.Error, UnicodeDecodeError):
        raise bad from None
    if not isinstance(entry_id, str) or when.tzinfo is None:
        raise bad
    return utc(when), entry_id


def list_memories(
    profile: AgentProfile | str | Path,
    *,
    category: str | None = None,
    include_archived: bool = False,
    cursor: str | None = None,
    limit: int = 50,
    options: DreamOptions | None = None,
    now: datetime | None = None,
) -> MemoryPage:
    """The agent's memories a page at a time, oldest first (created time, then id): live ones, and archived ones too
    with ``include_archived``. ``category`` keeps that category and its ``/`` children (as ``search``). ``cursor``:
    the ``next_cursor`` of the previous page (a memory saved meanwhile comes on a later page, none is repeated)."""
    call = begin_call(profile, options, now)
    if category is not None:
        check_value(category, "category", "category")
    if isinstance(limit, bool) or not isinstance(limit, int) or not 1 <= limit <= MAX_LIST_LIMIT:
        raise InvalidInput(f"limit {limit!r} must be a whole number from 1 to {MAX_LIST_LIMIT}")
    after = _cursor_key(cursor) if cursor is not None else None
    store = open_call_store(call)
    try:
        entries = store.memories.list_all() if include_archived else store.memories.list_live()
    except StoreError as exc:
        raise _store_errors(exc) from exc
    chosen = sorted(
        (
            e
            for e in entries
            if (category is None or e.category == category or e.category.startswith(category + "/"))
            and (after is None or _list_key(e) > after)
        ),
        key=_list_key,
    )
    page = chosen[:limit]
    items = [
        MemoryListItem(
            id=e.id,
            status="archived" if e.is_archived else "live",
            content=e.content,
            category=e.category,
            tags=list(e.tags),
            importance=e.importance,
            created_at=iso(e.created_at),
            updated_at=iso(e.updated_at),
            archived_at=iso(e.archived_at),
        )
        for e in page
    ]
    more = len(chosen) > limit
    return MemoryPage(items=items, next_cursor=_cursor_of(_list_key(page[-1])) if more else None)


# --- entries as they are stored, for key-value interfaces (the LangGraph store) --------------------------------------


def mark_agent_active(
    profile: AgentProfile | MemoryHandle | str | Path,
    *,
    options: DreamOptions | None = None,
    now: datetime | None = None,
) -> None:
    """The agent is in a conversation: a dream pass waits for a quiet spell (``AgentActiveWindow``) before its next
    model call. Every operation here does this itself; an interface whose calls pass ``active=False`` does it once
    for a batch of them."""
    begin_call(profile, options, now, active=True)


def read_entry(
    profile: AgentProfile | MemoryHandle | str | Path, entry_id: str, *, options: DreamOptions | None = None
) -> MemoryEntry | None:
    """The entry ``entry_id`` as stored (live or archived, with its metadata), or None."""
    call = begin_call(profile, options, None, active=False)
    try:
        return open_call_store(call).memories.get(entry_id)
    except StoreError as exc:
        raise _store_errors(exc) from exc


def recall_entries(
    profile: AgentProfile | MemoryHandle | str | Path, query: str, *, limit: int, options: DreamOptions | None = None
) -> list[tuple[MemoryEntry, float]]:
    """``search``'s recall as stored entries with their scores, best first (live entries only)."""
    call = begin_call(profile, options, None, active=False)
    try:
        return recall_fusion.search(open_call_store(call).memories, query, limit, now=call.now).hits
    except StoreError as exc:
        raise _store_errors(exc) from exc


def live_entries_page(
    profile: AgentProfile | MemoryHandle | str | Path,
    *,
    labels: Sequence[str] = (),
    limit: int,
    offset: int = 0,
    after: tuple[datetime, str] | None = None,
    options: DreamOptions | None = None,
) -> list[MemoryEntry]:
    """Live entries whose category's ``/`` labels begin with ``labels``, the most recently updated first (ties by id):
    ``offset`` skipped, at most ``limit``, after ``(updated_at, id)`` of a previous page's last entry. Only the page
    is read from the store."""
    call = begin_call(profile, options, None, active=False)
    try:
        return open_call_store(call).memories.live_page(labels=labels, limit=limit, offset=offset, after=after)
    except StoreError as exc:
        raise _store_errors(exc) from exc


def live_categories(
    profile: AgentProfile | MemoryHandle | str | Path, *, options: DreamOptions | None = None
) -> list[str]:
    """The distinct categories of the live entries, sorted."""
    call = begin_call(profile, options, None, active=False)
    try:
        return open_call_store(call).memories.live_categories()
    except StoreError as exc:
        raise _store_errors(exc) from exc


def reinforce(
    profile: AgentProfile | str | Path,
    entry_id: str,
    *,
    options: DreamOptions | None = None,
    now: datetime | None = None,
) -> MemoryRecord:
    """The fact came up again: its last-seen time and reinforcement count move, its text stays. Live entries only."""
    call = begin_call(profile, options, now)
    entry_id = check_id(entry_id)
    store = open_call_store(call)
    try:
        with store.transaction():
            before = store.memories.get(entry_id)
            if before is None or before.is_archived:
                state = "archived: reinforce its current_id (see get)" if before is not None else "no such id"
                raise NotFound(f"no live memory with id {entry_id!r} in agent {call.profile.agent_id} ({state})")
            after = store.memories.reinforce(entry_id, now=call.now)
            store.changes.record(
                ChangeRow(
                    cycle_id=cycle_ids.agent_day(call.now),
                    actor=Actor.AGENT_SAVE,
                    kind="updated",
                    target_type="memory",
                    target_id=entry_id,
                    before=before,
                    after=after,
                    reason="reinforced by the agent",
                ),
                now=call.now,
            )
        record = _record_of(store, entry_id)
    except StoreError as exc:
        raise _store_errors(exc) from exc
    assert record is not None
    return record


def put(
    profile: AgentProfile | str | Path,
    entry_id: str,
    content: str,
    *,
    category: str | None = None,
    tags: Sequence[str] | None = None,
    importance: float | None = None,
    metadata: dict[str, str] | None = None,
    drop_metadata: Sequence[str] = (),
    options: DreamOptions | None = None,
    now: datetime | None = None,
    active: bool = True,
) -> PutMemory:
    """Put a memory under an id the caller chose, exactly: the put of a key-value store (the LangGraph store's). No
    save-time rules apply, so every id keeps its own entry and the dream cycle consolidates later. A new id is
    ``created`` (``category`` required; no tags and importance 0.5 unless given). An existing id gets ``content`` as
    its text (``updated``), and an archived one is put back live with it (``restored``); its category, tags and
    importance stay unless given. ``metadata`` keys are set over the entry's, ``drop_metadata`` keys removed. Each
    put is one write with its change-log row under the day's ``agent-YYYY-MM-DD`` cycle, so ``history`` shows it and
    ``dream undo`` takes it back."""
    call = begin_call(profile, options, now, active=active)
    entry_id = check_id(entry_id)
    check_value(content, "content", "content", max_chars=call.options.MaxContentChars)
    # The category is checked by the store's own rule (printable, at most 200 characters), not the stricter one of
    # saves: a key-value store's namespace may hold any printable character.
    if tags is not None:
        check_value(list(tags), "tags", "tags")
    if importance is not None and (
        isinstance(importance, bool) or not isinstance(importance, int | float) or not 0.0 <= importance <= 1.0
    ):
        raise InvalidInput(f"importance {importance!r} must be a number between 0 and 1")
    if metadata is not None and not all(isinstance(k, str) and isinstance(v, str) for k, v in metadata.items()):
        raise InvalidInput("metadata must map strings to strings")
    cycle = cycle_ids.agent_day(call.now)
    store = open_call_store(call)
    try:
        with store.transaction():
            before = store.memories.get(entry_id)
            if before is None:
                if category is None:
                    raise InvalidInput(f"category is required to put the new memory {entry_id!r}")
                meta = {k: v for k, v in (metadata or {}).items() if k not in drop_metadata}
                after = store.memories.put(
                    MemoryEntry(
                        id=entry_id,
                        content=content,
                        category=category,
                        tags=tuple(tags or ()),
                        importance=0.5 if importance is None else float(importance),
                        created_at=call.now,
                        updated_at=call.now,
                        last_seen_at=call.now,
                        metadata=meta,
                    )
                )
                outcome, reason = "created", "put by the agent"
            elif _puts_nothing_new(before, content, category, tags, importance, metadata, drop_metadata):
                # The value the key holds, put again: observed again, not edited (the same event a save of the same
                # fact records), so every interface tells the same history of one fact.
                after = store.memories.reinforce(entry_id, now=call.now)
                outcome, reason = "reinforced", "reinforced by the agent: the same value put again"
            else:
                meta = {k: v for k, v in {**before.metadata, **(metadata or {})}.items() if k not in drop_metadata}
                if before.is_archived:
                    store.memories.restore(entry_id, now=call.now)
                after = store.memories.update(
                    entry_id,
                    content=content,
                    category=category,
                    tags=tags,
                    importance=importance,
                    metadata=meta,
                    now=call.now,
                )
                outcome, reason = (
                    ("restored", "put again by the agent: live again, with the text put")
                    if before.is_archived
                    else ("updated", "put by the agent: its text replaced")
                )
            store.changes.record(
                ChangeRow(
                    cycle_id=cycle,
                    actor=Actor.AGENT_SAVE,
                    kind="created" if outcome == "created" else "restored" if outcome == "restored" else "updated",
                    target_type="memory",
                    target_id=entry_id,
                    before=before,
                    after=after,
                    reason=reason,
                ),
                now=call.now,
            )
    except (ContentError, StoreError) as exc:
        raise _store_errors(exc) from exc
    return PutMemory(id=entry_id, outcome=outcome, content=after.content, category=after.category, cycle_id=cycle)  # type: ignore[arg-type]


def _puts_nothing_new(
    before: MemoryEntry,
    content: str,
    category: str | None,
    tags: Sequence[str] | None,
    importance: float | None,
    metadata: dict[str, str] | None,
    drop_metadata: Sequence[str],
) -> bool:
    """Whether a put on the live entry ``before`` would leave every field as it is."""
    return (
        not before.is_archived
        and content == before.content
        and category in (None, before.category)
        and (tags is None or tuple(tags) == tuple(before.tags))
        and (importance is None or float(importance) == before.importance)
        and all(before.metadata.get(k) == v for k, v in (metadata or {}).items())
        and not any(k in before.metadata for k in drop_metadata)
    )


def forget(
    profile: AgentProfile | str | Path,
    entry_id: str,
    *,
    reason: str,
    marks: dict[str, str] | None = None,
    profile_arg: str | None = None,
    options: DreamOptions | None = None,
    now: datetime | None = None,
    active: bool = True,
) -> ForgetResult:
    """Archive a memory (never a delete): recall no longer returns it, ``get`` still does, and the change log holds it
    under a cycle of its own that ``dream undo --cycle`` puts back. ``reason`` (required) is recorded. ``marks``:
    metadata set on the entry with the archive (a key-value store's deletion mark), set and recorded even when the
    entry was archived already (merged or superseded by the dream; ``archived`` is then false)."""
    call = begin_call(profile, options, now, active=active)
    entry_id = check_id(entry_id)
    check_value(reason, "content", "reason", max_chars=MAX_REASON_CHARS)
    if marks is not None and not all(isinstance(k, str) and isinstance(v, str) for k, v in marks.items()):
        raise InvalidInput("marks must map strings to strings")
    cycle = cycle_ids.forget(call.now, entry_id)
    store = open_call_store(call)
    try:
        with store.transaction():
            before = store.memories.get(entry_id)
            if before is None:
                raise NotFound(f"no memory with id {entry_id!r} in agent {call.profile.agent_id}")
            new_marks = {k: v for k, v in (marks or {}).items() if before.metadata.get(k) != v}
            if before.is_archived and not new_marks:
                return ForgetResult(id=entry_id, archived=False)
            if new_marks:
                store.memories.set_metadata({entry_id: new_marks})
            after = (
                store.memories.get(entry_id) if before.is_archived else store.memories.archive(entry_id, now=call.now)
            )
            assert after is not None
            store.changes.record(
                ChangeRow(
                    cycle_id=cycle,
                    actor=Actor.AGENT_FORGET,
                    kind="archived",
                    target_type="memory",
                    target_id=entry_id,
                    before=before,
                    after=after,
                    reason=f"forgotten by the agent: {reason.strip()}",
                ),
                now=call.now,
            )
    except StoreError as exc:
        raise _store_errors(exc) from exc
    where = profile_arg or str(call.profile.root)
    return ForgetResult(
        id=entry_id,
        archived=not before.is_archived,
        cycle_id=cycle,
        undo_command=f"dream undo --profile {where} --cycle {cycle}",
    )


#: What each kind of undo row did to the entry, as a history event.
_UNDO_EVENTS = {
    "put back live": "restored",
    "unmerged": "restored",
    "unsuperseded": "restored",
    "archived again": "archived",
    "retired": "archived",
    "unpurged": "unpurged",
    "importance put back": "decay undone",
}


def _event_of(row: ChangeRecord) -> str:
    reason = row.reason.lower()
    if row.actor is Actor.UNDO:
        return _UNDO_EVENTS.get(row.kind, "restored" if row.kind == "restored" else "undone")
    if row.kind == DECAY_KIND:
        return "decayed"
    if row.kind == "created":
        return "merged in" if (row.after or {}).get("metadata", {}).get("mergedFrom") else "created"
    if row.kind == "archived":
        if row.successor_how is SuccessorHow.SUPERSEDED_BY:
            return "superseded"
        if row.successor_how.merged:
            return "merged out"
        return "archived"
    if row.kind == "updated":
        for word, event in (("reinforced", "reinforced"), ("extended", "extended"), ("supersedes", "supersedes")):
            if word in reason:
                return event
        if "takes them in" in reason or "folded in" in reason:
            return "merged in"
        return "updated"
    if row.kind in ("restored", "purged"):
        return row.kind
    return "updated"


def history(
    profile: AgentProfile | str | Path,
    entry_id: str,
    *,
    options: DreamOptions | None = None,
    now: datetime | None = None,
) -> MemoryHistory:
    """An entry's versions from the change log, oldest first: created, reinforced, extended, merged in or out,
    superseded, archived, restored, purged, each with its cycle, pass, reason and the text it left."""
    call = begin_call(profile, options, now)
    entry_id = check_id(entry_id)
    store = open_call_store(call)
    try:
        rows = [r for r in store.changes.for_target("memory", entry_id) if r.kind != "stamped"]
        if not rows and store.memories.get(entry_id) is None:
            raise NotFound(f"no memory with id {entry_id!r} in agent {call.profile.agent_id}")
    except StoreError as exc:
        raise _store_errors(exc) from exc
    events = []
    text: str | None = None
    for r in rows:
        shown = (r.before if r.kind == "purged" else r.after) or {}
        # a decay row holds the scores only: the text is the one the entry had before it
        text = shown.get("content", text)
        events.append(
            HistoryEvent(
                at=iso(r.created_at) or "",
                event=_event_of(r),  # type: ignore[arg-type]
                cycle_id=r.cycle_id,
                pass_name=r.pass_name,
                reason=r.reason,
                content=text,
                importance=shown.get("importance"),
                undone_at=iso(r.undone_at),
                change_id=r.change_id,
            )
        )
    return MemoryHistory(id=entry_id, events=events)


# --- skills ---------------------------------------------------------------------------------------------------------


def _skill_summary(s: Skill) -> SkillSummary:
    return SkillSummary(
        name=s.name,
        summary=s.summary,
        updated_at=iso(s.updated_at),
        last_used_at=iso(s.last_used_at),
        archived=s.is_archived,
    )


def _skill_record(s: Skill) -> SkillRecord:
    return SkillRecord(**_skill_summary(s).model_dump(), content=s.content, see_also=list(s.see_also))


def list_skills(
    profile: AgentProfile | str | Path,
    *,
    include_archived: bool = False,
    options: DreamOptions | None = None,
    now: datetime | None = None,
) -> SkillList:
    """The agent's skills by name (names and summaries; ``get_skill`` has the text)."""
    call = begin_call(profile, options, now)
    try:
        skills = open_call_store(call).skills.list(include_archived=include_archived)
    except StoreError as exc:
        raise _store_errors(exc) from exc
    return SkillList(skills=[_skill_summary(s) for s in skills])


def get_skill(
    profile: AgentProfile | str | Path,
    name: str,
    *,
    options: DreamOptions | None = None,
    now: datetime | None = None,
) -> SkillRecord:
    call = begin_call(profile, options, now)
    check_value(name, "name", "name")
    try:
        skill = open_call_store(call).skills.get(name)
    except StoreError as exc:
        raise _store_errors(exc) from exc
    if skill is None:
        raise NotFound(f"no skill named {name!r} in agent {call.profile.agent_id}")
    return _skill_record(skill)


def save_skill(
    profile: AgentProfile | str | Path,
    name: str,
    content: str,
    *,
    summary: str = "",
    see_also: Sequence[str] = (),
    options: DreamOptions | None = None,
    now: datetime | None = None,
) -> SkillRecord:
    """Create or replace a skill (an archived one of that name comes back)."""
    call = begin_call(profile, options, now)
    check_value(name, "name", "name")
    check_value(content, "content", "content", max_chars=MAX_SKILL_CHARS)
    check_value(summary, "text", "summary", max_chars=MAX_SUMMARY_CHARS)
    for i, other in enumerate(see_also):
        check_value(other, "name", f"see_also[{i}]")
    store = open_call_store(call)
    try:
        saved = store.skills.save(
            Skill(name=name, summary=summary, content=content, see_also=tuple(see_also)), now=call.now
        )
    except (SkillError, StoreError, ValueError) as exc:
        raise _store_errors(exc) from exc
    return _skill_record(saved)


# --- logs -----------------------------------------------------------------------------------------------------------


def _append(call: Call, cls: type[LogRecord], fields: dict[str, Any]) -> Recorded:
    for key, value in fields.items():
        if isinstance(value, str):
            check_value(value, "text", key, max_chars=MAX_LOG_TEXT_CHARS)
        elif isinstance(value, list):
            for i, item in enumerate(value):
                if isinstance(item, str):
                    check_value(item, "text", f"{key}[{i}]", max_chars=MAX_LOG_TEXT_CHARS)
    from dream_assets.store.logs import append_event  # the log files' code (and their archive) with the first record

    try:
        record = cls.from_json({**fields, "timestamp": iso(call.now)})
        append_event(call.profile, record)
    except ValueError as exc:
        raise InvalidInput(str(exc)) from exc
    return Recorded(log=cls.log_kind, session_id=fields.get("sessionId"), timestamp=iso(record.timestamp) or "")


def record_feedback(
    profile: AgentProfile | str | Path,
    session_id: str,
    kind: str,
    text: str,
    *,
    rating: str | None = None,
    domain: str | None = None,
    skill_names: Sequence[str] = (),
    options: DreamOptions | None = None,
    now: datetime | None = None,
) -> Recorded:
    """One feedback record (docs/log-formats.md): ``kind`` Correction, SessionSummary (needs ``rating``), Positive,
    Negative or Note."""
    call = begin_call(profile, options, now)
    fields = {
        "sessionId": session_id,
        "kind": kind,
        "text": text,
        "rating": rating,
        "domain": domain,
        "skillNames": list(skill_names),
    }
    return _append(call, FeedbackEvent, fields)


def record_skill_usage(
    profile: AgentProfile | str | Path,
    session_id: str,
    skill_name: str,
    *,
    action: str = "invoked",
    options: DreamOptions | None = None,
    now: datetime | None = None,
) -> Recorded:
    """One skill-usage record: ``action`` recalled, invoked or loaded."""
    call = begin_call(profile, options, now)
    return _append(call, SkillUsageEvent, {"sessionId": session_id, "skillName": skill_name, "action": action})


def record_tool_call(
    profile: AgentProfile | str | Path,
    session_id: str,
    tool: str,
    success: bool,
    *,
    error: str | None = None,
    duration_ms: float | None = None,
    skill_name: str | None = None,
    options: DreamOptions | None = None,
    now: datetime | None = None,
) -> Recorded:
    """One tool-call record."""
    call = begin_call(profile, options, now)
    fields = {
        "sessionId": session_id,
        "tool": tool,
        "success": success,
        "error": error,
        "durationMs": duration_ms,
        "skillName": skill_name,
    }
    return _append(call, ToolCallEvent, fields)


def append_turn(
    profile: AgentProfile | str | Path,
    session_id: str,
    role: str,
    content: str,
    *,
    options: DreamOptions | None = None,
    now: datetime | None = None,
) -> Recorded:
    """One conversation turn (``role`` user, assistant or tool), for preference inference and skill gap detection."""
    call = begin_call(profile, options, now)
    return _append(call, ConversationTurn, {"sessionId": session_id, "role": role, "content": content})


# --- the dream cycle ------------------------------------------------------------------------------------------------


def status(
    profile: AgentProfile | str | Path,
    *,
    options: DreamOptions | None = None,
    now: datetime | None = None,
) -> DreamStatus:
    """Counts, whether the agent counts as active, the last cycle, what waits for review and every pass's last
    outcome and next run: the service's ``status`` (the same as ``dream status``), called by the agent."""
    from dream_assets.service.status import status as service_status

    call = begin_call(profile, options, now)
    return service_status(call.profile, options=call.options, now=call.now)


def last_cycle_report(
    profile: AgentProfile | str | Path,
    *,
    cycle_id: str | None = None,
    options: DreamOptions | None = None,
    now: datetime | None = None,
) -> CycleReportText:
    """The report of the last cycle (or ``cycle_id``): what it changed, rejected and why, and how to undo it (the
    service's ``report``, the same as ``dream report``)."""
    from dream_assets.service.operator import report

    call = begin_call(profile, options, now)
    return report(call.profile, cycle_id=cycle_id, options=call.options, now=call.now)


def parse_time(value: str | None, field: str = "now") -> datetime | None:
    """An ISO-8601 time given by a caller (``--now``), or None; ``InvalidInput`` naming ``field`` otherwise."""
    if value is None:
        return None
    try:
        at = parse_ts(value)
    except ValueError:
        raise InvalidInput(f"{field} {value!r} is not an ISO-8601 time such as 2026-12-01T09:00:00Z") from None
    bad = clock_problem(at, field)
    if bad:
        raise InvalidInput(bad)
    return at
