"""The unit tier's guard holds: what makes a test impure fails it here, with the reason."""

from __future__ import annotations

import socket
import subprocess
import sys

import duckdb
import pytest

from .conftest import NotPure


def test_a_duckdb_file_fails_a_unit_test_and_memory_does_not(tmp_path):
    with pytest.raises(NotPure, match="move it to integration/"):
        duckdb.connect(str(tmp_path / "store.duckdb"))
    assert duckdb.connect(":memory:").execute("SELECT 1").fetchone() == (1,)


def test_a_process_fails_a_unit_test():
    with pytest.raises(NotPure, match="started the process"):
        subprocess.run([sys.executable, "-c", "pass"], check=False)


def test_a_network_socket_fails_a_unit_test():
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s, pytest.raises(NotPure, match="socket bind"):
        s.bind(("127.0.0.1", 0))
