"""PassSpec: everything one pass is, declared next to the pass (``SPEC`` in each pass module).

A spec declares the pass's body, its options section (a ``PassOptions`` subclass declared next to the pass: the
switch that turns it off, its minimum interval, its model and directive file and its own options), the source assets it
reads and the check that its required input is present, its change-gate input and how its input is fingerprinted, its
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
from dream_assets.options import PASS_KEYS, DreamOptions, PassOptions
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
    #: The pass's options section (``[passes.<name>]``): its ``enabled`` turns the pass off (skipped by the cycle,
    #: never requested by a sensor), its ``min_interval`` holds it back after a completed run. None: no options,
    #: always on.
    options: type[PassOptions] | None = None
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

    @property
    def enabled_by(self) -> str | None:
        """The option that turns the pass off, as a person names it (its flat alias, else ``passes.<name>.enabled``),
        or None for a pass that is always on."""
        return self._option("enabled")

    @property
    def min_interval(self) -> str | None:
        """The duration option below which the pass does not run again after its last completed run (zero disables),
        as a person names it; None when the pass has none."""
        return self._option("min_interval")

    def _option(self, key: str) -> str | None:
        return self.options.label(key) if self.options is not None and key in self.options.keys() else None

    def own(self, options: DreamOptions) -> PassOptions | None:
        """The pass's options section as ``options`` set it, or None for a pass without one."""
        return None if self.options is None else options.section(self.options)

    def disabled(self, options: DreamOptions) -> bool:
        own = self.own(options)
        return own is not None and not own.enabled

    def interval(self, options: DreamOptions) -> timedelta | None:
        """The pass's minimum interval as ``options`` set it (None: it has none)."""
        own = self.own(options)
        return None if own is None else own.min_interval


def spec_problems(spec: PassSpec, options: DreamOptions | None = None) -> list[str]:
    """What a pass spec lacks for its kind, one sentence each naming the pass and the field (empty: complete). Every
    pass needs a group, a two-part description and the inputs it reads; its options section (if any) the pass's name
    and shared keys of their types; a gated pass a gate input it reads; a model pass a contract, a directive file in
    the package data named by its section's ``directive`` key (where it has one), and an offline answer that fits
    its contract. ``options`` is accepted for callers of old and not needed."""
    where = f"pass {spec.name!r}"
    out: list[str] = []
    if spec.group not in GROUPS:
        out.append(f"{where}: group {spec.group!r} is not one of {', '.join(GROUPS)}")
    if " — " not in spec.description.split("\n\n")[0] or "\n\n" not in spec.description:
        out.append(f"{where}: description needs a 'Label — what it does' line, a blank line, then the details")
    if not callable(spec.body):
        out.append(f"{where}: body is not callable")
    out += _section_problems(spec, where)
    if not spec.reads:
        out.append(f"{where}: reads names no input source asset")
    unknown = [r for r in spec.reads if r not in INPUT_ASSETS]
    if unknown:
        out.append(f"{where}: reads unknown input(s) {', '.join(unknown)}; inputs: {', '.join(INPUT_ASSETS)}")
    if spec.gate is not None and spec.gate not in spec.reads:
        out.append(f"{where}: gate {spec.gate!r} is not one of the inputs it reads")
    if spec.fingerprint is not None and spec.gate is None:
        out.append(f"{where}: fingerprint is set but gate names no input whose change re-opens it")
    call = spec.model_call
    if call is None:
        return out
    if call.name != spec.name:
        out.append(f"{where}: model_call.name is {call.name!r}, not the pass name")
    if not (isinstance(call.contract, type) and issubclass(call.contract, Contract)):
        out.append(f"{where}: model_call.contract is not a response contract")
    if not resources.files(call.directive_package).joinpath(call.directive_file).is_file():
        out.append(f"{where}: directive file {call.directive_file} is not in the package data {call.directive_package}")
    has_directive = spec.options is not None and "directive" in spec.options.keys()
    named = spec.options.label("directive") if spec.options is not None and has_directive else None
    if call.directive_option != named:
        out.append(f"{where}: directive_option {call.directive_option!r} is not its options section's directive key")
    try:
        answer, _ = call.offline({})
        call.contract.model_validate(answer)
    except Exception as exc:  # noqa: BLE001 - any failure is the finding
        out.append(f"{where}: the offline answer does not fit its contract ({type(exc).__name__}: {exc})")
    return out


_KINDS = {"enabled": "bool", "model": "str", "base_url": "str", "api_key_env": "str", "apply_mode": "str"}
_KINDS |= {"directive": "str", "min_interval": "timedelta"}


def _section_problems(spec: PassSpec, where: str) -> list[str]:
    """What the pass's options section lacks: a PassOptions subclass named for the pass, each shared key it declares
    of the key's type, ``model`` exactly when the pass calls a model."""
    declared = spec.options
    if declared is None:
        return []
    if not (isinstance(declared, type) and issubclass(declared, PassOptions)):
        return [f"{where}: options is not a PassOptions subclass"]
    out = []
    if declared.PASS != spec.name:
        out.append(f"{where}: options section {declared.__name__} is for pass {declared.PASS!r}")
    for key, f in declared.keys().items():
        kind = f.type if isinstance(f.type, str) else f.type.__name__
        if key in PASS_KEYS and kind != _KINDS[key]:
            out.append(f"{where}: options key {key} is a {kind}, not a {_KINDS[key]}")
    if ("model" in declared.keys()) != spec.uses_model:
        out.append(f"{where}: its options section has a model key exactly when it calls a model")
    return out
