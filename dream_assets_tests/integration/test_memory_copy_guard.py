"""A small model copies instead of answering: the memory passes (memory consolidation, preference inference,
contradiction sweep) refuse a placeholder or the directive's own example per item, with its reason, count it, and
report the pass as failed and unstamped — so the next cycle asks again — while the rest of the answer applies."""

from __future__ import annotations

import json
from datetime import timedelta

import pytest

from dream_assets.llm.directives import load_directive
from dream_assets.options_loader import dream_options
from dream_assets.passes import runner
from dream_assets.passes.context import PassContext
from dream_assets.passes.registry import by_name
from dream_assets.save_pipeline import save_memory
from dream_assets.store.ledger import PassLedger
from dream_assets.store.log_records import ConversationTurn
from dream_assets.store.logs import append_event
from dream_assets_tests.conftest import NOW
from dream_assets_tests.openai_server import NOTHING_TO_CHANGE, OpenAITestServer, Reply, reply


def put(store, content, *, days_ago=10, metadata=None, category="people/alice"):
    at = NOW - timedelta(days=days_ago)
    return save_memory(store.memories, content, category=category, metadata=metadata or {}, now=at, dedupe=False).entry


def run_pass(name, profile, store, server, *, cycle_id="c1", now=NOW):
    options = dream_options(LlmBackend="openai", LlmBaseUrl=server.base_url, LlmModel="m", LlmMaxRetries=0)
    return runner.run_pass(by_name(name), PassContext(profile, options, now, cycle_id=cycle_id, _store=store))


def live_texts(store):
    return {e.content for e in store.memories.list_live()}


def example_of(pass_name, profile):
    """The content the pass's directive gives in its example answer (what a copying model repeats)."""
    text, _ = load_directive(by_name(pass_name).model_call, profile, dream_options())
    return text


# ------------------------------------------------------------------------------------------- memory consolidation
def test_consolidation_refuses_placeholders_and_the_example_keeps_the_sources_and_fails_unstamped(profile, store):
    a = put(store, "Alice's dentist is Dr. Kim at the Lyon clinic.")
    b = put(store, "Alice goes to Dr. Kim, a dentist at the Lyon clinic.", days_ago=5)
    put(store, "Bob plays chess on Tuesdays.", category="people/bob")
    example = "Nadia's bakery in Examplia opens at 7:00 on weekdays."
    assert example in example_of("memory_consolidation", profile)
    answer = {
        "toDelete": [],
        "toSave": [
            {"content": "...", "category": "people/alice", "sourceIds": [a.id, b.id]},
            {"content": example, "category": "general", "sourceIds": []},
            {"content": "<content>", "category": "general", "sourceIds": []},
            {"content": "Carol moved to Oslo in May 2024.", "category": "people/carol", "sourceIds": []},
        ],
    }
    nothing = reply(json.dumps({"toDelete": [], "toSave": []}))
    with OpenAITestServer(default=nothing) as server:
        server.script(reply(json.dumps(answer)))
        report = run_pass("memory_consolidation", profile, store, server)
    assert report.status == "failed" and "copied" in report.reason, report.reason
    assert report.counts["copied"] == 3
    refused = [c.detail for c in report.changes if c.kind == "copied"]
    assert any("placeholder" in d for d in refused) and any("directive's example" in d for d in refused)
    assert any("template slot" in d for d in refused)
    texts = live_texts(store)
    assert {a.content, b.content, "Carol moved to Oslo in May 2024."} <= texts  # the rest of the answer applied
    assert not texts & {"...", example, "<content>"}
    assert PassLedger(profile, now=NOW).get("memory_consolidation") is None  # not stamped
    # The entries the copied merge named are not settled by it: the model is asked about them again.
    assert len(server.requests) >= 2
    shown = server.requests[-1].body["messages"][-1]["content"]
    assert a.content in shown and b.content in shown


def test_a_copied_merge_repair_is_refused_and_the_merge_stays_rejected(profile, store):
    a = put(store, "Alice's dentist is Dr. Kim at the Lyon clinic.")
    b = put(store, "Alice goes to Dr. Kim, a dentist at the Lyon clinic, every March.", days_ago=5)
    lossy = {"toSave": [{"content": "Alice has a dentist.", "sourceIds": [a.id, b.id]}], "toDelete": []}
    with OpenAITestServer() as server:
        server.script(
            reply(json.dumps(lossy)), reply(json.dumps({"content": "Nadia's bakery in Examplia opens at 7:00."}))
        )
        report = run_pass("memory_consolidation", profile, store, server)
    assert report.status == "failed" and report.counts["copied"] == 1
    assert {a.content, b.content} <= live_texts(store)


# ------------------------------------------------------------------------------------------- preference inference
def test_preference_inference_refuses_the_example_and_placeholders_and_retries_the_turns(profile, store):
    for i, text in enumerate(("use 24h times please", "again: 24-hour times!", "use ripgrep, not grep")):
        append_event(profile, "conversation", ConversationTurn(NOW - timedelta(minutes=30 - i), f"s{i}", "user", text))
    example = "Give distances to the Examplia office in kilometres, not miles (corrected twice)."
    assert example in example_of("preference_inference", profile)
    answer = {
        "toDelete": [],
        "toSave": [
            {"content": example, "category": "user-preferences/inferred", "tags": ["inferred"]},
            {"content": "TODO", "category": "user-preferences/inferred", "tags": ["inferred"]},
            {"content": "Prefer ripgrep over grep for code searches.", "tags": ["inferred", "tools"]},
        ],
    }
    with OpenAITestServer() as server:
        server.script(reply(json.dumps(answer)))
        report = run_pass("preference_inference", profile, store, server)
    assert report.status == "failed" and report.counts["copied"] == 2, report.reason
    texts = live_texts(store)
    assert "Prefer ripgrep over grep for code searches." in texts
    assert example not in texts and "TODO" not in texts
    assert PassLedger(profile, now=NOW).pending("preference_inference") is not None  # asked again next cycle


# ------------------------------------------------------------------------------------------- contradiction sweep
@pytest.mark.parametrize(
    "reason", ["Nadia moved from Examplia to Lyon: the Examplia address is stale.", "...", "<reason>"]
)
def test_a_supersession_whose_reason_is_copied_is_refused_and_asked_again(profile, store, reason):
    paris = put(store, "Alice lives in Paris near the Louvre.", days_ago=40, metadata={"subjectTime": "2024-01"})
    berlin = put(
        store, "Alice moved to Berlin, she lives in Kreuzberg now.", days_ago=2, metadata={"subjectTime": "2024-06"}
    )
    assert '"reason": "Nadia moved from Examplia to Lyon: the Examplia address is stale."' in example_of(
        "contradiction_sweep", profile
    )
    copied = {"supersessions": [{"winnerId": berlin.id, "loserId": paris.id, "reason": reason}]}
    with OpenAITestServer() as server:
        server.script(reply(json.dumps(copied)), reply(json.dumps({"supersessions": []})))
        report = run_pass("contradiction_sweep", profile, store, server)
        assert report.status == "failed" and report.counts["copied"] == 1, report.reason
        assert report.counts["superseded"] == 0
        assert paris.content in live_texts(store)
        assert PassLedger(profile, now=NOW).get("contradiction_sweep") is None
        again = run_pass("contradiction_sweep", profile, store, server, cycle_id="c2", now=NOW + timedelta(hours=2))
        assert again.model_calls == 1 and again.status == "completed"


# ------------------------------------------------------------------------------------------- dream check-model
@pytest.mark.slow  # every model pass of the small demo through HTTP
def test_check_model_calls_a_model_that_copies_into_memories_not_fit(demo, capsys, monkeypatch):
    """A model that answers memory consolidation with the directive's example and a placeholder is reported NOT fit
    for that pass, with the copies counted, and the agent's memories are untouched (check-model applies nothing)."""
    import re

    from dream_assets.cli import main
    from dream_assets.store import open_store

    def decide(body: dict) -> Reply:
        system = body["messages"][0]["content"]
        if system.startswith("# Memory consolidation"):
            example = "Nadia's bakery in Examplia opens at 7:00 on weekdays."
            saves = [{"content": example, "sourceIds": []}, {"content": "...", "sourceIds": []}]
            return reply(json.dumps({"toDelete": [], "toSave": saves}))
        return reply(NOTHING_TO_CHANGE)

    store = open_store(demo, dream_options())
    before = {e.id: e.content for e in store.memories.list_live()}
    store.close()
    with OpenAITestServer(default=Reply(decide=decide)) as server:
        monkeypatch.setenv("DREAM__LlmBaseUrl", server.base_url)
        monkeypatch.setenv("DREAM__LlmModel", "test-model")
        code = main(["check-model", "--profile", str(demo.root), "--now", NOW.isoformat()])
    out = capsys.readouterr().out
    (line,) = [x for x in out.splitlines() if x.startswith("  memory_consolidation ")]
    assert " failed " in line and re.search(r"refused by the host: .*copied [1-9]", line), line
    assert "NOT fit for: " in out and "memory_consolidation" in out.rsplit("NOT fit for: ", 1)[1]
    assert code == 1
    store = open_store(demo, dream_options())
    assert {e.id: e.content for e in store.memories.list_live()} == before
    store.close()
