"""Adding a pass is one module (its body, SPEC, options section, response contract, prompt and offline answer), its
directive file and one registry line: a toy pass written into a temporary package runs through a whole cycle with the
offline backend, its options are set from ``dream.toml`` and the environment like any pass's, and nothing of the model
layer, the options module or the Dagster layer knows of it."""

from __future__ import annotations

import importlib
import sys
import textwrap
from datetime import timedelta
from pathlib import Path

import pytest

from dream_assets.cycle import run_cycle
from dream_assets.llm.client import ModelClient
from dream_assets.llm.directives import load_directive
from dream_assets.llm.offline import OfflineBackend
from dream_assets.model import MemoryEntry
from dream_assets.options import OptionsError
from dream_assets.options_loader import dream_options, load_agent_options, resolve_agent_options
from dream_assets.passes import registry
from dream_assets.passes.outcome import load_outcome
from dream_assets.passes.spec import spec_problems

from ..conftest import NOW

NAME = "memory_census"
URL = "http://127.0.0.1:9/v1"

#: The whole pass: what it reads, its contract, its prompt, its offline answer, its body and its SPEC. It shows the
#: model every live memory and asks which categories hold how many; offline, the answer is counted from the inputs.
TOY_PASS = '''
"""Memory census — counts the live memories by category (a toy pass)."""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import timedelta
from typing import Any, ClassVar

from pydantic import Field

from dream_assets.llm.contracts import Contract, ModelCall
from dream_assets.llm.offline import OFFLINE_BACKEND
from dream_assets.llm.prompts import render_memory_entry
from dream_assets.options import PassOptions, pass_option
from dream_assets.passes.common import call_model
from dream_assets.passes.context import PassContext
from dream_assets.passes.report import PassReport
from dream_assets.passes.spec import PassSpec

PASS = "memory_census"


class CategoryCount(Contract):
    category: str
    entries: int = 0


class MemoryCensusResponse(Contract):
    categories: list[CategoryCount] = Field(default_factory=list)


def render_memory_census(entries) -> str:
    return "## Live memories\\n" + "\\n".join(render_memory_entry(e) for e in entries) + "\\n"


def answer_memory_census(inputs: Mapping[str, Any]) -> tuple[dict[str, Any], str]:
    counts = Counter(str(e.get("category") or "general") for e in inputs.get("entries") or [])
    answer = {"categories": [{"category": c, "entries": n} for c, n in sorted(counts.items())]}
    return answer, f"{OFFLINE_BACKEND} backend: categories counted from the entries shown"


@dataclass(frozen=True, kw_only=True)
class MemoryCensusOptions(PassOptions):
    """The census's options section: every shared key, and one option of its own."""

    PASS: ClassVar[str] = "memory_census"

    enabled: bool = pass_option(True, "memory census: count the live memories by category")
    model: str = pass_option("", "model for the census; empty = the model section's")
    base_url: str = pass_option("", "endpoint for the census; empty = the model section's", url=True)
    api_key_env: str = pass_option("", "API key variable for the census; empty = the model section's")
    apply_mode: str = pass_option("", "apply mode; empty = the review section's", choices=("", "auto", "review"))
    directive: str = pass_option("memory-census.md", "the census directive file in the agent's profile")
    min_interval: timedelta = pass_option(timedelta(0), "minimum time between two censuses; zero: none")
    top_categories: int = pass_option(10, "categories the report counts, the largest first", minimum=1)


def census(ctx: PassContext) -> PassReport:
    top = ctx.options.section(MemoryCensusOptions).top_categories
    report = PassReport(PASS)
    entries = ctx.store.memories.list_live()
    inputs = {"entries": [{"id": e.id, "category": e.category} for e in entries]}
    response = call_model(ctx, report, SPEC.model_call, render_memory_census(entries), inputs)
    if response is None:
        return report
    for row in sorted(response.categories, key=lambda row: (-row.entries, row.category))[:top]:
        report.counts[f"category:{row.category}"] = row.entries
    report.counts["categories"] = len(response.categories)
    report.summary = f"memory census: {len(entries)} live memories in {len(response.categories)} categories"
    return report


SPEC = PassSpec(
    name=PASS,
    group="audit",
    description="Memory census — counts the live memories by category.\\n\\nA toy pass: one module, one registry "
    "line and a directive file.",
    body=census,
    options=MemoryCensusOptions,
    reads=("memory_corpus",),
    model_call=ModelCall(
        name=PASS,
        contract=MemoryCensusResponse,
        directive_file="memory-census.md",
        directive_option="passes.memory_census.directive",
        offline=answer_memory_census,
        directive_package=__name__,
    ),
    counts={"categories": "categories the model counted"},
)
'''

DIRECTIVE = 'You count memories. Answer with JSON: {"categories": [{"category": ..., "entries": ...}]}.\n'


@pytest.fixture
def toy(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    """The toy pass as a package of its own in a temporary folder on the path, with its directive beside it."""
    package = tmp_path / "toy_passes" / "memory_census"
    package.mkdir(parents=True)
    (package / "__init__.py").write_text(textwrap.dedent(TOY_PASS), encoding="utf-8")
    (package / "memory-census.md").write_text(DIRECTIVE, encoding="utf-8")
    monkeypatch.syspath_prepend(str(tmp_path / "toy_passes"))
    module = importlib.import_module("memory_census")
    yield module
    sys.modules.pop("memory_census", None)


def test_a_pass_written_in_one_module_runs_in_a_cycle_with_one_registry_line(toy, profile, store, monkeypatch):
    facts = {"a": ("Ana likes tea.", "people/ana"), "b": ("Ana lives in Porto.", "people/ana")}
    facts["c"] = ("Deploys run on Fridays.", "work")
    store.memories.put_many(
        [
            MemoryEntry(
                id=i, content=c, category=cat, tags=[], importance=0.5, created_at=NOW, updated_at=NOW, last_seen_at=NOW
            )
            for i, (c, cat) in facts.items()
        ]
    )
    store.close()
    options = dream_options()

    monkeypatch.setattr(registry, "PASSES", (*registry.PASSES, toy.SPEC))  # the one registry line

    assert spec_problems(toy.SPEC) == []
    assert load_directive(toy.SPEC.model_call, profile, options) == (DIRECTIVE, "built-in")
    reports = run_cycle(
        profile,
        options,
        NOW,
        only=[NAME],
        client_factory=lambda: ModelClient(OfflineBackend(), profile=profile, options=options),
    )

    assert [r.pass_name for r in reports] == [NAME]
    (report,) = reports
    assert report.status == "completed", report.reason
    assert report.counts["categories"] == 2
    assert report.counts["category:people/ana"] == 2 and report.counts["category:work"] == 1
    assert report.summary == "memory census: 3 live memories in 2 categories"
    assert "offline backend: categories counted from the entries shown" in "\n".join(report.lines)
    recorded = load_outcome(profile, NAME)
    assert recorded is not None and recorded["status"] == "completed" and recorded["counts"]["categories"] == 2


def _census_corpus(store) -> None:
    facts = {"a": ("Ana likes tea.", "people/ana"), "b": ("Ana lives in Porto.", "people/ana")}
    facts["c"] = ("Deploys run on Fridays.", "work")
    store.memories.put_many(
        [
            MemoryEntry(
                id=i, content=c, category=cat, tags=[], importance=0.5, created_at=NOW, updated_at=NOW, last_seen_at=NOW
            )
            for i, (c, cat) in facts.items()
        ]
    )
    store.close()


def test_the_new_pass_s_own_options_are_set_like_any_pass_s_from_dream_toml_and_the_environment(
    toy, profile, store, monkeypatch
):
    """The toy pass declares its section in its own module; with its registry line, ``[passes.memory_census]`` in
    dream.toml and ``DREAM__PASSES__MEMORY_CENSUS__*`` set its option and the shared keys, which fall back to the
    model and review sections; the pass reads its option, and a mistyped key is refused by the cycle's load."""
    _census_corpus(store)
    profile.options_path.write_text(
        '[passes.memory_census]\ntop_categories = 3\nmodel = "census-model"\ndirective = "census-mine.md"\n'
        'min_interval = "1h"\n[model]\nmodel = "big"\n[review]\napply_mode = "review"\n',
        encoding="utf-8",
    )
    with pytest.raises(OptionsError, match="unknown dream option 'passes.memory_census.top_categories'"):
        load_agent_options(profile, env={})  # no registry line: no pass has that section
    monkeypatch.setattr(registry, "PASSES", (*registry.PASSES, toy.SPEC))  # the one registry line

    env = {"DREAM__PASSES__MEMORY_CENSUS__TOP_CATEGORIES": "1", "DREAM__PASSES__MEMORY_CENSUS__BASE_URL": URL}
    resolved = resolve_agent_options(profile, env=env)
    own = resolved.options.passes[NAME]
    assert own.top_categories == 1 and resolved.source("passes.memory_census.top_categories") == (
        "DREAM__PASSES__MEMORY_CENSUS__TOP_CATEGORIES"
    )
    assert (own.model, own.base_url, own.api_key_env) == ("census-model", URL, "OPENAI_API_KEY")
    assert own.apply_mode == "review" and own.enabled is True and own.min_interval == timedelta(hours=1)
    assert resolved.source("passes.memory_census.model") == f"{profile.options_path}: passes.memory_census.model"
    model_options = resolved.options.for_pass_model(NAME)
    assert (model_options.LlmModel, model_options.LlmBaseUrl) == ("census-model", URL)
    shown = {row.nested: row for row in resolved.rows()}
    assert shown["passes.memory_census.top_categories"].shown == "1"  # dream status --options lists it
    assert toy.SPEC.min_interval == "passes.memory_census.min_interval"
    assert toy.SPEC.interval(resolved.options) == timedelta(hours=1)

    custom = profile.directive_override_path("census-mine.md")
    custom.parent.mkdir(parents=True, exist_ok=True)
    custom.write_text("Count the memories, your way.\n", encoding="utf-8")
    assert load_directive(toy.SPEC.model_call, profile, resolved.options) == (
        "Count the memories, your way.\n",
        str(custom),
    )

    # The pass reads its own option: the report counts the largest category only. No model override here, so the
    # offline client the test hands in answers.
    profile.options_path.write_text("[passes.memory_census]\ntop_categories = 3\n", encoding="utf-8")
    options = load_agent_options(profile, env={"DREAM__PASSES__MEMORY_CENSUS__TOP_CATEGORIES": "1"})
    offline = lambda: ModelClient(OfflineBackend(), profile=profile, options=options)  # noqa: E731
    (report,) = run_cycle(profile, options, NOW, only=[NAME], client_factory=offline)
    assert report.status == "completed", report.reason
    assert report.counts["categories"] == 2 and report.counts["category:people/ana"] == 2
    assert "category:work" not in report.counts

    off = load_agent_options(profile, env={"DREAM__PASSES__MEMORY_CENSUS__ENABLED": "false"})
    (report,) = run_cycle(profile, off, NOW, only=[NAME], client_factory=offline)
    assert report.status == "skipped" and "disabled (passes.memory_census.enabled = false)" in report.reason

    monkeypatch.setenv("DREAM__PASSES__MEMORY_CENSUS__TOP_CATEGORY", "2")
    with pytest.raises(OptionsError, match="did you mean passes.memory_census.top_categories?"):
        run_cycle(profile, None, NOW, only=[NAME], client_factory=offline)
