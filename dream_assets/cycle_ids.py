"""The cycle ids change rows are recorded under: one scheme, made here and nowhere else.

A cycle id names one undoable set of changes (``dream undo --cycle <id>``). Its shape says who made it:

- a dream cycle: its run id (Dagster's run id, or ``dream_cycle()`` for a cycle run in-process); a pass's review set
  keeps the cycle id of the pass that proposed it, and the rows of deciding it are recorded under that id too;
- ``agent-YYYY-MM-DD``: the agent's saves, puts and reinforcements of one UTC day (``agent_day``);
- ``forget-<YYYYmmddTHHMMSSffffffZ>-<id12>``: one forget (``forget``);
- ``save-<id12>``: one save-time extend recorded by the store (``save``);
- ``restore-<YYYYmmddTHHMMSSZ>-<id12>``: one ``dream restore`` (``restore``);
- ``undo-<cycle>``: the undo of ``<cycle>`` (``undo``), itself undoable.

These are the formats every version wrote, so ids already stored keep working; ``actor_of`` reads one back.
"""

from __future__ import annotations

from datetime import datetime

from dream_assets.changes_model import Actor
from dream_assets.model import new_id, utc

#: How many characters of an entry id (or of a random id) a cycle id carries.
ID_CHARS = 12
_PREFIXES = {
    "agent-": Actor.AGENT_SAVE,
    "forget-": Actor.AGENT_FORGET,
    "save-": Actor.SAVE_DEDUP,
    "restore-": Actor.RESTORE,
    "undo-": Actor.UNDO,
}


def dream_cycle() -> str:
    """A new dream cycle's id, for a cycle run outside Dagster (which uses its run id)."""
    return new_id()


def agent_day(now: datetime) -> str:
    """The cycle of the agent's saves on the UTC day of ``now``."""
    return f"agent-{utc(now):%Y-%m-%d}"


def forget(now: datetime, entry_id: str) -> str:
    """The cycle of one forget of ``entry_id`` at ``now``."""
    return f"forget-{utc(now):%Y%m%dT%H%M%S%fZ}-{entry_id[:ID_CHARS]}"


def save(token: str | None = None) -> str:
    """The cycle of one save-time extend (``token``: a fresh id unless given)."""
    return f"save-{(token or new_id())[:ID_CHARS]}"


def restore(now: datetime, entry_id: str) -> str:
    """The cycle of one ``dream restore`` of ``entry_id`` at ``now``."""
    return f"restore-{utc(now):%Y%m%dT%H%M%SZ}-{entry_id[:ID_CHARS]}"


def undo(cycle_id: str) -> str:
    """The cycle the rows of an undo of ``cycle_id`` are recorded under."""
    return f"undo-{cycle_id}"


def undone(cycle_id: str) -> str | None:
    """The cycle an undo's cycle id undid (None: not an undo's)."""
    return cycle_id[len("undo-") :] if cycle_id.startswith("undo-") else None


def actor_of(cycle_id: str) -> Actor:
    """Who made the changes of ``cycle_id``, by its shape (a dream cycle's id, a run id, is any other)."""
    for prefix, actor in _PREFIXES.items():
        if cycle_id.startswith(prefix):
            return actor
    return Actor.PASS
