"""The ``pass_completed`` check of every pass asset, and failing a run whose passes failed.

A failed pass is never green. Its ``pass_completed`` check fails with ERROR severity and says which agent and why, and
the run fails. The run is failed by its last step (``corpus_snapshot`` in a whole cycle, the pass itself when a
change-gate sensor ran it alone) rather than by the failed pass, because a step that raises makes Dagster skip every
step downstream of it, and the rest of the cycle must still run (spec: a failed pass is retried next cycle, the cycle
goes on). Skipped and deferred passes stay green with their reason.
"""

import dagster as dg

from dream_assets.passes.report import PassReport

COMPLETED_CHECK = "pass_completed"


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
