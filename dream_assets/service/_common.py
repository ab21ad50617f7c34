"""What every operation of the service starts with: the agent's profile, its options and the clock of the call, and
the store opened with a store error turned into the service's own (``StoreUnavailable``)."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

from dream_assets.agent_memory import InvalidInput, StoreUnavailable
from dream_assets.model import clock_problem, utc_or_now
from dream_assets.options import DreamOptions, load_agent_options
from dream_assets.passes.model_text import problem
from dream_assets.profile import AgentProfile, as_profile
from dream_assets.store import DreamStore, open_store
from dream_assets.store.connection import StoreError


@dataclass
class Op:
    """One operation's agent, options and clock. An operator's operation (undo, review, status) does not mark the
    agent active: the agent is not speaking."""

    profile: AgentProfile
    options: DreamOptions
    now: datetime

    def store(self) -> DreamStore:
        try:
            return open_store(self.profile, self.options)
        except StoreError as exc:
            raise StoreUnavailable(str(exc)) from exc


def begin(profile: AgentProfile | str | Path, options: DreamOptions | None, now: datetime | None) -> Op:
    prof = as_profile(profile)
    at = utc_or_now(now)
    bad = clock_problem(at)
    if bad:
        raise InvalidInput(bad)
    return Op(prof, load_agent_options(prof) if options is None else options, at)


def check_id(value: object, field: str) -> str:
    """An id given by a caller (a cycle, a change, a memory): a short printable text, or ``InvalidInput`` naming
    ``field``."""
    found = problem(value, "id", field=field)
    if found:
        raise InvalidInput(found)
    return str(value).strip()
