"""Parquet files written and read through DuckDB, which does both natively: the snapshots, the log analyses and the
log warehouse need no Arrow library. A file written here has the columns and types it is given; files written
earlier by other Parquet writers (pyarrow's, before) read the same.

Times: a ``TIMESTAMPTZ`` column is written as UTC instants (Parquet's timestamp adjusted to UTC, microseconds) and
reads back as aware datetimes in UTC; a ``TIMESTAMP`` column is naive (schema.to_db's UTC) both ways."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import duckdb
import numpy as np

from dream_assets.store.frames import registered, texts

#: Column name -> (DuckDB type, values: a numpy array, or a list made into one: text as an object array).
Columns = Mapping[str, tuple[str, Any]]


def connect() -> duckdb.DuckDBPyConnection:
    """An in-memory DuckDB that reads and writes times in UTC."""
    conn = duckdb.connect(":memory:")
    conn.execute("SET TimeZone = 'UTC'")
    return conn


def sql_text(value: str | Path) -> str:
    """``value`` as an SQL string literal."""
    return "'" + str(value).replace("'", "''") + "'"


def name(column: str) -> str:
    """``column`` as a quoted SQL identifier."""
    return '"' + column.replace('"', '""') + '"'


def write_parquet(
    path: Path, columns: Columns, *, options: str = "", conn: duckdb.DuckDBPyConnection | None = None
) -> None:
    """Write ``columns`` (all of one length) to the Parquet file ``path`` with exactly the given types. A naive time
    given for a TIMESTAMPTZ column is UTC. ``options``: more COPY options (", COMPRESSION zstd")."""
    own = conn is None
    conn = connect() if conn is None else conn
    try:
        arrays = {f"c{i}": _array(values) for i, (_, values) in enumerate(columns.values())}
        select = ", ".join(
            f"CAST(c{i} AS {sql_type}) AS {name(column)}" for i, (column, (sql_type, _)) in enumerate(columns.items())
        )
        with registered(conn, "_parquet_rows", arrays):
            conn.execute(f"COPY (SELECT {select} FROM _parquet_rows) TO {sql_text(path)} (FORMAT parquet{options})")
    finally:
        if own:
            conn.close()


def read_parquet(path: Path, columns: Sequence[str] | None = None) -> list[dict[str, Any]]:
    """The rows of the Parquet file ``path`` (only ``columns`` when given) as dicts, in the file's order."""
    with connect() as conn:
        wanted = ", ".join(name(c) for c in columns) if columns is not None else "*"
        # A folder named like a partition ("date=2026-11-30") adds no column: the file has what it holds.
        cursor = conn.execute(f"SELECT {wanted} FROM read_parquet({sql_text(path)}, hive_partitioning = false)")
        names = [d[0] for d in cursor.description]
        return [dict(zip(names, row, strict=True)) for row in cursor.fetchall()]


def read_columns(
    path: Path, columns: Sequence[str], where: str = "", params: Sequence[Any] = ()
) -> dict[str, np.ndarray]:
    """``columns`` of the rows of the Parquet file ``path`` (those ``where`` holds, an SQL condition with ``params``
    for its ``?``), in the file's order, as numpy arrays: text as objects, times as datetime64[us] in UTC; a column
    with nulls is a masked array."""
    with connect() as conn:
        wanted = ", ".join(name(c) for c in columns)
        sql = f"SELECT {wanted} FROM read_parquet({sql_text(path)}, hive_partitioning = false)"
        return conn.execute(sql + (f" WHERE {where}" if where else ""), list(params)).fetchnumpy()


def _array(values: Any) -> np.ndarray:
    if isinstance(values, np.ndarray):
        return values
    return texts(values)  # an object array holds any Python value (text, a list of text); DuckDB reads each
