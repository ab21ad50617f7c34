"""Observable source assets: what the agent writes. Each data version is the change-gate fingerprint of that input
(``input_fingerprints.data_version``: content, never drifting statistics) — the value a gated pass stamps in the
ledger and its sensor compares — so the lineage view shows exactly when an input moved."""

import dagster as dg

from dream_assets.input_fingerprints import INPUT_ASSETS, LEDGER_INPUT, data_version, input_path
from dream_assets.model import iso
from dream_assets.orchestration.deployment import DreamDeployment, describe_problem, removal_hint
from dream_assets.orchestration.metadata import label_metadata, stage_tags
from dream_assets.orchestration.partitions import AGENTS, agents_partitions
from dream_assets.profile import AgentProfile
from dream_assets.store.ledger import PassLedger

#: Input source asset -> its description (a short first line, then the file it reads). Its data version is
#: ``input_fingerprints.data_version``: the fingerprint a gated pass stamps and its sensor compares.
DESCRIPTIONS: dict[str, str] = {
    "memory_corpus": "The agent's long-term memories.\n\nLive entries in store.duckdb.",
    "skill_catalog": "The agent's skills.\n\nLive skills in store.duckdb.",
    "conversation_log": "Conversation turns since the last preference pass.\n\n"
    "conversation-log.jsonl, cleared by preference inference each cycle.",
    "feedback_log": "Corrections and session summaries.\n\nlogs/feedback/{sessionId}.jsonl.",
    "skill_usage_log": "Which skills each session used.\n\nlogs/skill-usage/{sessionId}.jsonl.",
    "tool_call_log": "Tool calls with success and errors.\n\nlogs/tool-call/{sessionId}.jsonl.",
    "skill_resource_usage_log": "Resources each skill used.\n\nlogs/skill-resource-usage.jsonl.",
    "wisp_execution_log": "Workflow (wisp) runs and failures.\n\nlogs/wisp-executions.jsonl.",
    "tier_routing_log": "Model tier chosen per task and its outcome.\n\nlogs/tier-routing.jsonl.",
    "dream_pass_ledger": "When each pass last completed, on which input.\n\n"
    "dream-pass-ledger.json: per pass, the input fingerprint it last ran on and when (the change gate's source of "
    "truth).",
}


def _label(asset_name: str) -> str:
    return asset_name.replace("_", " ").capitalize()


def _observer(asset_name: str, description: str) -> dg.SourceAsset:
    @dg.observable_source_asset(
        name=asset_name,
        description=description,
        group_name="inputs",
        partitions_def=agents_partitions,
        tags=stage_tags("inputs"),
        metadata=label_metadata(_label(asset_name)),
    )
    def _observe(context, deployment: DreamDeployment) -> dg.DataVersionsByPartition:
        """One data version per agent. An agent whose profile is missing or whose input cannot be read gets none
        this time (logged, naming the agent and the file); every other agent is still observed."""
        agents = context.instance.get_dynamic_partitions(AGENTS)
        versions: dict[str, dg.DataVersion] = {}
        for agent in agents:
            try:
                profile: AgentProfile = deployment.profile(agent)
            except ValueError as exc:
                context.log.warning(f"{asset_name}: agent {agent!r} skipped — {exc}")
                continue
            if not profile.root.is_dir():
                context.log.warning(
                    f"{asset_name}: agent {agent} skipped — its profile folder {profile.root} is missing; "
                    + removal_hint(profile.root)
                )
                continue
            try:
                versions[agent] = dg.DataVersion(data_version(profile, asset_name))
                if asset_name == LEDGER_INPUT:
                    context.log_event(
                        dg.AssetObservation(asset_key=asset_name, partition=agent, metadata=ledger_metadata(profile))
                    )
            except Exception as exc:  # noqa: BLE001 - one unreadable input never stops the other agents' observation
                versions.pop(agent, None)
                context.log.warning(
                    f"{asset_name}: agent {agent} skipped — {describe_problem(exc, input_path(profile, asset_name))}"
                )
        return dg.DataVersionsByPartition(versions)

    return _observe


def ledger_metadata(profile: AgentProfile) -> dict:
    """The ledger's records, one line per pass, for the asset page."""
    ledger = PassLedger(profile)
    rows = ["| pass | last completed (UTC) | input fingerprint |", "| --- | --- | --- |"]
    for name, rec in sorted(ledger.records().items()):
        rows.append(f"| {name} | {iso(rec.last_run_at)} | `{rec.fingerprint}` |")
    meta: dict = {
        "passes": dg.MetadataValue.int(len(ledger.records())),
        "records": dg.MetadataValue.md("\n".join(rows)),
    }
    if ledger.warning:
        meta["warning"] = ledger.warning
    return meta


source_assets = [_observer(name, DESCRIPTIONS[name]) for name in INPUT_ASSETS]

observe_inputs = dg.define_asset_job(
    "observe_inputs",
    selection=dg.AssetSelection.assets(*INPUT_ASSETS),
    description="Observe every input's fingerprint (data version).",
)
observe_inputs_schedule = dg.ScheduleDefinition(
    name="observe_inputs_schedule",
    job=observe_inputs,
    cron_schedule="*/15 * * * *",
    execution_timezone="UTC",
    default_status=dg.DefaultScheduleStatus.RUNNING,
    description="Re-observe the inputs so lineage shows when each actually moved.",
)


@dg.definitions
def defs() -> dg.Definitions:
    """The observable inputs, and the job and schedule that re-observe them."""
    return dg.Definitions(assets=source_assets, jobs=[observe_inputs], schedules=[observe_inputs_schedule])
