"""Adding a pass is one module (its body, SPEC, response contract, prompt and offline answer), its directive file and
one registry line: a toy pass written into a temporary package runs through a whole cycle with the offline backend,
and nothing of the model layer, the options or the Dagster layer knows of it."""

from __future__ import annotations

import importlib
import sys
import textwrap
from pathlib import Path

import pytest

from dream_assets.cycle import run_cycle
from dream_assets.llm.client import ModelClient
from dream_assets.llm.directives import load_directive
from dream_assets.llm.offline import OfflineBackend
from dream_assets.model import MemoryEntry
from dream_assets.options import DreamOptions
from dream_assets.passes import registry
from dream_assets.passes.outcome import load_outcome
from dream_assets.passes.spec import spec_problems

from ..conftest import NOW

NAME = "memory_census"

#: The whole pass: what it reads, its contract, its prompt, its offline answer, its body and its SPEC. It shows the
#: model every live memory and asks which categories hold how many; offline, the answer is counted from the inputs.
TOY_PASS = '''
"""Memory census — counts the live memories by category (a toy pass)."""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping
from typing import Any

from pydantic import Field

from dream_assets.llm.contracts import Contract, ModelCall
from dream_assets.llm.offline import OFFLINE_BACKEND
from dream_assets.llm.prompts import render_memory_entry
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


def census(ctx: PassContext) -> PassReport:
    report = PassReport(PASS)
    entries = ctx.store.memories.list_live()
    inputs = {"entries": [{"id": e.id, "category": e.category} for e in entries]}
    response = call_model(ctx, report, SPEC.model_call, render_memory_census(entries), inputs)
    if response is None:
        return report
    for row in response.categories:
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
    enabled_by=None,  # no option of its own: always on
    reads=("memory_corpus",),
    model_call=ModelCall(
        name=PASS,
        contract=MemoryCensusResponse,
        directive_file="memory-census.md",
        directive_option=None,
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
    options = DreamOptions()

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
