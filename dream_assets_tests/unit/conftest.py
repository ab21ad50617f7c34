"""The unit tier: pure tests. A test here that opens a DuckDB file, starts a process or opens a network socket fails
with the reason (it belongs in ``integration/``); ``test_project_layout`` checks that no file here imports Dagster."""

from __future__ import annotations

import socket
import subprocess

import duckdb
import pytest

_WHY = "a unit test is pure (no DuckDB file, no Dagster, no subprocess, no socket): move it to integration/"


class NotPure(AssertionError):
    pass


@pytest.fixture(autouse=True)
def _pure(monkeypatch: pytest.MonkeyPatch) -> None:
    connect = duckdb.connect

    def in_memory_only(database: object = ":memory:", *args: object, **kwargs: object) -> duckdb.DuckDBPyConnection:
        if str(database) not in ("", ":memory:") and not str(database).startswith(":memory:"):
            raise NotPure(f"opened the DuckDB file {database}: {_WHY}")
        return connect(database, *args, **kwargs)  # type: ignore[arg-type]

    def no_process(self: object, args: object, *rest: object, **kwargs: object) -> None:
        raise NotPure(f"started the process {args!r}: {_WHY}")

    def no_network(name: str):  # type: ignore[no-untyped-def]
        real = getattr(socket.socket, name)

        def call(self: socket.socket, *args: object, **kwargs: object) -> object:
            if self.family in (socket.AF_INET, socket.AF_INET6):
                raise NotPure(f"socket {name} {args!r}: {_WHY}")
            return real(self, *args, **kwargs)

        return call

    monkeypatch.setattr(duckdb, "connect", in_memory_only)
    monkeypatch.setattr(subprocess.Popen, "__init__", no_process)
    for name in ("connect", "connect_ex", "bind"):
        monkeypatch.setattr(socket.socket, name, no_network(name))
