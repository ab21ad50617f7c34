"""The `dream` command as a user runs it: init the demo, run a cycle through Dagster, undo it."""

from dream_assets.cli import main
from dream_assets.profile import AgentProfile
from dream_assets.store import open_store

NOW = "2026-11-30T12:00:00Z"


def test_run_creates_the_demo_runs_every_pass_and_a_second_run_calls_no_model(tmp_path, capsys, monkeypatch):
    monkeypatch.delenv("DAGSTER_HOME", raising=False)
    monkeypatch.setenv("DREAM__ConsolidationMinInterval", "0")
    profile = tmp_path / "agents" / "demo"
    assert main(["run", "--profile", str(profile), "--demo", "--now", NOW]) == 0
    out = capsys.readouterr().out
    assert "demo agent ready" in out and "(model backend: offline)" in out
    for name in ("log_retention", "archive_purge", "importance_decay", "memory_consolidation", "skill_gap_detection",
                 "skill_consolidation", "skill_optimization", "preference_inference", "wisp_failure_analysis",
                 "tier_routing_review"):
        assert f"  {name} " in out
    assert "FAILED" not in out and " failed " not in out
    assert main(["run", "--profile", str(profile), "--now", "2026-11-30T13:00:00Z"]) == 0
    second = capsys.readouterr().out
    assert "model calls this cycle: 0 answered (offline)" in second


def test_undo_puts_a_cycle_back(tmp_path, capsys, monkeypatch):
    monkeypatch.delenv("DAGSTER_HOME", raising=False)
    profile = tmp_path / "agents" / "demo"
    assert main(["init", "--profile", str(profile), "--demo", "--now", NOW]) == 0
    store = open_store(AgentProfile(profile))
    before = {e.id: (e.content, e.archived_at) for e in store.memories.list_all()}
    assert main(["run", "--profile", str(profile), "--now", NOW]) == 0
    capsys.readouterr()
    assert main(["undo", "--profile", str(profile), "--list"]) == 0
    cycles = [line.split()[0] for line in capsys.readouterr().out.splitlines() if line.strip()]
    assert cycles
    assert main(["undo", "--profile", str(profile), "--cycle", cycles[-1], "--pass", "memory_consolidation",
                 "--now", NOW]) == 0
    after = {e.id: (e.content, e.archived_at) for e in store.memories.list_all()}
    # every entry that existed before is back as it was; entries the merges created are archived, not deleted
    assert all(after[i][0] == before[i][0] and after[i][1] == before[i][1] for i in before if i in after)
    created = set(after) - set(before)
    assert created and all(after[i][1] is not None for i in created)


def test_bad_option_stops_with_a_clear_message(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("DREAM__Interval", "often")
    assert main(["status", "--profile", str(tmp_path / "x")]) == 2
    assert "invalid value 'often' for option Interval" in capsys.readouterr().err


def test_import_logs_loads_history_into_the_warehouse_once(tmp_path, capsys):
    from datetime import date

    from dream_assets.store.warehouse import read_day

    old = tmp_path / "wisp-2025.jsonl"
    old.write_text(
        '{"timestamp":"2025-03-01T10:00:00Z","wispId":"w1","description":"Sync CRM","success":false,"failedStep":"auth"}\n'
        '{"timestamp":"2025-03-02T10:00:00Z","wispId":"w2","description":"Sync CRM","success":true}\n'
        'not json at all\n')
    profile = tmp_path / "agents" / "legacy"
    args = ["import-logs", "--profile", str(profile), "--kind", "wisp-executions", str(old), "--now", NOW]
    assert main(args) == 0
    assert "3 line(s) imported" in capsys.readouterr().out
    assert main(args) == 0
    assert "0 line(s) imported" in capsys.readouterr().out   # idempotent
    rows = read_day(AgentProfile(profile), "wisp-executions", date(2025, 3, 1))
    assert [r["wispId"] for r in rows] == ["w1"]


def _model_env(monkeypatch, base_url: str) -> None:
    monkeypatch.delenv("DAGSTER_HOME", raising=False)
    monkeypatch.setenv("DREAM__Llm__BaseUrl", base_url)
    monkeypatch.setenv("DREAM__Llm__Model", "test-model")
    monkeypatch.setenv("DREAM__LlmTimeout", "1")
    monkeypatch.setenv("DREAM__LlmMaxRetries", "0")
    monkeypatch.setenv("DREAM__LlmJsonMode", "off")


def test_run_against_a_dead_endpoint_says_the_cycle_failed_and_why(tmp_path, capsys, monkeypatch):
    from dream_assets_tests.openai_server import refusing_base_url

    profile = tmp_path / "agents" / "demo"
    assert main(["init", "--profile", str(profile), "--demo", "--now", NOW]) == 0
    capsys.readouterr()
    with refusing_base_url() as url:
        _model_env(monkeypatch, url)
        assert main(["run", "--profile", str(profile), "--now", NOW]) == 1
    lines = capsys.readouterr().out.strip().splitlines()
    assert "model calls this cycle: 0 answered, 1 failed (openai)" in lines
    last = lines[-1]
    assert last.startswith("cycle FAILED — ")
    for name in ("memory_consolidation", "skill_gap_detection", "wisp_failure_analysis", "skill_consolidation",
                 "skill_optimization", "preference_inference", "tier_routing_review"):
        assert f"{name} failed: " in last
    assert "connection to" in last and "could not reach it earlier in this cycle" in last
    assert "log_retention failed" not in last and "archive_purge failed" not in last


def test_run_counts_answered_model_calls_apart_from_failed_ones(tmp_path, capsys, monkeypatch):
    import json

    from dream_assets_tests.openai_server import OpenAITestServer, Reply, client_error, reply

    every_key = json.dumps({"toSave": [], "toDelete": [], "findings": [], "failurePatterns": [],
                            "promotionNotes": {}, "skillAnnotations": []})

    def decide(body):   # the skill-gap and tier-routing calls are refused; every other pass gets a usable answer
        system = body["messages"][0]["content"]
        if system.startswith(("# Skill gap detection", "# Tier routing review")):
            return client_error(400, "this model cannot do that")
        return reply(every_key)

    profile = tmp_path / "agents" / "demo"
    assert main(["init", "--profile", str(profile), "--demo", "--now", NOW]) == 0
    capsys.readouterr()
    with OpenAITestServer(default=Reply(decide=decide)) as server:
        _model_env(monkeypatch, server.base_url)
        assert main(["run", "--profile", str(profile), "--now", NOW]) == 1
        calls = len(server.requests)
    out = capsys.readouterr().out
    assert calls >= 4
    assert f"model calls this cycle: {calls - 2} answered, 2 failed (openai)" in out
    last = out.strip().splitlines()[-1]
    assert "skill_gap_detection failed: " in last and "tier_routing_review failed: " in last
    assert "HTTP 400" in last and "memory_consolidation failed" not in last
