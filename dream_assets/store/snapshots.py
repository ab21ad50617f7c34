"""Parquet snapshots of an agent's corpora after a cycle: memories (live and archived), skills, purge records and
the change log. The memory audit walks these files rather than asking the store."""

from __future__ import annotations

import json
import os
import shutil
import uuid
from dataclasses import dataclass
from datetime import datetime, timedelta
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from dream_assets.file_safety import fsync_dir
from dream_assets.model import utc
from dream_assets.profile import AgentProfile
from dream_assets.store import DreamStore

_STAMP = "%Y%m%dT%H%M%S%fZ"


@dataclass(frozen=True)
class Snapshot:
    path: Path
    taken_at: datetime

    def read(self, table: str) -> pa.Table:
        return pq.read_table(self.path / f"{table}.parquet")


def take_snapshot(profile: AgentProfile, store: DreamStore, now: datetime) -> tuple[Snapshot, dict[str, int]]:
    now = utc(now)
    folder = profile.snapshots_dir / now.strftime(_STAMP)
    tmp = folder.with_name(folder.name + ".partial")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    memories = store.memories.list_all()
    skills = store.skills.list(include_archived=True)
    counts = {
        "memories_live": sum(1 for e in memories if e.archived_at is None),
        "memories_archived": sum(1 for e in memories if e.archived_at is not None),
        "skills_live": sum(1 for s in skills if s.archived_at is None),
        "skills_archived": sum(1 for s in skills if s.archived_at is not None),
    }
    pq.write_table(
        pa.table(
            {
                "id": [e.id for e in memories],
                "content": [e.content for e in memories],
                "category": [e.category for e in memories],
                "tags": [list(e.tags) for e in memories],
                "importance": pa.array([e.importance for e in memories], pa.float64()),
                "created_at": pa.array([e.created_at for e in memories], pa.timestamp("us", "UTC")),
                "last_seen_at": pa.array([e.last_seen_at for e in memories], pa.timestamp("us", "UTC")),
                "reinforcement_count": pa.array([e.reinforcement_count for e in memories], pa.int32()),
                "metadata": [json.dumps(e.metadata, sort_keys=True) for e in memories],
                "archived_at": pa.array([e.archived_at for e in memories], pa.timestamp("us", "UTC")),
            }
        ),
        tmp / "memories.parquet",
    )
    pq.write_table(
        pa.table(
            {
                "name": [s.name for s in skills],
                "summary": [s.summary for s in skills],
                "content": [s.content for s in skills],
                "see_also": [list(s.see_also) for s in skills],
                "created_at": pa.array([s.created_at for s in skills], pa.timestamp("us", "UTC")),
                "last_used_at": pa.array([s.last_used_at for s in skills], pa.timestamp("us", "UTC")),
                "archived_at": pa.array([s.archived_at for s in skills], pa.timestamp("us", "UTC")),
            }
        ),
        tmp / "skills.parquet",
    )
    with store.connection.session() as conn:
        purges = conn.execute("SELECT id, purged_at, archived_at FROM memory_purges ORDER BY seq").fetchall()
        changes = conn.execute(
            "SELECT cycle_id, pass_name, kind, target_type, target_id, reason, after_json, created_at, actor, "
            "successor_id, successor_how FROM changes ORDER BY ordinal"
        ).fetchall()
    pq.write_table(
        pa.table(
            {
                "id": [r[0] for r in purges],
                "purged_at": pa.array([r[1] for r in purges], pa.timestamp("us")),
                "archived_at": pa.array([r[2] for r in purges], pa.timestamp("us")),
            }
        ),
        tmp / "purges.parquet",
    )
    pq.write_table(
        pa.table(
            {
                k: [r[i] for r in changes]
                for i, k in enumerate(
                    ("cycle_id", "pass_name", "kind", "target_type", "target_id", "reason", "after_json")
                )
            }
            | {"created_at": pa.array([r[7] for r in changes], pa.timestamp("us"))}
            | {
                k: pa.array([r[i] for r in changes], pa.string())
                for i, k in enumerate(("actor", "successor_id", "successor_how"), start=8)
            }
        ),
        tmp / "changes.parquet",
    )
    for part in tmp.iterdir():  # the parts are durable before the folder is renamed into view
        with open(part, "rb") as fh:
            os.fsync(fh.fileno())
    fsync_dir(tmp)
    if folder.exists():
        # A replay (a second cycle at the same --now): the new snapshot takes the instant's name, the earlier one is
        # kept beside it under a name the audit does not read (never deleted in place).
        folder.rename(folder.with_name(f"{folder.name}.replaced-{uuid.uuid4().hex[:8]}"))
    tmp.rename(folder)
    fsync_dir(folder.parent)
    return Snapshot(folder, now), counts


def list_snapshots(profile: AgentProfile) -> list[Snapshot]:
    out = []
    if profile.snapshots_dir.is_dir():
        for d in sorted(profile.snapshots_dir.iterdir()):
            if d.is_dir() and not d.name.endswith(".partial"):
                try:
                    out.append(Snapshot(d, utc(datetime.strptime(d.name, _STAMP))))
                except ValueError:
                    continue
    return out


def prune_snapshots(profile: AgentProfile, retention: timedelta, now: datetime, keep_at_least: int = 2) -> int:
    """Remove snapshots older than ``retention``; the newest ``keep_at_least`` are always kept (the audit compares
    two)."""
    snaps = list_snapshots(profile)
    removable = snaps[:-keep_at_least] if keep_at_least else snaps
    removed = 0
    for s in removable:
        if s.taken_at < utc(now) - retention:
            shutil.rmtree(s.path, ignore_errors=True)
            removed += 1
    return removed
