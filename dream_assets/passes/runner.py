"""The runner: one protocol, applied the same way to every pass spec it is given (it imports no pass module; the
cycle, the Dagster assets and the tools hand it specs from the registry).

In order: the pass's own lock (a schedule and a change-gate sensor can both launch it: a second run skips rather than
run twice at once) → enabled → required input present → minimum-interval floor (a forced run passes it) → change gate
(when the body says what it is about to send, ``AboutToCall``) → body → ledger stamp after a usable answer → review
mode (``ApplyMode``: the gate, the body and the stamp run on a copy of the store whose changes are held, review.py) →
the recorded outcome.

A body returns what it did and never reads the gate's verdict or stamps: the runner stamps the fingerprint it gated
on once the body completed, or the body's own completion stamp (``PassReport.stamp``), and nothing for a failed or
deferred run, which is retried next cycle. Only this pass's own lock means "another run in progress": any other
failure — the store busy past its wait limit, a corrupt store, a lock the pass itself takes timing out, any exception —
is reported as failed, never as done or skipped (spec: retried next cycle; a store failure's reason names the agent
and the file), and the rest of the cycle still runs.
"""

from __future__ import annotations

import logging
from collections.abc import Generator
from contextlib import ExitStack
from functools import partial

from dream_assets.model import iso
from dream_assets.passes.context import PassContext
from dream_assets.passes.deferral import note_deferral
from dream_assets.passes.gate import completion_stamp, floor, let_through, stamp
from dream_assets.passes.outcome import LEVEL_COUNTS, load_outcome, record_outcome
from dream_assets.passes.report import AboutToCall, PassReport
from dream_assets.passes.review import apply_mode, run_in_review
from dream_assets.passes.spec import PassSpec
from dream_assets.store.connection import StoreCorrupt, StoreError
from dream_assets.store.locks import LockTimeout, path_lock

log = logging.getLogger("dream_assets.passes")


def run_pass(spec: PassSpec, ctx: PassContext) -> PassReport:
    """Run ``spec`` for the agent of ``ctx`` under the whole protocol and record its outcome. Never raises: a failed
    pass is a report with status "failed"."""
    agent = ctx.profile.agent_id
    ctx = ctx.for_pass(spec.name, spec.options)
    with ExitStack() as held:
        try:
            try:
                held.enter_context(path_lock(ctx.profile.pass_lock_path(spec.name), timeout=0))
            except LockTimeout:  # not recorded: the run in progress records its own outcome
                return PassReport(spec.name).skip("another run of this pass is in progress for this agent")
            report = opening(spec, ctx)
            if report is None:
                mode = apply_mode(ctx.options, spec.name)
                gated = partial(gated_body, spec)
                report = gated(ctx) if mode == "auto" else run_in_review(spec.name, ctx, mode, gated)
        except StoreCorrupt as exc:
            log.error("pass %s failed for agent %s: %s", spec.name, agent, exc)
            report = PassReport(spec.name).fail(f"the store of agent {agent!r} is unusable: {exc}")
        except StoreError as exc:
            log.error("pass %s failed for agent %s: %s", spec.name, agent, exc)
            report = PassReport(spec.name).fail(
                f"the store of agent {agent!r} was not available: {exc}; retried next cycle"
            )
        # a failed pass is reported and retried next cycle; the cycle goes on
        except Exception as exc:  # noqa: BLE001
            log.exception("pass %s failed for agent %s", spec.name, agent)
            report = PassReport(spec.name).fail(f"{type(exc).__name__}: {exc}")
        _declared_counts(report, spec)
        return record_pass_outcome(ctx, report)  # the last status, for `dream status` and the cycle report


def attempt(spec: PassSpec, ctx: PassContext) -> PassReport:
    """The protocol without the lock, the review mode and the record: the opening, then the gated body and its
    stamp. Exceptions propagate (``run_pass`` maps them to a failed report)."""
    return opening(spec, ctx) or gated_body(spec, ctx)


def opening(spec: PassSpec, ctx: PassContext) -> PassReport | None:
    """The skipped report when the pass is disabled, when a required input is absent, or sooner than the minimum
    interval after its last completed run (a forced run ignores the interval); None when the pass goes on."""
    if spec.disabled(ctx.options):
        return PassReport(spec.name).skip(f"disabled ({spec.enabled_by} = false){spec.disabled_note}")
    if spec.missing_input is not None:
        missing = spec.missing_input(ctx)
        if missing is not None:
            return PassReport(spec.name).skip(missing)
    if spec.min_interval is not None and not ctx.force:
        record = ctx.ledger.get(spec.name)
        allowed = floor(spec, record, ctx.options, ctx.now)
        if allowed is not None:
            assert record is not None
            report = PassReport(spec.name)
            if ctx.ledger.warning:
                report.warn(ctx.ledger.warning)
            report.counts["floored"] = 1
            return report.skip(
                f"minimum interval: last completed {iso(record.last_run_at)}, next allowed at {iso(allowed)} "
                f"({spec.min_interval} {spec.interval(ctx.options)})"
            )
    return None


def gated_body(spec: PassSpec, ctx: PassContext) -> PassReport:
    """The body, with the change gate answered where it says what it is about to send, then the ledger stamp (on the
    store the body ran on: in review mode the copy's, which is what the pass decided on)."""
    result = spec.body(ctx)
    gated: str | None = None
    if isinstance(result, Generator):
        result, gated = _drive(spec, ctx, result)
    value = completion_stamp(result, gated)
    if value is not None:
        stamp(ctx, spec.name, value)
    return result


def _drive(
    spec: PassSpec, ctx: PassContext, body: Generator[AboutToCall, bool, PassReport]
) -> tuple[PassReport, str | None]:
    """Run a gated body to its report, answering each ``AboutToCall`` with the change gate's decision; also returns
    the fingerprint it was gated on."""
    gated: str | None = None
    try:
        asked = next(body)
        while True:
            if not isinstance(asked, AboutToCall):
                raise TypeError(f"pass {spec.name} yielded {type(asked).__name__}, not AboutToCall")
            gated = asked.fingerprint
            asked = body.send(let_through(ctx, spec.name, asked.fingerprint, asked.report))
    except StopIteration as done:
        report = done.value
    if not isinstance(report, PassReport):
        raise TypeError(f"pass {spec.name} returned {type(report).__name__}, not a PassReport")
    return report, gated


def record_pass_outcome(ctx: PassContext, report: PassReport) -> PassReport:
    """Record the pass's last outcome in the profile; a skipped report gets its last completed counts (the live
    memory and skill counts measured now). A report deferred by the agent's busy model gets its retry time
    (passes/deferral.py): the pass is retried with back-off, not at the next cycle. One deferred by a token budget
    does not: it runs with the next cycle (or UTC day), and the retry sensor never requests it."""
    switched = report.extra.get("model_switch")
    if switched and report.status not in ("skipped",) and "model switch" not in report.summary:
        report.summary = f"{report.summary} (model switch: {switched})"
    if report.status == "deferred" and "budget_deferral" not in report.extra:
        # busy: retried with back-off; a budget deferral waits for the next cycle or UTC day instead
        note_deferral(report, load_outcome(ctx.profile, report.pass_name), ctx.options, ctx.now)
    measured = {
        "live": lambda: ctx.store.memories.counts()["live"],
        "live_after": lambda: ctx.store.memories.counts()["live"],
        "skills": lambda: len(ctx.store.skills.list()),
    }
    return record_outcome(ctx.profile, report, now=ctx.now, cycle_id=ctx.cycle_id, measured=measured)


def _declared_counts(report: PassReport, spec: PassSpec) -> None:
    """Every count the pass declares, 0 where this outcome did not set it; the counts that describe the input
    (LEVEL_COUNTS) are left to the skipped-report fill, which keeps their last value."""
    for key in spec.count_meanings:
        if key not in LEVEL_COUNTS:
            report.counts.setdefault(key, 0)
