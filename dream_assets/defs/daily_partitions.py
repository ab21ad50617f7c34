"""Daily partitions over the log warehouse, per agent: the warehouse day itself and the backfillable analyses."""

from datetime import UTC, date, datetime, time, timedelta

import dagster as dg

from dream_assets.log_analyses import run_analysis, sync_day_to_warehouse
from dream_assets.orchestration.deployment import DreamDeployment, run_now
from dream_assets.orchestration.metadata import label_metadata, stage_tags
from dream_assets.orchestration.partitions import agent_day_partitions
from dream_assets.store import warehouse
from dream_assets.store.log_records import LOG_KINDS

_SINGLE_RUN = dg.BackfillPolicy.single_run()


def _keys(context: dg.AssetExecutionContext) -> list[tuple[str, date]]:
    """(agent, day) of every partition in this run: one, or a whole backfill range in a single run."""
    out = []
    for key in context.partition_keys:
        mk = (
            key
            if isinstance(key, dg.MultiPartitionKey)
            else dg.MultiPartitionKey(dict(zip(("agent", "date"), str(key).split("|"), strict=True)))
        )
        parts = mk.keys_by_dimension
        out.append((parts["agent"], date.fromisoformat(parts["date"])))
    return out


@dg.asset(
    name="log_warehouse",
    group_name="logs",
    partitions_def=agent_day_partitions,
    backfill_policy=_SINGLE_RUN,
    deps=["log_retention"],
    kinds={"parquet"},
    tags=stage_tags("logs"),
    metadata=label_metadata("Log warehouse (per agent and day)"),
    description="Day-partitioned Parquet copy of every log line, kept after retention trims the JSONL.\n\n"
    "Every telemetry and conversation log line, under warehouse/ in the profile. Log retention and "
    "preference inference copy lines here before removing them; materializing a day also copies that "
    "day's lines still in the JSONL logs. Idempotent: a line is stored once. Each day partition shows "
    "that day's rows per log kind.",
)
def log_warehouse(context: dg.AssetExecutionContext, deployment: DreamDeployment) -> dg.MaterializeResult:
    """Each (agent, day) partition gets its own metadata: that day's rows per log kind, and what this run added."""
    now = run_now(context)
    for key, (agent, day) in zip(context.partition_keys, _keys(context), strict=True):
        profile = deployment.run_profile(agent)
        added = sync_day_to_warehouse(profile, day, now)
        rows = day_rows(profile, day)
        context.add_asset_metadata(
            {
                "dagster/row_count": dg.MetadataValue.int(sum(rows.values())),
                "agent": agent,
                "day": day.isoformat(),
                **{f"rows_{_key(k)}": dg.MetadataValue.int(n) for k, n in sorted(rows.items())},
                **{f"added_{_key(k)}": dg.MetadataValue.int(n) for k, n in sorted(added.items())},
            },
            partition_key=str(key),
        )
        context.log.info(
            f"log_warehouse {agent} {day}: {sum(rows.values())} row(s) that day, "
            f"{sum(added.values())} added by this run"
        )
    return dg.MaterializeResult()


def day_rows(profile, day: date) -> dict[str, int]:
    """Rows the warehouse holds for ``day``, per log kind."""
    start = datetime.combine(day, time(0), tzinfo=UTC)
    return {
        kind: len(warehouse.read_window_lines(profile, kind, start, start + timedelta(days=1))) for kind in LOG_KINDS
    }


def _key(kind: str) -> str:
    return kind.replace("-", "_")


def _history_asset(name: str, label: str, description: str) -> dg.AssetsDefinition:
    """A backfillable analysis of the warehouse. It sits with the logs it reads (group ``logs``), so the pass groups
    hold only the passes and the lineage reads inputs -> logs -> memory / skills -> audit."""

    @dg.asset(
        name=name,
        group_name="logs",
        partitions_def=agent_day_partitions,
        backfill_policy=_SINGLE_RUN,
        deps=["log_warehouse"],
        kinds={"parquet"},
        tags=stage_tags("logs"),
        metadata=label_metadata(label),
        description=description,
    )
    def _asset(context: dg.AssetExecutionContext, deployment: DreamDeployment) -> dg.MaterializeResult:
        rows_total = 0
        preview = ""
        for agent, day in _keys(context):
            profile = deployment.run_profile(agent)
            rows = run_analysis(profile, deployment.options(profile), name, day)
            rows_total += len(rows)
            context.log.info(f"{name} {agent} {day}: {len(rows)} row(s) for the window ending {day} 24:00 UTC")
            if rows and not preview:
                preview = "\n".join(f"- {r}" for r in rows[:10])
        return dg.MaterializeResult(
            metadata={
                "dagster/row_count": rows_total,
                "partitions": dg.MetadataValue.int(len(context.partition_keys)),
                "preview": dg.MetadataValue.md(preview or "_no rows_"),
            }
        )

    return _asset


history_assets = [
    log_warehouse,
    _history_asset(
        "wisp_failure_history",
        "Wisp failure history",
        "For a past day: wisp runs of the 14 days ending that day, per description.\n\n"
        "Failures, success rate, failing steps, and which qualify as failure patterns or promotion "
        "candidates, by the live pass's own rules.",
    ),
    _history_asset(
        "tier_routing_history",
        "Tier routing history",
        "For a past day: routing outcomes per model tier over the 14 days ending that day.",
    ),
    _history_asset(
        "skill_usage_history",
        "Skill usage history",
        "For a past day: 30-day skill usage counts ending that day.",
    ),
    _history_asset(
        "recurring_request_history",
        "Recurring request history",
        "For a past day: request terms recurring across 2+ sessions in the 30 days ending that day.\n\n"
        "Skill-gap and preference mining over archived conversations.",
    ),
]


@dg.definitions
def defs() -> dg.Definitions:
    """The day-partitioned warehouse and the backfillable analyses over it."""
    return dg.Definitions(assets=history_assets)
