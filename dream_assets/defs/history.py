"""Daily partitions over the log warehouse, per agent: the warehouse day itself and the backfillable analyses."""

from datetime import date

import dagster as dg

from dream_assets.defs.deployment import DreamDeployment, run_now
from dream_assets.defs.partitions import agent_day_partitions
from dream_assets.history import run_analysis, sync_day_to_warehouse

_SINGLE_RUN = dg.BackfillPolicy.single_run()


def _keys(context: dg.AssetExecutionContext) -> list[tuple[str, date]]:
    """(agent, day) of every partition in this run: one, or a whole backfill range in a single run."""
    out = []
    for key in context.partition_keys:
        mk = key if isinstance(key, dg.MultiPartitionKey) else dg.MultiPartitionKey(
            dict(zip(("agent", "date"), str(key).split("|"), strict=True)))
        parts = mk.keys_by_dimension
        out.append((parts["agent"], date.fromisoformat(parts["date"])))
    return out


@dg.asset(
    name="log_warehouse", group_name="logs", partitions_def=agent_day_partitions, backfill_policy=_SINGLE_RUN,
    deps=["log_retention"], kinds={"parquet"},
    description="Day-partitioned Parquet copy of every telemetry and conversation log line (warehouse/ in the profile). "
                "Log retention and preference inference copy lines here before removing them; materializing a day also "
                "copies that day's lines still in the JSONL logs. Idempotent: a line is stored once.",
)
def log_warehouse(context: dg.AssetExecutionContext, deployment: DreamDeployment) -> dg.MaterializeResult:
    now = run_now(context)
    totals: dict[str, int] = {}
    for agent, day in _keys(context):
        added = sync_day_to_warehouse(deployment.profile(agent), day, now)
        for kind, n in added.items():
            totals[kind] = totals.get(kind, 0) + n
    return dg.MaterializeResult(metadata={f"added_{k.replace('-', '_')}": dg.MetadataValue.int(v)
                                          for k, v in sorted(totals.items())} |
                                {"partitions": dg.MetadataValue.int(len(context.partition_keys))})


def _history_asset(name: str, group: str, description: str) -> dg.AssetsDefinition:
    @dg.asset(name=name, group_name=group, partitions_def=agent_day_partitions, backfill_policy=_SINGLE_RUN,
              deps=["log_warehouse"], kinds={"parquet"}, description=description)
    def _asset(context: dg.AssetExecutionContext, deployment: DreamDeployment) -> dg.MaterializeResult:
        rows_total = 0
        preview = ""
        for agent, day in _keys(context):
            profile = deployment.profile(agent)
            rows = run_analysis(profile, deployment.options(profile), name, day)
            rows_total += len(rows)
            context.log.info(f"{name} {agent} {day}: {len(rows)} row(s) for the window ending {day} 24:00 UTC")
            if rows and not preview:
                preview = "\n".join(f"- {r}" for r in rows[:10])
        return dg.MaterializeResult(metadata={"dagster/row_count": rows_total,
                                              "partitions": dg.MetadataValue.int(len(context.partition_keys)),
                                              "preview": dg.MetadataValue.md(preview or "_no rows_")})

    return _asset


history_assets = [
    log_warehouse,
    _history_asset("wisp_failure_history", "skills",
                   "For a past day: wisp runs of the 14 days ending that day, per description — failures, success rate, "
                   "failing steps, and which qualify as failure patterns or promotion candidates."),
    _history_asset("tier_routing_history", "memory",
                   "For a past day: routing outcomes per model tier over the 14 days ending that day."),
    _history_asset("skill_usage_history", "skills", "For a past day: 30-day skill usage counts ending that day."),
    _history_asset("recurring_request_history", "skills",
                   "For a past day: request terms recurring across >= 2 conversation sessions in the 30 days ending "
                   "that day (skill-gap and preference mining over archived conversations)."),
]
