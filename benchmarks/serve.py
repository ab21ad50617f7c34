"""`dream serve` benchmarks: save and search through MCP, as an agent sees them. Prints one JSON object per line:
{"name", "n", "value", "unit"}.

    .venv/bin/python benchmarks/serve.py            # n = 10,000 and 100,000 entries
    .venv/bin/python benchmarks/serve.py --quick    # n = 1,000, fewer calls, a 15 s cycle window (CI)
    .venv/bin/python benchmarks/serve.py --only-half-open   # the slow-client figure alone

For each corpus size and each transport (stdio: a `dream serve --profile` child of the client; http: a `dream serve
--http` subprocess on 127.0.0.1), with the real `mcp` client SDK:

- alone: ``serve.<transport>.save_p50_ms`` / ``save_p99_ms`` and ``search_p50_ms`` / ``search_p99_ms`` (client-observed
  latency of one tool call; the first call, which builds the server's recall index, is left out and reported as
  ``serve.<transport>.first_call_s``: the server loads the agent's persisted recall index as it starts; so is the
  first save, reported as ``serve.<transport>.first_save_s``: it looks up the loaded index file's arrays instead of
  the save-time tables, which are made only once the changes since the load pile up, and pays for finding entries
  in them (a one-off cost of its own, ``serve.<transport>.warm_up_cpu_s``, the server's CPU time from its start to
  the end of that save), and
  ``serve.<transport>.server_cpu_per_save_ms`` / ``server_cpu_per_search_ms`` (the server process's CPU time per call:
  a figure the load of a shared machine disturbs far less than latency), against ``serve.library_save_cpu_ms`` /
  ``serve.library_search_cpu_ms``, the same calls through the library (``dream_assets.service``) in one process: what
  the server adds around the store call, and ``serve.sdk_floor_save_cpu_ms`` / ``sdk_floor_search_cpu_ms``, what
  the MCP SDK alone costs such a call in one process (tools that answer at once with a real result, through its
  single-request driver): a floor under that difference; ``serve.<transport>.spaced_save_p50_ms`` /
  ``spaced_save_cpu_ms``: 20 saves half a second apart, as an agent between turns makes them (a server that
  let the store file go after a quarter of a second opened it again for each);
- during a cycle: a dream cycle (``dream_assets.cycle.run_cycle``, offline backend) runs in another process while the
  client saves 20 times a second and searches after every other save, for as long as the cycle runs but at most the
  window (``--window``; a cycle still running then is stopped (SIGTERM, then it exits without cleaning up),
  reported as ``serve.<transport>.cycle_stopped``: its open transaction rolls back, which cannot touch the saves the
  server committed):
  ``serve.<transport>.cycle_save_p50_ms`` / ``_p99_ms``, ``cycle_search_p50_ms`` / ``_p99_ms``,
  ``serve.<transport>.cycle_saves`` (how many), ``serve.<transport>.cycle_longest_lock_ms`` / ``_cpu_ms`` (the
  cycle's longest store session until it ended or was stopped, wall and CPU time: what a save or search waits for
  at most, a figure the load of the machine disturbs less than the client's p99; where it was opened goes to
  stderr), ``serve.errors`` (tool errors, must be 0) and ``serve.saves_lost`` (ids a save returned that are missing
  from the store afterwards, must be 0).

Many agents (http only, ``--agents``, default 100; 0 leaves it out): one `dream serve --http` for that many agents of
``--agent-size`` memories each (default 1,000), ``--agent-calls`` calls each (default 10: a save, then a search, in
turn), round robin over the agents: ``serve.http.agents_call_p50_ms`` / ``_p99_ms`` (n = the agents) and
``serve.http.agents_rss_mb``, the server's resident memory afterwards (every agent warm: the default
``--max-agents`` is 128).
Then the server idles for ``IDLE_S`` (5 s) with every agent warm and its store still open (the default
``--store-linger`` is 30 s): ``serve.http.agents_idle_cpu_ms_per_s``, the server's CPU time per second of that idle
time (each open store looking for waiters every 10 ms cost about 2 ms a second).

Slow clients (http only, once, on a small agent): ``serve.http.call_s_with_half_open`` with n = the connections held
(``--half-open``, default 1,100): a `dream serve --http` subprocess limited to 1,024 descriptors (the common soft
limit) holds that many connections stopped in the middle of their headers, half from the client's own address and
half from ten other loopback addresses, and a legitimate session (initialize, a save, a search) is timed from start
to its last answer; ``serve.http.descriptors_with_half_open`` is the server's open descriptors meanwhile. Target:
answered within 1 s (before the connection limits every call failed: the server had no descriptor left).

Targets at 100,000 entries: search p50 <= 15 ms, save p50 <= 30 ms, p99 <= 250 ms during a cycle, saves lost 0.
Run it with ``nice -n 10`` on a shared machine; latencies there are upper bounds.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from datetime import UTC, datetime
from pathlib import Path

import anyio

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from dream_assets.demo import PEOPLE, PLACES, PROJECTS, TOOLS, TOPICS, _memories  # noqa: E402
from dream_assets.options_loader import dream_options
from dream_assets.profile import AgentProfile  # noqa: E402
from dream_assets.service import SavedMemory, SearchResult  # noqa: E402
from dream_assets.store import open_store  # noqa: E402
from dream_assets_tests.mcp_harness import HttpServer, hold_half_open, http_session, stdio_session  # noqa: E402

NOW = datetime(2026, 11, 30, tzinfo=UTC)
#: The cycle process: runs a cycle, then prints its longest store session so far (the longest any save or search
#: waited for it) as one JSON line; stopped (SIGTERM) before the end, it prints it at once and exits.
CYCLE = """
import json, os, signal, sys

def report():
    from dream_assets.store.connection import longest_holds

    holds = sorted(longest_holds().values(), key=lambda h: h.wall_s)
    if holds:  # none when stopped before the store was first opened
        print(json.dumps({"wall_s": holds[-1].wall_s, "cpu_s": holds[-1].cpu_s, "where": holds[-1].where}), flush=True)

def stop(*_):
    report()
    os._exit(0)  # like a kill: the open transaction is rolled back when the file is next opened

signal.signal(signal.SIGTERM, stop)
from dream_assets.cycle import run_cycle
run_cycle(sys.argv[1])
report()
"""


def emit(name: str, n: int, value: float, unit: str) -> None:
    print(json.dumps({"name": name, "n": n, "value": round(value, 3), "unit": unit}), flush=True)


def _p99(values: list[float]) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(round(0.99 * (len(ordered) - 1))))]


def build(root: Path, n: int) -> AgentProfile:
    """An agent of ``n`` memories as one in use finds it: its recall index written beside the store (by its first
    search, its last cycle or its server's shutdown), so a new process loads it instead of building it."""
    from dream_assets import recall_index

    profile = AgentProfile(root / f"bench-{n}").ensure()
    store = open_store(profile, dream_options())
    store.memories.put_many(_memories(random.Random(n), NOW, n))
    recall_index.prepare(store.memories)  # builds the index and writes its file
    recall_index.release(store.connection)
    store.close()
    return profile


def fact(rng: random.Random, i: int) -> str:
    return (
        f"Note {i}: {rng.choice(PEOPLE)} asked about {rng.choice(TOOLS)} for {rng.choice(PROJECTS)} "
        f"during the {rng.choice(TOPICS)} in {rng.choice(PLACES)}, ticket {rng.randint(1000, 99999)}."
    )


def query(rng: random.Random) -> str:
    return f"{rng.choice(PEOPLE).split()[0]} {rng.choice(TOOLS)} {rng.choice(TOPICS)}"


def _server_pid(match: str) -> int | None:
    """The `dream serve` process among this process's children (its command line contains ``match``)."""
    me = str(os.getpid())
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
            cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if stat.rsplit(")", 1)[1].split()[1] == me and "serve" in cmdline and match in cmdline:
            return int(entry.name)
    return None


def _cpu_s(pid: int | None) -> float:
    if pid is None:
        return float("nan")
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


#: The pause between the spaced saves (an agent between turns).
SPACED_S = 0.5


async def _timed(call: Callable, name: str, args: dict) -> tuple[float, bool, dict | None]:
    t = time.perf_counter()
    result = await call(name, args)
    return time.perf_counter() - t, bool(result.is_error), result.structured_content


async def bench_transport(
    session_of: Callable[[], AsyncIterator], transport: str, profile: AgentProfile, n: int, calls: int, window: float
) -> None:
    rng = random.Random(n)
    lost_ids: list[str] = []
    errors = 0
    async with session_of() as session:
        call = session.call_tool
        elapsed, _, _ = await _timed(call, "memory_search", {"query": "warm up the recall index"})
        emit(f"serve.{transport}.first_call_s", n, elapsed, "s")
        pid = _server_pid(str(profile.root.parent) if transport == "http" else str(profile.root))
        elapsed, failed, _ = await _timed(call, "memory_save", {"content": "Warm-up: the save-time tables are made."})
        errors += failed
        emit(f"serve.{transport}.first_save_s", n, elapsed, "s")
        emit(f"serve.{transport}.warm_up_cpu_s", n, _cpu_s(pid), "s")
        saves, searches = [], []
        cpu = _cpu_s(pid)
        for i in range(calls):
            elapsed, failed, _ = await _timed(call, "memory_save", {"content": fact(rng, i), "category": "notes"})
            saves.append(elapsed)
            errors += failed
        cpu = _cpu_s(pid) - cpu
        search_cpu = _cpu_s(pid)
        for _ in range(calls):
            elapsed, failed, _ = await _timed(call, "memory_search", {"query": query(rng), "limit": 10})
            searches.append(elapsed)
            errors += failed
        search_cpu = _cpu_s(pid) - search_cpu
        emit(f"serve.{transport}.save_p50_ms", n, statistics.median(saves) * 1000, "ms")
        emit(f"serve.{transport}.save_p99_ms", n, _p99(saves) * 1000, "ms")
        emit(f"serve.{transport}.search_p50_ms", n, statistics.median(searches) * 1000, "ms")
        emit(f"serve.{transport}.search_p99_ms", n, _p99(searches) * 1000, "ms")
        emit(f"serve.{transport}.server_cpu_per_save_ms", n, cpu / calls * 1000, "ms")
        emit(f"serve.{transport}.server_cpu_per_search_ms", n, search_cpu / calls * 1000, "ms")
        # An agent between turns: saves half a second apart, longer than a process's default linger on the file.
        spaced, spaced_saves = min(20, calls), []
        spaced_cpu = _cpu_s(pid)
        for i in range(spaced):
            await anyio.sleep(SPACED_S)
            elapsed, failed, _ = await _timed(call, "memory_save", {"content": fact(rng, 500_000 + i)})
            spaced_saves.append(elapsed)
            errors += failed
        spaced_cpu = _cpu_s(pid) - spaced_cpu  # the idle server's own ticks (its watcher threads) included
        emit(f"serve.{transport}.spaced_save_p50_ms", n, statistics.median(spaced_saves) * 1000, "ms")
        emit(f"serve.{transport}.spaced_save_cpu_ms", n, spaced_cpu / spaced * 1000, "ms")

        cycle = subprocess.Popen(
            [sys.executable, "-c", CYCLE, str(profile.root)],
            env={k: v for k, v in os.environ.items() if not k.startswith("DREAM")},
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
        )
        saves, searches, saved = [], [], []
        deadline = time.monotonic() + window
        tick = time.monotonic()
        i = 0
        while (cycle.poll() is None or i < 20) and time.monotonic() < deadline:
            content = fact(rng, 1_000_000 + i)
            elapsed, failed, out = await _timed(call, "memory_save", {"content": content, "category": "notes"})
            saves.append(elapsed)
            errors += failed
            if not failed and out is not None:
                saved.append(out["id"])
            if i % 2:
                elapsed, failed, _ = await _timed(call, "memory_search", {"query": query(rng)})
                searches.append(elapsed)
                errors += failed
            i += 1
            tick += 0.05
            await anyio.sleep(max(0.0, tick - time.monotonic()))
        stopped = cycle.poll() is None
        if stopped:
            cycle.terminate()
        emit(f"serve.{transport}.cycle_stopped", n, int(stopped), "count")
        try:
            out, err = cycle.communicate(timeout=60)
        except subprocess.TimeoutExpired:
            cycle.kill()
            out, err = cycle.communicate()
        if not stopped and cycle.returncode != 0:
            raise RuntimeError(f"the dream cycle failed: {err.decode(errors='replace')[-2000:]}")
        lines = out.decode().strip().splitlines()
        if lines:
            hold = json.loads(lines[-1])
            emit(f"serve.{transport}.cycle_longest_lock_ms", n, hold["wall_s"] * 1000, "ms")
            emit(f"serve.{transport}.cycle_longest_lock_cpu_ms", n, hold["cpu_s"] * 1000, "ms")
            print(f"serve.{transport} n={n}: the cycle's longest store session: {hold['where']}", file=sys.stderr)
    store = open_store(profile, dream_options())
    try:
        found = store.memories.get_many(saved)
    finally:
        store.close()
    lost_ids = [i for i in saved if i not in found]
    emit(f"serve.{transport}.cycle_save_p50_ms", n, statistics.median(saves) * 1000, "ms")
    emit(f"serve.{transport}.cycle_save_p99_ms", n, _p99(saves) * 1000, "ms")
    emit(f"serve.{transport}.cycle_search_p50_ms", n, statistics.median(searches) * 1000, "ms")
    emit(f"serve.{transport}.cycle_search_p99_ms", n, _p99(searches) * 1000, "ms")
    emit(f"serve.{transport}.cycle_saves", n, len(saves), "count")
    emit("serve.errors", n, errors, "count")
    emit("serve.saves_lost", n, len(lost_ids), "count")


def bench_library(root: Path, n: int, calls: int) -> None:
    """The same saves and searches through the library in this one process (``dream_assets.service`` with the
    agent's folder, as a Python caller makes them): the CPU time per call the server's figures compare with."""
    from dream_assets import service

    profile = build(root / "library", n)
    rng = random.Random(n)
    service.search(profile, "warm up the recall index")
    service.save(profile, "Warm-up: the save-time tables are made.")  # as the server's first save, left out
    started = time.process_time()
    for i in range(calls):
        service.save(profile, fact(rng, i), category="notes")
    emit("serve.library_save_cpu_ms", n, (time.process_time() - started) / calls * 1000, "ms")
    started = time.process_time()
    for _ in range(calls):
        service.search(profile, query(rng), limit=10)
    emit("serve.library_search_cpu_ms", n, (time.process_time() - started) / calls * 1000, "ms")
    saved = service.save(profile, fact(rng, calls), category="notes")
    found = service.search(profile, query(rng), limit=10)
    anyio.run(bench_sdk_floor, n, calls, saved, found)
    from dream_assets.store.connection import close_all

    close_all()


async def bench_sdk_floor(n: int, calls: int, saved: object, found: object) -> None:
    """What the MCP SDK itself costs a call, in this process: a server whose ``memory_save`` and ``memory_search``
    answer at once with a real result of each (``saved``, ``found``), driven by the SDK's single-request driver
    (``serve_one``, the lightest way in: no transport, no dispatcher task; the HTTP server answers tool calls with
    it), arguments validated and the result converted and serialised as for the real tools, answered on the event
    loop as the server answers a warm agent's calls. ``serve.sdk_floor_save_cpu_ms`` / ``sdk_floor_search_cpu_ms``:
    CPU time per call, a floor under what any server built on the SDK adds to the library call."""
    from mcp.server.mcpserver import MCPServer

    from dream_assets.mcp_server import serve_call

    server = MCPServer("floor")

    @server.tool()
    async def memory_save(content: str, category: str = "general") -> SavedMemory:
        return saved

    @server.tool()
    async def memory_search(query: str, limit: int = 10) -> SearchResult:
        return found

    lowlevel = server._lowlevel_server
    rng = random.Random(n)

    async def call(name: str, arguments: dict) -> None:
        await serve_call(lowlevel, 1, "tools/call", {"name": name, "arguments": arguments})

    for name, arguments in (
        ("save", lambda i: {"content": fact(rng, i), "category": "notes"}),
        ("search", lambda i: {"query": query(rng), "limit": 10}),
    ):
        for i in range(20):
            await call(f"memory_{name}", arguments(i))
        started = time.process_time()
        for i in range(calls):
            await call(f"memory_{name}", arguments(i))
        emit(f"serve.sdk_floor_{name}_cpu_ms", n, (time.process_time() - started) / calls * 1000, "ms")


def bench_many_agents(root: Path, agents: int, size: int, calls: int, server_args: tuple[str, ...] = ()) -> None:
    """One HTTP server, ``agents`` agents of ``size`` memories, ``calls`` calls each, round robin (see the module
    docstring)."""
    import shutil
    from contextlib import AsyncExitStack

    template = build(root, size).root  # one agent built (its index file written), copied for the others
    names = [f"agent-{i:03d}" for i in range(agents)]
    for name in names:
        shutil.copytree(template, root / name)
    shutil.rmtree(template)
    rng = random.Random(agents)
    took: list[float] = []
    errors = 0

    async def run(server: HttpServer) -> None:
        nonlocal errors
        async with AsyncExitStack() as stack:
            sessions = [await stack.enter_async_context(http_session(server.url(name))) for name in names]
            for i in range(calls):
                for session in sessions:
                    if i % 2 == 0:
                        args = {"content": fact(rng, i), "category": "notes"}
                        elapsed, failed, _ = await _timed(session.call_tool, "memory_save", args)
                    else:
                        elapsed, failed, _ = await _timed(session.call_tool, "memory_search", {"query": query(rng)})
                    took.append(elapsed)
                    errors += failed

    with HttpServer(root, args=server_args) as server:
        anyio.run(run, server)
        status = Path(f"/proc/{server.proc.pid}/status").read_text()
        rss_kb = int(next(line for line in status.splitlines() if line.startswith("VmRSS:")).split()[1])
        idle_cpu = _cpu_s(server.proc.pid)
        time.sleep(IDLE_S)
        idle_cpu = _cpu_s(server.proc.pid) - idle_cpu
    emit("serve.http.agents_call_p50_ms", agents, statistics.median(took) * 1000, "ms")
    emit("serve.http.agents_call_p99_ms", agents, _p99(took) * 1000, "ms")
    emit("serve.http.agents_rss_mb", agents, rss_kb / 1024, "MB")
    emit("serve.http.agents_idle_cpu_ms_per_s", agents, idle_cpu / IDLE_S * 1000, "ms/s")
    emit("serve.errors", agents, errors, "count")


#: How long the many-agents server idles, every agent warm, for its idle CPU figure.
IDLE_S = 5.0
HALF_OPEN_TOKEN = "half-open-benchmark-token-0123456789"
#: The server's soft descriptor limit in the slow-client figure; this process needs the count held plus a margin.
HALF_OPEN_SERVER_DESCRIPTORS = 1024


def bench_half_open(root: Path, count: int) -> None:
    import resource

    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (max(soft, min(hard, count + 200)), hard))
    count = min(count, resource.getrlimit(resource.RLIMIT_NOFILE)[0] - 200)
    print(f"half-open: holding {count} connections against a server limited to 1,024 descriptors", file=sys.stderr)
    profile = AgentProfile(root / "b").ensure()

    async def session(url: str) -> float:
        start = time.perf_counter()
        async with http_session(url, HALF_OPEN_TOKEN) as s:
            for name, args in (("memory_save", {"content": f"Fact {start}."}), ("memory_search", {"query": "fact"})):
                if (await s.call_tool(name, args)).is_error:
                    return float("nan")  # a failed call has no answer time
        return time.perf_counter() - start

    env = {"DREAM_SERVE_TOKEN": HALF_OPEN_TOKEN}
    with HttpServer(root, env=env, descriptor_limit=HALF_OPEN_SERVER_DESCRIPTORS) as server:
        anyio.run(session, server.url(profile.agent_id))  # builds the recall index
        others = [f"127.0.0.{i}" for i in range(2, 12)]
        held = hold_half_open(server.port, count // 2, ["127.0.0.1"])
        held += hold_half_open(server.port, count - count // 2, others)
        try:
            took = anyio.run(session, server.url(profile.agent_id))
            descriptors = len(os.listdir(f"/proc/{server.proc.pid}/fd"))
        finally:
            for sock in held:
                sock.close()
    emit("serve.http.call_s_with_half_open", count, took, "s")
    emit("serve.http.descriptors_with_half_open", count, descriptors, "count")
    resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="n = 1,000, fewer calls, a 15 s cycle window")
    parser.add_argument("--transport", choices=("stdio", "http", "both"), default="both")
    parser.add_argument("--window", type=float, help="longest measurement during a cycle, in seconds")
    parser.add_argument("--half-open", type=int, default=1100, help="connections held by the slow-client figure")
    parser.add_argument("--only-half-open", action="store_true", help="only the slow-client figure")
    parser.add_argument("--sizes", help="comma-separated corpus sizes (instead of the default ones)")
    parser.add_argument("--no-half-open", action="store_true", help="leave the slow-client figure out")
    parser.add_argument("--agents", type=int, default=100, help="agents of the many-agents figure (0: none)")
    parser.add_argument("--agent-size", type=int, default=1000, help="memories of each of those agents")
    parser.add_argument("--agent-calls", type=int, default=10, help="calls each of those agents makes")
    parser.add_argument("--only-agents", action="store_true", help="only the many-agents figure")
    parser.add_argument("--agents-linger", type=float, help="the many-agents server's --store-linger (its default)")
    args = parser.parse_args()
    sizes, calls = ([1_000], 30) if args.quick else ([10_000, 100_000], 300)
    if args.sizes:
        sizes = [int(s) for s in args.sizes.split(",")]
    window = args.window or (15.0 if args.quick else 120.0)
    transports = ("stdio", "http") if args.transport == "both" else (args.transport,)
    with tempfile.TemporaryDirectory() as tmp:
        if "http" in transports and not args.no_half_open:
            bench_half_open(Path(tmp) / "half-open", args.half_open)
        if args.only_half_open:
            return
        if "http" in transports and args.agents > 0 and not args.quick:
            linger = () if args.agents_linger is None else ("--store-linger", str(args.agents_linger))
            bench_many_agents(Path(tmp) / "many", args.agents, args.agent_size, args.agent_calls, linger)
        if args.only_agents:
            return
        for n in sizes:
            bench_library(Path(tmp), n, calls)
            for transport in transports:
                profile = build(Path(tmp) / transport, n)
                if transport == "stdio":

                    @asynccontextmanager
                    async def session_of(profile=profile):
                        async with stdio_session(profile.root) as session:
                            yield session

                    anyio.run(bench_transport, session_of, transport, profile, n, calls, window)
                else:
                    with HttpServer(profile.root.parent) as server:

                        @asynccontextmanager
                        async def session_of(profile=profile, server=server):
                            async with http_session(server.url(profile.agent_id)) as session:
                                yield session

                        anyio.run(bench_transport, session_of, transport, profile, n, calls, window)


if __name__ == "__main__":
    main()
