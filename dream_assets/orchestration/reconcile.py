"""A cycle run that failed after its passes applied is reconciled with their pass records.

The pass records and the ledger are the truth: a pass writes its record with its ledger stamp, in the same step that
commits its changes. Dagster's record of the pass is written after that — so when that write fails (the instance's
database went away) or the process dies after the store commit, the run ends FAILURE (or is marked failed by the
liveness check) and the UI would show the pass as not materialized although its changes are in the store.

So for every cycle run that ended FAILURE or CANCELED, each pass whose record says this run completed it but whose
materialization the run's event log lacks gets a runless materialization of the agent's partition, whose metadata
names the run and says "applied; the run's own record failed", and the cycle report (``reports/<run id>.md``) gets a
line saying so. A failed or skipped pass is never turned into a materialization: a failure stays a failure. Each run
is reconciled once (the ``dream/reconciled`` run tag says how); `dream run` reconciles its own run when it ends, and
the daemon's ``dead_run_sensor`` every run launched otherwise (sensors, schedules, the fleet).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

import dagster as dg

from dream_assets.orchestration.deployment import CYCLE_JOB, PARTITION_TAG, DreamDeployment
from dream_assets.profile import AgentProfile

log = logging.getLogger("dream_assets.orchestration.reconcile")

RECONCILED_TAG = "dream/reconciled"
#: Failed runs that finished longer ago than this are not looked at again (the sensor runs every 30 s).
RECONCILE_WINDOW = timedelta(days=2)
#: Failed cycle runs looked at per call, newest first.
RECONCILE_LIMIT = 100
_FAILED = [dg.DagsterRunStatus.FAILURE, dg.DagsterRunStatus.CANCELED]


@dataclass(frozen=True)
class Reconciled:
    run_id: str
    agent: str
    passes: list[str]  # passes shown from their pass records


def recorded_from(run_id: str, why: str) -> str:
    """The ``recorded_from`` metadata of a materialization written from a pass record."""
    return f"the pass record of run {run_id} ({why})"


def report_from_pass_records(
    instance: dg.DagsterInstance, run_id: str, agent: str, outcomes: Mapping[str, tuple[str, str]], *, why: str
) -> None:
    """One runless materialization of ``agent``'s partition per pass of ``outcomes`` (pass -> (status, summary)),
    naming the run and ``why`` Dagster did not record it itself; raises when the instance cannot take them."""
    for name, (status, summary) in outcomes.items():
        instance.report_runless_asset_event(
            dg.AssetMaterialization(
                asset_key=name,
                partition=agent,
                metadata={"status": status, "summary": summary, "recorded_from": recorded_from(run_id, why)},
            )
        )


def unrecorded_passes(instance: dg.DagsterInstance, run_id: str, profile: AgentProfile) -> dict[str, dict[str, Any]]:
    """The pass records this run wrote whose pass the run's event log holds no materialization of."""
    from dream_assets.passes.outcome import load_outcomes
    from dream_assets.passes.registry import PASSES

    recorded = {
        entry.dagster_event.asset_key.to_user_string()
        for entry in instance.all_logs(run_id, of_type=dg.DagsterEventType.ASSET_MATERIALIZATION)
        if entry.dagster_event is not None and entry.dagster_event.asset_key is not None
    }
    missing = [spec.name for spec in PASSES if spec.name not in recorded]
    return {
        name: record
        for name, record in load_outcomes(profile, missing).items()
        if record.get("cycle_id") == run_id  # an earlier run's outcome: this run did not get to the pass
    }


def reconcile_run(
    instance: dg.DagsterInstance,
    run: dg.DagsterRun,
    profile: AgentProfile,
    options: Any,
) -> Reconciled:
    """Reconcile one finished, failed cycle run with its pass records (see the module), and tag it reconciled."""
    applied = {
        name: (str(record["status"]), str(record.get("summary") or record.get("reason") or ""))
        for name, record in unrecorded_passes(instance, run.run_id, profile).items()
        if record.get("status") == "completed"
    }
    if applied:
        report_from_pass_records(
            instance, run.run_id, profile.agent_id, applied, why="applied; the run's own record failed"
        )
        note = (
            f"Reconciled after the run ended {run.status.value}: {', '.join(applied)} applied its changes and "
            "stamped the ledger, but the run's own record of it failed; Dagster shows it from its pass record."
        )
        _note_in_cycle_report(profile, options, run.run_id, note)
    instance.add_run_tags(
        run.run_id, {RECONCILED_TAG: f"{len(applied)} pass(es) shown from their pass records" if applied else "none"}
    )
    return Reconciled(run.run_id, profile.agent_id, list(applied))


def _note_in_cycle_report(profile: AgentProfile, options: Any, cycle_id: str, note: str) -> None:
    from dream_assets.cycle_report import build_cycle_report, write_cycle_report
    from dream_assets.passes.registry import PASSES
    from dream_assets.store import open_store

    store = open_store(profile, options)
    write_cycle_report(profile, build_cycle_report(profile, store, cycle_id, [p.name for p in PASSES], notes=[note]))


def reconcile_failed_runs(
    instance: dg.DagsterInstance,
    deployment: DreamDeployment,
    *,
    keep: str | None = None,
    now: Callable[[], float] = time.time,
) -> list[Reconciled]:
    """Reconcile every cycle run that ended FAILURE or CANCELED within ``RECONCILE_WINDOW`` and was not reconciled
    yet. Never raises for one run: one that cannot be handled now (its profile unreadable, the database away) is
    logged and tried again at the next call; a run whose agent has no profile here is tagged and left."""
    records = instance.get_run_records(
        filters=dg.RunsFilter(
            job_name=CYCLE_JOB,
            statuses=_FAILED,
            updated_after=datetime.fromtimestamp(now(), UTC) - RECONCILE_WINDOW,
        ),
        limit=RECONCILE_LIMIT,
    )
    done: list[Reconciled] = []
    for record in records:
        run = record.dagster_run
        agent = run.tags.get(PARTITION_TAG)
        if run.run_id == keep or RECONCILED_TAG in run.tags or not agent:
            continue
        try:
            try:
                profile = deployment.run_profile(agent)
            except (dg.Failure, ValueError) as exc:  # no profile of that agent on this machine, or a bad id
                why = exc.description if isinstance(exc, dg.Failure) else str(exc)
                instance.add_run_tags(run.run_id, {RECONCILED_TAG: f"not here: {why}"[:500]})
                continue
            done.append(reconcile_run(instance, run, profile, deployment.options(profile)))
        except Exception as exc:  # noqa: BLE001 - one run that cannot be reconciled never stops the others
            log.warning(
                "could not reconcile failed run %s of agent %s with its pass records: %s", run.run_id, agent, exc
            )
    return done
