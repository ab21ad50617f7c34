"""What every operation of the service starts with: the agent's profile, its options and the clock of the call, and
the store opened with a store error turned into the service's own (``StoreUnavailable``). The memory operations'
own opening (``calls.begin_call``), without marking the agent active: an operator's operation (undo, review,
status) is not the agent speaking."""

from __future__ import annotations

from datetime import datetime
from pathlib import Path

from dream_assets.calls import Call as Op
from dream_assets.calls import begin_call, check_id
from dream_assets.options import DreamOptions
from dream_assets.profile import AgentProfile

__all__ = ["Op", "begin", "check_id"]


def begin(profile: AgentProfile | str | Path, options: DreamOptions | None, now: datetime | None) -> Op:
    return begin_call(profile, options, now, active=False)
