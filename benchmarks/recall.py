"""The recall index side by side with tantivy. Prints one JSON object per line: {"name", "n", "value", "unit"}.

    pip install tantivy                          # the comparison's only extra dependency (benchmark-only)
    .venv/bin/python benchmarks/recall.py        # n = 100,000, 300,000 and 1,000,000
    .venv/bin/python benchmarks/recall.py --sizes 100000,1000000
    .venv/bin/python benchmarks/recall.py --quick  # n = 3,000: a smoke run
    .venv/bin/python benchmarks/recall.py --random-ids  # ids as a store makes them (uuid4 hex), not ascending

Both engines index the corpus and queries of ``benchmarks/store.py`` as the same BM25 tokens (tantivy gets our tokens
joined by spaces and splits them with its whitespace tokenizer), k1 1.2, b 0.75, one indexing thread. Each engine runs
in a process of its own forked from one that holds the corpus, so its memory figure is what the process grew by
building the index. Times are CPU time of that process; a p50 is the median of ``--repeat`` rounds' medians, a build
the median of ``--repeat`` builds.

Per n: ``recall.query_p50_ratio`` (a recall: top 10 of a first name, a tool and a topic), ``recall.lookup_p50_ratio``
(a save's duplicate lookup: top 20 of the incoming text's content words), ``recall.build_ratio`` and
``recall.memory_ratio``, all ours / tantivy, then ``recall.add_1000_s`` (1,000 new entries added to the built index)
and ``recall.save_visible_ms`` (one entry added and made searchable, then a lookup), and the raw figures of both
engines as ``recall.ours.*`` and ``recall.tantivy.*``. Without tantivy the ratios are left out and only our figures
are printed. Targets at 1,000,000 entries: every ratio <= 1.0 except build <= 1.5, add_1000_s <= 0.1 s,
save_visible_ms <= 2 ms at 100,000.
"""

from __future__ import annotations

import argparse
import ctypes
import gc
import json
import multiprocessing as mp
import os
import random
import statistics
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.store import corpus, incoming, recall_queries  # noqa: E402
from dream_assets.text.bm25 import Bm25Index  # noqa: E402
from dream_assets.text.similarity import unframed  # noqa: E402
from dream_assets.text.tokens import content_token_list, document_tokens, tokenize  # noqa: E402

try:
    import tantivy
except ImportError:  # the comparison is optional: our own figures are printed either way
    tantivy = None


def emit(name: str, n: int, value: float, unit: str) -> None:
    print(json.dumps({"name": name, "n": n, "value": round(value, 4), "unit": unit}), flush=True)


@dataclass
class Workload:
    ids: list[str]
    docs: list[list[str]]
    recalls: list[list[str]]
    lookups: list[list[str]]
    new_ids: list[str]
    new_docs: list[list[str]]


def workload(n: int, queries: int, repeat: int, random_ids: bool = False) -> Workload:
    live = [e for e in corpus(n) if e.archived_at is None]
    if random_ids:  # a store's ids are uuid4 hex in no order; the corpus's own ascend with the rows
        id_rng = random.Random(n)
        live = [e.with_(id=f"{id_rng.getrandbits(128):032x}") for e in live]
    rng = random.Random(7)
    recalls = [tokenize(q) for q in recall_queries(rng, queries)]
    lookups = [content_token_list(unframed(incoming(rng, i))) for i in range(queries)]
    new_texts = [incoming(rng, queries + i) for i in range(1000 * repeat + 100)]
    return Workload(
        ids=[e.id for e in live],
        docs=[document_tokens(e.content, e.category, e.tags) for e in live],
        recalls=recalls,
        lookups=lookups,
        new_ids=[f"new-{i:06d}" for i in range(len(new_texts))],
        new_docs=[document_tokens(text, "notes", ()) for text in new_texts],
    )


def _rss_bytes() -> int:
    gc.collect()
    try:
        ctypes.CDLL("libc.so.6").malloc_trim(0)  # hand freed heap back, so the figure is what is still held
    except OSError:
        pass
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


class Engine:
    """One engine's build, search and add, as the benchmark drives them."""

    def build(self, ids: Sequence[str], docs: Sequence[Sequence[str]]) -> None:
        raise NotImplementedError

    def search(self, tokens: Sequence[str], limit: int) -> list:
        raise NotImplementedError

    def add(self, ids: Sequence[str], docs: Sequence[Sequence[str]]) -> None:
        """Add the entries and make them searchable."""
        raise NotImplementedError

    def drop(self) -> None:
        raise NotImplementedError


class Ours(Engine):
    def build(self, ids, docs):
        self.index = Bm25Index()
        self.index.add_many(ids, docs)

    def search(self, tokens, limit):
        return self.index.search(tokens, limit)

    def add(self, ids, docs):
        for doc_id, tokens in zip(ids, docs, strict=True):
            self.index.add(doc_id, tokens)

    def drop(self):
        self.index = None


class Tantivy(Engine):
    """tantivy in RAM: our tokens joined by spaces under its whitespace tokenizer; a search returns the hits' ids."""

    def __init__(self, bodies: dict[int, str]) -> None:
        self.bodies = bodies  # id(token list) -> its tokens joined, made before any timing

    def build(self, ids, docs):
        builder = tantivy.SchemaBuilder()
        builder.add_text_field("body", stored=False, tokenizer_name="whitespace", index_option="freq")
        builder.add_text_field("id", stored=True, tokenizer_name="raw")
        self.schema = builder.build()
        self.index = tantivy.Index(self.schema)
        self.writer = self.index.writer(heap_size=64_000_000, num_threads=1)
        self._write(ids, docs)

    def _write(self, ids, docs):
        bodies, document = self.bodies, tantivy.Document
        for doc_id, tokens in zip(ids, docs, strict=True):
            self.writer.add_document(document(id=doc_id, body=bodies.get(id(tokens)) or " ".join(tokens)))
        self.writer.commit()
        self.index.reload()
        self.searcher = self.index.searcher()

    def search(self, tokens, limit):
        schema, term, should = self.schema, tantivy.Query.term_query, tantivy.Occur.Should
        query = tantivy.Query.boolean_query([(should, term(schema, "body", t)) for t in dict.fromkeys(tokens)])
        searcher = self.searcher
        return [(searcher.doc(address)["id"][0], score) for score, address in searcher.search(query, limit).hits]

    def add(self, ids, docs):
        self._write(ids, docs)

    def drop(self):
        self.searcher = self.writer = self.index = None


def _p50(engine: Engine, queries: list[list[str]], limit: int, repeat: int) -> float:
    rounds = []
    for _ in range(repeat):
        times = []
        for tokens in queries:
            t = time.process_time()
            engine.search(tokens, limit)
            times.append(time.process_time() - t)
        rounds.append(statistics.median(times))
    return statistics.median(rounds)


def measure(engine: Engine, work: Workload, repeat: int) -> dict[str, float]:
    # Load what the engine loads on first use (libraries, not the index's memory).
    engine.build(work.ids[:100], work.docs[:100])
    engine.search(work.recalls[0], 10)
    engine.search(work.lookups[0], 20)
    engine.drop()
    before = _rss_bytes()
    t = time.process_time()
    engine.build(work.ids, work.docs)
    builds = [time.process_time() - t]
    engine.search(work.recalls[0], 10)  # what a first search allocates to stay is the index's too
    engine.search(work.lookups[0], 20)
    memory = _rss_bytes() - before
    for _ in range(repeat - 1):
        engine.drop()
        gc.collect()
        t = time.process_time()
        engine.build(work.ids, work.docs)
        builds.append(time.process_time() - t)
    out = {
        "build_s": statistics.median(builds),
        "memory_mb": memory / 2**20,
        "query_p50_ms": _p50(engine, work.recalls, 10, repeat) * 1000,
        "lookup_p50_ms": _p50(engine, work.lookups, 20, repeat) * 1000,
    }
    adds = []
    for r in range(repeat):
        chunk = slice(1000 * r, 1000 * (r + 1))
        t = time.process_time()
        engine.add(work.new_ids[chunk], work.new_docs[chunk])
        adds.append(time.process_time() - t)
    out["add_1000_s"] = statistics.median(adds)
    visible = []
    for i in range(1000 * repeat, len(work.new_ids)):
        t = time.process_time()
        engine.add(work.new_ids[i : i + 1], work.new_docs[i : i + 1])
        engine.search(work.lookups[i % len(work.lookups)], 20)
        visible.append(time.process_time() - t)
    out["save_visible_ms"] = statistics.median(visible) * 1000
    return out


def _child(make: Callable[[], Engine], work: Workload, repeat: int, conn) -> None:
    try:
        conn.send(measure(make(), work, repeat))
    except BaseException as exc:  # the parent reports the failure
        conn.send(f"{type(exc).__name__}: {exc}")
    finally:
        conn.close()


def run(make: Callable[[], Engine], work: Workload, repeat: int) -> dict[str, float]:
    """``measure`` in a forked process: it sees the corpus without copying it, and its growth is the index."""
    ctx = mp.get_context("fork")
    parent, child = ctx.Pipe(duplex=False)
    proc = ctx.Process(target=_child, args=(make, work, repeat, child))
    proc.start()
    child.close()
    result = parent.recv()
    proc.join()
    if isinstance(result, str):
        raise RuntimeError(f"benchmark engine failed: {result}")
    return result


UNITS = {"build_s": "s", "memory_mb": "MB", "query_p50_ms": "ms", "lookup_p50_ms": "ms", "add_1000_s": "s"}
UNITS["save_visible_ms"] = "ms"
RATIOS = {"query_p50_ratio": "query_p50_ms", "lookup_p50_ratio": "lookup_p50_ms", "build_ratio": "build_s"}
RATIOS["memory_ratio"] = "memory_mb"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", default="100000,300000,1000000", help="comma-separated corpus sizes")
    parser.add_argument("--quick", action="store_true", help="n = 3,000 and fewer queries: a smoke run")
    parser.add_argument("--repeat", type=int, default=3, help="rounds per figure (the median is reported)")
    parser.add_argument("--queries", type=int, default=300, help="queries per round, of each kind")
    parser.add_argument("--no-tantivy", action="store_true", help="only our own figures")
    parser.add_argument("--random-ids", action="store_true", help="uuid4-hex ids in no order, as a store's are")
    args = parser.parse_args()
    sizes = [3000] if args.quick else [int(s) for s in args.sizes.split(",") if s.strip()]
    queries = 40 if args.quick else args.queries
    compare = tantivy is not None and not args.no_tantivy
    if tantivy is None and not args.no_tantivy:
        print("tantivy is not installed (pip install tantivy): the comparison is left out", file=sys.stderr)
    for n in sizes:
        work = workload(n, queries, args.repeat, args.random_ids)
        ours = run(Ours, work, args.repeat)
        theirs = None
        if compare:
            bodies = {id(tokens): " ".join(tokens) for tokens in (*work.docs, *work.new_docs)}
            theirs = run(lambda bodies=bodies: Tantivy(bodies), work, args.repeat)
            del bodies
        for key, unit in UNITS.items():
            emit(f"recall.ours.{key}", n, ours[key], unit)
            if theirs is not None:
                emit(f"recall.tantivy.{key}", n, theirs[key], unit)
        if theirs is not None:
            for name, key in RATIOS.items():
                emit(f"recall.{name}", n, ours[key] / theirs[key] if theirs[key] > 0 else float("inf"), "ratio")
        emit("recall.add_1000_s", n, ours["add_1000_s"], "s")
        emit("recall.save_visible_ms", n, ours["save_visible_ms"], "ms")
        del work
        gc.collect()


if __name__ == "__main__":
    main()
