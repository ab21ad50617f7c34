"""Switching the model is honest: a ledger stamp names the backend and model that answered, a stamp of another one
does not satisfy the change gate, so every gated pass runs once with the new model (and says so), then is gated
again. Real stores, the real HTTP test server."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta

import pytest

from dream_assets.cycle import run_cycle
from dream_assets.gates import GATED_PASSES, gate_status
from dream_assets.options_loader import dream_options
from dream_assets.store.ledger import PassLedger
from dream_assets_tests.openai_server import NOTHING_TO_CHANGE, OpenAITestServer, Reply, reply

NOW = datetime(2026, 11, 30, 12, 0, tzinfo=UTC)


def _reports(profile, options, now, cycle_id):
    return {r.pass_name: r for r in run_cycle(profile, options, now, cycle_id=cycle_id)}


@pytest.mark.slow  # four cycles of the small demo
def test_switching_to_a_real_model_reruns_each_gated_pass_exactly_once(demo):
    offline = dream_options(ConsolidationMinInterval=timedelta(0))
    _reports(demo, offline, NOW, "c1")
    second = _reports(demo, offline, NOW + timedelta(hours=1), "c2")
    held = sorted(name for name, r in second.items() if r.counts.get("gated"))
    assert held, "the second offline cycle holds its gated passes back"
    ledger = PassLedger(demo)
    assert {ledger.get(name).model for name in held} == {"offline"}

    with OpenAITestServer(default=Reply(decide=lambda body: reply(NOTHING_TO_CHANGE))) as server:
        options = offline.replace(LlmBaseUrl=server.base_url, LlmModel="test-model", LlmJsonMode="off", LlmMaxRetries=0)
        # the sensors' view: the offline stamps do not count for the new model
        for name in [n for n in held if n in GATED_PASSES]:
            decision = gate_status(name, demo, options, NOW + timedelta(hours=2)).decision
            assert not decision.skip and "answered by offline" in decision.reason, (name, decision)

        third = _reports(demo, options, NOW + timedelta(hours=2), "c3")
        for name in held:
            report = third[name]
            assert not report.counts.get("gated"), (name, report.reason)
            assert any("model switch: the last run was answered by offline" in line for line in report.lines), name
            assert PassLedger(demo).get(name).model == "openai:test-model", name
            if report.status != "skipped":  # a pass with nothing new to show (the sweep) completes without a call
                assert report.status == "completed", (name, report.reason)
                assert report.model_calls >= 1, name
                assert "(model switch: the last run was answered by offline" in report.summary, name
        assert sum(third[name].status == "completed" for name in held) >= 3
        calls_after_switch = len(server.requests)
        assert calls_after_switch >= len(held)

        fourth = _reports(demo, options, NOW + timedelta(hours=3), "c4")
        for name in held:
            assert fourth[name].counts.get("gated") == 1, (name, fourth[name].reason)
            assert "model switch" not in fourth[name].summary
        assert len(server.requests) == calls_after_switch  # nothing ran twice
        for name in [n for n in held if n in GATED_PASSES]:
            assert gate_status(name, demo, options, NOW + timedelta(hours=3)).decision.skip, name


def test_a_ledger_record_without_a_model_reads_as_offline_and_keeps_its_fields(demo):
    ledger = PassLedger(demo)
    ledger.stamp("skill_consolidation", "fp", NOW, model="openai:big")
    record = PassLedger(demo).get("skill_consolidation")
    assert record.model == "openai:big"
    assert ledger.gate("skill_consolidation", "fp", NOW, timedelta(days=7), "openai:big").skip
    switched = ledger.gate("skill_consolidation", "fp", NOW, timedelta(days=7), "openai:small")
    assert not switched.skip and "answered by openai:big" in switched.reason
    demo.ledger_path.write_text(
        json.dumps(
            {
                "version": 1,
                "passes": {"skill_consolidation": {"fingerprint": "fp", "lastRunAt": "2026-11-30T12:00:00Z"}},
            }
        )
    )
    old = PassLedger(demo)
    assert old.gate("skill_consolidation", "fp", NOW, timedelta(days=7), "offline").skip
    assert not old.gate("skill_consolidation", "fp", NOW, timedelta(days=7), "openai:m").skip


@pytest.mark.slow  # every model pass of the small demo through HTTP
def test_check_model_rehearses_every_model_pass_and_changes_nothing(demo, capsys, monkeypatch):
    from dream_assets.cli import main
    from dream_assets.passes.registry import PASSES
    from dream_assets.store import open_store

    before = sorted(p.name for p in demo.root.rglob("*"))
    store = open_store(demo, dream_options())
    live = store.memories.counts()["live"]
    store.close()
    with OpenAITestServer(default=Reply(decide=lambda body: reply(NOTHING_TO_CHANGE))) as server:
        monkeypatch.setenv("DREAM__LlmBaseUrl", server.base_url)
        monkeypatch.setenv("DREAM__LlmModel", "test-model")
        monkeypatch.setenv("DREAM__LlmPriceInputPerMillion", "1")
        code = main(["check-model", "--profile", str(demo.root), "--now", NOW.isoformat()])
        assert server.requests  # the real prompts went to the endpoint
    out = capsys.readouterr().out
    for spec in PASSES:
        if spec.uses_model:
            assert f"  {spec.name} " in out, spec.name
    assert "model openai:test-model; fits window: yes; parsed: yes" in out
    assert code in (0, 1)
    assert "recommended for this endpoint: DREAM__LlmContextTokens=" in out
    # nothing written to the agent but what was measured of the endpoint (each call's timeout follows its speed)
    after = sorted(p.name for p in demo.root.rglob("*"))
    assert after == sorted([*before, demo.endpoint_profile_path.name])
    measured = json.loads(demo.endpoint_profile_path.read_text())["endpoints"]
    assert [facts["prompt_tps"] > 0 and facts["gen_tps"] > 0 for facts in measured.values()] == [True]
    store = open_store(demo, dream_options())
    assert store.memories.counts()["live"] == live
    store.close()


@pytest.mark.slow  # every model pass of the small demo through HTTP
def test_check_model_calls_a_model_that_copies_placeholders_not_fit(demo, capsys, monkeypatch):
    """A model that answers skill optimization with the directive's ``"content": "..."`` for every skill it is shown
    is reported NOT fit for that pass, with the refusals counted, and the agent's skills are untouched."""
    import re

    from dream_assets.cli import main
    from dream_assets.store import open_store

    def decide(body: dict) -> str:
        system, prompt = body["messages"][0]["content"], body["messages"][-1]["content"]
        if system.startswith("# Skill optimization"):
            names = re.findall(r"^### skill: (\S+)", prompt, flags=re.MULTILINE)
            return reply(json.dumps({"toDelete": [], "toSave": [{"name": n, "content": "..."} for n in names]}))
        return reply(NOTHING_TO_CHANGE)

    store = open_store(demo, dream_options())
    skills = {s.name: s.content for s in store.skills.list()}
    store.close()
    with OpenAITestServer(default=Reply(decide=decide)) as server:
        monkeypatch.setenv("DREAM__LlmBaseUrl", server.base_url)
        monkeypatch.setenv("DREAM__LlmModel", "test-model")
        code = main(["check-model", "--profile", str(demo.root), "--now", NOW.isoformat()])
    out = capsys.readouterr().out
    (line,) = [x for x in out.splitlines() if x.startswith("  skill_optimization ")]
    assert " failed " in line and re.search(r"refused by the host: .*copied [1-9]", line), line
    assert "NOT fit for: " in out and "skill_optimization" in out.rsplit("NOT fit for: ", 1)[1]
    assert code == 1
    store = open_store(demo, dream_options())
    assert {s.name: s.content for s in store.skills.list()} == skills
    store.close()
