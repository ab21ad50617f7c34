"""The change gate as the sensors and ``dream status`` see it, read from each pass's spec.

A gated pass (``PassSpec.gate``) compares the fingerprint of its input — the data version of its gate input source
asset (input_fingerprints.py), or the pass's own fingerprint of what it would send (``PassSpec.fingerprint``) — with
its ledger record: the same value the runner stamps when the pass completes, decided by the same gate module
(passes/gate.py), so a sensor and its pass never disagree about "unchanged". The ledger is the source of truth (a lost
Dagster instance or sensor cursor never makes a pass skip forever); the minimum-interval rule is the gate module's too.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

from dream_assets.input_fingerprints import INPUT_ASSETS, input_path
from dream_assets.llm.client import configured_model_identity
from dream_assets.model import iso
from dream_assets.options import DreamOptions
from dream_assets.passes.context import PassContext
from dream_assets.passes.gate import floor, gate_decision, input_fingerprint
from dream_assets.passes.registry import PASSES, by_name
from dream_assets.passes.spec import PassSpec
from dream_assets.profile import AgentProfile
from dream_assets.store.ledger import GateDecision, PassLedger

#: The change-gated passes, in cycle order (one change-gate sensor each).
GATED_PASSES: tuple[str, ...] = tuple(spec.name for spec in PASSES if spec.gate is not None)


def gated_specs() -> tuple[PassSpec, ...]:
    return tuple(spec for spec in PASSES if spec.gate is not None)


def disabled_by(pass_name: str, options: DreamOptions) -> str | None:
    """The enable option that turns ``pass_name`` off for these options, or None when the pass is enabled."""
    spec = by_name(pass_name)
    return spec.enabled_by if spec.disabled(options) else None


def gate_input_path(pass_name: str, profile: AgentProfile) -> Path:
    """The file the gated pass's fingerprint reads (named when that file cannot be read)."""
    spec = by_name(pass_name)
    if spec.gate is None:
        raise KeyError(f"pass {pass_name!r} has no change gate; gated passes: {', '.join(GATED_PASSES)}")
    return input_path(profile, spec.gate)


def gate_signature(pass_name: str, profile: AgentProfile, extra: Iterable[Path] = ()) -> str:
    """A cheap signature of every file the gate decision of ``pass_name`` reads: its gate input (a store with its
    write-ahead log), the other inputs it needs, the ledger, the agent's options file, the consolidation pause file,
    and ``extra`` (the deployment's options file). It costs a
    few ``stat`` calls and no read. While it is unchanged, so is the decision, except for what time alone changes
    (the maximum skip interval, a minimum-interval floor): a sensor may skip an agent whose signature did not move
    until then, so a tick's cost grows with what changed, not with the fleet."""
    spec = by_name(pass_name)
    path = gate_input_path(pass_name, profile)
    reads = [input_path(profile, asset) for asset in spec.reads if asset in INPUT_ASSETS]
    paths = [path, *reads, profile.ledger_path, profile.options_path, profile.consolidation_pause_path, *extra]
    paths = list(dict.fromkeys(paths))
    if profile.store_path in paths:  # the gate input, or a store a pass's own fingerprint reads
        paths.append(profile.store_path.with_name(profile.store_path.name + ".wal"))
    parts = []
    for p in paths:
        try:
            st = os.stat(p)
        except FileNotFoundError:
            parts.append(f"{p}:absent")
            continue
        parts.append(f"{p}:{st.st_ino}:{st.st_size}:{st.st_mtime_ns}")
        if os.path.isdir(p):  # a folder of session logs: an append changes a file's stat, not the folder's
            with os.scandir(p) as entries:
                for entry in sorted(entries, key=lambda e: e.name):
                    est = entry.stat()
                    parts.append(f"{entry.name}:{est.st_ino}:{est.st_size}:{est.st_mtime_ns}")
    return hashlib.blake2b("\n".join(parts).encode(), digest_size=10).hexdigest()


@dataclass(frozen=True)
class GateStatus:
    pass_name: str
    fingerprint: str  # "" when the pass would send nothing
    decision: GateDecision
    last_run_at: datetime | None


def gate_status(pass_name: str, profile: AgentProfile, options: DreamOptions, now: datetime) -> GateStatus:
    """Is ``pass_name`` due for this agent? Its input moved, DreamPassMaxSkipInterval elapsed, or it never ran — and
    it is not held back by its minimum interval."""
    spec = by_name(pass_name)
    ctx = PassContext(profile, options, now, cycle_id="gate")
    record = PassLedger(profile).get(pass_name)
    # A pass with nothing to run on skips without a ledger stamp: requesting it would launch a run that only skips
    # again, on every tick, for every agent without that input.
    missing = spec.missing_input(ctx) if spec.missing_input is not None else None
    if missing is not None and spec.fingerprint is not None:  # its fingerprint reads that input
        return GateStatus(
            pass_name, "", GateDecision(True, f"nothing to run on — {missing}"), record.last_run_at if record else None
        )
    fingerprint = input_fingerprint(spec, ctx)
    if fingerprint is None:
        decision = GateDecision(True, "nothing to run on — nothing new to send the model")
    else:
        model = configured_model_identity(options.for_pass_model(pass_name)) if spec.uses_model else None
        decision = gate_decision(record, fingerprint, options, now, model)
    if not decision.skip and missing is not None:
        decision = GateDecision(True, f"nothing to run on — {missing}")
    if not decision.skip:
        allowed = floor(spec, record, options, now)
        if allowed is not None and record is not None:
            decision = GateDecision(
                True,
                f"minimum interval: last completed {iso(record.last_run_at)}, next allowed at {iso(allowed)}",
                allowed,
            )
    return GateStatus(pass_name, fingerprint or "", decision, record.last_run_at if record else None)


def min_interval_floor(pass_name: str, profile: AgentProfile, options: DreamOptions, now: datetime) -> datetime | None:
    """When ``pass_name`` is held back by its minimum-interval option, the instant it is allowed again; else None."""
    spec = by_name(pass_name)
    if spec.min_interval is None:
        return None
    return floor(spec, PassLedger(profile).get(pass_name), options, now)
