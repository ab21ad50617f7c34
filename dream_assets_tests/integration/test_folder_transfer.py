"""Export and import: a lossless JSONL of the store, and mem0's memory format both ways, all or nothing."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from dream_assets import agent_memory
from dream_assets.cli import main
from dream_assets.cycle import run_cycle
from dream_assets.folders import link_folder
from dream_assets.folders.transfer import ImportRefused, export_jsonl, export_mem0, import_jsonl, import_mem0
from dream_assets.model import Skill, iso
from dream_assets.options_loader import dream_options
from dream_assets.profile import AgentProfile
from dream_assets.store import open_store
from dream_assets_tests.conftest import NOW

FIXTURES = Path(__file__).parent.parent / "fixtures" / "folders"

#: The shape mem0's get_all returns (docs.mem0.ai, "Get Memory" / "Get All Memories").
MEM0_EXPORT = {
    "results": [
        {
            "id": "3c90c3cc-0d44-4b50-8888-8dd25736052a",
            "memory": "Prefers vegetarian food and is allergic to peanuts",
            "hash": "d3b1a1b2c3",
            "metadata": {"source": "onboarding", "confidence": 0.9},
            "categories": ["food", "health"],
            "created_at": "2025-03-01T10:00:00Z",
            "updated_at": "2025-03-02T08:30:00Z",
            "user_id": "alice",
        },
        {
            "id": "7f2c1e4a-1b2c-4d5e-8f90-0a1b2c3d4e5f",
            "memory": "Works at Acme Corp as a data engineer since 2021",
            "hash": "a1b2",
            "metadata": None,
            "created_at": "2025-03-03T09:00:00Z",
            "updated_at": "2025-03-03T09:00:00Z",
            "user_id": "alice",
            "agent_id": "travel-bot",
        },
    ]
}


@pytest.fixture
def dreamed(tmp_path) -> AgentProfile:
    """An agent that read a Claude Code folder, dreamed over it (merges, archives) and has a skill."""
    profile = AgentProfile(tmp_path / "agents" / "source").ensure()
    shutil.copytree(FIXTURES / "claude-code", tmp_path / "cc")
    link_folder(profile, tmp_path / "cc", "claude-code")
    run_cycle(profile, dream_options(), NOW)
    agent_memory.forget(profile, _any_live(profile), reason="no longer true", now=NOW, active=False)
    open_store(profile).skills.put(Skill("release-checklist", "what to check", "1. tag\n2. notes", created_at=NOW))
    return profile


def _any_live(profile) -> str:
    return sorted(e.id for e in open_store(profile).memories.list_live())[0]


def test_export_import_into_an_empty_profile_and_export_again_gives_the_same_bytes(dreamed, tmp_path):
    first = export_jsonl(dreamed, archived=True)
    kinds = [json.loads(line)["kind"] for line in first.splitlines()]
    assert {"memory", "skill", "change"} <= set(kinds)
    assert any(json.loads(line).get("archived_at") for line in first.splitlines() if '"kind": "memory"' in line)
    path = tmp_path / "export.jsonl"
    path.write_text(first, encoding="utf-8")
    empty = AgentProfile(tmp_path / "agents" / "copy").ensure()
    counts = import_jsonl(empty, path)
    assert counts["memories"] == len(open_store(dreamed).memories.list_all())
    assert export_jsonl(empty, archived=True) == first
    rec = open_store(empty).memories.list_live()[0]
    assert rec.metadata.get("folder.file") or rec.metadata.get("mergedFrom")  # provenance came along
    # the change history came along too
    assert agent_memory.history(empty, rec.id, now=NOW).events


def test_export_without_archived_holds_only_live_memories(dreamed):
    lines = [json.loads(x) for x in export_jsonl(dreamed).splitlines()]
    assert all(not x.get("archived_at") for x in lines if x["kind"] in ("memory", "skill"))
    live = {e.id for e in open_store(dreamed).memories.list_live()}
    assert {x["id"] for x in lines if x["kind"] == "memory"} == live


def test_a_malformed_file_is_refused_line_by_line_and_nothing_is_imported(dreamed, tmp_path):
    lines = export_jsonl(dreamed, archived=True).splitlines()
    bad = list(lines)
    bad[1] = "{not json"
    bad[2] = json.dumps({**json.loads(lines[2]), "content": ""})
    bad.insert(3, json.dumps({"kind": "wisdom"}))
    path = tmp_path / "bad.jsonl"
    path.write_text("\n".join(bad) + "\n", encoding="utf-8")
    empty = AgentProfile(tmp_path / "agents" / "copy").ensure()
    with pytest.raises(ImportRefused) as refused:
        import_jsonl(empty, path)
    text = str(refused.value)
    assert f"{path}:2: not JSON" in text and f"{path}:3:" in text and f"{path}:4: field kind 'wisdom'" in text
    store = open_store(empty)
    assert store.memories.list_all() == [] and store.changes.list() == [] and store.skills.list() == []


def test_importing_the_same_file_twice_is_refused_the_second_time_naming_the_ids(dreamed, tmp_path, capsys):
    path = tmp_path / "export.jsonl"
    assert (
        main(["export", "--profile", str(dreamed.root), "--format", "jsonl", "--archived", "--output", str(path)]) == 0
    )
    copy = AgentProfile(tmp_path / "agents" / "copy").ensure()
    assert main(["import", "--profile", str(copy.root), "--format", "jsonl", str(path)]) == 0
    before = export_jsonl(copy, archived=True)
    assert main(["import", "--profile", str(copy.root), "--format", "jsonl", str(path)]) == 1
    assert "is already in the store of copy" in capsys.readouterr().err
    assert export_jsonl(copy, archived=True) == before


def test_a_mem0_export_imports_every_memory_and_exports_back_to_the_same_records(profile, tmp_path):
    path = tmp_path / "mem0.json"
    path.write_text(json.dumps(MEM0_EXPORT), encoding="utf-8")
    assert import_mem0(profile, path, NOW) == {"memories": 2}
    live = {e.content for e in open_store(profile).memories.list_live()}
    assert live == {r["memory"] for r in MEM0_EXPORT["results"]}
    back = json.loads(export_mem0(profile))["results"]
    for mine, theirs in zip(back, MEM0_EXPORT["results"], strict=True):
        assert mine["id"] == theirs["id"] and mine["memory"] == theirs["memory"]
        assert mine["metadata"] == (theirs["metadata"] or {})
        assert mine["created_at"] == theirs["created_at"] and mine["updated_at"] == theirs["updated_at"]
        assert mine["user_id"] == "alice"
        assert len(mine["hash"]) == 32  # mem0's MD5 of the memory text
    assert back[0]["categories"] == ["food", "health"] and back[1]["agent_id"] == "travel-bot"


def test_an_export_to_mem0_imports_into_another_profile_without_losing_a_fact(dreamed, tmp_path):
    path = tmp_path / "to-mem0.json"
    path.write_text(export_mem0(dreamed), encoding="utf-8")
    other = AgentProfile(tmp_path / "agents" / "other").ensure()
    import_mem0(other, path, NOW)
    assert {e.content for e in open_store(other).memories.list_live()} == {
        e.content for e in open_store(dreamed).memories.list_live()
    }


def test_a_mem0_file_with_a_bad_record_is_refused_naming_its_line(profile, tmp_path):
    good = json.dumps(MEM0_EXPORT["results"][0])
    path = tmp_path / "mem0.jsonl"
    path.write_text(good + "\n" + json.dumps({"id": "x1", "memory": ""}) + "\n[1,\n", encoding="utf-8")
    with pytest.raises(ImportRefused) as refused:
        import_mem0(profile, path, NOW)
    assert f"{path}:3: not JSON" in str(refused.value)
    path.write_text(good + "\n" + json.dumps({"id": "x1", "memory": ""}) + "\n", encoding="utf-8")
    with pytest.raises(ImportRefused) as refused:
        import_mem0(profile, path, NOW)
    assert f"{path}:2: field memory is missing or empty" in str(refused.value)
    assert open_store(profile).memories.list_all() == []


def test_undo_in_a_copy_imported_without_archived_keeps_the_merged_entries_and_says_so(tmp_path, capsys):
    """A live-only export holds a merge's result and its change row, not its sources: undoing the merge in the copy
    cannot give the sources back, so the merged entries stay live, each named, and the undo exits non-zero."""
    source = AgentProfile(tmp_path / "agents" / "source").ensure()
    shutil.copytree(FIXTURES / "claude-code", tmp_path / "cc")
    link_folder(source, tmp_path / "cc", "claude-code")
    run_cycle(source, dream_options(), NOW)
    path = tmp_path / "live.jsonl"
    assert main(["export", "--profile", str(source.root), "--format", "jsonl", "--output", str(path)]) == 0
    copy = AgentProfile(tmp_path / "agents" / "copy").ensure()
    assert main(["import", "--profile", str(copy.root), "--format", "jsonl", str(path)]) == 0
    store = open_store(copy)
    merged = [
        c.target_id for c in store.changes.list() if c.kind == "created" and c.pass_name == "memory_consolidation"
    ]
    assert merged, "the dream merged entries"
    [cycle] = {c.cycle_id for c in store.changes.list() if c.target_id in merged}
    live = {e.id: e.content for e in store.memories.list_live()}
    capsys.readouterr()
    code = main(["undo", "--profile", str(copy.root), "--cycle", cycle, "--now", "2026-12-01T00:00:00Z"])
    err = capsys.readouterr().err
    assert code != 0
    assert {e.id: e.content for e in store.memories.list_live()} == live, "no fact left the live set"
    for mid in merged:
        assert f"NOT restored memory {mid}: memory_consolidation merged it from" in err


def test_a_mem0_round_trip_with_archived_keeps_archived_memories_archived_with_their_successor(dreamed, tmp_path):
    """--archived writes archived memories too; imported back they stay archived (not live beside what replaced
    them), with when and why, and a merged source still leads to the entry it was merged into."""
    path = tmp_path / "to-mem0.json"
    assert (
        main(["export", "--profile", str(dreamed.root), "--format", "mem0", "--archived", "--output", str(path)]) == 0
    )
    other = AgentProfile(tmp_path / "agents" / "other").ensure()
    assert main(["import", "--profile", str(other.root), "--format", "mem0", str(path)]) == 0
    mine, theirs = open_store(dreamed), open_store(other)
    state = lambda store: {e.id: (e.content, iso(e.archived_at)) for e in store.memories.list_all()}  # noqa: E731
    assert state(theirs) == state(mine)
    archived = [e.id for e in mine.memories.list_all() if e.is_archived]
    assert archived
    for entry_id in archived:
        was, now = agent_memory.get(dreamed, entry_id, now=NOW), agent_memory.get(other, entry_id, now=NOW)
        assert now.status == "archived"
        assert (now.merged_into, now.superseded_by, now.current_id) == (
            was.merged_into,
            was.superseded_by,
            was.current_id,
        )
        assert now.archived_reason == was.archived_reason
    assert any(agent_memory.get(other, i, now=NOW).merged_into for i in archived), "the dream merged entries"
    # and an export of the copy gives the same file back
    assert export_mem0(other, archived=True) == path.read_text(encoding="utf-8")


def _memory_line(record: dict, **changes) -> dict:
    return {**record, **changes}


#: One bad record each: (what to change in the first memory line or the first change line, the message's field part).
BAD_RECORDS = [
    ("memory", {"tags": ["fine", "a\x00b"]}, "field tags[1] contains a control character (NUL) at character 1"),
    ("memory", {"tags": ["\x1b[31mred"]}, "field tags[0] contains a control character (U+001B) at character 0"),
    ("memory", {"tags": [f"t{i}" for i in range(5000)]}, "field tags has 5000 tags; at most 50 are accepted"),
    ("memory", {"id": ""}, "field id is missing or empty"),
    ("memory", {"id": "a\x00b"}, "field id contains a control character (NUL) at character 1"),
    ("memory", {"id": "x" * 10240}, "field id is 10240 characters, over the limit of 200"),
    ("memory", {"metadata": ["a", "b"]}, "field metadata is not an object of strings (list)"),
    ("memory", {"importance": float("nan")}, "field importance nan is not a number"),
    (
        "memory",
        {"last_seen_at": "9999-12-31T23:59:59Z"},
        "field last_seen_at 9999-12-31T23:59:59Z is more than 366 days",
    ),
    ("change", {"change_kind": "teleported"}, "field change_kind teleported is not a kind of change"),
    ("change", {"target_type": "planet"}, "field target_type planet is not memory or skill"),
    ("change", {"change_id": "c\x00"}, "field change_id contains a control character (NUL)"),
]


@pytest.mark.parametrize(("kind", "changes", "message"), BAD_RECORDS, ids=[m.split(" ", 2)[1] for *_, m in BAD_RECORDS])
def test_a_bad_record_is_refused_with_its_file_line_and_field_and_nothing_is_imported(
    dreamed, tmp_path, capsys, kind, changes, message
):
    lines = export_jsonl(dreamed, archived=True).splitlines()
    n = next(i for i, line in enumerate(lines) if json.loads(line)["kind"] == kind)
    lines[n] = json.dumps({**json.loads(lines[n]), **changes})
    path = tmp_path / "bad.jsonl"
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    copy = AgentProfile(tmp_path / "agents" / "copy").ensure()
    capsys.readouterr()
    assert main(["import", "--profile", str(copy.root), "--format", "jsonl", str(path)]) == 1
    err = capsys.readouterr().err
    assert f"{path}:{n + 1}: {message}" in err
    assert "failed" not in err
    store = open_store(copy)
    assert store.memories.list_all() == [] and store.changes.list() == [] and store.skills.list() == []


def test_a_change_id_twice_is_refused_naming_both_lines(dreamed, tmp_path):
    lines = export_jsonl(dreamed, archived=True).splitlines()
    first = next(i for i, line in enumerate(lines) if json.loads(line)["kind"] == "change")
    dup = json.loads(lines[first + 1])
    lines[first + 1] = json.dumps({**dup, "change_id": json.loads(lines[first])["change_id"]})
    path = tmp_path / "dup.jsonl"
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    with pytest.raises(ImportRefused) as refused:
        import_jsonl(AgentProfile(tmp_path / "agents" / "copy").ensure(), path)
    assert f"{path}:{first + 2}: change" in str(
        refused.value
    ) and f"appears twice (first at {path}:{first + 1})" in str(refused.value)


def test_every_valid_shape_imports(dreamed, tmp_path):
    """A byte-order mark (both formats), a line separator inside a memory, CRLF line ends, and a mem0 graph export
    whose relations (over 4 KB) come before its results: all taken."""
    store = open_store(dreamed)
    entry = store.memories.list_live()[0]
    store.memories.replace(entry.with_(content=entry.content + "\u2028second line"))
    text = export_jsonl(dreamed, archived=True)
    path = tmp_path / "bom.jsonl"
    path.write_bytes(b"\xef\xbb\xbf" + text.replace("\n", "\r\n").encode("utf-8"))
    copy = AgentProfile(tmp_path / "agents" / "copy").ensure()
    assert import_jsonl(copy, path)["memories"] == len(store.memories.list_all())
    assert export_jsonl(copy, archived=True) == text

    relations = [{"source": f"alice{i}", "relationship": "likes", "target": "x" * 40} for i in range(100)]
    graph = {"relations": relations, "results": MEM0_EXPORT["results"]}
    assert len(json.dumps(relations)) > 4096
    path = tmp_path / "graph.json"
    path.write_bytes(b"\xef\xbb\xbf" + json.dumps(graph, indent=2).encode("utf-8"))
    other = AgentProfile(tmp_path / "agents" / "other").ensure()
    counts = import_mem0(other, path, NOW)
    assert counts["memories"] == 2 and counts["graph relations left out (not memories)"] == 100
    assert {e.content for e in open_store(other).memories.list_live()} == {r["memory"] for r in MEM0_EXPORT["results"]}


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"id": "x" * 10240}, "field id is 10240 characters, over the limit of 200"),
        ({"id": ""}, "field id is missing or empty"),
        ({"metadata": ["a"]}, "field metadata is not an object (list)"),
        ({"created_at": "9999-12-31T23:59:59Z"}, "field created_at 9999-12-31T23:59:59Z is more than 366 days"),
        ({"memory": "a\x00b"}, "field memory contains a control character (NUL)"),
    ],
)
def test_a_bad_mem0_record_is_refused_with_its_line_and_field(profile, tmp_path, change, message):
    doc = {"results": [MEM0_EXPORT["results"][0], {**MEM0_EXPORT["results"][1], **change}]}
    path = tmp_path / "mem0.json"
    path.write_text(json.dumps(doc, indent=2), encoding="utf-8")
    line = next(n for n, text in enumerate(path.read_text().split("\n"), 1) if text == "    {" and n > 3)
    with pytest.raises(ImportRefused) as refused:
        import_mem0(profile, path, NOW)
    assert f"{path}:{line}: {message}" in str(refused.value)
    assert open_store(profile).memories.list_all() == []


def test_a_mem0_category_a_save_would_not_take_stays_in_its_metadata_and_the_memory_imports(profile, tmp_path):
    record = {**MEM0_EXPORT["results"][0], "metadata": {"category": "Food & drinks!"}}
    path = tmp_path / "mem0.json"
    path.write_text(json.dumps({"results": [record]}), encoding="utf-8")
    assert import_mem0(profile, path, NOW) == {"memories": 1}
    [entry] = open_store(profile).memories.list_live()
    assert entry.category == "mem0"
    assert json.loads(export_mem0(profile))["results"][0]["metadata"] == {"category": "Food & drinks!"}
