"""Real-model fit: prompts against the context window, calls needed for a first review, and parse failures of a
simulated small model with and without the contract's JSON schema.

    nice -n 10 .venv/bin/python benchmarks/models.py --quick   # 1,000 entries (CI: a test runs this)
    nice -n 10 .venv/bin/python benchmarks/models.py           # 1,000 and 100,000 entries (long)
    nice -n 10 .venv/bin/python benchmarks/models.py --entries 100000 --windows 32768,131072 --no-parse   # one of them

A first review plans all of a run's calls from one near-duplicate scan, so its cost grows with the corpus and the
merges, not with calls x corpus: 10,000 entries take about 70 s of CPU at an 8k window (185 calls); 100,000 about
230 s at a 32k window (338 calls) and 260 s at 128k (200 calls, ConsolidationMaxEntriesPerCall), none over the window.

A first review of a synthetic corpus (near-duplicate pairs among distinct entries) runs the real memory consolidation
pass, in its batch call shape (``ConsolidationCallShape = batch``: the shape whose plans the window bounds),
through the local OpenAI-compatible test server, whose window is ``LlmContextTokens`` (4k, 8k, 32k, 128k) and which
counts a request's tokens as four characters a token plus the answer reserve (``LlmMaxTokens``), the way a
real endpoint does. Figures, one JSON object per line:

- ``models.prompts_over_window`` (target 0): calls whose prompt exceeded the window less the answer reserve;
- ``models.largest_prompt_share``: the largest prompt plus reserve as a share of the window;
- ``models.first_review_calls``: calls the first review of the corpus needed (``LlmMaxCallsPerPass`` a run);
- ``models.parse_failure_rate.free_form`` / ``.json_schema``: the share of answers of a small model that corrupts a
  third of its free-form answers (prose around a cut-off object) that fail to parse, without and with the schema;
- ``models.dense_tokenizer.prompts_over_window`` (``counted`` = ``estimate`` or ``tokenize``; target 0 with
  ``tokenize``): a first review at a 4k window against a server whose tokenizer packs 2.1 bytes a token (Qwen on text
  full of ids), counting with the uncalibrated estimate (no ``/tokenize``) or with the server's own ``/tokenize``;
  ``models.dense_tokenizer.seconds`` what each took, ``models.dense_tokenizer.tokenize_requests`` the counts asked.
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
import tempfile
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from dream_assets.llm.client import build_model_client  # noqa: E402
from dream_assets.options_loader import dream_options
from dream_assets.passes.registry import MODEL_CALLS  # noqa: E402
from dream_assets.profile import AgentProfile  # noqa: E402
from dream_assets_tests.consolidation_corpus import corpus, review  # noqa: E402
from dream_assets_tests.openai_server import OpenAITestServer, small_model  # noqa: E402

NOW = datetime(2026, 11, 30, 12, 0, tzinfo=UTC)
WINDOWS = (4096, 8192, 32768, 131072)
RESERVE = 1024


def emit(name: str, n: int, value: float, unit: str, **extra: object) -> None:
    print(json.dumps({"name": name, "n": n, "value": value, "unit": unit, **extra}), flush=True)


def first_review(n: int, window: int, tmp: Path) -> None:
    options = dream_options(
        ConsolidationMinInterval=timedelta(0),
        ConsolidationExactFoldEnabled=False,
        ConsolidationCallShape="batch",  # the batch plans measured here (8k or less would ask one call per cluster)
        LlmStructuredOutput="off",
        LlmJsonMode="off",
        LlmMaxTokens=RESERVE,
        LlmContextTokens=window,
        LlmMaxCallsPerPass=10_000,
    )
    profile = AgentProfile(tmp / f"n{n}-w{window}").ensure()
    _, calls, cycles, server = review(
        profile, options, corpus(n, pairs=n // 20, now=NOW), NOW, server_kw={"context_limit": window}, max_cycles=50
    )
    emit("models.prompts_over_window", n, server.context_refusals, "calls", window=window)
    emit("models.largest_prompt_share", n, round(server.largest_prompt_tokens / window, 3), "ratio", window=window)
    emit("models.first_review_calls", n, calls, "calls", window=window, cycles=cycles)


def dense_tokenizer(n: int, tmp: Path, window: int = 4096) -> None:
    options = dream_options(
        ConsolidationMinInterval=timedelta(0),
        ConsolidationExactFoldEnabled=False,
        ConsolidationCallShape="batch",  # the batch plans measured here (8k or less would ask one call per cluster)
        LlmStructuredOutput="off",
        LlmJsonMode="off",
        LlmMaxTokens=512,
        LlmContextTokens=window,
        LlmMaxCallsPerPass=10_000,
    )
    for counted, tokenize in (("estimate", False), ("tokenize", True)):
        profile = AgentProfile(tmp / f"dense-{n}-{counted}").ensure()
        started = time.perf_counter()
        _, calls, _, server = review(
            profile,
            options,
            corpus(n, pairs=n // 20, now=NOW),
            NOW,
            server_kw={
                "context_limit": window,
                "bytes_per_token": 2.1,
                "tokenize": tokenize,
                "context_error": "llamacpp",
            },
            max_cycles=50,
        )
        seconds = round(time.perf_counter() - started, 2)
        emit("models.dense_tokenizer.prompts_over_window", n, server.context_refusals, "calls", counted=counted)
        emit("models.dense_tokenizer.seconds", n, seconds, "s", counted=counted, calls=calls)
        emit("models.dense_tokenizer.tokenize_requests", n, server.tokenize_requests, "requests", counted=counted)


def parse_failures(calls: int) -> None:
    answer = json.dumps({"findings": [{"content": "route short lookups to the small tier", "tags": ["routing"]}]})
    for mode in ("off", "json_schema"):
        with OpenAITestServer(default=small_model(lambda body: answer, 1 / 3)) as server:
            options = dream_options(
                LlmBaseUrl=server.base_url, LlmModel="small-model", LlmMaxRetries=0, LlmStructuredOutput=mode
            )
            client = build_model_client(options, None)
            failed = sum(
                not client.call(client.request(MODEL_CALLS["tier_routing_review"], "tier stats ...", {})).ok
                for _ in range(calls)
            )
        name = "free_form" if mode == "off" else "json_schema"
        emit(f"models.parse_failure_rate.{name}", calls, round(failed / calls, 3), "ratio")


def _sizes(text: str) -> list[int]:
    """A comma-separated list of positive whole numbers, as ``--entries 1000,100000``."""
    try:
        sizes = [int(part) for part in text.split(",") if part.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a comma-separated list of numbers: {text!r}") from None
    if not sizes or min(sizes) <= 0:
        raise argparse.ArgumentTypeError(f"expected positive numbers: {text!r}")
    return sizes


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="1,000 entries only, 60 parse calls")
    parser.add_argument("--entries", type=_sizes, help="comma-separated corpus sizes (default 1000,100000)")
    parser.add_argument(
        "--windows", type=_sizes, help="comma-separated context windows (default " + ",".join(map(str, WINDOWS)) + ")"
    )
    parser.add_argument("--no-parse", action="store_true", help="skip the parse-failure figures")
    args = parser.parse_args()
    logging.disable(logging.WARNING)  # the refused answers of the small model are the point, not noise to print
    sizes = args.entries or ([1_000] if args.quick else [1_000, 100_000])
    with tempfile.TemporaryDirectory(prefix="dream-bench-models-") as tmp:
        for n in sizes:
            for window in args.windows or WINDOWS:
                first_review(n, window, Path(tmp))
        dense_tokenizer(200 if args.quick else min(sizes), Path(tmp))
    if not args.no_parse:
        parse_failures(60 if args.quick else 300)


if __name__ == "__main__":
    main()
