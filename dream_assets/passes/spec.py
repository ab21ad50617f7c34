"""PassSpec: everything one pass is, declared next to the pass (``SPEC`` in each pass module).

A spec declares the pass's body, the option that turns it off, the source assets it reads and the check that its
required input is present, its change-gate input and how its input is fingerprinted, its minimum-interval option, its
model call (response contract, directive and offline answer) and its history analysis over the log warehouse. A spec
runs nothing: the runner (runner.py) applies what every pass shares — lock, enabled, inputs present, floor, change
gate, body, ledger stamp, review mode, recorded outcome — the same way to every spec it is given. The readers — the
cycle, the Dagster assets and sensors, ``dream status`` — read the registry of specs (registry.py), never a table of
their own; the model layer (contract, directive, offline answer) is handed the pass's ``model_call`` by the pass
itself and looks nothing up by name.
"""

from __future__ import annotations

from collections.abc import Callable, Generator, Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from importlib import resources
from typing import Any

from dream_assets.input_fingerprints import INPUT_ASSETS
from dream_assets.llm.contracts import Contract, ModelCall
from dream_assets.options import DreamOptions
from dream_assets.passes.context import PassContext
from dream_assets.passes.report import AboutToCall, PassReport
from dream_assets.profile import AgentProfile

#: The groups a pass asset can belong to.
GROUPS = ("logs", "memory", "skills", "audit")


@dataclass(frozen=True)
class HistoryAnalysis:
    """A backfillable analysis of a pass over the log warehouse: rows for the window ending at ``end``."""

    name: str
    compute: Callable[[AgentProfile, DreamOptions, datetime], list[dict[str, Any]]]


#: A pass body: takes a PassContext after the shared opening and returns its report. A gated body is a generator that
#: yields ``AboutToCall`` once, just before its model call, and goes on only when the runner answers True.
Body = Callable[[PassContext], PassReport | Generator[AboutToCall, bool, PassReport]]


@dataclass(frozen=True)
class PassSpec:
    name: str
    group: str  # one of GROUPS
    description: str
    #: The pass itself (see ``Body``): it never reads the ledger's gate verdict and never stamps.
    body: Body
    #: The boolean option that turns the pass off (skipped by the cycle, never requested by a sensor); None: always on.
    enabled_by: str | None
    after: tuple[str, ...] = ()  # passes that must run first in a cycle
    reads: tuple[str, ...] = ()  # source assets (stores and logs) the pass reads
    #: Why a required input is absent (the skip reason), or None when the pass can run. Checked after enabled.
    missing_input: Callable[[PassContext], str | None] | None = None
    #: The source asset whose change re-opens this pass's change gate: its data version is the pass's fingerprint
    #: (unless ``fingerprint`` says otherwise), the runner stamps it in the ledger, its sensor compares it, the source
    #: asset shows it. None: the pass is not change-gated by a sensor.
    gate: str | None = None
    #: How the input is fingerprinted when it is not the data version of ``gate``: the fingerprint the body gates on
    #: and the runner stamps, computed read-only (the sensor calls it), None when the pass has nothing to send.
    fingerprint: Callable[[PassContext], str | None] | None = None
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

    def disabled(self, options: DreamOptions) -> bool:
        return self.enabled_by is not None and not getattr(options, self.enabled_by)


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
    if spec.fingerprint is not None and spec.gate is None:
        out.append(f"{where}: fingerprint is set but gate names no input whose change re-opens it")
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
