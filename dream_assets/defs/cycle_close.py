"""Snapshots of the corpora after each cycle, and the memory audit with its asset checks."""

from collections.abc import Iterator

import dagster as dg

from dream_assets.cycle_report import build_cycle_report, write_cycle_report
from dream_assets.memory_audit import run_audit
from dream_assets.orchestration.deployment import DreamDeployment, run_now
from dream_assets.orchestration.metadata import label_metadata, stage_tags
from dream_assets.orchestration.partitions import agents_partitions
from dream_assets.orchestration.pass_checks import fail_run_if_passes_failed
from dream_assets.passes.registry import PASSES
from dream_assets.service.folders import write_back
from dream_assets.store import open_store
from dream_assets.store.snapshots import prune_snapshots, take_snapshot


@dg.asset(
    name="corpus_snapshot",
    group_name="audit",
    partitions_def=agents_partitions,
    kinds={"parquet"},
    deps=[p.name for p in PASSES],
    tags=stage_tags("audit"),
    metadata=label_metadata("Cycle snapshot and report"),
    description="After a cycle: the linked memory folder written back, snapshots of the corpora, and the cycle "
    "report.\n\n"
    "Parquet snapshots of the memory corpus and skill catalog (live and archived), purge records and the "
    "change log, under snapshots/ in the agent profile; old snapshots are removed after SnapshotRetention "
    "(the newest two are always kept) and the memory audit reads them. The cycle report "
    "(reports/<run id>.md: what changed, what was rejected and why, model calls, how to undo it) is what "
    "`dream report` prints.",
)
def corpus_snapshot(context: dg.AssetExecutionContext, deployment: DreamDeployment) -> Iterator[dg.MaterializeResult]:
    profile = deployment.run_profile(context.partition_key)
    options = deployment.options(profile)
    now = run_now(context)
    folder = write_back(
        profile, options, now, cycle_id=context.run.run_id
    )  # the linked memory folder gets the cycle's result first
    if folder.status == "failed":
        context.log.error(f"memory folder of agent {profile.agent_id}: {folder.reason}")
    store = open_store(profile, options)
    snap, counts = take_snapshot(profile, store, now)
    removed = prune_snapshots(profile, options.SnapshotRetention, now)
    try:  # the report for people who do not open Dagster; never a reason to fail the snapshot
        report_path = str(
            write_cycle_report(
                profile, build_cycle_report(profile, store, context.run.run_id, [p.name for p in PASSES])
            )
        )
    except Exception as exc:  # noqa: BLE001 - logged, the cycle's data is already safe
        context.log.warning(f"could not write the cycle report of agent {profile.agent_id}: {exc}")
        report_path = "not written"
    import pandas as pd  # the dagster extra's: the UI's 10-row preview

    shown = ["id", "category", "content"]
    preview = pd.DataFrame(snap.read("memories", shown)[:10], columns=shown)
    yield dg.MaterializeResult(
        metadata={
            "path": dg.MetadataValue.path(str(snap.path)),
            "dagster/row_count": counts["memories_live"] + counts["memories_archived"],
            **{k: dg.MetadataValue.int(v) for k, v in counts.items()},
            "snapshots_removed": dg.MetadataValue.int(removed),
            "cycle_report": dg.MetadataValue.path(report_path),
            "preview": dg.MetadataValue.md(preview.to_markdown(index=False)),
            "memory_folder": f"{folder.status}: {folder.summary or folder.reason}",
        }
    )
    if folder.status == "failed":
        raise dg.Failure(description=f"memory folder write-back failed: {folder.reason}", allow_retries=False)
    fail_run_if_passes_failed(context)  # the last step of a cycle: the run fails when one of its passes failed


AUDIT_CHECKS = {
    "no_unexplained_deletes": "No memory disappeared between snapshots without an archive-purge record.",
    "provenance_resolves": "Every live merged entry's mergedFrom ids resolve (live, archived, or purged by retention).",
    "no_orphaned_merge_sources": "No source was archived by a merge whose merged entry does not exist.",
    "no_repeated_rejections": "No duplicate cluster has been rejected by the coverage check cycle after cycle.",
}


@dg.asset(
    name="memory_audit",
    group_name="audit",
    partitions_def=agents_partitions,
    deps=["corpus_snapshot"],
    tags=stage_tags("audit"),
    metadata=label_metadata("Memory audit"),
    description="Checks that nothing was lost between the two newest snapshots.\n\nWalks the two newest snapshots: "
    "hard deletes outside the purge, provenance that no longer resolves, "
    "merge sources archived without their merge, clusters rejected every cycle. Keeps a 400-day trend file "
    "(memory-audit/trend.jsonl). With AuditPauseOnHardDelete it pauses memory consolidation on hard deletes.",
    check_specs=[
        dg.AssetCheckSpec(name, asset="memory_audit", description=desc) for name, desc in AUDIT_CHECKS.items()
    ],
)
def memory_audit(context: dg.AssetExecutionContext, deployment: DreamDeployment) -> dg.MaterializeResult:
    profile = deployment.run_profile(context.partition_key)
    options = deployment.options(profile)
    result = run_audit(profile, options, run_now(context))
    warn = dg.AssetCheckSeverity.WARN
    checks = [
        dg.AssetCheckResult(
            check_name="no_unexplained_deletes",
            passed=not result.unexplained_deletes,
            metadata={
                "ids": ", ".join(result.unexplained_deletes[:50]) or "none",
                "consolidation_paused": result.paused,
            },
        ),
        dg.AssetCheckResult(
            check_name="provenance_resolves",
            passed=not result.dangling_provenance,
            metadata={"dangling": ", ".join(result.dangling_provenance[:50]) or "none"},
        ),
        dg.AssetCheckResult(
            check_name="no_orphaned_merge_sources",
            passed=not result.orphaned_sources,
            metadata={"ids": ", ".join(result.orphaned_sources[:50]) or "none"},
        ),
        dg.AssetCheckResult(
            check_name="no_repeated_rejections",
            passed=not result.repeated_rejections,
            severity=warn,
            metadata={"clusters": ", ".join(f"{k} ({v}×)" for k, v in result.repeated_rejections.items()) or "none"},
        ),
    ]
    return dg.MaterializeResult(
        metadata={
            "snapshot": result.snapshot or "none",
            "compared_with": result.compared_with or "none",
            **{k: dg.MetadataValue.int(v) for k, v in result.counts.items()},
        },
        check_results=checks,
    )


memory_audit_job = dg.define_asset_job(
    "memory_audit_job",
    selection=dg.AssetSelection.assets("memory_audit"),
    partitions_def=agents_partitions,
    description="The memory audit on its own schedule, from the newest snapshots.",
)

memory_audit_schedule = dg.ScheduleDefinition(
    name="memory_audit_schedule",
    job=memory_audit_job,
    cron_schedule="30 3 * * *",
    execution_timezone="UTC",
    default_status=dg.DefaultScheduleStatus.RUNNING,
    description="The memory audit, daily, from the newest snapshots.",
)


@dg.definitions
def defs() -> dg.Definitions:
    """The cycle's snapshot and report, and the memory audit with its job and daily schedule."""
    return dg.Definitions(
        assets=[corpus_snapshot, memory_audit], jobs=[memory_audit_job], schedules=[memory_audit_schedule]
    )
