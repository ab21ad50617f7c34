"""Running one dream cycle through Dagster from the command line (`dream run`)."""

from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import dagster as dg

from dream_assets.definitions import build_definitions
from dream_assets.folders import READ_STEP
from dream_assets.launch.agents import project_instance
from dream_assets.orchestration.deployment import NOW_TAG, DreamDeployment
from dream_assets.orchestration.partitions import AGENTS
from dream_assets.orchestration.reconcile import RECONCILED_TAG, report_from_pass_records
from dream_assets.orchestration.run_liveness import SlotWait, free_slots_of_dead_runs
from dream_assets.orchestration.run_tags import FORCE_REASON_TAG, FORCE_TAG, parse_forced
from dream_assets.profile import AgentProfile


@dataclass
class CycleRun:
    run_id: str
    success: bool
    persistent: bool  # recorded in a DAGSTER_HOME instance the UI can show
    instance: str | None = None  # the folder of that instance (None: an ephemeral one, gone with the process)
    summaries: dict[str, tuple[str, str]] = field(default_factory=dict)  # pass -> (status, summary)
    model_calls: int = 0  # calls that reached the model (answered + failed)
    failed_calls: int = 0  # of those: errors and unusable answers
    failed: dict[str, str] = field(default_factory=dict)  # failed pass -> reason
    step_errors: list[str] = field(default_factory=list)  # steps that raised (not pass failures)
    #: The memory audit's checks after the cycle: name -> None when it passed, else what it found. A failed check of
    #: ERROR severity is also in ``step_errors``.
    checks: dict[str, str | None] = field(default_factory=dict)
    interrupted: bool = False  # stopped by SIGTERM/SIGINT (while a step waited for a pool slot, or in a step)
    freed_runs: list[str] = field(default_factory=list)  # dead runs whose pool slots this run freed, with why
    from_pass_records: list[str] = field(default_factory=list)  # passes Dagster did not record: read from their record
    #: The linked memory folder: what the cycle read from it and wrote back ("status: summary"); None without one.
    folder_read: str | None = None
    folder_written: str | None = None

    @property
    def answered_calls(self) -> int:
        return self.model_calls - self.failed_calls

    @property
    def ok(self) -> bool:
        """The cycle succeeded: the run did, and no pass failed."""
        return self.success and not self.failed and not self.step_errors


def run_cycle_in_dagster(
    profile: AgentProfile,
    *,
    now: str | None = None,
    force: Sequence[str] = (),
    force_reason: str | None = None,
    log_level: str = "CRITICAL",
) -> CycleRun:
    """Materialize the dream_cycle job for one agent in this process, on the project's persistent instance when there
    is one (DAGSTER_HOME, else ``.dagster_home`` in the working directory: `make dev` shows the run) or an ephemeral
    one, then the memory audit over the snapshot the cycle wrote (its
    four checks are evaluated, as the daily audit schedule does). ``force``: passes that ignore their change gate
    and minimum-interval floor in this run (the ``dream/force`` run tag), ``force_reason`` saying why.
    ``log_level``: what Dagster's console logger prints (the run's events and failures' stack traces)."""
    tags = {NOW_TAG: now} if now else {}
    if force:
        tags[FORCE_TAG] = ",".join(parse_forced(",".join(force)))
        tags[FORCE_REASON_TAG] = force_reason or "dream run --force"
    deployment = DreamDeployment(profile_root=str(profile.root.parent))
    defs = build_definitions(deployment=deployment)
    found = project_instance()
    home = str(found.resolve()) if found is not None else None
    if home:
        Path(home).mkdir(parents=True, exist_ok=True)
    instance = dg.DagsterInstance.from_config(home) if home else dg.DagsterInstance.ephemeral()
    timeout_s = deployment.run_timeout_s()
    with instance, SlotWait(instance, timeout_s=timeout_s) as slots:
        if not instance.has_dynamic_partition(AGENTS, profile.agent_id):
            instance.add_dynamic_partitions(AGENTS, [profile.agent_id])
        run_config = {"loggers": {"console": {"config": {"log_level": log_level}}}}
        # Slots held by runs that died (killed, their machine gone) come back before this run needs one.
        slots.freed += free_slots_of_dead_runs(instance, timeout_s=timeout_s)
        result = defs.resolve_job_def("dream_cycle").execute_in_process(
            instance=instance, partition_key=profile.agent_id, tags=tags, raise_on_error=False, run_config=run_config
        )
        run = CycleRun(result.run_id, result.success, persistent=bool(home), instance=home)
        run.interrupted = slots.interrupted
        run.freed_runs = [f"{dead.run_id}: {dead.why}" for dead in slots.freed]
        for event in result.get_asset_materialization_events():
            mat = event.event_specific_data.materialization  # type: ignore[union-attr]
            meta = mat.metadata if mat is not None else {}
            if "memory_folder" in meta and not str(meta["memory_folder"].value).startswith("skipped"):
                run.folder_written = str(meta["memory_folder"].value)  # the write-back, in the cycle's snapshot step
            if "status" not in meta:
                continue
            name = mat.asset_key.to_user_string()
            if name == READ_STEP and str(meta["status"].value) != "skipped":
                run.folder_read = f"{meta['status'].value}: {meta['summary'].value}"
            status = str(meta["status"].value)
            run.summaries[name] = (status, str(meta["summary"].value))
            if status == "failed":
                run.failed[name] = str(meta["reason"].value) if "reason" in meta else str(meta["summary"].value)
            run.model_calls += int(meta["model_calls"].value) if "model_calls" in meta else 0
            run.failed_calls += int(meta["model_failed_calls"].value) if "model_failed_calls" in meta else 0
        for event in result.get_step_failure_events():
            data = event.event_specific_data
            user = getattr(data, "user_failure_data", None)
            if user is not None and "failed_passes" in (user.metadata or {}) and run.failed:
                continue  # the last step failing the run because a pass failed: those are listed per pass
            error = getattr(data, "error", None)
            if error is not None and error.cls_name == "DagsterExecutionInterruptedError":
                run.interrupted = True  # a signal stopped the step (Dagster interrupts the pass that runs)
            message = error.message.strip() if error is not None else "failed"
            run.step_errors.append(f"{event.step_key}: {message.splitlines()[0] if message else 'failed'}")
        _fill_from_pass_records(run, profile)
        if run.persistent:
            _record_from_pass_records(instance, run, profile.agent_id)
        if run.interrupted:
            return run  # stopped by a signal: the audit waits for the next run
        audit = defs.resolve_job_def("memory_audit_job").execute_in_process(
            instance=instance,
            partition_key=profile.agent_id,
            tags={NOW_TAG: now} if now else {},
            raise_on_error=False,
            run_config=run_config,
        )
        _audit_checks(run, audit)
        return run


def _audit_checks(run: CycleRun, audit: dg.ExecuteInProcessResult) -> None:
    """The audit's check results into ``run``; a failed ERROR check (or a failed audit) fails the cycle."""
    for check in audit.get_asset_check_evaluations():
        found = None if check.passed else "; ".join(f"{k}: {v.value}" for k, v in check.metadata.items())
        run.checks[check.check_name] = found
        if found is not None and check.severity == dg.AssetCheckSeverity.ERROR:
            run.step_errors.append(f"memory_audit check {check.check_name} failed ({found})")
    if not audit.success:
        for event in audit.get_step_failure_events():
            error = getattr(event.event_specific_data, "error", None)
            message = error.message.strip().splitlines()[0] if error is not None and error.message else "failed"
            run.step_errors.append(f"memory_audit: {message}")


def _record_from_pass_records(instance: dg.DagsterInstance, run: CycleRun, agent: str) -> None:
    """Give the UI the outcome of each pass Dagster did not record, from its pass record: a materialization of the
    pass's partition that says where it comes from, and the run tagged reconciled so the daemon's reconciliation
    does not say it again (best effort: the database may still be away; the daemon then catches up)."""
    try:
        report_from_pass_records(
            instance,
            run.run_id,
            agent,
            {name: run.summaries[name] for name in run.from_pass_records},
            why="its event log write failed",
        )
        if run.from_pass_records and not run.success:
            instance.add_run_tags(run.run_id, {RECONCILED_TAG: f"by dream run: {', '.join(run.from_pass_records)}"})
    except Exception:  # noqa: BLE001 - the CLI has said it; the UI catches up at the daemon's next look
        return


def _fill_from_pass_records(run: CycleRun, profile: AgentProfile) -> None:
    """The status of every pass this run ran but Dagster did not record (its event log write failed: a PostgreSQL
    outage), from the pass's own record, which the pass writes with its ledger stamp: the store is the truth."""
    from dream_assets.passes.outcome import load_outcomes
    from dream_assets.passes.registry import PASSES

    missing = [spec.name for spec in PASSES if spec.name not in run.summaries]
    for name, record in load_outcomes(profile, missing).items():
        if record.get("cycle_id") != run.run_id:
            continue  # an earlier run's outcome: this run did not get to the pass
        status, summary = str(record["status"]), str(record.get("summary") or record.get("reason") or "")
        run.summaries[name] = (status, summary)
        run.from_pass_records.append(name)
        if status == "failed":
            run.failed[name] = str(record.get("reason") or summary)
        calls = record.get("model_calls")
        run.model_calls += calls if isinstance(calls, int) and not isinstance(calls, bool) else 0
