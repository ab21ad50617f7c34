"""The README's blocks for agent authors, run as a reader would: the Python example, and each MCP client
configuration (Claude Code, Codex, Cursor, the OpenAI Agents SDK) started against `dream serve` with the real `mcp`
client SDK (or the Agents SDK's own MCP client), with `/ABSOLUTE/PATH` replaced by this checkout and the agent's
folder by a temporary one. Claude Code, Codex and Cursor themselves are not installed here: their configurations are
parsed as those tools read them (the `claude mcp add` line with shell quoting, TOML, JSON) and the server each
names is started and listed."""

from __future__ import annotations

import ast
import json
import re
import shlex
import subprocess
import sys
import tomllib
from pathlib import Path

import anyio
import pytest

from dream_assets.mcp_server import TOOL_NAMES
from dream_assets_tests.mcp_harness import HttpServer, clean_env, http_session, ok

pytestmark = pytest.mark.slow  # each block starts `dream serve` (or a dream cycle) as a reader would

ROOT = Path(__file__).resolve().parents[2]
README = (ROOT / "README.md").read_text(encoding="utf-8")
SECTION = README[README.index("## For agent authors") : README.index("## Layout")]
PLACEHOLDER = "/ABSOLUTE/PATH"
TOKEN = "readme-token-0123456789abcdef"


def _blocks(language: str) -> list[str]:
    return re.findall(rf"^```{language}\n(.*?)^```", SECTION, flags=re.MULTILINE | re.DOTALL)


def _localised(text: str, data: Path) -> str:
    return text.replace(f"{PLACEHOLDER}/data", str(data)).replace(PLACEHOLDER, str(ROOT))


def _init(profile: Path) -> None:
    """The README's step before any client: `dream init --profile ... --if-missing` (serve refuses a missing agent)."""
    from dream_assets.cli import main

    assert main(["init", "--profile", str(profile), "--if-missing"]) == 0


async def _stdio_lists_and_saves(command: str, args: list[str], profile: Path) -> None:
    from mcp import ClientSession
    from mcp.client.stdio import StdioServerParameters, stdio_client

    _init(profile)

    params = StdioServerParameters(command=command, args=args, env=clean_env())
    async with stdio_client(params) as (read, write):
        async with ClientSession(read, write) as session:
            await session.initialize()
            assert sorted(t.name for t in (await session.list_tools()).tools) == sorted(TOOL_NAMES)
            saved = ok(await session.call_tool("memory_save", {"content": f"Configured through {command}."}))
            assert saved["outcome"] in ("created", "reinforced")
    assert (profile / "store.duckdb").exists()


def test_the_python_example_runs_as_pasted(tmp_path: Path) -> None:
    (code,) = _blocks("python")[:1]
    done = subprocess.run(
        [sys.executable, "-c", code], cwd=tmp_path, env=clean_env(), capture_output=True, text=True, timeout=600
    )
    assert done.returncode == 0, done.stderr[-3000:]
    lines = done.stdout.splitlines()
    assert lines[0].startswith("created ")
    assert "Priya Shah" in lines[1]
    assert any(line.startswith("memory_consolidation ") for line in lines)
    assert not any(line.endswith(" failed") for line in lines), done.stdout
    assert (tmp_path / "data/agents/my-agent/store.duckdb").exists()


def test_the_claude_code_lines_start_the_server_they_name(tmp_path: Path) -> None:
    stdio, http = (shlex.split(line) for line in _blocks("text")[0].strip().splitlines())
    assert stdio[:4] == ["claude", "mcp", "add", "my-agent"] and "--" in stdio
    command, *args = shlex.split(_localised(shlex.join(stdio[stdio.index("--") + 1 :]), tmp_path / "data"))
    anyio.run(_stdio_lists_and_saves, command, args, tmp_path / "data/agents/my-agent")
    assert http[:5] == ["claude", "mcp", "add", "--transport", "http"]
    assert http[6].endswith("/agents/my-agent/mcp") and http[7:] == ["--header", "Authorization: Bearer YOUR_TOKEN"]


def test_the_codex_config_starts_the_server_it_names(tmp_path: Path) -> None:
    config = tomllib.loads(_localised(_blocks("toml")[0], tmp_path / "data"))
    stdio, http = config["mcp_servers"]["my-agent"], config["mcp_servers"]["my-agent-http"]
    anyio.run(_stdio_lists_and_saves, stdio["command"], stdio["args"], tmp_path / "data/agents/my-agent")
    assert http["url"].endswith("/agents/my-agent/mcp") and http["bearer_token_env_var"] == "DREAM_SERVE_TOKEN"


def test_the_cursor_config_reaches_the_server_over_stdio_and_http(tmp_path: Path) -> None:
    servers = json.loads(_localised(_blocks("json")[0], tmp_path / "data"))["mcpServers"]
    stdio, http = servers["my-agent"], servers["my-agent-http"]
    profile = tmp_path / "data/agents/my-agent"
    anyio.run(_stdio_lists_and_saves, stdio["command"], stdio["args"], profile)
    with HttpServer(tmp_path / "data/agents", env={"DREAM_SERVE_TOKEN": TOKEN}) as server:
        url = http["url"].replace("127.0.0.1:8765", f"127.0.0.1:{server.port}")
        header = http["headers"]["Authorization"].replace("YOUR_TOKEN", TOKEN)

        async def main() -> None:
            async with http_session(url, header.removeprefix("Bearer ")) as session:
                hits = ok(await session.call_tool("memory_search", {"query": "configured"}))["hits"]
                assert len(hits) == 1

        anyio.run(main)


def test_the_openai_agents_sdk_example_lists_and_calls_the_tools(tmp_path: Path) -> None:
    code = _localised(_blocks("python")[1], tmp_path / "data")
    _init(tmp_path / "data/agents/my-agent")
    done = subprocess.run(
        [sys.executable, "-c", code], cwd=tmp_path, env=clean_env(), capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stderr[-3000:]
    listed, saved = done.stdout.strip().splitlines()[-2:]
    assert sorted(ast.literal_eval(listed)) == sorted(TOOL_NAMES)  # the list the example prints
    assert "'outcome': 'created'" in saved


#: Feeds standard input to the interactive interpreter line by line, as a paste into `python` does (a blank line ends
#: an indented block; a statement right after one is a SyntaxError there, though fine in a file); exit 1 on any error.
REPL = """
import code, sys

failed = []


class Paste(code.InteractiveConsole):
    def showsyntaxerror(self, filename=None, **kwargs):
        failed.append("SyntaxError")
        super().showsyntaxerror(filename, **kwargs)

    def showtraceback(self):
        failed.append("error")
        super().showtraceback()


console = Paste()
for line in sys.stdin.read().splitlines():
    console.push(line)
console.push("")
sys.exit(1 if failed else 0)
"""


def _python_blocks() -> list[str]:
    return _blocks("python")


@pytest.mark.parametrize("index", range(len(_python_blocks())), ids=lambda i: f"python-block-{i + 1}")
def test_every_python_block_runs_pasted_into_the_interpreter(index: int, tmp_path: Path) -> None:
    code = _localised(_python_blocks()[index], tmp_path / "data")
    if PLACEHOLDER in _python_blocks()[index]:
        _init(tmp_path / "data/agents/my-agent")  # the MCP examples' step before (dream init)
    done = subprocess.run(
        [sys.executable, "-c", REPL],
        input=code,
        cwd=tmp_path,
        env=clean_env(),
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert "Traceback" not in done.stderr and "Error" not in done.stderr, done.stderr[-3000:]


def test_the_langgraph_example_runs_as_a_file(tmp_path: Path) -> None:
    (code,) = [block for block in _python_blocks() if "LangGraphMemoryStore" in block]
    (tmp_path / "example.py").write_text(code)
    done = subprocess.run(
        [sys.executable, "example.py"], cwd=tmp_path, env=clean_env(), capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.strip().splitlines()[-1] == "The user lives in Lisbon."
    assert (tmp_path / "data/agents/my-agent/store.duckdb").exists()


def test_the_memory_folder_commands_run_as_written(tmp_path: Path) -> None:
    """The "Memory folders" block, line by line, with Claude Code's folder of the project a temporary one."""
    section = README[README.index("## Memory folders") :]
    (block,) = re.findall(r"^```text\n(.*?)^```", section, flags=re.MULTILINE | re.DOTALL)[:1]
    claude = tmp_path / "claude-memory"
    claude.mkdir()
    (claude / "deploys.md").write_text(
        "---\nname: deploys\ntype: project\n---\n\n# Deploys\n\n- Deploys are on Tuesdays.\n"
    )
    for line in block.strip().splitlines():
        words = shlex.split(line.replace("~/.claude/projects/<project>/memory", str(claude)), comments=True)
        assert words[0] == "dream", line
        done = subprocess.run(
            [sys.executable, "-m", "dream_assets.cli", *words[1:]],
            cwd=tmp_path,
            env=clean_env(),
            capture_output=True,
            text=True,
            timeout=300,
        )
        assert done.returncode == 0, f"{line}\n{done.stdout}{done.stderr}"
    assert (tmp_path / "me.jsonl").exists() and (tmp_path / "data/agents/new/store.duckdb").exists()
