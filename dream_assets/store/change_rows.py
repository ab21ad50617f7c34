"""One row of the change log, written on an open connection (so it joins that connection's transaction).

``ChangeLog`` (changes.py) writes every row through here; the save pipeline (``save_pipeline.py``) writes the row of
a save-time extend through it, in the transaction of the extend itself, so that change can be undone like any other
(``dream undo --cycle save-...``). The row is a ``ChangeRow`` (``dream_assets/changes_model.py``): its actor and
where an archived entry went are columns of their own.
"""

from __future__ import annotations

import json
from datetime import datetime
from typing import Any

from dream_assets.changes_model import ChangeRow
from dream_assets.model import MemoryEntry, Skill, new_id, utc
from dream_assets.store.schema import CHANGE_COLUMNS, to_db


def dump(obj: MemoryEntry | Skill | dict | None) -> str | None:
    if obj is None:
        return None
    return json.dumps(obj if isinstance(obj, dict) else obj.to_dict(), sort_keys=True)


_PLACES = ", ".join("nextval('row_seq')" if c == "ordinal" else "?" for c in CHANGE_COLUMNS)
#: INSERT of one row: every column named, the ordinal from the store's sequence.
INSERT_SQL = f"INSERT INTO changes ({', '.join(CHANGE_COLUMNS)}) VALUES ({_PLACES})"


def row_values(change_id: str, row: ChangeRow, created_at: datetime, undone_at: datetime | None = None) -> list[Any]:
    """The values of ``INSERT_SQL`` for ``row`` (every column but the ordinal, in ``CHANGE_COLUMNS`` order)."""
    values = {
        "change_id": change_id,
        "cycle_id": row.cycle_id,
        "pass_name": row.pass_name,
        "kind": row.kind,
        "target_type": row.target_type,
        "target_id": row.target_id,
        "before_json": dump(row.before),
        "after_json": dump(row.after),
        "reason": row.reason,
        "created_at": to_db(utc(created_at)),
        "undone_at": to_db(utc(undone_at)) if undone_at is not None else None,
        "actor": str(row.actor),
        "successor_id": row.successor_id,
        "successor_how": str(row.successor_how),
    }
    return [values[c] for c in CHANGE_COLUMNS if c != "ordinal"]


def insert_change(conn: Any, row: ChangeRow, *, now: datetime) -> str:
    """Insert one change row on ``conn``; returns its change id."""
    change_id = new_id()
    conn.execute(INSERT_SQL, row_values(change_id, row, now))
    return change_id
