"""PassSpec: everything one pass is, defined next to the pass (``SPEC`` in each pass module).

A spec holds the pass function itself, the option that turns it off, the source assets it reads and the check that
its required input is present, its change-gate input (the source asset whose data version it stamps in the ledger),
its minimum-interval option, its model call (response contract, directive and offline answer) and its history
analysis over the log warehouse. ``PassSpec.run`` does what every pass shares: the per-pass lock, the opening
(enabled? required input present? minimum interval?), the exception-to-failed-report mapping and the recorded
outcome. The readers — the cycle, the Dagster assets and sensors, ``dream status`` — read the registry of specs
(registry.py), never a table of their own; the model layer (contract, directive, offline answer) is handed the pass's
``model_call`` by the pass itself and looks nothing up by name.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from contextlib import ExitStack
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from importlib import resources
from typing import Any

from dream_assets.input_fingerprints import INPUT_ASSETS
from dream_assets.llm.contracts import Contract, ModelCall
from dream_assets.model import iso, utc
from dream_assets.options import DreamOptions
from dream_assets.passes.context import PassContext
from dream_assets.passes.deferral import note_deferral
from dream_assets.passes.outcome import LEVEL_COUNTS, load_outcome, record_outcome
from dream_assets.passes.report import PassReport
from dream_assets.profile import AgentProfile
from dream_assets.store.connection import StoreCorrupt, StoreError
from dream_assets.store.ledger import LedgerRecord
from dream_assets.store.locks import LockTimeout, path_lock

log = logging.getLogger("dream_assets.passes")

#: The groups a pass asset can belong to.
GROUPS = ("logs", "memory", "skills", "audit")


@dataclass(frozen=True)
class HistoryAnalysis:
    """A backfillable analysis of a pass over the log warehouse: rows for the window ending at ``end``."""

    name: str
    compute: Callable[[AgentProfile, DreamOptions, datetime], list[dict[str, Any]]]


@dataclass(frozen=True)
class PassSpec:
    name: str
    group: str  # one of GROUPS
    description: str
    #: The pass itself: takes a PassContext after the shared opening and returns its report.
    body: Callable[[PassContext], PassReport]
    #: The boolean option that turns the pass off (skipped by the cycle, never requested by a sensor); None: always on.
    enabled_by: str | None
    after: tuple[str, ...] = ()  # passes that must run first in a cycle
    reads: tuple[str, ...] = ()  # source assets (stores and logs) the pass reads
    #: Why a required input is absent (the skip reason), or None when the pass can run. Checked after enabled.
    missing_input: Callable[[PassContext], str | None] | None = None
    #: The source asset whose data version is this pass's change-gate fingerprint: the pass stamps it in the
    #: ledger, its sensor compares it, the source asset shows it. None: the pass is not change-gated by a sensor.
    gate: str | None = None
    #: The duration option below which the pass does not run again after its last completed run (zero disables).
    min_interval: str | None = None
    model_call: ModelCall | None = None  # response contract, directive and offline answer
    history: HistoryAnalysis | None = None
    #: Said after "disabled (<option> = false)" when the pass is off.
    disabled_note: str = ""
    #: What each count of the pass's materializations means (the asset description lists them). Every outcome
    #: records every one of them, so the plots have no gaps: what the run did is 0 when it did not run.
    counts: Mapping[str, str] = field(default_factory=dict)

    @property
    def count_meanings(self) -> dict[str, str]:
        """``counts``, with ``floored`` for a pass that has a minimum interval."""
        floored = {"floored": f"1 when {self.min_interval} held the pass back this run, else 0"}
        return {**self.counts, **(floored if self.min_interval is not None else {})}

    @property
    def uses_model(self) -> bool:
        return self.model_call is not None

    @property
    def label(self) -> str:
        """The pass as a person names it: "memory consolidation"."""
        return self.name.replace("_", " ")

    def run(self, ctx: PassContext) -> PassReport:
        """Run the pass, unless the same pass is already running for this agent (a schedule and a change-gate sensor
        can both launch it): then it is skipped with that reason rather than run twice at once. Only this pass's own
        lock means "another run in progress": any other failure — the store busy past its wait limit, a corrupt store,
        a lock the pass itself takes timing out, any exception — is reported as failed, never as done or skipped
        (spec: retried next cycle; a store failure's reason names the agent and the file), and the rest of the
        cycle still runs."""
        agent = ctx.profile.agent_id
        ctx = ctx.for_pass(self.name)
        with ExitStack() as held:
            try:
                try:
                    held.enter_context(path_lock(ctx.profile.pass_lock_path(self.name), timeout=0))
                except LockTimeout:  # not recorded: the run in progress records its own outcome
                    return PassReport(self.name).skip("another run of this pass is in progress for this agent")
                report = self.attempt_in_mode(ctx)
            except StoreCorrupt as exc:
                log.error("pass %s failed for agent %s: %s", self.name, agent, exc)
                report = PassReport(self.name).fail(f"the store of agent {agent!r} is unusable: {exc}")
            except StoreError as exc:
                log.error("pass %s failed for agent %s: %s", self.name, agent, exc)
                report = PassReport(self.name).fail(
                    f"the store of agent {agent!r} was not available: {exc}; retried next cycle"
                )
            # a failed pass is reported and retried next cycle; the cycle goes on
            except Exception as exc:  # noqa: BLE001
                log.exception("pass %s failed for agent %s", self.name, agent)
                report = PassReport(self.name).fail(f"{type(exc).__name__}: {exc}")
            _declared_counts(report, self)
            return record_pass_outcome(ctx, report)  # the last status, for `dream status` and the cycle report

    def attempt_in_mode(self, ctx: PassContext) -> PassReport:
        """``attempt`` as the pass's ApplyMode says: its changes applied (``auto``), or held for review on a copy of
        the store (``review``, ``review-risky``: passes/review.py)."""
        from dream_assets.passes.review import apply_mode, run_in_review

        mode = apply_mode(ctx.options, self.name)
        return self.attempt(ctx) if mode == "auto" else run_in_review(self, ctx, mode)

    def attempt(self, ctx: PassContext) -> PassReport:
        """The shared opening, then the pass: skipped when disabled, when a required input is absent, or sooner than
        the minimum interval after its last completed run (a forced run ignores the interval). Exceptions propagate
        (``run`` maps them to a failed report); nothing is locked or recorded."""
        if self.disabled(ctx.options):
            return PassReport(self.name).skip(f"disabled ({self.enabled_by} = false){self.disabled_note}")
        if self.missing_input is not None:
            missing = self.missing_input(ctx)
            if missing is not None:
                return PassReport(self.name).skip(missing)
        if self.min_interval is not None and not ctx.force:
            record = ctx.ledger.get(self.name)
            allowed = self.floor(record, ctx.options, ctx.now)
            if allowed is not None:
                assert record is not None
                report = PassReport(self.name)
                if ctx.ledger.warning:
                    report.warn(ctx.ledger.warning)
                report.counts["floored"] = 1
                report.summary = (
                    f"{self.label} skipped — last completed {iso(record.last_run_at)}, next allowed at {iso(allowed)} "
                    f"({self.min_interval} {getattr(ctx.options, self.min_interval)})"
                )
                return report.skip(f"minimum interval: last completed {iso(record.last_run_at)}")
        return self.body(ctx)

    def disabled(self, options: DreamOptions) -> bool:
        return self.enabled_by is not None and not getattr(options, self.enabled_by)

    def floor(self, record: LedgerRecord | None, options: DreamOptions, now: datetime) -> datetime | None:
        """The minimum-interval rule: when the pass is held back, the instant it is allowed again; else None (no
        interval option, a zero interval, never completed, or the interval has passed)."""
        if self.min_interval is None or record is None:
            return None
        interval: timedelta = getattr(options, self.min_interval)
        if interval <= timedelta(0):
            return None
        allowed = record.last_run_at + interval
        return allowed if utc(now) < allowed else None


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


def spec_problems(spec: PassSpec, options: DreamOptions | None = None) -> list[str]:
    """What a pass spec lacks for its kind, one sentence each naming the pass and the field (empty: complete). Every
    pass needs a group, a two-part description, a boolean enable option and the inputs it reads; a gated pass a gate
    input it reads; a minimum interval a duration option; a model pass a contract, a directive file in the package
    data with an existing override option, and an offline answer that fits its contract."""
    opts = options or DreamOptions()
    where = f"pass {spec.name!r}"
    out: list[str] = []
    if spec.group not in GROUPS:
        out.append(f"{where}: group {spec.group!r} is not one of {', '.join(GROUPS)}")
    if " — " not in spec.description.split("\n\n")[0] or "\n\n" not in spec.description:
        out.append(f"{where}: description needs a 'Label — what it does' line, a blank line, then the details")
    if not callable(spec.body):
        out.append(f"{where}: body is not callable")
    if spec.enabled_by is not None and not isinstance(getattr(opts, spec.enabled_by, None), bool):
        out.append(f"{where}: enabled_by {spec.enabled_by!r} is not a boolean option")
    if not spec.reads:
        out.append(f"{where}: reads names no input source asset")
    unknown = [r for r in spec.reads if r not in INPUT_ASSETS]
    if unknown:
        out.append(f"{where}: reads unknown input(s) {', '.join(unknown)}; inputs: {', '.join(INPUT_ASSETS)}")
    if spec.gate is not None and spec.gate not in spec.reads:
        out.append(f"{where}: gate {spec.gate!r} is not one of the inputs it reads")
    if spec.min_interval is not None and not isinstance(getattr(opts, spec.min_interval, None), timedelta):
        out.append(f"{where}: min_interval {spec.min_interval!r} is not a duration option")
    call = spec.model_call
    if call is None:
        return out
    if call.name != spec.name:
        out.append(f"{where}: model_call.name is {call.name!r}, not the pass name")
    if not (isinstance(call.contract, type) and issubclass(call.contract, Contract)):
        out.append(f"{where}: model_call.contract is not a response contract")
    if not resources.files(call.directive_package).joinpath(call.directive_file).is_file():
        out.append(f"{where}: directive file {call.directive_file} is not in the package data {call.directive_package}")
    if call.directive_option is not None and not isinstance(getattr(opts, call.directive_option, None), str):
        out.append(f"{where}: directive_option {call.directive_option!r} is not a file-name option")
    try:
        answer, _ = call.offline({})
        call.contract.model_validate(answer)
    except Exception as exc:  # noqa: BLE001 - any failure is the finding
        out.append(f"{where}: the offline answer does not fit its contract ({type(exc).__name__}: {exc})")
    return out
