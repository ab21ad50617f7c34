"""One asset per dream pass, built from the pass registry. Each asset only wires inputs, calls the pass function and
turns its report into metadata; the pass itself lives in dream_assets/passes/.

A failed pass is never green. Its ``pass_completed`` check fails with ERROR severity and says which agent and why, and
the run fails. The run is failed by its last step (``corpus_snapshot`` in a whole cycle, the pass itself when a
change-gate sensor ran it alone) rather than by the failed pass, because a step that raises makes Dagster skip every
step downstream of it, and the rest of the cycle must still run (spec: a failed pass is retried next cycle, the cycle
goes on). Skipped and deferred passes stay green with their reason.
"""

from collections.abc import Iterator

import dagster as dg

from dream_assets.defs.deployment import DreamDeployment, run_now
from dream_assets.defs.metadata import label_metadata, report_metadata, stage_tags
from dream_assets.defs.partitions import agents_partitions
from dream_assets.defs.resources import ModelResource
from dream_assets.passes.context import PassContext
from dream_assets.passes.registry import PASSES, PassSpec
from dream_assets.passes.report import PassReport

COMPLETED_CHECK = "pass_completed"
#: Run tag naming the passes (comma-separated) that ignore their change gate and minimum-interval floor in this run.
FORCE_TAG = "dream/force"
#: Run tag: why they were forced (recorded in the pass ledger); default: "run tag dream/force".
FORCE_REASON_TAG = "dream/force_reason"


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


def forced_reason(tags: dict[str, str], pass_name: str) -> str | None:
    """Why ``pass_name`` is forced in a run with these tags, or None when it is not."""
    try:
        forced = parse_forced(tags.get(FORCE_TAG))
    except UnknownPass as exc:
        raise dg.Failure(description=f"run tag {FORCE_TAG}: {exc}", allow_retries=False) from None
    if pass_name not in forced:
        return None
    return (tags.get(FORCE_REASON_TAG) or "").strip() or f"run tag {FORCE_TAG}"


def completed_check(pass_name: str, agent: str, report: PassReport) -> dg.AssetCheckResult:
    """The ``pass_completed`` result: fails (ERROR) for a failed pass, naming the agent and the reason."""
    reason = report.reason or report.summary
    if report.status == "failed":
        description = f"{pass_name} failed for agent {agent}: {reason}"
    elif report.status == "completed":
        description = f"{pass_name} completed for agent {agent}: {report.summary}"
    else:
        description = f"{pass_name} {report.status} for agent {agent}: {reason}"
    return dg.AssetCheckResult(
        check_name=COMPLETED_CHECK,
        passed=report.status != "failed",
        severity=dg.AssetCheckSeverity.ERROR,
        description=description[:2000],
        metadata={"agent": agent, "status": report.status, "reason": reason},
    )


def failed_passes(context: dg.AssetExecutionContext) -> list[str]:
    """The failed ``pass_completed`` checks recorded so far in this run, as their descriptions (agent and reason)."""
    seen: dict[str, str] = {}
    for entry in context.instance.all_logs(context.run_id, of_type=dg.DagsterEventType.ASSET_CHECK_EVALUATION):
        evaluation = entry.dagster_event.event_specific_data if entry.dagster_event else None
        if evaluation is None or evaluation.check_name != COMPLETED_CHECK or evaluation.passed:
            continue
        seen[evaluation.asset_key.to_user_string()] = evaluation.description or evaluation.asset_key.to_user_string()
    return list(seen.values())


def _selected_downstream(context: dg.AssetExecutionContext) -> bool:
    """Whether any asset downstream of this step's asset is part of this run."""
    layer = context.job_def.asset_layer
    selected, graph = set(layer.selected_asset_keys), layer.asset_graph
    pending, seen = list(graph.get(context.asset_key).child_keys), set()
    while pending:
        key = pending.pop()
        if key in seen or not graph.has(key):
            continue
        if key in selected:
            return True
        seen.add(key)
        pending.extend(graph.get(key).child_keys)
    return False


def fail_run_if_passes_failed(context: dg.AssetExecutionContext) -> None:
    """Called by a step after it materialized: when nothing downstream of it runs in this run (it is a last step) and
    a pass of this run failed, fail the step (and so the run), naming the failed passes, the agent and the reasons."""
    if _selected_downstream(context):
        return
    failed = failed_passes(context)
    if failed:
        raise dg.Failure(
            description=f"{len(failed)} pass(es) failed: " + "; ".join(failed),
            metadata={"failed_passes": "\n".join(failed)},
            allow_retries=False,
        )


def _pass_asset(spec: PassSpec) -> dg.AssetsDefinition:
    @dg.asset(
        name=spec.name,
        group_name=spec.group,
        description=spec.description,
        partitions_def=agents_partitions,
        deps=[*spec.after, *spec.reads],
        pool="llm" if spec.uses_model else None,
        kinds={"python", "llm"} if spec.uses_model else {"python"},
        tags=stage_tags(spec.group),
        metadata=label_metadata(spec.description.split(" — ")[0]),
        check_specs=[
            dg.AssetCheckSpec(
                COMPLETED_CHECK,
                asset=spec.name,
                description="The pass completed, or skipped / deferred for a stated reason. "
                "Fails (ERROR) when the pass failed, naming the agent and why.",
            )
        ],
    )
    def _asset(
        context: dg.AssetExecutionContext, deployment: DreamDeployment, model: ModelResource
    ) -> Iterator[dg.MaterializeResult]:
        agent = context.partition_key
        profile = deployment.profile(agent)
        options = deployment.options(profile)
        ctx = PassContext(
            profile,
            options,
            run_now(context),
            cycle_id=context.run.run_id,
            client_factory=lambda: model.client(profile, options),
            force=forced_reason(context.run.tags, spec.name),
        )
        report = spec.run(ctx)  # never raises: a failed pass is a report with status "failed"
        for line in report.lines:
            context.log.info(line)
        if report.status == "failed":
            context.log.error(f"{spec.name} for agent {agent}: {report.summary or report.reason}")
        else:
            context.log.info(f"{spec.name}: {report.summary or report.reason}")
        yield dg.MaterializeResult(
            metadata=report_metadata(report), check_results=[completed_check(spec.name, agent, report)]
        )
        fail_run_if_passes_failed(context)

    return _asset


pass_assets = [_pass_asset(spec) for spec in PASSES]
dream_cycle = dg.define_asset_job(
    "dream_cycle",
    selection=dg.AssetSelection.assets(*[spec.name for spec in PASSES], "corpus_snapshot"),
    partitions_def=agents_partitions,
    description="One dream cycle for one agent: every pass in the specification's order. When a pass fails, the "
    "other passes still run and the run fails at its last step, naming the failed passes.",
)
