"""Housekeeping of the Dagster instance itself: pool slots of dead runs are freed (``dead_run_sensor``,
orchestration/run_liveness.py), failed cycle runs are reconciled with the pass records of the passes they applied
(the same sensor, orchestration/reconcile.py), and finished runs older than ``RunRetention`` are deleted, with their
event logs, once a day. With many agents the run history grows by a cycle per agent per interval plus every gate run;
Dagster's own retention settings cover ticks (deploy/dagster-postgres.yaml), not runs."""

from datetime import datetime

import dagster as dg

from dream_assets.model import iso
from dream_assets.orchestration.deployment import DreamDeployment
from dream_assets.orchestration.reconcile import reconcile_failed_runs
from dream_assets.orchestration.run_liveness import free_slots_of_dead_runs

#: Runs deleted by one housekeeping run at most; the rest go the next day (keeps each run short on a large history).
MAX_DELETED_PER_RUN = 20_000
_FINISHED = [dg.DagsterRunStatus.SUCCESS, dg.DagsterRunStatus.FAILURE, dg.DagsterRunStatus.CANCELED]


def delete_old_runs(instance: dg.DagsterInstance, cutoff: datetime, *, keep: str | None = None) -> int:
    """Delete finished runs created before ``cutoff`` (never ``keep``, the run doing it); the number deleted."""
    deleted = 0
    while deleted < MAX_DELETED_PER_RUN:
        records = instance.get_run_records(
            filters=dg.RunsFilter(statuses=_FINISHED, created_before=cutoff),
            limit=min(500, MAX_DELETED_PER_RUN - deleted),
            ascending=True,
        )
        batch = [r.dagster_run.run_id for r in records if r.dagster_run.run_id != keep]
        if not batch:
            break
        for run_id in batch:
            instance.delete_run(run_id)
        deleted += len(batch)
    return deleted


@dg.op(description="Deletes finished runs older than RunRetention, with their events.")
def prune_old_runs(context: dg.OpExecutionContext, deployment: DreamDeployment) -> None:
    retention = deployment.base_options().RunRetention
    if not retention:
        context.log.info("RunRetention is zero: every run is kept")
        return
    cutoff = deployment.clock() - retention
    deleted = delete_old_runs(context.instance, cutoff, keep=context.run_id)
    context.log.info(f"deleted {deleted} finished run(s) created before {iso(cutoff)} (RunRetention {retention})")


@dg.job(description="Deletes finished runs older than RunRetention (default 30 days), with their events.")
def run_retention_job():
    prune_old_runs()


run_retention_schedule = dg.ScheduleDefinition(
    name="run_retention_schedule",
    job=run_retention_job,
    cron_schedule="45 2 * * *",
    execution_timezone="UTC",
    default_status=dg.DefaultScheduleStatus.RUNNING,
    description="Once a day: finished runs older than RunRetention are deleted with their events.",
)


@dg.sensor(
    name="dead_run_sensor",
    minimum_interval_seconds=30,
    default_status=dg.DefaultSensorStatus.RUNNING,
    description="Every 30 s: a run that holds or waits for a pool slot and has died (its process gone, or no "
    "heartbeat for RunTimeout) is marked failed and its slots are freed, so one crash never stops the fleet's model "
    "passes; and a cycle run that ended failed or canceled after some of its passes applied shows those passes "
    "from their pass records (a materialization naming the run, a line in the cycle report).",
)
def dead_run_sensor(context: dg.SensorEvaluationContext, deployment: DreamDeployment) -> dg.SkipReason:
    freed = free_slots_of_dead_runs(context.instance, timeout_s=deployment.run_timeout_s())
    said = (
        ["freed the pool slots of " + "; ".join(f"run {d.run_id}: {d.why}" for d in freed)]
        if freed
        else ["no dead run holds a pool slot"]
    )
    # A cycle run that failed after passes applied (its event-log write failed, its process died after the store
    # commit; one marked failed just above too) shows those passes from their pass records, as the store has them.
    reconciled = [r for r in reconcile_failed_runs(context.instance, deployment) if r.passes]
    if reconciled:
        said.append(
            "reconciled with their pass records: "
            + "; ".join(f"run {r.run_id} of agent {r.agent} ({', '.join(r.passes)} applied)" for r in reconciled)
        )
    return dg.SkipReason("; ".join(said))


@dg.definitions
def defs() -> dg.Definitions:
    """The daily deletion of old runs, and the freeing of pool slots of dead runs."""
    return dg.Definitions(jobs=[run_retention_job], schedules=[run_retention_schedule], sensors=[dead_run_sensor])
