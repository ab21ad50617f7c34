"""A memory server keeps each agent warm between calls (service/warm.py) and still gives a dream cycle in another
process its turn: what the cycle writes is caught up by row sequence on the next call (the same index, not a rebuild),
a save made while the cycle runs is visible to the next search and survives the cycle, and the recall index is
written to its file when the server stops. The LRU lets agents go by count, memory and idle time."""

from __future__ import annotations

import random
import subprocess
import sys
import time
from pathlib import Path

import anyio
import pytest

from dream_assets import recall_index as recall
from dream_assets import service as svc
from dream_assets.demo import _memories
from dream_assets.mcp_server import start_line
from dream_assets.options_loader import dream_options
from dream_assets.profile import AgentProfile
from dream_assets.service.warm import WarmAgents, WarmLimits
from dream_assets.store import index_file
from dream_assets.store.connection import StoreConnection, close_all
from dream_assets.store.memory import MemoryStore, top_seq
from dream_assets.text.bm25 import kernel_description
from dream_assets.text.tokens import tokenize
from dream_assets_tests.mcp_harness import clean_env, ok, stdio_session

from ..conftest import NOW

#: A dream cycle in a process of its own that stops between importance decay and memory consolidation until told to
#: go on (``<mid>`` is written when it gets there, it waits for ``<go>``), holding no store session meanwhile: a save
#: made then is made during the cycle, and the passes after it read it.
CYCLE = """
import sys, time
from pathlib import Path

import dream_assets.cycle as cycle

mid, go = Path(sys.argv[2]), Path(sys.argv[3])


run_pass = cycle.run_pass


def pausing(spec, ctx):  # the cycle stops before memory consolidation until the test says go
    if spec.name == "memory_consolidation":
        mid.write_text("in the middle of the cycle")
        deadline = time.monotonic() + 120
        while not go.exists() and time.monotonic() < deadline:
            time.sleep(0.02)
    return run_pass(spec, ctx)


cycle.run_pass = pausing
cycle.run_cycle(sys.argv[1])
"""

SAVED_DURING = "The Quokka ledger audit moves to the Oslo office on Thursdays, says Ingrid Vale."
QUERIES = ("Quokka ledger Oslo", "Alice python standup", "budget review", "coffee", "meeting notes")


def _wait_for(path: Path, proc: subprocess.Popen, timeout_s: float = 120.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not path.exists():
        if proc.poll() is not None:
            raise AssertionError(f"the cycle ended before {path.name}: {proc.stderr.read().decode()[-2000:]}")
        assert time.monotonic() < deadline, f"no {path.name} within {timeout_s} s"
        time.sleep(0.02)


@pytest.mark.slow  # a `dream serve` process and a dream cycle beside it
def test_a_save_through_the_server_during_a_cycle_is_found_next_and_survives_the_cycle(demo, tmp_path):
    mid, go = tmp_path / "mid", tmp_path / "go"

    async def scenario() -> dict:
        async with stdio_session(demo.root) as session:
            call = session.call_tool
            ok(await call("memory_search", {"query": "warm up"}))
            cycle = subprocess.Popen(
                [sys.executable, "-c", CYCLE, str(demo.root), str(mid), str(go)],
                env=clean_env(),
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
            )
            try:
                await anyio.to_thread.run_sync(_wait_for, mid, cycle)
                saved = ok(await call("memory_save", {"content": SAVED_DURING, "category": "places"}))
                during = ok(await call("memory_search", {"query": "Quokka ledger Oslo"}))
                go.write_text("go on")
                _, err = await anyio.to_thread.run_sync(lambda: cycle.communicate(timeout=300))
                assert cycle.returncode == 0, err.decode()[-2000:]
            finally:
                if cycle.poll() is None:
                    cycle.kill()
            after = {q: ok(await call("memory_search", {"query": q, "limit": 10})) for q in QUERIES}
            record = ok(await call("memory_get", {"id": saved["id"]}))
        return {"saved": saved, "during": during, "after": after, "record": record}

    out = anyio.run(scenario)
    saved_id = out["saved"]["id"]
    assert out["saved"]["outcome"] == "created"
    assert [h["id"] for h in out["during"]["hits"]][:1] == [saved_id]  # the next search finds it, mid-cycle
    assert out["record"]["status"] == "live" and out["record"]["content"] == SAVED_DURING  # it survived the cycle
    assert out["after"]["Quokka ledger Oslo"]["hits"][0]["id"] == saved_id

    # The server caught up on what the cycle wrote: its answers after the cycle are those of an index built afresh
    # from the rows now (ids and scores), and the file it wrote on the way out is current for the store.
    path = index_file.index_path(demo.store_path)
    conn = StoreConnection(demo.store_path, demo.store_lock_path, timeout_s=30)
    try:
        assert recall.RecallIndex._loaded(conn, path) is not None  # written when the server stopped
    finally:
        conn.close()
    path.unlink()
    for q, answer in out["after"].items():
        built = svc.search(demo, q, limit=10, now=NOW, options=dream_options()).model_dump(mode="json")
        assert [(h["id"], h["score"]) for h in answer["hits"]] == [(h["id"], h["score"]) for h in built["hits"]], q


@pytest.mark.slow  # a `dream serve` process
@pytest.mark.parametrize("damage", ["truncated", "random bytes"])
def test_a_server_started_on_a_damaged_index_file_answers_as_a_fresh_build_says_so_and_writes_it_good(
    demo, tmp_path, damage
):
    path = index_file.index_path(demo.store_path)
    svc.search(demo, "warm up", now=NOW, options=dream_options())  # builds the index and writes its file
    close_all()
    good = path.read_bytes()
    damaged = good[: len(good) // 2] if damage == "truncated" else random.Random(41).randbytes(len(good))
    path.write_bytes(damaged)
    errors = tmp_path / "serve.stderr"

    async def scenario() -> dict:
        with errors.open("w", encoding="utf-8") as errlog:
            async with stdio_session(demo.root, errlog=errlog) as session:
                return {q: ok(await session.call_tool("memory_search", {"query": q, "limit": 10})) for q in QUERIES}

    answers = anyio.run(scenario)
    said = errors.read_text(encoding="utf-8")
    assert any(str(path) in line and "built from the store" in line for line in said.splitlines()), said

    # Written good on the way out: current for the store, so the next process loads it instead of rebuilding.
    assert path.read_bytes() != damaged
    conn = StoreConnection(demo.store_path, demo.store_lock_path, timeout_s=30)
    try:
        assert recall.RecallIndex._loaded(conn, path) is not None
    finally:
        conn.close()

    # Its answers, the first one included, are those of an index built afresh from the rows (ids and scores).
    path.unlink()
    assert sum(len(a["hits"]) for a in answers.values()) > 0
    for q, answer in answers.items():
        built = svc.search(demo, q, limit=10, now=NOW, options=dream_options()).model_dump(mode="json")
        assert [(h["id"], h["score"]) for h in answer["hits"]] == [(h["id"], h["score"]) for h in built["hits"]], q
    close_all()


def test_a_warm_agent_catches_up_on_another_processes_writes_without_a_rebuild(profile, options):
    """The warm handle's recall index is the same object before and after another process wrote the store: the rows
    it wrote are applied by their sequence when the server opens the file again, and searches equal a fresh build."""
    warm = WarmAgents(WarmLimits(max_agents=1, store_linger_s=0))
    handle = warm.acquire(profile)
    try:
        svc.save(handle, "Priya keeps the Lisbon lease papers in the blue folder.", now=NOW)
        index = recall.of(handle.memories)
        assert index.ready
        before_seq = index.synced_seq
    finally:
        warm.release(profile)
    handle.connection.close()  # what a waiting cycle makes the server do
    other = MemoryStore(StoreConnection(profile.store_path, profile.store_lock_path, linger_s=0), options)
    from dream_assets.save_pipeline import save_memory

    written = save_memory(other, "The Heron load tests run every Friday at noon.", now=NOW).entry
    lisbon = recall.search(other, "Lisbon lease")[0][0]
    other.archive(lisbon.id, now=NOW)
    other.connection.close()

    again = warm.acquire(profile)
    try:
        assert again is handle and recall.of(again.memories) is index  # warm: not reopened from scratch
        heron = svc.search(again, "Heron load tests", now=NOW).hits
        assert [h.id for h in heron] == [written.id]
        assert svc.search(again, "Lisbon lease", now=NOW).hits == []  # the archive is seen too
        assert recall.of(again.memories) is index and index.synced_seq > before_seq
        with again.connection.session() as db:
            fresh = recall.RecallIndex()
            fresh.ensure(db)
        for q in ("Heron load tests", "Lisbon lease folder", "Friday noon"):
            tokens = tokenize(q)
            assert fresh.bm25.search(tokens, limit=10) == index.bm25.search(tokens, limit=10), q
    finally:
        warm.release(profile)
        warm.close()


def test_a_warm_agents_saves_answer_from_a_loaded_index_file_and_its_tables_are_made_behind_them(
    profile, options, monkeypatch
):
    """The first call loads the agent's recall index from its file (the BM25 index only). Saves then answer from the
    file's arrays without the save-time tables (seconds to make at a million entries) and decide as they would have;
    once the changes since the load pile up, the server makes the tables in the background."""
    monkeypatch.setattr(recall, "TABLES_AFTER_CHANGES", 3)
    kept = "Priya keeps the Lisbon lease papers in the blue folder."
    store = MemoryStore(StoreConnection(profile.store_path, profile.store_lock_path, linger_s=0), options)
    store.put_many(_memories(random.Random(3), NOW, 300))
    from dream_assets.save_pipeline import save_memory

    first = save_memory(store, kept, now=NOW).entry  # builds the index and writes its file
    store.connection.close()
    warm = WarmAgents(WarmLimits(max_agents=1, store_linger_s=0))
    try:
        handle = warm.acquire(profile)
        try:
            assert [h.id for h in svc.search(handle, "Lisbon lease papers", now=NOW).hits][:1] == [first.id]
            index = recall.of(handle.memories)
            assert not index.tables_made  # loaded from the file: a search needs none of them
            again = svc.save(handle, kept, now=NOW)
            assert (again.outcome, again.id) == ("reinforced", first.id)
            assert not index.tables_made  # nor does a save
        finally:
            warm.release(profile)
        for i in range(3):
            handle = warm.acquire(profile)
            try:
                svc.save(handle, f"Priya filed lease number {i} for the Porto flat.", now=NOW)
            finally:
                warm.release(profile)
        deadline = time.monotonic() + 60
        while not index.tables_made and time.monotonic() < deadline:
            time.sleep(0.01)
        assert index.tables_made
        handle = warm.acquire(profile)
        try:
            again = svc.save(handle, kept, now=NOW)
            twin = svc.save(handle, "Priya filed lease number 1 for the Porto flat.", now=NOW)
        finally:
            warm.release(profile)
        assert (again.outcome, again.id) == ("reinforced", first.id)
        assert twin.outcome == "reinforced"
    finally:
        warm.close()


def agents_connection(profile: AgentProfile) -> StoreConnection:
    from dream_assets.store.connection import store_connection

    return store_connection(profile.store_path, profile.store_lock_path)


def test_the_warm_agents_are_let_go_by_count_by_idle_time_and_on_close_with_their_index_written(tmp_path):
    clock = [0.0]
    warm = WarmAgents(WarmLimits(max_agents=2, idle_s=60, store_linger_s=0), clock=lambda: clock[0])
    agents = [AgentProfile(tmp_path / name).ensure() for name in ("a", "b", "c")]
    for i, agent in enumerate(agents):
        clock[0] += 1
        handle = warm.acquire(agent)
        try:
            svc.save(handle, f"Agent {agent.root.name} note {i} about the Kestrel rollout.", now=NOW)
        finally:
            warm.release(agent)
    # Three agents, room for two: the least recently used (a) was let go (its index released, its store closed), and
    # a call opens it again with what it holds.
    assert agents[0] not in warm and agents[1] in warm and agents[2] in warm
    assert not hasattr(agents_connection(agents[0]), "_recall_index")
    clock[0] += 1
    handle = warm.acquire(agents[0])
    try:
        assert [h.content for h in svc.search(handle, "Kestrel rollout", now=NOW).hits] == [
            "Agent a note 0 about the Kestrel rollout."
        ]
    finally:
        warm.release(agents[0])
    assert agents[0] in warm and agents[1] not in warm  # b was the least recently used now
    clock[0] += 30
    warm.acquire(agents[0])
    warm.release(agents[0])
    clock[0] += 45  # c idle 76 s, a 45 s
    assert warm.sweep() == 1 and agents[2] not in warm and agents[0] in warm
    handle = warm.acquire(agents[0])
    svc.save(handle, "One more note after the sweep.", now=NOW)
    warm.release(agents[0])
    warm.close()
    assert len(warm) == 0
    conn = StoreConnection(agents[0].store_path, agents[0].store_lock_path)
    try:
        loaded = recall.RecallIndex._loaded(conn, index_file.index_path(agents[0].store_path))
        with conn.session() as db:
            top = top_seq(db)
        assert loaded is not None and loaded.synced_seq == top  # written on close, after the last save
    finally:
        conn.close()


def test_a_memory_cap_lets_the_least_recently_used_index_go(tmp_path):
    warm = WarmAgents(WarmLimits(max_agents=10, max_memory_mb=0.003, store_linger_s=0))  # about one entry
    agents = [AgentProfile(tmp_path / name).ensure() for name in ("a", "b")]
    for agent in agents:
        handle = warm.acquire(agent)
        try:
            svc.save(handle, f"Agent {agent.root.name} keeps the Osprey runbook.", now=NOW)
        finally:
            warm.release(agent)
    assert agents[0] not in warm and agents[1] in warm  # the cap holds the newest only
    warm.close()


def test_a_call_weighs_only_its_own_agent_while_the_warm_ones_are_within_the_limits(tmp_path, monkeypatch):
    """Forty warm agents within the count and memory limits: a call measures what its own agent's indexes hold when
    it ends, not what every warm agent holds, and the idle ones are still let go, oldest first."""
    from dream_assets.service import warm as warm_module

    clock = [0.0]
    warm = WarmAgents(WarmLimits(max_agents=64, idle_s=60, store_linger_s=0), clock=lambda: clock[0])
    agents = [AgentProfile(tmp_path / f"agent-{i:02d}").ensure() for i in range(40)]
    for agent in agents:
        clock[0] += 1
        warm.acquire(agent)
        warm.release(agent)
    weighed: list[int] = []
    measure = warm_module._indexes
    monkeypatch.setattr(warm_module, "_indexes", lambda agent: weighed.append(1) or measure(agent))
    monkeypatch.setattr(warm_module, "_footprint", lambda agent: weighed.append(1) or 0)
    clock[0] += 1
    handle = warm.acquire(agents[0])
    try:
        svc.save(handle, "The Heron release ships on Friday.", now=NOW)
    finally:
        warm.release(agents[0])
    assert len(weighed) == 1 and len(warm) == 40
    clock[0] += 30  # agents 1 to 9 were last used more than 60 s ago
    assert warm.sweep() == 9 and all(a not in warm for a in agents[1:10]) and agents[0] in warm
    warm.close()


def test_a_changed_options_file_is_read_again_by_a_warm_agent(profile):
    warm = WarmAgents(WarmLimits(store_linger_s=0))
    try:
        first = warm.acquire(profile)
        warm.release(profile)
        assert first.options.MaxContentChars == dream_options().MaxContentChars
        profile.options_path.write_text("MaxContentChars = 1234\n", encoding="utf-8")
        again = warm.acquire(profile)
        warm.release(profile)
        assert again is not first and again.options.MaxContentChars == 1234
    finally:
        warm.close()


def test_warm_limits_refuse_a_bad_value_by_name():
    with pytest.raises(ValueError, match="max_agents"):
        WarmLimits(max_agents=0)
    with pytest.raises(ValueError, match="idle_s"):
        WarmLimits(idle_s=-1)


def test_the_start_line_names_the_recall_index_in_use():
    line = start_line("agent x over stdio")
    assert line.startswith("dream serve: agent x over stdio") and kernel_description() in line


def _served(profile: AgentProfile, warm: WarmAgents):
    from mcp import Client

    from dream_assets.mcp_server import build_server

    return Client(build_server(lambda _ctx: profile, warm))


def test_a_warm_agents_calls_are_answered_on_the_event_loop_with_the_answers_of_a_worker_thread(profile, monkeypatch):
    """Once the agent is warm (store open, recall index built), save, search and get run on the server's event loop,
    with no hop to a worker thread; their answers are those the worker-thread path gives."""
    import threading

    ran_in: list[str] = []
    for name in ("save", "search", "get"):
        op = getattr(svc, name)

        def recorded(*args, _op=op, **kwargs):
            ran_in.append(threading.current_thread().name)
            return _op(*args, **kwargs)

        monkeypatch.setattr(svc, name, recorded)
    warm = WarmAgents(WarmLimits(max_agents=1))

    async def scenario(loop_thread: list[str]) -> list[dict]:
        loop_thread.append(threading.current_thread().name)
        async with _served(profile, warm) as client:
            ok(await client.call_tool("memory_search", {"query": "warm up"}))  # opens the agent: a worker thread
            # The open file's idle watcher takes the store's lock for its looks; stopped here (the file then stays
            # open), so no look of it can send a call of this test to a thread on a loaded machine.
            next(iter(warm._agents.values())).handle.connection._watch_token = None
            saved = ok(await client.call_tool("memory_save", {"content": "Rosa waters the ficus on Mondays."}))
            answers = [saved]
            for _ in range(2):
                answers.append(ok(await client.call_tool("memory_search", {"query": "ficus Mondays", "limit": 5})))
                answers.append(ok(await client.call_tool("memory_get", {"id": saved["id"]})))
                monkeypatch.setattr(warm, "acquire_ready", lambda _profile: None)  # the second round: threads
        return answers

    loop: list[str] = []
    try:
        answers = anyio.run(scenario, loop)
    finally:
        warm.close()
    assert ran_in[1:4] == [loop[0]] * 3, ran_in  # save, search and get on the loop's own thread
    assert all(name != loop[0] for name in ran_in[:1] + ran_in[4:]), ran_in  # the first call and the forced round
    assert answers[1] == answers[3] and answers[1]["hits"][0]["id"] == answers[0]["id"]
    assert answers[2] == answers[4] and answers[2]["content"] == "Rosa waters the ficus on Mondays."


def test_a_call_that_would_wait_for_the_store_is_never_answered_on_the_event_loop(profile):
    """While another thread of the server holds the agent's store (a long save), a search waits for it in a worker
    thread: the event loop goes on answering (a tools listing comes back at once) and the search answers once the
    store is free. The same when the server let the file go (another process's turn): the search opens it again."""
    import threading

    warm = WarmAgents(WarmLimits(max_agents=1))
    held, release = threading.Event(), threading.Event()

    def hold() -> None:
        handle = warm.acquire(profile)
        try:
            with handle.connection.session():
                held.set()
                release.wait(30)
        finally:
            warm.release(profile)

    async def scenario() -> dict:
        async with _served(profile, warm) as client:
            ok(await client.call_tool("memory_save", {"content": "The Osprey backup runs at 02:00 every night."}))
            holder = threading.Thread(target=hold)
            holder.start()
            await anyio.to_thread.run_sync(held.wait, 30)
            out: dict = {}
            async with anyio.create_task_group() as tg:

                async def search() -> None:
                    out["search"] = ok(await client.call_tool("memory_search", {"query": "Osprey backup"}))
                    out["search_done"] = time.monotonic()

                tg.start_soon(search)
                await anyio.sleep(0.2)  # the search is waiting for the store by now
                await client.list_tools()
                out["listed"] = time.monotonic()
                assert "search" not in out  # still waiting: the store is held
                release.set()
            holder.join(30)
            next(iter(warm._agents.values())).handle.connection.close()  # the file let go for another process
            out["reopened"] = ok(await client.call_tool("memory_search", {"query": "Osprey backup"}))
            return out

    try:
        out = anyio.run(scenario)
    finally:
        release.set()
        warm.close()
    assert out["listed"] < out["search_done"]
    assert out["search"]["hits"][0]["content"] == "The Osprey backup runs at 02:00 every night."
    assert out["reopened"]["hits"] == out["search"]["hits"]


def test_only_a_ready_agent_is_taken_at_once(profile, tmp_path, monkeypatch):
    """``acquire_ready``: a warm agent with its store open and its recall index built, no embeddings endpoint and no
    linked folder; None for anything else, and it never opens or loads anything itself."""
    warm = WarmAgents(WarmLimits(max_agents=2))
    try:
        assert warm.acquire_ready(profile) is None  # not warm yet: nothing opened
        assert profile not in warm
        handle = warm.acquire(profile)
        warm.release(profile)
        assert warm.acquire_ready(profile) is None  # warm, but no recall index built yet
        svc.search(warm.acquire(profile), "anything", now=NOW)
        warm.release(profile)
        assert warm.acquire_ready(profile) is handle
        warm.release(profile, let_go=False)
        handle.connection.close()
        assert warm.acquire_ready(profile) is None  # the file let go: opening it may wait
        svc.search(warm.acquire(profile), "anything", now=NOW)
        warm.release(profile)
        profile.memory_folder_link_path.write_text("{}")
        assert warm.acquire_ready(profile) is None  # a linked folder is read first
        profile.memory_folder_link_path.unlink()
        assert warm.acquire_ready(profile) is handle
        warm.release(profile, let_go=False)
    finally:
        warm.close()
    monkeypatch.setenv("DREAM__EmbeddingModel", "multilingual-e5-small")  # a search would ask the endpoint
    other = AgentProfile(tmp_path / "embedded").ensure()
    warm = WarmAgents()
    try:
        recall.prepare(warm.acquire(other).memories)
        warm.release(other)
        assert recall.current(agents_connection(other)) is not None
        assert warm.acquire_ready(other) is None
    finally:
        warm.close()
