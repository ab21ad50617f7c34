"""DuckDB schema of one agent's store: memories, skills, purge records, the dream change log and embedding vectors.

A store written by an older version is upgraded in place when it is opened: every statement of ``DDL`` is
idempotent (``IF NOT EXISTS``), so an upgrade runs them all in one transaction and records the new version.
Version history: 1 the first schema; 2 adds ``embeddings`` (vectors cached per content hash and model).
"""

from __future__ import annotations

from datetime import UTC, datetime

import duckdb

from dream_assets.store.connection import StoreError

SCHEMA_VERSION = 2

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
        seq BIGINT NOT NULL                 -- bumped on every change to searchable fields or archive state
    )""",
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
        ordinal BIGINT NOT NULL
    )""",
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
]


def ensure_schema(conn: duckdb.DuckDBPyConnection) -> None:
    row = None
    try:
        row = conn.execute("SELECT value FROM meta WHERE key = 'schema_version'").fetchone()
    except duckdb.CatalogException:
        row = None
    if row is not None:
        if int(row[0]) > SCHEMA_VERSION:
            raise StoreError(
                f"store schema version {row[0]} is newer than this dream_assets ({SCHEMA_VERSION}); "
                "upgrade dream_assets to use this store"
            )
        if int(row[0]) == SCHEMA_VERSION:
            return
    conn.execute("BEGIN TRANSACTION")
    for stmt in DDL:
        conn.execute(stmt)
    conn.execute("INSERT OR REPLACE INTO meta VALUES ('schema_version', ?)", [str(SCHEMA_VERSION)])
    conn.execute("COMMIT")


def to_db(dt: datetime | None) -> datetime | None:
    """DuckDB TIMESTAMP columns hold naive UTC."""
    if dt is None:
        return None
    if dt.tzinfo is None:
        return dt
    return dt.astimezone(UTC).replace(tzinfo=None)


def from_db(dt: datetime | None) -> datetime | None:
    return None if dt is None else dt.replace(tzinfo=UTC)
