"""A store written by schema version 4 (change rows without an actor or a successor) is upgraded when it is opened:
the columns are added, every row gets its actor from its pass name and an archived entry's row its successor from
the reason that version wrote, once; afterwards ``memory get`` and ``history`` say where each entry went as they did
before, and the cycle ids stored then still undo."""

from __future__ import annotations

import json
from datetime import timedelta

import duckdb
import pytest

from dream_assets import agent_memory as am
from dream_assets.changes_model import Actor, SuccessorHow, legacy_successor
from dream_assets.cli import main
from dream_assets.model import MemoryEntry, Skill, iso
from dream_assets.options_loader import dream_options
from dream_assets.passes import review
from dream_assets.store import open_store
from dream_assets.store.connection import close_all
from dream_assets.store.schema import SCHEMA_VERSION, recompute_fingerprint

from ..conftest import NOW

#: The tables of a version-4 store, as that version created them.
V4_DDL = [
    "CREATE SEQUENCE row_seq START 1",
    """CREATE TABLE memories (
        id VARCHAR PRIMARY KEY, content VARCHAR NOT NULL, category VARCHAR NOT NULL, tags VARCHAR NOT NULL,
        importance DOUBLE NOT NULL, created_at TIMESTAMP NOT NULL, updated_at TIMESTAMP NOT NULL,
        last_seen_at TIMESTAMP NOT NULL, reinforcement_count INTEGER NOT NULL, metadata VARCHAR NOT NULL,
        archived_at TIMESTAMP, seq BIGINT NOT NULL, fp_h1 UBIGINT, fp_h2 UBIGINT
    )""",
    """CREATE TABLE memory_purges (
        id VARCHAR NOT NULL, purged_at TIMESTAMP NOT NULL, archived_at TIMESTAMP, content VARCHAR, seq BIGINT NOT NULL
    )""",
    """CREATE TABLE skills (
        name VARCHAR PRIMARY KEY, summary VARCHAR NOT NULL, content VARCHAR NOT NULL, see_also VARCHAR NOT NULL,
        created_at TIMESTAMP NOT NULL, updated_at TIMESTAMP NOT NULL, last_used_at TIMESTAMP, archived_at TIMESTAMP,
        seq BIGINT NOT NULL
    )""",
    """CREATE TABLE changes (
        change_id VARCHAR PRIMARY KEY, cycle_id VARCHAR NOT NULL, pass_name VARCHAR NOT NULL, kind VARCHAR NOT NULL,
        target_type VARCHAR NOT NULL, target_id VARCHAR NOT NULL, before_json VARCHAR, after_json VARCHAR,
        reason VARCHAR NOT NULL, created_at TIMESTAMP NOT NULL, undone_at TIMESTAMP, ordinal BIGINT NOT NULL
    )""",
    "CREATE TABLE meta (key VARCHAR PRIMARY KEY, value VARCHAR NOT NULL)",
    """CREATE TABLE embeddings (
        content_hash VARCHAR NOT NULL, model VARCHAR NOT NULL, dim INTEGER NOT NULL, vector FLOAT[] NOT NULL,
        created_at TIMESTAMP NOT NULL, PRIMARY KEY (content_hash, model)
    )""",
    """CREATE TABLE pending_changes (
        change_id VARCHAR PRIMARY KEY, cycle_id VARCHAR NOT NULL, pass_name VARCHAR NOT NULL,
        position INTEGER NOT NULL, label VARCHAR NOT NULL, safe BOOLEAN NOT NULL, summary VARCHAR NOT NULL,
        targets_json VARCHAR NOT NULL, rows_json VARCHAR NOT NULL, created_at TIMESTAMP NOT NULL,
        expires_at TIMESTAMP NOT NULL, status VARCHAR NOT NULL, decided_at TIMESTAMP, decision_reason VARCHAR
    )""",
    "INSERT INTO meta VALUES ('schema_version', '4')",
]

T0 = NOW - timedelta(days=3)
T1 = NOW - timedelta(days=2)
SAVE_CYCLE = "save-0123456789ab"


def _memory(eid: str, content: str, *, metadata: dict | None = None) -> MemoryEntry:
    return MemoryEntry(
        id=eid,
        content=content,
        category="facts",
        tags=(),
        importance=0.5,
        created_at=T0,
        updated_at=T0,
        last_seen_at=T0,
        reinforcement_count=1,
        metadata=dict(metadata or {}),
    )


LIVE = [
    _memory("mrg-000000001", "The user's manager is Priya Raman.", metadata={"mergedFrom": '["src-merge-0001"]'}),
    _memory("keep-0000001", "Jon works at the Fenwick bank."),
    _memory("winner-000001", "Alice moved to Berlin."),
    _memory("ext-00000001", "Kestrel ships on Fridays from dock 4, since May."),
    _memory("pend-src-0001", "Jon works at the Fenwick bank now."),
]
ARCHIVED = [
    # (entry, pass, cycle, reason): what version 4 wrote when it archived each one
    (
        _memory("src-merge-0001", "User's manager: Priya Raman."),
        "memory_consolidation",
        "c1",
        "merged into mrg-000000001",
    ),
    (
        _memory("src-twin-0001", "Jon said he works at the Fenwick bank."),
        "memory_consolidation",
        "c1",
        "merged into existing entry keep-0000001",
    ),
    (
        _memory("dup-000000001", "jon works at the fenwick bank"),
        "memory_consolidation",
        "c1",
        "exact duplicate of keep-0000001, folded into it",
    ),
    (
        _memory("loser-0000001", "Alice lives in Paris.", metadata={"supersededBy": "winner-000001"}),
        "contradiction_sweep",
        "c2",
        "superseded by winner-000001: a later fact",
    ),
    (
        _memory("forgot-000001", "The printer on floor 3 is broken."),
        "forget",
        "forget-20261127T120000000000Z-forgot-00000",
        "forgotten by the agent: merged into keep-0000001 by hand",
    ),
]


def _insert_memory(raw, e: MemoryEntry, seq: int) -> None:
    raw.execute(
        "INSERT INTO memories VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, NULL, NULL)",
        [
            e.id,
            e.content,
            e.category,
            json.dumps(list(e.tags)),
            e.importance,
            e.created_at.replace(tzinfo=None),
            e.updated_at.replace(tzinfo=None),
            e.last_seen_at.replace(tzinfo=None),
            e.reinforcement_count,
            json.dumps(e.metadata),
            e.archived_at.replace(tzinfo=None) if e.archived_at else None,
            seq,
        ],
    )


def _insert_change(raw, n: int, cycle: str, pass_name: str, kind: str, target, before, after, reason: str) -> None:
    target_type, target_id = ("memory", target.id) if isinstance(target, MemoryEntry) else ("skill", target.name)
    raw.execute(
        "INSERT INTO changes VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, NULL, nextval('row_seq'))",
        [
            f"chg-{n:04d}",
            cycle,
            pass_name,
            kind,
            target_type,
            target_id,
            None if before is None else json.dumps(before.to_dict(), sort_keys=True),
            None if after is None else json.dumps(after.to_dict(), sort_keys=True),
            reason,
            T1.replace(tzinfo=None),
        ],
    )


@pytest.fixture
def v4_store(profile):
    """A version-4 store file: merged, folded, duplicate, superseded and forgotten entries with the rows that version
    wrote, a merged skill, an agent save, a save-time extend, and a review set still pending."""
    profile.store_path.parent.mkdir(parents=True, exist_ok=True)
    with duckdb.connect(str(profile.store_path)) as raw:
        for stmt in V4_DDL:
            raw.execute(stmt)
        seq = 0
        for e in LIVE:
            seq += 1
            _insert_memory(raw, e, seq)
        n = 0
        for e, pass_name, cycle, reason in ARCHIVED:
            e = e.with_(archived_at=T1)
            seq += 1
            _insert_memory(raw, e, seq)
            n += 1
            _insert_change(raw, n, cycle, pass_name, "archived", e, e.with_(archived_at=None), e, reason)
        merged = LIVE[0]
        n += 1
        _insert_change(raw, n, "c1", "memory_consolidation", "created", merged, None, merged, "merged from src")
        old_skill = Skill("writing/weekly", "Weekly", "Write the weekly report.", (), T0, T0, None, T1)
        raw.execute(
            "INSERT INTO skills VALUES (?, ?, ?, '[]', ?, ?, NULL, ?, 1)",
            [
                old_skill.name,
                old_skill.summary,
                old_skill.content,
                T0.replace(tzinfo=None),
                T0.replace(tzinfo=None),
                T1.replace(tzinfo=None),
            ],
        )
        n += 1
        _insert_change(
            raw,
            n,
            "c3",
            "skill_consolidation",
            "archived",
            old_skill,
            old_skill.with_(archived_at=None),
            old_skill,
            "merged into writing/report",
        )
        ext = LIVE[3]
        n += 1
        _insert_change(raw, n, "agent-2026-11-27", "agent", "created", LIVE[1], None, LIVE[1], "saved by the agent")
        n += 1
        _insert_change(
            raw,
            n,
            SAVE_CYCLE,
            "save",
            "updated",
            ext,
            ext.with_(content="Kestrel ships on Fridays from dock 4."),
            ext,
            "save-time dedup extended it with the saved text: adds a date",
        )
        source = LIVE[4]
        gone = source.with_(archived_at=T1)
        row = {
            "cycle_id": "c4",
            "pass_name": "memory_consolidation",
            "kind": "archived",
            "target_type": "memory",
            "target_id": source.id,
            "before": source.to_dict(),
            "after": gone.to_dict(),
            "reason": "merged into existing entry keep-0000001",
        }
        target = {"type": "memory", "id": source.id, "before": source.to_dict(), "after": gone.to_dict()}
        raw.execute(
            "INSERT INTO pending_changes VALUES ('pend-1', 'c4', 'memory_consolidation', 0, 'merge', false, 'merge', "
            "?, ?, ?, ?, 'pending', NULL, NULL)",
            [
                json.dumps([target]),
                json.dumps([row]),
                T1.replace(tzinfo=None),
                (NOW + timedelta(days=30)).replace(tzinfo=None),
            ],
        )
        recompute_fingerprint(raw)  # version 4 kept each row's part with the row
    return profile


def test_a_version_4_store_gets_the_columns_and_says_where_each_entry_went_as_before(v4_store):
    profile = v4_store
    store = open_store(profile, dream_options())
    assert store.memories.fingerprint() == store.memories.recomputed_fingerprint()
    with store.connection.session() as conn:
        columns = {
            r[0]
            for r in conn.execute("SELECT column_name FROM duckdb_columns() WHERE table_name = 'changes'").fetchall()
        }
        assert {"actor", "successor_id", "successor_how"} <= columns
        assert conn.execute("SELECT value FROM meta WHERE key = 'schema_version'").fetchone() == (str(SCHEMA_VERSION),)
    went = {r.target_id: (r.successor_id, r.successor_how) for r in store.changes.list() if r.kind == "archived"}
    assert went == {
        "src-merge-0001": ("mrg-000000001", SuccessorHow.MERGED_INTO),
        "src-twin-0001": ("keep-0000001", SuccessorHow.FOLDED_INTO),
        "dup-000000001": ("keep-0000001", SuccessorHow.DUPLICATE_OF),
        "loser-0000001": ("winner-000001", SuccessorHow.SUPERSEDED_BY),
        "forgot-000001": (None, SuccessorHow.NONE),
        "writing/weekly": ("writing/report", SuccessorHow.MERGED_INTO),
    }
    actors = {r.cycle_id: r.actor for r in store.changes.list()}
    assert actors == {
        "c1": Actor.PASS,
        "c2": Actor.PASS,
        "c3": Actor.PASS,
        "forget-20261127T120000000000Z-forgot-00000": Actor.AGENT_FORGET,
        "agent-2026-11-27": Actor.AGENT_SAVE,
        SAVE_CYCLE: Actor.SAVE_DEDUP,
    }
    # what get said before the upgrade (it read the reasons then)
    seen = {
        eid: (r.merged_into, r.superseded_by, r.current_id)
        for eid in ("src-merge-0001", "src-twin-0001", "dup-000000001", "loser-0000001")
        for r in [am.get(profile, eid, now=NOW)]
    }
    assert seen == {
        "src-merge-0001": ("mrg-000000001", None, "mrg-000000001"),
        "src-twin-0001": ("keep-0000001", None, "keep-0000001"),
        "dup-000000001": ("keep-0000001", None, "keep-0000001"),
        "loser-0000001": (None, "winner-000001", "winner-000001"),
    }
    assert am.get(profile, "loser-0000001", now=NOW).archived_reason == "superseded by winner-000001: a later fact"
    # A forget's reason is the agent's own words: the old reading took the id after "merged into" anywhere in them.
    forgot = am.get(profile, "forgot-000001", now=NOW)
    assert (forgot.merged_into, forgot.current_id) == (None, None)
    events = {e.id: am.history(profile, e.id, now=NOW).events[-1].event for e, *_ in ARCHIVED}
    assert events == {
        "src-merge-0001": "merged out",
        "src-twin-0001": "merged out",
        "dup-000000001": "merged out",
        "loser-0000001": "superseded",
        "forgot-000001": "archived",
    }
    store.close()
    close_all()
    with duckdb.connect(str(profile.store_path)) as raw:  # the upgrade ran once: a second open changes nothing
        before = raw.execute("SELECT * FROM changes ORDER BY ordinal").fetchall()
    again = open_store(profile, dream_options())
    with again.connection.session() as conn:
        assert conn.execute("SELECT * FROM changes ORDER BY ordinal").fetchall() == before


def test_an_upgraded_store_undoes_its_old_cycles_by_the_ids_stored_then(v4_store, capsys):
    profile = v4_store
    assert main(["undo", "--profile", str(profile.root), "--cycle", SAVE_CYCLE, "--now", NOW.isoformat()]) == 0
    assert am.get(profile, "ext-00000001", now=NOW).content == "Kestrel ships on Fridays from dock 4."
    result = open_store(profile, dream_options()).changes.undo_cycle("c2", now=NOW)
    assert result.ok and result.done("unsuperseded") == ["memory loser-0000001"]  # the kind from the field


def test_a_review_set_held_before_the_upgrade_records_where_its_entry_went_when_applied(v4_store):
    profile = v4_store
    store = open_store(profile, dream_options())
    (held,) = review.list_changes(store)
    assert [(r["successor_id"], r["successor_how"]) for r in held.rows] == [("keep-0000001", "folded_into")]
    result = review.decide(store, "apply", cycle_id="c4", now=NOW, options=dream_options())
    assert result.done == ["pend-1"], result
    got = am.get(profile, "pend-src-0001", now=NOW)
    assert (got.status, got.merged_into, got.current_id) == ("archived", "keep-0000001", "keep-0000001")
    assert iso(store.memories.get("pend-src-0001").archived_at) == iso(T1)


@pytest.mark.parametrize(
    "kind,reason,expected",
    [
        ("archived", "merged into 5f0c2a", ("5f0c2a", SuccessorHow.MERGED_INTO)),
        ("archived", "merged into existing entry keep-1", ("keep-1", SuccessorHow.FOLDED_INTO)),
        ("archived", "exact duplicate of m0, folded into it", ("m0", SuccessorHow.DUPLICATE_OF)),
        ("archived", "superseded by w1: a later fact: moved in May", ("w1", SuccessorHow.SUPERSEDED_BY)),
        ("archived", "merged into writing/report", ("writing/report", SuccessorHow.MERGED_INTO)),  # a skill
        # the agent's own words, a removal, a row that archives nothing: no successor
        ("archived", "forgotten by the agent: merged into keep-1 by hand", (None, SuccessorHow.NONE)),
        ("archived", "ephemeral: superseded — every word of it is in live entry x1", (None, SuccessorHow.NONE)),
        ("updated", "merged into x1", (None, SuccessorHow.NONE)),
        ("archived", "", (None, SuccessorHow.NONE)),
    ],
)
def test_the_reasons_older_versions_wrote_name_the_successor_they_meant(kind, reason, expected):
    assert legacy_successor(kind, reason) == expected
