"""Every pass's directive carries one short worked example of its answer (the one-cluster check two: a merge and a
distinct pair kept apart, which a small model needs to tell the cases apart), written so that copying it is detectable:
its text is about a made-up subject (``model_text.EXAMPLE_MARKER``) and names ids no input has. A model that answers
a pass with that example is refused per item, the refusals are counted as ``copied``, and ``dream check-model``
reports the pass as a failure — for every model pass of the registry, so a new pass is covered without touching this
test."""

from __future__ import annotations

import json
import re

import pytest

from dream_assets.llm.directives import load_directive
from dream_assets.options_loader import dream_options
from dream_assets.passes.model_text import EXAMPLE_MARKER, copied, directive_examples
from dream_assets.passes.registry import MODEL_CALLS, PASSES
from dream_assets_tests.conftest import NOW
from dream_assets_tests.openai_server import NOTHING_TO_CHANGE, OpenAITestServer, Reply, reply

_JSON_BLOCK = re.compile(r"```json\n(.*?)\n```", re.S)


def example_answers(directive: str) -> list[str]:
    """The directive's worked example answers (its JSON blocks), as a copying model returns one."""
    blocks = _JSON_BLOCK.findall(directive)
    for block in blocks:
        json.loads(block)  # each example is a valid answer
    return blocks


def example_answer(directive: str) -> str:
    """The directive's first worked example answer: the one that writes content, as a copying model returns it."""
    return example_answers(directive)[0]


def _texts(value: object) -> list[str]:
    if isinstance(value, dict):
        return [t for v in value.values() for t in _texts(v)]
    if isinstance(value, list):
        return [t for v in value for t in _texts(v)]
    return [value] if isinstance(value, str) else []


@pytest.mark.parametrize("name", sorted(MODEL_CALLS))
def test_every_directive_has_one_worked_example_about_a_made_up_subject(name):
    directive, _ = load_directive(MODEL_CALLS[name], None, dream_options())
    blocks = example_answers(directive)
    assert len(blocks) == (2 if name == "cluster_check" else 1)
    assert directive_examples(directive)  # the guard knows its texts
    for block in blocks:
        answer = json.loads(block)
        assert answer and EXAMPLE_MARKER in json.dumps(answer).lower()  # whatever field a model copies names it
        assert not [t for t in _texts(answer) if t and copied(t) is not None]  # content, never a placeholder


@pytest.mark.slow  # every model pass of the small demo through HTTP
def test_a_model_copying_each_directives_example_is_refused_and_every_pass_reported_failed(demo, capsys, monkeypatch):
    from dream_assets.cli import main
    from dream_assets.store import open_store

    def copy_the_example(body: dict) -> Reply:
        name = ((body.get("response_format") or {}).get("json_schema") or {}).get("name")
        if name not in MODEL_CALLS:
            return reply(NOTHING_TO_CHANGE)  # check-model's own probes
        return reply(example_answer(body["messages"][0]["content"]))

    store = open_store(demo, dream_options())
    before = ({e.id: e.content for e in store.memories.list_live()}, {s.name: s.content for s in store.skills.list()})
    store.close()
    with OpenAITestServer(default=Reply(decide=copy_the_example)) as server:
        monkeypatch.setenv("DREAM__LlmBaseUrl", server.base_url)
        monkeypatch.setenv("DREAM__LlmModel", "test-model")
        code = main(["check-model", "--profile", str(demo.root), "--now", NOW.isoformat()])
    out = capsys.readouterr().out
    print(out)
    assert code == 1
    for spec in PASSES:
        if spec.model_call is None:
            continue
        (line,) = [x for x in out.splitlines() if x.startswith(f"  {spec.name} ")]
        assert " failed " in line and re.search(r"copied [1-9]", line), line
    store = open_store(demo, dream_options())
    after = ({e.id: e.content for e in store.memories.list_live()}, {s.name: s.content for s in store.skills.list()})
    store.close()
    assert after == before  # check-model applies nothing
