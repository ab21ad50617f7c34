"""Partitions: one dynamic partition per agent profile; days over the log warehouse for backfills."""

import dagster as dg

AGENTS = "agents"
agents_partitions = dg.DynamicPartitionsDefinition(name=AGENTS)
daily_partitions = dg.DailyPartitionsDefinition(start_date="2025-01-01", end_offset=1)
agent_day_partitions = dg.MultiPartitionsDefinition({"agent": agents_partitions, "date": daily_partitions})
