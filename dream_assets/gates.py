"""The change gate as the Dagster sensors see it: which input each gated pass fingerprints, and whether it is due.
Each function computes exactly what its pass stamps in the ledger (the window passes' own ``window_fingerprint``,
the store fingerprints), so a sensor and its pass never disagree about "unchanged".
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta
from pathlib import Path

from dream_assets.model import iso, utc
from dream_assets.options import DreamOptions
from dream_assets.profile import AgentProfile
from dream_assets.store import open_store
from dream_assets.store.ledger import GateDecision, PassLedger, gate
from dream_assets.store.logs import read_events


def wisp_window_fingerprint(profile: AgentProfile, options: DreamOptions, now: datetime) -> str:
    from dream_assets.passes import wisp_failure

    events = read_events(profile, wisp_failure.LOG, since=utc(now) - options.WispAnalysisWindow, until=utc(now)).events
    return wisp_failure.window_fingerprint(events, options)


def tier_window_fingerprint(profile: AgentProfile, options: DreamOptions, now: datetime) -> str:
    from dream_assets.passes import tier_routing

    events = read_events(
        profile, tier_routing.LOG, since=utc(now) - options.TierRoutingReviewWindow, until=utc(now)
    ).events
    return tier_routing.window_fingerprint(events, options)


def skill_catalog_fingerprint(profile: AgentProfile, options: DreamOptions, now: datetime) -> str:
    return open_store(profile, options).skills.fingerprint()


def memory_corpus_fingerprint(profile: AgentProfile, options: DreamOptions, now: datetime) -> str:
    return open_store(profile, options).memories.fingerprint()


def contradiction_corpus_fingerprint(profile: AgentProfile, options: DreamOptions, now: datetime) -> str:
    from dream_assets.passes import contradiction_sweep

    return contradiction_sweep.corpus_fingerprint(profile, options, now)


#: Pass -> the fingerprint of exactly the input it sends to the model.
GATED_PASSES: dict[str, Callable[[AgentProfile, DreamOptions, datetime], str]] = {
    "memory_consolidation": memory_corpus_fingerprint,
    "skill_consolidation": skill_catalog_fingerprint,
    "wisp_failure_analysis": wisp_window_fingerprint,
    "tier_routing_review": tier_window_fingerprint,
    "contradiction_sweep": contradiction_corpus_fingerprint,
}


#: Gated pass -> the file its fingerprint reads (named when that file cannot be read).
GATED_INPUTS: dict[str, Callable[[AgentProfile], Path]] = {
    "memory_consolidation": lambda profile: profile.store_path,
    "skill_consolidation": lambda profile: profile.store_path,
    "wisp_failure_analysis": lambda profile: profile.single_log_path("wisp-executions"),
    "tier_routing_review": lambda profile: profile.single_log_path("tier-routing"),
    "contradiction_sweep": lambda profile: profile.store_path,
}

#: Pass -> the option that turns it off. A disabled pass is skipped by the cycle and never requested by a sensor.
PASS_ENABLE_OPTIONS: dict[str, str] = {
    "log_retention": "LogRetentionEnabled",
    "archive_purge": "ArchivePurgeEnabled",
    "importance_decay": "ImportanceDecayEnabled",
    "memory_consolidation": "MemoryConsolidationEnabled",
    "skill_gap_detection": "SkillGapEnabled",
    "wisp_failure_analysis": "WispFailureAnalysisEnabled",
    "skill_consolidation": "SkillConsolidationEnabled",
    "skill_optimization": "SkillOptimizationEnabled",
    "preference_inference": "PreferenceInferenceEnabled",
    "tier_routing_review": "TierRoutingReviewEnabled",
    "contradiction_sweep": "ContradictionSweepEnabled",
}


def disabled_by(pass_name: str, options: DreamOptions) -> str | None:
    """The enable option that turns ``pass_name`` off for these options, or None when the pass is enabled."""
    option = PASS_ENABLE_OPTIONS.get(pass_name)
    return option if option is not None and not getattr(options, option) else None


@dataclass(frozen=True)
class GateStatus:
    pass_name: str
    fingerprint: str
    decision: GateDecision
    last_run_at: datetime | None


def gate_status(pass_name: str, profile: AgentProfile, options: DreamOptions, now: datetime) -> GateStatus:
    """Is ``pass_name`` due for this agent? The ledger is the source of truth (a lost Dagster instance or sensor cursor
    never makes a pass skip forever)."""
    fingerprint = GATED_PASSES[pass_name](profile, options, now)
    ledger = PassLedger(profile)
    record = ledger.get(pass_name)
    if not options.DreamPassChangeGateEnabled:
        decision = GateDecision(False, "change gate disabled (DreamPassChangeGateEnabled = false)")
    else:
        decision = gate(record, fingerprint, now, options.DreamPassMaxSkipInterval)
    if pass_name == "memory_consolidation" and not decision.skip:
        floor = consolidation_floor(profile, options, now)
        if floor is not None:
            decision = GateDecision(
                True,
                f"minimum interval: last completed {iso(record.last_run_at) if record else '?'}, "
                f"next allowed at {iso(floor)}",
                floor,
            )
    return GateStatus(pass_name, fingerprint, decision, record.last_run_at if record else None)


def consolidation_floor(profile: AgentProfile, options: DreamOptions, now: datetime) -> datetime | None:
    """When consolidation is held back by ConsolidationMinInterval, the instant it is allowed again; else None."""
    if options.ConsolidationMinInterval <= timedelta(0):
        return None
    record = PassLedger(profile).get("memory_consolidation")
    if record is None:
        return None
    allowed = record.last_run_at + options.ConsolidationMinInterval
    return allowed if utc(now) < allowed else None
