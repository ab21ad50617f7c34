"""What the model-calling passes share: the change gate around a pass, and one model call with its reporting.

Spec "The change gate": a corpus-wide pass fingerprints exactly the corpus it is about to send, skips the model call
when the ledger says unchanged (until DreamPassMaxSkipInterval forces a run), and is stamped only after a usable
answer was applied — a failed or unparseable call is retried next cycle. DreamPassChangeGateEnabled: false restores
run-every-cycle.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from dream_assets.passes.context import PassContext
from dream_assets.passes.report import PassReport


def gate_says_skip(ctx: PassContext, pass_name: str, fingerprint: str, report: PassReport) -> bool:
    """True (and the report marked skipped, with when the pass will next be forced) when the input has not moved."""
    report.extra["fingerprint"] = fingerprint
    if not ctx.options.DreamPassChangeGateEnabled:
        return False
    decision = ctx.ledger.gate(pass_name, fingerprint, ctx.now, ctx.options.DreamPassMaxSkipInterval)
    if ctx.ledger.warning:
        report.warn(ctx.ledger.warning)
    if decision.skip:
        report.counts["gated"] = 1
        report.skip(f"change gate: {decision.reason}")
        return True
    report.info(f"change gate: running — {decision.reason}")
    return False


def stamp(ctx: PassContext, pass_name: str, fingerprint: str) -> None:
    """Record a completed run. Only after a usable answer was applied."""
    ctx.ledger.stamp(pass_name, fingerprint, ctx.now)


def call_model(ctx: PassContext, report: PassReport, pass_name: str, prompt: str,
               inputs: Mapping[str, Any] | None = None) -> Any | None:
    """One model call. Returns the validated response, or None after marking the report failed / deferred.

    Usage totals for this pass accumulate into ``report.usage``; the backend label goes into ``report.extra``."""
    client = ctx.client
    start = len(client.usage.records)
    result = client.call(client.request(pass_name, prompt, inputs))
    totals = client.usage.totals(pass_name, since=start)
    for key, value in totals.items():
        report.usage[key] = report.usage.get(key, 0.0) + value
    report.extra.update(client.describe())
    if result.note:
        report.info(result.note)
    if result.deferred:
        report.defer(result.error)
        return None
    if not result.ok:
        report.fail(result.error)
        return None
    return result.response


def note_malformed(report: PassReport, kind: str, read: Any) -> None:
    """Malformed lines never stop a pass, and are never skipped silently either."""
    if read.malformed:
        report.count(f"malformed_{kind.replace('-', '_')}_lines", read.malformed)
        shown = "; ".join(read.problems[:3])
        report.warn(f"{read.malformed} malformed line(s) in the {kind} log were skipped: {shown}"
                    + (" …" if len(read.problems) > 3 else "") + " — fix or remove those lines")
