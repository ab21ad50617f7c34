"""The results page (``--page docs/dreambench.md``): the run, the machine, the scenario, the end-of-year table, and
one PNG per metric over the simulated year, written beside the page as ``<page name>-<metric>.png``."""

from __future__ import annotations

import math
import os
import platform
import sys
from pathlib import Path

from .runner import FINAL, PLOTTED, Result
from .scenario import START, Scenario

ABOUT = {
    "specifics_lost": "names, numbers and dates of saved facts that no kept entry (live or restorable) carries",
    "facts_lost": "facts no kept entry (live or restorable) holds",
    "specifics_missing_live": "the same as specifics_lost, over live entries only",
    "facts_missing_live": "facts no live entry holds",
    "dup_groups_one_live": "share of duplicate groups (a fact and its re-observations) held by exactly one live entry",
    "distinct_merged": "pairs of distinct look-alike events held by one live entry with neither kept alone",
    "distinct_collapsed": "pairs of distinct look-alike events of which one lives and no live entry holds the other "
    "(taken for one event: a merge that kept one of them, or a drop; counted in the losses as well)",
    "stale_first": "corrected facts whose question finds the stale version before the current one",
    "correction_missed": "corrected facts whose question finds neither version in the top 10",
    "recall_at_10": "share of questions whose every evidence fact is held by one of the top 10 results",
    "tokens_per_cycle": "model tokens per consolidation after days with saves",
    "tokens_per_idle_cycle": "model tokens per consolidation with nothing saved since the last one",
    "reversible": "share of live entries a consolidation took out or rewrote whose text can still be restored "
    "(– with n = 0: nothing was taken out)",
    "live_entries": "live entries (n: live and restorable entries)",
    "tokens": "model tokens spent by each consolidation",
    "failures": "failed saves, passes or model calls over the year (a failed rewrite leaves the file as it was, so "
    "its cycle changes nothing; a failed save is a fact the agent meant to keep, scored as saved)",
}

PENDING = """\
`llm_rewrite` (the whole `MEMORY.md` given to the model, the tidied file written back: how Claude Code- and
OpenClaw-style dreaming behaves) and `mem0` (`mem0ai` with `infer=True`) need a real model endpoint; the tests run
them against the project's scripted test endpoint, which proves the adapters work but measures nothing. With
`DREAM__LlmBaseUrl` set, `--quick` runs the model year (`--quick model`): the first observation of each speaker a
session of conv-26, one HaluMem person, a consolidation every 120 days (3, the last idle; 82 saves, 3 corrections,
48 questions), which `dream_assets` and `llm_rewrite` finish in about 15 minutes with the local
Qwen2.5-Coder-1.5B-Instruct on this 2-core machine (`../shared/local-model/`). Its figures are not comparable with
the offline year's, so it writes a page of its own, [dreambench-local-model.md](dreambench-local-model.md):

    ../shared/local-model/serve.sh start
    export DREAM__LlmBaseUrl=http://127.0.0.1:8091/v1 DREAM__LlmModel=qwen2.5-coder-1.5b-instruct OPENAI_API_KEY=local
    export DREAM__LlmContextTokens=8192 DREAM__LlmTimeout=1800 DREAM__LlmMaxTokens=1024
    .venv/bin/python benchmarks/dreambench --quick --adapters dream_assets,llm_rewrite,append_only \\
        --page docs/dreambench-local-model.md

The same year with the 0.5B model (`MODEL=0.5b`, `DREAM__LlmModel=qwen2.5-coder-0.5b-instruct`) and the e5
embeddings below is on [dreambench-local-model-0.5b.md](dreambench-local-model-0.5b.md).

A whole-file rewrite may answer with up to twice the file, within what the window leaves after the prompt (never
less than `DREAM__LlmMaxTokens`); an answer cut off at that limit, or a file larger than the window, fails, leaves
the file as it was and is counted in `failures`. `mem0` also needs `mem0ai` (in the `bench` extra) and the e5
embeddings (`DREAM__EmbeddingBaseUrl=http://127.0.0.1:8093/v1 DREAM__EmbeddingModel=multilingual-e5-small-q4
DREAM__EmbeddingDimensions=384`, which `dream_assets` then uses too; the adapter gives e5 the `query: ` and
`passage: ` prefixes it was trained with, as `dream_assets` does). `mem0ai` 2.2.1 (without its `nlp` and `extras`
extras, whose models are downloaded) runs against the local model: each add sends mem0's extraction prompt of about
8,000 tokens, more than an 8k window holds (start the server with `LLM_CTX=16384`). Its instructions are the same
every time, so llama.cpp answers them from its prompt cache after the first add, and an add costs the rest (about 600
tokens: the new message and the last ten mem0 sends along) and the answer. Measured with the 0.5B model: 28 adds
answered with 556 tokens on average (it extracts the earlier messages again), 4 of them cut off at mem0's
2,000-token answer limit; about a minute an add on an idle machine, an hour and a half for the model year's 82 adds,
and longer with the 1.5B model. So no figure of mem0 is on these pages yet (the tests run it against the scripted
endpoint: one extraction call a save, none at a consolidation). A save an adapter fails is counted in `failures`,
its fact is scored as saved (so lost), and the year goes on."""


def machine() -> str:
    cpu = platform.processor() or platform.machine()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    memory = ""
    try:
        kb = int(Path("/proc/meminfo").read_text().split("MemTotal:", 1)[1].split()[0])
        memory = f", {kb / 1024 / 1024:.0f} GiB RAM"
    except (OSError, IndexError, ValueError):
        pass
    return (
        f"{platform.system()} {platform.release()}, {cpu}, {os.cpu_count()} cores{memory}, "
        f"Python {sys.version.split()[0]}"
    )


def load() -> str:
    try:
        return " / ".join(f"{x:.1f}" for x in os.getloadavg())
    except OSError:
        return "unknown"


def _fmt(value: float, unit: str) -> str:
    if math.isnan(value):
        return "–"
    if unit == "fraction":
        return f"{value:.3f}"
    return f"{value:,.0f}" if float(value).is_integer() or abs(value) >= 100 else f"{value:,.1f}"


def plots(page: Path, results: list[Result]) -> dict[str, str]:
    """One PNG per plotted metric; metric -> file name (empty when matplotlib is missing)."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print(
            "dreambench: no plots: matplotlib is not installed (pip install -e '.[bench]')",
            file=sys.stderr,
        )
        return {}
    out = {}
    for metric in PLOTTED:
        fig, ax = plt.subplots(figsize=(7, 3.2), dpi=100)
        for r in results:
            days = [c["day"] for c in r.cycles]
            ax.plot(days, [c[metric] for c in r.cycles], marker=".", markersize=3, linewidth=1.2, label=r.adapter)
        ax.set_title(f"{metric} after each consolidation")
        ax.set_xlabel(f"day of the simulated year (from {START:%Y-%m-%d})")
        ax.grid(alpha=0.3)
        ax.legend(loc="best", fontsize=8)
        fig.tight_layout()
        name = f"{page.stem}-{metric}.png"
        fig.savefig(page.parent / name, metadata={"Software": None})
        plt.close(fig)
        out[metric] = name
    return out


def write_page(
    page: Path, year: Scenario, results: list[Result], unavailable: dict[str, str], *, command: str, when: str
) -> None:
    page.parent.mkdir(parents=True, exist_ok=True)
    images = plots(page, results)
    names = [r.adapter for r in results]
    lines = [
        "# DreamBench results",
        "",
        "A year in an agent's life, scripted from public data, run through each memory system's five calls",
        "(`save`, `consolidate`, `search`, `dump`, `tokens_used`) and scored without a model judge: what each",
        "consolidation loses, merges wrongly, keeps stale and can give back. How it works, and how to add an adapter:",
        "[`benchmarks/dreambench/README.md`](../benchmarks/dreambench/README.md).",
        "",
        "## This run",
        "",
        f"- Date: {when}; command: `{command}`",
        f"- Machine: {machine()}; load average {load()} at the end of the run (the times below are wall-clock)",
    ]
    for r in results:
        lines.append(f"- `{r.adapter}`: {r.backend or 'no model'}; {r.seconds:.0f} s for the year")
    for name, why in unavailable.items():
        lines.append(f"- `{name}`: unavailable here: {why}")
    s = year.summary()
    lines += [
        "",
        "## The year",
        "",
        f"{s['saves']} saves over {START:%Y-%m-%d} + 365 days ({s['noise']} of them noise), a consolidation every "
        f"{(year.consolidations[1] - year.consolidations[0]).days if len(year.consolidations) > 1 else 0} days "
        f"({s['consolidations']} in all; the last weeks have no saves, so their cycles are idle). "
        f"{s['facts']} scored facts: {s.get('kind.observation', 0)} LoCoMo observations, "
        f"{s.get('kind.profile', 0)} HaluMem profile facts, {s.get('kind.reobservation', 0)} re-observations in other "
        f"words ({s['dup_groups']} duplicate groups), {s.get('kind.lookalike', 0)} distinct events that read alike "
        f"({s['lookalike_groups']} groups), {s['corrections']} corrections (the {s.get('kind.stale', 0)} stale "
        f"versions are not scored as losses); {s['questions']} questions.",
        "",
        "Read in place from the shared evaluation data: " + "; ".join(year.sources.values()) + ".",
        "",
        "## End of the year",
        "",
        "| metric | better | " + " | ".join(f"`{n}`" for n in names) + " | what it counts |",
        "| --- | --- | " + " | ".join("---:" for _ in names) + " | --- |",
    ]
    for metric, unit, better in FINAL:
        cells = []
        for r in results:
            value, n = r.final[metric]
            cells.append(f"{_fmt(value, unit)} <sub>n={n}</sub>")
        lines.append(f"| {metric} | {better} | " + " | ".join(cells) + f" | {ABOUT[metric]} |")
    lines += ["", "## With a real model", "", PENDING, ""]
    if images:
        lines += ["## Over the year", ""]
        for metric, image in images.items():
            lines += [f"**{metric}**: {ABOUT[metric]}.", "", f"![{metric}]({image})", ""]
    lines += [
        "## Rerun",
        "",
        "```sh",
        "make setup && .venv/bin/pip install -e '.[bench]'      # matplotlib, for the plots",
        "nice .venv/bin/python benchmarks/dreambench --quick --adapters dream_assets,append_only "
        "--final-only --page docs/dreambench.md",
        ".venv/bin/python benchmarks/dreambench --quick model   # the model year (3 consolidations), on the endpoint",
        ".venv/bin/python benchmarks/dreambench                 # full size: 4 conversations, 20 people",
        "```",
        "",
        "`--quick` is the offline year (`--quick offline`: conv-26, 5 HaluMem people, a consolidation every 7 days)",
        "unless `DREAM__LlmBaseUrl` is set and a model-based adapter is run; then it is the model year above. The",
        "data is read in place from `../shared/eval-data/` (or `--data`, `DREAM_EVAL_DATA`); fixed seeds make every",
        "figure repeat for the offline backend.",
        "",
    ]
    page.write_text("\n".join(lines), encoding="utf-8")
