"""Undo puts back what decay and purge did, and says what it did: a decay-only cycle is undoable, an undone purge is
not purged again by the next cycle, and an undone restore says it archived the entry again."""

from __future__ import annotations

from datetime import timedelta

from dream_assets.cli import main
from dream_assets.model import MemoryEntry, iso, new_id
from dream_assets.options import DreamOptions
from dream_assets.options_loader import dream_options
from dream_assets.passes.archive_purge import run_archive_purge
from dream_assets.passes.context import PassContext
from dream_assets.passes.importance_decay import run_importance_decay
from dream_assets.store import open_store
from dream_assets.store.changes import DECAY_KIND, KEEP_ARCHIVED_UNTIL_KEY, undo_cycle_id

from ..conftest import NOW

LATER = NOW + timedelta(minutes=15)


def _stale(content: str, *, days: int = 120, importance: float = 0.6) -> MemoryEntry:
    at = NOW - timedelta(days=days)
    return MemoryEntry(new_id(), content, "projects", (), importance, at, at, at, 1, {})


def _run(pass_fn, profile, store, cycle_id: str, now=NOW, options: DreamOptions | None = None):
    report = pass_fn(PassContext(profile, options or dream_options(), now, cycle_id=cycle_id, _store=store))
    assert report.status == "completed", report.reason
    return report


def _dump(store) -> dict[str, dict]:
    return {e.id: e.to_dict() for e in store.memories.list_all()}


def _undo(profile, cycle: str, now, *extra: str) -> int:
    return main(["undo", "--profile", str(profile.root), "--cycle", cycle, "--now", now.isoformat(), *extra])


def test_a_cycle_whose_only_change_was_decay_is_undone_entry_by_entry_and_says_so(profile, store, capsys):
    store.memories.put_many([_stale(f"Kestrel note {i} about dock {i}.") for i in range(5)])
    fresh = store.memories.put(_stale("Kestrel ships on Fridays.", days=1))
    before = _dump(store)
    report = _run(run_importance_decay, profile, store, "c1")
    assert report.counts["decayed"] == 5
    rows = store.changes.list("c1")
    assert {r.kind for r in rows} == {DECAY_KIND} and fresh.id not in {r.target_id for r in rows}
    assert all(store.memories.get(i).importance < before[i]["importance"] for i in before if i != fresh.id)

    assert main(["undo", "--profile", str(profile.root), "--list"]) == 0
    assert "5 change(s) (5 decayed), 5 still undoable" in capsys.readouterr().out
    assert _undo(profile, "c1", LATER) == 0
    out = capsys.readouterr().out
    (line,) = [ln for ln in out.splitlines() if ln.startswith("importance put back on 5 entries decayed by the cycle")]
    assert all(i in line for i in before if i != fresh.id) and fresh.id not in line and "no changes to undo" not in out
    assert "undo of cycle c1: 5 put back (5 importance put back)" in out
    # importance, updated_at and decay's stamps: the whole record is as before the cycle
    assert _dump(store) == before
    assert main(["undo", "--profile", str(profile.root), "--list"]) == 0
    assert "5 change(s) (5 importance put back), 5 still undoable" in capsys.readouterr().out
    # an undone decay is no exemption: the next cycle decays that time again, to the same values
    _run(run_importance_decay, profile, store, "c2", now=LATER)
    again = {r.target_id for r in store.changes.list("c2")}
    assert again == {r.target_id for r in rows}


def test_an_entry_decayed_again_later_is_left_and_named_one_edited_since_is_refused(profile, store, capsys):
    entries = [_stale(f"Heron note {i}.") for i in range(3)]
    store.memories.put_many(entries)
    before = _dump(store)
    _run(run_importance_decay, profile, store, "c1")
    _run(run_importance_decay, profile, store, "c2", now=NOW + timedelta(days=10))  # decays them again
    decayed_twice = _dump(store)
    # a later decay is no edit: the undo of c1 goes ahead, leaves those importances and says which cycle holds them
    assert _undo(profile, "c1", LATER + timedelta(days=10)) == 0
    out = capsys.readouterr().out
    assert out.count("importance left as cycle c2 decayed it again since; undo cycle c2 first") == 3
    assert "3 left as a later cycle decayed them again" in out
    assert _dump(store) == decayed_twice
    assert all(c.undone_at is None for c in store.changes.list("c1"))  # still pending, for after c2's undo
    # newest first puts everything back
    assert _undo(profile, "c2", LATER + timedelta(days=10)) == 0
    assert _undo(profile, "c1", LATER + timedelta(days=10)) == 0
    assert _dump(store) == before
    capsys.readouterr()
    edited = store.memories.get(entries[0].id)
    # an importance set by hand after the cycle is refused by name; force puts back the others and leaves it
    _run(run_importance_decay, profile, store, "c3", now=NOW + timedelta(days=20))
    store.memories.set_importance({edited.id: 0.9}, now=NOW + timedelta(days=20))
    assert _undo(profile, "c3", NOW + timedelta(days=21)) == 3
    assert f"memory {edited.id}: importance changed after cycle c3 (now 0.900" in capsys.readouterr().err
    assert _undo(profile, "c3", NOW + timedelta(days=21), "--force") == 0
    assert store.memories.get(edited.id).importance == 0.9
    assert all(store.memories.get(e.id).importance == before[e.id]["importance"] for e in entries[1:])


def test_an_undone_purge_keeps_the_entry_a_full_archive_period_and_says_until_when(profile, store, capsys):
    gone = [_stale(f"Old Osprey note {i}.", days=200, importance=0.3) for i in range(3)]
    store.memories.put_many(gone)
    for e in gone:
        store.memories.archive(e.id, now=NOW - timedelta(days=100))
    before = _dump(store)
    assert _run(run_archive_purge, profile, store, "c1").counts["purged"] == 3
    assert _undo(profile, "c1", LATER) == 0
    out = capsys.readouterr().out
    until = LATER + dream_options().MemoryArchiveRetention
    assert out.count(f"kept archived until {until:%Y-%m-%d}") == 3 and out.count("unpurged memory ") == 3
    for e in gone:  # archived as it was, with its archived_at; only the keep mark is new
        back = store.memories.get(e.id).to_dict()
        assert back["metadata"].pop(KEEP_ARCHIVED_UNTIL_KEY) == iso(until)
        assert back == before[e.id]
    # the next cycle, 15 minutes later, keeps them and says why
    report = _run(run_archive_purge, profile, store, "c2", now=LATER + timedelta(minutes=15))
    assert report.counts["purged"] == 0 and report.counts["kept_undone"] == 3
    assert all(store.memories.get(e.id) is not None for e in gone)
    assert any("put back by an undo of its purge" in c.detail for c in report.changes)
    # a full archive period after the undo, the purge takes them again
    report = _run(run_archive_purge, profile, store, "c3", now=until + timedelta(days=1))
    assert report.counts["purged"] == 3


def test_undoing_a_restore_says_it_archived_the_entry_again(profile, store, capsys):
    entry = store.memories.put(_stale("Ana Ruiz signed the Lisbon lease in 2025."))
    store.memories.archive(entry.id, now=NOW - timedelta(days=2))
    store.close()
    assert main(["restore", "--profile", str(profile.root), "--id", entry.id, "--now", NOW.isoformat()]) == 0
    cycle = capsys.readouterr().out.split("recorded as cycle ")[1].split(";")[0]
    assert _undo(profile, cycle, LATER) == 0
    out = capsys.readouterr().out
    assert f"archived again memory {entry.id}: as before restore restored it" in out
    assert "restored memory" not in out and "(1 archived again)" in out
    store = open_store(profile)
    assert store.memories.get(entry.id).is_archived
    store.close()
    assert main(["undo", "--profile", str(profile.root), "--list"]) == 0
    listing = [ln for ln in capsys.readouterr().out.splitlines() if ln.startswith(undo_cycle_id(cycle))]
    assert len(listing) == 1 and "1 change(s) (1 archived again)" in listing[0]
