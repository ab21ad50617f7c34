"""The project's Definitions: the areas of ``dream_assets.defs`` merged, with the two resources.

Nothing is read from the environment when this module is imported: ``defs`` is loaded by Dagster (the webserver, the
daemon, ``dagster asset materialize``, ``dg check defs``), and only then reads the deployment options. Tests and the
in-process runner call ``build_definitions`` with their own deployment, model and options."""

import os

import dagster as dg

from dream_assets.defs import automation, cycle_close, daily_partitions, housekeeping, passes, review, sources
from dream_assets.options import DreamOptions
from dream_assets.options_loader import load_options
from dream_assets.orchestration.deployment import DreamDeployment
from dream_assets.orchestration.resources import ModelResource


def build_definitions(
    deployment: DreamDeployment | None = None,
    model: ModelResource | None = None,
    options: DreamOptions | None = None,
) -> dg.Definitions:
    """Every area's definitions; ``options`` (default: read from the environment now) set the cycle interval and the
    start-up delay of the automation."""
    options = options or load_options(env=os.environ)
    return dg.Definitions.merge(
        sources.defs(),
        passes.defs(),
        cycle_close.defs(),
        daily_partitions.defs(),
        housekeeping.defs(),
        review.defs(),
        automation.automation_definitions(options),
        dg.Definitions(
            resources={"deployment": deployment or DreamDeployment(), "model": model or ModelResource()},
            # One process per run, not per step: a step process pays an import of Dagster and the project, which
            # made a daemon-launched cycle cost 20x the same passes in-process. Pools and per-pass failure
            # reporting work the same (docs/deployment.md).
            executor=dg.in_process_executor,
        ),
    )


@dg.definitions
def defs() -> dg.Definitions:
    return build_definitions()
