"""Parquet snapshots of an agent's corpora after a cycle: memories (live and archived), skills, purge records and
the change log. The memory audit walks these files rather than asking the store."""

from __future__ import annotations

import json
import os
import shutil
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import numpy as np

from dream_assets.file_safety import fsync_dir
from dream_assets.model import utc
from dream_assets.profile import AgentProfile
from dream_assets.store import DreamStore
from dream_assets.store.frames import timestamps
from dream_assets.store.parquet import read_parquet, write_parquet
from dream_assets.store.schema import to_db

_STAMP = "%Y%m%dT%H%M%S%fZ"


@dataclass(frozen=True)
class Snapshot:
    path: Path
    taken_at: datetime

    def read(self, table: str, columns: Sequence[str] | None = None) -> list[dict[str, Any]]:
        """The rows of one of the snapshot's tables (``columns`` only, when given), in order; times as written (aware
        UTC for the memories' and skills', naive UTC for the purges' and changes')."""
        return read_parquet(self.path / f"{table}.parquet", columns)


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
    write_parquet(
        tmp / "memories.parquet",
        {
            "id": ("VARCHAR", [e.id for e in memories]),
            "content": ("VARCHAR", [e.content for e in memories]),
            "category": ("VARCHAR", [e.category for e in memories]),
            "tags": ("VARCHAR[]", [list(e.tags) for e in memories]),
            "importance": ("DOUBLE", np.array([e.importance for e in memories], dtype=np.float64)),
            "created_at": ("TIMESTAMPTZ", timestamps(to_db(e.created_at) for e in memories)),
            "last_seen_at": ("TIMESTAMPTZ", timestamps(to_db(e.last_seen_at) for e in memories)),
            "reinforcement_count": ("INTEGER", np.array([e.reinforcement_count for e in memories], dtype=np.int32)),
            "metadata": ("VARCHAR", [json.dumps(e.metadata, sort_keys=True) for e in memories]),
            "archived_at": ("TIMESTAMPTZ", timestamps(to_db(e.archived_at) for e in memories)),
        },
    )
    write_parquet(
        tmp / "skills.parquet",
        {
            "name": ("VARCHAR", [s.name for s in skills]),
            "summary": ("VARCHAR", [s.summary for s in skills]),
            "content": ("VARCHAR", [s.content for s in skills]),
            "see_also": ("VARCHAR[]", [list(s.see_also) for s in skills]),
            "created_at": ("TIMESTAMPTZ", timestamps(to_db(s.created_at) for s in skills)),
            "last_used_at": ("TIMESTAMPTZ", timestamps(to_db(s.last_used_at) for s in skills)),
            "archived_at": ("TIMESTAMPTZ", timestamps(to_db(s.archived_at) for s in skills)),
        },
    )
    with store.connection.session() as conn:
        purges = conn.execute("SELECT id, purged_at, archived_at FROM memory_purges ORDER BY seq").fetchall()
        changes = conn.execute(
            "SELECT cycle_id, pass_name, kind, target_type, target_id, reason, after_json, created_at, actor, "
            "successor_id, successor_how FROM changes ORDER BY ordinal"
        ).fetchall()
    write_parquet(
        tmp / "purges.parquet",
        {
            "id": ("VARCHAR", [r[0] for r in purges]),
            "purged_at": ("TIMESTAMP", timestamps(r[1] for r in purges)),
            "archived_at": ("TIMESTAMP", timestamps(r[2] for r in purges)),
        },
    )
    write_parquet(
        tmp / "changes.parquet",
        {
            k: ("VARCHAR", [r[i] for r in changes])
            for i, k in enumerate(("cycle_id", "pass_name", "kind", "target_type", "target_id", "reason", "after_json"))
        }
        | {"created_at": ("TIMESTAMP", timestamps(r[7] for r in changes))}
        | {
            k: ("VARCHAR", [r[i] for r in changes])
            for i, k in enumerate(("actor", "successor_id", "successor_how"), start=8)
        },
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
