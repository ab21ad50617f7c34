"""Review before apply, as operations: the change sets waiting for review (``review_list``) and a decision on a set or
on single changes (``review_decide``), which takes the pass locks itself. The rules (what is held, how an apply is
re-checked, what a rejection stamps) are ``passes/review.py``'s."""

from __future__ import annotations

from datetime import datetime
from pathlib import Path
from typing import Any, Literal

from pydantic import Field

from dream_assets.calls import InvalidInput, Refused, Result, ReviewWaits, StoreUnavailable
from dream_assets.model import iso
from dream_assets.options import DreamOptions
from dream_assets.profile import AgentProfile
from dream_assets.service._common import begin, check_id
from dream_assets.store.connection import StoreError


class ReviewTarget(Result):
    type: Literal["memory", "skill"]
    id: str
    before: dict[str, Any] | None = Field(description="the record as the pass found it (None: it creates it)")
    after: dict[str, Any] | None = Field(description="the record as the change leaves it (None: it purges it)")


class ReviewChange(Result):
    id: str
    cycle_id: str
    pass_name: str
    label: str = Field(description="what kind of change: merge, exact fold, noise removal, importance decay ...")
    safe: bool = Field(description="a safe kind (review-risky applies those at once)")
    summary: str = Field(description="the pass's reason")
    created_at: str
    expires_at: str = Field(description="ISO-8601 UTC: not applied unless decided before then")
    targets: list[ReviewTarget]
    lines: list[str] = Field(description="a readable diff: the change, its reason, each target before and after")


class ReviewSet(Result):
    cycle_id: str
    passes: list[str]
    proposed_at: str
    expires_at: str = Field(description="when its first change expires")
    changes: list[ReviewChange]


class ReviewList(Result):
    agent: str
    pending: int = Field(description="changes waiting for review")
    sets: list[ReviewSet] = Field(description="oldest first; in a set, the changes in the order they apply")
    expired: int = Field(description="changes that expired unreviewed (ReviewExpiryDays), never applied")


class DecidedChange(Result):
    id: str
    cycle_id: str
    pass_name: str
    label: str
    summary: str


class ReviewDecision(Result):
    decision: Literal["apply", "reject"]
    done: list[DecidedChange] = Field(default_factory=list, description="applied or rejected")
    refused: list[str] = Field(default_factory=list, description="'<change id>: why' — edited meanwhile; the edit wins")
    failed: list[str] = Field(default_factory=list, description="'<change id>: why' — could not be written; pending")
    not_found: list[str] = Field(default_factory=list, description="'<id>: why' — unknown, or decided before")
    undo_cycle_id: str | None = Field(None, description="after an apply of one set: the cycle to undo it with")
    outcome: Literal["done", "partial", "nothing"] = Field(
        description="done: every change named was decided; partial: some were refused or not written; nothing: "
        "nothing was acted on"
    )


def _change(c: Any) -> ReviewChange:
    from dream_assets.passes import review

    return ReviewChange(
        id=c.change_id,
        cycle_id=c.cycle_id,
        pass_name=c.pass_name,
        label=c.label,
        safe=c.safe,
        summary=c.summary,
        created_at=iso(c.created_at) or "",
        expires_at=iso(c.expires_at) or "",
        targets=[ReviewTarget(type=t.type, id=t.id, before=t.before, after=t.after) for t in c.targets],
        lines=review.describe(c),
    )


def review_list(
    profile: AgentProfile | str | Path, *, options: DreamOptions | None = None, now: datetime | None = None
) -> ReviewList:
    """The pending change sets, oldest first, each change with its id, pass, kind, reason and a before/after diff.
    Changes past ``ReviewExpiryDays`` are closed as expired first (never applied) and counted."""
    from dream_assets.passes import review

    op = begin(profile, options, now)
    store = op.store()
    try:
        review.expire(store, op.now)
        pending = review.decisions(store)  # housekeeping waits with its set but is no decision: not listed
        expired = review.decisions(store, status=review.EXPIRED)
    except StoreError as exc:
        raise StoreUnavailable(str(exc)) from exc
    sets = []
    for cycle in dict.fromkeys(c.cycle_id for c in pending):
        mine = [c for c in pending if c.cycle_id == cycle]
        sets.append(
            ReviewSet(
                cycle_id=cycle,
                passes=list(dict.fromkeys(c.pass_name for c in mine)),
                proposed_at=iso(mine[0].created_at) or "",
                expires_at=iso(min(c.expires_at for c in mine)) or "",
                changes=[_change(c) for c in mine],
            )
        )
    return ReviewList(agent=op.profile.agent_id, pending=len(pending), sets=sets, expired=len(expired))


def review_waits(
    profile: AgentProfile | str | Path,
    *,
    options: DreamOptions | None = None,
    now: datetime | None = None,
    profile_arg: str | None = None,
) -> ReviewWaits:
    """How many changes wait for review, per pass and set, when the first expires, and how many expired unreviewed
    (closed as expired first); ``line`` says it in one sentence naming ``dream review --profile <profile_arg>``."""
    op = begin(profile, options, now)
    store = op.store()
    try:
        return waits_of(store, op.now, profile_arg or str(op.profile.root))
    except StoreError as exc:
        raise StoreUnavailable(str(exc)) from exc


def waits_of(store: Any, now: datetime, profile_arg: str) -> ReviewWaits:
    from dream_assets.passes import review

    waits = review.waiting(store, now)
    return ReviewWaits(
        count=waits.count,
        by_pass=dict(waits.by_pass),
        cycles=list(waits.cycles),
        next_expiry=iso(waits.next_expiry),
        expired=waits.expired,
        line=review.waiting_line(waits, profile_arg),
    )


def review_decide(
    profile: AgentProfile | str | Path,
    decision: Literal["apply", "reject"],
    *,
    cycle_id: str | None = None,
    change_ids: tuple[str, ...] | list[str] = (),
    reason: str = "",
    wait: float = 0.0,
    now: datetime | None = None,
    options: DreamOptions | None = None,
) -> ReviewDecision:
    """Apply or reject a whole pending set (``cycle_id``) or single changes (``change_ids``), with ``reason``. Each
    change is re-checked against the store as it is now (one edited meanwhile is refused: the edit wins) and is one
    transaction. Never beside a running pass: waits up to ``wait`` seconds, then raises ``Refused`` (``running``).
    An applied change is recorded under its pass's cycle, so ``undo`` of ``undo_cycle_id`` takes it back."""
    from dream_assets.passes import review
    from dream_assets.passes.registry import PassRunning, no_pass_running

    if decision not in ("apply", "reject"):
        raise InvalidInput(f"decision {decision!r}: use apply or reject")
    op = begin(profile, options, now)
    cycle_id = check_id(cycle_id, "cycle_id") if cycle_id is not None else None
    ids = [check_id(i, f"change_ids[{n}]") for n, i in enumerate(change_ids)]
    if cycle_id is None and not ids:
        raise InvalidInput("give cycle_id or change_ids (ids from review_list)")
    if not isinstance(reason, str):
        raise InvalidInput("reason is not a string")
    store = op.store()
    try:
        # Never beside a running pass: an apply between a pass's read and its write would leave half of each.
        with no_pass_running(op.profile, wait=wait):
            result = review.decide(
                store,
                decision,
                cycle_id=cycle_id,
                change_ids=ids,
                reason=reason,
                now=op.now,
                options=op.options,
            )
        every = {c.change_id: c for c in review.list_changes(store, status=None)}
    except PassRunning as exc:
        raise Refused(str(exc), running=True) from exc
    except StoreError as exc:
        raise StoreUnavailable(str(exc)) from exc
    done = [
        DecidedChange(
            id=i,
            cycle_id=every[i].cycle_id,
            pass_name=every[i].pass_name,
            label=every[i].label,
            summary=every[i].summary,
        )
        for i in result.done
        if not review.marks_only(every[i])  # housekeeping, decided with its set: not a change a person named
    ]
    cycles = sorted({d.cycle_id for d in done})
    return ReviewDecision(
        decision=decision,
        done=done,
        refused=list(result.refused),
        failed=list(result.failed),
        not_found=list(result.not_found),
        undo_cycle_id=cycles[0] if decision == "apply" and len(cycles) == 1 else None,
        outcome="partial" if result.refused or result.failed else "done" if result.done else "nothing",
    )
