"""A throwaway PostgreSQL server for tests: Debian's ``postgresql`` package, a fresh cluster in a temporary folder,
listening on 127.0.0.1 only, stopped (and its files deleted) when the test session ends.

``.ci/run`` installs the package when it is missing. Where it cannot be had (no binaries, no ``postgres`` user to run
the server as root), :func:`start_postgres` raises :class:`PostgresUnavailable` with the reason, and the tests that
need it skip with that reason.
"""

from __future__ import annotations

import contextlib
import glob
import os
import shutil
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

USER = "dagster"


class PostgresUnavailable(RuntimeError):
    """No PostgreSQL server can be started here; the message says why."""


@dataclass(frozen=True)
class PostgresServer:
    host: str
    port: int
    user: str
    bin_dir: Path
    data_dir: Path | None = None
    options: str = ""
    as_user: str | None = None

    def stop(self) -> None:
        """Stop the server at once, as a crash or an outage does (``-m immediate``: no clean shutdown)."""
        self._ctl("-m", "immediate", "stop")

    def start(self) -> None:
        """Start it again after :meth:`stop`, on the same port and data."""
        self._ctl("-o", self.options, "-l", str(Path(str(self.data_dir)).parent / "server.log"), "-w", "start")

    def _ctl(self, *args: str) -> None:
        if self.data_dir is None:
            raise PostgresUnavailable("this server was not started by start_postgres: it cannot be stopped here")
        _run([str(self.bin_dir / "pg_ctl"), "-D", str(self.data_dir), *args], as_user=self.as_user, timeout=120)

    def env(self, database: str) -> dict[str, str]:
        """The environment variables ``deploy/dagster-postgres.yaml`` reads, for ``database`` on this server."""
        return {
            "DAGSTER_PG_HOST": self.host,
            "DAGSTER_PG_PORT": str(self.port),
            "DAGSTER_PG_USERNAME": self.user,
            "DAGSTER_PG_PASSWORD": "",
            "DAGSTER_PG_DB": database,
        }

    def url(self, database: str) -> str:
        return f"postgresql://{self.user}@{self.host}:{self.port}/{database}"

    def create_database(self, name: str) -> str:
        _run([str(self.bin_dir / "createdb"), "-h", self.host, "-p", str(self.port), "-U", self.user, name])
        return name


def _bin_dir() -> Path:
    found = sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"), key=lambda p: int(Path(p).parts[-3]))
    if found:
        return Path(found[-1]).parent
    initdb = shutil.which("initdb")
    if initdb:
        return Path(initdb).resolve().parent
    raise PostgresUnavailable(
        "PostgreSQL is not installed (no initdb under /usr/lib/postgresql/*/bin or on PATH): "
        "apt-get install postgresql (.ci/run does this on CI)"
    )


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _run(cmd: list[str], *, as_user: str | None = None, timeout: float = 60) -> None:
    if as_user:
        cmd = ["runuser", "-u", as_user, "--", *cmd]
    result = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    if result.returncode != 0:
        raise PostgresUnavailable(f"{' '.join(cmd)} failed ({result.returncode}): {result.stderr.strip()[-800:]}")


@contextlib.contextmanager
def start_postgres() -> Iterator[PostgresServer]:
    """Start a fresh cluster on 127.0.0.1 and a free port; stop it and delete its files afterwards."""
    bin_dir = _bin_dir()
    as_user = None
    if os.geteuid() == 0:  # the server refuses to run as root: run it as the package's own user
        import pwd

        try:
            account = pwd.getpwnam("postgres")
        except KeyError:
            raise PostgresUnavailable("running as root and there is no 'postgres' user to run the server as") from None
        as_user = "postgres"
    base = Path(tempfile.mkdtemp(prefix="dream-pg-"))
    data, sockets = base / "data", base / "sock"
    sockets.mkdir()
    if as_user:
        for p in (base, sockets):
            os.chown(p, account.pw_uid, account.pw_gid)
    port = _free_port()
    try:
        _run(
            [str(bin_dir / "initdb"), "-D", str(data), "-U", USER, "-A", "trust", "-E", "UTF8", "--no-sync"],
            as_user=as_user,
            timeout=120,
        )
        options = f"-c listen_addresses=127.0.0.1 -p {port} -k {sockets} -c fsync=off -c max_connections=200"
        _run(
            [str(bin_dir / "pg_ctl"), "-D", str(data), "-o", options, "-l", str(base / "server.log"), "-w", "start"],
            as_user=as_user,
            timeout=120,
        )
        server = PostgresServer("127.0.0.1", port, USER, bin_dir, data, options, as_user)
        deadline = time.monotonic() + 30
        while True:
            ready = subprocess.run(
                [str(bin_dir / "pg_isready"), "-h", "127.0.0.1", "-p", str(port)], capture_output=True
            )
            if ready.returncode == 0:
                break
            if time.monotonic() > deadline:
                raise PostgresUnavailable(f"PostgreSQL on 127.0.0.1:{port} did not become ready in 30 s")
            time.sleep(0.2)
        try:
            yield server
        finally:
            prefix = ["runuser", "-u", as_user, "--"] if as_user else []
            subprocess.run(
                [*prefix, str(bin_dir / "pg_ctl"), "-D", str(data), "-m", "immediate", "stop"],
                capture_output=True,
                timeout=60,
            )
    finally:
        shutil.rmtree(base, ignore_errors=True)
