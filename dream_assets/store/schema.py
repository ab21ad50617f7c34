"""DuckDB schema of one agent's store: memories, skills, purge records, the dream change log and embedding vectors.

A store written by an older version is upgraded in place when it is opened: every statement of ``DDL`` is
idempotent (``IF NOT EXISTS``), so an upgrade runs them all in one transaction and records the new version.
Version history: 1 the first schema; 2 adds ``embeddings`` (vectors cached per content hash and model); 3 adds
``memory_fingerprint``, the live corpus fingerprint kept up to date by every write; 4 keeps each row's part of the
fingerprint in the row itself (``fp_h1``, ``fp_h2``) instead, and drops ``memory_fingerprint`` (the parts are
computed from the rows once when an older store is upgraded); 5 gives each change row its actor and, for an archived
entry, its successor (``actor``, ``successor_id``, ``successor_how``: ``dream_assets/changes_model.py``), filled in
for the rows of an older store by the upgrade — the one place a successor is read out of a reason's text
(``legacy_successor``), for the rows and for the pending review sets that hold rows.

The corpus fingerprint is an order-independent sum: each live memory contributes the sha256 of its length-prefixed
id, content, category and tags (``ROW_HASH_SQL``; lengths in UTF-8 bytes), read as two 64-bit numbers. Every write
stores those two numbers with the row, in the same statement, so they match the rows after a rollback or a crash as
well; reading the fingerprint sums them over the live rows (``KEPT_SUMS_SQL``: two integer columns, a few
milliseconds at a million rows, no hashing). A separate table of running sums cost every save one more statement
and one more modified table in its commit, about a fifth of a save.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime

import duckdb

from dream_assets.changes_model import ACTOR_PASS_NAMES, Actor, SuccessorHow, legacy_successor
from dream_assets.store.connection import StoreError
from dream_assets.store.frames import registered, texts

SCHEMA_VERSION = 5
#: Per-row hash of the corpus fingerprint, over the columns of ``memories`` (or a relation with the same names).
ROW_HASH_SQL = (
    "sha256(concat(strlen(id), ':', id, '|', strlen(content), ':', content, '|', "
    "strlen(category), ':', category, '|', strlen(tags), ':', tags))"
)
#: The two 64-bit halves of a row hash and the modulus of their sums.
_HALVES_SQL = (
    "('0x' || substr({h}, 1, 16))::UBIGINT::HUGEINT AS h1, ('0x' || substr({h}, 17, 16))::UBIGINT::HUGEINT AS h2"
)
FINGERPRINT_MODULUS = 2**64
#: The live count and the sums (modulo 2**64) of the row hash halves every write stores with its row.
KEPT_SUMS_SQL = (
    f"SELECT count(*), coalesce(sum(fp_h1::HUGEINT) % {FINGERPRINT_MODULUS}, 0), "
    f"coalesce(sum(fp_h2::HUGEINT) % {FINGERPRINT_MODULUS}, 0) FROM memories WHERE archived_at IS NULL"
)

#: The columns of ``changes``, in table order (an upgraded table has them in this order too: new ones are appended).
CHANGE_COLUMNS = (
    "change_id",
    "cycle_id",
    "pass_name",
    "kind",
    "target_type",
    "target_id",
    "before_json",
    "after_json",
    "reason",
    "created_at",
    "undone_at",
    "ordinal",
    "actor",
    "successor_id",
    "successor_how",
)

DDL = [
    "CREATE SEQUENCE IF NOT EXISTS row_seq START 1",
    """CREATE TABLE IF NOT EXISTS memories (
        id VARCHAR PRIMARY KEY,
        content VARCHAR NOT NULL,
        category VARCHAR NOT NULL,
        tags VARCHAR NOT NULL,              -- JSON array of strings
        importance DOUBLE NOT NULL,
        created_at TIMESTAMP NOT NULL,      -- UTC
        updated_at TIMESTAMP NOT NULL,
        last_seen_at TIMESTAMP NOT NULL,
        reinforcement_count INTEGER NOT NULL,
        metadata VARCHAR NOT NULL,          -- JSON object of string -> string
        archived_at TIMESTAMP,
        seq BIGINT NOT NULL,                -- bumped on every change to searchable fields or archive state
        fp_h1 UBIGINT,                      -- the row's part of the corpus fingerprint (ROW_HASH_SQL halves)
        fp_h2 UBIGINT
    )""",
    # Version 4 on an older store: the fingerprint parts join the rows (filled in by the upgrade).
    "ALTER TABLE memories ADD COLUMN IF NOT EXISTS fp_h1 UBIGINT",
    "ALTER TABLE memories ADD COLUMN IF NOT EXISTS fp_h2 UBIGINT",
    # One row per hard delete: the audit tells purges from unexplained disappearances with it.
    """CREATE TABLE IF NOT EXISTS memory_purges (
        id VARCHAR NOT NULL, purged_at TIMESTAMP NOT NULL, archived_at TIMESTAMP, content VARCHAR, seq BIGINT NOT NULL
    )""",
    """CREATE TABLE IF NOT EXISTS skills (
        name VARCHAR PRIMARY KEY,
        summary VARCHAR NOT NULL,
        content VARCHAR NOT NULL,
        see_also VARCHAR NOT NULL,          -- JSON array of skill names
        created_at TIMESTAMP NOT NULL,
        updated_at TIMESTAMP NOT NULL,
        last_used_at TIMESTAMP,
        archived_at TIMESTAMP,
        seq BIGINT NOT NULL
    )""",
    """CREATE TABLE IF NOT EXISTS changes (
        change_id VARCHAR PRIMARY KEY,
        cycle_id VARCHAR NOT NULL,
        pass_name VARCHAR NOT NULL,
        kind VARCHAR NOT NULL,              -- created | archived | updated | restored | purged | stamped
        target_type VARCHAR NOT NULL,       -- memory | skill
        target_id VARCHAR NOT NULL,
        before_json VARCHAR,                -- full record before (NULL when created)
        after_json VARCHAR,                 -- full record after (NULL when purged)
        reason VARCHAR NOT NULL,
        created_at TIMESTAMP NOT NULL,
        undone_at TIMESTAMP,
        ordinal BIGINT NOT NULL,
        actor VARCHAR,                      -- who made it: changes_model.Actor
        successor_id VARCHAR,               -- an archived entry: the entry (or skill) its fact went into
        successor_how VARCHAR               -- how: changes_model.SuccessorHow (none without a successor)
    )""",
    # Version 5 on an older store: the actor and successor columns (filled in by the upgrade).
    "ALTER TABLE changes ADD COLUMN IF NOT EXISTS actor VARCHAR",
    "ALTER TABLE changes ADD COLUMN IF NOT EXISTS successor_id VARCHAR",
    "ALTER TABLE changes ADD COLUMN IF NOT EXISTS successor_how VARCHAR",
    "CREATE TABLE IF NOT EXISTS meta (key VARCHAR PRIMARY KEY, value VARCHAR NOT NULL)",
    # Version 2. One vector per (text, embedding model): content_hash is sha256 of the UTF-8 text, lower-case hex
    # (DuckDB's sha256(content) gives the same), so an unchanged entry is never embedded twice.
    """CREATE TABLE IF NOT EXISTS embeddings (
        content_hash VARCHAR NOT NULL,
        model VARCHAR NOT NULL,
        dim INTEGER NOT NULL,
        vector FLOAT[] NOT NULL,            -- L2-normalised
        created_at TIMESTAMP NOT NULL,      -- UTC
        PRIMARY KEY (content_hash, model)
    )""",
    # Version 3's running sums, replaced by the rows' own parts in version 4.
    "DROP TABLE IF EXISTS memory_fingerprint",
]


def fingerprint_sums_sql(relation: str, where: str = "archived_at IS NULL") -> str:
    """SELECT count, sum of h1, sum of h2 (each modulo 2**64) of the rows of ``relation`` matching ``where``."""
    halves = _HALVES_SQL.format(h="h")
    return (
        f"SELECT count(*), coalesce(sum(h1) % {FINGERPRINT_MODULUS}, 0), coalesce(sum(h2) % {FINGERPRINT_MODULUS}, 0) "
        f"FROM (SELECT {halves} FROM (SELECT {ROW_HASH_SQL} AS h FROM {relation} WHERE {where}))"
    )


def row_hash_columns_sql(relation: str) -> str:
    """``fp_h1, fp_h2`` of every row of ``relation`` (the columns of ``memories``), computed from its fields."""
    return (
        "('0x' || substr(h, 1, 16))::UBIGINT AS fp_h1, ('0x' || substr(h, 17, 16))::UBIGINT AS fp_h2 "
        f"FROM (SELECT *, {ROW_HASH_SQL} AS h FROM {relation})"
    )


def recompute_fingerprint(conn: duckdb.DuckDBPyConnection) -> None:
    """Store every row's fingerprint part, computed from its fields (an upgrade from an older version)."""
    conn.execute(
        f"UPDATE memories SET fp_h1 = r.fp_h1, fp_h2 = r.fp_h2 FROM (SELECT id, {row_hash_columns_sql('memories')}) r "
        "WHERE memories.id = r.id"
    )


def backfill_change_rows(conn: duckdb.DuckDBPyConnection) -> None:
    """Give the change rows of an older store (version < 5) their actor (from the pass name) and successor (from the
    reason its archiving wrote, ``legacy_successor``), and the rows held by pending review sets their successor."""
    cases = " ".join(f"WHEN '{name}' THEN '{actor}'" for actor, name in ACTOR_PASS_NAMES.items())
    conn.execute(f"UPDATE changes SET actor = CASE pass_name {cases} ELSE '{Actor.PASS}' END WHERE actor IS NULL")
    archived = conn.execute(
        "SELECT change_id, reason FROM changes WHERE kind = 'archived' AND successor_how IS NULL"
    ).fetchall()
    found = {cid: legacy_successor("archived", reason) for cid, reason in archived}
    found = {cid: s for cid, s in found.items() if s[0]}
    if found:
        columns = {
            "change_id": texts(found),
            "successor_id": texts(s[0] for s in found.values()),
            "successor_how": texts(str(s[1]) for s in found.values()),
        }
        with registered(conn, "_successors_in", columns):
            conn.execute(
                "UPDATE changes SET successor_id = s.successor_id, successor_how = s.successor_how "
                "FROM _successors_in s WHERE changes.change_id = s.change_id"
            )
    conn.execute(f"UPDATE changes SET successor_how = '{SuccessorHow.NONE}' WHERE successor_how IS NULL")
    held = conn.execute(
        "SELECT count(*) FROM information_schema.tables WHERE table_name = 'pending_changes'"
    ).fetchall()[0][0]
    if not held:
        return
    for change_id, rows_json in conn.execute(
        "SELECT change_id, rows_json FROM pending_changes WHERE status = 'pending'"
    ).fetchall():
        rows = json.loads(rows_json)
        for r in rows:
            if "successor_how" not in r:
                sid, how = legacy_successor(r.get("kind", ""), r.get("reason"))
                r.update(successor_id=sid, successor_how=str(how))
        conn.execute(
            "UPDATE pending_changes SET rows_json = ? WHERE change_id = ?",
            [json.dumps(rows, sort_keys=True), change_id],
        )


def ensure_schema(conn: duckdb.DuckDBPyConnection) -> None:
    row = None
    try:
        row = conn.execute("SELECT value FROM meta WHERE key = 'schema_version'").fetchone()
    except duckdb.CatalogException:
        row = None
    old = None if row is None else int(row[0])
    if old is not None:
        if old > SCHEMA_VERSION:
            raise StoreError(
                f"store schema version {old} is newer than this dream_assets ({SCHEMA_VERSION}); "
                "upgrade dream_assets to use this store"
            )
        if old == SCHEMA_VERSION:
            return
    conn.execute("BEGIN TRANSACTION")
    for stmt in DDL:
        conn.execute(stmt)
    if old is None or old < 4:
        recompute_fingerprint(conn)
    if old is None or old < 5:
        backfill_change_rows(conn)
    conn.execute("INSERT OR REPLACE INTO meta VALUES ('schema_version', ?)", [str(SCHEMA_VERSION)])
    conn.execute("COMMIT")
    # The upgrade rewrote a column of every row: write them out now rather than leave every later statement to
    # work beside a million pending row updates until DuckDB's next automatic checkpoint.
    conn.execute("CHECKPOINT")


def to_db(dt: datetime | None) -> datetime | None:
    """DuckDB TIMESTAMP columns hold naive UTC."""
    if dt is None:
        return None
    if dt.tzinfo is None:
        return dt
    return dt.astimezone(UTC).replace(tzinfo=None)


def from_db(dt: datetime | None) -> datetime | None:
    return None if dt is None else dt.replace(tzinfo=UTC)


def where_equal(**columns: object) -> tuple[str, list[object]]:
    """A WHERE condition that each given column equals its value (a None value is left out), and its parameters."""
    given = {name: value for name, value in columns.items() if value is not None}
    return " AND ".join([f"{name} = ?" for name in given] or ["TRUE"]), list(given.values())
