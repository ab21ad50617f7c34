"""Every model pass sends a JSON schema whose id fields name only the ids its prompt shows (an ``enum``), so a model
decoding under the schema (llama.cpp's grammar) cannot name an entry, a skill or a definition it was not shown. Checked
on what really goes over HTTP to the local OpenAI-compatible test server, for every model call of the registry: a new
pass with id fields is covered without touching this test."""

from __future__ import annotations

import json
import re
from typing import Any

import pytest

from dream_assets.llm.contracts import MAX_ENUM_IDS, call_schema, id_fields
from dream_assets.options_loader import dream_options
from dream_assets.passes.registry import MODEL_CALLS
from dream_assets_tests.conftest import NOW
from dream_assets_tests.openai_server import NOTHING_TO_CHANGE, OpenAITestServer, reply


def _at(schema: dict[str, Any], where: str) -> dict[str, Any]:
    node: Any = schema
    for key in where.split("."):
        node = node[int(key)] if isinstance(node, list) else node[key]
    return node


def _allowed(node: dict[str, Any]) -> list[str] | None:
    """The ids a sent id field allows: its enum (a list's items', an optional id's text branch), [] for a list that
    may hold none, None when it is not narrowed at all."""
    if node.get("type") == "array":
        return [] if node.get("maxItems") == 0 else node["items"].get("enum")
    if "anyOf" in node:
        return next((b["enum"] for b in node["anyOf"] if "enum" in b), None)
    return node.get("enum")


def _nodes(node: Any):
    if isinstance(node, dict):
        yield node
        for value in node.values():
            yield from _nodes(value)
    elif isinstance(node, list):
        for value in node:
            yield from _nodes(value)


def _cannot_be_given(schema: dict[str, Any], where: str) -> bool:
    """The items that hold the field ``where`` (``$defs.<Item>...``) are in lists that may hold none."""
    if not where.startswith("$defs."):
        return False
    ref = "#/$defs/" + where.split(".")[1]
    lists = [n for n in _nodes(schema) if n.get("type") == "array" and (n.get("items") or {}).get("$ref") == ref]
    return bool(lists) and all(n.get("maxItems") == 0 for n in lists)


@pytest.mark.slow  # every model pass of the small demo through HTTP
def test_every_model_pass_sends_a_schema_naming_only_the_ids_it_shows(demo, monkeypatch, capsys):
    from dream_assets.cli import main

    with OpenAITestServer(default=reply(NOTHING_TO_CHANGE)) as server:
        monkeypatch.setenv("DREAM__LlmBaseUrl", server.base_url)
        monkeypatch.setenv("DREAM__LlmModel", "test-model")
        main(["check-model", "--profile", str(demo.root), "--now", NOW.isoformat()])
        requests = [r for r in server.requests if r.path.endswith("/chat/completions")]
    capsys.readouterr()

    seen: dict[str, int] = {}
    narrowed: dict[str, int] = {}
    for request in requests:
        sent = request.body.get("response_format") or {}
        if sent.get("type") != "json_schema" or sent["json_schema"]["name"] not in MODEL_CALLS:
            continue  # check-model's own probes of the endpoint
        name = sent["json_schema"]["name"]
        schema = sent["json_schema"]["schema"]
        prompt = request.body["messages"][-1]["content"]
        assert "x-shown-ids" not in json.dumps(schema)  # the marker is the host's, never sent
        seen[name] = seen.get(name, 0) + 1
        for where in id_fields(MODEL_CALLS[name].contract):
            allowed = _allowed(_at(schema, where))
            if allowed is None and _cannot_be_given(schema, where):
                allowed = []  # nothing of the kind is shown: no item naming one can be given
            assert allowed is not None, f"{name}: {where} is sent without the ids the call shows"
            not_shown = [i for i in allowed if not re.search(rf"(?<![\w/-]){re.escape(i)}(?![\w/-])", prompt)]
            assert not not_shown, f"{name}: {where} allows ids its prompt does not show: {not_shown}"
            narrowed[name] = narrowed.get(name, 0) + len(allowed)

    with_ids = {name for name, call in MODEL_CALLS.items() if id_fields(call.contract)}
    assert with_ids - set(seen) == set(), "model passes with id fields the demo did not exercise"
    # the passes that act on what they show did offer it: a merge, a supersession, a rewrite can name its entries
    for name in ("memory_consolidation", "skill_consolidation", "skill_optimization", "contradiction_sweep"):
        assert narrowed.get(name), f"{name} offered no id to name: {seen}"


def test_a_call_schema_offers_exactly_the_shown_ids_and_none_where_none_are_shown():
    memory = MODEL_CALLS["memory_consolidation"].contract
    schema = call_schema(memory, {"entries": [{"id": "m-1"}, {"id": "m-2"}, {"id": "m-1"}, {"id": ""}]})
    assert schema["properties"]["toDelete"]["items"]["enum"] == ["m-1", "m-2"]
    assert schema["$defs"]["MemorySave"]["properties"]["sourceIds"]["items"]["enum"] == ["m-1", "m-2"]

    # preference inference shows no entry: its answer may name none (the directive says they stay empty)
    prefs = call_schema(MODEL_CALLS["preference_inference"].contract, {"sessions": {"s1": []}})
    assert prefs["properties"]["toDelete"]["maxItems"] == 0
    assert prefs["$defs"]["MemorySave"]["properties"]["sourceIds"]["maxItems"] == 0

    # a skill rewrite keeps the name of a skill it was sent; a guide of skill consolidation may be new
    rewrite = call_schema(MODEL_CALLS["skill_optimization"].contract, {"at_risk": [{"name": "a/b"}], "sparse": []})
    assert rewrite["$defs"]["SkillRewrite"]["properties"]["name"]["enum"] == ["a/b"]
    merge = call_schema(MODEL_CALLS["skill_consolidation"].contract, {"skills": [{"name": "a/b"}, {"name": "a/c"}]})
    assert "enum" not in merge["$defs"]["SkillSave"]["properties"]["name"]
    assert merge["properties"]["toDelete"]["items"]["enum"] == ["a/b", "a/c"]


def test_a_huge_eligible_set_is_sent_without_an_enum_and_the_host_still_checks_ids():
    memory = MODEL_CALLS["memory_consolidation"].contract
    entries = [{"id": f"m-{i}"} for i in range(MAX_ENUM_IDS + 1)]
    schema = call_schema(memory, {"entries": entries})
    assert "enum" not in schema["properties"]["toDelete"]["items"]
    assert "maxItems" not in schema["properties"]["toDelete"]


def test_an_answer_naming_an_id_it_was_not_shown_is_still_refused_by_the_host(profile, store):
    """The enum is a hint a model without constrained decoding ignores: the host's own check stays."""
    from dream_assets.passes import runner
    from dream_assets.passes.context import PassContext
    from dream_assets.passes.registry import by_name
    from dream_assets.save_pipeline import save_memory

    a = save_memory(store.memories, "Alice's dentist is Dr. Kim in Lyon.", category="people/alice", now=NOW).entry
    b = save_memory(
        store.memories, "Alice sees Dr. Kim, a dentist in Lyon.", category="people/alice", now=NOW, dedupe=False
    ).entry
    answer = {"toDelete": ["not-shown-id"], "toSave": []}
    with OpenAITestServer(default=reply(json.dumps({"toDelete": [], "toSave": []}))) as server:
        server.script(reply(json.dumps(answer)))
        options = dream_options(LlmBackend="openai", LlmBaseUrl=server.base_url, LlmModel="m", LlmMaxRetries=0)
        report = runner.run_pass(by_name("memory_consolidation"), PassContext(profile, options, NOW, _store=store))
        sent = server.requests[0].body["response_format"]["json_schema"]["schema"]
    assert sent["properties"]["toDelete"]["items"]["enum"] == ["e1", "e2"]  # the short names the prompt shows
    assert {e.id for e in store.memories.list_live()} >= {a.id, b.id}
    assert report.counts["ignored_ids"] == 1  # the id it was not shown is ignored, with a count


def test_long_ids_are_shown_by_short_names_and_an_answer_naming_them_applies_to_the_real_entries(profile, store):
    """A 32-hex id is about 20 tokens for a small model: the prompt and the schema show ``e1``, ``e2`` ..., and the
    answer's ids are mapped back before the pass reads them, so the merge archives the real entries."""
    from dream_assets.passes import runner
    from dream_assets.passes.context import PassContext
    from dream_assets.passes.registry import by_name
    from dream_assets.save_pipeline import save_memory

    a = save_memory(store.memories, "Alice's dentist is Dr. Kim in Lyon.", category="people/alice", now=NOW).entry
    b = save_memory(
        store.memories, "Alice sees Dr. Kim, a dentist in Lyon.", category="people/alice", now=NOW, dedupe=False
    ).entry
    merged = "Alice's dentist is Dr. Kim in Lyon."
    answer = {
        "toDelete": ["e1", "e2"],
        "toSave": [{"content": merged, "category": "people/alice", "sourceIds": ["e1", "e2"]}],
    }
    with OpenAITestServer(default=reply(json.dumps({"toDelete": [], "toSave": []}))) as server:
        server.script(reply(json.dumps(answer)))
        options = dream_options(LlmBackend="openai", LlmBaseUrl=server.base_url, LlmModel="m", LlmMaxRetries=0)
        report = runner.run_pass(by_name("memory_consolidation"), PassContext(profile, options, NOW, _store=store))
        prompt = server.requests[0].body["messages"][-1]["content"]
    assert a.id not in prompt and b.id not in prompt and "id=e1 " in prompt and "id=e2 " in prompt
    assert report.counts["merged"] == 1 and report.counts.get("ignored_ids", 0) == 0, report.reason
    assert store.memories.get(a.id).is_archived and store.memories.get(b.id).is_archived
    [live] = store.memories.list_live()
    assert set(json.loads(live.metadata["mergedFrom"])) == {a.id, b.id}
