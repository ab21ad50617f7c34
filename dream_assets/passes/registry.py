"""The passes of a dream cycle, in the spec's order: one line per pass, each pass's ``SPEC`` defined next to it.

Adding a pass means adding its module (with a complete ``SPEC``, see spec.py) and one line here. The Dagster layer
builds one asset per entry; ``dream_assets.cycle.run_cycle`` runs them without Dagster.
"""

from __future__ import annotations

from dream_assets.llm.contracts import Contract, ModelCall
from dream_assets.passes import (
    archive_purge,
    contradiction_sweep,
    importance_decay,
    log_retention,
    memory_consolidation,
    preference_inference,
    skill_consolidation,
    skill_gap,
    skill_optimization,
    tier_routing,
    wisp_failure,
)
from dream_assets.passes.spec import PassSpec, record_pass_outcome

__all__ = ["MODEL_CALLS", "PASSES", "PassSpec", "by_name", "contract_for", "model_call", "record_pass_outcome"]

PASSES: tuple[PassSpec, ...] = (
    log_retention.SPEC,
    archive_purge.SPEC,
    importance_decay.SPEC,
    memory_consolidation.SPEC,
    skill_gap.SPEC,
    wisp_failure.SPEC,
    skill_consolidation.SPEC,
    skill_optimization.SPEC,
    preference_inference.SPEC,
    tier_routing.SPEC,
    contradiction_sweep.SPEC,
)

#: Every kind of model call by name: each model pass's own, and merge repair (a call memory consolidation makes). The
#: passes hand their calls to the model layer; this table is for whoever holds only a name (tools, benchmarks).
MODEL_CALLS: dict[str, ModelCall] = {
    **{spec.name: spec.model_call for spec in PASSES if spec.model_call is not None},
    memory_consolidation.MERGE_REPAIR.name: memory_consolidation.MERGE_REPAIR,
}


def by_name(name: str) -> PassSpec:
    for spec in PASSES:
        if spec.name == name:
            return spec
    raise KeyError(f"unknown pass {name!r}; known passes: {', '.join(p.name for p in PASSES)}")


def model_call(name: str) -> ModelCall:
    """The model call ``name``; KeyError naming the known calls when there is none."""
    try:
        return MODEL_CALLS[name]
    except KeyError:
        raise KeyError(f"unknown model call {name!r}; known passes: {', '.join(MODEL_CALLS)}") from None


def contract_for(name: str) -> type[Contract]:
    """The response contract of the model call ``name``; ValueError naming the known calls when there is none."""
    try:
        return MODEL_CALLS[name].contract
    except KeyError:
        raise ValueError(f"no response contract for pass {name!r}; known passes: {', '.join(MODEL_CALLS)}") from None
