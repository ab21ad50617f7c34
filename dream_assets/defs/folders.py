"""The first step of a cycle: the agent's linked markdown memory folder read into the store (the write-back is the
cycle's close, in cycle_close.py). Both call the library (dream_assets/folders), as the in-process cycle does."""

from collections.abc import Iterator

import dagster as dg

from dream_assets.folders import READ_STEP, read_folder
from dream_assets.orchestration.deployment import DreamDeployment, run_now
from dream_assets.orchestration.metadata import label_metadata, report_metadata, stage_tags
from dream_assets.orchestration.partitions import agents_partitions
from dream_assets.orchestration.pass_checks import COMPLETED_CHECK, completed_check


@dg.asset(
    name=READ_STEP,
    group_name="inputs",
    partitions_def=agents_partitions,
    kinds={"python"},
    tags=stage_tags("inputs"),
    metadata=label_metadata("Memory folder read"),
    description="Before the passes: the markdown memory folder linked to the agent (dream link) read into the "
    "store, each note with its file, heading path and front matter; a folder that cannot be read safely fails this "
    "step naming the file, and the store and the folder stay as they were. Skipped when no folder is linked.",
    check_specs=[
        dg.AssetCheckSpec(
            COMPLETED_CHECK,
            asset=READ_STEP,
            description="The folder was read, or no folder is linked. Fails (ERROR) naming the file that could not be.",
        )
    ],
)
def memory_folder_read(
    context: dg.AssetExecutionContext, deployment: DreamDeployment
) -> Iterator[dg.MaterializeResult]:
    profile = deployment.run_profile(context.partition_key)
    report = read_folder(profile, deployment.options(profile), run_now(context))
    if report.status == "failed":
        context.log.error(f"{READ_STEP} for agent {profile.agent_id}: {report.reason}")
    yield dg.MaterializeResult(
        metadata=report_metadata(report),
        check_results=[completed_check(READ_STEP, profile.agent_id, report)],
    )
