"""The corpus snapshots are Parquet files written and read through DuckDB. A snapshot written by the earlier writer
(pyarrow's: fixtures/snapshot-pyarrow, two memories, one archived, and a skill, with the rows it held as JSON) reads
the same, rebuilds a store, and a snapshot written now has its columns and types."""

from __future__ import annotations

import json
import shutil
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import duckdb

from dream_assets.model import MemoryEntry, Skill
from dream_assets.options_loader import dream_options
from dream_assets.store import open_store
from dream_assets.store.rebuild import rebuild_store
from dream_assets.store.snapshots import list_snapshots, take_snapshot

OLD = Path(__file__).resolve().parents[1] / "fixtures" / "snapshot-pyarrow"
TABLES = ("memories", "skills", "purges", "changes")
T0 = datetime(2026, 11, 1, 9, 30, tzinfo=UTC)


def _expected() -> dict[str, list[dict[str, Any]]]:
    def value(v: Any) -> Any:
        return datetime.fromisoformat(v["t"]) if isinstance(v, dict) else v

    rows = json.loads((OLD / "rows.json").read_text())
    return {table: [{k: value(v) for k, v in r.items()} for r in rows[table]] for table in TABLES}


def _old_snapshot(profile) -> Path:
    folder = profile.snapshots_dir / "20261104T093000000000Z"
    folder.mkdir(parents=True)
    for table in TABLES:
        shutil.copy(OLD / f"{table}.parquet", folder / f"{table}.parquet")
    return folder


def _columns(path: Path) -> list[tuple[str, str]]:
    with duckdb.connect() as conn:
        return [(r[0], r[1]) for r in conn.execute(f"DESCRIBE SELECT * FROM read_parquet('{path}')").fetchall()]


def test_a_snapshot_written_by_the_earlier_writer_reads_as_it_was_written(profile):
    _old_snapshot(profile)
    (snapshot,) = list_snapshots(profile)
    expected = _expected()
    for table in TABLES:
        assert snapshot.read(table) == expected[table], table
    assert snapshot.read("memories", ["id", "archived_at"]) == [
        {"id": "m1", "archived_at": None},
        {"id": "m2", "archived_at": datetime(2026, 11, 3, 9, 30, tzinfo=UTC)},
    ]


def test_a_store_rebuilds_from_a_snapshot_of_the_earlier_writer(profile):
    _old_snapshot(profile)
    rebuild_store(profile, T0 + timedelta(days=4))
    store = open_store(profile, dream_options())
    m1, m2 = store.memories.get("m1"), store.memories.get("m2")
    assert m1.tags == ("db", "staging") and m1.reinforcement_count == 2 and m1.metadata == {"source": "shell"}
    assert m1.last_seen_at == T0 + timedelta(days=1, microseconds=7) and not m1.is_archived
    assert m2.archived_at == T0 + timedelta(days=2)
    assert store.skills.get("deploy").see_also == ("rollback",)


def test_a_snapshot_written_now_has_the_columns_and_types_of_the_earlier_writer(profile):
    store = open_store(profile, dream_options())
    store.memories.put_many(
        [
            MemoryEntry(
                id="m1",
                content="The staging database moved to db2.",
                category="infra",
                tags=("db", "staging"),
                importance=0.75,
                created_at=T0,
                updated_at=T0,
                last_seen_at=T0 + timedelta(days=1, microseconds=7),
                reinforcement_count=2,
                metadata={"source": "shell"},
            ),
            MemoryEntry(
                id="m2",
                content="Melanie loves pottery.",
                category="people/melanie",
                tags=(),
                importance=0.5,
                created_at=T0,
                updated_at=T0,
                last_seen_at=T0,
                reinforcement_count=1,
                metadata={},
            ),
        ]
    )
    store.memories.archive("m2", now=T0 + timedelta(days=2))
    store.skills.put(
        Skill(
            name="deploy",
            summary="How to deploy",
            content="Run make deploy.",
            see_also=("rollback",),
            created_at=T0,
            updated_at=T0,
            last_used_at=T0 + timedelta(hours=3),
        )
    )
    snapshot, _ = take_snapshot(profile, store, T0 + timedelta(days=3))
    expected = _expected()
    for table in TABLES:
        old, new = _columns(OLD / f"{table}.parquet"), _columns(snapshot.path / f"{table}.parquet")
        assert [name for name, _ in new] == [name for name, _ in old], table
        # The earlier writer gave an empty column no type ("NULL"); every other column keeps its type.
        assert all(o == n or o == '"NULL"' for (_, o), (_, n) in zip(old, new, strict=True)), (table, old, new)
        if table in ("memories", "skills"):  # the same corpus as the fixture's: the same rows
            assert snapshot.read(table) == expected[table], table
