"""Rebuilding a damaged store from a Parquet snapshot (`dream rebuild`).

A damaged ``store.duckdb`` (corrupt, empty, truncated) cannot be repaired in place. The newest corpus snapshot that
``corpus_snapshot`` wrote after a cycle holds every memory (live and archived), every skill and the purge records.
The rebuild writes a fresh store from it next to the damaged one, then moves the damaged file aside under a name of
its own (never overwritten, never deleted) and puts the fresh store in its place. What the snapshot does not hold is
said, not invented: changes made after the snapshot are lost, and the change log starts empty (the cycles before the
rebuild cannot be undone; their records stay in the snapshot's ``changes.parquet`` and in the damaged file).
"""

from __future__ import annotations

import json
import os
import shutil
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

import duckdb

from dream_assets.file_safety import fsync_dir
from dream_assets.model import MemoryEntry, Skill, utc
from dream_assets.options import DreamOptions
from dream_assets.profile import AgentProfile
from dream_assets.store import open_store
from dream_assets.store.connection import classify as classify_store_error
from dream_assets.store.connection import connect_quietly
from dream_assets.store.parquet import read_parquet
from dream_assets.store.snapshots import list_snapshots

#: The tables a snapshot must hold for a rebuild.
SNAPSHOT_TABLES = ("memories.parquet", "skills.parquet")


class RebuildError(Exception):
    """The rebuild cannot run; the message names the file or folder and what is wrong. Nothing was changed."""


@dataclass(frozen=True)
class RebuildResult:
    snapshot: Path
    memories_live: int
    memories_archived: int
    skills: int
    purges: int
    #: Where the damaged store (and its write-ahead log) now is; None when there was no store file to move.
    damaged_aside: Path | None


def choose_snapshot(profile: AgentProfile, snapshot: Path | None = None) -> Path:
    """``snapshot`` when given (it must hold the snapshot tables), else the newest complete snapshot of the agent."""
    if snapshot is not None:
        folder = Path(snapshot)
        missing = [t for t in SNAPSHOT_TABLES if not (folder / t).is_file()]
        if not folder.is_dir():
            raise RebuildError(f"snapshot {folder} is not a folder")
        if missing:
            raise RebuildError(f"snapshot {folder} has no {', '.join(missing)}: not a corpus snapshot")
        return folder
    complete = [s.path for s in list_snapshots(profile) if all((s.path / t).is_file() for t in SNAPSHOT_TABLES)]
    if not complete:
        raise RebuildError(
            f"no snapshot under {profile.snapshots_dir} to rebuild from (corpus_snapshot writes one after each "
            "cycle); restore the store from a backup"
        )
    return complete[-1]


def _time(value: Any) -> datetime | None:
    return utc(value) if value is not None else None


def _rows(folder: Path, table: str) -> list[dict[str, Any]]:
    try:
        return read_parquet(folder / table)
    except Exception as exc:  # noqa: BLE001 - any unreadable Parquet file stops the rebuild, named
        raise RebuildError(f"snapshot file {folder / table} cannot be read: {exc}") from exc


def _memories(folder: Path) -> list[MemoryEntry]:
    out = []
    for row in _rows(folder, "memories.parquet"):
        seen = _time(row["last_seen_at"]) or _time(row["created_at"])
        out.append(
            MemoryEntry(
                id=row["id"],
                content=row["content"],
                category=row["category"],
                tags=tuple(row["tags"] or ()),
                importance=float(row["importance"]),
                created_at=_time(row["created_at"]),  # type: ignore[arg-type]
                updated_at=seen,  # type: ignore[arg-type]  # the snapshot keeps no update time
                last_seen_at=seen,  # type: ignore[arg-type]
                reinforcement_count=int(row["reinforcement_count"]),
                metadata=json.loads(row["metadata"] or "{}"),
                archived_at=_time(row["archived_at"]),
            )
        )
    return out


def _skills(folder: Path) -> list[Skill]:
    return [
        Skill(
            name=row["name"],
            summary=row["summary"],
            content=row["content"],
            see_also=tuple(row["see_also"] or ()),
            created_at=_time(row["created_at"]),  # type: ignore[arg-type]
            updated_at=_time(row["created_at"]),  # type: ignore[arg-type]  # the snapshot keeps no update time
            last_used_at=_time(row["last_used_at"]),
            archived_at=_time(row["archived_at"]),
        )
        for row in _rows(folder, "skills.parquet")
    ]


def _free_name(path: Path) -> Path:
    """``path`` itself when nothing is there, else the first ``path.N`` that is free: nothing is overwritten."""
    candidate, n = path, 1
    while candidate.exists():
        candidate = path.with_name(f"{path.name}.{n}")
        n += 1
    return candidate


def _readable(path: Path) -> bool:
    """Whether the store file opens and its memories can be counted (read-only: nothing is written to it); False
    when it is missing or damaged. A store another program holds, or one that fails for another reason, is no
    damaged store: RebuildError, and nothing is moved."""
    if not path.exists():
        return False
    try:
        with connect_quietly(str(path), read_only=True) as conn:
            conn.execute("SELECT count(*) FROM memories").fetchone()
        return True
    except duckdb.Error as exc:
        if classify_store_error(exc) == "corrupt":
            return False
        raise RebuildError(f"the store {path} cannot be checked ({exc}); nothing was rebuilt") from exc


def rebuild_store(
    profile: AgentProfile,
    now: datetime,
    *,
    snapshot: Path | None = None,
    options: DreamOptions | None = None,
    force: bool = False,
) -> RebuildResult:
    """Write a fresh store from ``snapshot`` (default: the newest), move the damaged store aside as
    ``store.duckdb.damaged-<now>`` and put the fresh one in its place. RebuildError (nothing changed) when no usable
    snapshot is found, or when the store is readable and ``force`` is not given (a rebuild loses what changed after
    the snapshot)."""
    if not force and _readable(profile.store_path):
        raise RebuildError(
            f"the store {profile.store_path} is readable, not damaged; nothing was rebuilt (a rebuild loses every "
            "change after the snapshot: pass --force to rebuild it anyway)"
        )
    folder = choose_snapshot(profile, snapshot)
    memories, skills = _memories(folder), _skills(folder)
    purges = _rows(folder, "purges.parquet") if (folder / "purges.parquet").is_file() else []
    stamp = f"{utc(now):%Y%m%dT%H%M%SZ}"
    staging = AgentProfile(profile.root / f".rebuild-{stamp}")
    shutil.rmtree(staging.root, ignore_errors=True)
    store = open_store(staging, options)
    try:
        store.memories.put_many(memories)
        for skill in skills:
            store.skills.put(skill)
        with store.transaction() as conn:
            for row in purges:
                conn.execute(
                    "INSERT INTO memory_purges (id, purged_at, archived_at, content, seq) "
                    "VALUES (?, ?, ?, NULL, nextval('row_seq'))",
                    [row["id"], row["purged_at"], row["archived_at"]],
                )
    finally:
        store.close()
    aside = None
    if profile.store_path.exists():
        aside = _free_name(profile.store_path.with_name(f"{profile.store_path.name}.damaged-{stamp}"))
        os.rename(profile.store_path, aside)
        wal = profile.store_path.with_name(profile.store_path.name + ".wal")
        if wal.exists():
            os.rename(wal, aside.with_name(aside.name + ".wal"))
    os.rename(staging.store_path, profile.store_path)
    fsync_dir(profile.root)
    shutil.rmtree(staging.root, ignore_errors=True)
    archived = sum(1 for m in memories if m.archived_at is not None)
    return RebuildResult(folder, len(memories) - archived, archived, len(skills), len(purges), aside)
