"""Driving `dream serve` with the real `mcp` client SDK: a subprocess server on a free 127.0.0.1 port, sessions over
stdio and Streamable HTTP, and one pass over every tool whose outcomes are checked in the store."""

from __future__ import annotations

import os
import resource
import socket
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any, TextIO

import httpx2
from mcp import ClientSession
from mcp.client.stdio import StdioServerParameters, stdio_client
from mcp.client.streamable_http import streamable_http_client
from mcp.types import CallToolResult

from dream_assets.mcp_server import TOOL_NAMES
from dream_assets.profile import AgentProfile
from dream_assets.store import open_store
from dream_assets.store.logs import read_events

HOST = "127.0.0.1"
START_TIMEOUT_S = 120
Call = Callable[[str, dict[str, Any]], Awaitable[CallToolResult]]


def free_port() -> int:
    with socket.socket() as s:
        s.bind((HOST, 0))
        return s.getsockname()[1]


def serve_command(*args: str) -> list[str]:
    return [sys.executable, "-m", "dream_assets.cli", "serve", *args]


def clean_env(extra: Mapping[str, str] | None = None) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("DREAM")}
    return {**env, **(extra or {})}


class HttpServer:
    """`dream serve --http` in a subprocess, stopped (and waited for) on exit."""

    def __init__(
        self,
        root: Path,
        *,
        env: Mapping[str, str] | None = None,
        args: tuple[str, ...] = (),
        descriptor_limit: int | None = None,
    ) -> None:
        """``descriptor_limit``: the server's soft RLIMIT_NOFILE (e.g. the common 1,024), else this process's."""
        self.root, self.port = root, free_port()
        self.base = f"http://{HOST}:{self.port}"

        def limit_descriptors() -> None:
            if descriptor_limit is not None:
                hard = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
                resource.setrlimit(resource.RLIMIT_NOFILE, (descriptor_limit, hard))

        self.proc = subprocess.Popen(
            serve_command("--http", f"{HOST}:{self.port}", "--profile-root", str(root), *args),
            env=clean_env(env),
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            preexec_fn=limit_descriptors if descriptor_limit is not None else None,
        )
        deadline = time.monotonic() + START_TIMEOUT_S
        while True:
            if self.proc.poll() is not None:
                raise RuntimeError(f"dream serve exited with {self.proc.returncode}: {self.proc.stderr.read()!r}")
            try:
                socket.create_connection((HOST, self.port), timeout=0.2).close()
                return
            except OSError:
                if time.monotonic() > deadline:
                    self.stop()
                    raise RuntimeError(f"dream serve did not listen on {self.base} within {START_TIMEOUT_S}s") from None
                time.sleep(0.1)

    def url(self, agent: str) -> str:
        return f"{self.base}/agents/{agent}/mcp"

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        if self.proc.stderr is not None:
            self.proc.stderr.close()

    def __enter__(self) -> HttpServer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


def hold_half_open(port: int, n: int, sources: list[str], agent: str = "b") -> list[socket.socket]:
    """``n`` connections to 127.0.0.1 from the given loopback addresses, each stopped in the middle of its headers
    (the caller closes them)."""
    held = []
    try:
        for i in range(n):
            sock = socket.socket()
            held.append(sock)
            sock.bind((sources[i % len(sources)], 0))
            sock.settimeout(10)
            sock.connect((HOST, port))
            sock.sendall(f"POST /agents/{agent}/mcp HTTP/1.1\r\nHost: {HOST}:{port}\r\nContent-Type: appl".encode())
    except BaseException:
        for sock in held:
            sock.close()
        raise
    return held


@asynccontextmanager
async def http_session(url: str, token: str | None = None) -> AsyncIterator[ClientSession]:
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    async with httpx2.AsyncClient(headers=headers, timeout=120) as http:
        async with streamable_http_client(url, http_client=http) as streams:
            async with ClientSession(streams[0], streams[1]) as session:
                await session.initialize()
                yield session


@asynccontextmanager
async def stdio_session(
    profile: Path, env: Mapping[str, str] | None = None, errlog: TextIO | None = None
) -> AsyncIterator[ClientSession]:
    """A client session with `dream serve --profile` as its child; ``errlog``: where the server's stderr goes."""
    params = StdioServerParameters(
        command=sys.executable, args=serve_command("--profile", str(profile))[1:], env=clean_env(env)
    )
    async with stdio_client(params, **({} if errlog is None else {"errlog": errlog})) as (read, write):
        async with ClientSession(read, write) as session:
            await session.initialize()
            yield session


def ok(result: CallToolResult) -> dict[str, Any]:
    assert not result.is_error, result.content
    assert result.structured_content is not None
    return result.structured_content


async def exercise_every_tool(call: Call, profile: AgentProfile, list_tools: Callable[[], Awaitable[Any]]) -> None:
    """Call each tool once, check what it answered, and check the agent's store and logs show it."""
    listed = await list_tools()
    assert sorted(t.name for t in listed.tools) == sorted(TOOL_NAMES)
    assert all(t.output_schema for t in listed.tools), "every tool declares its structured output"

    first = ok(await call("memory_save", {"content": "The release train leaves on Thursdays.", "tags": ["release"]}))
    assert first["outcome"] == "created"
    again = ok(await call("memory_save", {"content": "the release train leaves on thursdays"}))
    assert (again["outcome"], again["id"]) == ("reinforced", first["id"])
    other = ok(await call("memory_save", {"content": "Hotfixes skip the release train.", "category": "process"}))
    hits = ok(await call("memory_search", {"query": "release train", "tags": ["release"]}))["hits"]
    assert [h["id"] for h in hits] == [first["id"]]
    assert ok(await call("memory_reinforce", {"id": other["id"]}))["reinforcement_count"] == 2
    forgot = ok(await call("memory_forget", {"id": other["id"], "reason": "no longer true"}))
    assert forgot["archived"] and forgot["cycle_id"]
    got = ok(await call("memory_get", {"id": other["id"]}))
    assert got["status"] == "archived" and "no longer true" in got["archived_reason"]
    events = ok(await call("memory_history", {"id": other["id"]}))["events"]
    assert [e["event"] for e in events] == ["created", "reinforced", "archived"]
    listed_now = ok(await call("memory_list", {"include_archived": True}))
    assert [m["id"] for m in listed_now["items"]] == [first["id"], other["id"]] and listed_now["next_cursor"] is None

    ok(await call("skill_save", {"name": "ops/release", "content": "Tag, build, announce.", "summary": "release"}))
    assert [s["name"] for s in ok(await call("skill_list", {}))["skills"]] == ["ops/release"]
    assert ok(await call("skill_get", {"name": "ops/release"}))["content"] == "Tag, build, announce."
    ok(await call("feedback_record", {"session_id": "s1", "kind": "Correction", "text": "Thursdays, not Fridays"}))
    ok(await call("skill_usage_record", {"session_id": "s1", "skill_name": "ops/release"}))
    ok(await call("tool_call_record", {"session_id": "s1", "tool": "git.tag", "success": True, "duration_ms": 8}))
    ok(await call("conversation_append", {"session_id": "s1", "role": "user", "content": "When is the train?"}))
    status = ok(await call("dream_status", {}))
    assert (status["live_memories"], status["archived_memories"], status["skills"]) == (1, 1, 1)
    assert ok(await call("dream_last_report", {}))["cycle_id"] is None

    refused = await call("memory_save", {"content": "x" * 20_000})
    assert refused.is_error and "content is 20000 characters" in refused.content[0].text
    bad = await call("feedback_record", {"session_id": "s1", "kind": "Praise", "text": "x"})
    assert bad.is_error and "kind" in bad.content[0].text

    store = open_store(profile)
    try:
        live = store.memories.list_live()
        assert [e.id for e in live] == [first["id"]] and live[0].reinforcement_count == 2
        assert store.memories.get(other["id"]).is_archived
        assert store.skills.get("ops/release") is not None
    finally:
        store.close()
    assert [e.text for e in read_events(profile, "feedback").events] == ["Thursdays, not Fridays"]
    assert [e.tool for e in read_events(profile, "tool-call").events] == ["git.tag"]
    assert [e.skill_name for e in read_events(profile, "skill-usage").events] == ["ops/release"]
    assert [e.content for e in read_events(profile, "conversation").events] == ["When is the train?"]
