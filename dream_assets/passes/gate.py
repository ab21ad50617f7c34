"""The change gate and the minimum-interval floor: the one place that decides whether a pass's input changed since
its last ledger stamp, for the runner (passes/runner.py) and for the sensors and ``dream status`` (gates.py).

Spec "The change gate": a corpus-wide pass fingerprints exactly the corpus it is about to send, skips the model call
when the ledger says unchanged (until DreamPassMaxSkipInterval forces a run), and is stamped only after a usable
answer was applied — a failed or unparseable call is retried next cycle. DreamPassChangeGateEnabled: false restores
run-every-cycle. A pass's fingerprint is, unless its spec says otherwise (``PassSpec.fingerprint``), the data version
of its gate input (input_fingerprints.py), so a sensor and its pass never disagree about "unchanged".

Only this module and the runner read the gate's verdict or write a stamp; a pass body hands the runner the
fingerprint of what it is about to send (``AboutToCall``) and, when it is not that fingerprint, the completion stamp
(``PassReport.stamp``).
"""

from __future__ import annotations

from datetime import datetime, timedelta

from dream_assets.input_fingerprints import data_version
from dream_assets.model import utc
from dream_assets.options import DreamOptions
from dream_assets.passes.common import note_forced, note_model_switch
from dream_assets.passes.context import PassContext
from dream_assets.passes.report import PassReport
from dream_assets.passes.spec import PassSpec
from dream_assets.store.ledger import GateDecision, LedgerRecord, gate

#: The decision while DreamPassChangeGateEnabled is false: every pass runs with every cycle.
GATE_OFF = GateDecision(False, "change gate disabled (DreamPassChangeGateEnabled = false)")


def gate_decision(
    record: LedgerRecord | None, fingerprint: str, options: DreamOptions, now: datetime, model: str | None
) -> GateDecision:
    """Has the input moved since ``record`` (or did DreamPassMaxSkipInterval elapse, or the answering model change)?
    Always "run" while the change gate is off."""
    if not options.DreamPassChangeGateEnabled:
        return GATE_OFF
    return gate(record, fingerprint, now, options.DreamPassMaxSkipInterval, model)


def floor(spec: PassSpec, record: LedgerRecord | None, options: DreamOptions, now: datetime) -> datetime | None:
    """The minimum-interval rule: when the pass is held back, the instant it is allowed again; else None (no
    interval option, a zero interval, never completed, or the interval has passed)."""
    if spec.min_interval is None or record is None:
        return None
    interval = spec.interval(options)
    if interval is None or interval <= timedelta(0):
        return None
    allowed = record.last_run_at + interval
    return allowed if utc(now) < allowed else None


def input_fingerprint(spec: PassSpec, ctx: PassContext) -> str | None:
    """The fingerprint the gated pass would stamp for its input as it is now (what its sensor compares with the
    ledger): its spec's own fingerprint when it has one (None: nothing the pass would send), else the data version of
    its gate input."""
    if spec.fingerprint is not None:
        return spec.fingerprint(ctx)
    if spec.gate is None:
        raise KeyError(f"pass {spec.name!r} has no change gate")
    return data_version(ctx.profile, spec.gate)


def let_through(ctx: PassContext, pass_name: str, fingerprint: str, report: PassReport) -> bool:
    """The runner's gate before a body's model call: False (and the report marked skipped, with when the pass will
    next be forced) when the input has not moved. A forced pass (``ctx.force``) runs whatever the gate says, and the
    report says what the gate would have done."""
    report.extra["fingerprint"] = fingerprint
    if not ctx.options.DreamPassChangeGateEnabled and not ctx.force:
        return True
    model = ctx.model_identity
    decision = ctx.ledger.gate(pass_name, fingerprint, ctx.now, ctx.options.DreamPassMaxSkipInterval, model)
    note_model_switch(ctx, pass_name, report)
    if ctx.ledger.warning:
        report.warn(ctx.ledger.warning)
    if ctx.force:
        note_forced(ctx, report, f"change gate ignored (it said: {decision.reason})")
        return True
    if decision.skip:
        report.counts["gated"] = 1
        report.skip(f"change gate: {decision.reason}")
        return False
    report.info(f"change gate: running — {decision.reason}")
    return True


def completion_stamp(report: PassReport, gated: str | None) -> str | None:
    """What the ledger records for this run: the body's own stamp (a completion or backlog stamp, or a skip that
    counts as done), else the fingerprint it was gated on once it completed; never anything for a failed or deferred
    run (retried next cycle)."""
    if report.status in ("failed", "deferred"):
        return None
    if report.stamp is not None:
        return report.stamp
    return gated if report.status == "completed" else None


def stamp(ctx: PassContext, pass_name: str, fingerprint: str) -> None:
    """Record a completed run (a forced one with its reason) and the backend and model that answered."""
    ctx.ledger.stamp(pass_name, fingerprint, ctx.now, forced=ctx.force, model=ctx.model_identity)
