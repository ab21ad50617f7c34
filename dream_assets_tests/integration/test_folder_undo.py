"""Linked folders stay consistent with the store through every path that changes either: a write-back, and the undo
of every change set that touched the folder (a cycle, an applied review set, a restore, a forget), killed or not."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

import dream_assets.folders.sync as sync
from dream_assets import agent_memory
from dream_assets.changes_model import Actor, ChangeRow, SuccessorHow
from dream_assets.cli import main
from dream_assets.cycle import run_cycle
from dream_assets.folders import apply_write_back, link_folder, plan_write_back, read_folder
from dream_assets.llm.client import ModelClient
from dream_assets.llm.scripted import ScriptedBackend
from dream_assets.options_loader import dream_options
from dream_assets.profile import AgentProfile
from dream_assets.save_pipeline import save_memory
from dream_assets.store import open_store
from dream_assets.store.connection import close_all
from dream_assets_tests.conftest import NOW
from dream_assets_tests.e2e.test_folders import (
    FIXTURES,
    _by_text,
    _files,
    _linked,
    _live,
    _merge_release_notes,
    _release_in_two_files,
)


def _outside_archive(folder: Path) -> dict[str, bytes]:
    return {k: v[0] for k, v in _files(folder).items() if not k.startswith("archive/")}


def test_a_write_back_leaves_a_note_whose_memory_is_live_again_since_the_plan(profile, tmp_path, capsys):
    """A forget planned out of the folder, then the memory restored (``dream restore``) before the plan is written:
    the note, its file and its index line stay, and the file is named as left."""
    folder = _linked(profile, tmp_path, "claude-code")
    read_folder(profile, now=NOW)
    before = _outside_archive(folder)
    dash = _by_text(profile, "Grafana")
    agent_memory.forget(profile, dash.id, reason="board retired", now=NOW)
    plan = plan_write_back(profile, now=NOW)
    assert any(c.rel == "reference_dashboards.md" and c.new is None for c in plan.changes)
    assert main(["restore", "--profile", str(profile.root), "--id", dash.id]) == 0
    report = apply_write_back(profile, plan)
    assert report.status == "completed", report.reason
    assert any("reference_dashboards.md: left as it is" in line for line in report.lines), report.lines
    assert _outside_archive(folder) == before
    assert plan_write_back(profile, now=NOW).changes == []


def test_a_file_a_person_edited_after_the_plan_keeps_its_index_line(profile, tmp_path):
    """A topic file planned to move to archive/ whole, edited by a person before the write: it stays as they wrote
    it, and so does the MEMORY.md line that links it (a session still finds it)."""
    folder = _linked(profile, tmp_path, "claude-code")
    read_folder(profile, now=NOW)
    index = (folder / "MEMORY.md").read_bytes()
    agent_memory.forget(profile, _by_text(profile, "Grafana").id, reason="board retired", now=NOW)
    plan = plan_write_back(profile, now=NOW)
    assert any(c.rel == "MEMORY.md" for c in plan.changes)
    with open(folder / "reference_dashboards.md", "a", encoding="utf-8") as fh:
        fh.write("\nThe staging board is called Ingest API staging.\n")
    report = apply_write_back(profile, plan)
    assert report.status == "completed", report.reason
    assert "Ingest API staging" in (folder / "reference_dashboards.md").read_text(encoding="utf-8")
    assert (folder / "MEMORY.md").read_bytes() == index


def test_undo_of_a_later_set_that_changed_a_merged_note_s_text_puts_the_file_back(profile, tmp_path, capsys):
    """Set c1 merges the two release-freeze notes; set c2 then extends the merged memory's text; one sync writes both
    out (the first note carries c2's text). Undoing c2 puts the file back, and the next sync writes c1's text."""
    folder = _linked(profile, tmp_path, "claude-code")
    read_folder(profile, now=NOW)
    before = _outside_archive(folder)
    sources = [_by_text(profile, "The merge freeze for release 4.2"), _by_text(profile, "Merge freeze for release 4.2")]
    store = open_store(profile)
    with store.transaction():
        merged = save_memory(
            store.memories, sources[0].content, category=sources[0].category, now=NOW, dedupe=False
        ).entry
        store.changes.record(
            ChangeRow(
                cycle_id="c1",
                actor=Actor.PASS,
                pass_name="memory_consolidation",
                kind="created",
                target_type="memory",
                target_id=merged.id,
                before=None,
                after=merged,
                reason="merged",
            ),
            now=NOW,
        )
        for old in sources:
            store.memories.archive(old.id, now=NOW)
            store.changes.record(
                ChangeRow(
                    cycle_id="c1",
                    actor=Actor.PASS,
                    pass_name="memory_consolidation",
                    kind="archived",
                    target_type="memory",
                    target_id=old.id,
                    before=old,
                    after=None,
                    reason=f"merged into {merged.id}",
                    successor_id=merged.id,
                    successor_how=SuccessorHow.MERGED_INTO,
                ),
                now=NOW,
            )
    extended = merged.content + " The freeze was confirmed at the planning on 2026-02-20."
    with store.transaction():
        after = store.memories.update(merged.id, content=extended, now=NOW)
        store.changes.record(
            ChangeRow(
                cycle_id="c2",
                actor=Actor.PASS,
                pass_name="memory_consolidation",
                kind="updated",
                target_type="memory",
                target_id=merged.id,
                before=merged,
                after=after,
                reason="extended",
            ),
            now=NOW,
        )
    assert main(["sync", "--profile", str(profile.root)]) == 0
    release = folder / "project_release.md"
    assert "confirmed at the planning" in release.read_text(encoding="utf-8")
    capsys.readouterr()
    assert main(["undo", "--profile", str(profile.root), "--cycle", "c2"]) == 0
    assert f"put back {release}" in capsys.readouterr().out
    assert _outside_archive(folder) == before
    assert main(["sync", "--profile", str(profile.root)]) == 0
    text = release.read_text(encoding="utf-8")
    assert "confirmed at the planning" not in text and text.count("4.2") == 1


def _review_set(profile, tmp_path: Path) -> tuple[Path, dict[str, bytes]]:
    """The release notes in two files, a merge of them held for review as set ``set1`` and applied."""
    folder = _release_in_two_files(tmp_path)
    link_folder(profile, folder, "claude-code")
    assert read_folder(profile, now=NOW).status == "completed"
    before = _outside_archive(folder)
    options = dream_options(ApplyMode="review", ConsolidationExactFoldEnabled=False, ContradictionSweepEnabled=False)
    client = ModelClient(ScriptedBackend(_merge_release_notes), profile=profile, options=options)
    run_cycle(profile, options, NOW, client_factory=lambda: client, cycle_id="set1")
    assert main(["apply", "--profile", str(profile.root), "--cycle", "set1"]) == 0
    return folder, before


def _quiet_cycle(profile, cycle_id: str) -> None:
    options = dream_options(ConsolidationExactFoldEnabled=False, ContradictionSweepEnabled=False)
    client = ModelClient(ScriptedBackend(lambda r: {"toDelete": [], "toSave": []}), profile=profile, options=options)
    run_cycle(profile, options, NOW, client_factory=lambda: client, cycle_id=cycle_id)


def test_undo_of_a_review_set_the_next_cycle_wrote_out_puts_the_files_back(profile, tmp_path, capsys):
    folder, before = _review_set(profile, tmp_path)
    _quiet_cycle(profile, "next")  # its write-back writes the applied set out
    assert (folder / "archive" / "project_release_owner.md").exists()
    capsys.readouterr()
    assert main(["undo", "--profile", str(profile.root), "--cycle", "set1"]) == 0
    out = capsys.readouterr().out
    assert f"put back {folder / 'project_release_owner.md'}" in out and "0 refused" in out
    assert _outside_archive(folder) == before
    _quiet_cycle(profile, "after")  # and the next cycle finds the folder and the store agreeing
    assert _outside_archive(folder) == before
    assert sum("4.2" in c for c in _live(profile).values()) == 2


def test_undo_of_a_restore_and_of_the_forget_before_it_leave_the_folder_as_it_was(profile, tmp_path, capsys):
    folder = _linked(profile, tmp_path, "claude-code")
    read_folder(profile, now=NOW)
    before = _outside_archive(folder)
    dash = _by_text(profile, "Grafana")
    forgot = agent_memory.forget(profile, dash.id, reason="board retired", now=NOW)
    assert main(["sync", "--profile", str(profile.root)]) == 0
    assert main(["restore", "--profile", str(profile.root), "--id", dash.id]) == 0
    restore_cycle = open_store(profile).changes.for_target("memory", dash.id)[-1].cycle_id  # the restore's own set
    assert restore_cycle != forgot.cycle_id
    assert main(["sync", "--profile", str(profile.root)]) == 0
    assert main(["undo", "--profile", str(profile.root), "--cycle", restore_cycle]) == 0
    assert main(["sync", "--profile", str(profile.root)]) == 0
    assert main(["undo", "--profile", str(profile.root), "--cycle", forgot.cycle_id]) == 0
    assert _outside_archive(folder) == before
    assert main(["sync", "--profile", str(profile.root)]) == 0
    assert _outside_archive(folder) == before
    assert dash.id in _live(profile)


class _Killed(BaseException):
    """The undo's process dies here: nothing after this point runs (no handler catches a BaseException)."""


def _moved(base: Path, dest: Path) -> None:
    """Copy ``base`` (an agent and its linked folder) to ``dest``, the folder paths its records hold made ``dest``'s.
    The process's store connections are closed first: an idle one left open by the last command checkpoints its
    write-ahead log when it lets go, which could take the log away in the middle of the copy."""
    close_all()
    shutil.copytree(base, dest)
    for path in (dest / "agent").rglob("*.json"):
        text = path.read_text(encoding="utf-8")
        path.write_text(text.replace(str(base), str(dest)), encoding="utf-8")


def test_an_undo_killed_at_any_file_it_puts_back_is_finished_by_running_it_again(tmp_path, capsys, monkeypatch):
    """Two forgets written out by one sync (a file rewritten with an archive copy of its note, a file moved to
    archive/ whole, its index line dropped); the undo of the first killed at each point in turn, then run again:
    every file is back, none is refused, the exit is 0, and the folder and the store agree."""
    base = tmp_path / "base"
    profile = AgentProfile(base / "agent").ensure()
    folder = base / "memory"
    shutil.copytree(FIXTURES / "claude-code", folder)
    link_folder(profile, folder, "claude-code")
    with open(folder / "user_role.md", "a", encoding="utf-8") as fh:
        fh.write("\nOn-call rotates every Monday at 10:00.\n")
    read_folder(profile, now=NOW)
    before = _outside_archive(folder)
    forgot = agent_memory.forget(profile, _by_text(profile, "On-call rotates").id, reason="rota ended", now=NOW)
    retired = agent_memory.forget(profile, _by_text(profile, "Grafana").id, reason="board retired", now=NOW)
    assert main(["sync", "--profile", str(profile.root)]) == 0
    points: list[Path] = []
    _moved(base, tmp_path / "count")
    monkeypatch.setattr(sync, "_before_undo_step", points.append)
    assert main(["undo", "--profile", str(tmp_path / "count" / "agent"), "--cycle", forgot.cycle_id]) == 0
    assert len(points) >= 5  # the archive copy, user_role.md, reference_dashboards.md (two steps), the index lines
    for k in range(1, len(points) + 1):
        dest = tmp_path / f"kill-{k}"
        _moved(base, dest)
        agent = AgentProfile(dest / "agent")
        seen: list[Path] = []

        def die(path: Path, seen: list[Path] = seen, k: int = k) -> None:
            seen.append(path)
            if len(seen) == k:
                raise _Killed

        monkeypatch.setattr(sync, "_before_undo_step", die)
        with pytest.raises(_Killed):
            main(["undo", "--profile", str(agent.root), "--cycle", forgot.cycle_id])
        monkeypatch.setattr(sync, "_before_undo_step", lambda path: None)
        capsys.readouterr()
        assert main(["undo", "--profile", str(agent.root), "--cycle", forgot.cycle_id]) == 0, k
        out, err = capsys.readouterr()
        assert "NOT put back" not in err and " 0 refused" in out, (k, out, err)
        assert _outside_archive(dest / "memory") == before, k
        assert main(["undo", "--profile", str(agent.root), "--cycle", retired.cycle_id]) == 0, k  # its file is back
        assert _outside_archive(dest / "memory") == before, k
        assert plan_write_back(agent, now=NOW).changes == [], k


def test_undo_of_the_one_change_a_forget_made_puts_its_file_back(profile, tmp_path, capsys):
    """``dream undo --change`` of a forget a sync wrote out (the file moved to archive/, its index line dropped): the
    whole change set is undone by it, so the file and its index line come back with the memory."""
    folder = _linked(profile, tmp_path, "claude-code")
    read_folder(profile, now=NOW)
    before = _outside_archive(folder)
    dash = _by_text(profile, "Grafana")
    agent_memory.forget(profile, dash.id, reason="board retired", now=NOW)
    assert main(["sync", "--profile", str(profile.root)]) == 0
    assert not (folder / "reference_dashboards.md").exists()
    change = open_store(profile).changes.for_target("memory", dash.id)[-1].change_id
    capsys.readouterr()
    assert main(["undo", "--profile", str(profile.root), "--change", change]) == 0
    assert f"put back {folder / 'reference_dashboards.md'}" in capsys.readouterr().out
    assert _outside_archive(folder) == before
    assert plan_write_back(profile, now=NOW).changes == []


def test_undo_names_a_folder_memory_by_its_file_and_heading(profile, tmp_path, capsys):
    """What `dream undo` put back is named as a person finds it in the folder, not only by its hex id."""
    _linked(profile, tmp_path, "claude-code")
    read_folder(profile, now=NOW)
    dash = _by_text(profile, "Grafana")
    agent_memory.forget(profile, dash.id, reason="board retired", now=NOW)
    change = open_store(profile).changes.for_target("memory", dash.id)[-1].change_id
    capsys.readouterr()
    assert main(["undo", "--profile", str(profile.root), "--change", change]) == 0
    named = [line for line in capsys.readouterr().out.splitlines() if f"memory {dash.id}" in line]
    assert named and all(f"memory {dash.id} (reference_dashboards.md" in line for line in named), named


def test_the_cycle_report_names_the_folder_notes_a_merge_changed_by_file_and_heading(profile, tmp_path):
    from dream_assets.cycle_report import build_cycle_report
    from dream_assets.passes.registry import PASSES
    from dream_assets_tests.e2e.test_folders import _scripted_cycle

    _linked(profile, tmp_path, "claude-code")
    read_folder(profile, now=NOW)
    _scripted_cycle(profile, _merge_release_notes, cycle_id="merge-cycle")
    report = build_cycle_report(profile, open_store(profile), "merge-cycle", [p.name for p in PASSES])
    merged = [line for line in report.markdown().splitlines() if line.startswith("- memory_consolidation ")]
    archived = [line for line in merged if " archived " in line]
    assert len(archived) == 2 and all("(project_release.md › Release freeze)" in line for line in archived), merged
