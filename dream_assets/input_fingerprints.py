"""The one change-detection model: each input source asset has one fingerprint, its data version.

The data version of an input is what a change-gated pass stamps in the ledger when it completes (``PassSpec.gate``
names the input), what its sensor compares with the ledger, and what the observable source asset shows. Stores are
fingerprinted by content; logs by their event watermark (a new event moves it; events ageing out of a window or
trimmed away by retention do not), so an idle agent's gated passes stay skipped and a new event runs them again.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable
from pathlib import Path

from dream_assets.options import DreamOptions
from dream_assets.profile import SESSION_LOGS, AgentProfile
from dream_assets.store import open_store
from dream_assets.store.logs import read_events
from dream_assets.text.content_hash import event_watermark_fingerprint

#: Source asset -> the log kind it is (the log inputs).
LOG_INPUTS: dict[str, str] = {
    "conversation_log": "conversation",
    "feedback_log": "feedback",
    "skill_usage_log": "skill-usage",
    "tool_call_log": "tool-call",
    "skill_resource_usage_log": "skill-resource-usage",
    "wisp_execution_log": "wisp-executions",
    "tier_routing_log": "tier-routing",
}
STORE_INPUTS = ("memory_corpus", "skill_catalog")
LEDGER_INPUT = "dream_pass_ledger"
#: Every input source asset, in the order the UI lists them.
INPUT_ASSETS: tuple[str, ...] = (*STORE_INPUTS, *LOG_INPUTS, LEDGER_INPUT)


def events_watermark(events: Iterable) -> str:
    """The data version of a log holding ``events`` (any subset holding its newest events gives the same value)."""
    return event_watermark_fingerprint((e.timestamp, json.dumps(e.to_json(), sort_keys=True)) for e in events)


def log_watermark(profile: AgentProfile, kind: str) -> str:
    """Event watermark of a whole log (an absent log is the empty watermark)."""
    return events_watermark(read_events(profile, kind).events)


def data_version(profile: AgentProfile, asset: str) -> str:
    """The fingerprint of input source asset ``asset`` for this agent."""
    if asset == "memory_corpus":
        return open_store(profile, DreamOptions()).memories.fingerprint()
    if asset == "skill_catalog":
        return open_store(profile, DreamOptions()).skills.fingerprint()
    if asset == LEDGER_INPUT:
        path = profile.ledger_path
        return hashlib.sha256(path.read_bytes()).hexdigest() if path.exists() else "absent"
    if asset in LOG_INPUTS:
        return log_watermark(profile, LOG_INPUTS[asset])
    raise KeyError(f"unknown input {asset!r}; inputs: {', '.join(INPUT_ASSETS)}")


def input_path(profile: AgentProfile, asset: str) -> Path:
    """The file (or folder) an input's fingerprint reads, named when it cannot be read."""
    if asset in STORE_INPUTS:
        return profile.store_path
    if asset == LEDGER_INPUT:
        return profile.ledger_path
    kind = LOG_INPUTS[asset]
    if kind == "conversation":
        return profile.conversation_log_path
    if kind in SESSION_LOGS:
        return profile.session_log_dir(kind)
    return profile.single_log_path(kind)


def input_fingerprint(profile: AgentProfile, what: str) -> str:
    """The data version of an input named by asset, log kind, or "ledger"."""
    if what == "ledger":
        return data_version(profile, LEDGER_INPUT)
    kinds = {kind: asset for asset, kind in LOG_INPUTS.items()}
    return data_version(profile, kinds.get(what, what))
