"""A change and its change-log row are one write: nested store writes join the outermost transaction."""

import pytest

from dream_assets.model import MemoryEntry, new_id

from .conftest import NOW


def _entry(text: str) -> MemoryEntry:
    return MemoryEntry(id=new_id(), content=text, category="general", tags=(), importance=0.5, created_at=NOW,
                       updated_at=NOW, last_seen_at=NOW, reinforcement_count=1, metadata={})


class Boom(RuntimeError):
    pass


def test_a_failure_after_a_write_rolls_back_the_write_and_its_change_row(store):
    kept = store.memories.put(_entry("Alice Park runs the Tuesday standup."))
    with pytest.raises(Boom), store.transaction():
        merged = store.memories.put(_entry("Bob Lee owns the Q3 budget for Project Atlas."))
        store.memories.archive(kept.id, now=NOW)
        store.changes.record(cycle_id="c1", pass_name="memory_consolidation", kind="created", target_type="memory",
                             target_id=merged.id, before=None, after=merged, reason="test", now=NOW)
        raise Boom("crash between the write and the rest of the merge")
    assert store.memories.get(merged.id) is None
    assert not store.memories.get(kept.id).is_archived
    assert store.changes.list("c1") == []
    # The recall index forgets what was never committed, and still finds what was.
    assert [e.id for e, _ in store.memories.search("Project Atlas budget")] == []
    assert [e.id for e, _ in store.memories.search("Tuesday standup")] == [kept.id]


def test_nested_writes_commit_together(store):
    with store.transaction():
        a = store.memories.put(_entry("Carol Diaz moved to the Lisbon office in 2025."))
        store.changes.record(cycle_id="c2", pass_name="memory_consolidation", kind="created", target_type="memory",
                             target_id=a.id, before=None, after=a, reason="test", now=NOW)
    assert store.memories.get(a.id) is not None
    assert [c.target_id for c in store.changes.list("c2")] == [a.id]
    assert not store.connection.in_transaction
