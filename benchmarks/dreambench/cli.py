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
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from . import scenario as scenario_mod
from .adapters import ADAPTERS, Unavailable, create
from .runner import FINAL, Result, run

SEED = 20240809
#: The sizes of the year: LoCoMo conversations (``per_speaker``: the first observations of each speaker a session
#: only), HaluMem people, small talk a day (``noise``), the share of the year with saves, days between consolidations.
QUICK = {"conversations": "conv-26", "profiles": 5, "every": 7}
#: ``--quick`` with a model endpoint: a year a small local model finishes in about 25 minutes with dream_assets and
#: llm_rewrite (Qwen2.5-Coder-1.5B on 2 CPU cores, about 15 tokens a second all in). Three consolidations, the last
#: idle: dream_assets sends about 10,500 prompt tokens over the year and llm_rewrite about 7,400 and is answered about
#: as much (the memory file sent and given back, at most 2,900 tokens; docs/dreambench-local-model.md).
QUICK_MODEL = {
    "conversations": "conv-26",
    "per_speaker": 1,
    "profiles": 1,
    "noise": 0.02,
    "save_share": 0.6,
    "every": 120,
}
FULL = {"conversations": "conv-26,conv-30,conv-41,conv-42", "profiles": 20, "every": 7}
#: The adapters that call a model when ``DREAM__LlmBaseUrl`` names an endpoint.
MODEL_ADAPTERS = ("dream_assets", "llm_rewrite", "mem0")
UNITS = {name: unit for name, unit, _ in FINAL} | {"tokens_total": "tokens", "seconds": "s"}
PER_CYCLE_UNITS = {"tokens": "tokens", "prompt_tokens_estimate": "tokens", "reversible": "fraction", **UNITS}


def emit(name: str, n: int, value: float, unit: str, **extra: object) -> None:
    """One JSON line; a share of nothing (n = 0) has the value null."""
    number = None if math.isnan(value) else round(float(value), 4)
    print(json.dumps({"name": name, "n": int(n), "value": number, "unit": unit, **extra}), flush=True)


def seed_ids(seed: int) -> None:
    """Entry ids from a seeded generator instead of the system's: search breaks ties by id, so with random ids a
    figure can move by an item from run to run; seeded, every figure repeats."""
    rng = random.Random(f"{seed}:ids")
    uuid.uuid4 = lambda: uuid.UUID(int=rng.getrandbits(128), version=4)  # type: ignore[assignment]


def year_size(quick: str | None, adapters: Sequence[str], env: Mapping[str, str]) -> dict[str, Any]:
    """The size of the year: ``FULL`` without ``--quick``; ``QUICK_MODEL`` for ``--quick model``, and for ``--quick``
    when ``DREAM__LlmBaseUrl`` names an endpoint and one of ``adapters`` calls a model; else ``QUICK``."""
    if not quick:
        return FULL
    if quick == "model" or (
        quick == "auto"
        and env.get("DREAM__LlmBaseUrl", "").strip()
        and any(name in MODEL_ADAPTERS for name in adapters)
    ):
        return QUICK_MODEL
    return QUICK


def memory_file_tokens(year: scenario_mod.Scenario) -> list[int]:
    """At each consolidation, the estimated tokens (three bytes a token) of a memory file holding every save so far,
    one line each: what a whole-file rewrite (``llm_rewrite``) is sent, and about what it answers, when no earlier
    rewrite shortened it."""
    sizes, size, saves = [], 0, iter(year.saves)
    pending = next(saves, None)
    for at in year.consolidations:
        while pending is not None and pending.at <= at:
            size += len(f"- {' '.join(pending.text.split())}\n".encode())
            pending = next(saves, None)
        sizes.append(math.ceil(size / 3))
    return sizes


def prompt_sizes(adapter: object) -> dict[str, tuple[int, int]]:
    """Per model call kind of an adapter that sizes its prompts (``prompts``): (calls, estimated prompt tokens)."""
    out: dict[str, tuple[int, int]] = {}
    for call, size in getattr(adapter, "prompts", []):
        calls, tokens = out.get(call, (0, 0))
        out[call] = (calls + 1, tokens + size)
    return out


def parse(argv: Sequence[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        prog="dreambench",
        description="A scripted year of public data through memory systems, scored for what each consolidation "
        "loses, merges wrongly, keeps stale and can give back (benchmarks/dreambench/README.md).",
    )
    p.add_argument(
        "--quick",
        nargs="?",
        const="auto",
        choices=("auto", "offline", "model"),
        help="a small year: offline, one LoCoMo conversation and 5 HaluMem people with 52 consolidations (minutes); "
        "model, a year a small local model finishes in about 25 minutes (a slice of the conversation, one person, 3 "
        "consolidations); auto (the default): model when DREAM__LlmBaseUrl is set and a model-based adapter is run",
    )
    p.add_argument("--adapters", default=",".join(ADAPTERS), help=f"comma-separated, of {', '.join(ADAPTERS)}")
    p.add_argument(
        "--data", default=None, help="the shared eval-data folder (default: DREAM_EVAL_DATA, else ../shared/eval-data)"
    )
    p.add_argument("--conversations", default=None, help="LoCoMo sample ids, comma-separated")
    p.add_argument("--profiles", type=int, default=None, help="HaluMem people (of 20)")
    p.add_argument(
        "--every", type=int, default=None, help="days between consolidations (default 7; 120 for a model quick)"
    )
    p.add_argument(
        "--per-speaker", type=int, default=None, help="LoCoMo observations of each speaker a session (default all)"
    )
    p.add_argument("--noise", type=float, default=None, help="chance of a line of small talk a day (default 0.4)")
    p.add_argument(
        "--save-share", type=float, default=None, help="share of the year with saves; the rest is idle (default 0.85)"
    )
    p.add_argument(
        "--lookalike-share",
        type=float,
        default=None,
        help="share of LoCoMo observations not re-observed that are followed by distinct events reading alike "
        "(default 0.1)",
    )
    p.add_argument("--seed", type=int, default=SEED)
    p.add_argument("--final-only", action="store_true", help="print the end-of-year lines only, not each cycle's")
    p.add_argument(
        "--page", default=None, help="write the results page here (e.g. docs/dreambench.md) and its PNGs beside it"
    )
    p.add_argument("--examples", type=int, default=3, help="examples of each shortfall printed on stderr")
    return p.parse_args(list(argv) if argv is not None else None)


def _year(args: argparse.Namespace, size: dict[str, Any]) -> scenario_mod.Scenario:
    """The year the options ask for (``ValueError`` for a size out of range)."""
    return scenario_mod.build(
        scenario_mod.eval_data(args.data),
        conversations=[c.strip() for c in (args.conversations or size["conversations"]).split(",") if c.strip()],
        profiles=args.profiles if args.profiles is not None else size["profiles"],
        every=args.every if args.every is not None else size["every"],
        noise_per_day=args.noise if args.noise is not None else size.get("noise", scenario_mod.NOISE_PER_DAY),
        per_speaker=args.per_speaker if args.per_speaker is not None else size.get("per_speaker"),
        save_share=args.save_share if args.save_share is not None else size.get("save_share", scenario_mod.SAVE_SHARE),
        lookalike_share=args.lookalike_share
        if args.lookalike_share is not None
        else size.get("lookalike_share", scenario_mod.LOOKALIKE_SHARE),
        seed=args.seed,
    )


def main(argv: Sequence[str] | None = None) -> int:
    args = parse(argv)
    logging.disable(logging.WARNING)
    seed_ids(args.seed)
    names = [a.strip() for a in args.adapters.split(",") if a.strip()]
    size = year_size(args.quick, names, os.environ)
    if size is QUICK_MODEL:
        print(
            f"dreambench: --quick for a model: a year a small local model finishes ({size['conversations']}, "
            f"{size['per_speaker']} observation of each speaker a session, {size['profiles']} person, "
            f"a consolidation every {size['every']} days; --quick offline for the offline one)",
            file=sys.stderr,
        )
    unknown = [a for a in names if a not in ADAPTERS]
    if unknown:
        print(
            f"dreambench: --adapters: no adapter {', '.join(unknown)} (there are {', '.join(ADAPTERS)})",
            file=sys.stderr,
        )
        return 2
    try:
        year = _year(args, size)
    except ValueError as exc:  # a size option out of range: said as the option's problem, not a traceback
        print(f"dreambench: {exc}", file=sys.stderr)
        return 2
    summary = year.summary()
    for key, value in summary.items():
        emit(f"dreambench.scenario.{key}", summary["saves"], value, "count")
    files = memory_file_tokens(year)
    emit("dreambench.scenario.memory_file_tokens", len(files), sum(files), "tokens")
    if not args.final_only:
        for n, (at, file_tokens) in enumerate(zip(year.consolidations, files, strict=True), 1):
            day = (at - scenario_mod.START).days
            emit("dreambench.scenario.cycle.memory_file_tokens", n, file_tokens, "tokens", day=day)
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
            for call, (calls, tokens) in sorted(prompt_sizes(adapter).items()):
                emit(f"dreambench.{name}.prompt_tokens_estimate.{call}", calls, tokens, "tokens")
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
