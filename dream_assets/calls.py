"""What every memory operation shares, whoever calls it (the agent's own calls in ``agent_memory``, the operator's in
``service``): the errors, the results of status and report, and the opening of a call (``begin_call``: the agent, its
options and the clock, and the store it works on).

It sits below both, so the agent's ``status`` and ``last_cycle_report`` can hand over to the service modules that
build them without the service coming back to ``agent_memory``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field

from dream_assets.llm.busy import mark_active
from dream_assets.model import clock_problem, utc_or_now
from dream_assets.options import DreamOptions, load_agent_options
from dream_assets.passes.model_text import problem
from dream_assets.profile import AgentProfile, as_profile
from dream_assets.store import DreamStore, open_store
from dream_assets.store.connection import StoreError

# --- errors ---------------------------------------------------------------------------------------------------------


class AgentMemoryError(ValueError):
    """A call that could not be done; the message says why and names the field or id."""


class InvalidInput(AgentMemoryError):
    """A value breaks a rule (the message starts with the field's name)."""


class NotFound(AgentMemoryError):
    """No memory or skill with that id or name."""


class StoreUnavailable(AgentMemoryError):
    """The store could not be reached in time (held by a long write) or is damaged; nothing was changed."""


class Refused(AgentMemoryError):
    """A running cycle or pass, or an edit made since, refused the operation before it acted: nothing was changed.
    ``running``: a cycle or pass of the agent is in progress (try again when it finishes, or wait longer).
    ``stale_markers``: markers of crashed cycles found and removed while checking, with why."""

    def __init__(self, message: str, *, running: bool = False, stale_markers: Sequence[str] = ()) -> None:
        super().__init__(message)
        self.running = running
        self.stale_markers = list(stale_markers)


# --- results the service and the agent's calls share ----------------------------------------------------------------


class Result(BaseModel):
    """The base of every result of the memory service. Its validator and serializer are built when a result of the
    kind is first made, not when the module is imported: a command that searches builds two of some thirty."""

    model_config = ConfigDict(defer_build=True)


class PassState(Result):
    name: str
    status: str = Field(description="completed, skipped, failed, deferred or 'never run'")
    last_run: str | None
    summary: str | None = Field(description="the reason of its last outcome, else its summary")
    reason: str | None = Field(None, description="why it ended as it did (skipped, deferred, failed)")
    budget_deferral: bool = Field(False, description="deferred because the model budget was spent")
    model_calls: int = 0
    tokens: int = Field(0, description="model tokens of its last run")
    last_completed: str | None = Field(None, description="ISO-8601 UTC of its last completed run (the pass ledger)")
    forced: str | None = Field(None, description="why its last completed run was forced, when it was")
    fingerprint: str | None = Field(None, description="the input fingerprint of its last completed run")
    next_run: str = Field("", description="when it runs next, as the change gate and the floors decide it")


class ReviewWaits(Result):
    """What waits for review (``dream review``)."""

    count: int = 0
    by_pass: dict[str, int] = Field(default_factory=dict)
    cycles: list[str] = Field(default_factory=list)
    next_expiry: str | None = Field(None, description="ISO-8601 UTC: the first pending change expires then")
    expired: int = Field(0, description="changes that expired unreviewed (ReviewExpiryDays), never applied")
    line: str = Field("", description="one sentence on what waits (empty when nothing does)")


class DreamStatus(Result):
    """The one status of an agent: ``dream status``, the MCP tool ``dream_status`` and this library's ``status``."""

    agent: str
    live_memories: int
    archived_memories: int
    skills: int
    agent_active_until: str | None = Field(None, description="a dream pass waits until then (AgentActiveWindow)")
    last_cycle_id: str | None
    passes: list[PassState]
    recall_index: str = Field("", description="which BM25 index recall uses, and what the index file holds")
    embeddings: str = Field(
        "", description="the embedding model, and the near-duplicate threshold in use with where it came from"
    )
    review: ReviewWaits = Field(default_factory=ReviewWaits)
    ledger_warning: str | None = Field(None, description="a problem with the pass ledger, when it has one")
    running_now: str | None = Field(None, description="a model call a pass is waiting on now")


class CycleReportText(Result):
    cycle_id: str | None
    markdown: str


# --- opening a call --------------------------------------------------------------------------------------------------

#: An open store of one agent (``connect``), for an interface that makes many calls in a row (the LangGraph store):
#: every operation here takes it in place of the profile and reads and writes through it.
MemoryHandle = DreamStore


@dataclass
class Call:
    """One call's agent, options and clock (and the open handle it was given, if any): what every operation of the
    service starts with (``begin_call``)."""

    profile: AgentProfile
    options: DreamOptions
    now: datetime
    handle: MemoryHandle | None = None

    def store(self) -> DreamStore:
        """The agent's store: the handle given, or opened now (a store error becomes ``StoreUnavailable``)."""
        return open_call_store(self)


def begin_call(
    profile: AgentProfile | MemoryHandle | str | Path,
    options: DreamOptions | None,
    now: datetime | None,
    *,
    active: bool = True,
) -> Call:
    handle = profile if isinstance(profile, DreamStore) else None
    prof = handle.profile if handle is not None else as_profile(profile)  # type: ignore[arg-type]
    if options is None:
        options = handle.options if handle is not None else load_agent_options(prof)
    at = utc_or_now(now)
    bad = clock_problem(at)
    if bad:
        raise InvalidInput(bad)
    if active:  # the agent is speaking: a dream pass waits for a quiet spell
        mark_active(prof, options.AgentActiveWindow, now=at)
    return Call(prof, options, at, handle)


def open_call_store(call: Call) -> DreamStore:
    if call.handle is not None:
        return call.handle
    try:
        return open_store(call.profile, call.options)
    except StoreError as exc:
        raise StoreUnavailable(str(exc)) from exc


def check_value(value: object, kind: str, field: str, *, max_chars: int | None = None) -> None:
    found = problem(value, kind, field=field, max_chars=max_chars)
    if found:
        raise InvalidInput(found)


def check_id(value: object, field: str = "id") -> str:
    """An id given by a caller (a memory, a cycle, a change): a short printable text, or ``InvalidInput`` naming
    ``field``."""
    check_value(value, "id", field)
    return str(value).strip()
