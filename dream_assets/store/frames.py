"""Python values handed to DuckDB as a table for one statement, with numpy alone: DuckDB scans a dict of numpy
arrays (one per column, all of one length) registered on a connection, so a bulk insert or update needs no Arrow.

Columns keep their types: text is an object array (None is NULL), timestamps datetime64[us] (naive UTC, None is
NaT and so NULL), numbers a numpy array of the column's width."""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from contextlib import contextmanager
from datetime import datetime
from typing import Any

import duckdb
import numpy as np


def texts(values: Iterable[str | None]) -> np.ndarray:
    """A text column (VARCHAR), or any column of Python values DuckDB reads one by one (lists of text)."""
    values = list(values)
    return np.fromiter(values, dtype=object, count=len(values))  # one dimension, even for lists of lists


def timestamps(values: Iterable[datetime | None]) -> np.ndarray:
    """A TIMESTAMP column of naive UTC datetimes (schema.to_db's), microseconds."""
    return np.array([np.datetime64("NaT") if v is None else v for v in values], dtype="datetime64[us]")


@contextmanager
def registered(conn: duckdb.DuckDBPyConnection, name: str, columns: Mapping[str, Any]) -> Iterator[str]:
    """``columns`` (name -> numpy array, or a list: made a text column when it holds text, else a numpy array) as the
    table ``name`` on ``conn`` while the block runs."""
    arrays = {k: v if isinstance(v, np.ndarray) else _array(v) for k, v in columns.items()}
    conn.register(name, arrays)
    try:
        yield name
    finally:
        conn.unregister(name)


def _array(values: Iterable[Any]) -> np.ndarray:
    values = list(values)
    if any(isinstance(v, str) for v in values) or all(v is None for v in values):
        return texts(values)
    return np.array(values)
