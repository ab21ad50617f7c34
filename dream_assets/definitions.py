"""The Definitions object: assembly only."""

import dagster as dg

from dream_assets.defs.deployment import DreamDeployment
from dream_assets.defs.passes import dream_cycle, pass_assets
from dream_assets.defs.resources import ModelResource
from dream_assets.defs.sources import source_assets


def build_definitions(deployment: DreamDeployment | None = None, model: ModelResource | None = None) -> dg.Definitions:
    return dg.Definitions(
        assets=[*source_assets, *pass_assets],
        jobs=[dream_cycle],
        resources={"deployment": deployment or DreamDeployment(), "model": model or ModelResource()},
    )


defs = build_definitions()
