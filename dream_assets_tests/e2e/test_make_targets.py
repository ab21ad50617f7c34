"""The commands the README documents, run as written: make targets (real make, real subprocesses, a temporary
DAGSTER_HOME and profile), the environment the bare commands need, the benchmarks' flags, `make backfill` and
`make dev` stopping on SIGTERM."""

import os
import re
import shlex
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from datetime import UTC, datetime
from pathlib import Path

import dagster as dg
import pytest

from dream_assets.demo import build_demo_profile
from dream_assets.launch import backfill
from dream_assets.orchestration.partitions import AGENTS
from dream_assets.profile import AgentProfile

REPO = Path(__file__).resolve().parents[2]
STOP_WAIT_S = 60  # make dev: from the signal to every process it started being gone
README = REPO / "README.md"
NOW = datetime(2026, 11, 30, 12, 0, tzinfo=UTC)


def make(*args: str, env: dict[str, str] | None = None, timeout: float = 300) -> subprocess.CompletedProcess:
    base = {k: v for k, v in os.environ.items() if k != "DAGSTER_HOME" and not k.startswith("DREAM__")}
    return subprocess.run(
        ["make", "-C", str(REPO), "--no-print-directory", *args],
        env={**base, **(env or {})},
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def readme_blocks() -> list[list[str]]:
    """The command lines of every ```sh block of the README (comments and continuations joined)."""
    blocks = re.findall(r"^```sh\n(.*?)^```", README.read_text(), flags=re.S | re.M)
    out = []
    for block in blocks:
        lines = []
        for line in block.replace("\\\n", " ").splitlines():
            command = line.split(" #")[0].strip()
            if command and not command.startswith("#"):
                lines.append(command)
        out.append(lines)
    return out


@pytest.fixture
def demo_profile(tmp_path) -> AgentProfile:
    profile = AgentProfile(tmp_path / "agents" / "demo")
    build_demo_profile(profile, NOW)
    return profile


# ---------------------------------------------------------------- the README's commands as written
def test_readme_activates_the_environment_before_any_bare_project_command():
    """`dream`, `dagster` and `python` live in .venv/bin: a block that uses them bare activates it first."""
    offenders = []
    for lines in readme_blocks():
        active = False
        for command in lines:
            word = shlex.split(command)[0]
            if word in {".", "source"} and command.endswith(".venv/bin/activate"):
                active = True
            elif word in {"dream", "dagster", "python", "python3", "pytest"} and not active:
                offenders.append(command)
    assert offenders == []


def test_every_make_command_in_the_readme_is_a_target_that_runs(tmp_path):
    """`make -n` (print, do not run) fails for an unknown target or a recipe make cannot expand."""
    commands = [c for lines in readme_blocks() for c in lines if c.startswith("make ")]
    assert {shlex.split(c)[1] for c in commands} >= {"run", "test", "dev", "backfill", "setup"}
    for command in commands:
        result = make("-n", *shlex.split(command)[1:], f"DAGSTER_HOME={tmp_path / 'home'}")
        assert result.returncode == 0, (command, result.stderr)


def test_every_benchmark_the_readme_names_exists_and_runs_with_the_project_environment():
    named = [c for lines in readme_blocks() for c in lines if "benchmarks/" in c]
    assert named
    for command in named:
        interpreter, script, *_ = shlex.split(command)
        assert interpreter == ".venv/bin/python", command
        assert (REPO / script).is_file(), command


@pytest.mark.parametrize("script", sorted(p.name for p in (REPO / "benchmarks").glob("*.py")))
@pytest.mark.slow  # every benchmark in a subprocess
def test_every_benchmark_takes_quick_as_a_flag_and_no_file_names(script):
    result = subprocess.run(
        [sys.executable, str(REPO / "benchmarks" / script), "--help"],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=REPO,
    )
    assert result.returncode == 0, result.stderr
    usage = " ".join(result.stdout.split("\n\n")[0].split())
    assert "[--quick]" in usage
    # Every argument is optional: `--quick` is never taken for a positional file name.
    assert re.fullmatch(r"usage: \S+( \[[^\[\]]+\])*", usage), usage


# ---------------------------------------------------------------- the instance the targets use
def test_make_test_unit_and_test_fast_select_tiers_by_folder_and_make_test_runs_them_all():
    unit = make("-n", "test-unit")
    assert unit.returncode == 0, unit.stderr
    assert unit.stdout.strip().splitlines()[-1] == ".venv/bin/python -m pytest -n 2 dream_assets_tests/unit"
    fast = make("-n", "test-fast")
    assert fast.returncode == 0, fast.stderr
    assert fast.stdout.strip().splitlines()[-1] == (
        ".venv/bin/python -m pytest -n 2 --dist loadfile dream_assets_tests/unit dream_assets_tests/integration"
    )
    full = make("-n", "test")
    assert full.returncode == 0, full.stderr
    assert full.stdout.strip().splitlines()[-1] == ".venv/bin/python -m pytest -n 2 --dist loadfile"


def test_the_instance_is_configured_from_the_template_and_no_dagster_yaml_sits_in_the_working_directory(
    tmp_path,
):
    # `dagster dev` warns that a dagster.yaml in its working directory "will not be used" unless it is DAGSTER_HOME.
    assert not (REPO / "dagster.yaml").exists() and not (REPO / "dagster.yml").exists()
    home = tmp_path / "home"
    result = make(str(home / "dagster.yaml"), f"DAGSTER_HOME={home}")
    assert result.returncode == 0, result.stderr
    with dg.DagsterInstance.from_config(str(home)) as instance:
        assert instance.get_settings("telemetry") == {"enabled": False}
        assert instance.get_settings("nux") == {"enabled": False}  # no community dialog over the UI's first page
        assert instance.get_settings("concurrency")["pools"]["default_limit"] == 1


@pytest.mark.slow  # make in a subprocess on the full demo
def test_make_status_prints_the_agents_counts_and_ledger(demo_profile, tmp_path):
    result = make("status", f"PROFILE={demo_profile.root}", f"DAGSTER_HOME={tmp_path / 'home'}")
    assert result.returncode == 0, result.stderr
    assert "agent demo" in result.stdout
    assert "memory_consolidation" in result.stdout and "skill_optimization" in result.stdout


# ---------------------------------------------------------------- make backfill
@pytest.mark.slow
def test_make_backfill_registers_the_agent_and_materializes_the_days_without_beta_warnings(demo_profile, tmp_path):
    home = tmp_path / "home"
    result = make(
        "backfill",
        f"PROFILE={demo_profile.root}",
        f"DAGSTER_HOME={home}",
        "FROM=2026-11-01",
        "TO=2026-11-03",
        "ASSETS=log_warehouse,wisp_failure_history",
    )
    output = result.stdout + result.stderr
    assert result.returncode == 0, output[-3000:]
    assert "DagsterInvalidSubsetError" not in output
    assert "BetaWarning" not in output and "PreviewWarning" not in output
    # no line per Dagster event: one summary of what was materialized and where to see it
    assert " - DEBUG - " not in output and len(output.strip().splitlines()) <= 8, output
    assert (
        "backfill: materialized agent demo 2026-11-01..2026-11-03: log_warehouse 3/3 day(s), "
        "wisp_failure_history 3/3 day(s); run " in result.stdout
    )
    assert f"in {home} (see it with `make dev`" in result.stdout
    days = {f"demo|2026-11-0{d}" for d in (1, 2, 3)}
    with dg.DagsterInstance.from_config(str(home)) as instance:
        assert instance.get_dynamic_partitions(AGENTS) == ["demo"]
        for asset in ("log_warehouse", "wisp_failure_history"):
            assert instance.get_materialized_partitions(dg.AssetKey(asset)) == days, asset
    # Again: the agent is already registered, the days are replaced, nothing fails.
    again = make(
        "backfill",
        f"PROFILE={demo_profile.root}",
        f"DAGSTER_HOME={home}",
        "FROM=2026-11-03",
        "TO=2026-11-03",
        "ASSETS=log_warehouse",
    )
    assert again.returncode == 0, (again.stdout + again.stderr)[-3000:]


@pytest.mark.slow  # make in a subprocess
def test_make_backfill_refuses_a_missing_profile_without_registering_it(tmp_path):
    home = tmp_path / "home"
    result = make(
        "backfill",
        f"PROFILE={tmp_path / 'agents' / 'nope'}",
        f"DAGSTER_HOME={home}",
        "FROM=2026-11-01",
        "TO=2026-11-02",
    )
    assert result.returncode != 0
    assert f"no agent profile at {tmp_path / 'agents' / 'nope'}" in result.stderr
    assert "dream init --profile" in result.stderr
    with dg.DagsterInstance.from_config(str(home)) as instance:
        assert instance.get_dynamic_partitions(AGENTS) == []


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--from", "2026-13-01", "--to", "2026-11-02"], "FROM '2026-13-01' is not a day: use YYYY-MM-DD"),
        (["--from", "2026-11-05", "--to", "2026-11-01"], "TO 2026-11-01 is before FROM 2026-11-05"),
        (["--to", "2026-11-01"], "FROM and TO are required"),
        (
            ["--from", "2026-11-01", "--to", "2026-11-02", "--select", "log_warehouse,memory_consolidation"],
            "ASSETS memory_consolidation: not day-partitioned; use any of log_warehouse,wisp_failure_history",
        ),
    ],
)
@pytest.mark.slow  # make in a subprocess
def test_backfill_names_the_argument_that_is_wrong(demo_profile, tmp_path, monkeypatch, capsys, args, message):
    monkeypatch.setenv("DAGSTER_HOME", str(tmp_path / "home"))
    assert backfill.main(["--profile", str(demo_profile.root), *args]) == 2
    err = capsys.readouterr().err
    assert err.startswith("backfill: ") and message in err and len(err.strip().splitlines()) == 1
    assert not (tmp_path / "home").exists()


def test_backfill_without_dagster_home_says_why_it_needs_one(demo_profile, monkeypatch, capsys):
    monkeypatch.delenv("DAGSTER_HOME", raising=False)
    assert backfill.main(["--profile", str(demo_profile.root), "--from", "2026-11-01", "--to", "2026-11-02"]) == 2
    assert "DAGSTER_HOME is not set" in capsys.readouterr().err


# ---------------------------------------------------------------- make dev
def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _processes_with(marker: bytes) -> list[int]:
    """Live processes whose environment holds ``marker`` (everything `make dev` started inherits DAGSTER_HOME)."""
    pids = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            environ = (entry / "environ").read_bytes()
            state = (entry / "stat").read_text().rsplit(")", 1)[1].split()[0]
        except OSError:
            continue
        if marker in environ.split(b"\0") and state != "Z":
            pids.append(int(entry.name))
    return pids


def _ignore_sigint() -> None:
    """What a non-interactive shell does to a job it starts with `&`."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)


@pytest.mark.slow
@pytest.mark.skipif(
    not Path("/proc/self/environ").exists(), reason="needs /proc to find the processes make dev started"
)
@pytest.mark.parametrize(
    "how",
    [
        "SIGTERM to make",
        "Ctrl-C (SIGINT to the process group)",
        # A script's `make dev &` inherits SIGINT ignored; `dagster dev` maps SIGTERM onto SIGINT's disposition.
        "SIGTERM to make started as a background job (SIGINT ignored)",
    ],
)
def test_make_dev_stops_with_all_its_services(tmp_path, how):
    home, port = tmp_path / "home", _free_port()
    marker = f"DAGSTER_HOME={home}".encode()
    env = {k: v for k, v in os.environ.items() if k != "DAGSTER_HOME" and not k.startswith("DREAM__")}
    env |= {"DAGSTER_HOME": str(home), "DREAM__Enabled": "false"}  # no cycle is launched while the test runs
    log = tmp_path / "dev.log"
    with log.open("w") as out:
        proc = subprocess.Popen(
            [
                "make",
                "-C",
                str(REPO),
                "--no-print-directory",
                "dev",
                f"PORT={port}",
                f"PROFILE={tmp_path / 'agents' / 'demo'}",
            ],
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            preexec_fn=_ignore_sigint if "background job" in how else None,
        )
    try:
        deadline = time.monotonic() + 240
        while True:
            assert proc.poll() is None, log.read_text()[-3000:]
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/server_info", timeout=2) as response:
                    assert response.status == 200
                break
            except OSError:
                assert time.monotonic() < deadline, "the webserver never answered:\n" + log.read_text()[-3000:]
                time.sleep(1)
        assert len(_processes_with(marker)) >= 3  # dagster dev, the webserver and the daemon at least
        if how.startswith("SIGTERM"):
            proc.send_signal(signal.SIGTERM)
        else:
            os.killpg(proc.pid, signal.SIGINT)
        # Before the fix nothing stopped at all; the bound leaves room for a loaded CI machine.
        proc.wait(timeout=STOP_WAIT_S)
        deadline = time.monotonic() + STOP_WAIT_S
        while _processes_with(marker) and time.monotonic() < deadline:
            time.sleep(0.5)
        assert _processes_with(marker) == [], (
            f"still running {STOP_WAIT_S} s after the signal:\n" + log.read_text()[-3000:]
        )
        output = log.read_text()
        assert "Dagster services shut down" in output
        assert "BetaWarning" not in output and "PreviewWarning" not in output
        assert "will not be used" not in output
        assert (home / "dagster.yaml").is_file()
    finally:
        for pid in _processes_with(marker):
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        if proc.poll() is None:
            proc.kill()
            proc.wait()
