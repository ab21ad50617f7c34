"""What an operator reads: `dream undo --list` (real changes per pass, what is still undoable), `dream status` (every
pass with its last run, status, reason, next run and model calls), the per-cycle report, and skipped passes that keep
their counts."""

from __future__ import annotations

import json
import shutil
from datetime import timedelta
from pathlib import Path

import pytest

from dream_assets.cli import main
from dream_assets.cycle import run_cycle
from dream_assets.cycle_report import build_cycle_report, write_cycle_report
from dream_assets.demo import build_demo_profile
from dream_assets.options_loader import dream_options
from dream_assets.passes.outcome import LEVEL_COUNTS, load_outcome
from dream_assets.passes.registry import PASSES
from dream_assets.profile import AgentProfile
from dream_assets.store import open_store
from dream_assets.store.connection import close_all

from ..conftest import NOW

CYCLE = "cycle-1"
SECOND = "cycle-2"
LATER = NOW + timedelta(hours=1)
NAMES = [p.name for p in PASSES]


@pytest.fixture(scope="module")
def two_cycles(tmp_path_factory) -> Path:
    """The small demo agent after a first cycle (merges, purges) and a second one an hour later (gated passes skip)."""
    root = tmp_path_factory.mktemp("ops") / "demo"
    profile = AgentProfile(root)
    build_demo_profile(profile, NOW, n_memories=120)
    options = dream_options(ConsolidationMinInterval=timedelta(0))
    first = run_cycle(profile, options, NOW, cycle_id=CYCLE)
    assert all(r.status == "completed" for r in first), [(r.pass_name, r.status, r.reason) for r in first]
    run_cycle(profile, options, LATER, cycle_id=SECOND)
    close_all()
    return root


@pytest.fixture
def agent(two_cycles, tmp_path) -> AgentProfile:
    copy = tmp_path / "agents" / "demo"
    shutil.copytree(two_cycles, copy)
    return AgentProfile(copy)


def _list_lines(capsys, profile: AgentProfile) -> dict[tuple[str, str], str]:
    assert main(["undo", "--profile", str(profile.root), "--list"]) == 0
    lines = capsys.readouterr().out.splitlines()
    rows = {}
    for line in lines[1:]:
        cycle, _day, _time, pass_name, rest = line.split(maxsplit=4)
        rows[(cycle, pass_name)] = rest
    return rows


# --- dream undo --list ----------------------------------------------------------------------------------------------


def test_undo_list_counts_real_changes_per_pass_and_review_stamps_apart(agent, capsys):
    store = open_store(agent)
    changes = store.changes.list(CYCLE)
    stamps = sum(1 for c in changes if c.kind == "stamped")
    real = {
        p: sum(1 for c in changes if c.pass_name == p and c.kind != "stamped") for p in {c.pass_name for c in changes}
    }
    assert stamps and real["memory_consolidation"] and real["archive_purge"]
    rows = _list_lines(capsys, agent)
    consolidation = rows[(CYCLE, "memory_consolidation")]
    n = real["memory_consolidation"]
    assert consolidation.startswith(f"{n} change(s) (")
    assert f"{n} still undoable" in consolidation
    assert f"{stamps} review stamp(s), not changes" in consolidation
    assert rows[(CYCLE, "archive_purge")].startswith(
        f"{real['archive_purge']} change(s) ({real['archive_purge']} purged)"
    )
    # every line still starts with the cycle id; the newest cycle is last
    assert list(rows)[-1][0] in (CYCLE, SECOND)


def test_undo_list_follows_a_partial_undo(agent, capsys):
    before = _list_lines(capsys, agent)
    n = open_store(agent).changes.by_pass(CYCLE)
    purged = next(r for r in n if r.pass_name == "archive_purge").changes
    assert (
        main(
            [
                "undo",
                "--profile",
                str(agent.root),
                "--cycle",
                CYCLE,
                "--pass",
                "archive_purge",
                "--now",
                (LATER + timedelta(minutes=5)).isoformat(),
            ]
        )
        == 0
    )
    capsys.readouterr()
    after = _list_lines(capsys, agent)
    assert f"{purged} still undoable" in before[(CYCLE, "archive_purge")]
    assert "0 still undoable" in after[(CYCLE, "archive_purge")]
    assert after[(CYCLE, "memory_consolidation")] == before[(CYCLE, "memory_consolidation")]
    # the undo is its own cycle, which can itself be undone; its kinds say what it did: purged entries put back
    assert after[(f"undo-{CYCLE}", "undo")].startswith(
        f"{purged} change(s) ({purged} unpurged), {purged} still undoable"
    )


# --- dream status ---------------------------------------------------------------------------------------------------


def test_status_shows_every_pass_with_last_run_status_reason_next_run_and_model_calls(agent, capsys):
    assert main(["status", "--profile", str(agent.root), "--now", LATER.isoformat(), "--full"]) == 0
    out = capsys.readouterr().out
    blocks = _status_blocks(out)
    assert list(blocks) == NAMES
    for name, block in blocks.items():
        record = load_outcome(agent, name)
        assert record is not None and record["cycle_id"] == SECOND
        assert block[0].split()[1] == record["status"]
        assert "last run 2026-11-30 13:00 UTC" in block[0] and "model calls " in block[0]
        assert any(line.startswith("next run: ") for line in block)
    gated = blocks["skill_consolidation"]
    assert gated[0].split()[1] == "skipped"
    assert any(line.startswith("reason: change gate: input unchanged") for line in gated)
    # next forced run: last completed (NOW) + DreamPassMaxSkipInterval (7 days)
    assert any("next forced run 2026-12-07 12:00 UTC" in line for line in gated)
    ledger = json.loads(agent.ledger_path.read_text())["passes"]
    for name, rec in ledger.items():  # fingerprints in full
        assert any(rec["fingerprint"] in line for line in blocks[name]), name


def test_status_shows_the_consolidation_floor_and_long_fingerprints_as_a_labelled_prefix(agent, capsys):
    (agent.root / "dream.toml").write_text('ConsolidationMinInterval = "PT6H"\n')
    assert main(["status", "--profile", str(agent.root), "--now", LATER.isoformat()]) == 0
    blocks = _status_blocks(capsys.readouterr().out)
    consolidation = " ".join(blocks["memory_consolidation"])
    assert "held back until 2026-11-30 19:00 UTC (ConsolidationMinInterval PT6H)" in consolidation
    long = [
        fp
        for fp in (r["fingerprint"] for r in json.loads(agent.ledger_path.read_text())["passes"].values())
        if len(fp) > 80
    ]
    if long:
        text = "\n".join(line for b in blocks.values() for line in b)
        assert f"(first 80 of {len(long[0])} characters; --full shows all)" in text


def _status_blocks(out: str) -> dict[str, list[str]]:
    blocks: dict[str, list[str]] = {}
    current = None
    for line in out.splitlines()[1:]:
        if line.startswith("  ") and not line.startswith("   "):
            current = line.split()[0]
            blocks[current] = [line.strip()]
        elif current is not None:
            blocks[current].append(line.strip())
    return blocks


# --- skipped passes keep their counts -------------------------------------------------------------------------------


def test_a_skipped_pass_records_the_numeric_keys_of_its_last_completed_run(agent):
    record = load_outcome(agent, "skill_consolidation")
    assert record["status"] == "skipped" and record["reason"].startswith("change gate")
    completed = record["last_completed"]["counts"]
    assert set(completed) <= set(record["counts"])
    for key, value in completed.items():
        expected = value if key in LEVEL_COUNTS else 0
        if key == "skills":
            expected = len(open_store(agent).skills.list())
        assert record["counts"][key] == expected, key
    assert set(record["last_completed"]["usage"]) <= set(record["usage"])
    assert all(v == 0 for v in record["usage"].values())


def test_a_skipped_consolidation_keeps_the_live_count_measured_now(agent):
    from dream_assets.cycle import run_cycle as run

    store = open_store(agent)
    live = store.memories.counts()["live"]
    later = LATER + timedelta(hours=1)
    options = dream_options(ConsolidationMinInterval=timedelta(days=1))
    [report] = run(agent, options, later, cycle_id="cycle-3", only=["memory_consolidation"])
    assert report.status == "skipped" and report.reason.startswith("minimum interval")
    assert report.counts["live"] == live
    assert report.counts["merged"] == 0 and report.counts["archived"] == 0


# --- the cycle report -----------------------------------------------------------------------------------------------


def test_report_of_the_first_cycle_lists_merges_purges_model_calls_and_the_undo_commands(agent, capsys):
    store = open_store(agent)
    merges = [c for c in store.changes.list(CYCLE) if c.kind == "created" and c.pass_name == "memory_consolidation"]
    report = build_cycle_report(agent, store, CYCLE, NAMES, profile_arg="data/agents/demo")
    # the second cycle replaced most pass records: the first cycle's report keeps only what is left of it
    path = write_cycle_report(agent, report)
    assert path == agent.cycle_reports_dir / f"{CYCLE}.md"
    text = path.read_text()
    assert "## Undo" in text and f"dream undo --profile data/agents/demo --cycle {CYCLE}" in text
    assert "--pass archive_purge" in text and "--pass memory_consolidation" in text
    assert merges


@pytest.mark.slow  # a whole cycle through `dream run`
def test_dream_report_prints_the_last_cycle_and_a_cycle_run_through_the_cli_writes_it(tmp_path, capsys, monkeypatch):
    monkeypatch.delenv("DAGSTER_HOME", raising=False)
    monkeypatch.setenv("DREAM__ConsolidationMinInterval", "0")
    profile_dir = tmp_path / "agents" / "demo"
    assert main(["run", "--profile", str(profile_dir), "--demo", "--memories", "120", "--now", NOW.isoformat()]) == 0
    capsys.readouterr()
    profile = AgentProfile(profile_dir)
    store = open_store(profile)
    [cycle] = {c.cycle_id for c in store.changes.list()}
    assert main(["report", "--profile", str(profile_dir)]) == 0
    out = capsys.readouterr().out
    assert out.startswith(f"# Dream cycle {cycle}")
    merged = sum(1 for c in store.changes.list(cycle) if c.kind == "created" and c.pass_name == "memory_consolidation")
    assert f"## Merged ({merged})" in out
    purged = sum(1 for c in store.changes.list(cycle) if c.kind == "purged")
    assert f"archive_purge: {purged} change(s) ({purged} purged), {purged} still undoable" in out
    assert "## Protected" in out and "above the high-value floor" in out
    calls = sum(int(load_outcome(profile, n)["model_calls"]) for n in NAMES)
    assert calls > 0 and f"Model calls: {calls};" in out
    assert f"dream undo --profile {profile_dir} --cycle {cycle}" in out
    saved = profile.cycle_reports_dir / f"{cycle}.md"
    assert saved.read_text().startswith(f"# Dream cycle {cycle}")
    # after undoing the cycle, the report says what is left to undo: nothing
    assert main(["undo", "--profile", str(profile_dir), "--cycle", cycle, "--now", LATER.isoformat()]) == 0
    capsys.readouterr()
    assert main(["report", "--profile", str(profile_dir), "--cycle", cycle]) == 0
    assert "Nothing of this cycle is left to undo" in capsys.readouterr().out


def test_report_without_any_cycle_says_how_to_run_one(tmp_path, capsys):
    profile = AgentProfile(tmp_path / "agents" / "empty").ensure()
    open_store(profile).memories.counts()
    assert main(["report", "--profile", str(profile.root)]) == 0
    assert "no cycle has run for agent empty yet" in capsys.readouterr().out


def test_only_the_newest_reports_are_kept(agent):
    store = open_store(agent)
    for i in range(4):
        write_cycle_report(agent, build_cycle_report(agent, store, f"c{i}", NAMES), keep=2)
    assert len(list(agent.cycle_reports_dir.glob("*.md"))) == 2
