"""Store benchmarks. Prints one JSON object per line: {"name", "n", "value", "unit"}.

    .venv/bin/python benchmarks/store.py                # n = 30,000 and 100,000 (fair access at 10,000)
    .venv/bin/python benchmarks/store.py --n 1000000    # n = 300,000 and 1,000,000: the growth is visible
    .venv/bin/python benchmarks/store.py --quick        # n = 10,000 only
    .venv/bin/python benchmarks/store.py --only dense --corpus-dir /tmp/corpora   # the dense search at 100,000
    .venv/bin/python benchmarks/store.py --n 1000000 --only save-recall --corpus-dir /tmp/corpora
        # save and recall only, on corpora built once in /tmp/corpora and copied for each run

Each size prints the duplicate scan, save, recall and fingerprint figures. Targets on a 2-core machine at 1,000,000
entries: save (with dedup) p50 <= 10 ms, recall p50 <= 20 ms, duplicate scan <= 30 s in <= 3 GB, corpus fingerprint
<= 100 ms when nothing changed. ``store.index_build_s`` is the one-off cost of the first search or save of a process
when no current index file is beside the store (it builds the in-process recall index from the rows and writes the
file, ``store.index_write_s`` of it); it is not part of any save. ``store.index_load_s`` is what a process pays instead
when the file is current (target <= 3 s at 1,000,000), and ``store.cli_search_s`` the wall time of one
`dream memory search` from the shell, a new process each (target <= 0.5 s at 100,000); their ``_cpu_s`` twins are the
same in CPU time. ``store.save_cpu_p50_ms`` and
``store.recall_cpu_p50_ms`` are the same calls in CPU time (the process's, DuckDB's threads included): on a loaded
machine they compare runs where the wall-clock figures cannot. ``store.recall_cold_p50_ms`` is a recall whose hits
were not read by an earlier call of the process (every hit row comes from the file).

Dense search (``--only dense``: at ``--n`` only), the embeddings' half of a fused search (recall_fusion.py) with
random unit vectors of 384 dimensions put in the embeddings table (no endpoint): ``store.dense_search_sql_ms`` is the
store's join (``EmbeddingCache.nearest_live``: what a process's first search uses, a shell's `dream memory search`),
``store.dense_search_ms`` a search with the vectors a process that searches again keeps in memory (dense_index.py;
target: a few ms at 100,000), ``store.dense_build_s`` the one-off build of that matrix (``store.dense_build_hold_ms``
the longest it held the store for), ``store.dense_memory_mb`` what it holds, and ``store.dense_same_ranking`` the
share of queries both answer with the same ids in the same order.

Fair access (n = 10,000): an agent process saves 20 times a second while a second process runs pass-like store work
(read the live list, think, write an entry and its change-log row in one transaction). ``store.pass_wait_p99_s`` is
how long the pass waited to get the store for one of its sessions (target <= 2 s); ``store.save_under_cycle_p99_ms``
is the agent's save latency meanwhile (target <= 250 ms). ``store.undo_under_saves_ratio``: the undo of a cycle of 300
changes while the agent saves, over the same undo alone (target: a small factor; it takes turns of the file).
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import os
import random
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterable
from datetime import UTC, datetime, timedelta
from functools import partial
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from dream_assets import recall_index as recall
from dream_assets.changes_model import ChangeRow
from dream_assets.demo import PEOPLE, PLACES, PROJECTS, TOOLS, TOPICS, _memories  # noqa: E402
from dream_assets.model import MemoryEntry  # noqa: E402
from dream_assets.options_loader import dream_options
from dream_assets.profile import AgentProfile  # noqa: E402
from dream_assets.save_pipeline import save_memory
from dream_assets.store import open_store  # noqa: E402
from dream_assets.store.connection import SessionHold, StoreConnection, close_all  # noqa: E402
from dream_assets.store.index_file import index_path  # noqa: E402
from dream_assets.store.memory import MemoryStore  # noqa: E402

NOW = datetime(2026, 11, 30, tzinfo=UTC)


def emit(name: str, n: int, value: float, unit: str) -> None:
    print(json.dumps({"name": name, "n": n, "value": round(value, 3), "unit": unit}), flush=True)


def corpus(n: int) -> list[MemoryEntry]:
    """The benchmark corpus of ``n`` entries (the same for every run of a size)."""
    return _memories(random.Random(n), NOW, n)


def recall_queries(rng: random.Random, count: int) -> list[str]:
    """What an agent recalls: a person's first name, a tool and a topic."""
    return [f"{rng.choice(PEOPLE).split()[0]} {rng.choice(TOOLS)} {rng.choice(TOPICS)}" for _ in range(count)]


def build(root: Path, n: int) -> AgentProfile:
    profile = AgentProfile(root / f"bench-{n}").ensure()
    store = open_store(profile, dream_options())
    store.memories.put_many(corpus(n))
    return profile


def incoming(rng: random.Random, i: int) -> str:
    return (
        f"New note {i}: {rng.choice(PEOPLE)} asked about {rng.choice(TOOLS)} for {rng.choice(PROJECTS)} "
        f"during the {rng.choice(TOPICS)} in {rng.choice(PLACES)}, ticket {rng.randint(1000, 99999)}."
    )


def _timed(calls: Iterable[Callable[[], object]], before: Callable[[], object] | None = None) -> tuple[float, float]:
    """The median wall-clock and CPU time of ``calls``, in milliseconds (``before`` runs untimed before each)."""
    wall, cpu = [], []
    for call in calls:
        if before is not None:
            before()
        t, c = time.perf_counter(), time.process_time()
        call()
        wall.append(time.perf_counter() - t)
        cpu.append(time.process_time() - c)
    return statistics.median(wall) * 1000, statistics.median(cpu) * 1000


def bench_save_and_recall(profile: AgentProfile, n: int) -> None:
    index_path(profile.store_path).unlink(missing_ok=True)
    store = open_store(profile, dream_options())
    t, c = time.perf_counter(), time.process_time()
    recall.search(store.memories, "warm up the index")  # first use builds the in-process index; not part of a save
    emit("store.index_build_s", n, time.perf_counter() - t, "s")
    emit("store.index_build_cpu_s", n, time.process_time() - c, "s")
    t, c = time.perf_counter(), time.process_time()
    recall.persist(store.memories, min_changes=0)  # what the build wrote already, timed on its own
    emit("store.index_write_s", n, time.perf_counter() - t, "s")
    emit("store.index_write_cpu_s", n, time.process_time() - c, "s")
    store.close()
    bench_index_load(profile, n)
    store = open_store(profile, dream_options())
    rng = random.Random(7)
    texts = [incoming(rng, i) for i in range(300)]
    wall, cpu = _timed(
        partial(save_memory, store.memories, text, category="notes", now=NOW + timedelta(seconds=i))
        for i, text in enumerate(texts)
    )
    emit("store.save_p50_ms", n, wall, "ms")
    emit("store.save_cpu_p50_ms", n, cpu, "ms")
    queries = recall_queries(rng, 300)
    wall, cpu = _timed(partial(recall.search, store.memories, q, limit=10) for q in queries)
    emit("store.recall_p50_ms", n, wall, "ms")
    emit("store.recall_cpu_p50_ms", n, cpu, "ms")
    cold = [partial(recall.search, store.memories, q, limit=10) for q in recall_queries(random.Random(13), 100)]
    emit("store.recall_cold_p50_ms", n, _timed(cold, before=store.memories.forget_cached_rows)[0], "ms")
    times = []
    for _ in range(5):
        t = time.perf_counter()
        store.memories.fingerprint()
        times.append(time.perf_counter() - t)
    emit("store.fingerprint_ms", n, statistics.median(times) * 1000, "ms")
    recall.persist(store.memories)  # what the end of a cycle does
    store.close()
    close_all()
    bench_cli_search(profile, n)


def bench_index_load(profile: AgentProfile, n: int) -> None:
    """``store.index_load_s``: what a new process pays for its recall index when the file beside the store is current
    (read, checked, the kernel rebuilt from it), against ``store.index_build_s`` from the rows. Measured in this
    process on a connection of its own, so imports are not counted."""
    conn = StoreConnection(profile.store_path, profile.store_lock_path, timeout_s=60)
    memories = MemoryStore(conn, dream_options())
    t, c = time.perf_counter(), time.process_time()
    recall.prepare(memories)
    emit("store.index_load_s", n, time.perf_counter() - t, "s")
    emit("store.index_load_cpu_s", n, time.process_time() - c, "s")
    conn.close()


def bench_cli_search(profile: AgentProfile, n: int, runs: int = 5) -> None:
    """``store.cli_search_s``: the wall time of `dream memory search` from the shell, a new Python process each time
    (imports, loading the index file, the search, the output), median of ``runs`` after one untimed call;
    ``store.cli_search_cpu_s`` the same in CPU time."""
    queries = recall_queries(random.Random(17), runs + 1)
    wall, cpu = [], []
    # As from an install, whose modules are compiled once (pip writes their bytecode): the first call, untimed,
    # compiles them into a folder of this run's, whatever the environment says about writing bytecode.
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    env |= {"PYTHONPATH": str(Path(__file__).resolve().parents[1]), "PYTHONPYCACHEPREFIX": str(profile.root / "pyc")}
    for i, query in enumerate(queries):
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        t = time.perf_counter()
        done = subprocess.run(
            [sys.executable, "-m", "dream_assets.cli", "memory", "search", query, "--profile", str(profile.root)],
            capture_output=True,
            text=True,
            env=env,
        )
        elapsed = time.perf_counter() - t
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        if done.returncode not in (0, 1):
            raise RuntimeError(f"dream memory search failed: {done.stderr}")
        if i:
            wall.append(elapsed)
            cpu.append(after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime)
    emit("store.cli_search_s", n, statistics.median(wall), "s")
    emit("store.cli_search_cpu_s", n, statistics.median(cpu), "s")


def _scan(root: str, queue: mp.Queue) -> None:
    store = open_store(AgentProfile(root), dream_options())
    t = time.perf_counter()
    result = store.memories.duplicate_clusters()
    elapsed = time.perf_counter() - t
    peak_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    queue.put((elapsed, peak_mb, result.method, len(result.clusters)))


def bench_scan(profile: AgentProfile, n: int) -> None:
    ctx = mp.get_context("spawn")
    queue: mp.Queue = ctx.Queue()
    proc = ctx.Process(target=_scan, args=(str(profile.root), queue))
    proc.start()
    elapsed, peak_mb, method, clusters = queue.get(timeout=600)
    proc.join()
    emit("store.dup_scan_s", n, elapsed, "s")
    emit("store.dup_scan_peak_mb", n, peak_mb, "MB")  # peak RSS of the whole scanning process


def _agent(root: str, seconds: float, ready, queue) -> None:
    """Saves 20 times a second for ``seconds``; sends back every save's latency."""
    store = open_store(AgentProfile(root), dream_options())
    recall.search(store.memories, "warm up the index")
    rng = random.Random(11)
    ready.set()
    latencies = []
    tick = end = time.monotonic()
    end += seconds
    i = 0
    while time.monotonic() < end:
        t = time.perf_counter()
        save_memory(store.memories, incoming(rng, 100_000 + i), category="notes", now=NOW + timedelta(seconds=i))
        latencies.append(time.perf_counter() - t)
        i += 1
        tick += 0.05
        time.sleep(max(0.0, tick - time.monotonic()))
    store.close()
    queue.put(latencies)


def bench_fair_access(profile: AgentProfile, n: int, seconds: float) -> None:
    ctx = mp.get_context("spawn")
    ready, queue = ctx.Event(), ctx.Queue()
    agent = ctx.Process(target=_agent, args=(str(profile.root), seconds, ready, queue))
    agent.start()
    if not ready.wait(120):
        raise RuntimeError("the agent process did not start")
    store = open_store(profile, dream_options())
    waits = []
    step = 0
    end = time.monotonic() + seconds - 1.0
    while time.monotonic() < end:
        live = store.memories.list_live()
        waits.append(store.connection.last_wait_s)
        time.sleep(0.05)  # the pass thinks (a model call, a scan) without the store
        entry = live[step % len(live)]
        with store.transaction():
            waits.append(store.connection.last_wait_s)
            merged = store.memories.put(entry.with_(id=f"bench-merge-{step}", created_at=NOW, updated_at=NOW))
            store.changes.record(
                ChangeRow(
                    cycle_id="bench",
                    pass_name="memory_consolidation",
                    kind="created",
                    target_type="memory",
                    target_id=merged.id,
                    before=None,
                    after=merged,
                    reason="benchmark",
                ),
                now=NOW,
            )
        step += 1
        time.sleep(0.1)
    store.close()
    latencies = queue.get(timeout=120)
    agent.join(60)
    emit("store.pass_wait_p99_s", n, _p99(waits), "s")
    emit("store.pass_wait_max_s", n, max(waits), "s")
    emit("store.pass_sessions", n, len(waits), "count")
    emit("store.save_under_cycle_p99_ms", n, _p99(latencies) * 1000, "ms")
    emit("store.save_under_cycle_p50_ms", n, statistics.median(latencies) * 1000, "ms")
    emit("store.saves_under_cycle", n, len(latencies), "count")


def _created_cycle(store, cycle: str, k: int) -> None:
    """A cycle that created ``k`` entries, each with its change-log row (what an undo puts back, one target each)."""
    live = store.memories.list_live()[:k]
    with store.transaction():
        for i, entry in enumerate(live):
            made = store.memories.put(entry.with_(id=f"{cycle}-{i}", created_at=NOW, updated_at=NOW))
            store.changes.record(
                ChangeRow(
                    cycle_id=cycle,
                    pass_name="memory_consolidation",
                    kind="created",
                    target_type="memory",
                    target_id=made.id,
                    before=None,
                    after=made,
                    reason="benchmark",
                ),
                now=NOW,
            )


def bench_undo_under_saves(profile: AgentProfile, n: int, targets: int = 300) -> None:
    """The undo of a cycle of ``targets`` changes alone, then while an agent saves 20 times a second:
    ``store.undo_under_saves_ratio`` is the second over the first (target: a small factor, not one turn per target)."""
    store = open_store(profile, dream_options())
    _created_cycle(store, "undo-alone", targets)
    t = time.perf_counter()
    assert store.changes.undo_cycle("undo-alone", now=NOW + timedelta(hours=1)).ok
    alone = time.perf_counter() - t
    _created_cycle(store, "undo-busy", targets)
    store.close()
    ctx = mp.get_context("spawn")
    ready, queue = ctx.Event(), ctx.Queue()
    agent = ctx.Process(target=_agent, args=(str(profile.root), max(10.0, 20 * alone + 5), ready, queue))
    agent.start()
    if not ready.wait(120):
        raise RuntimeError("the agent process did not start")
    time.sleep(0.5)
    store = open_store(profile, dream_options())
    t = time.perf_counter()
    assert store.changes.undo_cycle("undo-busy", now=NOW + timedelta(hours=2)).ok
    busy = time.perf_counter() - t
    store.close()
    queue.get(timeout=300)
    agent.join(60)
    emit("store.undo_alone_s", targets, alone, "s")
    emit("store.undo_under_saves_s", targets, busy, "s")
    emit("store.undo_under_saves_ratio", targets, busy / alone if alone else 0.0, "ratio")


#: The synthetic embedding model of the dense search figures: random unit vectors of this size, one per live text.
DENSE_MODEL, DENSE_DIM = "synthetic-random", 384


def bench_dense(profile: AgentProfile, n: int, queries: int = 20) -> None:
    """The dense half of a fused search (recall_fusion.py) at ``n`` live entries with random unit vectors of
    ``DENSE_DIM`` (no endpoint: the vectors are put in the embeddings table): today's SQL join, the one-off build of
    the kept matrix (dense_index.py) and a search with it, and whether both rank the same."""
    from dream_assets import dense_index
    from dream_assets.recall_fusion import FUSION_DEPTH
    from dream_assets.store.embeddings import EmbeddingCache

    store = open_store(profile, dream_options())
    cache = EmbeddingCache(store.connection)
    with store.connection.transaction() as db:
        db.execute("SELECT setseed(0.25)")
        db.execute(
            "INSERT OR IGNORE INTO embeddings SELECT h, ?, ?, "
            "list_transform(v, lambda x: x / sqrt(list_dot_product(v, v)))::FLOAT[], now()::TIMESTAMP FROM "
            f"(SELECT h, list_transform(range({DENSE_DIM}), lambda i: random() - 0.5) AS v "
            "FROM (SELECT DISTINCT sha256(content) AS h FROM memories))",
            [DENSE_MODEL, DENSE_DIM],
        )
    rng = np.random.default_rng(n)
    vectors = rng.standard_normal((queries, DENSE_DIM)).astype(np.float32)
    vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)

    def sql(q: np.ndarray) -> list[tuple[str, float]]:
        return cache.nearest_live(DENSE_MODEL, q, limit=FUSION_DEPTH)

    def kept(q: np.ndarray) -> list[tuple[str, float]]:
        found, path = dense_index.nearest_live(cache, DENSE_MODEL, q, limit=FUSION_DEPTH)
        assert path == dense_index.KEPT, path
        return found

    sql_ms = [_ms(sql, q) for q in vectors[: max(3, queries // 2)]]
    first, path = dense_index.nearest_live(cache, DENSE_MODEL, vectors[0], limit=FUSION_DEPTH)  # the first: SQL
    assert path == dense_index.SQL, path
    store.connection.longest_hold = SessionHold()
    t = time.perf_counter()
    kept(vectors[0])
    emit("store.dense_build_s", n, time.perf_counter() - t, "s")
    emit("store.dense_build_hold_ms", n, store.connection.longest_hold.wall_s * 1000, "ms")
    kept_ms = [_ms(kept, q) for q in vectors]
    emit("store.dense_search_sql_ms", n, statistics.median(sql_ms), "ms")
    emit("store.dense_search_ms", n, statistics.median(kept_ms), "ms")
    same, worst = 0, 0.0
    for q in vectors:
        a, b = sql(q), kept(q)
        same += [i for i, _ in a] == [i for i, _ in b]
        worst = max(worst, max(abs(x - y) for (_, x), (_, y) in zip(a, b, strict=True)))
    emit("store.dense_same_ranking", n, same / len(vectors), "fraction")
    emit("store.dense_cosine_max_diff", n, worst, "cosine")
    emit("store.dense_memory_mb", n, dense_index.footprint(store.connection) / 1e6, "MB")
    store.close()


def _ms(call: Callable[[np.ndarray], object], q: np.ndarray) -> float:
    t = time.perf_counter()
    call(q)
    return (time.perf_counter() - t) * 1000


def _corpus_copy(kept: Path, tmp: Path, n: int) -> AgentProfile:
    """A copy in ``tmp`` of the corpus of ``n`` entries kept in ``kept`` (built there first when missing)."""
    source = kept / f"bench-{n}"
    if not (source / "store.duckdb").exists():
        shutil.rmtree(source, ignore_errors=True)
        build(kept, n)
        close_all()
    target = tmp / source.name
    shutil.copytree(source, target)
    return AgentProfile(target)


def _p99(values: list[float]) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(round(0.99 * (len(ordered) - 1))))]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="only n = 10,000")
    parser.add_argument("--n", type=int, default=100_000, help="the larger corpus size; the smaller is 3/10 of it")
    parser.add_argument(
        "--only",
        choices=["save-recall", "dense"],
        help="run only this part (save-recall: no scan, no fair access; dense: the dense search, at --n only)",
    )
    parser.add_argument(
        "--corpus-dir",
        type=Path,
        help="keep the built corpora here and reuse them: each run works on a copy, never on the kept one",
    )
    args = parser.parse_args()
    sizes = [10_000] if args.quick else [args.n * 3 // 10, args.n]
    if args.only == "dense" and not args.quick:
        sizes = [args.n]
    everything = args.only is None
    with tempfile.TemporaryDirectory() as tmp:
        if everything and not args.quick:
            fair = build(Path(tmp), 10_000)
            bench_fair_access(fair, 10_000, seconds=30)
            bench_undo_under_saves(fair, 10_000)
        for n in sizes:
            profile = _corpus_copy(args.corpus_dir, Path(tmp), n) if args.corpus_dir else build(Path(tmp), n)
            if everything:
                bench_scan(profile, n)
            if args.only != "dense":
                bench_save_and_recall(profile, n)
            if args.only in (None, "dense"):
                bench_dense(profile, n)
            if everything and args.quick:
                bench_fair_access(profile, n, seconds=15)
                bench_undo_under_saves(profile, n)
            shutil.rmtree(profile.root, ignore_errors=True)


if __name__ == "__main__":
    main()
