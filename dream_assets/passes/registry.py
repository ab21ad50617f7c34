"""The passes of a dream cycle, in the spec's order: one line per pass, each pass's ``SPEC`` defined next to it.

Adding a pass means adding its module (a package where it is large) with its body, a complete ``SPEC`` (see spec.py),
its options section (a ``PassOptions`` subclass, ``SPEC.options``: its ``[passes.<name>]`` keys are then accepted
wherever options load through dream_assets/options_loader.py), its response contract, prompt rendering and offline
answer, and its directive file, then one line here (and its name in cycle_order.py, the order review mode applies a
cycle's changes in). What several passes share lives in a shared module (memory_vocabulary.py, skill_vocabulary.py,
common.py ...): no pass imports another. The Dagster layer builds one asset per entry; ``dream_assets.cycle.run_cycle``
runs them without Dagster.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager

from dream_assets.llm.contracts import Contract, ModelCall
from dream_assets.passes import (
    archive_purge,
    contradiction_sweep,
    importance_decay,
    log_retention,
    memory_consolidation,
    preference_inference,
    skill_consolidation,
    skill_gap_detection,
    skill_optimization,
    tier_routing_review,
    wisp_failure_analysis,
)
from dream_assets.passes.spec import PassSpec
from dream_assets.profile import AgentProfile
from dream_assets.store.locks import LockTimeout, path_lock

__all__ = [
    "MODEL_CALLS",
    "PASSES",
    "PassRunning",
    "PassSpec",
    "by_name",
    "contract_for",
    "model_call",
    "no_pass_running",
]

PASSES: tuple[PassSpec, ...] = (
    log_retention.SPEC,
    archive_purge.SPEC,
    importance_decay.SPEC,
    memory_consolidation.SPEC,
    skill_gap_detection.SPEC,
    wisp_failure_analysis.SPEC,
    skill_consolidation.SPEC,
    skill_optimization.SPEC,
    preference_inference.SPEC,
    tier_routing_review.SPEC,
    contradiction_sweep.SPEC,
)

#: Every kind of model call by name: each model pass's own, and merge repair (a call memory consolidation makes). The
#: passes hand their calls to the model layer; this table is for whoever holds only a name (tools, benchmarks).
MODEL_CALLS: dict[str, ModelCall] = {
    **{spec.name: spec.model_call for spec in PASSES if spec.model_call is not None},
    memory_consolidation.MERGE_REPAIR.name: memory_consolidation.MERGE_REPAIR,
    memory_consolidation.CLUSTER_CHECK.name: memory_consolidation.CLUSTER_CHECK,
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


class UnknownPass(ValueError):
    pass


def parse_forced(value: str | None) -> list[str]:
    """The pass names of a ``dream/force`` value (commas or spaces between them); an unknown name is refused with the
    list of passes."""
    names = [n for n in (value or "").replace(",", " ").split() if n]
    known = [p.name for p in PASSES]
    unknown = [n for n in names if n not in known]
    if unknown:
        raise UnknownPass(f"unknown pass(es) {', '.join(map(repr, unknown))} to force; passes: {', '.join(known)}")
    return list(dict.fromkeys(names))


class PassRunning(RuntimeError):
    """A pass of the agent is running (a cycle is in progress), so what needs the agent's passes still waits."""

    def __init__(self, agent: str, pass_name: str, waited: float) -> None:
        self.pass_name = pass_name
        super().__init__(
            f"pass {pass_name} is running for agent {agent!r} (a cycle is in progress; waited {waited:.0f}s): try "
            "again when it finishes, or pass --wait SECONDS"
        )


@contextmanager
def no_pass_running(profile: AgentProfile, *, wait: float = 0.0) -> Iterator[None]:
    """Hold every pass's lock of the agent (each pass takes its own while it runs), waiting up to ``wait`` seconds in
    all: no pass runs meanwhile, and a pass that starts finds its lock held and skips. Raises ``PassRunning`` naming
    the pass still running after ``wait``."""
    deadline = time.monotonic() + max(0.0, wait)
    with ExitStack() as held:
        for spec in PASSES:
            left = max(0.0, deadline - time.monotonic())
            try:
                held.enter_context(path_lock(profile.pass_lock_path(spec.name), timeout=left))
            except LockTimeout:
                raise PassRunning(profile.agent_id, spec.name, wait) from None
        yield
