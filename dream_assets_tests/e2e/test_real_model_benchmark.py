"""The real-model benchmark's quick size, run as a person runs it: through the offline backend, and through an
OpenAI-compatible endpoint (the scripted test server) whose model names entries it was never shown and copies the
directive's example instead of answering — the host refuses both, and the benchmark counts them as refusals."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from dream_assets_tests.openai_server import NOTHING_TO_CHANGE, OpenAITestServer, Reply, reply

ROOT = Path(__file__).resolve().parents[2]
DATA = Path(os.environ.get("DREAM_EVAL_DATA") or ROOT.parent / "shared" / "eval-data")

pytestmark = pytest.mark.skipif(
    not (DATA / "locomo" / "locomo10.json").exists(),
    reason=f"{DATA / 'locomo' / 'locomo10.json'} is not available",
)

#: The figures every backend reports.
METRICS = {
    "specifics_lost",
    "facts_lost",
    "distinct_merged",
    "dup_groups_one_live.cycle1",
    "dup_groups_one_live.cycle3",
    "corrections_newest_first",
    "recall_at_10.before",
    "recall_at_10.after",
    "answers_unparseable",
    "repairs",
    "calls",
    "prompt_tokens",
    "completion_tokens",
    "seconds_per_call",
    "seconds_per_cycle",
    "prompts_over_window",
    "placeholders_applied",
    *(
        f"refused.{r}"
        for r in ("invented_id", "coverage", "high_value_floor", "removal_guard", "placeholder_copy", "supersession")
    ),
}


def run_benchmark(env: dict[str, str], *args: str) -> list[dict]:
    clean = {k: v for k, v in os.environ.items() if not k.startswith("DREAM__")}
    proc = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / "real_model.py"), "--quick", "--data", str(DATA), *args],
        capture_output=True,
        text=True,
        timeout=600,
        cwd=ROOT,
        env={**clean, "PYTHONPATH": str(ROOT), **env},
    )
    assert proc.returncode == 0, proc.stderr[-4000:]
    return [json.loads(line) for line in proc.stdout.splitlines() if line.startswith("{")]


def by_name(lines: list[dict], backend: str) -> dict[str, dict]:
    prefix = f"real_model.{backend}."
    return {line["name"][len(prefix) :]: line for line in lines if line["name"].startswith(prefix)}


def test_quick_offline_prints_every_figure_as_a_json_line_and_loses_nothing():
    lines = run_benchmark({}, "--backends", "offline")
    for line in lines:
        assert set(line) >= {"name", "n", "value", "unit"}, line
        assert isinstance(line["n"], int) and (line["value"] is None or isinstance(line["value"], float)), line
    corpus = by_name(lines, "corpus")
    assert corpus["saves"]["value"] >= 30 and corpus["dup_groups"]["value"] >= 2
    assert corpus["lookalike_groups"]["value"] >= 2 and corpus["corrections"]["value"] >= 2
    offline = by_name(lines, "offline")
    assert METRICS <= set(offline), METRICS - set(offline)
    assert not by_name(lines, "endpoint")  # no DREAM__LlmBaseUrl: no endpoint run
    assert offline["specifics_lost"]["value"] == 0 and offline["distinct_merged"]["value"] == 0
    assert offline["recall_at_10.after"]["value"] >= offline["recall_at_10.before"]["value"]
    assert offline["calls"]["value"] >= 3 and offline["answers_unparseable"]["value"] == 0


#: What a small model copying its directive answers to memory consolidation: an entry it was never shown, a
#: placeholder, and the directive's example text as a new entry.
COPYING_MODEL = json.dumps(
    {
        "toDelete": ["ex-1"],
        "toSave": [
            {"content": "...", "category": "general", "tags": [], "sourceIds": []},
            {
                "content": "Nadia's bakery in Examplia opens at 7:00 on weekdays.",
                "category": "user-preferences/timezone",
                "tags": ["timezone"],
                "sourceIds": ["ex-1", "ex-2"],
            },
            {
                "content": "Nadia's bakery in Examplia opens at 7:00 on weekdays.",
                "category": "general",
                "tags": [],
                "sourceIds": [],
            },
        ],
    }
)


def _copying(body: dict) -> Reply:
    system = body["messages"][0]["content"]
    return reply(COPYING_MODEL if system.startswith("# Memory consolidation") else NOTHING_TO_CHANGE)


def test_quick_through_an_endpoint_counts_invented_ids_and_copied_examples_as_refusals():
    with OpenAITestServer(default=Reply(decide=_copying)) as server:
        lines = run_benchmark(
            {
                "DREAM__LlmBaseUrl": server.base_url,
                "DREAM__LlmModel": "test-model",
                "DREAM__LlmMaxRetries": "0",
                # the batch shape (the benchmark's 8k window would pick one call per cluster: the next test)
                "DREAM__ConsolidationCallShape": "batch",
            }
        )
        asked = [r for r in server.requests if r.path.endswith("/chat/completions")]
    endpoint, offline = by_name(lines, "endpoint"), by_name(lines, "offline")
    assert METRICS <= set(endpoint) and METRICS <= set(offline)
    assert {line["model"] for line in lines if line["name"].startswith("real_model.endpoint.")} == {"test-model"}
    assert endpoint["calls"]["value"] == len(asked) >= 3
    assert endpoint["prompt_tokens"]["value"] == 11 * len(asked)  # as the endpoint's usage counted them
    assert endpoint["refused.invented_id"]["value"] >= 2  # the example's ex-1 and ex-2, every call
    assert endpoint["refused.placeholder_copy"]["value"] >= 2  # "..." and the example, every call
    assert endpoint["placeholders_applied"]["value"] == 0
    assert endpoint["specifics_lost"]["value"] == 0
    assert offline["refused.placeholder_copy"]["value"] == 0


#: The one-cluster check's worked example, as a small model copying it answers every cluster.
COPIED_VERDICT = json.dumps(
    {"differences": "none", "decision": "merge", "content": "Nadia's bakery in Examplia opens at 7:00 on weekdays."}
)


def _copying_verdicts(body: dict) -> Reply:
    system = body["messages"][0]["content"]
    return reply(COPIED_VERDICT if system.startswith("# Same fact or not") else NOTHING_TO_CHANGE)


def test_quick_through_a_small_window_asks_per_cluster_and_refuses_a_copied_verdict():
    with OpenAITestServer(default=Reply(decide=_copying_verdicts)) as server:
        lines = run_benchmark(
            {"DREAM__LlmBaseUrl": server.base_url, "DREAM__LlmModel": "test-model", "DREAM__LlmMaxRetries": "0"}
        )
        checks = [r for r in server.requests if r.body.get("messages", [{}])[0].get("content", "").startswith("# Same")]
    endpoint = by_name(lines, "endpoint")
    assert checks  # the 8k window of the benchmark's endpoint run: one call per cluster
    assert endpoint["refused.placeholder_copy"]["value"] >= len(checks)  # every copied verdict refused
    assert endpoint["placeholders_applied"]["value"] == 0 and endpoint["specifics_lost"]["value"] == 0
    assert endpoint["dup_groups_one_live.cycle3"]["value"] < 1  # nothing merged by a copy
