"""Linked markdown memory folders: read into the store with provenance, dreamed over, written back without surprises."""

from __future__ import annotations

import json
import os
import shutil
from datetime import timedelta
from pathlib import Path

import pytest

from dream_assets import agent_memory
from dream_assets.changes_model import ChangeRow, SuccessorHow
from dream_assets.cli import main
from dream_assets.cycle import run_cycle
from dream_assets.file_safety import is_temp_file
from dream_assets.folders import link_folder, plan_write_back, read_folder, write_back
from dream_assets.folders.formats import INDEX_LINE_BUDGET
from dream_assets.llm.client import ModelClient
from dream_assets.llm.scripted import ScriptedBackend
from dream_assets.options_loader import dream_options
from dream_assets.profile import AgentProfile
from dream_assets.save_pipeline import save_memory
from dream_assets.store import open_store
from dream_assets.text.coverage import specifics_of
from dream_assets_tests.conftest import NOW

FIXTURES = Path(__file__).parent.parent / "fixtures" / "folders"
FORMATS = ["claude-code", "openclaw", "markdown"]


def _folder(tmp_path: Path, fmt: str) -> Path:
    folder = tmp_path / "memory" / fmt
    shutil.copytree(FIXTURES / fmt, folder)
    return folder


def _files(folder: Path) -> dict[str, tuple[bytes, int]]:
    return {
        p.relative_to(folder).as_posix(): (p.read_bytes(), p.stat().st_mtime_ns)
        for p in sorted(folder.rglob("*"))
        if p.is_file()
    }


def _live(profile) -> dict[str, str]:
    return {e.id: e.content for e in open_store(profile).memories.list_live()}


def _linked(profile, tmp_path, fmt):
    folder = _folder(tmp_path, fmt)
    link_folder(profile, folder, fmt)
    return folder


def _by_text(profile, needle: str):
    return next(e for e in open_store(profile).memories.list_all() if needle in e.content)


# ------------------------------------------------------------------ reading


def test_a_claude_code_folder_gives_one_memory_per_note_with_its_front_matter_and_not_the_index(profile, tmp_path):
    _linked(profile, tmp_path, "claude-code")
    report = read_folder(profile, now=NOW)
    assert report.status == "completed", report.reason
    live = open_store(profile).memories.list_live()
    assert len(live) == 9
    assert not any("](" in e.content for e in live)  # index lines point to topic files, they are not memories
    rule = _by_text(profile, "real Postgres 16")
    assert rule.category == "claude-code/feedback"
    assert rule.metadata["folder.file"] == "feedback_testing.md"
    assert rule.metadata["fm.type"] == "feedback"
    assert rule.metadata["fm.related"] == "[project_release.md]"
    assert rule.metadata["fm.originSessionId"] == "4c8d3a18-7f47-44f5-a26a-000000000001"
    freeze = _by_text(profile, "branch is cut")
    assert json.loads(freeze.metadata["folder.heading"]) == ["Release freeze"]


def test_an_openclaw_workspace_reads_memory_and_daily_notes_but_not_the_dream_diary(profile, tmp_path):
    _linked(profile, tmp_path, "openclaw")
    assert read_folder(profile, now=NOW).status == "completed"
    files = {e.metadata["folder.file"] for e in open_store(profile).memories.list_live()}
    assert files == {"MEMORY.md", "memory/2026-04-01.md", "memory/2026-04-02-standup.md"}
    berlin = _by_text(profile, "Europe/Berlin")
    assert json.loads(berlin.metadata["folder.heading"]) == ["Long-term memory", "Preferences"]
    assert berlin.category == "openclaw/long-term"


def test_a_markdown_folder_keeps_a_bullet_with_its_continuation_lines_as_one_memory(profile, tmp_path):
    _linked(profile, tmp_path, "markdown")
    assert read_folder(profile, now=NOW).status == "completed"
    sow = _by_text(profile, "San Marzano")
    assert "mid-May" in sow.content
    assert sow.metadata["folder.file"] == "projects/garden.md"
    assert json.loads(sow.metadata["folder.heading"]) == ["Garden", "Tomatoes"]
    assert _by_text(profile, "Bosch F016800")  # a numbered item
    assert _by_text(profile, "70 EUR")  # a `*` bullet, non-ASCII text


@pytest.mark.parametrize("fmt", FORMATS)
def test_reading_the_same_folder_twice_changes_nothing(profile, tmp_path, fmt):
    _linked(profile, tmp_path, fmt)
    read_folder(profile, now=NOW)
    store = open_store(profile)
    before = ([e.to_dict() for e in store.memories.list_all()], len(store.changes.list(f"agent-{NOW:%Y-%m-%d}")))
    state = profile.memory_folder_state_path.read_bytes()
    again = read_folder(profile, now=NOW)
    assert again.status == "completed"
    after = ([e.to_dict() for e in store.memories.list_all()], len(store.changes.list(f"agent-{NOW:%Y-%m-%d}")))
    assert after == before
    assert profile.memory_folder_state_path.read_bytes() == state


# ------------------------------------------------------------------ cycles and write-back


@pytest.mark.parametrize("fmt", FORMATS)
def test_a_cycle_with_nothing_to_do_rewrites_no_file(profile, tmp_path, fmt):
    folder = _linked(profile, tmp_path, fmt)
    run_cycle(profile, dream_options(), NOW)  # the first cycle may merge the fixture's near-duplicates
    before = _files(folder)
    reports = {r.pass_name: r for r in run_cycle(profile, dream_options(), NOW)}
    assert reports["memory_folder_read"].status == "completed"
    assert reports["memory_folder_write"].status == "completed"
    assert reports["memory_folder_write"].counts["files_written"] == 0
    assert _files(folder) == before  # bytes and modification times


def _merge_release_notes(request):
    if request.pass_name != "memory_consolidation":
        raise AssertionError(f"unexpected model call of {request.pass_name}")
    entries = request.inputs["entries"]
    ids = [e["id"] for e in entries if "4.2" in e["content"]]
    if len(ids) < 2:
        return {"toDelete": [], "toSave": []}
    return {
        "toDelete": [],
        "toSave": [
            {
                "content": "The merge freeze for release 4.2 begins on 2026-03-05; Dana Whitfield owns the release.",
                "sourceIds": ids,
            }
        ],
    }


def _scripted_cycle(profile, answer, cycle_id=None):
    options = dream_options(ConsolidationExactFoldEnabled=False, ContradictionSweepEnabled=False)
    client = ModelClient(ScriptedBackend(answer), profile=profile, options=options)
    reports = run_cycle(profile, options, NOW, client_factory=lambda: client, cycle_id=cycle_id)
    return {r.pass_name: r for r in reports}


def test_a_merge_by_the_model_rewrites_only_the_merged_notes_and_archives_the_other(profile, tmp_path):
    folder = _linked(profile, tmp_path, "claude-code")
    before = _files(folder)
    reports = _scripted_cycle(profile, _merge_release_notes)
    assert reports["memory_consolidation"].status == "completed", reports["memory_consolidation"].reason
    text = (folder / "project_release.md").read_text(encoding="utf-8")
    original = before["project_release.md"][0].decode("utf-8")
    assert text.startswith(original.split("# Release freeze")[0])  # the front matter, byte for byte
    assert text.count("4.2") == 1
    assert "- Non-critical merges wait until the branch is cut on 2026-03-12.\n" in text
    archived = (folder / "archive" / "project_release.md").read_text(encoding="utf-8")
    assert "Merge freeze for release 4.2 begins 2026-03-05, owned by Dana Whitfield." in archived
    after = _files(folder)
    untouched = {k for k in before if k != "project_release.md"}
    assert {k: after[k] for k in untouched} == {k: before[k] for k in untouched}


def test_undo_of_the_cycle_puts_the_files_back_as_they_were(profile, tmp_path, capsys):
    folder = _linked(profile, tmp_path, "claude-code")
    read_folder(profile, now=NOW)  # the read's saves are the agent's, not the cycle's
    before = {k: v[0] for k, v in _files(folder).items()}
    _scripted_cycle(profile, _merge_release_notes, cycle_id="merge-cycle")
    assert (folder / "project_release.md").read_bytes() != before["project_release.md"]
    assert main(["undo", "--profile", str(profile.root), "--cycle", "merge-cycle"]) == 0
    assert f"put back {folder / 'project_release.md'}" in capsys.readouterr().out
    after = {k: v[0] for k, v in _files(folder).items() if not k.startswith("archive/")}
    assert after == before
    live = set(_live(profile).values())
    assert "Merge freeze for release 4.2 begins 2026-03-05, owned by Dana Whitfield." in live
    # the folder and the store agree again: a write-back now has nothing to do
    assert plan_write_back(profile, now=NOW).changes == []


def test_undo_leaves_a_file_a_person_edited_after_the_cycle(profile, tmp_path, capsys):
    folder = _linked(profile, tmp_path, "claude-code")
    _scripted_cycle(profile, _merge_release_notes, cycle_id="merge-cycle")
    path = folder / "project_release.md"
    edited = path.read_text(encoding="utf-8") + "- Added by hand.\n"
    path.write_text(edited, encoding="utf-8")
    assert main(["undo", "--profile", str(profile.root), "--cycle", "merge-cycle"]) == 1
    out, err = capsys.readouterr()
    assert f"NOT put back {path}: edited since the cycle wrote it" in err
    assert "1 refused (1 file(s) of the linked folder, named above)" in out
    assert path.read_text(encoding="utf-8") == edited


def test_every_specific_of_every_note_is_still_in_the_folder_after_a_cycle(profile, tmp_path):
    """Names, numbers and dates of every note before the cycle are in a live note or in archive/ after it."""
    folder = _linked(profile, tmp_path, "claude-code")
    specifics = {s.text for p in folder.rglob("*.md") for s in specifics_of(p.read_text(encoding="utf-8"))}
    assert len(specifics) > 10
    _scripted_cycle(profile, _merge_release_notes)
    after = "\n".join(p.read_text(encoding="utf-8") for p in folder.rglob("*.md"))
    missing = sorted(s for s in specifics if s not in after)
    assert not missing


def test_a_topic_file_with_every_note_archived_moves_to_archive_and_leaves_the_index(profile, tmp_path):
    folder = _linked(profile, tmp_path, "claude-code")
    read_folder(profile, now=NOW)
    dash = _by_text(profile, "Grafana")
    agent_memory.forget(profile, dash.id, reason="board retired", now=NOW, active=False)
    index_before = (folder / "MEMORY.md").read_text(encoding="utf-8")
    report = write_back(profile, now=NOW)
    assert report.status == "completed", report.reason
    assert not (folder / "reference_dashboards.md").exists()
    assert "Grafana" in (folder / "archive" / "reference_dashboards.md").read_text(encoding="utf-8")
    index = (folder / "MEMORY.md").read_text(encoding="utf-8")
    assert "reference_dashboards.md" not in index
    assert index == "".join(ln for ln in index_before.splitlines(True) if "reference_dashboards.md" not in ln)
    assert index.count("\n") <= INDEX_LINE_BUDGET


def test_a_persons_edit_wins_and_the_dreams_change_is_retried_next_cycle(profile, tmp_path):
    folder = _linked(profile, tmp_path, "openclaw")
    read_folder(profile, now=NOW)
    server = _by_text(profile, "Hetzner CX22")
    agent_memory.forget(profile, server.id, reason="moved to a new host", now=NOW, active=False)
    path = folder / "MEMORY.md"
    edited = path.read_text(encoding="utf-8") + "- Allergic to penicillin.\n"
    path.write_text(edited, encoding="utf-8")  # the person edits after the last read
    plan = plan_write_back(profile, now=NOW)
    assert any("MEMORY.md: edited since the last read" in line for line in plan.left)
    assert "MEMORY.md" not in {c.rel for c in plan.changes}
    write_back(profile, now=NOW)
    assert path.read_text(encoding="utf-8") == edited
    # next cycle: the edit is read, then the dream's archive of the server note is written
    assert read_folder(profile, now=NOW).status == "completed"
    assert _by_text(profile, "penicillin").metadata["folder.file"] == "MEMORY.md"
    assert write_back(profile, now=NOW).status == "completed"
    text = path.read_text(encoding="utf-8")
    assert "Hetzner" not in text and "- Allergic to penicillin.\n" in text
    assert "Hetzner CX22" in (folder / "archive" / "MEMORY.md").read_text(encoding="utf-8")


def test_a_note_a_person_removed_is_archived_in_the_store_not_deleted(profile, tmp_path):
    folder = _linked(profile, tmp_path, "markdown")
    read_folder(profile, now=NOW)
    boiler = _by_text(profile, "boiler")
    path = folder / "inbox.md"
    path.write_text(
        path.read_text(encoding="utf-8").replace("Call the landlord about the boiler before 2026-05-01.\n\n", "")
    )
    assert read_folder(profile, now=NOW).status == "completed"
    entry = open_store(profile).memories.get(boiler.id)
    assert entry is not None and entry.is_archived


def test_sync_plan_prints_the_diff_and_writes_nothing(profile, tmp_path, capsys):
    folder = _linked(profile, tmp_path, "markdown")
    read_folder(profile, now=NOW)
    agent_memory.forget(profile, _by_text(profile, "Passport").id, reason="renewed", now=NOW, active=False)
    before = _files(folder)
    assert main(["sync", "--plan", "--profile", str(profile.root), "--now", "2026-11-30T12:00:00Z"]) == 0
    out = capsys.readouterr().out
    assert "--- a/inbox.md" in out and "-* Passport renewal costs 70 EUR at the Bürgeramt." in out
    assert "+++ b/archive/inbox.md" in out
    assert _files(folder) == before
    assert main(["sync", "--profile", str(profile.root), "--now", "2026-11-30T12:00:00Z"]) == 0
    assert "Passport" not in (folder / "inbox.md").read_text(encoding="utf-8")


def test_dream_link_stores_the_folder_and_refuses_an_unknown_format(profile, tmp_path, capsys):
    folder = _folder(tmp_path, "openclaw")
    assert main(["link", "--profile", str(profile.root), "--folder", str(folder), "--format", "openclaw"]) == 0
    link = json.loads(profile.memory_folder_link_path.read_text())
    assert link.pop("linked_at")  # from then on, what the agent keeps is written into the folder too
    assert link == {"folder": str(folder), "format": "openclaw"}
    missing = tmp_path / "nowhere"
    assert main(["link", "--profile", str(profile.root), "--folder", str(missing), "--format", "markdown"]) == 2
    assert str(missing) in capsys.readouterr().err


# ------------------------------------------------------------------ hostile folders


def _symlink_out(folder: Path, tmp_path: Path) -> str:
    secret = tmp_path / "secret.md"
    secret.write_text("- the root password\n")
    (folder / "leak.md").symlink_to(secret)
    return "leak.md"


def _not_utf8(folder: Path, tmp_path: Path) -> str:
    (folder / "latin1.md").write_bytes("- Caf\xe9 au lait\n".encode("latin-1"))
    return "latin1.md"


def _huge(folder: Path, tmp_path: Path) -> str:
    with open(folder / "huge.md", "wb") as fh:
        fh.truncate(50 * 1024 * 1024)  # sparse: 50 MB on paper, nothing on disk
    return "huge.md"


def _front_matter_bomb(folder: Path, tmp_path: Path) -> str:
    lines = ["---", "a: &a [lol, lol, lol, lol, lol, lol, lol, lol, lol]"]
    lines += [f"{chr(98 + i)}: &{chr(98 + i)} [*{chr(97 + i)}, *{chr(97 + i)}, *{chr(97 + i)}]" for i in range(8)]
    lines += ["pad: " + "x" * 20_000, "---", "- a note", ""]
    (folder / "bomb.md").write_text("\n".join(lines))
    return "bomb.md"


def _dotdot(folder: Path, tmp_path: Path) -> str:
    (folder / "..notes.md").write_text("- hidden above\n")
    return "..notes.md"


@pytest.mark.parametrize("make", [_symlink_out, _not_utf8, _huge, _front_matter_bomb, _dotdot])
def test_a_hostile_file_refuses_the_read_naming_it_and_leaves_folder_and_store_as_they_were(profile, tmp_path, make):
    folder = _linked(profile, tmp_path, "markdown")
    read_folder(profile, now=NOW)
    (folder / "inbox.md").write_text("# Inbox\n\n- A new note.\n")  # would be read if the read went on
    name = make(folder, tmp_path)
    store_before, files_before = _live(profile), _files(folder)
    report = read_folder(profile, now=NOW)
    assert report.status == "failed"
    assert str(folder / name) in report.reason
    assert _live(profile) == store_before
    assert write_back(profile, now=NOW).status == "failed"  # nothing written from a folder that was not read
    assert _files(folder) == files_before


def test_front_matter_aliases_are_kept_as_text_never_expanded(profile, tmp_path):
    folder = _linked(profile, tmp_path, "claude-code")
    (folder / "user_alias.md").write_text(
        "---\nname: &n alias\ndescription: *n\ntype: user\nlist: &l [a, b]\nmore: [*l, *l]\n---\nLikes tea.\n"
    )
    assert read_folder(profile, now=NOW).status == "completed"
    tea = _by_text(profile, "Likes tea")
    assert tea.metadata["fm.more"] == "[*l, *l]"
    assert tea.metadata["fm.description"] == "*n"


def test_a_folder_that_disappears_fails_the_read_and_the_write_naming_it(profile, tmp_path):
    folder = _linked(profile, tmp_path, "openclaw")
    read_folder(profile, now=NOW)
    before = _live(profile)
    shutil.rmtree(folder)
    report = read_folder(profile, now=NOW)
    assert report.status == "failed" and str(folder) in report.reason
    assert _live(profile) == before
    written = write_back(profile, now=NOW)
    assert written.status == "failed" and str(folder) in written.reason
    assert not folder.exists()


def test_a_folder_removed_during_the_write_back_fails_naming_the_file(profile, tmp_path, monkeypatch):
    folder = _linked(profile, tmp_path, "markdown")
    read_folder(profile, now=NOW)
    agent_memory.forget(profile, _by_text(profile, "Passport").id, reason="renewed", now=NOW, active=False)
    plan = plan_write_back(profile, now=NOW)
    shutil.rmtree(folder)
    from dream_assets.folders import apply_write_back

    report = apply_write_back(profile, plan)
    assert report.status == "failed"
    assert str(folder) in report.reason
    assert not folder.exists()
    assert os.listdir(tmp_path / "memory") == []


@pytest.mark.slow  # reason: a whole cycle through Dagster (a few seconds)
def test_the_dagster_cycle_reads_the_folder_first_and_writes_it_back_last(profile, tmp_path, monkeypatch):
    from dream_assets.launch.cycle import run_cycle_in_dagster

    monkeypatch.delenv("DAGSTER_HOME", raising=False)
    folder = _linked(profile, tmp_path, "openclaw")
    run = run_cycle_in_dagster(profile, now=NOW.isoformat())
    assert run.ok, (run.failed, run.step_errors)
    assert run.summaries["memory_folder_read"][0] == "completed"
    assert {e.metadata.get("folder.file") for e in open_store(profile).memories.list_all()} >= {"MEMORY.md"}
    state = json.loads(profile.memory_folder_state_path.read_text())
    assert set(state["files"]) >= {"MEMORY.md", "memory/2026-04-01.md"}
    before = _files(folder)
    again = run_cycle_in_dagster(profile, now=(NOW + timedelta(hours=4)).isoformat())
    assert again.ok, (again.failed, again.step_errors)
    assert _files(folder) == before  # the second cycle had nothing to do


@pytest.mark.slow  # reason: a cycle through Dagster
def test_a_hostile_folder_fails_the_dagster_cycle_naming_the_file(profile, tmp_path, monkeypatch):
    from dream_assets.launch.cycle import run_cycle_in_dagster

    monkeypatch.delenv("DAGSTER_HOME", raising=False)
    folder = _linked(profile, tmp_path, "markdown")
    _not_utf8(folder, tmp_path)
    run = run_cycle_in_dagster(profile, now=NOW.isoformat())
    assert not run.ok
    assert "latin1.md" in run.failed.get("memory_folder_read", "") + " ".join(run.step_errors)
    assert _live(profile) == {}


def test_a_merged_text_whose_lines_would_read_as_new_notes_is_written_as_one_note(profile, tmp_path):
    folder = _linked(profile, tmp_path, "markdown")
    read_folder(profile, now=NOW)
    water = _by_text(profile, "2 litres")
    sow = _by_text(profile, "San Marzano")
    merged = "Water 2 litres per plant every second day.\n- Sow San Marzano seeds indoors in March; transplant mid-May."
    assert {water.category, sow.category} == {"markdown"}
    new = _merge_by_hand(profile, [water, sow], merged, "c1")
    assert write_back(profile, now=NOW).status == "completed"
    garden = (folder / "projects" / "garden.md").read_text(encoding="utf-8")
    assert "\n- Water 2 litres per plant every second day. - Sow San Marzano seeds" in garden
    again = read_folder(profile, now=NOW)  # the written note reads back as the merged memory, nothing new
    assert again.status == "completed" and not again.counts, again.counts
    assert new.id in _live(profile)


STALE = "The team standup is at 09:30 in room Ada."
LATER = "Since 2026-05-04 the team standup is at 10:00 in room Babbage."


def _standup_answer(request):
    """A scripted model: consolidation proposes nothing; the sweep says the later standup note supersedes the stale."""
    if request.pass_name == "memory_consolidation":
        return {"toDelete": [], "toSave": []}
    if request.pass_name != "contradiction_sweep":
        raise AssertionError(f"unexpected model call of {request.pass_name}")
    ids = {e["content"]: e["id"] for e in request.inputs["entries"]}
    if STALE not in ids or LATER not in ids:
        return {"supersessions": []}
    return {"supersessions": [{"winnerId": ids[LATER], "loserId": ids[STALE], "reason": "the standup moved"}]}


def test_a_note_superseded_by_a_later_one_moves_to_archive_and_undo_puts_both_files_back(profile, tmp_path, capsys):
    folder, before, reports = _standup_cycle(profile, tmp_path)
    assert reports["contradiction_sweep"].counts.get("superseded") == 1, reports["contradiction_sweep"].summary
    assert reports["memory_folder_write"].status == "completed", reports["memory_folder_write"].reason
    assert not (folder / "project_standup.md").exists()
    assert (folder / "archive" / "project_standup.md").read_bytes() == before["project_standup.md"]  # moved whole
    assert (folder / "project_standup_moved.md").read_bytes() == before["project_standup_moved.md"]  # the winner
    index = (folder / "MEMORY.md").read_text(encoding="utf-8")
    assert "(project_standup.md)" not in index and "(project_standup_moved.md)" in index
    loser = _by_text(profile, STALE)
    assert loser.is_archived and loser.metadata.get("supersededBy") == _by_text(profile, LATER).id

    assert main(["undo", "--profile", str(profile.root), "--cycle", "sweep-cycle"]) == 0
    out = capsys.readouterr().out
    assert f"put back {folder / 'project_standup.md'}" in out and f"put back {folder / 'MEMORY.md'}" in out
    after = {k: v[0] for k, v in _files(folder).items()}
    assert after == before
    assert {STALE, LATER} <= set(_live(profile).values())
    assert plan_write_back(profile, now=NOW).changes == []


def _long_index(folder: Path) -> str:
    """A MEMORY.md of 232 lines: entries, then notes, one of them a bullet of three lines across line 199."""
    lines = ["# Memory Index", ""] + [f"- [Topic {i}](topic_{i:03d}.md) — notes of topic {i}" for i in range(150)]
    lines += ["", "## Working notes", ""]
    lines += [f"- Ticket {4000 + i} belongs to Dana Whitfield." for i in range(41)]
    lines += ["- The on-call rota changes on 2026-06-01:", "  Ravi Patel takes Mondays,", "  Mei Tanaka Fridays."]
    lines += [f"- Ticket {5000 + i} belongs to Olu Okafor." for i in range(33)]
    text = "\n".join(lines) + "\n"
    (folder / "MEMORY.md").write_text(text, encoding="utf-8")
    return text


def test_an_index_over_its_line_budget_moves_the_rest_to_a_linked_topic_file_and_undo_puts_it_back(
    profile, tmp_path, capsys
):
    folder = _folder(tmp_path, "claude-code")
    original = _long_index(folder)
    assert len(original.splitlines()) > INDEX_LINE_BUDGET
    link_folder(profile, folder, "claude-code")
    read_folder(profile, now=NOW)
    live_before = _live(profile)
    before = {k: v[0] for k, v in _files(folder).items()}
    _scripted_cycle(profile, _merge_release_notes, cycle_id="trim-cycle")
    index = (folder / "MEMORY.md").read_text(encoding="utf-8")
    continued = (folder / "memory_index_continued.md").read_text(encoding="utf-8")
    assert len(index.splitlines()) <= INDEX_LINE_BUDGET
    assert index.splitlines()[-1].startswith("- [Memory index, continued](memory_index_continued.md)")
    assert original.startswith(index.rsplit("\n- [Memory index, continued]", 1)[0])  # the first lines, as they were
    assert continued.startswith("---\nname: Memory index, continued\n") and "\ntype: reference\n---\n" in continued
    for line in filter(None, original.splitlines()):
        assert line in index or line in continued, line  # every entry and note is one link away
    assert "- The on-call rota changes on 2026-06-01:\n  Ravi Patel takes Mondays,\n  Mei Tanaka Fridays.\n" in (
        index + continued
    )  # not cut inside a note
    assert "## Working notes\n" in continued  # moved notes keep the heading they stood under
    assert _live(profile).keys() >= {k for k, v in live_before.items() if "Ticket" in v or "rota" in v}
    again = read_folder(profile, now=NOW)
    assert again.status == "completed" and not again.counts, again.counts  # the moved notes are known notes
    assert plan_write_back(profile, now=NOW).changes == []

    assert main(["undo", "--profile", str(profile.root), "--cycle", "trim-cycle"]) == 0
    out = capsys.readouterr().out
    assert f"put back {folder / 'MEMORY.md'}" in out
    assert (folder / "MEMORY.md").read_text(encoding="utf-8") == original
    assert not (folder / "memory_index_continued.md").exists()
    assert (folder / "archive" / "memory_index_continued.md").read_text(encoding="utf-8") == continued
    assert {k: v[0] for k, v in _files(folder).items() if not k.startswith("archive/")} == before


def test_an_index_that_grows_past_its_budget_again_appends_to_the_topic_file_and_keeps_one_link(profile, tmp_path):
    folder = _folder(tmp_path, "claude-code")
    _long_index(folder)
    link_folder(profile, folder, "claude-code")
    read_folder(profile, now=NOW)
    assert write_back(profile, now=NOW).status == "completed"
    first = (folder / "memory_index_continued.md").read_text(encoding="utf-8")
    with open(folder / "MEMORY.md", "a", encoding="utf-8") as fh:
        fh.write("".join(f"- [Later {i}](later_{i:02d}.md) — added after the trim\n" for i in range(30)))
    assert read_folder(profile, now=NOW).status == "completed"
    assert write_back(profile, now=NOW).status == "completed"
    index = (folder / "MEMORY.md").read_text(encoding="utf-8")
    continued = (folder / "memory_index_continued.md").read_text(encoding="utf-8")
    assert len(index.splitlines()) <= INDEX_LINE_BUDGET
    assert index.count("](memory_index_continued.md)") == 1 and "memory_index_continued.md" not in continued
    assert continued.startswith(first)
    assert all(f"- [Later {i}](later_{i:02d}.md)" in index + continued for i in range(30))
    assert read_folder(profile, now=NOW).counts == {}
    assert plan_write_back(profile, now=NOW).changes == []


# ------------------------------------------------------------------ a person's edits between cycles


KEPT = [  # every note of the claude-code fixture a person keeps through each edit below (a fragment of each)
    "real Postgres 16",
    "schema v42",
    "make db-up",
    "The merge freeze for release 4.2 begins",
    "owned by Dana Whitfield",
    "branch is cut on 2026-03-12",
    "Ingest API p99",
    "written Go for 10 years",
    "Prefers pnpm",
    "Works from Lisbon",
]


def _replace(path: Path, old: str, new: str) -> None:
    text = path.read_text(encoding="utf-8")
    assert old in text, (path, old)
    path.write_text(text.replace(old, new, 1), encoding="utf-8")


def _sentence_added(folder: Path) -> None:
    _replace(folder / "project_release.md", "cut on 2026-03-12.", "cut on 2026-03-12. Hotfixes still go in.")


def _heading_renamed(folder: Path) -> None:
    _replace(folder / "project_release.md", "# Release freeze\n", "# Release freeze (mobile)\n")


def _moved_to_another_file(folder: Path) -> None:
    _replace(folder / "user_role.md", "\nPrefers pnpm over npm in every JavaScript project.\n", "")
    with open(folder / "user_place.md", "a", encoding="utf-8") as fh:
        fh.write("\nPrefers pnpm over npm in every JavaScript project.\n")


def _file_split(folder: Path) -> None:
    _replace(folder / "user_role.md", "\nPrefers pnpm over npm in every JavaScript project.\n", "")
    (folder / "user_tools.md").write_text(
        "---\nname: Tools\ndescription: tools the user prefers\ntype: user\n---\n"
        "Prefers pnpm over npm in every JavaScript project.\n",
        encoding="utf-8",
    )
    with open(folder / "MEMORY.md", "a", encoding="utf-8") as fh:
        fh.write("- [Tools](user_tools.md) — tools the user prefers\n")


def _copy_deleted(folder: Path) -> None:  # the copy was read in a cycle of its own (see the test)
    _replace(folder / "user_place.md", "\nPrefers pnpm over npm in every JavaScript project.\n", "")


@pytest.mark.parametrize(
    "edit", [_sentence_added, _heading_renamed, _moved_to_another_file, _file_split, _copy_deleted]
)
def test_a_note_a_person_edited_stays_in_their_file_and_its_memory_stays_live(profile, tmp_path, edit):
    folder = _folder(tmp_path, "claude-code")
    (folder / "user_place.md").write_text(
        "---\nname: Place\ndescription: where the user works\ntype: user\n---\nWorks from Lisbon since 2025.\n"
    )
    with open(folder / "MEMORY.md", "a", encoding="utf-8") as fh:
        fh.write("- [Place](user_place.md) — where the user works\n")
    link_folder(profile, folder, "claude-code")
    assert read_folder(profile, now=NOW).status == "completed"
    if edit is _copy_deleted:  # a second copy of one note, read as the same memory
        with open(folder / "user_place.md", "a", encoding="utf-8") as fh:
            fh.write("\nPrefers pnpm over npm in every JavaScript project.\n")
        assert read_folder(profile, now=NOW).status == "completed"
        assert write_back(profile, now=NOW).status == "completed"
    edit(folder)
    for cycle in range(2):  # the read of the edit, then a cycle after it
        read = read_folder(profile, now=NOW + timedelta(hours=cycle + 1))
        assert read.status == "completed", read.reason
        assert write_back(profile, now=NOW + timedelta(hours=cycle + 1)).status == "completed"
    live_files = "\n".join(p.read_text(encoding="utf-8") for p in folder.glob("*.md") if p.name != "MEMORY.md")
    live = "\n".join(_live(profile).values())
    for fragment in KEPT:
        assert fragment in live_files, f"{fragment!r} was taken out of the person's files"
        assert fragment in live, f"{fragment!r} has no live memory"
    assert not (folder / "archive").exists()
    assert plan_write_back(profile, now=NOW).changes == []


def _merge_by_hand(profile, sources, merged: str, cycle_id: str):
    """What a consolidation pass records: ``sources`` archived, merged into one new memory holding ``merged``."""
    store = open_store(profile)
    with store.transaction():
        new = save_memory(store.memories, merged, category=sources[0].category, now=NOW, dedupe=False).entry
        for old in sources:
            store.memories.archive(old.id, now=NOW)
            store.changes.record(
                ChangeRow(
                    cycle_id=cycle_id,
                    pass_name="memory_consolidation",
                    kind="archived",
                    target_type="memory",
                    target_id=old.id,
                    before=old,
                    after=None,
                    reason=f"merged into {new.id}",
                    successor_id=new.id,
                    successor_how=SuccessorHow.MERGED_INTO,
                ),
                now=NOW,
            )
    return new


def test_one_folder_linked_to_two_agents_loses_no_note(profile, tmp_path):
    """Agent A merges two notes and writes the merged one back; agent B reads it as an extension of a memory it
    holds, and neither agent takes it (nor any other note) out of the folder afterwards."""
    folder = _folder(tmp_path, "claude-code")
    other = AgentProfile(tmp_path / "agents" / "agent-b").ensure()
    for agent in (profile, other):
        link_folder(agent, folder, "claude-code")
        assert read_folder(agent, now=NOW).status == "completed"
    specifics = {s.text for p in folder.rglob("*.md") for s in specifics_of(p.read_text(encoding="utf-8"))}

    first, second = _by_text(profile, "The merge freeze for release 4.2"), _by_text(profile, "owned by Dana")
    merged = first.content + " Hotfixes go in only with her sign-off."  # an extension of a note agent B holds
    _merge_by_hand(profile, [first, second], merged, "c1")
    assert write_back(profile, now=NOW).status == "completed"
    assert merged in (folder / "project_release.md").read_text(encoding="utf-8")
    for hour, agent in enumerate((other, profile, other, profile), start=1):
        assert read_folder(agent, now=NOW + timedelta(hours=hour)).status == "completed"
        assert write_back(agent, now=NOW + timedelta(hours=hour)).status == "completed"
    live_files = "\n".join(p.read_text(encoding="utf-8") for p in folder.glob("*.md"))
    assert not [s for s in specifics if s not in live_files]
    for agent in (profile, other):
        live = "\n".join(_live(agent).values())
        assert "Dana Whitfield" in live and "2026-03-12" in live and "Ingest API p99" in live
    assert merged in live_files


def _one_note_archived_in_place(profile, folder: Path):
    """A plan that takes one note (the Grafana board's copy in user_role.md) out of user_role.md into archive/."""
    with open(folder / "user_role.md", "a", encoding="utf-8") as fh:
        fh.write("\nOn-call rotates every Monday at 10:00.\n")
    assert read_folder(profile, now=NOW).status == "completed"
    agent_memory.forget(profile, _by_text(profile, "On-call rotates").id, reason="rota ended", now=NOW, active=False)
    plan = plan_write_back(profile, now=NOW)
    assert {c.rel for c in plan.changes} == {"user_role.md", "archive/user_role.md"}
    return plan


@pytest.mark.parametrize("whole_file", [False, True])
def test_archive_swapped_for_a_symlink_after_the_plan_is_refused_and_nothing_is_written_outside(
    profile, tmp_path, whole_file
):
    from dream_assets.folders import apply_write_back

    folder = _linked(profile, tmp_path, "claude-code")
    if whole_file:
        assert read_folder(profile, now=NOW).status == "completed"
        agent_memory.forget(profile, _by_text(profile, "Grafana").id, reason="board retired", now=NOW, active=False)
        plan = plan_write_back(profile, now=NOW)
        kept, note = "reference_dashboards.md", "Ingest API p99"
    else:
        plan = _one_note_archived_in_place(profile, folder)
        kept, note = "user_role.md", "On-call rotates"
    outside = tmp_path / "elsewhere"
    outside.mkdir()
    (folder / "archive").symlink_to(outside, target_is_directory=True)  # between the read and the write-back
    report = apply_write_back(profile, plan)
    assert report.status == "failed"
    assert str(folder / "archive") in report.reason and "outside the linked folder" in report.reason
    assert list(outside.iterdir()) == []
    assert note in (folder / kept).read_text(encoding="utf-8")  # the note stays where it was


@pytest.mark.parametrize("by_rename", [False, True])  # written in place, or saved beside it and renamed over it
def test_a_save_in_the_instant_before_the_replace_is_kept_in_place(profile, tmp_path, monkeypatch, by_rename):
    import dream_assets.folders.sync as sync

    folder = _linked(profile, tmp_path, "claude-code")
    plan = _one_note_archived_in_place(profile, folder)
    path = folder / "user_role.md"
    edited = path.read_text(encoding="utf-8") + "\nLikes tabs over spaces.\n"
    saves: list[str] = []

    def person_saves(target: Path) -> None:  # after the write-back's last look at the file, before its replace
        if target == path and not saves:
            saves.append(edited)
            if by_rename:
                (folder / ".user_role.md.swp").write_text(edited, encoding="utf-8")
                os.replace(folder / ".user_role.md.swp", path)
            else:
                path.write_text(edited, encoding="utf-8")

    monkeypatch.setattr(sync, "_before_replace", person_saves)
    report = sync.apply_write_back(profile, plan, cycle_id="race")
    assert saves and report.status == "completed", report.reason
    assert path.read_text(encoding="utf-8") == edited  # the person's save, as they made it
    assert any("user_role.md: edited while the cycle ran" in line for line in report.lines), report.lines
    assert read_folder(profile, now=NOW).status == "completed"
    assert "Likes tabs over spaces." in _live(profile).values()


# ------------------------------------------------------------------ undo of every change set that touched the folder


def _release_in_two_files(tmp_path: Path) -> Path:
    """The claude-code fixture with the second release-freeze note in a topic file of its own."""
    folder = _folder(tmp_path, "claude-code")
    _replace(
        folder / "project_release.md",
        "- Merge freeze for release 4.2 begins 2026-03-05, owned by Dana Whitfield.\n",
        "",
    )
    (folder / "project_release_owner.md").write_text(
        "---\nname: Release owner\ndescription: who owns the release\ntype: project\n---\n"
        "Merge freeze for release 4.2 begins 2026-03-05, owned by Dana Whitfield.\n",
        encoding="utf-8",
    )
    with open(folder / "MEMORY.md", "a", encoding="utf-8") as fh:
        fh.write("- [Release owner](project_release_owner.md) — who owns the release\n")
    return folder


def test_undo_of_an_applied_review_set_puts_the_files_a_sync_wrote_back(profile, tmp_path, capsys):
    folder = _release_in_two_files(tmp_path)
    link_folder(profile, folder, "claude-code")
    assert read_folder(profile, now=NOW).status == "completed"
    before = {k: v[0] for k, v in _files(folder).items()}
    options = dream_options(ApplyMode="review", ConsolidationExactFoldEnabled=False, ContradictionSweepEnabled=False)
    client = ModelClient(ScriptedBackend(_merge_release_notes), profile=profile, options=options)
    run_cycle(profile, options, NOW, client_factory=lambda: client, cycle_id="set1")
    assert {k: v[0] for k, v in _files(folder).items()} == before  # a review set waits; the folder too
    assert main(["apply", "--profile", str(profile.root), "--cycle", "set1"]) == 0
    assert main(["sync", "--profile", str(profile.root)]) == 0
    assert (folder / "archive" / "project_release_owner.md").exists()  # the merged-away file moved
    capsys.readouterr()
    assert main(["undo", "--profile", str(profile.root), "--cycle", "set1"]) == 0
    out = capsys.readouterr().out
    assert f"put back {folder / 'project_release_owner.md'}" in out and f"put back {folder / 'MEMORY.md'}" in out
    after = {k: v[0] for k, v in _files(folder).items() if not k.startswith("archive/")}
    assert after == before
    assert main(["sync", "--profile", str(profile.root)]) == 0  # and the folder agrees with the store again
    assert {k: v[0] for k, v in _files(folder).items() if not k.startswith("archive/")} == before
    live = list(_live(profile).values())
    assert sum("4.2" in c for c in live) == 2


def _standup_cycle(profile, tmp_path: Path) -> tuple[Path, dict[str, bytes], dict]:
    """A claude-code folder whose project_standup.md the sweep of cycle ``sweep-cycle`` moves to archive/ whole: the
    folder, its files' bytes before the cycle, and the cycle's reports by pass."""
    folder = _folder(tmp_path, "claude-code")
    for name, text in (("project_standup.md", STALE), ("project_standup_moved.md", LATER)):
        (folder / name).write_text(
            f"---\nname: Standup\ndescription: when the standup is\ntype: project\n---\n{text}\n"
        )
    with open(folder / "MEMORY.md", "a", encoding="utf-8") as fh:
        fh.write(
            "- [Standup](project_standup.md) — time and room\n- [Standup moved](project_standup_moved.md) — since May\n"
        )
    link_folder(profile, folder, "claude-code")
    read_folder(profile, now=NOW)
    before = {k: v[0] for k, v in _files(folder).items()}
    options = dream_options(ConsolidationExactFoldEnabled=False)
    client = ModelClient(ScriptedBackend(_standup_answer), profile=profile, options=options)
    reports = {
        r.pass_name: r for r in run_cycle(profile, options, NOW, client_factory=lambda: client, cycle_id="sweep-cycle")
    }
    assert not (folder / "project_standup.md").exists()
    return folder, before, reports


def test_undo_after_the_agent_added_a_memory_puts_the_file_and_its_index_line_back(profile, tmp_path, capsys):
    folder, before, _ = _standup_cycle(profile, tmp_path)
    (folder / "user_editor.md").write_text("---\nname: Editor\ndescription: editor\ntype: user\n---\nUses Helix.\n")
    with open(folder / "MEMORY.md", "a", encoding="utf-8") as fh:  # what Claude Code does when it saves a memory
        fh.write("- [Editor](user_editor.md) — the editor the user uses\n")
    assert main(["undo", "--profile", str(profile.root), "--cycle", "sweep-cycle"]) == 0
    out = capsys.readouterr().out
    assert f"put back {folder / 'project_standup.md'}" in out and "0 refused" in out
    index = (folder / "MEMORY.md").read_text(encoding="utf-8")
    assert index == before["MEMORY.md"].decode("utf-8") + "- [Editor](user_editor.md) — the editor the user uses\n"
    assert (folder / "project_standup.md").read_bytes() == before["project_standup.md"]


def test_undo_that_cannot_put_a_file_back_names_it_counts_it_refused_and_exits_1(profile, tmp_path, capsys):
    folder, before, _ = _standup_cycle(profile, tmp_path)
    again = folder / "project_standup.md"
    again.write_text("---\nname: Standup\ndescription: new\ntype: project\n---\nStandup is async now.\n")
    assert main(["undo", "--profile", str(profile.root), "--cycle", "sweep-cycle"]) == 1
    out, err = capsys.readouterr()
    assert f"NOT put back {again}:" in err
    assert "1 refused (1 file(s) of the linked folder, named above)" in out
    assert again.read_text(encoding="utf-8").endswith("Standup is async now.\n")  # the person's file stays
    assert (folder / "archive" / "project_standup.md").read_bytes() == before["project_standup.md"]


def test_a_note_whose_merge_was_undone_in_the_store_only_stays_in_its_file(profile, tmp_path):
    """The store's undo retires the merged memory (no successor, no decision); a write-back before the files are put
    back leaves the note in the person's file, and the next read takes it in again."""
    folder = _linked(profile, tmp_path, "claude-code")
    read_folder(profile, now=NOW)
    _scripted_cycle(profile, _merge_release_notes, cycle_id="merge-cycle")
    merged = (folder / "project_release.md").read_text(encoding="utf-8")
    assert merged.count("4.2") == 1
    open_store(profile).changes.undo_cycle("merge-cycle", now=NOW)  # the store only
    assert write_back(profile, now=NOW).status == "completed"
    assert (folder / "project_release.md").read_text(encoding="utf-8") == merged
    assert read_folder(profile, now=NOW).status == "completed"
    assert sum("4.2" in c for c in _live(profile).values()) >= 2


def test_undo_of_a_forget_written_out_by_a_sync_puts_the_file_and_its_index_line_back(profile, tmp_path, capsys):
    folder = _linked(profile, tmp_path, "claude-code")
    read_folder(profile, now=NOW)
    before = {k: v[0] for k, v in _files(folder).items()}
    forgot = agent_memory.forget(profile, _by_text(profile, "Grafana").id, reason="board retired", now=NOW)
    assert main(["sync", "--profile", str(profile.root)]) == 0
    assert not (folder / "reference_dashboards.md").exists()
    assert main(["undo", "--profile", str(profile.root), "--cycle", forgot.cycle_id]) == 0
    assert f"put back {folder / 'reference_dashboards.md'}" in capsys.readouterr().out
    assert {k: v[0] for k, v in _files(folder).items() if not k.startswith("archive/")} == before
    assert plan_write_back(profile, now=NOW).changes == []


_KILLED_WRITE_BACK = """
import os, sys
import dream_assets.folders.sync as sync
from dream_assets.folders import write_back

def die_before_the_index(path):  # the topic files are written; killed before MEMORY.md is
    if path.name == "MEMORY.md":
        os._exit(9)
sync._before_replace = die_before_the_index
write_back(sys.argv[1])
"""


def test_a_write_back_killed_before_it_finished_is_undone_with_the_change_set_it_wrote(profile, tmp_path, capsys):
    import subprocess
    import sys

    folder = _linked(profile, tmp_path, "claude-code")
    with open(folder / "user_role.md", "a", encoding="utf-8") as fh:
        fh.write("\nOn-call rotates every Monday at 10:00.\n")
    assert read_folder(profile, now=NOW).status == "completed"
    before = {k: v[0] for k, v in _files(folder).items()}
    forgot = agent_memory.forget(profile, _by_text(profile, "On-call rotates").id, reason="rota ended", now=NOW)
    agent_memory.forget(profile, _by_text(profile, "Grafana").id, reason="board retired", now=NOW)
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2])}
    child = subprocess.run([sys.executable, "-c", _KILLED_WRITE_BACK, str(profile.root)], env=env, timeout=120)
    assert child.returncode == 9
    assert "On-call" not in (folder / "user_role.md").read_text(encoding="utf-8")  # written, then killed
    assert (folder / "MEMORY.md").read_bytes() == before["MEMORY.md"]
    assert main(["undo", "--profile", str(profile.root), "--cycle", forgot.cycle_id]) == 0
    assert f"put back {folder / 'user_role.md'}" in capsys.readouterr().out
    after = {k: v[0] for k, v in _files(folder).items() if not k.startswith("archive/")}
    assert {k: v for k, v in after.items() if not is_temp_file(folder / k)} == before  # a kill leaves a temp file


def test_an_unreadable_undo_record_of_the_folder_is_named_and_the_undo_exits_1(profile, tmp_path, capsys):
    folder = _linked(profile, tmp_path, "claude-code")
    read_folder(profile, now=NOW)
    forgot = agent_memory.forget(profile, _by_text(profile, "Grafana").id, reason="board retired", now=NOW)
    assert write_back(profile, now=NOW).status == "completed"
    (record,) = profile.memory_folder_undo_dir.glob("*.json")
    record.write_bytes(b"\xff\xfe{")
    assert main(["undo", "--profile", str(profile.root), "--cycle", forgot.cycle_id]) == 1
    assert str(record) in capsys.readouterr().err
    assert not (folder / "reference_dashboards.md").exists()  # nothing was guessed


def test_a_merge_written_into_a_crlf_file_keeps_its_crlf_line_ends(profile, tmp_path):
    """A file a person keeps with Windows line ends (CRLF) gets the merged note's lines with CRLF too, never bare LFs
    mixed in, and reads back as the merged memory."""
    import re

    folder = _folder(tmp_path, "claude-code")
    for path in folder.rglob("*.md"):
        path.write_bytes(path.read_bytes().replace(b"\r\n", b"\n").replace(b"\n", b"\r\n"))
    link_folder(profile, folder, "claude-code")

    def two_line_merge(request):
        answer = _merge_release_notes(request)
        for save in answer["toSave"]:
            save["content"] = "The merge freeze for release 4.2 begins on 2026-03-05;\nDana Whitfield owns the release."
        return answer

    reports = _scripted_cycle(profile, two_line_merge)
    assert reports["memory_consolidation"].status == "completed", reports["memory_consolidation"].reason
    data = (folder / "project_release.md").read_bytes()
    assert b"Dana Whitfield owns the release." in data and data.count(b"4.2") == 1
    assert re.search(rb"(?<!\r)\n", data) is None, data
    again = read_folder(profile, now=NOW)
    assert again.status == "completed" and not again.counts.get("saved"), again.counts
