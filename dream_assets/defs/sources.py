"""Observable source assets: what the agent writes. Each data version is the change-gate fingerprint of that input
(content, never drifting statistics), so the lineage view shows exactly when an input moved."""



import dagster as dg

from dream_assets.defs.deployment import DreamDeployment
from dream_assets.defs.partitions import AGENTS, agents_partitions
from dream_assets.fingerprints import input_fingerprint
from dream_assets.model import iso
from dream_assets.profile import AgentProfile
from dream_assets.store.ledger import PassLedger

SOURCES: dict[str, tuple[str, str]] = {
    # asset name -> (fingerprinted input, description)
    "memory_corpus": ("memory_corpus", "The agent's long-term memories (live entries) in store.duckdb."),
    "skill_catalog": ("skill_catalog", "The agent's skills (live) in store.duckdb."),
    "conversation_log": ("conversation", "conversation-log.jsonl: turns since the last preference pass cleared it."),
    "feedback_log": ("feedback", "logs/feedback/{sessionId}.jsonl: corrections and session summaries."),
    "skill_usage_log": ("skill-usage", "logs/skill-usage/{sessionId}.jsonl: which skills each session used."),
    "tool_call_log": ("tool-call", "logs/tool-call/{sessionId}.jsonl: tool calls with success and errors."),
    "skill_resource_usage_log": ("skill-resource-usage", "logs/skill-resource-usage.jsonl."),
    "wisp_execution_log": ("wisp-executions", "logs/wisp-executions.jsonl: workflow (wisp) runs and failures."),
    "tier_routing_log": ("tier-routing", "logs/tier-routing.jsonl: model tier chosen per task and its outcome."),
    "dream_pass_ledger": ("ledger", "dream-pass-ledger.json: per pass, the input fingerprint it last ran on and when."),
}


def _observer(asset_name: str, what: str, description: str) -> dg.SourceAsset:
    @dg.observable_source_asset(name=asset_name, description=description, group_name="inputs",
                                partitions_def=agents_partitions)
    def _observe(context, deployment: DreamDeployment) -> dg.DataVersionsByPartition:
        agents = context.instance.get_dynamic_partitions(AGENTS)
        versions: dict[str, dg.DataVersion] = {}
        for agent in agents:
            profile: AgentProfile = deployment.profile(agent)
            if profile.root.exists():
                versions[agent] = dg.DataVersion(input_fingerprint(profile, what))
                if what == "ledger":
                    context.log_event(dg.AssetObservation(
                        asset_key=asset_name, partition=agent, metadata=ledger_metadata(profile)))
        return dg.DataVersionsByPartition(versions)

    return _observe


def ledger_metadata(profile: AgentProfile) -> dict:
    """The ledger's records, one line per pass, for the asset page."""
    ledger = PassLedger(profile)
    rows = ["| pass | last run (UTC) | fingerprint |", "| --- | --- | --- |"]
    for name, rec in sorted(ledger.records().items()):
        rows.append(f"| {name} | {iso(rec.last_run_at)} | `{rec.fingerprint[:24]}` |")
    meta: dict = {"passes": dg.MetadataValue.int(len(ledger.records())),
                  "records": dg.MetadataValue.md("\n".join(rows))}
    if ledger.warning:
        meta["warning"] = ledger.warning
    return meta


source_assets = [_observer(name, what, desc) for name, (what, desc) in SOURCES.items()]
