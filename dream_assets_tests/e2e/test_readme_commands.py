"""Every command block of README.md, run as written by a new user: in a fresh copy of the project (no agent profile,
no Dagster instance), one shell per block, blocks in README order (a later block may use what an earlier one made,
as the reader's own would). Each command must exit 0 and print no traceback and no Dagster beta/preview warning.

What cannot run verbatim here, and what stands in for it:
- the project's environment is not rebuilt: the copy's ``.venv`` links to this checkout's (``make`` sees it set up);
- ``DREAM__LlmBaseUrl`` points at the OpenAI-compatible test server on 127.0.0.1 instead of a local model;
- placeholders (``RUN_ID``, ``MEMORY_ID``) become a cycle with undoable changes and an archived memory of the demo;
- ``make dev`` runs as a script's background job (``make dev &``: SIGINT ignored, as a shell leaves it) on a free
  port until the webserver serves the workspace and the daemon is healthy, then gets the SIGTERM a supervisor (or
  ``kill``) sends and must stop, with everything it started, within STOP_WAIT_S;
- EXCLUDED commands are not run, each for the reason given there.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import socket
import subprocess
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

import duckdb
import pytest

from dream_assets_tests.openai_server import NOTHING_TO_CHANGE, OpenAITestServer, reply

pytestmark = pytest.mark.slow  # whole dream cycles, a backfill, the Dagster UI and a benchmark, as a user runs them

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"
LOGS = ROOT / "test-output" / "readme"  # what each block printed (gitignored)
HOST = "127.0.0.1"
BLOCK_TIMEOUT_S = 300
DEV_READY_S = 120  # make dev: webserver serving the loaded workspace and a healthy daemon
STOP_WAIT_S = 60  # make dev: from SIGTERM to every process it started being gone

#: Command (as the README line starts) -> why it is not run here.
EXCLUDED = {
    "make test": "runs the whole test suite, this test included; CI runs it as `make test` already",
    ".venv/bin/python benchmarks/faults.py --quick": "dream_assets_tests/e2e/test_faults_benchmark.py runs exactly "
    "this command and checks its numbers (about 90 s)",
    ".venv/bin/python benchmarks/fleet.py --quick": "dream_assets_tests/e2e/test_fleet_benchmark.py runs exactly this "
    "command and checks its numbers (one to two minutes)",
    "pip install .": "would change the environment the tests run in; dream_assets_tests/e2e/test_install.py builds "
    "this wheel and installs it with its base dependencies into a fresh environment",
    "pip install '.[all]'": "would change the environment the tests run in; benchmarks/install.py installs it into a "
    "fresh environment (install.full_mb)",
}

#: What the README points at a real model endpoint; the test server on 127.0.0.1 takes its place.
README_ENDPOINT = "http://127.0.0.1:11434/v1"

TRACEBACK = "Traceback (most recent call last)"
DAGSTER_NOISE = ("BetaWarning", "PreviewWarning", "will not be used")

_HTTP = urllib.request.build_opener(urllib.request.ProxyHandler({}))


# --- the README ------------------------------------------------------------------------------------------------------


@dataclass
class Block:
    line: int  # README line of the opening fence
    commands: list[str]

    @property
    def id(self) -> str:
        return f"line{self.line}-" + re.sub(r"[^a-z0-9]+", "-", self.commands[0].split("#")[0].strip().lower())[:40]


def readme_blocks(text: str) -> list[Block]:
    """The ```sh blocks of the README, each as its commands (blank and comment-only lines dropped; a line ending in
    a backslash continues on the next)."""
    blocks: list[Block] = []
    current: Block | None = None
    pending = ""
    for number, line in enumerate(text.splitlines(), 1):
        fence = line.strip()
        if current is None:
            if fence == "```sh":
                current = Block(number, [])
            continue
        if fence.startswith("```"):
            if pending:
                current.commands.append(pending)
            blocks.append(current)
            current, pending = None, ""
        elif pending:
            pending += "\n" + line.rstrip()
        elif fence and not fence.startswith("#"):
            pending = line.rstrip()
        if pending and not pending.endswith("\\"):
            current.commands.append(pending)
            pending = ""
    return blocks


BLOCKS = readme_blocks(README.read_text())


def _excluded(command: str) -> str | None:
    bare = command.split("#")[0].strip()
    return next((why for start, why in EXCLUDED.items() if bare == start), None)


def test_the_readme_has_command_blocks_and_every_exclusion_names_a_readme_command():
    assert len(BLOCKS) >= 3 and any("make run" in c for b in BLOCKS for c in b.commands), (
        f"README.md has {len(BLOCKS)} ```sh blocks; expected the documented commands there"
    )
    commands = {c.split("#")[0].strip() for b in BLOCKS for c in b.commands}
    stale = sorted(set(EXCLUDED) - commands)
    assert not stale, f"EXCLUDED names commands README.md no longer has: {stale}"


# --- a fresh copy of the project -------------------------------------------------------------------------------------


@dataclass
class Checkout:
    root: Path
    env: dict[str, str]
    outputs: dict[str, str] = field(default_factory=dict)  # block id -> everything it printed


def _project_files() -> list[str]:
    """What a clone of this working tree holds: tracked files and new ones git does not ignore."""
    try:
        listed = subprocess.run(
            ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
            cwd=ROOT,
            capture_output=True,
            check=True,
        ).stdout.decode()
    except (OSError, subprocess.CalledProcessError) as exc:
        pytest.skip(f"cannot list the project's files with git in {ROOT} ({exc}): the README test copies a checkout")
    return [p for p in listed.split("\0") if p]


def _fresh_env() -> dict[str, str]:
    """The calling shell without anything that points at this checkout's environment, instance or agents."""
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("DREAM", "DAGSTER", "OPENAI", "PYTEST", "VIRTUAL_ENV")) and k not in {"PORT", "HOST"}
    }
    env["PATH"] = os.pathsep.join(
        p for p in os.environ.get("PATH", "").split(os.pathsep) if p and "/.venv/" not in p + "/"
    )
    env["PYTHONUNBUFFERED"] = "1"
    return env


@pytest.fixture(scope="module")
def checkout(tmp_path_factory) -> Checkout:
    venv = ROOT / ".venv"
    if not (venv / "bin" / "python").exists() or not (venv / ".installed").exists():
        pytest.skip(f"no project environment at {venv}: run `make setup` first")
    root = tmp_path_factory.mktemp("readme") / "dream_assets"
    for rel in _project_files():
        src, dst = ROOT / rel, root / rel
        if not src.exists() and not src.is_symlink():
            continue  # deleted in the working tree
        dst.parent.mkdir(parents=True, exist_ok=True)
        if src.is_symlink():
            os.symlink(os.readlink(src), dst)
        else:
            shutil.copy2(src, dst)
    (root / ".venv").symlink_to(venv)
    # make must see the environment as set up: never let it rebuild the linked .venv
    stamp = (venv / ".installed").stat().st_mtime
    os.utime(root / "pyproject.toml", (stamp - 1, stamp - 1))
    env = _fresh_env()
    question = subprocess.run(["make", "-q", ".venv/.installed"], cwd=root, env=env, capture_output=True)
    assert question.returncode == 0, f"make would rebuild the environment in {root}: {question.stderr!r}"
    return Checkout(root, env)


# --- running a block -------------------------------------------------------------------------------------------------


@dataclass
class Ran:
    command: str
    code: int | None  # None: not run (excluded, or the block stopped first)
    output: str


def _script(commands: list[str]) -> str:
    lines = []
    for i, command in enumerate(commands):
        lines.append(f"printf '\\n@@start {i}\\n'")
        lines.append(command)
        lines.append(f"printf '\\n@@end {i} %d\\n' $?")
    return "\n".join(lines) + "\n"


def _split(commands: list[str], output: str) -> list[Ran]:
    ran = []
    for i, command in enumerate(commands):
        found = re.search(rf"\n@@start {i}\n(.*?)\n@@end {i} (\d+)\n", output, re.S)
        ran.append(Ran(command, int(found.group(2)), found.group(1)) if found else Ran(command, None, ""))
    return ran


def _problems(ran: list[Ran], expected_code: int | None = 0) -> list[str]:
    """Exit codes other than ``expected_code`` (None: any), tracebacks and Dagster warnings, per command."""
    problems = []
    for r in ran:
        if _excluded(r.command):
            continue
        if r.code is None:
            problems.append(f"`{r.command}` did not run to its end")
        elif expected_code is not None and r.code != expected_code:
            problems.append(f"`{r.command}` exited {r.code}:\n{r.output[-3000:]}")
        if TRACEBACK in r.output:
            problems.append(f"`{r.command}` printed a traceback:\n{_around(r.output, TRACEBACK)}")
        noise = [n for n in DAGSTER_NOISE if n in r.output]
        if noise:
            problems.append(
                f"`{r.command}` printed Dagster warnings ({', '.join(noise)}), "
                f"{r.output.count('Warning')} in all:\n{_around(r.output, noise[0])}"
            )
    return problems


def _around(text: str, needle: str, before: int = 300, after: int = 2500) -> str:
    at = text.find(needle)
    return text[max(0, at - before) : at + after]


def _prepared(commands: list[str], substitutions: dict[str, str]) -> list[str]:
    out = []
    for command in commands:
        if _excluded(command):
            out.append(f": excluded -- {command.split('#')[0].strip()}")
            continue
        for placeholder, value in substitutions.items():
            command = re.sub(rf"\b{re.escape(placeholder)}\b", value, command)
        out.append(command)
    return out


def _run_block(checkout: Checkout, block: Block, env: dict[str, str], substitutions: dict[str, str]) -> list[Ran]:
    commands = _prepared(block.commands, substitutions)
    proc = subprocess.run(
        ["bash", "-c", _script(commands)],
        cwd=checkout.root,
        env=env,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        timeout=BLOCK_TIMEOUT_S,
    )
    output = proc.stdout.decode(errors="replace")
    checkout.outputs[block.id] = output
    return [Ran(block.commands[i], r.code, r.output) for i, r in enumerate(_split(commands, output))]


def _report(checkout: Checkout, block: Block, ran: list[Ran]) -> None:
    LOGS.mkdir(parents=True, exist_ok=True)
    log = LOGS / f"{block.id}.log"
    log.write_text(checkout.outputs.get(block.id, ""))
    print(f"README.md:{block.line}: output in {log}")
    others = sorted(set(re.findall(r"\b(\w+Warning): (.{0,100})", checkout.outputs.get(block.id, ""))))
    for category, message in others:  # reported, not failed: only beta/preview noise is held against a block
        print(f"README.md:{block.line}: prints {category}: {message}")
    for r in ran:
        why = _excluded(r.command)
        status = f"excluded: {why}" if why else f"exit {r.code}"
        print(f"README.md:{block.line}  {r.command.split('#')[0].strip():<60}  {status}")


# --- placeholders ----------------------------------------------------------------------------------------------------


def _demo_store(checkout: Checkout) -> Path:
    store = checkout.root / "data" / "agents" / "demo" / "store.duckdb"
    assert store.exists(), f"no demo agent at {store.parent}: the README's first block should have made it"
    return store


def _placeholders(checkout: Checkout, commands: list[str]) -> dict[str, str]:
    """Values a reader would take from what the earlier blocks printed: the newest cycle with undoable changes and
    an archived memory no cycle touched (so it is still archived after that cycle is undone)."""
    text = "\n".join(commands)
    wanted = {name for name in ("RUN_ID", "MEMORY_ID") if re.search(rf"\b{name}\b", text)}
    if not wanted:
        return {}
    with duckdb.connect(str(_demo_store(checkout)), read_only=True) as db:
        values = {}
        if "RUN_ID" in wanted:
            row = db.execute("""SELECT cycle_id FROM changes WHERE undone_at IS NULL AND kind <> 'stamped'
                                AND cycle_id NOT LIKE 'undo-%' GROUP BY cycle_id
                                ORDER BY max(created_at) DESC LIMIT 1""").fetchone()
            assert row, "no cycle of the demo agent has undoable changes to put in RUN_ID"
            values["RUN_ID"] = row[0]
        if "MEMORY_ID" in wanted:
            row = db.execute("""SELECT id FROM memories WHERE archived_at IS NOT NULL AND id NOT IN
                                (SELECT target_id FROM changes WHERE target_type = 'memory')
                                ORDER BY id LIMIT 1""").fetchone()
            assert row, "the demo agent has no archived memory to put in MEMORY_ID"
            values["MEMORY_ID"] = row[0]
    return values


# --- make dev --------------------------------------------------------------------------------------------------------


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((HOST, 0))
        return s.getsockname()[1]


def _graphql(base: str, query: str) -> dict:
    req = urllib.request.Request(
        f"{base}/graphql",
        data=json.dumps({"query": query}).encode(),
        headers={"Content-Type": "application/json"},
    )
    with _HTTP.open(req, timeout=10) as resp:
        return json.loads(resp.read())


READY_QUERY = """{ workspaceOrError { ... on Workspace { locationEntries { loadStatus } } }
  instance { daemonHealth { allDaemonStatuses { daemonType healthy required } } } }"""


def _ready(base: str) -> tuple[bool, str]:
    try:
        data = _graphql(base, READY_QUERY).get("data") or {}
    except (urllib.error.URLError, ConnectionError, TimeoutError, json.JSONDecodeError) as exc:
        return False, repr(exc)
    entries = (data.get("workspaceOrError") or {}).get("locationEntries") or []
    daemons = [d for d in data["instance"]["daemonHealth"]["allDaemonStatuses"] if d["required"]]
    loaded = bool(entries) and all(e["loadStatus"] == "LOADED" for e in entries)
    healthy = {d["daemonType"] for d in daemons if d["healthy"]}
    ok = loaded and {"SCHEDULER", "SENSOR"} <= healthy
    return ok, f"workspace {[e['loadStatus'] for e in entries]}, healthy daemons {sorted(healthy)}"


def _children(pid: int) -> list[int]:
    try:
        return [int(c) for c in Path(f"/proc/{pid}/task/{pid}/children").read_text().split()]
    except OSError:
        return []


def _group_alive(proc: subprocess.Popen) -> bool:
    """Whether the shell (started as a session leader) or anything in its process group still runs."""
    if proc.poll() is None:
        return True
    try:
        os.killpg(proc.pid, 0)
        return True
    except ProcessLookupError:
        return False


def _run_dev_block(checkout: Checkout, block: Block, env: dict[str, str]) -> list[Ran]:
    [command] = block.commands
    port = _free_port()
    base = f"http://{HOST}:{port}"
    log = checkout.root / "make-dev.log"
    problems: list[str] = []
    with log.open("wb") as out:
        proc = subprocess.Popen(
            # a background job of the script: the shell starts it with SIGINT ignored
            ["bash", "-c", _script([f"{command} &\nwait $!"])],
            cwd=checkout.root,
            env={**env, "PORT": str(port)},
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    try:
        deadline, state = time.monotonic() + DEV_READY_S, "not started"
        while True:
            ready, state = _ready(base)
            if ready or proc.poll() is not None or time.monotonic() > deadline:
                break
            time.sleep(1)
        if not ready:
            problems.append(f"`{command}` was not ready within {DEV_READY_S}s on {base} ({state})")
        make = next((c for c in _children(proc.pid)), None)
        if make is None:
            problems.append(f"`{command}` exited before it could be stopped (code {proc.poll()})")
        else:
            os.kill(make, signal.SIGTERM)
            stopped = time.monotonic() + STOP_WAIT_S
            while _group_alive(proc) and time.monotonic() < stopped:
                time.sleep(0.5)
            if _group_alive(proc):
                problems.append(f"`{command}` and what it started were still running {STOP_WAIT_S}s after SIGTERM")
    finally:
        if _group_alive(proc):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=30)
    output = log.read_text(errors="replace")
    checkout.outputs[block.id] = output
    if problems:
        pytest.fail("\n".join(problems) + f"\nlast output of {log}:\n{output[-3000:]}")
    return _split([command], output)


# --- the tests -------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("block", BLOCKS, ids=[b.id for b in BLOCKS])
def test_readme_block_runs_as_written(checkout, block):
    env = dict(checkout.env)
    text = "\n".join(block.commands)
    if any(c.split("#")[0].strip() == "make dev" for c in block.commands):
        ran = _run_dev_block(checkout, block, env)
        _report(checkout, block, ran)
        problems = _problems(ran, expected_code=None)  # stopped by SIGTERM: make reports that as its own failure
        assert not problems, f"README.md:{block.line}:\n" + "\n\n".join(problems)
        return
    if README_ENDPOINT not in text:
        ran = _run_block(checkout, block, env, _placeholders(checkout, block.commands))
        _report(checkout, block, ran)
        problems = _problems(ran)
        assert not problems, f"README.md:{block.line}:\n" + "\n\n".join(problems)
        return
    with OpenAITestServer(default=reply(NOTHING_TO_CHANGE)) as server:
        ran = _run_block(checkout, block, env, {README_ENDPOINT: server.base_url})
        calls = len(server.requests)
    _report(checkout, block, ran)
    print(f"README.md:{block.line}: the endpoint at {server.base_url} answered {calls} request(s)")
    problems = _problems(ran)
    assert not problems, f"README.md:{block.line}:\n" + "\n\n".join(problems)
    runs = [r for r in ran if r.command.split("#")[0].strip().startswith("make run")]
    assert all("model backend: openai" in r.output for r in runs), (
        f"README.md:{block.line}: the exported endpoint was not used: {[r.output[:500] for r in runs]}"
    )


def test_the_harness_reports_each_failing_command_its_traceback_and_dagster_warnings(tmp_path):
    """The checks above can fail: a non-zero exit, a traceback or a beta warning is reported with its command, and
    the shell state of a block carries from one command to the next."""
    block = Block(
        1,
        [
            "export GREETING=hi",
            'test "$GREETING" = hi',
            "false",
            "python3 -c 'raise SystemExit(\"x\")'",
            "python3 -c 'import sys; sys.stderr.write(\"Traceback (most recent call last):\\n\")'",
            "echo 'dagster.BetaWarning: beta'",
            "make test",
        ],
    )
    checkout = Checkout(tmp_path, _fresh_env())
    ran = _run_block(checkout, block, checkout.env, {})
    assert [r.code for r in ran] == [0, 0, 1, 1, 0, 0, 0]
    assert ran[-1].output.strip() == "", "an excluded command must not run"
    problems = _problems(ran)
    assert len(problems) == 4, problems
    assert problems[0].startswith("`false` exited 1") and "exited 1" in problems[1]
    assert "printed a traceback" in problems[2] and "Dagster warnings (BetaWarning)" in problems[3]


def test_readme_blocks_are_read_command_by_command():
    text = "intro\n```sh\nmake run   # one\n\n# a comment\nmake x \\\n    --y z\n```\n```\nnot sh\n```\n"
    [block] = readme_blocks(text)
    assert block.line == 2 and block.commands == ["make run   # one", "make x \\\n    --y z"]


# --- what the README says the commands print, and the operator's first-hour paths ------------------------------------


def _sample_output() -> list[str]:
    """The lines of the README's sample `make run` output (the plain ``` block after "`make run` prints")."""
    text = README.read_text()
    found = re.search(r"`make run` prints[^\n]*\n\n```\n(.*?)\n```", text, flags=re.S)
    assert found, "README.md: the sample output of `make run`"
    return found.group(1).splitlines()


def _make_run_output(checkout: Checkout) -> str:
    block = next(b for b in BLOCKS if any(c.split("#")[0].strip() == "make run" for c in b.commands))
    if block.id not in checkout.outputs:
        pytest.skip("the README's `make run` block did not run in this session (run the whole module)")
    return checkout.outputs[block.id]


def test_the_readme_sample_output_is_what_make_run_prints(checkout):
    """Each sample line is a line `make run` printed: in full, or up to a closing "..." (counts and path included)."""
    printed = _make_run_output(checkout).splitlines()
    missing = []
    for line in _sample_output():
        if line.strip() == "...":
            continue
        if line.endswith("..."):
            head = line[: -len("...")].rstrip()
            ok = any(p.startswith(head) for p in printed)
        else:
            ok = line in printed
        if not ok:
            missing.append(line)
    assert not missing, "README sample lines `make run` did not print:\n" + "\n".join(missing)


def _run(checkout: Checkout, *command: str) -> tuple[int, str, str]:
    done = subprocess.run(
        list(command), cwd=checkout.root, env=checkout.env, capture_output=True, text=True, timeout=BLOCK_TIMEOUT_S
    )
    return done.returncode, done.stdout, done.stderr


def _documented_exit_codes() -> dict[int, str]:
    section = README.read_text().split("### Exit codes", 1)[1].split("\n#", 1)[0]
    return {int(code): meaning for code, meaning in re.findall(r"^\| (\d) \| (.+) \|$", section, flags=re.M)}


def test_the_operator_paths_answer_in_one_line_with_the_documented_exit_codes(checkout):
    """A typo in PROFILE, a damaged store read by `dream status` and `dream report`, `dream rebuild` and `dream remove`:
    each answers in one line naming the path, with the exit code the README's table gives it, and no traceback."""
    codes = _documented_exit_codes()
    assert sorted(codes) == [0, 1, 2, 3]
    assert "no such profile" in codes[2] and "damaged" in codes[2]
    dream = str(checkout.root / ".venv" / "bin" / "dream")
    demo = _demo_store(checkout).parent

    # a mistyped profile: refused, one line naming it, nothing made there
    code, out, err = _run(checkout, "make", "--no-print-directory", "run", "PROFILE=data/agents/dmeo")
    own = [line for line in (out + err).splitlines() if line.strip() and not line.startswith((".venv/", "make"))]
    assert code != 0 and not (checkout.root / "data" / "agents" / "dmeo").exists()
    assert own == [own[0]] and own[0].startswith("dream run: no agent profile at "), out + err
    assert str(checkout.root / "data" / "agents" / "dmeo") in own[0] and TRACEBACK not in out + err

    # a damaged store: `dream status` and `dream report` say so in one line, naming the file and the rebuild
    damaged = demo.parent / "damaged"
    shutil.copytree(demo, damaged)
    store = damaged / "store.duckdb"
    original = store.read_bytes()
    store.write_bytes(original[:5000])  # truncated: not even its header and catalog can be read
    for command in ("status", "report"):
        code, out, err = _run(checkout, dream, command, "--profile", "data/agents/damaged")
        assert code == 2, (command, out, err)  # refused: a damaged store
        assert out == "" and len(err.strip().splitlines()) == 1, (command, out, err)
        assert str(store) in err and "dream rebuild --profile" in err and TRACEBACK not in err
        code, out, err = _run(checkout, dream, command, "--profile", "data/agents/damaged", "--verbose")
        assert code == 2 and TRACEBACK in err  # the traceback only when asked for

    # rebuilt from the newest snapshot; the damaged file kept aside, byte for byte
    code, out, err = _run(checkout, dream, "rebuild", "--profile", "data/agents/damaged")
    assert code == 0, out + err
    [aside] = damaged.glob("store.duckdb.damaged-*")
    assert aside.read_bytes() == original[:5000]
    assert f"kept the damaged store as {aside}" in out and "rebuilt " in out
    code, out, err = _run(checkout, dream, "status", "--profile", "data/agents/damaged")
    assert code == 0 and out.startswith("agent damaged: ") and err == "", out + err
    # a readable store is not rebuilt without --force: refused, one line
    code, out, err = _run(checkout, dream, "rebuild", "--profile", "data/agents/damaged")
    assert code == 2 and len(err.strip().splitlines()) == 1 and "is readable" in err

    # removed: out of the instance the make targets use, its data kept where discovery does not look
    code, out, err = _run(checkout, dream, "remove", "--profile", "data/agents/damaged")
    assert code == 0, out + err
    assert not damaged.exists() and list((demo.parent / ".removed").glob("damaged-*/store.duckdb"))
    assert str(checkout.root / ".dagster_home") in out

    # a mistyped cycle or pass: named as such, with where to look
    code, out, err = _run(checkout, dream, "undo", "--profile", "data/agents/demo", "--cycle", "no-such-run")
    assert code == 2 and err.startswith("dream undo: no such cycle 'no-such-run'") and len(err.splitlines()) == 1
    code, out, err = _run(
        checkout, dream, "undo", "--profile", "data/agents/demo", "--cycle", "x", "--pass", "memory_consolidaton"
    )
    assert code == 2 and "no pass named 'memory_consolidaton'; the passes are log_retention, " in err


def test_a_cycle_against_a_dead_endpoint_prints_each_failure_once_and_no_traceback(checkout):
    """`dream run --force` against an endpoint that refuses connections: the endpoint is checked before the cycle, so
    one line names the refused URL once and the cause, exit 2, no pass runs, no Dagster log line or stack trace."""
    from dream_assets_tests.openai_server import refusing_base_url

    _demo_store(checkout)
    dream = str(checkout.root / ".venv" / "bin" / "dream")
    with refusing_base_url() as url:
        env = {**checkout.env, "DREAM__LlmBaseUrl": url, "DREAM__LlmModel": "m", "DREAM__LlmMaxRetries": "0"}
        done = subprocess.run(
            [dream, "run", "--profile", "data/agents/demo", "--force", "memory_consolidation"],
            cwd=checkout.root,
            env=env,
            capture_output=True,
            text=True,
            timeout=BLOCK_TIMEOUT_S,
        )
    output = done.stdout + done.stderr
    assert done.returncode == 2, output
    assert TRACEBACK not in output and " - dagster - " not in output and "Stack Trace" not in output, output
    assert output.count(url) == 1, output
    [line] = output.strip().splitlines()
    assert line.startswith(f"dream run: the model endpoint {url} is not reachable"), output
    assert "Connection refused" in line and "no cycle was run" in line, output
