"""A change and its change-log row are one write: nested store writes join the outermost transaction."""

from datetime import timedelta

import pytest

from dream_assets import recall_index as recall
from dream_assets.changes_model import ChangeRow
from dream_assets.model import MemoryEntry, Skill, new_id
from dream_assets.save_pipeline import save_memory
from dream_assets.store import memory as memory_module
from dream_assets.store import open_store
from dream_assets.store.memory import ContentError
from dream_assets.store.skills import SkillError

from ..conftest import NOW


def _entry(text: str) -> MemoryEntry:
    return MemoryEntry(
        id=new_id(),
        content=text,
        category="general",
        tags=(),
        importance=0.5,
        created_at=NOW,
        updated_at=NOW,
        last_seen_at=NOW,
        reinforcement_count=1,
        metadata={},
    )


class Boom(RuntimeError):
    pass


def test_a_failure_after_a_write_rolls_back_the_write_and_its_change_row(store):
    kept = store.memories.put(_entry("Alice Park runs the Tuesday standup."))
    with pytest.raises(Boom), store.transaction():
        merged = store.memories.put(_entry("Bob Lee owns the Q3 budget for Project Atlas."))
        store.memories.archive(kept.id, now=NOW)
        store.changes.record(
            ChangeRow(
                cycle_id="c1",
                pass_name="memory_consolidation",
                kind="created",
                target_type="memory",
                target_id=merged.id,
                before=None,
                after=merged,
                reason="test",
            ),
            now=NOW,
        )
        raise Boom("crash between the write and the rest of the merge")
    assert store.memories.get(merged.id) is None
    assert not store.memories.get(kept.id).is_archived
    assert store.changes.list("c1") == []
    # The recall index forgets what was never committed, and still finds what was.
    assert [e.id for e, _ in recall.search(store.memories, "Project Atlas budget")] == []
    assert [e.id for e, _ in recall.search(store.memories, "Tuesday standup")] == [kept.id]


def test_nested_writes_commit_together(store):
    with store.transaction():
        a = store.memories.put(_entry("Carol Diaz moved to the Lisbon office in 2025."))
        store.changes.record(
            ChangeRow(
                cycle_id="c2",
                pass_name="memory_consolidation",
                kind="created",
                target_type="memory",
                target_id=a.id,
                before=None,
                after=a,
                reason="test",
            ),
            now=NOW,
        )
    assert store.memories.get(a.id) is not None
    assert [c.target_id for c in store.changes.list("c2")] == [a.id]
    assert not store.connection.in_transaction


# ---------------------------------------------------------------- every store write joins an outer transaction
def _skill(name: str, text: str = "Steps to follow.") -> Skill:
    return Skill(name=name, summary=f"How to {name}", content=text, created_at=NOW, updated_at=NOW)


def _seed(store):
    live = store.memories.put(_entry("Dana Kim leads the Berlin data team."))
    gone = store.memories.put(_entry("Eli Novak used to own the Osaka vendor contract."))
    gone = store.memories.archive(gone.id, now=NOW - timedelta(days=200))
    store.skills.put(_skill("deploy"))
    store.skills.put(_skill("old-report"))
    store.skills.archive("old-report", now=NOW)
    return live, gone


MEMORY_WRITES = {
    "put": lambda s, live, gone: s.memories.put(_entry("Farah Ali joins Project Zephyr in May.")),
    "put_many": lambda s, live, gone: s.memories.put_many([_entry("Gus Bell owns Project Kite.")]),
    "save": lambda s, live, gone: save_memory(s.memories, "Hana Sato books the Vienna offsite.", now=NOW),
    "replace": lambda s, live, gone: s.memories.replace(live.with_(content="Dana Kim leads the Paris data team.")),
    "update": lambda s, live, gone: s.memories.update(live.id, now=NOW, content="Dana Kim left the Berlin team."),
    "reinforce": lambda s, live, gone: s.memories.reinforce(live.id, now=NOW + timedelta(days=1)),
    "archive": lambda s, live, gone: s.memories.archive(live.id, now=NOW),
    "restore": lambda s, live, gone: s.memories.restore(gone.id, now=NOW),
    "purge": lambda s, live, gone: s.memories.purge([gone.id], now=NOW),
    "set_metadata": lambda s, live, gone: s.memories.set_metadata({live.id: {"reviewed": "yes"}}),
    "set_importance": lambda s, live, gone: s.memories.set_importance(
        {live.id: 0.1}, now=NOW, stamps={live.id: {"decayedAt": "x"}}
    ),
    "skills.save": lambda s, live, gone: s.skills.save(_skill("deploy", "New steps."), now=NOW),
    "skills.put": lambda s, live, gone: s.skills.put(_skill("triage")),
    "skills.replace": lambda s, live, gone: s.skills.replace(_skill("deploy", "Replaced steps.")),
    "skills.archive": lambda s, live, gone: s.skills.archive("deploy", now=NOW),
    "skills.restore": lambda s, live, gone: s.skills.restore("old-report", now=NOW),
    "skills.touch_used": lambda s, live, gone: s.skills.touch_used("deploy", now=NOW + timedelta(days=3)),
}


def _state(store):
    with store.connection.session() as conn:
        return {
            t: sorted(conn.execute(f"SELECT * FROM {t}").fetchall(), key=str)
            for t in ("memories", "skills", "memory_purges", "changes")
        }


@pytest.mark.parametrize("write", sorted(MEMORY_WRITES))
def test_every_store_write_inside_a_transaction_rolls_back_with_its_change_row(store, write):
    live, gone = _seed(store)
    before = _state(store)
    with pytest.raises(Boom), store.transaction():
        MEMORY_WRITES[write](store, live, gone)
        store.changes.record(
            ChangeRow(
                cycle_id="c3",
                pass_name="p",
                kind="updated",
                target_type="memory",
                target_id=live.id,
                before=live,
                after=live,
                reason="test",
            ),
            now=NOW,
        )
        store.changes.record_many(
            [
                ChangeRow(
                    cycle_id="c3",
                    pass_name="p",
                    kind="stamped",
                    target_type="memory",
                    target_id=live.id,
                    before=None,
                    after=None,
                    reason="test",
                )
            ],
            now=NOW,
        )
        assert store.connection.in_transaction
        raise Boom("crash after the write and its rows")
    assert _state(store) == before
    assert not store.connection.in_transaction
    # and the same write, committed, changes the store together with its row
    with store.transaction():
        MEMORY_WRITES[write](store, live, gone)
        store.changes.record(
            ChangeRow(
                cycle_id="c3",
                pass_name="p",
                kind="updated",
                target_type="memory",
                target_id=live.id,
                before=live,
                after=live,
                reason="test",
            ),
            now=NOW,
        )
    after = _state(store)
    assert after["changes"] != before["changes"] and len(store.changes.list("c3")) == 1
    assert {k: v for k, v in after.items() if k != "changes"} != {k: v for k, v in before.items() if k != "changes"}


def test_the_recall_index_follows_a_rolled_back_purge_and_archive(store):
    live, gone = _seed(store)
    with pytest.raises(Boom), store.transaction():
        store.memories.archive(live.id, now=NOW)
        store.memories.purge([live.id, gone.id], now=NOW)
        raise Boom()
    assert [e.id for e, _ in recall.search(store.memories, "Berlin data team")] == [live.id]
    assert store.memories.get(gone.id) is not None


def test_a_record_outside_any_transaction_commits_on_its_own(store):
    live, _ = _seed(store)
    store.changes.record(
        ChangeRow(
            cycle_id="c4",
            pass_name="p",
            kind="updated",
            target_type="memory",
            target_id=live.id,
            before=live,
            after=live,
            reason="alone",
        ),
        now=NOW,
    )
    store.close()
    assert [c.reason for c in store.changes.list("c4")] == ["alone"]


def test_a_refused_duplicate_inside_a_transaction_leaves_the_rest_of_it_usable(store):
    live, _ = _seed(store)
    with store.transaction():
        with pytest.raises(ContentError, match="already exists"):
            store.memories.put(live)
        with pytest.raises(SkillError, match="already exists"):
            store.skills.put(_skill("deploy"))
        added = store.memories.put(_entry("Ivo Marsh runs the Lagos pilot."))
    assert store.memories.get(added.id) is not None


def test_a_save_that_creates_its_entry_is_committed_when_it_returns(store, profile, options):
    # Outside a transaction a creating save is one statement, committed by DuckDB with it: another store of the file
    # (a fresh open, as another process would make) sees the row as soon as the save returns.
    made = save_memory(store.memories, "Jun Ito keeps the Osaka rack inventory.", category="notes", now=NOW)
    assert made.action == "created"
    assert not store.connection.in_transaction
    store.close()
    other = open_store(profile, options)
    try:
        assert other.memories.get(made.entry.id) == made.entry
        assert [e.id for e, _ in recall.search(other.memories, "Osaka rack inventory")] == [made.entry.id]
    finally:
        other.close()


def test_a_save_whose_write_fails_leaves_no_trace_and_later_saves_dedup_against_committed_rows(store, monkeypatch):
    kept = save_memory(store.memories, "Kai Moss signs off the Dublin release notes.", category="notes", now=NOW).entry

    def failing(entry):
        raise Boom("the write fails")

    monkeypatch.setattr(memory_module, "_fingerprint_part", failing)
    with pytest.raises(Boom):
        save_memory(store.memories, "Lena Voss books the Prague offsite venue.", category="notes", now=NOW)
    monkeypatch.undo()
    assert store.memories.counts()["live"] == 1
    assert recall.search(store.memories, "Prague offsite venue") == []
    again = save_memory(store.memories, "Kai Moss signs off the Dublin release notes.", category="notes", now=NOW)
    assert (again.action, again.matched_id) == ("reinforced", kept.id)
    assert save_memory(
        store.memories, "Lena Voss books the Prague offsite venue.", category="notes", now=NOW
    ).action == ("created")


def test_a_save_rolled_back_with_its_callers_transaction_leaves_no_trace(store):
    kept = save_memory(store.memories, "Mira Roth owns the Vilnius on-call rota.", category="notes", now=NOW).entry
    with pytest.raises(Boom), store.transaction():
        gone = save_memory(
            store.memories, "Nils Berg hosts the Tallinn design review.", category="notes", now=NOW
        ).entry
        # searchable inside
        assert [e.id for e, _ in recall.search(store.memories, "Tallinn design review")] == [gone.id]
        raise Boom()
    assert store.memories.get(gone.id) is None
    assert recall.search(store.memories, "Tallinn design review") == []
    assert save_memory(
        store.memories, "Nils Berg hosts the Tallinn design review.", category="notes", now=NOW
    ).action == ("created")
    again = save_memory(store.memories, "Mira Roth owns the Vilnius on-call rota.", category="notes", now=NOW)
    assert (again.action, again.matched_id) == ("reinforced", kept.id)


def test_a_save_commits_through_the_commit_hooks_when_some_are_registered(store):
    committed = []
    store.connection.add_commit_hook(lambda: committed.append(store.memories.counts()["live"]))
    save_memory(store.memories, "Omar Haddad runs the Cairo intake survey.", category="notes", now=NOW)
    assert committed == [1]
