"""The change log of dream passes, and undo.

Every change a pass makes to a memory or a skill is recorded with the cycle (run) it belongs to, the full record
before and after, and the reason (DESIGN: "Nothing is destroyed in place"). Undo walks one cycle's changes newest
first and puts each record back, refusing — with a message that names the entry — where the entry was edited after
that cycle, so an undo never silently discards later work.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import pyarrow as pa

from dream_assets.model import MemoryEntry, Skill, new_id, utc
from dream_assets.store.connection import StoreConnection
from dream_assets.store.memory import MemoryStore
from dream_assets.store.schema import ensure_schema, from_db, to_db
from dream_assets.store.skills import SkillStore


@dataclass(frozen=True)
class ChangeRecord:
    change_id: str
    cycle_id: str
    pass_name: str
    kind: str
    target_type: str
    target_id: str
    before: dict[str, Any] | None
    after: dict[str, Any] | None
    reason: str
    created_at: datetime
    undone_at: datetime | None


@dataclass
class UndoResult:
    cycle_id: str
    restored: list[str]
    refused: list[str]       # "<target>: <why>"

    @property
    def ok(self) -> bool:
        return not self.refused


class UndoRefused(RuntimeError):
    pass


_FIELDS_THAT_COUNT = ("content", "category", "tags", "summary", "see_also", "archived_at")


def _same_state(current: dict[str, Any] | None, expected: dict[str, Any] | None) -> bool:
    """Was the record left as the cycle left it? Compares what a person edits, not housekeeping (importance, stamps)."""
    if current is None or expected is None:
        return current is None and expected is None
    return all(current.get(k) == expected.get(k) for k in _FIELDS_THAT_COUNT)


class ChangeLog:
    def __init__(self, conn: StoreConnection, memories: MemoryStore, skills: SkillStore) -> None:
        self._conn = conn
        self._memories = memories
        self._skills = skills
        conn.add_open_hook(ensure_schema)

    def record(self, *, cycle_id: str, pass_name: str, kind: str, target_type: str, target_id: str,
               before: MemoryEntry | Skill | dict | None, after: MemoryEntry | Skill | dict | None, reason: str,
               now: datetime) -> str:
        change_id = new_id()
        with self._conn.session() as conn:
            conn.execute(
                "INSERT INTO changes VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, NULL, nextval('row_seq'))",
                [change_id, cycle_id, pass_name, kind, target_type, target_id, _dump(before), _dump(after), reason,
                 to_db(utc(now))],
            )
        return change_id

    def record_many(self, rows: Sequence[Mapping[str, Any]], *, now: datetime) -> int:
        """Write many change rows in one transaction (a pass that stamps thousands of entries). Each row carries the
        keyword arguments of :meth:`record` except ``now``; rows keep their order."""
        if not rows:
            return 0
        ts = to_db(utc(now))
        with self._conn.transaction() as conn:
            start = int(conn.execute("SELECT nextval('row_seq')").fetchall()[0][0])
            if len(rows) > 1:  # reserve a block of ordinals for the batch
                conn.execute(f"SELECT nextval('row_seq') FROM range({len(rows) - 1})").fetchall()
            table = pa.table({
                "change_id": [new_id() for _ in rows],
                "cycle_id": [r["cycle_id"] for r in rows], "pass_name": [r["pass_name"] for r in rows],
                "kind": [r["kind"] for r in rows], "target_type": [r["target_type"] for r in rows],
                "target_id": [r["target_id"] for r in rows],
                "before_json": pa.array([_dump(r.get("before")) for r in rows], pa.string()),
                "after_json": pa.array([_dump(r.get("after")) for r in rows], pa.string()),
                "reason": [r["reason"] for r in rows],
                "created_at": pa.array([ts] * len(rows), pa.timestamp("us")),
                "undone_at": pa.array([None] * len(rows), pa.timestamp("us")),
                "ordinal": pa.array([start + i for i in range(len(rows))], pa.int64()),
            })
            conn.register("_changes_in", table)
            try:
                conn.execute("INSERT INTO changes SELECT * FROM _changes_in")
            finally:
                conn.unregister("_changes_in")
        return len(rows)

    def list(self, cycle_id: str | None = None, *, pass_name: str | None = None) -> list[ChangeRecord]:
        where, params = ["TRUE"], []
        if cycle_id is not None:
            where.append("cycle_id = ?")
            params.append(cycle_id)
        if pass_name is not None:
            where.append("pass_name = ?")
            params.append(pass_name)
        with self._conn.session() as conn:
            rows = conn.execute(f"SELECT * FROM changes WHERE {' AND '.join(where)} ORDER BY ordinal", params).fetchall()
        return [ChangeRecord(r[0], r[1], r[2], r[3], r[4], r[5], _load(r[6]), _load(r[7]), r[8], from_db(r[9]),  # type: ignore[arg-type]
                             from_db(r[10])) for r in rows]

    def cycles(self) -> list[tuple[str, datetime, int]]:
        with self._conn.session() as conn:
            rows = conn.execute("SELECT cycle_id, min(created_at), count(*) FROM changes GROUP BY cycle_id ORDER BY 2").fetchall()
        return [(r[0], from_db(r[1]), int(r[2])) for r in rows]  # type: ignore[misc]

    def undo_cycle(self, cycle_id: str, *, now: datetime, pass_name: str | None = None,
                   force: bool = False) -> UndoResult:
        """Put back every record one cycle (optionally one pass of it) changed, newest change first.

        All-or-nothing unless ``force``: when any entry was edited after the cycle, nothing is undone and the result lists
        the refusals."""
        changes = [c for c in self.list(cycle_id, pass_name=pass_name) if c.undone_at is None and c.kind != "stamped"]
        if not changes:
            raise UndoRefused(f"cycle {cycle_id!r} has no changes to undo" + (f" for pass {pass_name}" if pass_name else ""))
        # The latest recorded state per target is what the cycle left behind.
        final: dict[tuple[str, str], ChangeRecord] = {}
        first: dict[tuple[str, str], ChangeRecord] = {}
        for c in changes:
            final[(c.target_type, c.target_id)] = c
            first.setdefault((c.target_type, c.target_id), c)
        refused: list[str] = []
        for key, last in final.items():
            current = self._current(*key)
            if not _same_state(current, last.after):
                refused.append(f"{key[0]} {key[1]}: edited after cycle {cycle_id} (now differs from what the cycle left); "
                               "undo it by hand or pass force")
        if refused and not force:
            return UndoResult(cycle_id, [], refused)
        restored: list[str] = []
        refused_keys = {r.split(":")[0] for r in refused}
        for key, c in first.items():
            if f"{key[0]} {key[1]}" in refused_keys:
                continue
            self._put_back(key[0], key[1], c.before, now)
            restored.append(f"{key[0]} {key[1]}")
        with self._conn.session() as conn:
            conn.execute("UPDATE changes SET undone_at = ? WHERE change_id IN (SELECT unnest(?))",
                         [to_db(utc(now)), [c.change_id for c in changes]])
        return UndoResult(cycle_id, restored, refused)

    def _current(self, target_type: str, target_id: str) -> dict[str, Any] | None:
        if target_type == "memory":
            e = self._memories.get(target_id)
            return None if e is None else e.to_dict()
        s = self._skills.get(target_id)
        return None if s is None else s.to_dict()

    def _put_back(self, target_type: str, target_id: str, before: dict[str, Any] | None, now: datetime) -> None:
        if target_type == "memory":
            if before is None:      # created by the cycle: retire it (archive, never delete)
                self._memories.archive(target_id, now=now)
            else:
                self._memories.replace(MemoryEntry.from_dict(before))
        else:
            if before is None:
                self._skills.archive(target_id, now=now)
            else:
                self._skills.replace(Skill.from_dict(before))


def _dump(obj: MemoryEntry | Skill | dict | None) -> str | None:
    if obj is None:
        return None
    return json.dumps(obj if isinstance(obj, dict) else obj.to_dict(), sort_keys=True)


def _load(text: str | None) -> dict[str, Any] | None:
    return None if text is None else json.loads(text)


