"""The Dagster definitions, one module per area: the input sources, the passes, the cycle's close (snapshot and
memory audit), the day partitions over the log warehouse, and the automation (schedules and sensors). Each module
assembles its part with ``@dg.definitions``; ``dream_assets.definitions`` merges them. The building blocks they share
live in ``dream_assets.orchestration``."""
