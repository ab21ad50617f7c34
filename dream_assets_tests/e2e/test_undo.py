"""Whole-cycle undo: every cycle can be undone — including one whose archive purge hard-deleted entries — an undo
killed half-way is finished by running it again, and what cannot be put back is named, not hidden."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import textwrap
from datetime import timedelta
from pathlib import Path

import pytest

from dream_assets import recall_index as recall
from dream_assets.changes_model import ChangeRow, SuccessorHow
from dream_assets.cli import main
from dream_assets.cycle import run_cycle
from dream_assets.demo import build_demo_profile
from dream_assets.model import MemoryEntry, iso, new_id
from dream_assets.options_loader import dream_options, load_agent_options
from dream_assets.passes.archive_purge import run_archive_purge
from dream_assets.passes.context import PassContext
from dream_assets.profile import AgentProfile
from dream_assets.store import open_store
from dream_assets.store.changes import KEEP_ARCHIVED_UNTIL_KEY, UNDO_PASS, undo_cycle_id
from dream_assets.store.connection import close_all

from ..conftest import NOW, held_by_another_process

LATER = NOW + timedelta(minutes=30)
CYCLE = "cycle-1"


def _records(store) -> dict[str, dict]:
    return {e.id: e.to_dict() for e in store.memories.list_all()}


def _what_counts(rec: dict) -> tuple:
    return rec["content"], rec["category"], tuple(rec["tags"]), rec["archived_at"]


@pytest.fixture(scope="module")
def demo_cycle(tmp_path_factory) -> tuple[Path, dict[str, dict]]:
    """The demo agent (small), before and after one cycle whose archive purge deleted entries and whose
    consolidation merged some: (profile folder after the cycle, records before the cycle)."""
    root = tmp_path_factory.mktemp("demo") / "demo"
    profile = AgentProfile(root)
    build_demo_profile(profile, NOW, n_memories=120)
    store = open_store(profile, load_agent_options(profile))
    before = _records(store)
    reports = run_cycle(
        profile,
        dream_options(),
        NOW,
        cycle_id=CYCLE,
        only=["archive_purge", "importance_decay", "memory_consolidation"],
    )
    assert all(r.status == "completed" for r in reports), [(r.pass_name, r.summary) for r in reports]
    kinds = {c.kind for c in store.changes.list(CYCLE)}
    assert {"purged", "created", "archived"} <= kinds
    close_all()
    return root, before


@pytest.fixture
def cycled(demo_cycle, tmp_path) -> tuple[AgentProfile, dict[str, dict]]:
    root, before = demo_cycle
    copy = tmp_path / "agents" / "demo"
    shutil.copytree(root, copy)
    return AgentProfile(copy), before


def _assert_undone(store, before: dict[str, dict]) -> None:
    after = _records(store)
    missing = set(before) - set(after)
    assert not missing, f"entries not put back: {sorted(missing)}"
    changed = {i for i in before if _what_counts(after[i]) != _what_counts(before[i])}
    assert not changed, f"entries not as before: {sorted(changed)}"
    created = set(after) - set(before)
    assert created and all(after[i]["archived_at"] is not None for i in created)  # retired, never deleted


def test_a_cycle_whose_purge_deleted_entries_can_be_undone_and_purged_entries_come_back_as_they_were(cycled):
    profile, before = cycled
    store = open_store(profile, load_agent_options(profile))
    purged = [c.target_id for c in store.changes.list(CYCLE) if c.kind == "purged"]
    assert purged and all(store.memories.get(i) is None for i in purged)
    result = store.changes.undo_cycle(CYCLE, now=LATER)
    assert result.ok and not result.not_restored and not result.refused
    _assert_undone(store, before)
    keep = iso(LATER + dream_options().MemoryArchiveRetention)
    for i in purged:  # the whole record, archived with its archived_at, not just its text; kept a full period again
        back = store.memories.get(i).to_dict()
        assert back["metadata"].pop(KEEP_ARCHIVED_UNTIL_KEY) == keep
        assert back == before[i]
        assert f"kept archived until {keep[:10]}" in result.actions[f"memory {i}"].detail
    # the undo is visible, as its own cycle of rows, one per target put back, each kind naming what it did
    rows = store.changes.list(undo_cycle_id(CYCLE))
    assert {r.pass_name for r in rows} == {UNDO_PASS}
    assert {r.kind for r in rows} == {"unpurged", "retired", "unmerged", "put back", "importance put back"}
    assert {r.target_id for r in rows if r.kind == "unpurged"} == set(purged)
    assert sorted(r.target_id for r in rows) == sorted(t.split()[1] for t in result.restored)
    assert all(c.undone_at is not None for c in store.changes.list(CYCLE) if c.kind != "stamped")


def test_undo_from_the_command_line_exits_0_and_running_it_again_has_nothing_left(cycled, capsys):
    profile, before = cycled
    args = ["undo", "--profile", str(profile.root), "--cycle", CYCLE, "--now", LATER.isoformat()]
    assert main(args) == 0
    out = capsys.readouterr().out
    assert "could not be restored" in out and "0 could not be restored" in out
    _assert_undone(open_store(profile, load_agent_options(profile)), before)
    assert main(args) == 0  # idempotent: nothing left, still a success
    again = capsys.readouterr().out
    assert "0 put back" in again and "already undone memory" in again


def test_a_purged_entry_that_cannot_be_restored_is_named_and_everything_else_is_undone(cycled, capsys):
    profile, before = cycled
    store = open_store(profile, load_agent_options(profile))
    purged = [c for c in store.changes.list(CYCLE) if c.kind == "purged"]
    broken = purged[0].target_id
    with store.connection.session() as conn:  # a purge row whose kept record lost its fields
        conn.execute(
            "UPDATE changes SET before_json = ? WHERE change_id = ?",
            [json.dumps({"id": broken}), purged[0].change_id],
        )
    # everything else is undone, and the undo says it is not whole: exit 1, not success
    assert main(["undo", "--profile", str(profile.root), "--cycle", CYCLE, "--now", LATER.isoformat()]) == 1
    captured = capsys.readouterr()
    assert f"NOT restored memory {broken}: the record kept by archive_purge (purged) is incomplete" in captured.err
    assert "1 could not be restored" in captured.out
    store = open_store(profile, load_agent_options(profile))
    assert store.memories.get(broken) is None
    _assert_undone(store, {k: v for k, v in before.items() if k != broken})
    # its change stays pending, so a later retry can still restore it once the row is repaired
    assert [c.undone_at for c in store.changes.list(CYCLE) if c.target_id == broken] == [None]


_CRASHING_UNDO = textwrap.dedent("""
    import os, sys
    from datetime import datetime
    from dream_assets.profile import AgentProfile
    from dream_assets.store import open_store
    from dream_assets.store import changes

    root, cycle, step, after_n = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
    seen = 0

    def crash(name):
        global seen
        if name == step:
            seen += 1
            if seen > after_n:
                os._exit(9)

    changes.step_hook = crash
    store = open_store(AgentProfile(root))
    store.changes.undo_cycle(cycle, now=datetime.fromisoformat(sys.argv[5]))
    os._exit(0)
""")


@pytest.mark.parametrize("step", ["undo:put-back", "undo:target-done"])
@pytest.mark.slow  # a fault run: an undo killed at each step
def test_an_undo_killed_half_way_is_finished_by_running_it_again_without_force(cycled, step):
    profile, before = cycled
    done = subprocess.run(
        [sys.executable, "-c", _CRASHING_UNDO, str(profile.root), CYCLE, step, "3", LATER.isoformat()],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 9, done.stderr
    store = open_store(profile, load_agent_options(profile))
    marked = [c for c in store.changes.list(CYCLE) if c.undone_at is not None]
    # a target is put back together with the marking of its changes: killed inside a target's transaction, that
    # target is neither; killed after it, it is both
    assert len({c.target_id for c in marked}) == (3 if step == "undo:put-back" else 4)
    result = store.changes.undo_cycle(CYCLE, now=LATER + timedelta(minutes=1))
    assert result.ok, result.refused + result.not_restored
    assert len(result.already_undone) == len({c.target_id for c in marked})
    _assert_undone(store, before)
    assert all(c.undone_at is not None for c in store.changes.list(CYCLE) if c.kind != "stamped")


def test_a_target_found_as_it_was_before_the_cycle_counts_as_undone(cycled):
    profile, before = cycled
    store = open_store(profile, load_agent_options(profile))
    archived = next(c for c in store.changes.list(CYCLE) if c.kind == "archived")
    store.memories.replace(MemoryEntry.from_dict(before[archived.target_id]))  # put back by hand, outside undo
    result = store.changes.undo_cycle(CYCLE, now=LATER)
    assert result.ok
    assert f"memory {archived.target_id}" in result.already_undone
    assert f"memory {archived.target_id}" not in result.restored
    _assert_undone(store, before)


def test_a_decayed_entry_whose_later_change_was_put_back_by_hand_gets_its_importance_back(cycled):
    profile, before = cycled
    store = open_store(profile, load_agent_options(profile))
    rows = store.changes.list(CYCLE)
    decayed = {c.target_id for c in rows if c.kind == "decayed"}
    archived = next(c for c in rows if c.kind == "archived" and c.target_id in decayed)
    store.memories.replace(MemoryEntry.from_dict(archived.before))  # the merge put back by hand, the decay not
    result = store.changes.undo_cycle(CYCLE, now=LATER)
    assert result.ok and f"memory {archived.target_id}" in result.restored
    assert store.memories.get(archived.target_id).to_dict() == before[archived.target_id]
    _assert_undone(store, before)


def test_an_entry_purged_by_a_later_cycle_is_refused_with_that_reason(profile, store):
    old = NOW - timedelta(days=200)
    e = store.memories.put(
        MemoryEntry(
            id=new_id(),
            content="Ana Ruiz signed the Lisbon lease in 2025.",
            category="general",
            tags=(),
            importance=0.5,
            created_at=old,
            updated_at=old,
            last_seen_at=old,
            reinforcement_count=1,
            metadata={},
        )
    )
    archived = store.memories.archive(e.id, now=old)
    store.changes.record(
        ChangeRow(
            cycle_id="early",
            pass_name="memory_consolidation",
            kind="archived",
            target_type="memory",
            target_id=e.id,
            before=e,
            after=archived,
            reason="merged",
        ),
        now=old,
    )
    run_archive_purge(PassContext(profile, dream_options(), NOW, cycle_id="late", _store=store))
    assert store.memories.get(e.id) is None
    result = store.changes.undo_cycle("early", now=LATER)
    assert not result.applied and not result.restored
    assert result.refused == [
        f"memory {e.id}: no longer exists (purged after cycle early); undo the cycle that purged it first"
    ]
    # undoing the purge first, then the earlier cycle, brings the entry back live
    assert store.changes.undo_cycle("late", now=LATER).ok
    assert store.changes.undo_cycle("early", now=LATER).ok
    assert store.memories.get(e.id).to_dict() == e.to_dict()
    assert [x.id for x, _ in recall.search(store.memories, "Lisbon lease")] == [e.id]


def test_an_undo_can_itself_be_undone(cycled):
    profile, before = cycled
    store = open_store(profile, load_agent_options(profile))
    left = _records(store)
    assert store.changes.undo_cycle(CYCLE, now=LATER).ok
    assert store.changes.undo_cycle(undo_cycle_id(CYCLE), now=LATER + timedelta(minutes=1)).ok
    now = _records(store)
    # the cycle's content changes are back; entries the undo re-inserted from a purge are retired, never deleted
    assert all(_what_counts(now[i]) == _what_counts(left[i]) for i in left)
    assert all(now[i]["archived_at"] is not None for i in set(now) - set(left))


def test_the_purge_and_its_change_row_are_one_write(profile, store, monkeypatch):
    old = NOW - timedelta(days=200)
    e = store.memories.put(
        MemoryEntry(
            id=new_id(),
            content="Old note about the Oslo kickoff.",
            category="general",
            tags=(),
            importance=0.3,
            created_at=old,
            updated_at=old,
            last_seen_at=old,
            reinforcement_count=1,
            metadata={},
            archived_at=old,
        )
    )
    ctx = PassContext(profile, dream_options(), NOW, cycle_id="p1", _store=store)

    def fail(*a, **k):
        raise OSError("disk full while writing the change row")

    monkeypatch.setattr(ctx, "record", fail)
    with pytest.raises(OSError):
        run_archive_purge(ctx)
    assert store.memories.get(e.id) is not None and e.id not in store.memories.purged_ids()


_CRASHING_PURGE = textwrap.dedent("""
    import os, sys
    from datetime import datetime
    from dream_assets.options import DreamOptions
    from dream_assets.passes.archive_purge import run_archive_purge
    from dream_assets.passes.context import PassContext
    from dream_assets.profile import AgentProfile

    ctx = PassContext(AgentProfile(sys.argv[1]), DreamOptions(), datetime.fromisoformat(sys.argv[2]), cycle_id="p1")
    ctx.record = lambda *a, **k: os._exit(9)   # killed after the delete, before its change row
    run_archive_purge(ctx)
    os._exit(0)
""")


def test_a_purge_killed_before_its_change_row_deletes_nothing(profile, store):
    old = NOW - timedelta(days=200)
    e = store.memories.put(
        MemoryEntry(
            id=new_id(),
            content="Old note about the Oslo kickoff.",
            category="general",
            tags=(),
            importance=0.3,
            created_at=old,
            updated_at=old,
            last_seen_at=old,
            reinforcement_count=1,
            metadata={},
            archived_at=old,
        )
    )
    store.close()
    done = subprocess.run(
        [sys.executable, "-c", _CRASHING_PURGE, str(profile.root), NOW.isoformat()],
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ},
    )
    assert done.returncode == 9, done.stderr
    assert store.memories.get(e.id) is not None
    assert e.id not in store.memories.purged_ids() and store.changes.list("p1") == []


def test_an_undo_refused_because_an_entry_was_edited_changes_nothing_and_exits_3(cycled, capsys):
    profile, _ = cycled
    store = open_store(profile, load_agent_options(profile))
    created = next(c for c in store.changes.list(CYCLE) if c.kind == "created")
    store.memories.update(created.target_id, now=LATER, content="Edited by hand after the cycle.")
    left = _records(store)
    close_all()
    assert main(["undo", "--profile", str(profile.root), "--cycle", CYCLE, "--now", LATER.isoformat()]) == 3
    captured = capsys.readouterr()
    assert f"refused  memory {created.target_id}: edited after cycle {CYCLE}" in captured.err
    assert "nothing was changed (pass --force to undo the rest)" in captured.out
    assert _records(open_store(profile, load_agent_options(profile))) == left
    # --force undoes everything else and leaves the edited entry as the user left it
    assert main(["undo", "--profile", str(profile.root), "--cycle", CYCLE, "--force", "--now", LATER.isoformat()]) == 0
    after = _records(open_store(profile, load_agent_options(profile)))
    assert after[created.target_id]["content"] == "Edited by hand after the cycle."
    assert all(
        after[c.target_id]["content"] == c.before["content"]
        for c in open_store(profile, load_agent_options(profile)).changes.list(CYCLE)
        if c.kind == "purged"
    )


def test_undo_on_a_corrupt_store_stops_with_the_reason_not_a_traceback(cycled, capsys):
    profile, _ = cycled
    profile.store_path.write_bytes(b"")
    assert main(["undo", "--profile", str(profile.root), "--cycle", CYCLE, "--now", LATER.isoformat()]) == 2
    err = capsys.readouterr().err
    assert "undo stopped:" in err and str(profile.store_path) in err and "not a readable DuckDB database" in err


def test_an_undo_while_the_agent_waits_for_the_store_takes_turns_not_one_per_target(cycled, monkeypatch):
    """Another process waits for the file all along (the agent saving): the undo still puts many targets back per
    turn of the file instead of handing it over after every target."""
    from dream_assets.store.connection import StoreConnection

    profile, before = cycled
    store = open_store(profile, load_agent_options(profile))
    targets = len({(c.target_type, c.target_id) for c in store.changes.list(CYCLE) if c.kind != "stamped"})
    assert targets >= 20
    monkeypatch.setattr(StoreConnection, "others_waiting", lambda self: True)
    store.connection.turn_budget_s = 3600.0  # a turn outlasts the undo, however slow this machine is
    opened = store.connection.opens
    result = store.changes.undo_cycle(CYCLE, now=NOW + timedelta(hours=1))
    assert result.ok, result
    assert store.connection.opens - opened <= 3, f"{store.connection.opens - opened} turns for {targets} targets"
    _assert_undone(store, before)


# ------------------------------------------------------------------ cycles built on cycles
def _consolidate(profile, store, cycle_id: str, now, answer_fn):
    from dream_assets.llm.client import ModelClient
    from dream_assets.llm.scripted import ScriptedBackend
    from dream_assets.passes.memory_consolidation import run_memory_consolidation

    options = dream_options(ConsolidationMinInterval=timedelta(0), ConsolidationExactFoldEnabled=False)
    client = ModelClient(ScriptedBackend(answer_fn), profile=profile, options=options)
    ctx = PassContext(profile, options, now, cycle_id=cycle_id, client_factory=lambda: client, _store=store)
    report = run_memory_consolidation(ctx)
    assert report.status == "completed", report.reason
    return report


def _merge_everything_shown(content: str):
    def answer(request):
        ids = [e["id"] for e in request.inputs["entries"]]
        return {"toDelete": [], "toSave": [{"content": content, "sourceIds": ids}]}

    return answer


def _entry(content: str, days: int = 30) -> MemoryEntry:
    at = NOW - timedelta(days=days)
    return MemoryEntry(new_id(), content, "projects", (), 0.5, at, at, at, 1, {})


def test_undoing_a_cycle_a_later_cycle_built_on_is_refused_naming_it_and_newest_first_undoes_both(profile, store):
    a, b = _entry("Kestrel ships on Fridays."), _entry("Kestrel ships on Fridays from dock 4.")
    store.memories.put_many([a, b])
    original = {e.id: e.to_dict() for e in store.memories.list_all()}
    _consolidate(profile, store, "c1", NOW, _merge_everything_shown("Kestrel ships on Fridays from dock 4."))
    (m,) = store.memories.list_live()
    c = store.memories.put(_entry("Kestrel ships on Fridays from dock 4, says Priya Raman.", days=1))
    original[c.id] = c.to_dict()
    _consolidate(
        profile,
        store,
        "c2",
        NOW + timedelta(hours=2),
        _merge_everything_shown("Kestrel ships on Fridays from dock 4, says Priya Raman."),
    )
    assert store.memories.get(m.id).is_archived and len(store.memories.list_live()) == 1
    state = _records(store)

    result = store.changes.undo_cycle("c1", now=LATER, force=True)
    assert result.blocked_by == ["c2"] and not result.restored and not result.ok
    assert any(f"memory {m.id}: cycle c2 built on this cycle's result" in r for r in result.refused)
    assert _records(store) == state  # nothing half-undone, even with force

    assert store.changes.undo_cycle("c2", now=LATER).ok
    assert store.changes.undo_cycle("c1", now=LATER).ok
    live = {e.id for e in store.memories.list_live()}
    assert live == set(original)  # the sources only: no merged entry left live beside them
    assert all(_what_counts(_records(store)[i]) == _what_counts(original[i]) for i in original)


def test_undo_from_the_command_line_names_the_later_cycle_and_changes_nothing(profile, store, capsys):
    a, b = _entry("Heron load tests run on Mondays."), _entry("Heron load tests run on Mondays at 09:00.")
    store.memories.put_many([a, b])
    _consolidate(profile, store, "c1", NOW, _merge_everything_shown("Heron load tests run on Mondays at 09:00."))
    (m,) = store.memories.list_live()
    other = store.memories.put(_entry("Heron load tests run on Mondays at 09:00; results go to Priya Raman.", 1))
    _consolidate(
        profile,
        store,
        "c2",
        NOW + timedelta(hours=2),
        _merge_everything_shown("Heron load tests run on Mondays at 09:00; results go to Priya Raman."),
    )
    assert store.memories.get(other.id).is_archived and store.memories.get(m.id).is_archived
    state = _records(store)
    close_all()
    code = main(["undo", "--profile", str(profile.root), "--cycle", "c1", "--now", LATER.isoformat()])
    out = capsys.readouterr()
    assert code == 3
    assert "later cycle(s) c2 built on its results; nothing was changed" in out.out
    assert "--cycle c2" in out.out
    assert _records(open_store(profile, load_agent_options(profile))) == state


def test_undo_while_a_pass_of_the_agent_is_running_is_refused_and_changes_nothing(cycled, capsys):
    profile, _ = cycled
    store = open_store(profile, load_agent_options(profile))
    state = _records(store)
    close_all()
    with held_by_another_process(
        f"""
        from contextlib import ExitStack
        from pathlib import Path
        from dream_assets.store.locks import path_lock
        held = ExitStack()
        held.enter_context(path_lock(Path({str(profile.pass_lock_path("memory_consolidation"))!r}), timeout=10))
        """
    ):
        code = main(["undo", "--profile", str(profile.root), "--cycle", CYCLE, "--now", LATER.isoformat()])
        err = capsys.readouterr().err
        assert code == 2
        assert "undo refused: pass memory_consolidation is running for agent" in err
    assert _records(open_store(profile, load_agent_options(profile))) == state
    # Once the pass is done the undo goes through.
    assert main(["undo", "--profile", str(profile.root), "--cycle", CYCLE, "--now", LATER.isoformat()]) == 0


def test_undoing_one_pass_a_later_pass_of_the_same_cycle_built_on_is_refused_the_whole_cycle_is_not(profile, store):
    merged = store.memories.put(_entry("Kestrel ships on Fridays from dock 4."))
    store.changes.record(
        ChangeRow(
            cycle_id="c1",
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
    archived = store.memories.archive(merged.id, now=NOW)
    store.changes.record(
        ChangeRow(
            cycle_id="c1",
            pass_name="contradiction_sweep",
            kind="archived",
            target_type="memory",
            target_id=merged.id,
            before=merged,
            after=archived,
            reason="superseded by x",
            successor_id="x",
            successor_how=SuccessorHow.SUPERSEDED_BY,
        ),
        now=NOW,
    )
    one_pass = store.changes.undo_cycle("c1", pass_name="memory_consolidation", now=LATER)
    assert not one_pass.restored and one_pass.blocked_by == ["c1"]
    assert "undo pass contradiction_sweep of this cycle (or the whole cycle) first" in one_pass.refused[0]
    whole = store.changes.undo_cycle("c1", now=LATER)
    assert whole.ok and not whole.blocked_by


def test_a_merged_entry_whose_source_cannot_be_put_back_stays_live_and_is_named(cycled, capsys):
    """A source of a merge whose change row lost its record cannot come back: the entry merged from it is not retired
    (its facts would leave the live set), both are named, and the undo exits 1."""
    profile, before = cycled
    store = open_store(profile, load_agent_options(profile))
    rows = store.changes.list(CYCLE)
    merge = next(c for c in rows if c.kind == "created" and (c.after or {}).get("metadata", {}).get("mergedFrom"))
    source = json.loads(merge.after["metadata"]["mergedFrom"])[0]
    first = next(c for c in rows if c.target_id == source and c.kind not in ("stamped", "decayed"))
    with store.connection.session() as conn:  # the record the source is put back from lost its fields
        conn.execute(
            "UPDATE changes SET before_json = ? WHERE change_id = ?",
            [json.dumps({"id": source}), first.change_id],
        )
    assert main(["undo", "--profile", str(profile.root), "--cycle", CYCLE, "--now", LATER.isoformat()]) == 1
    err = capsys.readouterr().err
    assert f"NOT restored memory {source}: the record kept by" in err
    assert f"NOT restored memory {merge.target_id}: memory_consolidation merged it from {source}" in err
    assert not store.memories.get(merge.target_id).is_archived


def _merged_sets(store, cycle: str) -> set[frozenset[str]]:
    return {
        frozenset(json.loads(c.after["metadata"]["mergedFrom"]))
        for c in store.changes.list(cycle)
        if c.kind == "created" and c.after and c.after.get("metadata", {}).get("mergedFrom")
    }


def test_a_merge_a_person_undid_is_not_made_again_by_the_next_cycle(cycled):
    """Undoing a cycle's merges is a person's decision, like rejecting them in review: the next cycle leaves those
    memories apart (until the consolidation cooldown), instead of merging the very same sets again that night."""
    from dream_assets import service

    profile, _ = cycled
    undone = _merged_sets(open_store(profile, load_agent_options(profile)), CYCLE)
    assert undone, "the demo cycle merged nothing: nothing to test"
    report = service.undo(profile, cycle_id=CYCLE, now=LATER)
    assert report.outcome == "done"
    assert set().union(*undone) <= set(report.left_apart)
    assert "left apart" in report.summary
    close_all()
    next_night = NOW + timedelta(days=1)
    run_cycle(profile, dream_options(), next_night, cycle_id="cycle-2", only=["memory_consolidation"])
    assert not _merged_sets(open_store(profile, load_agent_options(profile)), "cycle-2") & undone
    # running the undo again stamps nothing twice, and undoing the undo merges them back as the cycle had
    close_all()
    again = service.undo(profile, cycle_id=CYCLE, now=LATER)
    assert again.left_apart == []


def test_one_source_taken_back_out_of_a_merge_is_left_apart_from_the_merged_entry(cycled):
    """Undoing one source's archive (`dream undo --change`) puts that memory back beside the merged entry that holds
    its text: the two are left apart, so the next cycle does not fold it straight back in."""
    from dream_assets import service

    profile, _ = cycled
    store = open_store(profile, load_agent_options(profile))
    archived = next(
        c for c in store.changes.list(CYCLE) if c.kind == "archived" and c.successor_how is SuccessorHow.MERGED_INTO
    )
    close_all()
    report = service.undo(profile, change_id=archived.change_id, now=LATER)
    assert report.outcome == "done", report.summary
    assert set(report.left_apart) == {archived.target_id, archived.successor_id}
    close_all()
    run_cycle(profile, dream_options(), NOW + timedelta(days=1), cycle_id="cycle-2", only=["memory_consolidation"])
    store = open_store(profile, load_agent_options(profile))
    assert not store.memories.get(archived.target_id).is_archived
    assert not store.memories.get(archived.successor_id).is_archived
