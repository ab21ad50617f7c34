"""`dream serve` driven by the real `mcp` client SDK: every tool in process, over stdio and over Streamable HTTP
against a subprocess server on 127.0.0.1; two agents on one server never see each other; a request without the
token, with a foreign Origin, with a traversal agent id or with 20 MB of content is refused and changes nothing; and
a dream cycle runs while a client saves 20 times a second without losing a save; headers or bodies sent a byte at a
time are timed out, and 1,100 half-sent requests held against a 1,024-descriptor server do not keep a legitimate call
from being answered."""

from __future__ import annotations

import json
import os
import resource
import select
import socket
import sys
import threading
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

import anyio
import httpx2
import pytest
from mcp import Client, ClientSession
from mcp.client.stdio import StdioServerParameters, stdio_client

from dream_assets import agent_memory as am
from dream_assets.cli import main as cli_main
from dream_assets.cycle import run_cycle
from dream_assets.demo import build_demo_profile
from dream_assets.mcp_server import (
    TOOL_NAMES,
    HttpGate,
    ServeConfigError,
    build_server,
    connection_limits,
    parse_agent_tokens,
)
from dream_assets.options import OptionsError
from dream_assets.options_loader import dream_options, load_options
from dream_assets.profile import AgentProfile
from dream_assets.serve_guard import ConnectionLimits
from dream_assets.store import open_store
from dream_assets_tests.mcp_harness import (
    HOST,
    HttpServer,
    clean_env,
    exercise_every_tool,
    hold_half_open,
    http_session,
    ok,
    stdio_session,
)

TOKEN = "secret-token-for-tests-0123456789"


def _profile(root: Path, name: str) -> AgentProfile:
    return AgentProfile(root / name).ensure()


def _counts(profile: AgentProfile) -> dict[str, int]:
    store = open_store(profile, dream_options())
    try:
        return store.memories.counts()
    finally:
        store.close()


def test_every_tool_in_process(tmp_path: Path) -> None:
    profile = _profile(tmp_path, "a")

    async def main() -> None:
        async with Client(build_server(lambda _ctx: profile)) as client:
            await exercise_every_tool(client.call_tool, profile, client.list_tools)

    anyio.run(main)


@pytest.mark.slow  # starts `dream serve` as a subprocess (several seconds of imports on a loaded machine)
def test_every_tool_over_stdio(tmp_path: Path) -> None:
    profile = _profile(tmp_path, "a")

    async def main() -> None:
        async with stdio_session(profile.root) as session:
            await exercise_every_tool(session.call_tool, profile, session.list_tools)

    anyio.run(main)


#: A stdio server whose tool prints and starts a child process that writes to its standard output.
NOISY_SERVER = """
import subprocess, sys
import anyio
from mcp.server.mcpserver import MCPServer
from dream_assets.mcp_server import _claimed_pipes, _serve_pipes

server = MCPServer("noisy")

@server.tool()
def shout(text: str) -> str:
    print("printed by a library")
    subprocess.run([sys.executable, "-c", "print('written by a child process')"], check=True)
    return text.upper()

with _claimed_pipes() as pipes:
    assert pipes is not None, "stdin and stdout are the client's pipes"
    anyio.run(_serve_pipes, server, *pipes)
"""


def test_over_stdio_only_replies_reach_the_client_whatever_else_the_server_prints(tmp_path: Path) -> None:
    """The stdio transport reads and writes the client's pipes on the event loop; meanwhile standard output is
    stderr, so a library's print or a child process's output never lands in the middle of the replies."""
    errors = tmp_path / "stderr.txt"

    async def main() -> None:
        params = StdioServerParameters(command=sys.executable, args=["-c", NOISY_SERVER], env=clean_env())
        with errors.open("w") as errlog:
            async with stdio_client(params, errlog=errlog) as (read, write):
                async with ClientSession(read, write) as session:
                    await session.initialize()
                    for word in ("one", "two", "three"):
                        result = await session.call_tool("shout", {"text": word})
                        assert not result.is_error and result.content[0].text == word.upper()

    anyio.run(main)
    logged = errors.read_text()
    assert logged.count("written by a child process") == 3
    assert logged.count("printed by a library") == 3


@pytest.mark.slow  # a subprocess HTTP server
def test_every_tool_over_http_and_agents_never_see_each_other(tmp_path: Path) -> None:
    b, c = _profile(tmp_path, "b"), _profile(tmp_path, "c")
    with HttpServer(tmp_path, env={"DREAM_SERVE_TOKEN": TOKEN}) as server:

        async def main() -> None:
            async with http_session(server.url("b"), TOKEN) as session:
                await exercise_every_tool(session.call_tool, b, session.list_tools)
            async with http_session(server.url("c"), TOKEN) as session:
                assert ok(await session.call_tool("memory_search", {"query": "release train"}))["hits"] == []
                status = ok(await session.call_tool("dream_status", {}))
                assert (status["agent"], status["live_memories"], status["skills"]) == ("c", 0, 0)
                saved = ok(await session.call_tool("memory_save", {"content": "C keeps its own notes."}))
            async with http_session(server.url("b"), TOKEN) as session:
                missing = await session.call_tool("memory_get", {"id": saved["id"]})
                assert missing.is_error and "no memory with id" in missing.content[0].text

        anyio.run(main)
    assert _counts(c) == {"live": 1, "archived": 0}


def _post(url: str, body: dict, headers: dict[str, str] | None = None) -> httpx2.Response:
    base = {"Accept": "application/json, text/event-stream", "Content-Type": "application/json"}
    return httpx2.post(url, json=body, headers={**base, **(headers or {})}, timeout=60)


def _save_call(content: str) -> dict:
    return {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "tools/call",
        "params": {"name": "memory_save", "arguments": {"content": content}},
    }


@pytest.mark.slow  # a subprocess HTTP server
def test_refused_requests_change_nothing(tmp_path: Path) -> None:
    b = _profile(tmp_path, "b")
    outside = _profile(tmp_path.parent / f"{tmp_path.name}-outside", "victim")
    (tmp_path / "escape").symlink_to(outside.root, target_is_directory=True)
    auth = {"Authorization": f"Bearer {TOKEN}"}
    with HttpServer(tmp_path, env={"DREAM_SERVE_TOKEN": TOKEN}) as server:
        call = _save_call("A fact that must not be saved.")
        assert _post(server.url("b"), call).status_code == 401
        assert (
            _post(server.url("b"), call, {"Authorization": "Bearer wrong-token-of-the-same-size!!"}).status_code == 401
        )
        assert _post(server.url("b"), call, {**auth, "Origin": "http://evil.example"}).status_code == 403
        assert _post(server.url("b"), call, {**auth, "Host": "evil.example:80"}).status_code in (403, 421)
        for agent in ("..", "%2e%2e", "..%2Fb", "escape", "nobody", ".hidden"):
            refused = _post(f"{server.base}/agents/{agent}/mcp", call, auth)
            assert refused.status_code in (400, 404), (agent, refused.status_code, refused.text)
        huge = _post(server.url("b"), _save_call("x" * (20 * 1024 * 1024)), auth)
        assert huge.status_code == 413
        # Under the body cap but over MaxContentChars: a tool error naming the field.
        long = _post(server.url("b"), _save_call("y" * 100_000), auth)
        assert long.status_code == 200 and long.json()["result"]["isError"]
        assert "content is 100000 characters" in long.json()["result"]["content"][0]["text"]
        # The same request with the token and the server's own origin goes through.
        fine = _post(server.url("b"), call, {**auth, "Origin": server.base})
        assert fine.status_code == 200 and not fine.json()["result"]["isError"]
    assert _counts(b) == {"live": 1, "archived": 0}
    assert _counts(outside) == {"live": 0, "archived": 0}


def _call(name: str, arguments: dict, request_id: int | str = 7) -> dict:
    params = {"name": name, "arguments": arguments}
    return {"jsonrpc": "2.0", "id": request_id, "method": "tools/call", "params": params}


@pytest.mark.slow  # a subprocess HTTP server
def test_a_tool_call_is_answered_as_the_sdks_transport_answers_it(tmp_path: Path) -> None:
    """A tool call with a body of known length is answered in its request's own task; the same call sent in chunks
    (no length) goes through the SDK's transport. Both give the same reply: results, tool errors, arguments the
    tool's schema refuses, an unknown tool, an unknown method; and what is not one call still reaches the SDK."""
    b = _profile(tmp_path, "b")
    headers = {"Accept": "application/json, text/event-stream", "Content-Type": "application/json"}
    calls = [
        _call("dream_status", {}),
        _call("memory_search", {"query": "release train"}, "text-id"),
        _call("memory_get", {"id": "no-such-id"}),
        _call("memory_search", {"query": "x", "limit": "ten"}),
        _call("memory_search", {}),
        _call("memory_save", {"content": "y" * 100_000}),
        _call("no_such_tool", {}),
        {"jsonrpc": "2.0", "id": 8, "method": "tools/list"},
        {"jsonrpc": "2.0", "id": 9, "method": "no/such/method", "params": {}},
    ]
    with HttpServer(tmp_path) as server:
        with httpx2.Client(headers=headers, timeout=60) as http:
            for call in calls:
                body = json.dumps(call).encode()
                whole = http.post(server.url("b"), content=body)
                chunked = http.post(server.url("b"), content=iter([body[:10], body[10:]]))
                assert "content-length" not in chunked.request.headers
                assert (whole.status_code, whole.headers["content-type"]) == (
                    chunked.status_code,
                    chunked.headers["content-type"],
                ), call
                assert whole.json() == chunked.json(), call
            status = http.post(server.url("b"), json=_call("dream_status", {})).json()["result"]
            assert status["structuredContent"]["agent"] == "b" and not status["isError"]
            # Not one call: a notification is accepted, a batch and a broken body are refused, as the SDK does.
            note = http.post(server.url("b"), json={"jsonrpc": "2.0", "method": "notifications/initialized"})
            assert note.status_code == 202
            assert http.post(server.url("b"), content=b"[1, 2]").status_code == 400
            assert http.post(server.url("b"), content=b"{not json").status_code == 400
            stale = http.post(server.url("b"), json=_call("dream_status", {}), headers={"mcp-protocol-version": "1999"})
            assert stale.status_code == 400
    assert _counts(b) == {"live": 0, "archived": 0}


@pytest.mark.slow  # a subprocess HTTP server
def test_a_per_agent_token_opens_only_its_agent(tmp_path: Path) -> None:
    _profile(tmp_path, "b")
    c = _profile(tmp_path, "c")
    tokens = f"b={'b' * 20},c={'c' * 20}"
    with HttpServer(tmp_path, env={"DREAM_SERVE_AGENT_TOKENS": tokens}) as server:
        call = _save_call("Only c may write here.")
        assert _post(server.url("c"), call, {"Authorization": f"Bearer {'b' * 20}"}).status_code == 401
        assert _post(server.url("c"), call, {"Authorization": f"Bearer {'c' * 20}"}).status_code == 200
    assert _counts(c) == {"live": 1, "archived": 0}
    alpha = _profile(tmp_path, "alpha")
    (tmp_path / "alias").symlink_to(alpha.root, target_is_directory=True)
    env = {"DREAM_SERVE_TOKEN": TOKEN, "DREAM_SERVE_AGENT_TOKENS": f"alpha={'a' * 20}"}
    with HttpServer(tmp_path, env=env) as server:
        call = _save_call("The shared token must not write into alpha.")
        for agent in ("alpha", "alias"):
            refused = _post(server.url(agent), call, {"Authorization": f"Bearer {TOKEN}"})
            assert refused.status_code == 401, (agent, refused.status_code, refused.text)
        assert _post(server.url("alias"), call, {"Authorization": f"Bearer {'a' * 20}"}).status_code == 200
    assert _counts(alpha) == {"live": 1, "archived": 0}


def test_a_non_loopback_bind_needs_a_token(tmp_path: Path) -> None:
    with pytest.raises(ServeConfigError, match="not a loopback address"):
        HttpGate(profile_root=tmp_path, host="0.0.0.0", port=8765)
    assert HttpGate(profile_root=tmp_path, host="0.0.0.0", port=8765, token=TOKEN).token == TOKEN
    with pytest.raises(ServeConfigError, match="at least 16"):
        parse_agent_tokens("b=short")
    assert parse_agent_tokens('{"b": "' + "t" * 16 + '"}') == {"b": "t" * 16}


def test_the_gate_keeps_agent_ids_inside_the_root(tmp_path: Path) -> None:
    _profile(tmp_path, "b")
    gate = HttpGate(profile_root=tmp_path, host="127.0.0.1", port=1)
    headers = {"host": "127.0.0.1:1"}
    assert isinstance(gate.check("/agents/b/mcp", headers), AgentProfile)
    for path in ("/agents/../mcp", "/agents/../../etc/mcp", "/agents/b/../b/mcp", "/agents//mcp", "/agents/.b/mcp"):
        verdict = gate.check(path, headers)
        assert not isinstance(verdict, AgentProfile) and verdict[0] in (400, 404), path


def test_the_gate_sees_an_agent_folder_replaced_by_a_symlink_at_once(tmp_path: Path) -> None:
    """The gate keeps the agents it found, but a folder swapped for a symlink out of the root (or taken away) is
    refused on the next request, and served again once it is back."""
    root = tmp_path / "root"
    b, outside = _profile(root, "b"), _profile(tmp_path, "outside")
    gate = HttpGate(profile_root=root, host="127.0.0.1", port=1)
    headers = {"host": "127.0.0.1:1"}
    for _ in range(2):
        found = gate.check("/agents/b/mcp", headers)
        assert isinstance(found, AgentProfile) and found.root == b.root
    b.root.rename(root / "kept")
    assert gate.check("/agents/b/mcp", headers)[0] == 404  # type: ignore[index]
    (root / "b").symlink_to(outside.root, target_is_directory=True)
    assert gate.check("/agents/b/mcp", headers)[0] == 404  # type: ignore[index]
    (root / "b").unlink()
    (root / "kept").rename(root / "b")
    found = gate.check("/agents/b/mcp", headers)
    assert isinstance(found, AgentProfile) and found.root == b.root


def test_a_host_the_server_does_not_answer_for_is_told_which_flag_adds_it(tmp_path: Path) -> None:
    _profile(tmp_path, "b")
    gate = HttpGate(profile_root=tmp_path, host="127.0.0.1", port=1)
    status, reason = gate.check("/agents/b/mcp", {"host": "memory.lan:1"})  # type: ignore[misc]
    assert status == 421 and "'memory.lan:1'" in reason and "--allow-host" in reason
    opened = HttpGate(profile_root=tmp_path, host="127.0.0.1", port=1, allowed_hosts=["memory.lan:1"])
    assert isinstance(opened.check("/agents/b/mcp", {"host": "memory.lan:1"}), AgentProfile)


def test_a_taken_port_fails_with_exit_2_before_the_server_is_announced(tmp_path: Path, capsys) -> None:
    _profile(tmp_path, "b")
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen(1)
        port = taken.getsockname()[1]
        code = cli_main(["serve", "--http", f"127.0.0.1:{port}", "--profile-root", str(tmp_path)])
    err = capsys.readouterr().err
    assert code == 2, err
    assert f"cannot listen on 127.0.0.1:{port}: the port is taken by another process" in err
    assert "agents under" not in err  # nothing announced that is not served


def test_profile_with_http_is_refused_not_ignored(tmp_path: Path, capsys) -> None:
    """--http serves a folder of agents (--profile-root); a --profile beside it would otherwise be silently ignored."""
    agent = _profile(tmp_path, "b")
    code = cli_main(["serve", "--http", "127.0.0.1:1", "--profile", str(agent.root)])
    err = capsys.readouterr().err
    assert code == 2 and f"--profile {agent.root} names one agent" in err and "--profile-root" in err


def test_a_symlink_inside_the_root_does_not_dodge_an_agents_own_token(tmp_path: Path) -> None:
    """The token is chosen by the folder a request reaches, not by the name in its URL: ``alias -> alpha`` needs
    alpha's own token, and the shared one it replaces does not open alpha under any name."""
    alpha = _profile(tmp_path, "alpha")
    _profile(tmp_path, "beta")
    (tmp_path / "alias").symlink_to(alpha.root, target_is_directory=True)
    (tmp_path / ".hidden").mkdir()
    AgentProfile(tmp_path / ".hidden").ensure()
    (tmp_path / "veiled").symlink_to(tmp_path / ".hidden", target_is_directory=True)
    own = "a" * 20
    gate = HttpGate(profile_root=tmp_path, host="127.0.0.1", port=1, token=TOKEN, agent_tokens={"alpha": own})

    def check(agent: str, token: str) -> int | Path:
        verdict = gate.check(f"/agents/{agent}/mcp", {"host": "127.0.0.1:1", "authorization": f"Bearer {token}"})
        return verdict.root if isinstance(verdict, AgentProfile) else verdict[0]

    assert check("alpha", TOKEN) == 401
    assert check("alias", TOKEN) == 401
    assert check("alias", own) == alpha.root
    assert check("alpha", own) == alpha.root
    assert check("beta", TOKEN) == tmp_path.resolve() / "beta"
    assert check("beta", own) == 401
    assert check("veiled", TOKEN) == 404  # reaches a folder that is not a valid agent id


#: Half-sent requests held open by the slow-client test, and the server's descriptor limit (the common soft limit
#: under which 1,100 of them made every authorised call fail).
HALF_OPEN = 1100
SERVER_DESCRIPTORS = 1024
#: A legitimate session (initialize, a save, a search) is answered in well under a second; the bound is generous
#: for a loaded machine. Before the limits, the calls failed at once (the server had no descriptor left).
LEGIT_BOUND_S = 10


async def _legit_session(url: str) -> float:
    start = time.monotonic()
    with anyio.fail_after(LEGIT_BOUND_S):
        async with http_session(url, TOKEN) as session:
            saved = ok(await session.call_tool("memory_save", {"content": f"Legit fact saved at {start}."}))
            hits = ok(await session.call_tool("memory_search", {"query": "legit fact saved"}))["hits"]
            assert saved["id"] in [h["id"] for h in hits]
    return time.monotonic() - start


def test_connection_limits_come_from_the_options_and_stay_below_the_descriptor_limit() -> None:
    assert connection_limits(dream_options()) == ConnectionLimits(10.0, 30.0, 64, 512)
    env = {
        "DREAM__ServeHeaderTimeout": "PT5S",
        "DREAM__ServeBodyTimeout": "00:01:00",
        "DREAM__ServeMaxConnectionsPerClient": "8",
        "DREAM__ServeMaxConnections": "2000",
    }
    limits = connection_limits(load_options(env=env))
    assert limits == ConnectionLimits(5.0, 60.0, 8, 2000)
    assert (limits.total_cap(1024), limits.total_cap(100_000), limits.total_cap(3)) == (512, 2000, 1)
    for bad in ({"DREAM__ServeHeaderTimeout": "0"}, {"DREAM__ServeMaxConnections": "0"}):
        with pytest.raises(OptionsError):
            load_options(env=bad)


class _Transport:
    def __init__(self) -> None:
        self.aborted = False

    def abort(self) -> None:
        self.aborted = True


def test_a_connection_past_a_cap_takes_the_place_of_the_longest_waiting_one_never_of_one_being_answered() -> None:
    from dream_assets.serve_guard import ANSWERING, BODY, ConnectionGuard

    async def main() -> None:
        guard = ConnectionGuard(ConnectionLimits(max_per_client=3, max_total=4), descriptor_limit=1024)
        t = {n: _Transport() for n in "abcdefg"}
        for port, n in enumerate("abc"):
            assert guard.admit(("127.0.0.1", port), t[n]) is not None
            await anyio.sleep(0.01)
        guard._move(("127.0.0.1", 0), BODY)  # a: its headers are in, its body is coming
        guard._move(("127.0.0.1", 1), ANSWERING)  # b: being answered
        assert guard.admit(("127.0.0.1", 3), t["d"]) is not None  # c waited for its headers: it goes first
        assert [n for n in "abc" if t[n].aborted] == ["c"]
        assert guard.admit(("127.0.0.1", 4), t["e"]) is not None  # d waits for its headers, but came after a
        assert [n for n in "abcd" if t[n].aborted] == ["c", "d"]
        guard._move(("127.0.0.1", 4), ANSWERING)
        assert guard.admit(("127.0.0.1", 5), t["f"]) is not None  # then a, whose body is late
        assert [n for n in "abcde" if t[n].aborted] == ["a", "c", "d"]
        guard._move(("127.0.0.1", 5), ANSWERING)
        assert guard.admit(("127.0.0.1", 6), t["g"]) is None  # b, e and f are all being answered: refused (503)
        assert guard.admit(("127.0.0.2", 1), t["g"]) is not None  # another client, under the cap in all
        guard._move(("127.0.0.2", 1), ANSWERING)
        assert guard.admit(("127.0.0.3", 1), _Transport()) is None  # the cap in all (4), every one being answered
        assert not t["b"].aborted and not t["e"].aborted and not t["f"].aborted
        assert (guard.closed_to_make_room, guard.refused) == (3, 2)

    anyio.run(main)


@pytest.mark.slow  # a subprocess HTTP server and 1,100 connections
def test_a_legitimate_call_is_answered_while_1100_half_sent_requests_are_held(tmp_path: Path) -> None:
    """The issue's check: with 1,100 half-open connections held against a server limited to 1,024 descriptors, a
    legitimate call is answered. Half of them come from the legitimate client's own address (its per-client cap),
    half from ten other loopback addresses (the cap in all). This process holds as many as its own descriptor limit
    allows (raised to the hard limit); where that is fewer, the server's limit is lowered to keep them above it."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    want = HALF_OPEN + 200
    if soft < want:
        resource.setrlimit(resource.RLIMIT_NOFILE, (min(want, hard), hard))
    try:
        n = min(HALF_OPEN, resource.getrlimit(resource.RLIMIT_NOFILE)[0] - 200)
        server_limit = min(SERVER_DESCRIPTORS, n - 76)
        if server_limit < 128:
            pytest.skip(f"this process may open only {n + 200} descriptors: too few to hold the connections")
        if n < HALF_OPEN:
            print(f"holding {n} half-open connections (descriptor limit), server limited to {server_limit}")
        _profile(tmp_path, "b")
        with HttpServer(tmp_path, env={"DREAM_SERVE_TOKEN": TOKEN}, descriptor_limit=server_limit) as server:
            anyio.run(_legit_session, server.url("b"))  # the first call builds the recall index
            others = [f"127.0.0.{i}" for i in range(2, 12)]
            held = hold_half_open(server.port, n // 2, [HOST]) + hold_half_open(server.port, n - n // 2, others)
            try:
                took = anyio.run(_legit_session, server.url("b"))
                assert took < LEGIT_BOUND_S
                descriptors = len(os.listdir(f"/proc/{server.proc.pid}/fd"))
                assert descriptors < server_limit // 2 + 64, descriptors  # connections capped below the limit
            finally:
                for sock in held:
                    sock.close()
            anyio.run(_legit_session, server.url("b"))
    finally:
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))


@pytest.mark.slow  # a subprocess HTTP server and 15 s of trickling clients at most
def test_slow_headers_and_slow_bodies_are_timed_out(tmp_path: Path) -> None:
    """A client that sends its headers or its body a byte at a time is closed once the header or body timeout has
    passed (here 1 s and 2 s), with or without a token, however steadily it trickles."""
    _profile(tmp_path, "b")
    env = {"DREAM_SERVE_TOKEN": TOKEN, "DREAM__ServeHeaderTimeout": "1", "DREAM__ServeBodyTimeout": "PT2S"}
    with HttpServer(tmp_path, env=env) as server:
        trickling: dict[socket.socket, bytes] = {}
        for i in range(20):
            sock = socket.create_connection((HOST, server.port), timeout=10)
            sock.sendall(f"POST /agents/b/mcp HTTP/1.1\r\nHost: {HOST}:{server.port}\r\nX-Slow-{i}: ".encode())
            trickling[sock] = b"a"
        for i in range(10):
            auth = f"Authorization: Bearer {TOKEN}\r\n" if i % 2 else ""  # without it: 401, then the rest trickles
            head = (
                f"POST /agents/b/mcp HTTP/1.1\r\nHost: {HOST}:{server.port}\r\n{auth}Content-Type: application/json"
                "\r\nAccept: application/json, text/event-stream\r\nContent-Length: 4000\r\n\r\n{"
            )
            sock = socket.create_connection((HOST, server.port), timeout=10)
            sock.sendall(head.encode())
            trickling[sock] = b" "
        deadline = time.monotonic() + 15
        while trickling and time.monotonic() < deadline:
            time.sleep(0.25)
            for sock in list(trickling):
                try:
                    while select.select([sock], [], [], 0)[0]:
                        if not sock.recv(65536):  # closed by the server (a 401 answer is read and passed over)
                            raise ConnectionError
                    sock.sendall(trickling[sock])
                except OSError:
                    sock.close()
                    del trickling[sock]
        still_open = len(trickling)
        for sock in trickling:
            sock.close()
        assert still_open == 0, f"{still_open} of 30 trickling connections still open after 15 s"
        # Headers without end, sent as fast as loopback takes them, are cut off at the header size cap (64 KiB): the
        # server kept every byte of them until the header timeout (a gigabyte in 8 s).
        sock = socket.create_connection((HOST, server.port), timeout=10)
        sent, line = 0, b"X-Pad: " + b"a" * 65_536 + b"\r\n"
        with pytest.raises(OSError):  # the server's close: a reset, or a send that no longer goes through
            sock.sendall(f"POST /agents/b/mcp HTTP/1.1\r\nHost: {HOST}:{server.port}\r\n".encode())
            while sent < 64 * 1024 * 1024:
                sock.sendall(line)
                sent += len(line)
        sock.close()
        assert sent < 64 * 1024 * 1024
        anyio.run(_legit_session, server.url("b"))


@pytest.mark.slow  # a whole dream cycle on the demo agent while a client saves over HTTP
def test_a_cycle_while_a_client_saves_20_times_a_second_loses_nothing(tmp_path: Path) -> None:
    profile = AgentProfile(tmp_path / "demo")
    now = datetime.now(UTC)
    build_demo_profile(profile, now, options=dream_options(), n_memories=120)
    before = _counts(profile)["live"]
    done = threading.Event()
    failures: list[BaseException] = []

    def cycle() -> None:
        try:
            reports = run_cycle(profile, dream_options())
            assert not [r for r in reports if r.status == "failed"], [(r.pass_name, r.reason) for r in reports]
        except BaseException as exc:  # reported by the test below
            failures.append(exc)
        finally:
            done.set()

    saved: list[tuple[str, str]] = []
    errors: list[str] = []
    with HttpServer(tmp_path) as server:

        async def main() -> None:
            async with http_session(server.url("demo")) as session:
                threading.Thread(target=cycle, daemon=True).start()
                n = 0
                while not done.is_set() or n < 40:  # saves for as long as the cycle runs, and at least 40
                    content = f"Load test fact number {n}: build {n * 7919 % 10007} passed on runner r{n % 5}."
                    result = await session.call_tool("memory_save", {"content": content})
                    if result.is_error:
                        errors.append(result.content[0].text)
                    else:
                        saved.append((result.structured_content["id"], content))
                    n += 1
                    await anyio.sleep(0.05)

        anyio.run(main)
    assert done.wait(600)
    assert not failures, failures
    assert errors == []
    store = open_store(profile, dream_options())
    try:
        found = store.memories.get_many([i for i, _ in saved])
    finally:
        store.close()
    missing = [content for entry_id, content in saved if entry_id not in found]
    assert missing == []
    assert len(saved) >= 40 and _counts(profile)["live"] + _counts(profile)["archived"] >= before
    assert all(content in found[i].content or found[i].is_archived for i, content in saved)


# --- what the model sees: descriptions, limits and annotations ------------------------------------------------------

#: Tools that change nothing, and tools whose change removes or replaces something (archives, undoes, decides).
READ_ONLY_TOOLS = {
    "memory_search",
    "memory_get",
    "memory_list",
    "memory_history",
    "skill_list",
    "skill_get",
    "dream_status",
    "dream_last_report",
    "review_list",
}
DESTRUCTIVE_TOOLS = {"memory_forget", "skill_save", "memory_undo", "review_apply", "review_reject"}


def _listed_tools(profile: AgentProfile) -> dict:
    async def main() -> dict:
        async with Client(build_server(lambda _ctx: profile)) as client:
            return {t.name: t for t in (await client.list_tools()).tools}

    return anyio.run(main)


def test_every_tool_shows_the_model_its_parameters_limits_and_effects(tmp_path: Path) -> None:
    """What a client lists (the real SDK client): every parameter of every tool described, every tool annotated
    (read-only ones as such, destructive ones as such, none open-world), and the limits the memory service applies
    in the schema: content length, ranges, and the fixed vocabularies as enums."""
    tools = _listed_tools(_profile(tmp_path, "a"))
    assert set(tools) == set(TOOL_NAMES)
    for name, tool in tools.items():
        props = tool.input_schema.get("properties", {})
        undescribed = [p for p, schema in props.items() if not schema.get("description")]
        assert undescribed == [], f"{name}: {undescribed} have no description"
        hints = tool.annotations
        assert hints is not None, name
        assert hints.open_world_hint is False, name
        assert hints.read_only_hint is (name in READ_ONLY_TOOLS), name
        if name not in READ_ONLY_TOOLS:
            assert hints.destructive_hint is (name in DESTRUCTIVE_TOOLS), name
            assert hints.idempotent_hint is not None, name

    def prop(tool: str, param: str) -> dict:
        return tools[tool].input_schema["properties"][param]

    assert prop("memory_save", "content")["maxLength"] == dream_options().MaxContentChars
    assert (prop("memory_save", "importance")["minimum"], prop("memory_save", "importance")["maximum"]) == (0, 1)
    assert prop("memory_save", "tags")["maxItems"] == am.MAX_TAGS
    assert prop("memory_save", "category")["maxLength"] == am.MAX_CATEGORY_CHARS
    assert (prop("memory_search", "limit")["minimum"], prop("memory_search", "limit")["maximum"]) == (1, 100)
    assert (prop("memory_list", "limit")["minimum"], prop("memory_list", "limit")["maximum"]) == (1, am.MAX_LIST_LIMIT)
    assert prop("memory_forget", "reason")["maxLength"] == am.MAX_REASON_CHARS
    assert prop("skill_save", "content")["maxLength"] == am.MAX_SKILL_CHARS
    assert prop("feedback_record", "kind")["enum"] == ["Correction", "SessionSummary", "Positive", "Negative", "Note"]
    assert prop("feedback_record", "rating")["enum"] == ["poor", "fair", "good", "excellent", None]
    assert prop("skill_usage_record", "action")["enum"] == ["recalled", "invoked", "loaded"]
    assert prop("conversation_append", "role")["enum"] == ["user", "assistant", "tool"]
    for tool in tools.values():  # every id parameter is bounded
        for param, schema in tool.input_schema.get("properties", {}).items():
            if param in ("id", "cycle_id", "change_id"):
                assert schema.get("maxLength") == am.MAX_ID_CHARS, (tool.name, param)


def test_a_limit_shown_in_the_schema_never_refuses_what_the_service_accepts(tmp_path: Path) -> None:
    """The schema is for the model to read; the service's own checks decide. A feedback kind in another letter case is
    recorded as today, and an agent whose MaxContentChars is raised saves a memory longer than the default limit."""
    profile = _profile(tmp_path, "a")
    (profile.root / "dream.toml").write_text("MaxContentChars = 20000\n", encoding="utf-8")
    long_fact = "The migration plan has many steps. " * 500  # 17,500 characters

    async def main() -> None:
        async with Client(build_server(lambda _ctx: profile)) as client:
            ok(await client.call_tool("feedback_record", {"session_id": "s1", "kind": "correction", "text": "x"}))
            saved = ok(await client.call_tool("memory_save", {"content": long_fact}))
            assert saved["outcome"] == "created"

    anyio.run(main)


def test_memory_list_pages_a_category_and_its_children_in_a_stable_order(tmp_path: Path) -> None:
    """Eleven memories over work, work/deep, workshop and home, one of them forgotten: the pages of category work
    (three a page) hold work and work/deep only, oldest first, each once; archived ones only when asked for; the
    last page has no next cursor."""
    profile = _profile(tmp_path, "a")
    t0 = datetime(2026, 11, 2, 9, 0, tzinfo=UTC)
    spread = ["work", "work/deep", "workshop", "home", "work", "work/deep", "work", "home", "work", "workshop", "work"]
    ids = []
    for i, category in enumerate(spread):
        put = am.put(profile, f"m-{10 - i:02d}", f"Fact {i} filed under {category}.", category=category, now=t0)
        ids.append(put.id)  # the same created time for all: the id decides the order
    am.forget(profile, ids[4], reason="no longer true", now=t0)
    wanted_live = sorted(i for i, c in zip(ids, spread, strict=True) if c.split("/")[0] == "work" and i != ids[4])

    async def pages(client: Client, **args) -> list[list[dict]]:
        out, cursor = [], None
        while True:
            page = ok(
                await client.call_tool("memory_list", {**args, "limit": 3, **({"cursor": cursor} if cursor else {})})
            )
            out.append(page["items"])
            cursor = page["next_cursor"]
            if cursor is None:
                return out

    async def main() -> None:
        async with Client(build_server(lambda _ctx: profile)) as client:
            live = await pages(client, category="work")
            assert [len(p) for p in live] == [3, 3]
            assert [m["id"] for p in live for m in p] == wanted_live
            assert {m["category"] for p in live for m in p} == {"work", "work/deep"}
            every = await pages(client, category="work", include_archived=True)
            assert [m["id"] for p in every for m in p] == sorted([*wanted_live, ids[4]])
            assert [m["status"] for p in every for m in p if m["id"] == ids[4]] == ["archived"]
            everything = await pages(client)
            assert len([m for p in everything for m in p]) == len(ids) - 1

    anyio.run(main)


def test_memory_list_orders_by_created_time_and_a_memory_saved_between_pages_is_not_repeated(tmp_path: Path) -> None:
    profile = _profile(tmp_path, "a")
    t0 = datetime(2026, 11, 2, 9, 0, tzinfo=UTC)
    for i in range(4):
        am.put(profile, f"z-{i}", f"Fact number {i}.", category="notes", now=t0 + timedelta(minutes=10 - i))
    first = am.list_memories(profile, limit=2)
    assert [m.id for m in first.items] == ["z-3", "z-2"]  # the oldest first, whatever the ids
    am.put(profile, "a-new", "A fact saved while paging.", category="notes", now=t0 + timedelta(hours=1))
    rest = am.list_memories(profile, cursor=first.next_cursor, limit=10)
    assert [m.id for m in rest.items] == ["z-1", "z-0", "a-new"] and rest.next_cursor is None


def test_a_bad_cursor_or_limit_is_a_tool_error_naming_the_field(tmp_path: Path) -> None:
    profile = _profile(tmp_path, "a")

    async def main() -> None:
        async with Client(build_server(lambda _ctx: profile)) as client:
            for bad in ("nope", "m1.!!!", "m1." + "e30"):
                refused = await client.call_tool("memory_list", {"cursor": bad})
                assert refused.is_error and "cursor" in refused.content[0].text, refused.content
            refused = await client.call_tool("memory_list", {"limit": 0})
            assert refused.is_error and "limit 0 must be a whole number from 1" in refused.content[0].text

    anyio.run(main)


# --- what agents could not do before: restore, undo of their own changes, review ------------------------------------


def test_an_agent_restores_a_memory_and_undoes_its_own_changes(tmp_path: Path) -> None:
    """Forget, restore, then undo the restore: the memory is archived again; undo of the forget puts it back; a
    second undo of the same cycle changes nothing; a live memory's restore says so; and history shows each step."""
    profile = _profile(tmp_path, "a")

    async def main() -> None:
        async with Client(build_server(lambda _ctx: profile)) as client:
            call = client.call_tool
            saved = ok(await call("memory_save", {"content": "The staging database is on port 5433."}))
            mid = saved["id"]
            forgot = ok(await call("memory_forget", {"id": mid, "reason": "moved to 5434"}))
            restored = ok(await call("memory_restore", {"id": mid}))
            assert restored["status"] == "restored" and restored["cycle_id"]
            assert restored["content"] == "The staging database is on port 5433."
            assert ok(await call("memory_get", {"id": mid}))["status"] == "live"
            assert ok(await call("memory_restore", {"id": mid}))["status"] == "already_live"

            undone = ok(await call("memory_undo", {"cycle_id": restored["cycle_id"]}))
            assert undone["outcome"] == "done", undone
            assert ok(await call("memory_get", {"id": mid}))["status"] == "archived"
            again = ok(await call("memory_undo", {"cycle_id": restored["cycle_id"]}))
            assert again["put_back"] == [] and again["already_undone"] == [f"memory {mid}"]

            undone = ok(await call("memory_undo", {"cycle_id": forgot["cycle_id"]}))
            assert undone["outcome"] == "done", undone
            assert ok(await call("memory_get", {"id": mid}))["status"] == "live"
            history = ok(await call("memory_history", {"id": mid}))["events"]
            events = [e["event"] for e in history]
            assert events[0] == "created" and "restored" in events and events.count("archived") >= 2

            # one change alone, by the change_id history shows: the save's creation is the agent's own
            created = history[0]["change_id"]
            one = ok(await call("memory_undo", {"change_id": created}))
            assert one["outcome"] == "done" and one["change_id"] == created, one
            assert ok(await call("memory_get", {"id": mid}))["status"] == "archived"

            neither = await call("memory_undo", {})
            assert neither.is_error and "cycle_id" in neither.content[0].text
            unknown = await call("memory_restore", {"id": "no-such-memory"})
            assert unknown.is_error and "no-such-memory" in unknown.content[0].text

    anyio.run(main)
    assert _counts(profile) == {"live": 0, "archived": 1}


def _dump(profile: AgentProfile) -> list[dict]:
    store = open_store(profile, dream_options())
    try:
        return sorted((e.to_dict() for e in store.memories.list_all()), key=lambda d: d["id"])
    finally:
        store.close()


def test_memory_undo_refuses_a_dream_cycle_and_changes_nothing(demo: AgentProfile) -> None:
    """A dream cycle's changes are the operator's to undo (dream undo): memory_undo refuses the cycle and any one of
    its changes by name, and the store stays as the cycle left it."""
    now = datetime.now(UTC)
    reports = run_cycle(demo, dream_options(), now, only=["archive_purge"], cycle_id="c-dream")
    assert [r.status for r in reports] == ["completed"], [(r.pass_name, r.summary) for r in reports]
    store = open_store(demo, dream_options())
    try:
        [change, *_] = store.changes.list("c-dream")
    finally:
        store.close()
    after_cycle = _dump(demo)

    async def main() -> None:
        async with Client(build_server(lambda _ctx: demo)) as client:
            refused = await client.call_tool("memory_undo", {"cycle_id": "c-dream"})
            assert refused.is_error and "cycle c-dream is not the agent's own" in refused.content[0].text
            refused = await client.call_tool("memory_undo", {"change_id": change.change_id})
            assert refused.is_error and "archive_purge" in refused.content[0].text

    anyio.run(main)
    assert _dump(demo) == after_cycle


def test_review_list_apply_and_reject_over_mcp(demo: AgentProfile) -> None:
    """A pass in review mode leaves its changes pending: review_list shows them with their diff lines, review_apply of
    one change applies it (and only it), review_reject of the set closes the rest, and nothing is left pending; the
    apply is a dream change the agent may not undo itself."""
    now = datetime.now(UTC)
    before = _dump(demo)
    passes = ["archive_purge", "importance_decay"]
    reports = run_cycle(demo, dream_options(ApplyMode="review"), now, only=passes, cycle_id="c-review")
    assert [r.status for r in reports] == ["completed", "completed"], [(r.pass_name, r.summary) for r in reports]
    assert _dump(demo) == before  # review: nothing applied yet
    seen: dict[str, dict] = {}

    async def main() -> None:
        async with Client(build_server(lambda _ctx: demo)) as client:
            call = client.call_tool
            listed = ok(await call("review_list", {}))
            [pending] = listed["sets"]
            assert pending["cycle_id"] == "c-review" and listed["pending"] == len(pending["changes"]) >= 2
            first, *rest = pending["changes"]
            seen["first"] = first
            assert {c["pass_name"] for c in pending["changes"]} == set(passes)
            assert first["lines"] and first["expires_at"] and first["targets"]

            applied = ok(await call("review_apply", {"change_ids": [first["id"]], "reason": "old enough"}))
            assert applied["outcome"] == "done" and [d["id"] for d in applied["done"]] == [first["id"]]
            assert applied["undo_cycle_id"] == "c-review"
            twice = ok(await call("review_apply", {"change_ids": [first["id"]]}))
            assert twice["done"] == [] and twice["not_found"]

            rejected = ok(await call("review_reject", {"cycle_id": "c-review", "reason": "keep the rest"}))
            assert sorted(d["id"] for d in rejected["done"]) == sorted(c["id"] for c in rest)
            assert ok(await call("review_list", {}))["pending"] == 0

            refused = await call("memory_undo", {"cycle_id": applied["undo_cycle_id"]})
            assert refused.is_error and "not the agent's own" in refused.content[0].text
            neither = await call("review_apply", {})
            assert neither.is_error and "cycle_id" in neither.content[0].text

    anyio.run(main)
    touched = {t["id"] for t in seen["first"]["targets"] if t["type"] == "memory"}
    old, new = {e["id"]: e for e in before}, {e["id"]: e for e in _dump(demo)}
    assert touched and all(old.get(i) != new.get(i) for i in touched)  # the applied change, and only it
    assert {i: e for i, e in old.items() if i not in touched} == {i: e for i, e in new.items() if i not in touched}
