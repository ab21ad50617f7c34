"""Review before apply: a pass whose ``ApplyMode`` is ``review`` (or ``review-risky``) decides as it always does, and
its changes wait in a pending change set until a person applies or rejects them (``dream review``, ``dream apply``,
``dream reject``, the ``apply_change_set`` job).

How a pass runs without moving the live store. Passes write in many short transactions, with model calls between
them (a store is never held across a call), so one transaction rolled back at the end cannot hold a pass's writes; and
a shadow layer under ``PassContext.record`` and every store write would have to copy each store method's semantics.
Instead the pass runs, with every host safeguard and the code it always runs, against a private copy of the store:
the live file is checkpointed and copied inside one session (so the copy is one consistent state), the pass gets a
``DreamStore`` on the copy, and the live store is not written at all. Each outermost transaction the pass commits on
the copy is one of its decisions (a merge with its archived sources, a fold, one removal, the review stamps), as the
pass itself made them all-or-nothing: a commit hook on the copy's connection cuts the change-log rows at each commit
and reads back every target as that commit left it. A write that records no change-log row (importance decay) is
found by comparing the copy before and after the pass, and held as one change of its own. The copy is deleted after
the run. The cost is one file copy per reviewed pass (the store is small beside its logs).

Each decision is one pending change: its targets' full records before and after, the change-log rows the pass
wrote, a label ("merge", "exact fold", "noise removal" ...) and whether the label is a safe kind. ``review-risky``
applies the safe kinds at once (exact folds, reinforcements, noise removals, retention purges, importance decay,
review stamps) and holds the rest (merges, stand-alone removals, supersessions, skill rewrites, preference saves and
every other new entry). The pass counts as run for its change gate: it decided on this input, and running it again on
the same input would only propose the same changes again; a newer pending set of the same pass replaces an older one
still waiting (it was decided on a newer store).

Applying re-checks each change against the live store as it is then: every target must still be as the pass found it
(content, category, tags, summary, see-also, archive state, reinforcement and last sighting); one edited meanwhile
refuses the whole change, which is closed as refused and reported — a concurrent edit wins, as in a merge. An applied
change writes its records and its change-log rows under the pass's cycle in one transaction, so ``dream undo
--cycle`` undoes it like any automatic change. Rejecting a merge stamps its sources as a cluster shown together and
left apart (consolidation's own stamps), so it is not proposed again before the usual cooldown. A pending change
expires ``ReviewExpiryDays`` after it was proposed; ``dream review``, the cycle report and ``dream status`` say so.
"""

from __future__ import annotations

import json
import logging
import shutil
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

from dream_assets.changes_model import ACTOR_PASS_NAMES, Actor, ChangeRow, SuccessorHow
from dream_assets.model import MemoryEntry, Skill, folder_place, iso, new_id, parse_ts, utc
from dream_assets.options import DreamOptions
from dream_assets.passes.context import PassContext
from dream_assets.passes.cycle_order import CYCLE_ORDER
from dream_assets.passes.left_apart import leave_apart
from dream_assets.passes.report import PassReport
from dream_assets.store import DreamStore
from dream_assets.store.changes import STAMP_KIND
from dream_assets.store.schema import CHANGE_COLUMNS, from_db, to_db, where_equal

log = logging.getLogger("dream_assets.passes")

MODES = ("auto", "review", "review-risky")
PENDING, APPLIED, REJECTED, REFUSED, EXPIRED, SUPERSEDED = (
    "pending",
    "applied",
    "rejected",
    "refused",
    "expired",
    "superseded",
)
#: The pass name the change log records review decisions under that are not the pass's own (a rejected merge's
#: left-apart stamps).
REVIEW_PASS = ACTOR_PASS_NAMES[Actor.REVIEW]

#: Test hook (None in production): called with the name of a step — "apply:written" inside a change's transaction
#: after its records and rows were written and before it is marked applied, "reject:stamped" likewise for a reject,
#: "apply:done"/"reject:done" after the transaction committed. Crash tests set it in a subprocess to ``os._exit``.
step_hook: Any = None

_DDL = """CREATE TABLE IF NOT EXISTS pending_changes (
    change_id VARCHAR PRIMARY KEY,
    cycle_id VARCHAR NOT NULL,
    pass_name VARCHAR NOT NULL,
    position INTEGER NOT NULL,
    label VARCHAR NOT NULL,
    safe BOOLEAN NOT NULL,
    summary VARCHAR NOT NULL,
    targets_json VARCHAR NOT NULL,      -- [{"type", "id", "before", "after"}]: full records
    rows_json VARCHAR NOT NULL,         -- the change-log rows the pass wrote for it
    created_at TIMESTAMP NOT NULL,
    expires_at TIMESTAMP NOT NULL,
    status VARCHAR NOT NULL,            -- pending | applied | rejected | refused | expired | superseded
    decided_at TIMESTAMP,
    decision_reason VARCHAR
)"""

#: What a person edits, and what the pass decided on: a target that differs in any of these since the pass saw it
#: was edited meanwhile. Importance, metadata and updated_at are housekeeping.
_COMPARED = ("content", "category", "tags", "summary", "see_also", "archived_at", "reinforcement_count", "last_seen_at")


# --------------------------------------------------------------------------------------------------- the option
def apply_mode(options: DreamOptions, pass_name: str) -> str:
    """The pass's ``apply_mode`` (alias ``<Pass>ApplyMode``), else ``ApplyMode``; ``auto`` for a pass that writes no
    store."""
    own = options.passes.get(pass_name)
    return own.apply_mode if own is not None and own.apply_mode is not None else "auto"


# --------------------------------------------------------------------------------------------------- records
@dataclass(frozen=True)
class Target:
    type: str  # memory | skill
    id: str
    before: dict[str, Any] | None
    after: dict[str, Any] | None


@dataclass(frozen=True)
class PendingChange:
    change_id: str
    cycle_id: str
    pass_name: str
    position: int
    label: str
    safe: bool
    summary: str
    targets: tuple[Target, ...]
    rows: tuple[dict[str, Any], ...]
    created_at: datetime
    expires_at: datetime
    status: str
    decided_at: datetime | None
    decision_reason: str | None


@dataclass
class Decision:
    """What ``decide`` did: change ids applied or rejected, refusals and ids it could not act on, with why."""

    decision: str
    done: list[str] = field(default_factory=list)
    refused: list[str] = field(default_factory=list)  # "<change id>: why" — a concurrent edit won
    not_found: list[str] = field(default_factory=list)  # "<id>: why" — unknown, or decided before
    failed: list[str] = field(default_factory=list)  # "<change id>: why" — could not be written; still pending

    @property
    def ok(self) -> bool:
        return not self.refused and not self.not_found and not self.failed


def ensure_table(store: DreamStore) -> None:
    with store.connection.session() as conn:
        conn.execute(_DDL)


def _table_exists(conn: Any) -> bool:
    return bool(
        conn.execute("SELECT count(*) FROM information_schema.tables WHERE table_name = 'pending_changes'").fetchall()[
            0
        ][0]
    )


def _from_row(r: Sequence[Any]) -> PendingChange:
    targets = tuple(Target(t["type"], t["id"], t.get("before"), t.get("after")) for t in json.loads(r[7]))
    return PendingChange(
        r[0],
        r[1],
        r[2],
        int(r[3]),
        r[4],
        bool(r[5]),
        r[6],
        targets,
        tuple(json.loads(r[8])),
        from_db(r[9]),  # type: ignore[arg-type]
        from_db(r[10]),  # type: ignore[arg-type]
        r[11],
        from_db(r[12]),
        r[13],
    )


def _pass_rank(pass_name: str) -> int:
    """Where the pass runs in a cycle (the spec's order, ``CYCLE_ORDER``); a name no pass has goes last."""
    return CYCLE_ORDER.index(pass_name) if pass_name in CYCLE_ORDER else len(CYCLE_ORDER)


def apply_order(change: PendingChange) -> tuple[datetime, str, int, str, int, str]:
    """The order changes are listed and applied in: oldest set first; in a set, the passes in the spec's order
    (every pass of a cycle proposes at the cycle's time, so the time alone interleaves them: a fold applied before
    the decay proposed on the same entries would refuse the decay), each pass's changes in the order it made them.
    A total order on stored fields, so a retry after a kill applies what is left in the same order."""
    return (
        change.created_at,
        change.cycle_id,
        _pass_rank(change.pass_name),
        change.pass_name,
        change.position,
        change.change_id,
    )


def list_changes(
    store: DreamStore, *, status: str | None = PENDING, cycle_id: str | None = None
) -> list[PendingChange]:
    """The pending changes (or those of ``status``; None: all) in ``apply_order``: oldest set first, in a set the
    passes in the spec's order, each pass's changes in the order it made them."""
    where, params = where_equal(status=status, cycle_id=cycle_id)
    with store.connection.session() as conn:
        if not _table_exists(conn):
            return []
        rows = conn.execute(f"SELECT * FROM pending_changes WHERE {where}", params).fetchall()
    return sorted((_from_row(r) for r in rows), key=apply_order)


def expire(store: DreamStore, now: datetime) -> list[PendingChange]:
    """Close the pending changes whose time is up (status ``expired``); returns them."""
    with store.connection.session() as conn:
        if not _table_exists(conn):
            return []
    due = [c for c in list_changes(store) if c.expires_at <= utc(now)]
    if due:
        with store.transaction() as conn:
            conn.execute(
                "UPDATE pending_changes SET status = ?, decided_at = ?, decision_reason = ? "
                "WHERE status = ? AND change_id IN (SELECT unnest(?))",
                [EXPIRED, to_db(utc(now)), "not decided in time", PENDING, [c.change_id for c in due]],
            )
    return due


@dataclass(frozen=True)
class Waiting:
    """What waits for review, for the cycle report, ``dream status`` and the Dagster check."""

    count: int
    by_pass: dict[str, int]
    cycles: tuple[str, ...]
    next_expiry: datetime | None
    expired: int  # changes that expired unreviewed (all time)


def decisions(store: DreamStore, *, status: str | None = PENDING, cycle_id: str | None = None) -> list[PendingChange]:
    """``list_changes`` without housekeeping (``marks_only``): what a person decides on. Housekeeping waits with its
    set and is applied with it, but is never listed, counted or reported as a change to decide."""
    return [c for c in list_changes(store, status=status, cycle_id=cycle_id) if not marks_only(c)]


def waiting(store: DreamStore, now: datetime) -> Waiting:
    expire(store, now)
    pending = decisions(store)
    by_pass: dict[str, int] = {}
    for c in pending:
        by_pass[c.pass_name] = by_pass.get(c.pass_name, 0) + 1
    return Waiting(
        len(pending),
        by_pass,
        tuple(dict.fromkeys(c.cycle_id for c in pending)),
        min((c.expires_at for c in pending), default=None),
        len(decisions(store, status=EXPIRED)),
    )


def waiting_line(w: Waiting, profile_arg: str) -> str:
    """One sentence on what waits (empty when nothing does)."""
    if not w.count:
        return ""
    passes = ", ".join(f"{n} from {p}" for p, n in w.by_pass.items())
    return (
        f"{w.count} change(s) wait for review ({passes}); the first expires {iso(w.next_expiry)} unless applied: "
        f"`dream review --profile {profile_arg}`"
    )


# --------------------------------------------------------------------------------------------------- a review run
def _dump_all(store: DreamStore) -> dict[tuple[str, str], dict[str, Any]]:
    out: dict[tuple[str, str], dict[str, Any]] = {("memory", e.id): e.to_dict() for e in store.memories.list_all()}
    out.update({("skill", s.name): s.to_dict() for s in store.skills.list(include_archived=True)})
    return out


def _current(store: DreamStore, target_type: str, target_id: str) -> dict[str, Any] | None:
    if target_type == "memory":
        e = store.memories.get(target_id)
        return None if e is None else e.to_dict()
    s = store.skills.get(target_id)
    return None if s is None else s.to_dict()


def _remove_copy(shadow_path: Path) -> None:
    """The private copy and what its connection left beside it: its WAL and lock files, and the folder of waiting
    markers (store/connection.py), made when the copy is opened."""
    for path in shadow_path.parent.glob(shadow_path.name + "*"):
        if path.is_dir() and not path.is_symlink():
            shutil.rmtree(path, ignore_errors=True)
        else:
            path.unlink(missing_ok=True)


def _copy_store(live: DreamStore, shadow_path: Path) -> None:
    """A consistent copy of the live file: checkpointed and copied inside one session (no writer in between)."""
    shadow_path.parent.mkdir(parents=True, exist_ok=True)
    _remove_copy(shadow_path)
    with live.connection.session() as conn:
        conn.execute("CHECKPOINT")
        shutil.copyfile(live.connection.db_path, shadow_path)
        wal = Path(str(live.connection.db_path) + ".wal")
        if wal.exists():
            shutil.copyfile(wal, Path(str(shadow_path) + ".wal"))


class _Capture:
    """Cuts the copy's change-log rows at each outermost commit and reads back what that commit left."""

    def __init__(self, store: DreamStore, cycle_id: str) -> None:
        self.store = store
        self.cycle_id = cycle_id
        self.groups: list[tuple[list[dict[str, Any]], dict[tuple[str, str], dict[str, Any] | None]]] = []
        with store.connection.session() as conn:
            self.last = int(conn.execute("SELECT coalesce(max(ordinal), 0) FROM changes").fetchall()[0][0])

    def __call__(self) -> None:
        with self.store.connection.session() as conn:
            rows = conn.execute(
                f"SELECT {', '.join(CHANGE_COLUMNS)} FROM changes WHERE ordinal > ? ORDER BY ordinal", [self.last]
            ).fetchall()
        if not rows:
            return
        self.last = int(rows[-1][CHANGE_COLUMNS.index("ordinal")])
        found = [_change_row(r) for r in rows]
        after = {
            (r["target_type"], r["target_id"]): _current(self.store, r["target_type"], r["target_id"])
            for r in found
            if r["target_type"] in ("memory", "skill")
        }
        self.groups.append((found, after))


def _change_row(r: Sequence[Any]) -> dict[str, Any]:
    """A row of ``changes`` (its ``CHANGE_COLUMNS``) as the JSON of its ``ChangeRow``, as a pending set keeps it."""
    col = dict(zip(CHANGE_COLUMNS, r, strict=True))
    return ChangeRow(
        cycle_id=col["cycle_id"],
        actor=Actor(col["actor"]),
        pass_name=col["pass_name"],
        kind=col["kind"],
        target_type=col["target_type"],
        target_id=col["target_id"],
        before=None if col["before_json"] is None else json.loads(col["before_json"]),
        after=None if col["after_json"] is None else json.loads(col["after_json"]),
        reason=col["reason"],
        successor_id=col["successor_id"],
        successor_how=SuccessorHow(col["successor_how"]),
    ).to_json()


def classify(pass_name: str, rows: Sequence[Mapping[str, Any]]) -> tuple[str, bool]:
    """The kind of one decision as a person names it, and whether it is a safe kind (``review-risky`` applies those
    at once)."""
    kinds = {r["kind"] for r in rows}
    reasons = [str(r["reason"]) for r in rows]
    hows = {r.get("successor_how") or SuccessorHow.NONE for r in rows}  # where the archived entries went
    if not rows:
        return ("importance decay", True) if pass_name == "importance_decay" else ("unrecorded change", False)
    if kinds == {STAMP_KIND}:
        return "review stamps", True
    if pass_name == "importance_decay":
        return "importance decay", True
    if pass_name == "archive_purge":
        return "retention purge", True
    if pass_name == "memory_consolidation":
        if SuccessorHow.DUPLICATE_OF in hows:
            return "exact fold", True
        if hows & {SuccessorHow.MERGED_INTO, SuccessorHow.FOLDED_INTO}:
            return "merge", False
        if any("(save-time dedup)" in r for r in reasons):
            return ("reinforcement", True) if any(" reinforced existing " in r for r in reasons) else ("extend", False)
        if kinds == {"archived"}:
            return (
                ("noise removal", True)
                if all(r.startswith("ephemeral: noise") for r in reasons)
                else (
                    "stand-alone removal",
                    False,
                )
            )
        if "created" in kinds:
            return "new entry", False
        return "rewrite", False
    if pass_name == "contradiction_sweep":
        return "supersession", False
    if pass_name == "preference_inference":
        return "preference save", False
    if pass_name.startswith("skill") or pass_name == "wisp_failure_analysis":
        return ("new skill" if kinds == {"created"} else "skill rewrite"), False
    return ("new entry" if "created" in kinds else "update"), False


def _summary(label: str, targets: Sequence[Target], rows: Sequence[Mapping[str, Any]]) -> str:
    reasons = list(dict.fromkeys(str(r["reason"]) for r in rows if r["kind"] != STAMP_KIND))
    if label == "review stamps":
        return f"review stamps on {len(targets)} entr{'y' if len(targets) == 1 else 'ies'} (shown, left unchanged)"
    if label == "importance decay":
        return f"importance lowered on {len(targets)} entr{'y' if len(targets) == 1 else 'ies'}"
    return "; ".join(reasons[:3]) + (" …" if len(reasons) > 3 else "")


def run_in_review(pass_name: str, ctx: PassContext, mode: str, run: Callable[[PassContext], PassReport]) -> PassReport:
    """Run the pass (``run``: its body, gated and stamped, as the runner gives it) on a private copy of the store and
    hold its changes as a pending set (``review-risky``: apply the safe kinds at once). The live store takes only the
    pending set."""
    live = ctx.store
    shadow_path = ctx.profile.root / ".review" / f"{pass_name}-{ctx.cycle_id}.duckdb"
    _copy_store(live, shadow_path)
    shadow = DreamStore(ctx.profile, ctx.options, path=shadow_path)
    try:
        initial = _dump_all(shadow)
        capture = _Capture(shadow, ctx.cycle_id)
        shadow.connection.add_commit_hook(capture)
        report = run(replace(ctx, _store=shadow))
        capture()  # rows written outside a transaction, after the last commit
        final = _dump_all(shadow)
    finally:
        shadow.close()
        _remove_copy(shadow_path)
        try:
            shadow_path.parent.rmdir()
        except OSError:
            pass  # another pass's copy is still there
    changes = _pending_from(pass_name, ctx, capture.groups, initial, final)
    if not changes:
        report.extra["review"] = {"mode": mode, "pending": 0, "applied_at_once": 0}
        return report
    applied: list[str] = []
    # Housekeeping (marks-only changes: the sweep's "seen unchanged" hashes, review stamps) is held with its set and
    # applied with it, but it is no decision for a person: it is not counted or listed as waiting for review.
    kept = _held_in_risky(changes) if mode == "review-risky" else changes
    held = [c for c in kept if not marks_only(c)]
    _store_pending(live, pass_name, ctx.cycle_id, changes, ctx.now)
    if mode == "review-risky":
        safe = [c.change_id for c in changes if c not in kept]
        if safe:
            result = decide(
                live,
                "apply",
                change_ids=safe,
                reason="review-risky: a safe kind, applied at once",
                now=ctx.now,
                options=ctx.options,
            )
            applied = result.done
            for line in result.refused + result.failed:
                report.warn(f"safe change not applied: {line}")
    report.counts["pending_review"] = len(held)
    report.counts["applied_at_once"] = len(applied)
    report.extra["review"] = {"mode": mode, "pending": len(held), "applied_at_once": len(applied)}
    if held:
        labels: dict[str, int] = {}
        for c in held:
            labels[c.label] = labels.get(c.label, 0) + 1
        what = ", ".join(f"{n} {label}" for label, n in labels.items())
        report.info(
            f"ApplyMode {mode}: {len(held)} change(s) held for review ({what}); the live store did not take them — "
            f"`dream review --profile {ctx.profile.root}`"
        )
    report.summary = (
        f"{report.summary} — held for review: {len(held)} change(s)"
        + (f", {len(applied)} safe change(s) applied" if applied else "")
        + f" (ApplyMode {mode})"
    )
    return report


def _held_in_risky(changes: Sequence[PendingChange]) -> list[PendingChange]:
    """What ``review-risky`` holds: the changes of a held kind, and a safe one that touches what a held change
    before it touched (it was decided on that change's result)."""
    held: list[PendingChange] = []
    touched: set[tuple[str, str]] = set()
    for c in changes:
        keys = {(t.type, t.id) for t in c.targets}
        if not c.safe or keys & touched:
            held.append(c)
            touched |= keys
    return held


def _pending_from(
    pass_name: str,
    ctx: PassContext,
    groups: Sequence[tuple[list[dict[str, Any]], dict[tuple[str, str], dict[str, Any] | None]]],
    initial: Mapping[tuple[str, str], dict[str, Any]],
    final: Mapping[tuple[str, str], dict[str, Any]],
) -> list[PendingChange]:
    expires = ctx.now + timedelta(days=ctx.options.ReviewExpiryDays)
    out: list[PendingChange] = []
    state: dict[tuple[str, str], dict[str, Any] | None] = dict(initial)

    def add(rows: list[dict[str, Any]], targets: list[Target]) -> None:
        label, safe = classify(pass_name, rows)
        if label == "unrecorded change" and _marks_only_targets(targets):
            label, safe = "review stamps", True  # the sweep's "seen unchanged" hashes: housekeeping, no row
        out.append(
            PendingChange(
                new_id(),
                ctx.cycle_id,
                pass_name,
                len(out),
                label,
                safe,
                _summary(label, targets, rows),
                tuple(targets),
                tuple(rows),
                ctx.now,
                expires,
                PENDING,
                None,
                None,
            )
        )

    for rows, after in groups:
        mine = [r for r in rows if r["cycle_id"] == ctx.cycle_id]
        if not mine:
            continue
        targets = []
        for key, value in after.items():
            targets.append(Target(key[0], key[1], state.get(key), value))
            state[key] = value
        add(mine, targets)
    # Writes with no change-log row (importance decay): one change, from the copy as the recorded changes left it
    # and as the pass left it.
    rest = [
        Target(k[0], k[1], state.get(k), final.get(k))
        for k in sorted(set(state) | set(final))
        if state.get(k) != final.get(k)
    ]
    if rest:
        add([], rest)
    return out


def _store_pending(store: DreamStore, pass_name: str, cycle_id: str, changes: Sequence[PendingChange], now) -> None:
    """Write the set, and close an older set of the same pass still waiting (the newer one was decided on a newer
    store): one transaction."""
    ensure_table(store)
    with store.transaction() as conn:
        conn.execute(
            "UPDATE pending_changes SET status = ?, decided_at = ?, decision_reason = ? "
            "WHERE status = ? AND pass_name = ? AND cycle_id <> ?",
            [SUPERSEDED, to_db(utc(now)), f"replaced by the set of cycle {cycle_id}", PENDING, pass_name, cycle_id],
        )
        for c in changes:
            conn.execute(
                "INSERT INTO pending_changes VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, NULL, NULL)",
                [
                    c.change_id,
                    c.cycle_id,
                    c.pass_name,
                    c.position,
                    c.label,
                    c.safe,
                    c.summary,
                    json.dumps(
                        [{"type": t.type, "id": t.id, "before": t.before, "after": t.after} for t in c.targets],
                        sort_keys=True,
                    ),
                    json.dumps(list(c.rows), sort_keys=True),
                    to_db(utc(c.created_at)),
                    to_db(utc(c.expires_at)),
                    PENDING,
                ],
            )


# --------------------------------------------------------------------------------------------------- decisions
class _Refused(Exception):
    """A target was edited since the pass proposed the change: the edit wins."""


class _NotPending(Exception):
    """The change was decided meanwhile (applied twice, or by another process)."""


def _edited(current: Mapping[str, Any] | None, before: Mapping[str, Any] | None) -> bool:
    if current is None or before is None:
        return (current is None) != (before is None)
    return any(current.get(k) != before.get(k) for k in _COMPARED)


def rebase(
    before: Mapping[str, Any] | None, after: Mapping[str, Any] | None, current: Mapping[str, Any] | None
) -> dict[str, Any] | None:
    """The record to write for a change proposed on ``before`` when the target is ``current`` now: what the change
    changed comes from ``after``, everything else (importance decayed meanwhile, a metadata stamp written since) from
    ``current`` — a three-way merge, per field and per metadata key. With ``current == before`` it is ``after``."""
    if after is None or before is None or current is None:
        return None if after is None else dict(after)
    out = {k: (current[k] if after.get(k) == before.get(k) and k in current else v) for k, v in after.items()}
    if "metadata" in after:
        was, now, meta = before.get("metadata") or {}, after.get("metadata") or {}, dict(current.get("metadata") or {})
        for key in set(was) | set(now):
            if now.get(key) != was.get(key):
                if key in now:
                    meta[key] = now[key]
                else:
                    meta.pop(key, None)
        out["metadata"] = meta
    return out


def _write(store: DreamStore, target: Target, current: Mapping[str, Any] | None, now: datetime) -> None:
    record = rebase(target.before, target.after, current)
    if target.type == "memory":
        if record is None:
            store.memories.purge([target.id], now=now)
        elif current is None:
            store.memories.put(MemoryEntry.from_dict(record))
        else:
            store.memories.replace(MemoryEntry.from_dict(record))
    elif record is not None:
        store.skills.replace(Skill.from_dict(record))


def decide(
    store: DreamStore,
    decision: str,
    *,
    cycle_id: str | None = None,
    change_ids: Iterable[str] = (),
    reason: str = "",
    now: datetime,
    options: DreamOptions,
) -> Decision:
    """Apply or reject a whole set (``cycle_id``) or single changes (``change_ids``). Each change is one
    transaction: its records written (apply) or its rejection stamps (reject) and its new status together."""
    if decision not in ("apply", "reject"):
        raise ValueError(f"decision {decision!r}: use apply or reject")
    result = Decision(decision)
    expire(store, now)
    every = {c.change_id: c for c in list_changes(store, status=None)}
    wanted: list[PendingChange] = []
    if cycle_id is not None:
        in_cycle = [c for c in every.values() if c.cycle_id == cycle_id]
        if not in_cycle:
            result.not_found.append(f"{cycle_id}: no change set of that cycle")
        wanted += [c for c in in_cycle if c.status == PENDING]
        if in_cycle and not wanted:
            result.not_found.append(f"{cycle_id}: nothing in that set waits any more (all decided or expired)")
    for i in dict.fromkeys(change_ids):
        c = every.get(i)
        if c is None:
            result.not_found.append(f"{i}: no such pending change")
        elif c.status != PENDING:
            why = f" ({c.decision_reason})" if c.decision_reason else ""
            result.not_found.append(f"{i}: already {c.status}{why}")
        elif c not in wanted:
            wanted.append(c)
    wanted.sort(key=apply_order)
    for c in wanted:
        try:
            if decision == "apply":
                _apply_one(store, c, reason, now)
            else:
                _reject_one(store, c, reason, now, options)
        except _NotPending as exc:
            result.not_found.append(f"{c.change_id}: {exc}")
            continue
        except _Refused as exc:
            _close(store, c.change_id, REFUSED, f"{exc}", now)
            result.refused.append(f"{c.change_id}: {exc}")
            continue
        except (ValueError, KeyError, TypeError) as exc:
            result.failed.append(f"{c.change_id}: {type(exc).__name__}: {exc}")
            continue
        result.done.append(c.change_id)
        if step_hook is not None:
            step_hook(f"{decision}:done")
    return result


def _close(store: DreamStore, change_id: str, status: str, why: str, now: datetime, conn: Any = None) -> None:
    sql = (
        "UPDATE pending_changes SET status = ?, decided_at = ?, decision_reason = ? WHERE change_id = ? AND status = ?"
    )
    params = [status, to_db(utc(now)), why, change_id, PENDING]
    if conn is not None:
        conn.execute(sql, params)
        return
    with store.transaction() as c:
        c.execute(sql, params)


def _still_pending(conn: Any, change_id: str) -> None:
    row = conn.execute("SELECT status FROM pending_changes WHERE change_id = ?", [change_id]).fetchall()
    if not row or row[0][0] != PENDING:
        raise _NotPending(f"already {row[0][0] if row else 'gone'}")


def marks_only(c: PendingChange) -> bool:
    """Whether the change only sets metadata marks (the contradiction sweep's "seen unchanged" hashes, review
    stamps): housekeeping that never touches a text, category, importance or archive state."""
    return _marks_only_targets(c.targets)


def _marks_only_targets(targets: Sequence[Target]) -> bool:
    return bool(targets) and all(
        t.before is not None
        and t.after is not None
        and {k for k in {*t.before, *t.after} if t.before.get(k) != t.after.get(k)} <= {"metadata"}
        for t in targets
    )


def _apply_one(store: DreamStore, c: PendingChange, reason: str, now: datetime) -> None:
    # Marks are written onto each target as it is now (rebased, per metadata key), never refused for an edit: they
    # record what the pass saw by a hash of it, so a mark on an entry changed since (by a person, or merged by an
    # earlier change of the same set) simply no longer matches. A target gone since gets none.
    housekeeping = marks_only(c)
    with store.transaction() as conn:
        _still_pending(conn, c.change_id)
        found = {}
        for t in c.targets:
            found[t.id] = current = _current(store, t.type, t.id)
            if _edited(current, t.before) and not housekeeping:
                what = "no longer exists" if current is None else "was edited since the pass proposed this change"
                raise _Refused(f"{t.type} {t.id} {what}; the edit wins, this {c.label} is not applied")
        for t in c.targets:
            if housekeeping and found[t.id] is None:
                continue
            _write(store, t, found[t.id], now)
        store.changes.record_many([ChangeRow.from_json(r) for r in c.rows], now=c.created_at)
        if step_hook is not None:
            step_hook("apply:written")
        _close(store, c.change_id, APPLIED, reason or "applied", now, conn)


def _reject_one(store: DreamStore, c: PendingChange, reason: str, now: datetime, options: DreamOptions) -> None:
    with store.transaction() as conn:
        _still_pending(conn, c.change_id)
        if c.label == "merge":
            _stamp_left_apart(store, c, reason, now)
        if step_hook is not None:
            step_hook("reject:stamped")
        _close(store, c.change_id, REJECTED, reason or "rejected", now, conn)


def merge_sources(c: PendingChange) -> list[str]:
    """The memories a pending merge would retire: live before, archived after."""
    return [
        t.id
        for t in c.targets
        if t.type == "memory"
        and t.before is not None
        and t.before.get("archived_at") is None
        and t.after is not None
        and t.after.get("archived_at") is not None
    ]


def _stamp_left_apart(store: DreamStore, c: PendingChange, reason: str, now: datetime) -> None:
    """A rejected merge is remembered like a cluster the model left apart: its live sources carry the cluster's set
    id, when it was left apart and how often, so it is not offered again before the cooldown."""
    leave_apart(
        store,
        merge_sources(c),
        cycle_id=c.cycle_id,
        actor=Actor.REVIEW,
        reason=f"merge rejected in review ({reason or 'no reason given'}): left apart",
        now=now,
    )


# --------------------------------------------------------------------------------------------------- showing
def _text(record: Mapping[str, Any] | None) -> str:
    if record is None:
        return "(none)"
    if "name" in record:
        return f"skill {record['name']}: {record.get('summary', '')}\n{record.get('content', '')}"
    state = " (archived)" if record.get("archived_at") else ""
    return f"[{record.get('category')}] {record.get('content')}{state}"


def describe(c: PendingChange) -> list[str]:
    """A readable diff of one pending change: its id, pass, kind, reason, then each target before and after."""
    lines = [
        f"change {c.change_id}  {c.pass_name}  {c.label}{'' if c.safe else ' (held)'}  expires {iso(c.expires_at)}",
        f"  reason: {c.summary}",
    ]
    if c.label in ("review stamps", "importance decay"):
        lines.append(f"  {len(c.targets)} target(s), text unchanged")
        return lines
    for t in c.targets:
        before, after = _text(t.before), _text(t.after)
        place = folder_place(t.before) or folder_place(t.after)
        name = f"{t.type} {t.id}" + (f" ({place})" if place else "")  # a linked folder's note: its file and heading
        if before == after:
            lines.append(f"  {name}: text unchanged")
            continue
        lines.append(f"  {name}:")
        for mark, text in (("-", before), ("+", after)):
            first, *rest = text.split("\n")
            lines.append(f"    {mark} {first}")
            lines.extend(f"      {line}" for line in rest)  # a multi-line text stays indented under its marker
    return lines


def parse_when(text: str | None, default: datetime) -> datetime:
    return parse_ts(text) if text else default
