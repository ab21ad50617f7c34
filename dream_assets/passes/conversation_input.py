"""The conversation turns a conversation pass works on: the live log, plus the turns an earlier failed run left.

Preference inference and skill gap detection read the conversation log, and the log is cleared at the end of every
cycle whether their model calls succeeded or not (spec "Pass 5": "always cleared ... regardless of LLM success or
failure, to prevent unbounded growth"). The clear copies the turns into the log warehouse first. So that "retried next
cycle" is true, a pass whose call failed or was deferred records in the pass ledger the span of event times of the turns
it did not process (``PendingTurns``, one per pass: one pass may succeed while the other fails). The next run reads
that span back from the warehouse, adds the turns still in the log (a turn in both is taken once), and clears the span
only once a usable answer was applied, or once the pass decided without a call that there is nothing to ask.

Bounded: turns older than ``PENDING_MAX_AGE`` (7 days, the spec's feedback window) are given up with a warning — they
stay in the warehouse, for backfills — so a pass that fails every cycle cannot grow its input without end.

The span is a time range, so a turn that another run already processed and whose time falls inside it (an agent that
logged a turn late with an older time) can be shown once more; it is never lost.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime, timedelta

from dream_assets.model import iso
from dream_assets.passes.common import note_malformed
from dream_assets.passes.context import PassContext
from dream_assets.passes.report import PassReport
from dream_assets.store.ledger import PendingTurns
from dream_assets.store.log_records import CONVERSATION, ConversationTurn
from dream_assets.store.logs import read_archived

#: Unprocessed turns older than this are given up (spec "Pass 5": recent feedback is "the last 7 days").
PENDING_MAX_AGE = timedelta(days=7)


@dataclass
class ConversationInput:
    sessions: dict[str, list[ConversationTurn]] = field(default_factory=dict)  # first-seen (time) order
    retried: int = 0  # turns read back from the warehouse, left by an earlier failed run
    span: PendingTurns | None = None  # the event times of every turn in ``sessions``

    @property
    def turns(self) -> int:
        return sum(len(t) for t in self.sessions.values())


def gather(ctx: PassContext, pass_name: str, live: list[ConversationTurn], report: PassReport) -> ConversationInput:
    """The turns ``pass_name`` works on this run: ``live`` (read from the log) and its pending turns."""
    turns = list(live)
    retried = 0
    pending = ctx.ledger.pending(pass_name)
    for warning in (ctx.ledger.warning or "").split("; "):
        if pass_name in warning:  # e.g. its unprocessed turns could not be read from the ledger
            report.warn(warning)
    if pending is not None:
        oldest = ctx.now - PENDING_MAX_AGE
        if pending.since < oldest:
            report.warn(
                f"turns from {iso(pending.since)} to {iso(min(pending.until, oldest))} that an earlier run "
                f"of {pass_name} could not process are older than {PENDING_MAX_AGE.days} days and are given "
                "up (they stay in the log warehouse)"
            )
            report.count("turns_given_up_spans")
        if pending.until >= oldest:
            archived = read_archived(
                ctx.profile,
                CONVERSATION,
                max(pending.since, oldest),
                pending.until + timedelta(microseconds=1),
            )
            note_malformed(report, "archived conversation", archived)
            seen = {_identity(t) for t in live}
            older = [t for t in archived.events if _identity(t) not in seen]
            retried = len(older)
            turns = older + turns
            if retried:
                report.info(
                    f"{retried} turn(s) from {iso(pending.since)} to {iso(pending.until)} that an earlier run "
                    "could not process were read back from the log warehouse"
                )
    turns.sort(key=lambda t: t.timestamp)
    sessions: dict[str, list[ConversationTurn]] = {}
    for t in turns:
        sessions.setdefault(t.session_id, []).append(t)
    span = PendingTurns(turns[0].timestamp, turns[-1].timestamp) if turns else None
    report.counts["turns_retried"] = retried
    return ConversationInput(sessions, retried, span)


def settle(
    ctx: PassContext, pass_name: str, given: ConversationInput, report: PassReport, *, raised: bool = False
) -> None:
    """After the run: keep the span pending when the call failed or was deferred (or the pass raised), else clear it.
    Writing the ledger must not turn an outcome into another: a failure to write is a warning."""
    unprocessed = raised or report.status in ("failed", "deferred")
    span = given.span if unprocessed else None
    try:
        if span is not None:
            ctx.ledger.set_pending(pass_name, span)
            report.info(
                f"the {given.turns} turn(s) of this run ({iso(span.since)} to {iso(span.until)}) are retried "
                "next cycle from the log warehouse"
            )
        elif ctx.ledger.pending(pass_name) is not None:
            ctx.ledger.set_pending(pass_name, None)
    except OSError as exc:
        report.warn(f"could not record in the pass ledger which turns {pass_name} has processed ({exc})")


def _identity(turn: ConversationTurn) -> tuple[datetime, str, str, str]:
    return turn.timestamp, turn.session_id, turn.role, turn.content
