"""An OpenClaw workspace dreamed over: what recurs in daily notes is promoted into MEMORY.md the way OpenClaw's own
Dreaming promotes (markers, daily notes untouched), under the merge's guards, with the diary in DREAMS.md; a second
cycle promotes nothing and rewrites no file, and undo puts MEMORY.md back."""

from __future__ import annotations

import re
import shutil
from pathlib import Path

from dream_assets.cli import main
from dream_assets.cycle import run_cycle
from dream_assets.folders import apply_write_back, link_folder, plan_write_back, read_folder, write_back
from dream_assets.folders.formats import parse_file
from dream_assets.folders.promotion import DIARY_END, DIARY_START, MARKER_PREFIX, diary
from dream_assets.llm.client import ModelClient
from dream_assets.llm.scripted import ScriptedBackend
from dream_assets.options import DreamOptions
from dream_assets.options_loader import dream_options
from dream_assets.passes.registry import PASSES
from dream_assets.store import open_store
from dream_assets.text.coverage import specifics_of
from dream_assets_tests.conftest import NOW
from dream_assets_tests.e2e.test_folders import _files

FIXTURE = Path(__file__).parent.parent / "fixtures" / "folders" / "openclaw"
DAILY = ("memory/2026-04-01.md", "memory/2026-04-02-standup.md")
MERGED = "Ravi wants the Q2 budget draft by Friday 2026-04-04."


def _workspace(profile, tmp_path: Path) -> Path:
    folder = tmp_path / "workspace"
    shutil.copytree(FIXTURE, folder)
    link_folder(profile, folder, "openclaw")
    return folder


def _promoted(folder: Path) -> str:
    """The promotion section of MEMORY.md ('' when there is none)."""
    text = (folder / "MEMORY.md").read_text(encoding="utf-8")
    at = text.find("## Promoted From Short-Term Memory")
    return text[at:] if at >= 0 else ""


def _merge_ravi(request):
    """A scripted model that merges the two budget notes into one sentence that keeps every specific."""
    if request.pass_name != "memory_consolidation":
        raise AssertionError(f"unexpected model call of {request.pass_name}")
    ids = [e["id"] for e in request.inputs["entries"] if "Q2 budget" in e["content"]]
    if len(ids) < 2:
        return {"toDelete": [], "toSave": []}
    return {"toDelete": [], "toSave": [{"content": MERGED, "sourceIds": ids}]}


def _scripted(profile, options: DreamOptions | None = None, cycle_id: str | None = None):
    options = options or dream_options(ContradictionSweepEnabled=False)
    client = ModelClient(ScriptedBackend(_merge_ravi), profile=profile, options=options)
    reports = run_cycle(profile, options, NOW, client_factory=lambda: client, cycle_id=cycle_id)
    return {r.pass_name: r for r in reports}


def test_the_offline_cycle_promotes_what_recurs_in_daily_notes_and_leaves_the_daily_notes_as_they_were(
    profile, tmp_path
):
    folder = _workspace(profile, tmp_path)
    before = _files(folder)
    daily_specifics = {
        s.text for rel in DAILY for s in specifics_of((folder / rel).read_text(encoding="utf-8")) if "Ravi" in s.text
    } | {"Q2", "2026-04-04"}
    reports = {r.pass_name: r for r in run_cycle(profile, dream_options(), NOW)}
    assert reports["memory_folder_write"].status == "completed", reports["memory_folder_write"].reason
    after = _files(folder)
    assert {rel: after[rel] for rel in DAILY} == {rel: before[rel] for rel in DAILY}  # bytes and mtimes
    assert not (folder / "archive").exists()
    section = _promoted(folder)
    assert section.startswith("## Promoted From Short-Term Memory (2026-11-30)\n\n")
    markers = re.findall(r"<!-- openclaw-memory-promotion:(\S+) -->", section)
    assert markers == ["memory:memory/2026-04-01.md:4:4", "memory:memory/2026-04-02-standup.md:3:3"]
    assert all(s in section for s in daily_specifics)
    assert "Dentist" not in section and "dentist" not in section and "Deploys" not in section  # they did not recur
    memory_md = (folder / "MEMORY.md").read_text(encoding="utf-8")
    assert memory_md.startswith(before["MEMORY.md"][0].decode("utf-8"))  # the curated part, byte for byte
    # The promoted bullet reads back as one note whose memory is the live merged one; the markers are no notes.
    blocks = parse_file("openclaw", "MEMORY.md", memory_md).blocks
    assert not any(MARKER_PREFIX in b.text for b in blocks)
    live = {e.content: e for e in open_store(profile).memories.list_live()}
    promoted = [b for b in blocks if "Ravi" in b.text]
    assert len(promoted) == 1 and " ".join(promoted[0].text.split()) in {" ".join(c.split()) for c in live}
    dreams = (folder / "DREAMS.md").read_text(encoding="utf-8")
    assert dreams.startswith(before["DREAMS.md"][0].decode("utf-8").rsplit(DIARY_END, 1)[0])
    entry = dreams[dreams.rindex("---") : dreams.rindex(DIARY_END)]
    assert "*2026-11-30T12:00:00Z*" in entry and "Promoted to MEMORY.md: " in entry and "Q2 budget" in entry
    assert dreams.count(DIARY_START) == 1 and dreams.endswith(DIARY_END + "\n")

    # A second cycle promotes nothing new and rewrites no file; a read after it imports nothing.
    settled = _files(folder)
    again = {r.pass_name: r for r in run_cycle(profile, dream_options(), NOW)}
    assert again["memory_folder_write"].counts["files_written"] == 0
    assert _files(folder) == settled
    read = read_folder(profile, now=NOW)
    assert read.status == "completed" and not read.counts, read.counts


def test_a_scripted_merge_across_daily_notes_is_promoted_and_undo_puts_memory_md_back(profile, tmp_path, capsys):
    folder = _workspace(profile, tmp_path)
    read_folder(profile, now=NOW)  # the read's saves are the agent's, not the cycle's
    before = {k: v[0] for k, v in _files(folder).items()}
    reports = _scripted(profile, cycle_id="promote-cycle")
    assert reports["memory_consolidation"].counts.get("merged") == 1, reports["memory_consolidation"].summary
    section = _promoted(folder)
    assert section.endswith(f"\n- {MERGED}\n")
    assert {k: (folder / k).read_bytes() for k in DAILY} == {k: before[k] for k in DAILY}
    assert plan_write_back(profile, now=NOW).changes == []  # settled: nothing more to write

    assert main(["undo", "--profile", str(profile.root), "--cycle", "promote-cycle"]) == 0
    assert f"put back {folder / 'MEMORY.md'}" in capsys.readouterr().out
    assert (folder / "MEMORY.md").read_bytes() == before["MEMORY.md"]
    assert {k: (folder / k).read_bytes() for k in DAILY} == {k: before[k] for k in DAILY}
    live = {e.content for e in open_store(profile).memories.list_live()}
    assert MERGED in live and "Ravi asked for the Q2 budget draft by Friday." in live  # the sources are back
    assert not any("Ravi" in c and "asked" in c and "wants" in c for c in live)


def test_a_fact_in_fewer_daily_notes_than_the_option_asks_is_merged_in_place_not_promoted(profile, tmp_path):
    folder = _workspace(profile, tmp_path)
    reports = _scripted(profile, dream_options(ContradictionSweepEnabled=False, FolderPromotionMinDailyNotes=3))
    assert reports["memory_consolidation"].counts.get("merged") == 1
    assert _promoted(folder) == ""
    assert f"- {MERGED}\n" in (folder / "memory" / "2026-04-01.md").read_text(encoding="utf-8")
    assert "Ravi wants" in (folder / "archive" / "memory" / "2026-04-02-standup.md").read_text(encoding="utf-8")


def test_the_same_line_in_two_daily_notes_is_promoted_once_without_a_merge(profile, tmp_path):
    folder = _workspace(profile, tmp_path)
    line = "- The office wifi password rotates on the 1st of each month.\n"
    for rel in DAILY:
        with open(folder / rel, "a", encoding="utf-8") as fh:
            fh.write(line)
    read_folder(profile, now=NOW)
    wifi = [e for e in open_store(profile).memories.list_all() if "wifi" in e.content]
    assert len(wifi) == 1  # the second note reinforced the first at save time
    assert write_back(profile, now=NOW).status == "completed"
    assert _promoted(folder).count(line) == 1
    assert all((folder / rel).read_text(encoding="utf-8").endswith(line) for rel in DAILY)
    assert plan_write_back(profile, now=NOW).changes == []


def _passes_only(profile) -> None:
    options = dream_options(ContradictionSweepEnabled=False)
    client = ModelClient(ScriptedBackend(_merge_ravi), profile=profile, options=options)
    run_cycle(profile, options, NOW, client_factory=lambda: client, only=[p.name for p in PASSES])


def _person_edits_memory_md(folder: Path) -> str:
    path = folder / "MEMORY.md"
    edited = path.read_text(encoding="utf-8") + "- Allergic to penicillin.\n"
    path.write_text(edited, encoding="utf-8")
    return edited


def _kept_then_promoted_next_cycle(profile, folder: Path, edited: str, daily: dict[str, bytes]) -> None:
    """The person's MEMORY.md stands and the daily notes are untouched; the next cycle reads the edit, then writes the
    promotion after the person's line, the daily notes still untouched."""
    assert (folder / "MEMORY.md").read_text(encoding="utf-8") == edited
    assert {rel: (folder / rel).read_bytes() for rel in DAILY} == daily
    assert read_folder(profile, now=NOW).status == "completed"
    assert write_back(profile, now=NOW).status == "completed"
    assert (folder / "MEMORY.md").read_text(encoding="utf-8").startswith(edited)
    assert MERGED in _promoted(folder)
    assert {rel: (folder / rel).read_bytes() for rel in DAILY} == daily


def test_memory_md_edited_since_the_read_makes_the_promotion_wait_with_the_daily_notes_untouched(profile, tmp_path):
    folder = _workspace(profile, tmp_path)
    read_folder(profile, now=NOW)
    _passes_only(profile)
    daily = {rel: (folder / rel).read_bytes() for rel in DAILY}
    edited = _person_edits_memory_md(folder)
    plan = plan_write_back(profile, now=NOW)
    assert any("promotion(s) from daily notes wait" in line for line in plan.left), plan.left
    assert not set(DAILY) & {c.rel for c in plan.changes}  # not merged in place meanwhile either
    assert write_back(profile, now=NOW).status == "completed"
    _kept_then_promoted_next_cycle(profile, folder, edited, daily)


def test_memory_md_edited_while_the_write_back_runs_keeps_the_edit_and_promotes_next_time(profile, tmp_path):
    folder = _workspace(profile, tmp_path)
    read_folder(profile, now=NOW)
    _passes_only(profile)
    daily = {rel: (folder / rel).read_bytes() for rel in DAILY}
    plan = plan_write_back(profile, now=NOW)
    assert "MEMORY.md" in {c.rel for c in plan.changes}
    edited = _person_edits_memory_md(folder)  # between the plan and its write
    report = apply_write_back(profile, plan)
    assert any("MEMORY.md: edited while the cycle ran" in line for line in report.lines), report.lines
    _kept_then_promoted_next_cycle(profile, folder, edited, daily)


def test_a_diary_entry_goes_inside_openclaws_diary_markers_and_keeps_what_is_there():
    old = f"# Dream Diary\n\n{DIARY_START}\n---\n\n*April 1*\n\nQuiet.\n\n{DIARY_END}\n\n## Deep Sleep\n\nkept\n"
    new = diary(old, ["Promoted to MEMORY.md: x."], NOW)
    assert new.replace("---\n\n*2026-11-30T12:00:00Z*\n\nPromoted to MEMORY.md: x.\n\n", "", 1) == old
    assert new.index("*2026-11-30T12:00:00Z*") < new.index(DIARY_END) < new.index("## Deep Sleep")
    fresh = diary(None, ["a."], NOW)
    assert fresh == f"# Dream Diary\n\n{DIARY_START}\n---\n\n*2026-11-30T12:00:00Z*\n\na.\n\n{DIARY_END}\n"
