"""Run tags a dream cycle reads: which passes are forced past their change gate and minimum-interval floor, and why."""

import dagster as dg

# parse_forced lives with the passes: `dream run --force` reads it on an install without Dagster
from dream_assets.passes.registry import UnknownPass, parse_forced

__all__ = ["FORCE_REASON_TAG", "FORCE_TAG", "USES_MODEL_TAG", "UnknownPass", "forced_reason", "parse_forced"]

#: Run tag naming the passes (comma-separated) that ignore their change gate and minimum-interval floor in this run.
FORCE_TAG = "dream/force"
#: Run tag: why they were forced (recorded in the pass ledger); default: "run tag dream/force".
FORCE_REASON_TAG = "dream/force_reason"
#: Run tag on every run that may call the model: the fleet instance limits how many such runs are in progress at once
#: (deploy/dagster-postgres.yaml), on top of the ``llm`` pool that limits the calls themselves.
USES_MODEL_TAG = "dream/uses_model"


def forced_reason(tags: dict[str, str], pass_name: str) -> str | None:
    """Why ``pass_name`` is forced in a run with these tags, or None when it is not."""
    try:
        forced = parse_forced(tags.get(FORCE_TAG))
    except UnknownPass as exc:
        raise dg.Failure(description=f"run tag {FORCE_TAG}: {exc}", allow_retries=False) from None
    if pass_name not in forced:
        return None
    return (tags.get(FORCE_REASON_TAG) or "").strip() or f"run tag {FORCE_TAG}"
