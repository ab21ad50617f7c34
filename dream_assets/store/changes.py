"""The change log of dream passes, and undo.

Every change a pass makes to a memory or a skill is recorded with the cycle (run) it belongs to, the full record
before and after, and the reason (DESIGN: "Nothing is destroyed in place"). A row is a ``ChangeRow``
(``dream_assets/changes_model.py``): who made it (its actor: the agent, a pass, review, undo, ``dream restore``) and,
for an entry archived into another, that entry and how (``successor_id``, ``successor_how``), which undo reads to say
what it put back ("unmerged", "unsuperseded"). Cycle ids come from ``dream_assets/cycle_ids.py``.

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

An entry the cycle merged from others (``mergedFrom``) is retired only when the undo gives its facts back: each source
is live, or put back live by this undo (or is itself such a merged entry). A store that lacks a source's record or its
change row (a copy imported without ``--archived`` holds a merge's result and not its sources) keeps the merged entry
live and names it in ``not_restored``, so an undo never takes a fact out of the live set with nothing in its place.
Such entries are retired after every other target, so a source whose put-back failed keeps its merged entry too.

Importance decay is recorded compactly: one "decayed" row per entry it touched, holding only what decay writes
(importance, updated_at and its metadata stamps) before and after, not the whole record. Undo puts those fields back,
many entries per transaction. An entry a later cycle decayed again is left as that cycle left it and named in
``UndoResult.left`` (a later decay is no edit, so it holds up nothing; its row stays pending for an undo after that
cycle's); an importance changed otherwise is refused like any edit. A target the cycle also changed otherwise is put
back as it was before its first change, decay included.

An undone purge puts the entry back archived, with its archived_at, and keeps it from the purge for a full
``MemoryArchiveRetention`` from the undo (metadata ``keepArchivedUntil``): the next cycle does not purge it again.
An entry the cycle created is retired by the undo: archived, never deleted, so it stays as an archived row.

Undo is visible: every put-back writes a row (pass "undo") under the cycle id ``undo-<cycle>``, with the record
before and after the undo; its kind names what the undo did (see ``UNDO_KINDS``), it lists with the other cycles and
can itself be undone.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

import numpy as np

from dream_assets import cycle_ids
from dream_assets.changes_model import (
    ACTOR_PASS_NAMES,
    Actor,
    ChangeRow,
    SuccessorHow,
    legacy_successor,
)
from dream_assets.changes_model import TARGET_TYPES as TARGET_TYPES
from dream_assets.model import MemoryEntry, Skill, iso, new_id, parse_ts, utc
from dream_assets.profile import AgentProfile
from dream_assets.store.change_rows import INSERT_SQL, dump, insert_change, row_values
from dream_assets.store.connection import StoreConnection
from dream_assets.store.cycle_marker import check_markers
from dream_assets.store.frames import registered, texts, timestamps
from dream_assets.store.memory import MemoryStore
from dream_assets.store.schema import CHANGE_COLUMNS, ensure_schema, from_db, to_db, where_equal
from dream_assets.store.skills import SkillStore

UNDO_PASS = ACTOR_PASS_NAMES[Actor.UNDO]
#: Review stamps (an entry shown to the model and left unchanged): recorded, never undone, not a change.
STAMP_KIND = "stamped"

#: Importance decay's rows: only the fields decay writes ("importance", "updated_at", "metadata" with the stamps it
#: sets; a stamp whose before value is None was absent), not the whole record.
DECAY_KIND = "decayed"
#: The undo of a decay, recorded the same compact way (so it can itself be undone).
SCORES_PUT_BACK_KIND = "importance put back"
#: Rows that hold only those score fields, not whole records.
SCORE_KINDS = (DECAY_KIND, SCORES_PUT_BACK_KIND)
#: How many decay-only targets an undo puts back per transaction (a decay touches most of a large corpus).
SCORE_BATCH = 1000
#: Metadata an undone purge leaves on the entry it put back: the archive purge keeps it until then (ISO-8601 UTC).
KEEP_ARCHIVED_UNTIL_KEY = "keepArchivedUntil"
#: Metadata of a merged entry: the ids it was merged from (``passes.memory_consolidation.merge.MERGED_FROM_KEY``).
MERGED_FROM_KEY = "mergedFrom"
#: The kinds of an undo's rows, each naming what the undo did to its target.
UNDO_KINDS = {
    "put back": "put back as it was before the cycle",
    "put back live": "archived by the cycle, live again",
    "unmerged": "archived by a merge, live again",
    "unsuperseded": "archived as superseded, live again",
    "archived again": "restored by the cycle, archived again",
    "retired": "created by the cycle, archived; it stays as an archived row",
    "unpurged": "purged by the cycle, put back archived",
    "importance put back": "decayed by the cycle, its importance put back",
}

#: Every kind a change row can have: what the passes, the agent's calls and ``dream restore`` record, and the undo's
#: own kinds. An import refuses any other.
CHANGE_KINDS = frozenset({"created", "updated", "archived", "restored", "purged", STAMP_KIND, DECAY_KIND, *UNDO_KINDS})

#: Test hook (None in production): called with the name of an undo step — "undo:put-back" inside a target's
#: transaction after the record was put back and before its changes are marked undone, "undo:target-done" after that
#: transaction committed. Crash tests set it in a subprocess to ``os._exit`` at a chosen point.
step_hook: Callable[[str], None] | None = None


def undo_cycle_id(cycle_id: str) -> str:
    """The cycle id the rows of an undo of ``cycle_id`` are recorded under."""
    return cycle_ids.undo(cycle_id)


@dataclass(frozen=True)
class ChangeRecord:
    """A stored change row: the ``ChangeRow`` written, with its id, time and whether it was undone."""

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
    actor: Actor = Actor.PASS
    successor_id: str | None = None
    successor_how: SuccessorHow = SuccessorHow.NONE


@dataclass(frozen=True)
class UndoAction:
    """What the undo did to one target: its kind (a key of ``UNDO_KINDS``) and a line that says it plainly."""

    kind: str
    detail: str


@dataclass
class UndoResult:
    cycle_id: str
    restored: list[str]  # "<target>" put back by this undo (what was done to each: ``actions``)
    refused: list[str]  # "<target>: <why>" — edited after the cycle; left as they are
    not_restored: list[str] = field(default_factory=list)  # "<target>: <why>" — could not be put back
    already_undone: list[str] = field(default_factory=list)  # "<target>" undone before (an earlier, interrupted undo)
    undo_cycle_id: str = ""
    blocked_by: list[str] = field(default_factory=list)  # later cycles built on this one: undo them first
    actions: dict[str, UndoAction] = field(default_factory=dict)  # "<target>" -> what the undo did to it
    #: "<target>: <why>" — decayed only, and decayed again by a later cycle since: its importance is left as that
    #: cycle left it (not an edit, so it holds up nothing); its row stays pending for an undo after that cycle's
    left: list[str] = field(default_factory=list)
    #: markers of cycles that crashed (process gone, no heartbeat for RunTimeout), ignored and removed, with why
    stale_markers: list[str] = field(default_factory=list)

    def done(self, kind: str) -> list[str]:
        """The targets this undo put back with ``kind`` (a key of ``UNDO_KINDS``)."""
        return [t for t in self.restored if t in self.actions and self.actions[t].kind == kind]

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
        archive_retention: timedelta | None = None,
        profile: AgentProfile | None = None,
        cycle_stale_after_s: float = 300.0,
    ) -> None:
        """``archive_retention`` (MemoryArchiveRetention): how long an undone purge keeps the entry from the purge
        (None: not known to these options, and undoing a purge is refused).
        ``profile``: the agent whose cycle markers an undo honours (``store.cycle_marker``); a marker without a
        heartbeat for ``cycle_stale_after_s`` (``RunTimeout``) is from a crashed cycle."""
        self._conn = conn
        self._retention = archive_retention
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

    def record(self, row: ChangeRow, *, now: datetime) -> str:
        """Write one row. Inside ``store.transaction()`` it is part of that transaction (written with the change it
        describes, or not at all); outside one it commits by itself. Returns the row's change id."""
        with self._conn.session() as conn:
            return insert_change(conn, row, now=now)

    def record_many(self, rows: Sequence[ChangeRow], *, now: datetime) -> int:
        """Write many change rows in one transaction (a pass that stamps thousands of entries); rows keep their
        order."""
        if not rows:
            return 0
        ts = to_db(utc(now))
        with self._conn.transaction() as conn:
            start = int(conn.execute("SELECT nextval('row_seq')").fetchall()[0][0])
            if len(rows) > 1:  # reserve a block of ordinals for the batch
                conn.execute(f"SELECT nextval('row_seq') FROM range({len(rows) - 1})").fetchall()
            columns = {
                "change_id": texts(new_id() for _ in rows),
                "cycle_id": texts(r.cycle_id for r in rows),
                "pass_name": texts(r.pass_name for r in rows),
                "kind": texts(r.kind for r in rows),
                "target_type": texts(r.target_type for r in rows),
                "target_id": texts(r.target_id for r in rows),
                "before_json": texts(dump(r.before) for r in rows),
                "after_json": texts(dump(r.after) for r in rows),
                "reason": texts(r.reason for r in rows),
                "created_at": timestamps([ts] * len(rows)),
                "ordinal": np.arange(start, start + len(rows), dtype=np.int64),
                "actor": texts(r.actor.value for r in rows),  # type: ignore[union-attr]
                "successor_id": texts(r.successor_id for r in rows),
                "successor_how": texts(r.successor_how.value for r in rows),
            }
            with registered(conn, "_changes_in", columns):
                conn.execute(f"INSERT INTO changes ({', '.join(columns)}) SELECT {', '.join(columns)} FROM _changes_in")
        return len(rows)

    def put_exact(self, rows: Sequence[Mapping[str, Any]]) -> int:
        """Insert change rows exactly as given (an import of an export): ``change_id``, ``cycle_id``, ``pass_name``,
        ``change_kind``, ``target_type``, ``target_id``, ``before``, ``after``, ``reason``, ``created_at`` and
        ``undone_at`` (ISO-8601 or None), and ``actor``, ``successor_id``, ``successor_how`` when the export has
        them, in order, in one transaction (joining an open one). A row of an export without the successor fields
        gets the one its reason names (``legacy_successor``), as an upgraded store does."""
        with self._conn.transaction() as conn:
            for r in rows:
                successor_id, how = r.get("successor_id"), r.get("successor_how")
                if how is None:
                    successor_id, how = legacy_successor(r["change_kind"], r.get("reason"))
                row = ChangeRow(
                    cycle_id=r["cycle_id"],
                    actor=Actor(r["actor"]) if r.get("actor") else None,
                    pass_name=r["pass_name"],
                    kind=r["change_kind"],
                    target_type=r["target_type"],
                    target_id=r["target_id"],
                    before=r.get("before"),
                    after=r.get("after"),
                    reason=r.get("reason") or "",
                    successor_id=successor_id,
                    successor_how=SuccessorHow(how),
                )
                created = parse_ts(r["created_at"])
                undone = parse_ts(r["undone_at"]) if r.get("undone_at") else None
                conn.execute(INSERT_SQL, row_values(r["change_id"], row, created, undone))
        return len(rows)

    def list(self, cycle_id: str | None = None, *, pass_name: str | None = None) -> list[ChangeRecord]:
        return self._rows(*where_equal(cycle_id=cycle_id, pass_name=pass_name))

    def _rows(self, where: str, params: list[Any]) -> list[ChangeRecord]:
        with self._conn.session() as conn:
            rows = conn.execute(f"SELECT {_SELECTED} FROM changes WHERE {where} ORDER BY ordinal", params).fetchall()
        return [_row(r) for r in rows]

    def for_target(self, target_type: str, target_id: str) -> list[ChangeRecord]:
        """Every row about one memory or skill, oldest first: its versions as the change log knows them."""
        return self._rows("target_type = ? AND target_id = ?", [target_type, target_id])

    def get(self, change_id: str) -> ChangeRecord | None:
        """One row by its change id (None: the log holds no such change)."""
        found = self._rows("change_id = ?", [change_id])
        return found[0] if found else None

    def cycles(self) -> list[tuple[str, datetime, int]]:
        with self._conn.session() as conn:
            rows = conn.execute(
                "SELECT cycle_id, min(created_at), count(*) FROM changes GROUP BY cycle_id ORDER BY 2"
            ).fetchall()
        return [(r[0], from_db(r[1]), int(r[2])) for r in rows]  # type: ignore[misc]

    def by_pass(self, cycle_id: str | None = None) -> list[PassChanges]:
        """Per cycle and pass (cycles oldest first, passes in the order they wrote): changes, undoable, stamps."""
        where, params = where_equal(cycle_id=cycle_id)
        with self._conn.session() as conn:
            rows = conn.execute(
                f"""SELECT cycle_id, pass_name, kind, count(*), count(*) FILTER (WHERE undone_at IS NULL),
                           min(ordinal), min(created_at)
                    FROM changes WHERE {where} GROUP BY cycle_id, pass_name, kind""",
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

    def review_marks(self, cycle_id: str) -> tuple[int, list[str]]:
        """The review stamps of one cycle, which an undo leaves: how many entries carry them, and the metadata keys
        they set (sorted)."""
        targets: set[str] = set()
        keys: set[str] = set()
        for c in self.list(cycle_id):
            if c.kind != STAMP_KIND:
                continue
            targets.add(c.target_id)
            before, after = (c.before or {}).get("metadata") or {}, (c.after or {}).get("metadata") or {}
            keys.update(k for k, v in after.items() if before.get(k) != v)
        return len(targets), sorted(keys)

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
        plans = {key: _Plan(key, cs) for key, cs in targets.items()}
        refused: dict[tuple[str, str], str] = {}
        # Targets are checked and put back in turns (one session for many short transactions): while the agent
        # saves, each transaction of its own would cost a turn of the file.
        keys = list(plans)
        edited: dict[tuple[str, str], dict[str, Any] | None] = {}
        for chunk in self._conn.in_turns([keys[i : i + SCORE_BATCH] for i in range(0, len(keys), SCORE_BATCH)]):
            currents = self._currents(chunk)
            for key in chunk:
                if not plans[key].is_before(currents[key]) and not plans[key].as_left(currents[key]):
                    edited[key] = currents[key]
        again = self._decayed_again(cycle_id, [k for k in edited if plans[k].rows[-1].kind in SCORE_KINDS])
        for key, current in edited.items():
            later_decay = again.get(key[1])
            if not plans[key].full and later_decay and current and current.get("importance") == later_decay[1]:
                # decayed again by a later cycle, nothing else: not an edit, so it does not hold up the undo; its
                # importance stays as that cycle left it, and its row stays pending for an undo after that one's
                result.left.append(
                    f"{_label(key)}: importance left as cycle {later_decay[0]} decayed it again since; undo cycle "
                    f"{later_decay[0]} first to put it back"
                )
                continue
            refused[key] = self._why_refused(plans[key], current, cycle_id, later_decay[0] if later_decay else None)
        left = {k for k in edited if k not in refused}
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
        kept = self._kept_merges(plans, set(refused) | left)
        for key, why in kept.items():
            result.not_restored.append(f"{_label(key)}: {why}")
        order = [
            k
            for k in sorted(plans, key=lambda k: last_pos[k], reverse=True)
            if k not in refused and k not in left and k not in kept
        ]
        # A merged entry is retired once its sources are back (see the module).
        order.sort(key=lambda k: bool(plans[k].merged_from()))
        scores_only = [k for k in order if k[0] == "memory" and not plans[k].full]
        if scores_only:
            order = [k for k in order if k[0] != "memory" or plans[k].full]
        # One loop of turns: the targets one by one, then the decayed-only targets in batches.
        batches = [scores_only[i : i + SCORE_BATCH] for i in range(0, len(scores_only), SCORE_BATCH)]
        for key in self._conn.in_turns([*order, *batches]):
            if isinstance(key, list):
                self._put_back_scores([plans[k] for k in key], result, pass_name, now)
                continue
            plan = plans[key]
            try:
                with self._conn.transaction() as conn:
                    current = self._current(*key)
                    if plan.is_before(current):
                        done = result.already_undone
                    elif not plan.as_left(current):  # edited since the check above
                        result.refused.append(self._why_refused(plan, current, cycle_id))
                        continue
                    else:
                        self._check_sources_back(plan, plans)
                        after, action = self._put_back(plan, current, now)
                        what = f"undo of cycle {cycle_id}" + (f", pass {pass_name}" if pass_name else "")
                        self._record_put_back(result, key, current, after, action, what, now)
                        result.actions[_label(key)] = action
                        done = result.restored
                    if step_hook is not None:
                        step_hook("undo:put-back")
                    conn.execute(
                        "UPDATE changes SET undone_at = ? WHERE change_id IN (SELECT unnest(?))",
                        [ts, [c.change_id for c in plan.rows]],
                    )
            except (_CannotRestore, ValueError, KeyError, TypeError) as exc:
                why = str(exc) if isinstance(exc, _CannotRestore) else f"{type(exc).__name__}: {exc}"
                result.not_restored.append(f"{_label(key)}: {why}")
                continue
            done.append(_label(key))
            if step_hook is not None:
                step_hook("undo:target-done")
        return result

    def undo_change(self, change_id: str, *, now: datetime) -> UndoResult:
        """Put back what one change did to its target, as ``undo_cycle`` does for each target of a cycle. Refused,
        with nothing changed, when a later change (of any cycle, not undone) changed what counts in the target after
        it: that change built on this one, so it is to be undone first (``blocked_by`` names its cycle); and when the
        target was edited since (``refused``). The undo's row is recorded under ``undo-<change id>``. Raises
        ``UndoRefused`` for a change the log does not hold or a review stamp (not a change), ``CycleRunning`` while a
        cycle of the agent is in progress. Must not be called inside an open transaction."""
        running, stale = self.cycle_markers()
        if running:
            raise CycleRunning(self._profile.agent_id if self._profile else "?", running)
        with self._conn.session() as conn:
            found = conn.execute("SELECT * FROM changes WHERE change_id = ?", [change_id]).fetchall()
        if not found:
            raise UndoRefused(f"no change {change_id!r} in the change log; nothing was changed")
        change, ordinal = _row(found[0]), int(found[0][11])
        if change.kind == STAMP_KIND:
            raise UndoRefused(f"change {change_id} is a review stamp, not a change: an undo leaves it")
        key = (change.target_type, change.target_id)
        label = _label(key)
        result = UndoResult(change.cycle_id, [], [], undo_cycle_id=undo_cycle_id(change_id), stale_markers=stale)
        if change.undone_at is not None:
            result.already_undone.append(label)
            return result
        later = [
            c
            for c in self._rows(
                "target_type = ? AND target_id = ? AND ordinal > ? AND undone_at IS NULL AND kind <> ? "
                "AND pass_name <> ?",
                [*key, ordinal, STAMP_KIND, UNDO_PASS],
            )
            if not (c.before is not None and c.after is not None and _same_state(c.after, c.before))
        ]
        if later:
            first = later[0]
            result.refused.append(
                f"{label}: change {first.change_id} of cycle {first.cycle_id} ({first.pass_name} {first.kind} it) "
                f"built on change {change_id} after it; undo that change (or its cycle) first"
            )
            result.blocked_by = list(dict.fromkeys(c.cycle_id for c in later))
            return result
        plan = _Plan(key, [change])
        if change.kind in SCORE_KINDS:
            self._put_back_scores([plan], result, None, now)
            return result
        try:
            with self._conn.transaction() as conn:
                current = self._current(*key)
                if plan.is_before(current):
                    done = result.already_undone
                elif not plan.as_left(current):
                    gone = (
                        "no longer exists" if current is None else "was edited after it (now differs from what it left)"
                    )
                    result.refused.append(f"{label}: {gone}; undo it by hand")
                    return result
                else:
                    self._check_sources_back(plan, {key: plan})
                    after, action = self._put_back(plan, current, now)
                    what = f"undo of change {change_id} of cycle {change.cycle_id} ({change.pass_name})"
                    self._record_put_back(result, key, current, after, action, what, now)
                    result.actions[label] = action
                    done = result.restored
                conn.execute("UPDATE changes SET undone_at = ? WHERE change_id = ?", [to_db(utc(now)), change_id])
        except (_CannotRestore, ValueError, KeyError, TypeError) as exc:
            why = str(exc) if isinstance(exc, _CannotRestore) else f"{type(exc).__name__}: {exc}"
            result.not_restored.append(f"{label}: {why}")
            return result
        done.append(label)
        return result

    def _record_put_back(
        self,
        result: UndoResult,
        key: tuple[str, str],
        current: dict[str, Any] | None,
        after: Any,
        action: UndoAction,
        what: str,
        now: datetime,
    ) -> None:
        """The undo's own row for one target it put back (``what``: which undo, for the reason)."""
        self.record(
            ChangeRow(
                cycle_id=result.undo_cycle_id,
                actor=Actor.UNDO,
                kind=action.kind,
                target_type=key[0],
                target_id=key[1],
                before=current,
                after=after,
                reason=f"{what}: {action.detail}",
            ),
            now=now,
        )

    def _put_back_scores(
        self, plans: Sequence[_Plan], result: UndoResult, pass_name: str | None, now: datetime
    ) -> None:
        """Put back the importance of targets the cycle only decayed, many per transaction: the new scores, the
        undo's (compact) rows and the marks of the decay rows are one write."""
        rows: list[ChangeRow] = []
        scores: dict[str, MemoryEntry] = {}
        marks: list[str] = []
        labels: list[tuple[str, UndoAction | None]] = []
        with self._conn.transaction() as conn:
            currents = {i: e.to_dict() for i, e in self._memories.get_many([p.key[1] for p in plans]).items()}
            for plan in plans:
                label, current = _label(plan.key), currents.get(plan.key[1])
                if plan.is_before(current):
                    labels.append((label, None))
                elif not plan.as_left(current):  # changed since the check
                    result.refused.append(self._why_refused(plan, current, result.cycle_id))
                    continue
                else:
                    assert current is not None  # as_left
                    before = plan.before(current) or {}
                    stamps = ((plan.rows[0].before or {}).get("metadata") or {}).keys()
                    try:
                        scores[plan.key[1]] = MemoryEntry.from_dict(before)
                    except (KeyError, ValueError, TypeError) as exc:
                        result.not_restored.append(f"{label}: {type(exc).__name__}: {exc}")
                        continue
                    action = UndoAction(
                        SCORES_PUT_BACK_KIND,
                        f"importance put back to {before['importance']:.4f} (was {current['importance']:.4f}, "
                        f"as {plan.rows[0].pass_name} left it)",
                    )
                    rows.append(
                        ChangeRow(
                            cycle_id=result.undo_cycle_id,
                            actor=Actor.UNDO,
                            kind=action.kind,
                            target_type="memory",
                            target_id=plan.key[1],
                            before=_scores(current, stamps),
                            after=_scores(before, stamps),
                            reason=f"undo of cycle {result.cycle_id}"
                            + (f", pass {pass_name}" if pass_name else "")
                            + f": {action.detail}",
                        )
                    )
                    labels.append((label, action))
                marks.extend(c.change_id for c in plan.rows)
            self._memories.put_scores(scores.values())
            self.record_many(rows, now=now)
            if step_hook is not None:
                step_hook("undo:put-back")
            conn.execute(
                "UPDATE changes SET undone_at = ? WHERE change_id IN (SELECT unnest(?))",
                [to_db(utc(now)), marks],
            )
        for label, action in labels:
            if action is None:
                result.already_undone.append(label)
            else:
                result.actions[label] = action
                result.restored.append(label)
        if step_hook is not None:
            step_hook("undo:target-done")

    def _kept_merges(
        self, plans: Mapping[tuple[str, str], _Plan], skipped: set[tuple[str, str]]
    ) -> dict[tuple[str, str], str]:
        """The merged entries the undo would retire while a source's fact would not come back (``skipped``: targets
        this undo leaves as they are), with why: they stay live (see the module)."""
        live = {
            i
            for i, e in self._memories.get_many({s for p in plans.values() for s in p.merged_from()}).items()
            if not e.is_archived
        }

        def lost(key: tuple[str, str], seen: frozenset[tuple[str, str]]) -> list[str]:
            missing = []
            for source in plans[key].merged_from():
                skey = ("memory", source)
                plan = plans.get(skey)
                if plan is None or skey in skipped:  # the undo leaves it as it is
                    back = source in live
                else:  # put back live, or itself a merged entry of the cycle whose sources come back
                    back = plan.restores_live() or (
                        bool(plan.merged_from()) and skey not in seen and not lost(skey, seen | {skey})
                    )
                if not back:
                    missing.append(source)
            return missing

        kept: dict[tuple[str, str], str] = {}
        for key, plan in plans.items():
            if key in skipped or not plan.merged_from():
                continue
            missing = lost(key, frozenset({key}))
            if missing:
                first = plan.full[0]
                kept[key] = (
                    f"{first.pass_name} merged it from {', '.join(missing)}, which this undo cannot put back (no "
                    "record or change row of "
                    f"{'it' if len(missing) == 1 else 'them'} in this store, e.g. a copy exported without --archived, "
                    "or left as they are); it stays live, so its facts stay in the live set"
                )
        return kept

    def _check_sources_back(self, plan: _Plan, plans: Mapping[tuple[str, str], _Plan]) -> None:
        """Before a merged entry is retired: each source is live again, or is itself a merged entry of the cycle
        (retired only once its own sources were back). Raises ``_CannotRestore`` naming the others."""
        sources = plan.merged_from()
        if not sources:
            return
        back = self._memories.get_many(sources)
        missing = [
            s
            for s in sources
            if s not in back
            or (back[s].is_archived and not (("memory", s) in plans and plans["memory", s].merged_from()))
        ]
        if missing:
            raise _CannotRestore(
                f"{plan.full[0].pass_name} merged it from {', '.join(missing)}, which are not live again; it stays "
                "live, so its facts stay in the live set"
            )

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
                    SELECT {_SELECTED_C} FROM changes c
                    JOIN mine m USING (target_type, target_id)
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

    def _currents(self, keys: Sequence[tuple[str, str]]) -> dict[tuple[str, str], dict[str, Any] | None]:
        """The current records of ``keys`` (memories read together, skills one by one); None: no such record."""
        memories = self._memories.get_many([k[1] for k in keys if k[0] == "memory"])
        return {
            k: (memories[k[1]].to_dict() if k[1] in memories else None) if k[0] == "memory" else self._current(*k)
            for k in keys
        }

    def _decayed_again(self, cycle_id: str, keys: Sequence[tuple[str, str]]) -> dict[str, tuple[str, float | None]]:
        """For memories of ``keys``: the latest other cycle that decayed them after ``cycle_id`` did, not undone, and
        the importance it left."""
        if not keys:
            return {}
        with self._conn.session() as conn:
            rows = conn.execute(
                """SELECT c.target_id, arg_max(c.cycle_id, c.ordinal), arg_max(c.after_json, c.ordinal) FROM changes c
                   WHERE c.kind = ? AND c.target_type = 'memory' AND c.cycle_id <> ? AND c.undone_at IS NULL
                     AND c.target_id IN (SELECT unnest(?))
                     AND c.ordinal > (SELECT min(ordinal) FROM changes WHERE cycle_id = ?)
                   GROUP BY c.target_id""",
                [DECAY_KIND, cycle_id, [k[1] for k in keys], cycle_id],
            ).fetchall()
        return {r[0]: (r[1], (_load(r[2]) or {}).get("importance")) for r in rows}

    def _why_refused(
        self, plan: _Plan, current: dict[str, Any] | None, cycle_id: str, decayed_again: str | None = None
    ) -> str:
        key = plan.key
        if current is None:
            return (
                f"{_label(key)}: no longer exists (purged after cycle {cycle_id}); undo the cycle that purged it first"
            )
        last = plan.rows[-1]
        if last.kind in SCORE_KINDS and current.get("importance") != (last.after or {}).get("importance"):
            by = (
                f"decayed again by cycle {decayed_again}; undo cycle {decayed_again} first"
                if decayed_again
                else "edited since; undo it by hand"
            )
            return (
                f"{_label(key)}: importance changed after cycle {cycle_id} (now {current.get('importance'):.3f}, the "
                f"cycle left {(last.after or {}).get('importance', 0.0):.3f}): {by}, or pass force to leave it"
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

    def _put_back(
        self, plan: _Plan, current: dict[str, Any] | None, now: datetime
    ) -> tuple[dict[str, Any], UndoAction]:
        """Write the record as it was before the cycle's first change of the target; returns it and what was done.
        (Targets the cycle only decayed are put back in batches: ``_put_back_scores``.)"""
        target_type, target_id = plan.key
        full = plan.full
        before = plan.before(current)
        first = full[0]
        done_by = f"{first.pass_name} {first.kind} it"
        if before is None:
            if first.kind == "purged":
                raise _CannotRestore(
                    f"purged by {first.pass_name}, and its change row holds no record to restore it from"
                )
            # created by the cycle: retire it (archive, never delete)
            if target_type == "memory":
                retired = self._memories.archive(target_id, now=now).to_dict()
            else:
                retired = self._skills.archive(target_id, now=now).to_dict()
            return retired, UndoAction(
                "retired", f"archived ({first.pass_name} created it); it stays as an archived row, not deleted"
            )
        if target_type != "memory":
            skill = self._skills.replace(self._record(Skill, before, first))
            return skill.to_dict(), _action_of(plan, current, before, done_by)
        entry = self._record(MemoryEntry, before, first)
        if self._memories.get(target_id) is None:  # purged by the cycle: insert it again, as it was
            keep = ""
            if self._retention is None:
                raise ValueError(
                    f"undoing the purge of {target_id} needs archive purge's retention, which these options do not "
                    "know: open the store with options loaded with the passes' sections (options_loader)"
                )
            if self._retention > timedelta(0):
                until = utc(now) + self._retention
                entry = MemoryEntry.from_dict(
                    {**entry.to_dict(), "metadata": {**entry.metadata, KEEP_ARCHIVED_UNTIL_KEY: iso(until)}}
                )
                keep = f"; kept archived until {until:%Y-%m-%d}, a full archive period from this undo"
            put = self._memories.put(entry).to_dict()
            archived = f" (since {entry.archived_at:%Y-%m-%d})" if entry.archived_at else ""
            return put, UndoAction("unpurged", f"back, archived{archived}, as before {done_by}{keep}")
        return self._memories.replace(entry).to_dict(), _action_of(plan, current, before, done_by)

    @staticmethod
    def _record(cls: type, record: dict[str, Any] | None, row: ChangeRecord) -> Any:
        try:
            return cls.from_dict(record)
        except (KeyError, ValueError, TypeError, AttributeError) as exc:
            raise _CannotRestore(
                f"the record kept by {row.pass_name} ({row.kind}) is incomplete: {type(exc).__name__}: {exc}"
            ) from exc


@dataclass(frozen=True)
class _Plan:
    """One target's pending rows of the cycle (in order), read as a whole: what it was before the cycle, whether it
    is already so, whether it is still as the cycle left it."""

    key: tuple[str, str]
    rows: list[ChangeRecord]

    @property
    def full(self) -> list[ChangeRecord]:
        """The rows that hold whole records (all but decay's)."""
        return [c for c in self.rows if c.kind not in SCORE_KINDS]

    def before(self, current: dict[str, Any] | None) -> dict[str, Any] | None:
        """The record as it was before the cycle (None: the cycle created it)."""
        first = self.rows[0]
        full = self.full
        if not full:
            if current is None:
                return None
            last = self.rows[-1].after or {}
            # updated_at goes back too, unless something wrote the entry after the decay
            return _overlay(current, first.before or {}, updated=current.get("updated_at") == last.get("updated_at"))
        base = full[0].before
        if base is not None and first.kind in SCORE_KINDS:
            base = _overlay(base, first.before or {}, updated=True)
        return base

    def merged_from(self) -> list[str]:
        """The sources of a memory the cycle created by a merge (its ``mergedFrom``); [] for any other target."""
        full = self.full
        if self.key[0] != "memory" or not full or full[0].before is not None or full[0].kind == "purged":
            return []
        raw = ((full[0].after or {}).get("metadata") or {}).get(MERGED_FROM_KEY) or ""
        try:
            value = json.loads(raw)
        except ValueError:
            value = raw.split(",")
        return [str(v).strip() for v in value if str(v).strip()] if isinstance(value, list) else []

    def restores_live(self) -> bool:
        """Does undoing the target leave it live (it was live before the cycle)?"""
        full = self.full
        if not full:
            return True
        before = full[0].before
        return before is not None and not before.get("archived_at")

    def is_before(self, current: dict[str, Any] | None) -> bool:
        if not self.full:
            return current is not None and _scores_match(current, self.rows[0].before or {})
        return _is_before(current, self.before(current))

    def as_left(self, current: dict[str, Any] | None) -> bool:
        """Is the target as the cycle left it (the fields a person edits; for decay, its importance)? A target decayed
        and then changed by the cycle that is found as it was just after the decay (its other changes put back by
        hand) counts too: what is left to undo is the decay."""
        last = self.rows[-1]
        full = self.full
        if full and self.rows[0].kind in SCORE_KINDS and current is not None and current == full[0].before:
            return True
        if last.kind in SCORE_KINDS:
            if current is None or current.get("importance") != (last.after or {}).get("importance"):
                return False
            return not full or _same_state(current, full[-1].after)
        return _same_state(current, last.after)


def _overlay(record: dict[str, Any], scores: dict[str, Any], *, updated: bool) -> dict[str, Any]:
    """``record`` with the fields of a decay row put in: importance, the metadata stamps (None: absent) and, when
    ``updated``, updated_at."""
    out = dict(record)
    if "importance" in scores:
        out["importance"] = scores["importance"]
    if updated and scores.get("updated_at"):
        out["updated_at"] = scores["updated_at"]
    meta = dict(out.get("metadata") or {})
    for k, v in (scores.get("metadata") or {}).items():
        if v is None:
            meta.pop(k, None)
        else:
            meta[k] = v
    out["metadata"] = meta
    return out


def _scores(record: dict[str, Any], keys: Iterable[str]) -> dict[str, Any]:
    """The fields a decay writes, out of a whole record: importance, updated_at and the metadata ``keys`` (None:
    absent) — the compact form of the rows of ``SCORE_KINDS``."""
    meta = record.get("metadata") or {}
    return {
        "importance": record.get("importance"),
        "updated_at": record.get("updated_at"),
        "metadata": {k: meta.get(k) for k in keys},
    }


def _scores_match(current: dict[str, Any], scores: dict[str, Any]) -> bool:
    meta = current.get("metadata") or {}
    return current.get("importance") == scores.get("importance") and all(
        meta.get(k) == v for k, v in (scores.get("metadata") or {}).items()
    )


def _action_of(plan: _Plan, current: dict[str, Any] | None, before: dict[str, Any], done_by: str) -> UndoAction:
    """What putting ``before`` back over ``current`` does, in the words of the change that is undone."""
    was_archived = (current or {}).get("archived_at") is not None
    will_be_archived = before.get("archived_at") is not None
    if will_be_archived and not was_archived:
        return UndoAction("archived again", f"as before {done_by}")
    if was_archived and not will_be_archived:
        archiving = next(
            (c for c in plan.full if (c.after or {}).get("archived_at") and not (c.before or {}).get("archived_at")),
            plan.full[0],
        )
        how = archiving.successor_how
        kind = "unmerged" if how.merged else "unsuperseded" if how is SuccessorHow.SUPERSEDED_BY else "put back live"
        return UndoAction(kind, f"live again, as before {archiving.pass_name} archived it ({archiving.reason})")
    also = " (its importance too)" if plan.rows[0].kind in SCORE_KINDS else ""
    return UndoAction("put back", f"as it was before {done_by}{also}")


#: The columns ``_row`` reads, in ``CHANGE_COLUMNS`` order.
_SELECTED = ", ".join(CHANGE_COLUMNS)
_SELECTED_C = ", ".join(f"c.{name}" for name in CHANGE_COLUMNS)


def _row(r: Sequence[Any]) -> ChangeRecord:
    """A row of ``SELECT _SELECTED FROM changes``."""
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
        Actor(r[12]),
        r[13],
        SuccessorHow(r[14]),
    )


def _label(key: tuple[str, str]) -> str:
    return f"{key[0]} {key[1]}"


def _load(text: str | None) -> dict[str, Any] | None:
    return None if text is None else json.loads(text)
