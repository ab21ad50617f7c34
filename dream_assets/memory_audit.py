"""The memory audit: is the corpus converging, does provenance still resolve, was anything destroyed that should not
have been? It walks the snapshot files (not the store) and keeps a trend file with 400-day retention.

Findings:
- unexplained deletes: an id present in the previous snapshot, absent from the latest, with no purge record;
- dangling provenance: a live entry's ``mergedFrom`` id that resolves to nothing and was not purged;
- orphaned merge sources: an entry archived by consolidation as a merge source whose merged entry does not exist;
- repeated rejections: a cluster (``consolidationRejectedCluster``) rejected again and again across snapshots.
Opt-in (AuditPauseOnHardDelete): on unexplained deletes, write memory-audit/consolidation-paused.json, which stops
memory consolidation (only) until a person removes it.
"""

from __future__ import annotations

import json
from collections import defaultdict
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from dream_assets.changes_model import SuccessorHow, legacy_successor
from dream_assets.file_safety import atomic_write
from dream_assets.model import iso, parse_ts, utc
from dream_assets.options import DreamOptions
from dream_assets.profile import AgentProfile
from dream_assets.store.snapshots import Snapshot, list_snapshots

REPEATED_REJECTION_THRESHOLD = 3


@dataclass
class AuditResult:
    snapshot: str | None
    compared_with: str | None
    unexplained_deletes: list[str] = field(default_factory=list)
    dangling_provenance: list[str] = field(default_factory=list)  # "<entry> -> <missing source>"
    orphaned_sources: list[str] = field(default_factory=list)
    repeated_rejections: dict[str, int] = field(default_factory=dict)
    paused: bool = False
    counts: dict[str, int] = field(default_factory=dict)


def merged_from(metadata: dict[str, str]) -> list[str]:
    raw = metadata.get("mergedFrom", "")
    if not raw:
        return []
    try:
        value = json.loads(raw)
        if isinstance(value, list):
            return [str(v) for v in value]
    except ValueError:
        pass
    return [part.strip() for part in raw.split(",") if part.strip()]


def _memories(s: Snapshot) -> list[dict[str, Any]]:
    return s.read("memories", ["id", "metadata", "archived_at"])


def run_audit(profile: AgentProfile, options: DreamOptions, now: datetime) -> AuditResult:
    snaps = list_snapshots(profile)
    if not snaps:
        return AuditResult(None, None)
    latest = snaps[-1]
    previous = snaps[-2] if len(snaps) > 1 else None
    result = AuditResult(latest.path.name, previous.path.name if previous else None)
    rows = _memories(latest)
    ids = {r["id"] for r in rows}
    purged = {r["id"] for r in latest.read("purges", ["id"])}
    if previous is not None:
        before = {r["id"] for r in _memories(previous)}
        result.unexplained_deletes = sorted(before - ids - purged)
    # Provenance resolves inside the retention window; after a purge the ids dangle by design.
    referenced: set[str] = set()
    for r in rows:
        meta = json.loads(r["metadata"])
        for src in merged_from(meta):
            referenced.add(src)
            if r["archived_at"] is None and src not in ids and src not in purged:
                result.dangling_provenance.append(f"{r['id']} -> {src}")
    changes = latest.read("changes")
    for c in changes:
        # Sources retired into another entry, by a merge or the exact-duplicate fold: their row names how. A snapshot
        # written before rows had the field says it in the reason the archiving wrote.
        how = SuccessorHow(c.get("successor_how") or legacy_successor(c["kind"], c["reason"])[1])
        if c["pass_name"] == "memory_consolidation" and c["kind"] == "archived" and how.merged:
            if c["target_id"] not in referenced:
                result.orphaned_sources.append(c["target_id"])
    # A cluster rejected in several cycles: distinct rejection instants per cluster across the snapshots kept.
    stamps: dict[str, set[str]] = defaultdict(set)
    for s in snaps:
        for r in _memories(s):
            meta = json.loads(r["metadata"])
            cluster = meta.get("consolidationRejectedCluster")
            if cluster:
                stamps[cluster].add(meta.get("consolidationRejectedAt", ""))
    result.repeated_rejections = {
        k: len(v) for k, v in sorted(stamps.items()) if len(v) >= REPEATED_REJECTION_THRESHOLD
    }
    result.counts = {
        "live": sum(1 for r in rows if r["archived_at"] is None),
        "archived": sum(1 for r in rows if r["archived_at"] is not None),
        "purged_total": len(purged),
        "unexplained_deletes": len(result.unexplained_deletes),
        "dangling_provenance": len(result.dangling_provenance),
        "orphaned_sources": len(result.orphaned_sources),
        "repeated_rejections": len(result.repeated_rejections),
    }
    if result.unexplained_deletes and options.AuditPauseOnHardDelete:
        _write_json(
            profile.consolidation_pause_path,
            {
                "pausedAt": iso(now),
                "reason": "memory audit found entries hard-deleted outside the archive purge",
                "ids": result.unexplained_deletes[:100],
                "snapshot": result.snapshot,
                "resume": "restore what was lost, then delete this file",
            },
        )
        result.paused = True
    append_trend(profile, options, now, result)
    return result


def append_trend(profile: AgentProfile, options: DreamOptions, now: datetime, result: AuditResult) -> None:
    """One row per audit; rows older than AuditTrendRetention (400 days) are dropped."""
    path = profile.audit_trend_path
    cutoff = utc(now) - options.AuditTrendRetention
    kept: list[str] = []
    if path.exists():
        for line in path.read_text(encoding="utf-8").splitlines():
            try:
                if parse_ts(json.loads(line)["at"]) >= cutoff:
                    kept.append(line)
            except (ValueError, KeyError, TypeError):
                continue
    kept.append(json.dumps({"at": iso(now), "snapshot": result.snapshot, **result.counts}, sort_keys=True))
    _write_text(path, "\n".join(kept) + "\n")


def read_trend(profile: AgentProfile) -> list[dict[str, Any]]:
    path = profile.audit_trend_path
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]


def _write_json(path, payload: dict[str, Any]) -> None:
    _write_text(path, json.dumps(payload, indent=2, sort_keys=True) + "\n")


def _write_text(path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    atomic_write(path, text)
