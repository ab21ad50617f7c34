"""The Definitions object: assembly only."""

import os

import dagster as dg

from dream_assets.defs.automation import build_automation
from dream_assets.defs.cycle_close import corpus_snapshot, memory_audit, memory_audit_job
from dream_assets.defs.daily_partitions import history_assets
from dream_assets.defs.deployment import DreamDeployment
from dream_assets.defs.passes import dream_cycle, pass_assets
from dream_assets.defs.resources import ModelResource
from dream_assets.defs.sources import SOURCES, source_assets
from dream_assets.options import DreamOptions

observe_inputs = dg.define_asset_job(
    "observe_inputs",
    selection=dg.AssetSelection.assets(*SOURCES),
    description="Observe every input's fingerprint (data version).",
)


def build_definitions(
    deployment: DreamDeployment | None = None,
    model: ModelResource | None = None,
    options: DreamOptions | None = None,
) -> dg.Definitions:
    options = options or DreamOptions.load(env=os.environ)
    schedules, sensors = build_automation(dream_cycle, options)
    return dg.Definitions(
        assets=[*source_assets, *pass_assets, corpus_snapshot, memory_audit, *history_assets],
        jobs=[dream_cycle, memory_audit_job, observe_inputs],
        schedules=[
            *schedules,
            dg.ScheduleDefinition(
                name="memory_audit_schedule",
                job=memory_audit_job,
                cron_schedule="30 3 * * *",
                execution_timezone="UTC",
                default_status=dg.DefaultScheduleStatus.RUNNING,
                description="The memory audit, daily, from the newest snapshots.",
            ),
            dg.ScheduleDefinition(
                name="observe_inputs_schedule",
                job=observe_inputs,
                cron_schedule="*/15 * * * *",
                execution_timezone="UTC",
                default_status=dg.DefaultScheduleStatus.RUNNING,
                description="Re-observe the inputs so lineage shows when each actually moved.",
            ),
        ],
        sensors=sensors,
        resources={"deployment": deployment or DreamDeployment(), "model": model or ModelResource()},
    )


defs = build_definitions()
