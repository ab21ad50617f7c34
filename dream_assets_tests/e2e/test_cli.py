"""The `dream` command as a user runs it: init the demo, run a cycle through Dagster, undo it."""

import os
import subprocess
import sys
from pathlib import Path

import pytest

from dream_assets.cli import main
from dream_assets.options_loader import dream_options
from dream_assets.profile import AgentProfile, discover_profiles
from dream_assets.store import open_store

NOW = "2026-11-30T12:00:00Z"


@pytest.mark.slow  # whole cycles on the full demo through `dream run`
def test_run_creates_the_demo_runs_every_pass_and_a_second_run_calls_no_model(tmp_path, capsys, monkeypatch):
    monkeypatch.delenv("DAGSTER_HOME", raising=False)
    monkeypatch.setenv("DREAM__ConsolidationMinInterval", "0")
    profile = tmp_path / "agents" / "demo"
    assert main(["run", "--profile", str(profile), "--demo", "--now", NOW]) == 0
    out = capsys.readouterr().out
    assert "demo agent ready" in out and "(model backend: offline)" in out
    for name in (
        "log_retention",
        "archive_purge",
        "importance_decay",
        "memory_consolidation",
        "skill_gap_detection",
        "skill_consolidation",
        "skill_optimization",
        "preference_inference",
        "wisp_failure_analysis",
        "tier_routing_review",
    ):
        assert f"  {name} " in out
    assert "FAILED" not in out and " failed " not in out
    assert main(["run", "--profile", str(profile), "--now", "2026-11-30T13:00:00Z"]) == 0
    second = capsys.readouterr().out
    assert "model calls this cycle: 0 answered (offline)" in second


@pytest.mark.slow  # a whole cycle through `dream run`
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
    assert (
        main(
            [
                "undo",
                "--profile",
                str(profile),
                "--cycle",
                cycles[-1],
                "--pass",
                "memory_consolidation",
                "--now",
                NOW,
            ]
        )
        == 0
    )
    after = {e.id: (e.content, e.archived_at) for e in store.memories.list_all()}
    # every entry that existed before is back as it was; entries the merges created are archived, not deleted
    assert all(after[i][0] == before[i][0] and after[i][1] == before[i][1] for i in before if i in after)
    created = set(after) - set(before)
    assert created and all(after[i][1] is not None for i in created)


def test_bad_option_stops_with_a_clear_message(tmp_path, capsys, monkeypatch):
    AgentProfile(tmp_path / "x").ensure()
    monkeypatch.setenv("DREAM__Interval", "often")
    assert main(["status", "--profile", str(tmp_path / "x")]) == 2
    assert "invalid value 'often' for option Interval" in capsys.readouterr().err


def test_import_logs_loads_history_into_the_warehouse_once(tmp_path, capsys):
    from datetime import date

    from dream_assets.store.warehouse import read_day

    old = tmp_path / "wisp-2025.jsonl"
    old.write_text(
        '{"timestamp":"2025-03-01T10:00:00Z","wispId":"w1","description":"Sync CRM",'
        '"success":false,"failedStep":"auth"}\n'
        '{"timestamp":"2025-03-02T10:00:00Z","wispId":"w2","description":"Sync CRM","success":true}\n'
        "not json at all\n"
    )
    profile = tmp_path / "agents" / "legacy"
    AgentProfile(profile).ensure()
    args = ["import-logs", "--profile", str(profile), "--kind", "wisp-executions", str(old), "--now", NOW]
    assert main(args) == 1  # a line was left out
    out, err = capsys.readouterr()
    assert "2 line(s) imported, 0 already there, 1 malformed, 0 of another kind" in out
    assert "not imported: wisp-2025.jsonl:3: not valid JSON" in err
    assert main(args) == 1
    assert "0 line(s) imported, 2 already there, 1 malformed" in capsys.readouterr().out  # idempotent
    rows = read_day(AgentProfile(profile), "wisp-executions", date(2025, 3, 1))
    assert [r["wispId"] for r in rows] == ["w1"]


def _model_env(monkeypatch, base_url: str) -> None:
    monkeypatch.delenv("DAGSTER_HOME", raising=False)
    monkeypatch.setenv("DREAM__Llm__BaseUrl", base_url)
    monkeypatch.setenv("DREAM__Llm__Model", "test-model")
    monkeypatch.setenv("DREAM__LlmTimeout", "1")
    monkeypatch.setenv("DREAM__LlmMaxRetries", "0")
    monkeypatch.setenv("DREAM__LlmJsonMode", "off")


def test_run_against_a_dead_endpoint_stops_before_the_cycle_with_one_line_naming_the_url(tmp_path, capsys, monkeypatch):
    from dream_assets_tests.openai_server import refusing_base_url

    profile = tmp_path / "agents" / "demo"
    assert main(["init", "--profile", str(profile), "--demo", "--now", NOW]) == 0
    capsys.readouterr()
    with refusing_base_url() as url:
        _model_env(monkeypatch, url)
        assert main(["run", "--profile", str(profile), "--now", NOW]) == 2
    captured = capsys.readouterr()
    [line] = captured.err.strip().splitlines()
    assert line.startswith(f"dream run: the model endpoint {url} is not reachable (GET /models: ")
    assert "no cycle was run" in line
    assert "succeeded" not in captured.out and "model calls this cycle" not in captured.out
    assert not AgentProfile(profile).ledger_path.exists() or "memory_consolidation" not in (
        AgentProfile(profile).ledger_path.read_text()
    )


@pytest.mark.slow  # a whole cycle through `dream run`
def test_run_counts_answered_model_calls_apart_from_failed_ones(tmp_path, capsys, monkeypatch):
    import json

    from dream_assets_tests.openai_server import OpenAITestServer, Reply, client_error, reply

    every_key = json.dumps(
        {
            "toSave": [],
            "toDelete": [],
            "findings": [],
            "failurePatterns": [],
            "promotionNotes": {},
            "skillAnnotations": [],
            "supersessions": [],
        }
    )

    def decide(
        body,
    ):  # the skill-gap and tier-routing calls are refused; every other pass gets a usable answer
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
    assert f"model calls this cycle: {calls - 2} answered, 2 failed (openai:test-model)" in out
    last = out.strip().splitlines()[-1]
    assert "skill_gap_detection failed: " in last and "tier_routing_review failed: " in last
    assert "HTTP 400" in last and "memory_consolidation failed" not in last


# --- misuse: a clear answer, nothing created -------------------------------------------------------------------


@pytest.mark.parametrize(
    "command",
    [
        ["status"],
        ["undo", "--list"],
        ["restore", "--id", "abc"],
        ["import-logs", "--kind", "tool-call", "x.jsonl"],
        ["run"],
        ["run", "--demo"],  # `make run PROFILE=data/agents/dmeo`: the demo is made only in a folder named demo
        ["init", "--demo", "--if-missing"],  # `make dev PROFILE=...`
        ["serve"],  # an MCP client's config with a typo: no new empty agent in the client's working directory
    ],
)
def test_a_mistyped_profile_is_refused_with_the_init_hint_and_nothing_is_created(tmp_path, capsys, command):
    root = tmp_path / "agents"
    AgentProfile(root / "demo").ensure()
    typo = root / "nope"
    assert main([*command[:1], "--profile", str(typo), *command[1:]]) == 2
    out, err = capsys.readouterr()
    assert f"no agent profile at {typo}" in err and f"dream init --profile {typo}" in err
    assert len(err.strip().splitlines()) == 1 and out == ""
    assert not typo.exists()
    assert [p.agent_id for p in discover_profiles(root)] == ["demo"]


def test_a_damaged_store_is_one_line_naming_it_and_the_traceback_only_with_verbose(tmp_path, capsys):
    profile = AgentProfile(tmp_path / "agents" / "a1").ensure()
    profile.store_path.write_bytes(b"not a database" * 100)
    for command in (["status"], ["undo", "--list"], ["restore", "--id", "x"]):  # report: the README test
        assert main([*command[:1], "--profile", str(profile.root), *command[1:]]) == 2
        out, err = capsys.readouterr()
        assert len(err.strip().splitlines()) == 1 and str(profile.store_path) in err, (command, err)
        assert "Traceback" not in err
    assert main(["status", "--profile", str(profile.root), "--verbose"]) == 2
    assert "Traceback (most recent call last)" in capsys.readouterr().err
    # no snapshot to rebuild from: refused, named, the damaged file untouched
    assert main(["rebuild", "--profile", str(profile.root)]) == 2
    err = capsys.readouterr().err
    assert f"no snapshot under {profile.snapshots_dir}" in err and len(err.strip().splitlines()) == 1
    assert profile.store_path.read_bytes() == b"not a database" * 100


def test_remove_takes_the_agent_out_of_the_instance_and_keeps_or_deletes_its_data(tmp_path, capsys, monkeypatch):
    import dagster as dg

    from dream_assets.orchestration.partitions import AGENTS

    home = tmp_path / "home"
    home.mkdir()
    monkeypatch.setenv("DAGSTER_HOME", str(home))
    root = tmp_path / "agents"
    kept, gone = AgentProfile(root / "kept").ensure(), AgentProfile(root / "gone").ensure()
    with dg.DagsterInstance.from_config(str(home)) as instance:
        instance.add_dynamic_partitions(AGENTS, ["kept", "gone", "deleted"])
    assert main(["remove", "--profile", str(kept.root), "--now", NOW]) == 0
    assert main(["remove", "--profile", str(gone.root), "--delete-data"]) == 0
    assert main(["remove", "--profile", str(root / "deleted")]) == 0  # its folder was deleted by hand
    out = capsys.readouterr().out
    with dg.DagsterInstance.from_config(str(home)) as instance:
        assert instance.get_dynamic_partitions(AGENTS) == []
    assert not kept.root.exists() and (root / ".removed" / "kept-20261130T120000Z" / "logs").is_dir()
    assert not gone.root.exists() and f"deleted its data at {gone.root}" in out
    assert f"no data at {root / 'deleted'}" in out
    assert list(discover_profiles(root)) == []  # the kept data is never registered again
    assert main(["remove", "--profile", str(kept.root)]) == 0
    assert "was not registered" in capsys.readouterr().out


def _agent_with_memories(tmp_path):
    from dream_assets.model import MemoryEntry, new_id, parse_ts

    profile = AgentProfile(tmp_path / "agents" / "a1").ensure()
    store = open_store(profile)
    at = parse_ts("2026-11-01T00:00:00Z")
    entries = [
        store.memories.put(
            MemoryEntry(
                id=new_id(),
                content=text,
                category="general",
                tags=(),
                importance=0.5,
                created_at=at,
                updated_at=at,
                last_seen_at=at,
                reinforcement_count=1,
                metadata={},
            )
        )
        for text in ("Ana Ruiz signed the Lisbon lease in 2025.", "The Oslo kickoff is on 3 March.")
    ]
    store.memories.archive(entries[0].id, now=at)
    store.close()
    return profile, entries


def test_restore_puts_an_archived_memory_back_as_an_undoable_change(tmp_path, capsys):
    profile, (archived, live) = _agent_with_memories(tmp_path)
    assert main(["restore", "--profile", str(profile.root), "--id", archived.id, "--now", NOW]) == 0
    out = capsys.readouterr().out
    assert f"restored memory {archived.id}: Ana Ruiz" in out
    cycle = out.split("recorded as cycle ")[1].split(";")[0]
    store = open_store(profile)
    assert not store.memories.get(archived.id).is_archived
    store.close()
    assert main(["undo", "--profile", str(profile.root), "--cycle", cycle, "--now", NOW]) == 0
    store = open_store(profile)
    assert store.memories.get(archived.id).is_archived
    store.close()


def test_restore_of_a_live_or_unknown_memory_says_so(tmp_path, capsys):
    profile, (_, live) = _agent_with_memories(tmp_path)
    assert main(["restore", "--profile", str(profile.root), "--id", live.id, "--now", NOW]) == 0
    out = capsys.readouterr().out
    assert f"memory {live.id} is live, not archived; nothing to restore" in out and "restored memory" not in out
    store = open_store(profile)
    assert store.changes.list() == []  # nothing recorded
    store.close()
    assert main(["restore", "--profile", str(profile.root), "--id", "no-such-id", "--now", NOW]) == 2
    assert "no memory with id 'no-such-id' in agent a1 (no such id); nothing restored" in capsys.readouterr().err


def test_import_logs_refuses_an_unknown_kind_and_a_missing_file_in_one_line(tmp_path, capsys):
    profile = AgentProfile(tmp_path / "agents" / "a1").ensure()
    good = tmp_path / "tools.jsonl"
    good.write_text('{"timestamp":"2025-03-01T10:00:00Z","sessionId":"s1","tool":"shell","success":true}\n')
    assert main(["import-logs", "--profile", str(profile.root), "--kind", "tool-calls", str(good)]) == 2
    captured = capsys.readouterr()
    assert "unknown log kind 'tool-calls': use one of skill-usage, tool-call," in captured.err
    assert "Traceback" not in captured.err and not (profile.warehouse_dir / "tool-calls").exists()
    missing = tmp_path / "missing.jsonl"
    assert main(["import-logs", "--profile", str(profile.root), "--kind", "tool-call", str(good), str(missing)]) == 2
    err = capsys.readouterr().err
    assert err.strip() == f"dream import-logs: cannot import {missing}: no such file"
    assert not (profile.warehouse_dir / "tool-call").exists()  # nothing imported when one file is missing


def test_import_logs_counts_lines_of_another_kind_and_suggests_the_kind(tmp_path, capsys):
    profile = AgentProfile(tmp_path / "agents" / "a1").ensure()
    tools = tmp_path / "tools.jsonl"
    tools.write_text(
        "".join(
            f'{{"timestamp":"2025-03-01T10:0{i}:00Z","sessionId":"s1","tool":"shell","success":true}}\n'
            for i in range(3)
        )
    )
    assert main(["import-logs", "--profile", str(profile.root), "--kind", "wisp-executions", str(tools)]) == 1
    out, err = capsys.readouterr()
    assert (
        "0 new line(s) in the wisp-executions warehouse, 0 already there, 0 malformed, 3 of another kind "
        "(3 tool-call)" in out
    )
    assert "did you mean --kind tool-call?" in err


def test_run_force_refuses_an_unknown_pass_with_the_list(tmp_path, capsys):
    profile = AgentProfile(tmp_path / "agents" / "a1").ensure()
    assert main(["run", "--profile", str(profile.root), "--force", "memory_consolidaton"]) == 2
    err = capsys.readouterr().err
    assert (
        "unknown pass(es) 'memory_consolidaton' to force" in err and "memory_consolidation, skill_gap_detection" in err
    )


@pytest.mark.slow  # whole cycles through `dream run`
def test_run_force_calls_a_held_pass_once_and_the_next_plain_cycle_is_gated_again(tmp_path, capsys, monkeypatch):
    import json

    monkeypatch.delenv("DAGSTER_HOME", raising=False)
    profile = tmp_path / "agents" / "demo"
    assert main(["run", "--profile", str(profile), "--demo", "--now", NOW]) == 0
    capsys.readouterr()

    def consolidation_line(out: str) -> str:
        return next(line for line in out.splitlines() if line.startswith("  memory_consolidation "))

    # an hour later nothing changed and the 6-hour floor holds; forced, consolidation calls the model anyway
    assert (
        main(
            [
                "run",
                "--profile",
                str(profile),
                "--now",
                "2026-11-30T13:00:00Z",
                "--force",
                "memory_consolidation",
                "--reason",
                "switched to a real model",
            ]
        )
        == 0
    )
    forced = capsys.readouterr().out
    assert "forced this run (change gate and minimum interval ignored once): memory_consolidation" in forced
    assert " completed " in consolidation_line(forced)
    assert "model calls this cycle: 1 answered (offline)" in forced
    ledger = json.loads((profile / "dream-pass-ledger.json").read_text())["passes"]
    assert ledger["memory_consolidation"]["forced"] == "switched to a real model"
    assert ledger["memory_consolidation"]["lastRunAt"].startswith("2026-11-30T13:00:00")

    assert main(["run", "--profile", str(profile), "--now", "2026-11-30T14:00:00Z"]) == 0
    plain = capsys.readouterr().out
    assert " skipped " in consolidation_line(plain) and "model calls this cycle: 0 answered (offline)" in plain


@pytest.mark.slow  # a whole cycle through `dream run`
def test_a_pass_whose_event_log_write_failed_is_reported_from_its_pass_record(tmp_path, capsys, monkeypatch):
    """The instance's database goes away as memory consolidation records its materialization: the pass applied its
    changes and stamped the ledger, so `dream run` shows it completed (from its pass record), never "not run"."""
    import shutil

    import dagster as dg

    from dream_assets.passes.outcome import load_outcome
    from dream_assets.profile import AgentProfile
    from dream_assets.store.ledger import PassLedger

    home = tmp_path / "dagster_home"
    home.mkdir()
    shutil.copy(Path(__file__).resolve().parents[2] / "deploy" / "dagster.yaml", home / "dagster.yaml")
    monkeypatch.setenv("DAGSTER_HOME", str(home))
    monkeypatch.setenv("DREAM__ConsolidationMinInterval", "0")
    handle = dg.DagsterInstance.handle_new_event
    outages = []

    def outage(self, event, *args, **kwargs):
        de = event.dagster_event
        if de is not None and de.event_type_value == "ASSET_MATERIALIZATION" and not outages:
            if de.asset_key.to_user_string() == "memory_consolidation":
                outages.append(de)  # once: the database is back for what follows
                raise ConnectionError("server closed the connection unexpectedly")
        return handle(self, event, *args, **kwargs)

    monkeypatch.setattr(dg.DagsterInstance, "handle_new_event", outage)
    root = tmp_path / "agents" / "demo"
    assert main(["run", "--profile", str(root), "--demo", "--now", NOW]) == 1
    out = capsys.readouterr().out
    record = load_outcome(AgentProfile(root), "memory_consolidation")
    assert record["status"] == "completed" and PassLedger(AgentProfile(root)).get("memory_consolidation")
    (line,) = [line for line in out.splitlines() if line.startswith("  memory_consolidation ")]
    assert " completed " in line and record["summary"] in line
    assert "Dagster's event log did not record memory_consolidation" in out
    assert "FAILED" in out  # the Dagster run did fail; the pass did not
    # and the UI shows the pass's outcome too, from its pass record, once the database is back
    with dg.DagsterInstance.get() as instance:
        event = instance.get_latest_materialization_event(dg.AssetKey("memory_consolidation"))
        (run,) = instance.get_runs(filters=dg.RunsFilter(job_name="dream_cycle"))
    meta = event.asset_materialization.metadata
    assert meta["status"].value == "completed" and "pass record of run" in meta["recorded_from"].value
    # the run is marked reconciled, so the daemon's reconciliation of failed runs does not record the pass again
    assert run.tags["dream/reconciled"] == "by dream run: memory_consolidation"


def _serve(cwd: Path, *args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    base = {k: v for k, v in os.environ.items() if not k.startswith("DREAM")}
    return subprocess.run(
        [sys.executable, "-m", "dream_assets.cli", "serve", *args],
        cwd=cwd,
        env={**base, **(env or {})},
        stdin=subprocess.DEVNULL,  # a stdio server that starts ends at once: the client closed the stream
        capture_output=True,
        text=True,
        timeout=300,
    )


@pytest.mark.slow  # `dream serve` subprocesses, as an MCP client starts them
def test_serve_refuses_a_missing_profile_or_profile_root_unless_told_to_create_it(tmp_path):
    """An MCP client starts `dream serve` in a working directory of its own: without --profile (the demo's default
    path) or with a mistyped one, it refused nothing and made ./data/agents/demo or the typo there, and saved there."""
    client_cwd = tmp_path / "client"
    client_cwd.mkdir()
    for args, path in (
        ((), client_cwd / "data" / "agents" / "demo"),
        (("--profile", "data/agents/my-agnet"), client_cwd / "data" / "agents" / "my-agnet"),
    ):
        done = _serve(client_cwd, *args)
        assert done.returncode == 2, (args, done.returncode, done.stderr)
        line = done.stderr.strip()
        assert len(line.splitlines()) == 1 and f"no agent profile at {path}" in line and "dream init --profile" in line
        assert done.stdout == ""  # nothing on the MCP stream
    assert list(client_cwd.iterdir()) == []
    missing_root = tmp_path / "no-such-root"
    done = _serve(client_cwd, "--http", "127.0.0.1:1", "--profile-root", str(missing_root))
    assert done.returncode == 2 and f"no profile root at {missing_root}" in done.stderr and "dream init" in done.stderr
    assert len(done.stderr.strip().splitlines()) == 1 and not missing_root.exists()
    # Told to, it creates the profile and serves it (here: until the client closes the stream at once).
    done = _serve(client_cwd, "--profile", "data/agents/fresh", "--create")
    assert done.returncode == 0, done.stderr
    assert (client_cwd / "data" / "agents" / "fresh" / "logs").is_dir()


def test_dream_status_options_shows_every_value_and_where_it_came_from(tmp_path, capsys, monkeypatch):
    profile = tmp_path / "agent"
    assert main(["init", "--profile", str(profile)]) == 0
    (profile / "dream.toml").write_text('[passes.memory_consolidation]\nmodel = "big"\n', encoding="utf-8")
    for key in [k for k in os.environ if k.upper().startswith("DREAM")]:
        monkeypatch.delenv(key)
    monkeypatch.setenv("DREAM__SkillGapEnabled", "false")
    capsys.readouterr()
    assert main(["status", "--options", "--profile", str(profile)]) == 0
    lines = {line.split()[0]: line for line in capsys.readouterr().out.splitlines()[1:]}
    assert len(lines) == len(dream_options().layout())
    consolidation = lines["passes.memory_consolidation.model"].split()
    assert consolidation[1:4] == ["=", '"big"', "[MemoryConsolidationModel]"]
    assert lines["passes.memory_consolidation.model"].endswith(
        f"{profile / 'dream.toml'}: passes.memory_consolidation.model"
    )
    assert lines["passes.skill_gap_detection.enabled"].split()[1:4] == ["=", "false", "[SkillGapEnabled]"]
    assert lines["passes.skill_gap_detection.enabled"].endswith("DREAM__SkillGapEnabled")
    assert lines["schedule.interval"].split()[1:] == ["=", "4h", "[Interval]", "default"]


def test_dream_status_names_the_embedding_threshold_in_use_and_where_it_came_from(tmp_path, capsys, monkeypatch):
    profile = tmp_path / "agent"
    assert main(["init", "--profile", str(profile)]) == 0
    for key in [k for k in os.environ if k.upper().startswith("DREAM")]:
        monkeypatch.delenv(key)
    capsys.readouterr()
    assert main(["status", "--profile", str(profile)]) == 0
    assert "embeddings: none (EmbeddingModel is empty)" in capsys.readouterr().out

    monkeypatch.setenv("DREAM__EmbeddingModel", "multilingual-e5-small-q4")
    monkeypatch.setenv("DREAM__EmbeddingBaseUrl", "http://127.0.0.1:9/v1")  # status reads what is kept: no call
    assert main(["status", "--profile", str(profile)]) == 0
    assert "near-duplicate threshold 0.950 (table: multilingual-e5-small" in capsys.readouterr().out

    monkeypatch.setenv("DREAM__EmbeddingSimilarityThreshold", "0.93")
    assert main(["status", "--profile", str(profile)]) == 0
    assert "near-duplicate threshold 0.930 (option EmbeddingSimilarityThreshold)" in capsys.readouterr().out
