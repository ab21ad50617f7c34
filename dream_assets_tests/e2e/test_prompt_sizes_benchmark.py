"""The prompt-size benchmark, run as a person runs it: one offline cycle over the small demo prints, for every model
pass of the registry, its calls and its directive's and items' estimated tokens: what a prompt change is measured by."""

import json
import subprocess
import sys
from pathlib import Path

from dream_assets.passes.registry import PASSES

ROOT = Path(__file__).resolve().parents[2]


def test_every_model_pass_reports_the_size_of_its_prompts():
    done = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / "prompt_sizes.py"), "--quick"],
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    figures = {line["name"]: line for line in map(json.loads, done.stdout.splitlines())}
    for spec in PASSES:
        if spec.model_call is None:
            continue
        name = spec.model_call.name
        assert figures[f"prompt_sizes.{name}.calls"]["value"] >= 1, name
        assert figures[f"prompt_sizes.{name}.directive_tokens"]["value"] > 0, name
        assert figures[f"prompt_sizes.{name}.items_tokens"]["value"] > 0, name
    total = figures["prompt_sizes.total.items_tokens"]["value"]
    assert total == sum(v["value"] for k, v in figures.items() if k.endswith(".items_tokens") and "total" not in k)
