"""Launching runs of the project's definitions from the command line: one dream cycle in this process (`dream run`)
and a backfill of the day-partitioned assets (`make backfill`). The top layer: it may import
``dream_assets.definitions``; nothing else imports it."""
