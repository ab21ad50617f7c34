"""Review before apply in Dagster: the ``review_queue`` asset, its ``nothing_waits_for_review`` check, and the
``apply_change_set`` job that applies or rejects a pending change set from the launchpad.

The asset runs at the end of every cycle (after the passes) and shows what waits: its check warns (WARN) naming the
agent and the count while a pass's changes wait for review (ApplyMode ``review`` or ``review-risky``), and passes
when nothing does. ``apply_change_set`` materializes the same asset with a decision in its run config (partition:
the agent; ``cycle`` or ``change_ids``, ``decision`` apply or reject, ``reason``), so after an apply the check turns
green. The decision itself is the service's (``dream_assets.service.review_decide``, the same as ``dream apply``); a
change refused because its target was edited meanwhile, or an id that names nothing waiting, fails the run after the
check was recorded, naming them.
"""

from collections.abc import Iterator

import dagster as dg

from dream_assets import service
from dream_assets.orchestration.deployment import DreamDeployment, run_now
from dream_assets.orchestration.metadata import label_metadata, stage_tags
from dream_assets.orchestration.partitions import agents_partitions
from dream_assets.passes.registry import PASSES

REVIEW_ASSET = "review_queue"
REVIEW_CHECK = "nothing_waits_for_review"


class ChangeSetDecision(dg.Config):
    """What ``apply_change_set`` does: ``decision`` apply or reject (empty: only show what waits) of the whole set of
    ``cycle`` or of the changes ``change_ids`` (ids from ``dream review`` or this asset's metadata), with ``reason``."""

    decision: str = ""
    cycle: str = ""
    change_ids: list[str] = []
    reason: str = ""


@dg.asset(
    name=REVIEW_ASSET,
    group_name="audit",
    partitions_def=agents_partitions,
    deps=[p.name for p in PASSES if p.options is not None and p.options.reviewable()],
    tags=stage_tags("audit"),
    metadata=label_metadata("Changes waiting for review"),
    description="The pending change sets of passes in ApplyMode review or review-risky.\n\nAfter the passes of a "
    "cycle: how many changes wait for `dream apply` / `dream reject`, per pass, and when the first expires "
    "(ReviewExpiryDays). Run by `apply_change_set` with a decision in its run config, it applies or rejects a set "
    "or single changes first.",
    check_specs=[
        dg.AssetCheckSpec(
            REVIEW_CHECK,
            asset=REVIEW_ASSET,
            description="No pass's changes wait for review. Warns (WARN) naming the agent and the count.",
        )
    ],
)
def review_queue(
    context: dg.AssetExecutionContext, config: ChangeSetDecision, deployment: DreamDeployment
) -> Iterator[dg.MaterializeResult]:
    agent = context.partition_key
    profile = deployment.run_profile(agent)
    options = deployment.options(profile)
    now = run_now(context)
    decided: service.ReviewDecision | None = None
    if config.decision:
        if config.decision not in ("apply", "reject"):
            raise dg.Failure(description=f"decision {config.decision!r}: use apply or reject", allow_retries=False)
        if not config.cycle and not config.change_ids:
            raise dg.Failure(description="give the cycle of a set or change_ids to decide on", allow_retries=False)
        decided = service.review_decide(
            profile,
            config.decision,  # type: ignore[arg-type]
            cycle_id=config.cycle or None,
            change_ids=config.change_ids,
            reason=config.reason or f"{config.decision} from Dagster run {context.run.run_id}",
            wait=60.0,
            now=now,
            options=options,
        )
        for c in decided.done:
            context.log.info(f"{config.decision} {c.id}")
        for line in decided.refused + decided.failed + decided.not_found:
            context.log.warning(line)
    listed = service.review_list(profile, options=options, now=now)
    waits = service.review_waits(profile, options=options, now=now)
    description = f"agent {agent}: {waits.line}" if waits.count else f"agent {agent}: nothing waits for review"
    pending = [c for s in listed.sets for c in s.changes]
    listing = "\n".join(f"- `{c.id}` {c.pass_name} {c.label}: {c.summary[:200]}" for c in pending[:200])
    yield dg.MaterializeResult(
        metadata={
            "pending": dg.MetadataValue.int(waits.count),
            "expired": dg.MetadataValue.int(waits.expired),
            "cycles": ", ".join(waits.cycles) or "none",
            "changes": dg.MetadataValue.md(listing or "_nothing waits_"),
            **({"decided": dg.MetadataValue.int(len(decided.done))} if decided else {}),
        },
        check_results=[
            dg.AssetCheckResult(
                check_name=REVIEW_CHECK,
                passed=waits.count == 0,
                severity=dg.AssetCheckSeverity.WARN,
                description=description[:2000],
                metadata={"agent": agent, "pending": waits.count, **{p: n for p, n in waits.by_pass.items()}},
            )
        ],
    )
    if decided is not None and (decided.refused or decided.failed or decided.not_found):
        raise dg.Failure(
            description=f"{config.decision} for agent {agent}: "
            + "; ".join(
                [f"refused {x}" for x in decided.refused]
                + [f"not written {x}" for x in decided.failed]
                + [f"not found {x}" for x in decided.not_found]
            ),
            allow_retries=False,
        )


apply_change_set = dg.define_asset_job(
    "apply_change_set",
    selection=dg.AssetSelection.assets(REVIEW_ASSET),
    partitions_def=agents_partitions,
    description="Apply or reject a pending change set (or single changes) of one agent: run config ops.review_queue."
    "config {decision: apply|reject, cycle, change_ids, reason}; each change is re-checked against the store first.",
)


@dg.definitions
def defs() -> dg.Definitions:
    """What waits for review, and the job that decides on it."""
    return dg.Definitions(assets=[review_queue], jobs=[apply_change_set])
