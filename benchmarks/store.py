"""Store benchmarks. Prints one JSON object per line: {"name", "n", "value", "unit"}.

    python benchmarks/store.py          # n = 10,000 and 100,000
    python benchmarks/store.py --quick  # n = 10,000 only

Targets on a 2-core machine: save (with dedup) p50 <= 10 ms, recall p50 <= 20 ms, duplicate scan of 100k <= 20 s in
<= 2 GB, corpus fingerprint <= 500 ms.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import random
import resource
import statistics
import sys
import tempfile
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from dream_assets.demo import PEOPLE, PLACES, PROJECTS, TOOLS, TOPICS, _memories  # noqa: E402
from dream_assets.options import DreamOptions  # noqa: E402
from dream_assets.profile import AgentProfile  # noqa: E402
from dream_assets.store import open_store  # noqa: E402

NOW = datetime(2026, 11, 30, tzinfo=UTC)


def emit(name: str, n: int, value: float, unit: str) -> None:
    print(json.dumps({"name": name, "n": n, "value": round(value, 3), "unit": unit}), flush=True)


def build(root: Path, n: int) -> AgentProfile:
    profile = AgentProfile(root / f"bench-{n}").ensure()
    store = open_store(profile, DreamOptions())
    rng = random.Random(n)
    store.memories.put_many(_memories(rng, NOW, n))
    return profile


def incoming(rng: random.Random, i: int) -> str:
    return (f"New note {i}: {rng.choice(PEOPLE)} asked about {rng.choice(TOOLS)} for {rng.choice(PROJECTS)} "
            f"during the {rng.choice(TOPICS)} in {rng.choice(PLACES)}, ticket {rng.randint(1000, 99999)}.")


def bench_save_and_recall(profile: AgentProfile, n: int, recall: bool) -> None:
    store = open_store(profile, DreamOptions())
    store.memories.search("warm up the index")  # first use builds the in-process index; not part of a save
    rng = random.Random(7)
    times = []
    for i in range(300):
        text = incoming(rng, i)
        t = time.perf_counter()
        store.memories.save(text, category="notes", now=NOW + timedelta(seconds=i))
        times.append(time.perf_counter() - t)
    emit("store.save_p50_ms", n, statistics.median(times) * 1000, "ms")
    if recall:
        queries = [f"{rng.choice(PEOPLE).split()[0]} {rng.choice(TOOLS)} {rng.choice(TOPICS)}" for _ in range(300)]
        times = []
        for q in queries:
            t = time.perf_counter()
            store.memories.search(q, limit=10)
            times.append(time.perf_counter() - t)
        emit("store.recall_p50_ms", n, statistics.median(times) * 1000, "ms")
        times = []
        for _ in range(5):
            t = time.perf_counter()
            store.memories.fingerprint()
            times.append(time.perf_counter() - t)
        emit("store.fingerprint_ms", n, statistics.median(times) * 1000, "ms")
    store.close()


def _scan(root: str, queue: mp.Queue) -> None:
    store = open_store(AgentProfile(root), DreamOptions())
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


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--quick", action="store_true", help="only n = 10,000")
    args = parser.parse_args()
    sizes = [10_000] if args.quick else [10_000, 100_000]
    with tempfile.TemporaryDirectory() as tmp:
        for n in sizes:
            profile = build(Path(tmp), n)
            bench_scan(profile, n)
            bench_save_and_recall(profile, n, recall=(n == sizes[-1]))


if __name__ == "__main__":
    main()
