"""Worker processes for the benchmarks: a job list mapped over spawned processes that ends, with a clear error, when a
worker dies, instead of waiting for ever (``multiprocessing.Pool.map`` waits for ever on a dead worker while the
others sit on whatever they hold)."""

from __future__ import annotations

import multiprocessing as mp
from collections.abc import Callable, Sequence
from concurrent.futures import ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from typing import Any


class WorkerDied(RuntimeError):
    """A worker process ended without returning (killed, out of memory, a crash in native code)."""


def spawn_pool(workers: int) -> ProcessPoolExecutor:
    """``workers`` spawned processes (no state forked from the parent: its open stores and instances stay its own)."""
    return ProcessPoolExecutor(max_workers=workers, mp_context=mp.get_context("spawn"))


def map_in_workers(pool: ProcessPoolExecutor, fn: Callable[[Any], Any], jobs: Sequence[Any]) -> list[Any]:
    """``[fn(job) for job in jobs]`` in ``pool``'s processes, in order. When a worker dies, every other worker is
    stopped (the pool terminates them) and ``WorkerDied`` names the function and the jobs it did not finish."""
    futures = [pool.submit(fn, job) for job in jobs]
    results: list[Any] = []
    try:
        for future in futures:
            results.append(future.result())
    except BrokenProcessPool as exc:
        for future in futures:
            future.cancel()
        raise WorkerDied(
            f"a worker process died while running {fn.__name__} ({len(jobs) - len(results)} of {len(jobs)} jobs "
            f"unfinished; the other workers were stopped): {exc}"
        ) from None
    return results
