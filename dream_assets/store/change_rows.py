"""One row of the change log, written on an open connection (so it joins that connection's transaction).

``ChangeLog`` (changes.py) writes a pass's rows through it; ``MemoryStore.save`` writes the row of a save-time
extend through it, in the transaction of the extend itself, so that change can be undone like any other
(``dream undo --cycle save-...``).
"""

from __future__ import annotations

import json
from datetime import datetime
from typing import Any

from dream_assets.model import MemoryEntry, Skill, new_id, utc
from dream_assets.store.schema import to_db

#: The pass name of a change a save made (an extend by save-time dedup).
SAVE_PASS = "save"


def save_cycle_id() -> str:
    """The cycle id of one save's change: ``dream undo --cycle <it>`` undoes exactly that save."""
    return f"save-{new_id()[:12]}"


def dump(obj: MemoryEntry | Skill | dict | None) -> str | None:
    if obj is None:
        return None
    return json.dumps(obj if isinstance(obj, dict) else obj.to_dict(), sort_keys=True)


def insert_change(
    conn: Any,
    *,
    cycle_id: str,
    pass_name: str,
    kind: str,
    target_type: str,
    target_id: str,
    before: MemoryEntry | Skill | dict | None,
    after: MemoryEntry | Skill | dict | None,
    reason: str,
    now: datetime,
) -> str:
    """Insert one change row on ``conn``; returns its change id."""
    change_id = new_id()
    conn.execute(
        "INSERT INTO changes VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, NULL, nextval('row_seq'))",
        [
            change_id,
            cycle_id,
            pass_name,
            kind,
            target_type,
            target_id,
            dump(before),
            dump(after),
            reason,
            to_db(utc(now)),
        ],
    )
    return change_id
