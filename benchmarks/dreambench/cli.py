"""The command line: builds the year, runs each adapter, prints one JSON object per line, and with ``--page`` writes
the results page and its plots."""

from __future__ import annotations

import argparse
import json
import logging
import math
import os
import random
import shlex
import sys
import tempfile
import time
import uuid
from collections.abc import Sequence
from pathlib import Path

from . import scenario as scenario_mod
from .adapters import ADAPTERS, Unavailable, create
from .runner import FINAL, Result, run

SEED = 20240809
QUICK = {"conversations": "conv-26", "profiles": 5}
FULL = {"conversations": "conv-26,conv-30,conv-41,conv-42", "profiles": 20}
UNITS = {name: unit for name, unit, _ in FINAL} | {"tokens_total": "tokens", "seconds": "s"}
PER_CYCLE_UNITS = {"tokens": "tokens", "reversible": "fraction", **UNITS}


def emit(name: str, n: int, value: float, unit: str, **extra: object) -> None:
    """One JSON line; a share of nothing (n = 0) has the value null."""
    number = None if math.isnan(value) else round(float(value), 4)
    print(json.dumps({"name": name, "n": int(n), "value": number, "unit": unit, **extra}), flush=True)


def seed_ids(seed: int) -> None:
    """Entry ids from a seeded generator instead of the system's: search breaks ties by id, so with random ids a
    figure can move by an item from run to run; seeded, every figure repeats."""
    rng = random.Random(f"{seed}:ids")
    uuid.uuid4 = lambda: uuid.UUID(int=rng.getrandbits(128), version=4)  # type: ignore[assignment]


def parse(argv: Sequence[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        prog="dreambench",
        description="A scripted year of public data through memory systems, scored for what each consolidation "
        "loses, merges wrongly, keeps stale and can give back (benchmarks/dreambench/README.md).",
    )
    p.add_argument("--quick", action="store_true", help="one LoCoMo conversation and 5 HaluMem people (minutes)")
    p.add_argument("--adapters", default=",".join(ADAPTERS), help=f"comma-separated, of {', '.join(ADAPTERS)}")
    p.add_argument(
        "--data", default=None, help="the shared eval-data folder (default: DREAM_EVAL_DATA, else ../shared/eval-data)"
    )
    p.add_argument("--conversations", default=None, help="LoCoMo sample ids, comma-separated")
    p.add_argument("--profiles", type=int, default=None, help="HaluMem people (of 20)")
    p.add_argument("--every", type=int, default=7, help="days between consolidations (default 7)")
    p.add_argument("--seed", type=int, default=SEED)
    p.add_argument("--final-only", action="store_true", help="print the end-of-year lines only, not each cycle's")
    p.add_argument(
        "--page", default=None, help="write the results page here (e.g. docs/dreambench.md) and its PNGs beside it"
    )
    p.add_argument("--examples", type=int, default=3, help="examples of each shortfall printed on stderr")
    return p.parse_args(list(argv) if argv is not None else None)


def main(argv: Sequence[str] | None = None) -> int:
    args = parse(argv)
    logging.disable(logging.WARNING)
    seed_ids(args.seed)
    size = QUICK if args.quick else FULL
    names = [a.strip() for a in args.adapters.split(",") if a.strip()]
    unknown = [a for a in names if a not in ADAPTERS]
    if unknown:
        print(
            f"dreambench: --adapters: no adapter {', '.join(unknown)} (there are {', '.join(ADAPTERS)})",
            file=sys.stderr,
        )
        return 2
    year = scenario_mod.build(
        scenario_mod.eval_data(args.data),
        conversations=[c.strip() for c in (args.conversations or size["conversations"]).split(",") if c.strip()],
        profiles=args.profiles if args.profiles is not None else size["profiles"],
        every=args.every,
        seed=args.seed,
    )
    summary = year.summary()
    for key, value in summary.items():
        emit(f"dreambench.scenario.{key}", summary["saves"], value, "count")
    results: list[Result] = []
    unavailable: dict[str, str] = {}
    with tempfile.TemporaryDirectory(prefix="dreambench-") as tmp:
        for name in names:
            try:
                adapter = create(name, root=Path(tmp), env=dict(os.environ))
            except Unavailable as exc:
                unavailable[name] = str(exc)
                print(f"dreambench: {name} unavailable: {exc}", file=sys.stderr)
                emit(f"dreambench.{name}.available", 0, 0, "bool")
                continue
            emit(f"dreambench.{name}.available", 1, 1, "bool")

            def per_cycle(row: dict, _snap: object, name: str = name) -> None:
                if args.final_only:
                    return
                for metric, value in row.items():
                    if metric in PER_CYCLE_UNITS and not isinstance(value, bool) and not math.isnan(value):
                        emit(
                            f"dreambench.{name}.cycle.{metric}",
                            row["cycle"],
                            value,
                            PER_CYCLE_UNITS[metric],
                            day=row["day"],
                        )

            try:
                result = run(year, adapter, on_cycle=per_cycle)
            finally:
                adapter.close()
            results.append(result)
            for metric, (value, n) in result.final.items():
                emit(f"dreambench.{name}.{metric}", n, value, UNITS.get(metric, "count"))
            for metric, items in result.examples.items():
                for item in items[: args.examples]:
                    print(f"example: {name}: {metric}: {item[:500]}", file=sys.stderr)
            for failure in result.failures[: args.examples]:
                print(f"failure: {name}: {failure[:500]}", file=sys.stderr)
    if args.page:
        from .page import write_page

        command = "python benchmarks/dreambench " + " ".join(
            shlex.quote(a) for a in (argv if argv is not None else sys.argv[1:])
        )
        write_page(
            Path(args.page),
            year,
            results,
            unavailable,
            command=command,
            when=time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        )
        print(f"dreambench: wrote {args.page}", file=sys.stderr)
    return 0
