"""DuckDB schema of one agent's store: memories, skills, purge records, the dream change log and embedding vectors.

A store written by an older version is upgraded in place when it is opened: every statement of ``DDL`` is
idempotent (``IF NOT EXISTS``), so an upgrade runs them all in one transaction and records the new version.
Version history: 1 the first schema; 2 adds ``embeddings`` (vectors cached per content hash and model); 3 adds
``memory_fingerprint``, the live corpus fingerprint kept up to date by every write (computed from the rows once when
an older store is upgraded).

The corpus fingerprint is an order-independent sum: each live memory contributes the sha256 of its length-prefixed
id, content, category and tags (``ROW_HASH_SQL``; lengths in UTF-8 bytes), read as two 64-bit numbers, and the
table holds their sums modulo 2**64 and the live count. A write adds the new row's part and subtracts the old one in
the same transaction, so the sum matches the rows after a rollback or a crash as well.
"""

from __future__ import annotations

from datetime import UTC, datetime

import duckdb

from dream_assets.store.connection import StoreError

SCHEMA_VERSION = 3
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
    # Version 3. One row: the live count and the two sums of the live rows' hashes (see the module docstring).
    "CREATE TABLE IF NOT EXISTS memory_fingerprint (live BIGINT NOT NULL, h1 UBIGINT NOT NULL, h2 UBIGINT NOT NULL)",
]


def fingerprint_sums_sql(relation: str, where: str = "archived_at IS NULL") -> str:
    """SELECT count, sum of h1, sum of h2 (each modulo 2**64) of the rows of ``relation`` matching ``where``."""
    halves = _HALVES_SQL.format(h="h")
    return (
        f"SELECT count(*), coalesce(sum(h1) % {FINGERPRINT_MODULUS}, 0), coalesce(sum(h2) % {FINGERPRINT_MODULUS}, 0) "
        f"FROM (SELECT {halves} FROM (SELECT {ROW_HASH_SQL} AS h FROM {relation} WHERE {where}))"
    )


def recompute_fingerprint(conn: duckdb.DuckDBPyConnection) -> None:
    """Rebuild the stored corpus fingerprint from the rows (an upgrade, or a store written by an older version)."""
    conn.execute("DELETE FROM memory_fingerprint")
    conn.execute(f"INSERT INTO memory_fingerprint {fingerprint_sums_sql('memories')}")


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
    recompute_fingerprint(conn)
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
