"""Dagster building blocks the definitions in ``dream_assets.defs`` are made of: partitions, resources, run tags,
metadata and the pass checks. Nothing here imports a definition module.

Our definitions use a few Dagster APIs that Dagster marks beta or preview (observable source assets, backfill
policies). Dagster warns once per definition in every process that loads them (the webserver, the daemon, each
code-server reload and each run's step processes), so `make dev` and a backfill would print hundreds of identical
warnings. Those two categories are silenced here, before any definition is built (every definition module imports
this package); every other warning still shows.
"""

import warnings

from dagster import BetaWarning, PreviewWarning

warnings.filterwarnings("ignore", category=BetaWarning)
warnings.filterwarnings("ignore", category=PreviewWarning)
