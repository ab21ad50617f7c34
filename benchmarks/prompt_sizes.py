"""What each model pass's prompt costs, measured without a model: one dream cycle over the demo agent (every kind of
entry, skill and log line the passes read) through the offline backend, every prompt captured as it would be sent.

    python benchmarks/prompt_sizes.py            # the demo at its full size (320 memories)
    python benchmarks/prompt_sizes.py --quick    # only the demo's hand-written entries

Printed, one JSON object a line, per model call kind (``pass``): ``prompt_sizes.<pass>.calls``, ``.directive_tokens``
and ``.items_tokens`` (the system prompt and the rendered items, estimated at the uncalibrated three bytes a token,
``budget.estimate_prompt_tokens``: a small model's tokenizer makes more of id-heavy text) and ``.bytes`` (exact UTF-8),
summed over the cycle's calls; then the totals. Deterministic: the same code gives the same figures, so a prompt change
is measured by running it before and after.
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
import tempfile
from collections.abc import Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path[:0] = [p for p in (str(HERE.parent),) if p not in sys.path]

from dream_assets.cycle import run_cycle  # noqa: E402
from dream_assets.demo import build_demo_profile  # noqa: E402
from dream_assets.llm.budget import estimate_prompt_tokens  # noqa: E402
from dream_assets.llm.client import build_model_client  # noqa: E402
from dream_assets.options_loader import dream_options  # noqa: E402
from dream_assets.profile import AgentProfile  # noqa: E402
from dream_assets.store.connection import close_all  # noqa: E402

NOW = datetime(2026, 11, 30, 12, 0, tzinfo=UTC)


def emit(name: str, n: int, value: float, unit: str) -> None:
    print(json.dumps({"name": name, "n": int(n), "value": round(float(value), 4), "unit": unit}), flush=True)


def captured_prompts(root: Path, n_memories: int) -> list[tuple[str, str, str]]:
    """(call name, system prompt, user prompt) of every model call of one offline cycle over the demo agent."""
    profile = AgentProfile(root / "demo")
    options = dream_options(LlmBackend="offline")
    build_demo_profile(profile, NOW, n_memories=n_memories)
    close_all()
    client = build_model_client(options, profile)
    prompts: list[tuple[str, str, str]] = []
    answer = client.backend.complete

    def complete(request: Any) -> Any:
        prompts.append((request.pass_name, request.system, request.prompt))
        return answer(request)

    client.backend.complete = complete  # type: ignore[method-assign]
    run_cycle(profile, options, NOW, client_factory=lambda: client, cycle_id="prompt-sizes")
    close_all()
    return prompts


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="prompt_sizes", description=__doc__.split("\n\n")[0])
    p.add_argument("--quick", action="store_true", help="only the demo's hand-written entries (no bulk memories)")
    args = p.parse_args(list(argv) if argv is not None else None)
    logging.disable(logging.WARNING)
    with tempfile.TemporaryDirectory(prefix="prompt-sizes-") as tmp:
        prompts = captured_prompts(Path(tmp), 0 if args.quick else 320)
    totals = {"calls": 0, "directive_tokens": 0, "items_tokens": 0, "bytes": 0}
    for name in sorted({p[0] for p in prompts}):
        calls = [(system, prompt) for n, system, prompt in prompts if n == name]
        figures = {
            "calls": len(calls),
            "directive_tokens": sum(estimate_prompt_tokens(s) for s, _ in calls),
            "items_tokens": sum(estimate_prompt_tokens(u) for _, u in calls),
            "bytes": sum(len(s.encode()) + len(u.encode()) for s, u in calls),
        }
        for key, value in figures.items():
            totals[key] += value
            emit(f"prompt_sizes.{name}.{key}", len(calls), value, "calls" if key == "calls" else key.split("_")[-1])
    for key, value in totals.items():
        emit(f"prompt_sizes.total.{key}", totals["calls"], value, "calls" if key == "calls" else key.split("_")[-1])
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
