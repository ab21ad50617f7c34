"""Fingerprints of each input a pass reads, as the change gate and the Dagster data versions use them."""

from __future__ import annotations

import hashlib
import json

from dream_assets.profile import AgentProfile
from dream_assets.store import open_store
from dream_assets.store.logs import log_exists, read_events
from dream_assets.text.content_hash import EMPTY_WATERMARK, event_watermark_fingerprint


def log_watermark(profile: AgentProfile, kind: str) -> str:
    """Event watermark of a log: a new event moves it; events ageing out or trimmed away do not."""
    if not log_exists(profile, kind):
        return EMPTY_WATERMARK
    events = read_events(profile, kind).events
    return event_watermark_fingerprint((e.timestamp, json.dumps(e.to_json(), sort_keys=True)) for e in events)


def input_fingerprint(profile: AgentProfile, what: str) -> str:
    if what == "memory_corpus":
        return open_store(profile).memories.fingerprint()
    if what == "skill_catalog":
        return open_store(profile).skills.fingerprint()
    if what == "ledger":
        path = profile.ledger_path
        return hashlib.sha256(path.read_bytes()).hexdigest() if path.exists() else "absent"
    return log_watermark(profile, what)
