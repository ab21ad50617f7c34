"""One memory across a linked folder and the agent: what the agent keeps through MCP, the shell or LangGraph after the
folder was linked reaches the folder at the next write-back (a new topic file with its index line, or a bullet at the
end of its file), under the same rules as the dream's own changes: a person's edit wins, it is undone with the save,
and it is never read back as a second memory."""

from __future__ import annotations

import shutil
from datetime import timedelta
from pathlib import Path

import pytest

from dream_assets import cycle_ids, service
from dream_assets.cli import main
from dream_assets.folders import link_folder, plan_write_back, read_folder, write_back
from dream_assets.store import open_store
from dream_assets_tests.conftest import NOW

FIXTURES = Path(__file__).parent.parent / "fixtures" / "folders"
LINKED = NOW - timedelta(hours=1)
LATER = NOW + timedelta(minutes=5)


def _linked(profile, tmp_path: Path, fmt: str) -> Path:
    folder = tmp_path / "memory" / fmt
    shutil.copytree(FIXTURES / fmt, folder)
    link_folder(profile, folder, fmt, now=LINKED)
    assert read_folder(profile, now=LINKED).status == "completed"
    return folder


def _texts(folder: Path) -> dict[str, str]:
    return {p.relative_to(folder).as_posix(): p.read_text(encoding="utf-8") for p in folder.rglob("*.md")}


def _live(profile) -> list[str]:
    return sorted(e.content for e in open_store(profile).memories.list_live())


def test_a_memory_saved_through_the_agent_reaches_a_claude_code_folder_as_a_topic_file_with_its_index_line(
    profile, tmp_path
):
    folder = _linked(profile, tmp_path, "claude-code")
    saved = service.save(profile, "Deploys go out on Tuesdays after the 10:00 standup.", category="process", now=NOW)
    live_before = _live(profile)
    assert write_back(profile, now=LATER).status == "completed"
    topic = (folder / "process.md").read_text(encoding="utf-8")
    assert topic.startswith("---\nname: process\n") and "type: project\n" in topic
    assert "- Deploys go out on Tuesdays after the 10:00 standup.\n" in topic
    assert "](process.md)" in (folder / "MEMORY.md").read_text(encoding="utf-8")
    # read again: the note is the memory it came from, not a second one; the next write-back writes nothing
    assert read_folder(profile, now=LATER).status == "completed"
    assert _live(profile) == live_before
    assert plan_write_back(profile, now=LATER).changes == []
    assert open_store(profile).memories.get(saved.id).archived_at is None


def test_memories_saved_before_the_folder_was_linked_stay_out_of_it(profile, tmp_path):
    service.save(
        profile, "An old fact kept before any folder was linked.", category="process", now=LINKED - timedelta(days=3)
    )
    folder = _linked(profile, tmp_path, "claude-code")
    before = _texts(folder)
    assert write_back(profile, now=LATER).status == "completed"
    assert _texts(folder) == before


@pytest.mark.parametrize("fmt,home", [("openclaw", "memory/2026-11-30.md"), ("markdown", "general.md")])
def test_openclaw_writes_it_in_the_days_note_and_a_markdown_folder_in_a_file_of_its_category(
    profile, tmp_path, fmt, home
):
    folder = _linked(profile, tmp_path, fmt)
    service.save(profile, "The on-call phone is 555-0142.", category="general", now=NOW)
    assert write_back(profile, now=NOW + timedelta(hours=1)).status == "completed"
    assert "- The on-call phone is 555-0142.\n" in (folder / home).read_text(encoding="utf-8")
    assert plan_write_back(profile, now=LATER).changes == []


def test_a_second_memory_of_the_same_category_goes_under_the_first_in_its_file(profile, tmp_path):
    folder = _linked(profile, tmp_path, "claude-code")
    service.save(profile, "Deploys go out on Tuesdays.", category="process", now=NOW)
    assert write_back(profile, now=LATER).status == "completed"
    service.save(profile, "Hotfixes skip the release train and need two approvals.", category="process", now=LATER)
    assert write_back(profile, now=LATER + timedelta(minutes=1)).status == "completed"
    topic = (folder / "process.md").read_text(encoding="utf-8")
    assert topic.index("Deploys go out") < topic.index("Hotfixes skip")
    assert (folder / "MEMORY.md").read_text(encoding="utf-8").count("](process.md)") == 1


def test_the_file_a_person_is_editing_is_left_and_the_memory_waits_for_the_next_write_back(profile, tmp_path):
    folder = _linked(profile, tmp_path, "claude-code")
    service.save(profile, "Deploys go out on Tuesdays.", category="process", now=NOW)
    index = folder / "MEMORY.md"
    index.write_text(index.read_text(encoding="utf-8") + "- [Scratch](scratch.md) — a person's line\n")
    plan = plan_write_back(profile, now=LATER)
    assert any("wait until it is read again" in line for line in plan.left)
    assert write_back(profile, now=LATER).status == "completed"
    assert not (folder / "process.md").exists()
    assert index.read_text(encoding="utf-8").endswith("- [Scratch](scratch.md) — a person's line\n")
    assert read_folder(profile, now=LATER).status == "completed"
    assert write_back(profile, now=LATER + timedelta(minutes=1)).status == "completed"
    assert "Deploys go out on Tuesdays." in (folder / "process.md").read_text(encoding="utf-8")
    assert index.read_text(encoding="utf-8").count("](process.md)") == 1


def test_undoing_the_agents_save_takes_its_note_and_index_line_out_of_the_folder_again(profile, tmp_path, capsys):
    folder = _linked(profile, tmp_path, "claude-code")
    before = _texts(folder)
    saved = service.save(profile, "Deploys go out on Tuesdays.", category="process", now=NOW)
    assert main(["sync", "--profile", str(profile.root), "--now", LATER.isoformat()]) == 0
    assert (folder / "process.md").exists()
    assert main(["undo", "--profile", str(profile.root), "--cycle", cycle_ids.agent_day(NOW)]) == 0
    after = {k: v for k, v in _texts(folder).items() if not k.startswith("archive/")}
    assert after == before
    assert open_store(profile).memories.get(saved.id).archived_at is not None


def test_a_memory_read_from_the_folder_is_never_written_back_as_a_second_note(profile, tmp_path):
    folder = _linked(profile, tmp_path, "claude-code")
    (folder / "user_editor.md").write_text("---\nname: Editor\ndescription: editor\ntype: user\n---\n\nUses Helix.\n")
    with open(folder / "MEMORY.md", "a", encoding="utf-8") as fh:
        fh.write("- [Editor](user_editor.md) — the editor the user uses\n")
    assert read_folder(profile, now=NOW).status == "completed"
    before = _texts(folder)
    assert write_back(profile, now=LATER).status == "completed"
    assert _texts(folder) == before


def test_a_note_a_person_adds_to_the_folder_is_found_by_the_next_search_without_a_cycle(profile, tmp_path):
    folder = _linked(profile, tmp_path, "claude-code")
    topic = folder / "user_role.md"
    topic.write_text(topic.read_text(encoding="utf-8") + "\n- Prefers Helix over Vim for quick edits.\n")
    hits = service.search(profile, "Helix editor quick edits", now=NOW).hits
    assert any("Helix" in h.content for h in hits)
    # and the note the person takes out again is no longer found
    topic.write_text(topic.read_text(encoding="utf-8").replace("- Prefers Helix over Vim for quick edits.\n", ""))
    hits = service.search(profile, "Helix editor quick edits", now=LATER).hits
    assert not any("Helix" in h.content for h in hits)


def test_a_search_with_nothing_changed_in_the_folder_reads_no_file(profile, tmp_path, monkeypatch):
    import dream_assets.folders.sync as sync

    _linked(profile, tmp_path, "claude-code")
    reads: list[str] = []
    monkeypatch.setattr(sync, "scan", lambda *a, **k: reads.append("scan") or {})
    service.search(profile, "release freeze", now=NOW)
    service.save(profile, "Deploys go out on Tuesdays.", category="process", now=NOW)
    assert reads == []


def test_a_search_while_the_folder_is_being_written_back_answers_from_the_store(profile, tmp_path):
    from dream_assets.store.locks import path_lock

    folder = _linked(profile, tmp_path, "claude-code")
    topic = folder / "user_role.md"
    topic.write_text(topic.read_text(encoding="utf-8") + "\n- Prefers Helix over Vim for quick edits.\n")
    with path_lock(profile.memory_folder_lock_path):  # a cycle's write-back holds it
        hits = service.search(profile, "Helix editor quick edits", now=NOW).hits
    assert not any("Helix" in h.content for h in hits)
    assert any("Helix" in h.content for h in service.search(profile, "Helix editor quick edits", now=NOW).hits)


def test_a_langgraph_agent_finds_a_note_a_person_just_added_to_the_linked_folder(profile, tmp_path):
    from dream_assets.langgraph_store import LangGraphMemoryStore

    folder = _linked(profile, tmp_path, "claude-code")
    topic = folder / "user_role.md"
    topic.write_text(topic.read_text(encoding="utf-8") + "\n- Prefers Helix over Vim for quick edits.\n")
    store = LangGraphMemoryStore(profile, clock=lambda: NOW)
    try:
        items = store.search(("claude-code",), query="Helix editor quick edits")
    finally:
        store.close()
    assert any("Helix" in str(item.value) for item in items)
