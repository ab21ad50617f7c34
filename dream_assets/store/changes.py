"""The change log of dream passes, and undo.

Every change a pass makes to a memory or a skill is recorded with the cycle (run) it belongs to, the full record
before and after, and the reason (DESIGN: "Nothing is destroyed in place").

A change and its row are one write: ``record`` and ``record_many`` write through the store's connection, so inside
``with store.transaction():`` they join the open transaction together with the store writes made there (which join it
too), and an exception anywhere rolls all of it back. Outside a transaction ``record`` commits on its own.

Undo walks one cycle's changes, newest target first, and puts each record back as it was before the cycle, refusing —
with a message that names the entry — where the entry was edited after that cycle, so an undo never silently discards
later work (``force`` undoes the rest and leaves those). A later cycle that built on the cycle's results (merged,
superseded or purged what it wrote) blocks the undo as a whole, even with ``force``: the result names that cycle
(``blocked_by``), which is to be undone first, newest first — undoing only the earlier one would put merge sources
back beside the entry merged from them. A purged entry is inserted again from the full record its
"purged" row holds (archived, with its archived_at). Each target is one transaction: the put-back, the undo's own row
and the marking of the target's changes as undone. So an undo killed half-way is finished by running it again, without
``force``: targets already done are marked, and a target found exactly as it was before the cycle counts as done.
A target that cannot be put back (its row holds no usable record, the record no longer validates) does not stop the
others: the result names it and why (``not_restored``), and its changes stay pending for a later retry.

Undo is visible: every put-back writes a "restored" row (pass "undo") under the cycle id ``undo-<cycle>``, with the
record before and after the undo; it lists with the other cycles and can itself be undone.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

import pyarrow as pa

from dream_assets.model import MemoryEntry, Skill, new_id, parse_ts, utc
from dream_assets.profile import AgentProfile
from dream_assets.store.change_rows import dump, insert_change
from dream_assets.store.connection import StoreConnection
from dream_assets.store.cycle_marker import check_markers
from dream_assets.store.memory import MemoryStore
from dream_assets.store.schema import ensure_schema, from_db, to_db
from dream_assets.store.skills import SkillStore

UNDO_PASS = "undo"
#: Review stamps (an entry shown to the model and left unchanged): recorded, never undone, not a change.
STAMP_KIND = "stamped"

#: Test hook (None in production): called with the name of an undo step — "undo:put-back" inside a target's
#: transaction after the record was put back and before its changes are marked undone, "undo:target-done" after that
#: transaction committed. Crash tests set it in a subprocess to ``os._exit`` at a chosen point.
step_hook: Callable[[str], None] | None = None


def undo_cycle_id(cycle_id: str) -> str:
    """The cycle id the rows of an undo of ``cycle_id`` are recorded under."""
    return f"undo-{cycle_id}"


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
    restored: list[str]  # "<target>" put back by this undo
    refused: list[str]  # "<target>: <why>" — edited after the cycle; left as they are
    not_restored: list[str] = field(default_factory=list)  # "<target>: <why>" — could not be put back
    already_undone: list[str] = field(default_factory=list)  # "<target>" undone before (an earlier, interrupted undo)
    undo_cycle_id: str = ""
    blocked_by: list[str] = field(default_factory=list)  # later cycles built on this one: undo them first
    #: markers of cycles that crashed (process gone, no heartbeat for RunTimeout), ignored and removed, with why
    stale_markers: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        """The whole cycle (or pass) is undone: nothing refused, nothing left that could not be restored."""
        return not self.refused and not self.not_restored

    @property
    def applied(self) -> bool:
        """Something usable happened: a record was put back, or nothing was left to do."""
        return bool(self.restored) or self.ok


@dataclass(frozen=True)
class PassChanges:
    """What one pass of one cycle left in the change log: its real changes (review stamps are not changes: they are
    counted apart), how many of those are still undoable (not undone yet), and the changes per kind."""

    cycle_id: str
    pass_name: str
    cycle_started_at: datetime
    changes: int
    undoable: int
    stamps: int
    kinds: dict[str, int]


class UndoRefused(RuntimeError):
    pass


class CycleRunning(UndoRefused):
    """A cycle of the agent is in progress (its marker is live): an undo now would put back what its first passes did
    while its later passes build on it, so nothing is undone."""

    def __init__(self, agent: str, running: Sequence[str]) -> None:
        self.running = list(running)
        super().__init__(
            f"{'; '.join(running)} of agent {agent!r} is running: an undo between its passes would leave half of "
            "each; nothing was changed. Try again when it finishes, or pass --wait SECONDS"
        )


class _CannotRestore(Exception):
    pass


_FIELDS_THAT_COUNT = ("content", "category", "tags", "summary", "see_also", "archived_at")


def _same_state(current: dict[str, Any] | None, expected: dict[str, Any] | None) -> bool:
    """Was the record left as the cycle left it? Compares what a person edits, not housekeeping (importance, stamps)."""
    if current is None or expected is None:
        return current is None and expected is None
    return all(current.get(k) == expected.get(k) for k in _FIELDS_THAT_COUNT)


def _is_before(current: dict[str, Any] | None, before: dict[str, Any] | None) -> bool:
    """Is the target already as it was before the cycle? A record the cycle created counts as undone once archived
    (undo retires, never deletes)."""
    if before is None:
        return current is None or current.get("archived_at") is not None
    return current == before


class ChangeLog:
    def __init__(
        self,
        conn: StoreConnection,
        memories: MemoryStore,
        skills: SkillStore,
        *,
        profile: AgentProfile | None = None,
        cycle_stale_after_s: float = 300.0,
    ) -> None:
        """``profile``: the agent whose cycle markers an undo honours (``store.cycle_marker``); a marker without a
        heartbeat for ``cycle_stale_after_s`` (``RunTimeout``) is from a crashed cycle."""
        self._conn = conn
        self._memories = memories
        self._skills = skills
        self._profile = profile
        self._cycle_stale_after_s = cycle_stale_after_s
        conn.add_open_hook(ensure_schema)

    def cycle_markers(self) -> tuple[list[str], list[str]]:
        """(cycles of the agent running now, stale markers just removed with why), each described for a person."""
        if self._profile is None:
            return [], []
        check = check_markers(self._profile, stale_after_s=self._cycle_stale_after_s)
        return [m.describe() for m in check.running], check.stale

    def record(
        self,
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
        """Write one row. Inside ``store.transaction()`` it is part of that transaction (written with the change it
        describes, or not at all); outside one it commits by itself. Returns the row's change id."""
        with self._conn.session() as conn:
            return insert_change(
                conn,
                cycle_id=cycle_id,
                pass_name=pass_name,
                kind=kind,
                target_type=target_type,
                target_id=target_id,
                before=before,
                after=after,
                reason=reason,
                now=now,
            )

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
            table = pa.table(
                {
                    "change_id": [new_id() for _ in rows],
                    "cycle_id": [r["cycle_id"] for r in rows],
                    "pass_name": [r["pass_name"] for r in rows],
                    "kind": [r["kind"] for r in rows],
                    "target_type": [r["target_type"] for r in rows],
                    "target_id": [r["target_id"] for r in rows],
                    "before_json": pa.array([dump(r.get("before")) for r in rows], pa.string()),
                    "after_json": pa.array([dump(r.get("after")) for r in rows], pa.string()),
                    "reason": [r["reason"] for r in rows],
                    "created_at": pa.array([ts] * len(rows), pa.timestamp("us")),
                    "undone_at": pa.array([None] * len(rows), pa.timestamp("us")),
                    "ordinal": pa.array([start + i for i in range(len(rows))], pa.int64()),
                }
            )
            conn.register("_changes_in", table)
            try:
                conn.execute("INSERT INTO changes SELECT * FROM _changes_in")
            finally:
                conn.unregister("_changes_in")
        return len(rows)

    def put_exact(self, rows: Sequence[Mapping[str, Any]]) -> int:
        """Insert change rows exactly as given (an import of an export): ``change_id``, ``cycle_id``, ``pass_name``,
        ``change_kind``, ``target_type``, ``target_id``, ``before``, ``after``, ``reason``, ``created_at`` and
        ``undone_at`` (ISO-8601 or None), in order, in one transaction (joining an open one)."""
        with self._conn.transaction() as conn:
            for r in rows:
                conn.execute(
                    "INSERT INTO changes VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, nextval('row_seq'))",
                    [
                        r["change_id"],
                        r["cycle_id"],
                        r["pass_name"],
                        r["change_kind"],
                        r["target_type"],
                        r["target_id"],
                        dump(r.get("before")),
                        dump(r.get("after")),
                        r.get("reason") or "",
                        to_db(utc(parse_ts(r["created_at"]))),
                        to_db(utc(parse_ts(r["undone_at"]))) if r.get("undone_at") else None,
                    ],
                )
        return len(rows)

    def list(self, cycle_id: str | None = None, *, pass_name: str | None = None) -> list[ChangeRecord]:
        where, params = ["TRUE"], []
        if cycle_id is not None:
            where.append("cycle_id = ?")
            params.append(cycle_id)
        if pass_name is not None:
            where.append("pass_name = ?")
            params.append(pass_name)
        return self._rows(" AND ".join(where), params)

    def _rows(self, where: str, params: list[Any]) -> list[ChangeRecord]:
        with self._conn.session() as conn:
            rows = conn.execute(f"SELECT * FROM changes WHERE {where} ORDER BY ordinal", params).fetchall()
        return [_row(r) for r in rows]

    def for_target(self, target_type: str, target_id: str) -> list[ChangeRecord]:
        """Every row about one memory or skill, oldest first: its versions as the change log knows them."""
        return self._rows("target_type = ? AND target_id = ?", [target_type, target_id])

    def cycles(self) -> list[tuple[str, datetime, int]]:
        with self._conn.session() as conn:
            rows = conn.execute(
                "SELECT cycle_id, min(created_at), count(*) FROM changes GROUP BY cycle_id ORDER BY 2"
            ).fetchall()
        return [(r[0], from_db(r[1]), int(r[2])) for r in rows]  # type: ignore[misc]

    def by_pass(self, cycle_id: str | None = None) -> list[PassChanges]:
        """Per cycle and pass (cycles oldest first, passes in the order they wrote): changes, undoable, stamps."""
        where, params = ("WHERE cycle_id = ?", [cycle_id]) if cycle_id is not None else ("", [])
        with self._conn.session() as conn:
            rows = conn.execute(
                f"""SELECT cycle_id, pass_name, kind, count(*), count(*) FILTER (WHERE undone_at IS NULL),
                           min(ordinal), min(created_at)
                    FROM changes {where} GROUP BY cycle_id, pass_name, kind""",
                params,
            ).fetchall()
        started: dict[str, datetime] = {}
        first: dict[tuple[str, str], int] = {}
        acc: dict[tuple[str, str], dict[str, Any]] = {}
        for cycle, pass_name, kind, n, pending, ordinal, at in rows:
            at = from_db(at)
            started[cycle] = min(started.get(cycle, at), at)
            key = (cycle, pass_name)
            first[key] = min(first.get(key, ordinal), ordinal)
            a = acc.setdefault(key, {"changes": 0, "undoable": 0, "stamps": 0, "kinds": {}})
            if kind == STAMP_KIND:
                a["stamps"] += int(n)
                continue
            a["changes"] += int(n)
            a["undoable"] += int(pending)
            a["kinds"][kind] = a["kinds"].get(kind, 0) + int(n)
        order = sorted(acc, key=lambda k: (started[k[0]], k[0], first[k]))
        return [
            PassChanges(
                c,
                p,
                started[c],
                acc[(c, p)]["changes"],
                acc[(c, p)]["undoable"],
                acc[(c, p)]["stamps"],
                dict(sorted(acc[(c, p)]["kinds"].items())),
            )
            for c, p in order
        ]

    def undo_cycle(
        self, cycle_id: str, *, now: datetime, pass_name: str | None = None, force: bool = False
    ) -> UndoResult:
        """Put back every record one cycle (optionally one pass of it) changed, newest target first.

        Refuses as a whole unless ``force``: when any entry was edited after the cycle, nothing is undone and the result
        lists the refusals. Raises ``CycleRunning`` (even with ``force``) while a cycle of the agent is in progress;
        the markers of crashed cycles are ignored and listed in ``stale_markers``. Must not be called inside an open
        transaction (each target is its own)."""
        running, stale = self.cycle_markers()
        if running:
            raise CycleRunning(self._profile.agent_id if self._profile else "?", running)
        recorded = [c for c in self.list(cycle_id, pass_name=pass_name) if c.kind != STAMP_KIND]
        if not recorded:
            raise UndoRefused(
                f"cycle {cycle_id!r} has no changes to undo" + (f" for pass {pass_name}" if pass_name else "")
            )
        targets: dict[tuple[str, str], list[ChangeRecord]] = {}
        last_pos: dict[tuple[str, str], int] = {}
        for i, c in enumerate(recorded):
            if c.undone_at is None:
                targets.setdefault((c.target_type, c.target_id), []).append(c)
                last_pos[(c.target_type, c.target_id)] = i
        result = UndoResult(cycle_id, [], [], undo_cycle_id=undo_cycle_id(cycle_id), stale_markers=stale)
        result.already_undone = list(
            dict.fromkeys(
                _label(k)
                for k in ((c.target_type, c.target_id) for c in recorded if c.undone_at is not None)
                if k not in targets
            )
        )
        refused: dict[tuple[str, str], str] = {}
        # Targets are checked and put back in turns (one session for many short transactions): while the agent
        # saves, each transaction of its own would cost a turn of the file.
        for key, cs in self._conn.in_turns(list(targets.items())):
            current = self._current(*key)
            if not _is_before(current, cs[0].before) and not _same_state(current, cs[-1].after):
                refused[key] = self._why_refused(key, current, cycle_id)
        later = self._built_on(cycle_id, pass_name)
        for key, (later_cycle, later_change) in later.items():
            first = (
                f"cycle {later_cycle}"
                if later_cycle != cycle_id
                else f"pass {later_change.pass_name} of this cycle (or the whole cycle)"
            )
            refused.setdefault(
                key,
                f"{_label(key)}: {first.split(' (')[0]} built on this "
                f"{'cycle' if later_cycle != cycle_id else 'pass'}'s result ({later_change.pass_name} "
                f"{later_change.kind} it); undo {first} first",
            )
        result.refused = list(refused.values())
        result.blocked_by = list(dict.fromkeys(c for c, _ in later.values()))
        if later or (refused and not force):
            # A later cycle that built on this one's results is never left half-undone under it, even with force.
            return result
        ts = to_db(utc(now))
        for key in self._conn.in_turns(sorted(targets, key=lambda k: last_pos[k], reverse=True)):
            if key in refused:
                continue
            cs = targets[key]
            try:
                with self._conn.transaction() as conn:
                    current = self._current(*key)
                    if _is_before(current, cs[0].before):
                        done = result.already_undone
                    elif not _same_state(current, cs[-1].after):  # edited since the check above
                        result.refused.append(self._why_refused(key, current, cycle_id))
                        continue
                    else:
                        after = self._put_back(key, cs[0], now)
                        self.record(
                            cycle_id=result.undo_cycle_id,
                            pass_name=UNDO_PASS,
                            kind="restored",
                            target_type=key[0],
                            target_id=key[1],
                            before=current,
                            after=after,
                            reason=_undo_reason(cycle_id, pass_name, cs[0]),
                            now=now,
                        )
                        done = result.restored
                    if step_hook is not None:
                        step_hook("undo:put-back")
                    conn.execute(
                        "UPDATE changes SET undone_at = ? WHERE change_id IN (SELECT unnest(?))",
                        [ts, [c.change_id for c in cs]],
                    )
            except (_CannotRestore, ValueError, KeyError, TypeError) as exc:
                why = str(exc) if isinstance(exc, _CannotRestore) else f"{type(exc).__name__}: {exc}"
                result.not_restored.append(f"{_label(key)}: {why}")
                continue
            done.append(_label(key))
            if step_hook is not None:
                step_hook("undo:target-done")
        return result

    def _built_on(self, cycle_id: str, pass_name: str | None) -> dict[tuple[str, str], tuple[str, ChangeRecord]]:
        """Targets of ``cycle_id`` (or of its pass) that a later cycle (or, when one pass is undone, a later pass of
        the same cycle) changed after it, not undone: that change built on this one's result (merged or superseded
        what it wrote, purged what it archived), so undoing this one first would put sources back beside what was
        built from them. Changes that leave what counts alone (importance decay, review stamps) and the rows of
        undos are no such change."""
        where = "cycle_id = ?" + (" AND pass_name = ?" if pass_name else "")
        params = [cycle_id, *([pass_name] if pass_name else [])]
        # Another cycle's change; with one pass undone, also a later pass of the same cycle.
        other = "(c.cycle_id <> ? OR c.pass_name <> ?)" if pass_name else "c.cycle_id <> ?"
        other_params = [cycle_id, pass_name] if pass_name else [cycle_id]
        with self._conn.session() as conn:
            rows = conn.execute(
                f"""WITH mine AS (
                        SELECT target_type, target_id, max(ordinal) AS last FROM changes
                        WHERE {where} AND kind <> ? AND undone_at IS NULL GROUP BY ALL)
                    SELECT c.* FROM changes c JOIN mine m USING (target_type, target_id)
                    WHERE c.ordinal > m.last AND {other} AND c.pass_name <> ? AND c.kind <> ?
                      AND c.undone_at IS NULL
                    ORDER BY c.ordinal""",
                [*params, STAMP_KIND, *other_params, UNDO_PASS, STAMP_KIND],
            ).fetchall()
        found: dict[tuple[str, str], tuple[str, ChangeRecord]] = {}
        for r in rows:
            change = _row(r)
            if change.before is not None and change.after is not None and _same_state(change.after, change.before):
                continue
            found.setdefault((change.target_type, change.target_id), (change.cycle_id, change))
        return found

    def _why_refused(self, key: tuple[str, str], current: dict[str, Any] | None, cycle_id: str) -> str:
        if current is None:
            return (
                f"{_label(key)}: no longer exists (purged after cycle {cycle_id}); undo the cycle that purged it first"
            )
        return (
            f"{_label(key)}: edited after cycle {cycle_id} (now differs from what the cycle left); undo it by hand "
            "or pass force"
        )

    def _current(self, target_type: str, target_id: str) -> dict[str, Any] | None:
        if target_type == "memory":
            e = self._memories.get(target_id)
            return None if e is None else e.to_dict()
        s = self._skills.get(target_id)
        return None if s is None else s.to_dict()

    def _put_back(self, key: tuple[str, str], first: ChangeRecord, now: datetime) -> dict[str, Any] | None:
        """Write the record as it was before ``first`` (the cycle's first change of this target); returns it."""
        target_type, target_id = key
        before = first.before
        if before is None:
            if first.kind == "purged":
                raise _CannotRestore(
                    f"purged by {first.pass_name}, and its change row holds no record to restore it from"
                )
            # created by the cycle: retire it (archive, never delete)
            if target_type == "memory":
                return self._memories.archive(target_id, now=now).to_dict()
            return self._skills.archive(target_id, now=now).to_dict()
        try:
            record: MemoryEntry | Skill = (
                MemoryEntry.from_dict(before) if target_type == "memory" else Skill.from_dict(before)
            )
        except (KeyError, ValueError, TypeError) as exc:
            raise _CannotRestore(
                f"the record kept by {first.pass_name} ({first.kind}) is incomplete: {type(exc).__name__}: {exc}"
            ) from exc
        if isinstance(record, MemoryEntry):
            if self._memories.get(target_id) is None:  # purged by the cycle: insert it again, as it was
                return self._memories.put(record).to_dict()
            return self._memories.replace(record).to_dict()
        return self._skills.replace(record).to_dict()


def _row(r: Sequence[Any]) -> ChangeRecord:
    return ChangeRecord(
        r[0],
        r[1],
        r[2],
        r[3],
        r[4],
        r[5],
        _load(r[6]),
        _load(r[7]),
        r[8],
        from_db(r[9]),  # type: ignore[arg-type]
        from_db(r[10]),
    )


def _label(key: tuple[str, str]) -> str:
    return f"{key[0]} {key[1]}"


def _undo_reason(cycle_id: str, pass_name: str | None, first: ChangeRecord) -> str:
    scope = f"cycle {cycle_id}" + (f", pass {pass_name}" if pass_name else "")
    return f"undo of {scope}: put back as it was before {first.pass_name} {first.kind} it"


def _load(text: str | None) -> dict[str, Any] | None:
    return None if text is None else json.loads(text)
