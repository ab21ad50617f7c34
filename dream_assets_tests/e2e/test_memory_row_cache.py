"""A search or a save-time comparison does not read a row again that this process read a moment ago, and what it
returns is still exactly what the file holds: after every kind of write, after a rolled-back transaction, and after
another process wrote the file."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from datetime import timedelta

import pytest

from dream_assets import recall_index as recall
from dream_assets.model import MemoryEntry, new_id
from dream_assets.save_pipeline import save_memory
from dream_assets.store.memory import ROW_CACHE_SIZE

from ..conftest import NOW

TEXTS = [
    "Alice Park runs the Tuesday standup for Project Atlas.",
    "Bob Lee owns the Q3 budget for Project Atlas.",
    "Carol Diaz moved the Atlas release sync to Thursdays.",
]
QUERY = "Project Atlas"


def _entry(text: str) -> MemoryEntry:
    return MemoryEntry(new_id(), text, "work", (), 0.5, NOW, NOW, NOW, 1, {})


@pytest.fixture
def stored(store) -> list[MemoryEntry]:
    return [store.memories.put(_entry(t)) for t in TEXTS]


def _found(store, query: str = QUERY) -> dict[str, MemoryEntry]:
    return {e.id: e for e, _ in recall.search(store.memories, query, limit=10)}


def _as_in_the_file(store, found: dict[str, MemoryEntry]) -> None:
    """Every entry a search returned equals its row in the file, field for field."""
    assert found
    assert found == store.memories.get_many(found)


def test_a_repeated_search_reads_no_row_from_the_file_again(store, stored):
    before = store.memories.rows_read
    first = _found(store)
    assert len(first) == 3
    assert store.memories.rows_read == before + 3
    before = store.memories.rows_read
    again = _found(store)
    assert again == first
    assert store.memories.rows_read == before
    # The entries handed out are the caller's own: changing one changes nothing for the next search.
    next(iter(again.values())).metadata["note"] = "changed by the caller"
    assert _found(store) == first


WRITES = {
    "reinforce": lambda m, e: m.reinforce(e.id, now=NOW + timedelta(hours=1)),
    "update": lambda m, e: m.update(e.id, importance=0.9, tags=["atlas"], now=NOW + timedelta(hours=1)),
    "replace": lambda m, e: m.replace(e.with_(importance=0.8, metadata={"source": "edit"})),
    "set_importance": lambda m, e: m.set_importance({e.id: 0.1}, now=NOW + timedelta(hours=1)),
    "set_metadata": lambda m, e: m.set_metadata({e.id: {"reviewedAt": "2026-12-01"}}),
    "put_scores": lambda m, e: m.put_scores([e.with_(importance=0.7, metadata={"decayedAt": "2026-12-01"})]),
    "save_reinforces": lambda m, e: save_memory(m, e.content, category=e.category, now=NOW + timedelta(hours=1)),
    "archive": lambda m, e: m.archive(e.id, now=NOW + timedelta(hours=1)),
}


@pytest.mark.parametrize("write", sorted(WRITES))
def test_a_search_after_a_write_of_this_process_returns_the_row_as_written(store, stored, write):
    target = next(e for e in _found(store).values())
    WRITES[write](store.memories, target)
    found = _found(store)
    if write == "archive":
        assert target.id not in found
    else:
        assert found[target.id] != target
    _as_in_the_file(store, found)


def test_a_purged_and_restored_id_is_read_again(store, stored):
    target = next(e for e in _found(store).values())
    store.memories.archive(target.id, now=NOW)
    store.memories.purge([target.id], now=NOW)
    store.memories.put(target.with_(importance=0.95, reinforcement_count=4))
    found = _found(store)
    assert found[target.id].reinforcement_count == 4
    _as_in_the_file(store, found)


def test_a_rolled_back_write_read_inside_its_transaction_is_not_returned_after(store, stored):
    first = _found(store)
    target = next(iter(first.values()))

    class Boom(RuntimeError):
        pass

    with pytest.raises(Boom), store.transaction():
        store.memories.reinforce(target.id, now=NOW + timedelta(hours=1))
        inside = _found(store)  # read (and kept) while the transaction is open
        assert inside[target.id].reinforcement_count == 2
        raise Boom("the rest of the work failed")
    assert _found(store) == first
    _as_in_the_file(store, first)


def test_a_save_time_comparison_reads_the_current_row(store):
    original = save_memory(
        store.memories, "The Atlas release sync is on Thursdays in Lisbon.", category="work", now=NOW
    )
    assert original.entry.id in _found(store, "Atlas release sync")  # the row is read (and kept) by a search
    store.memories.update(original.entry.id, importance=0.9, now=NOW)
    result = save_memory(
        store.memories,
        "The Atlas release sync is on Thursdays in Lisbon. It starts at 10:00.",
        category="work",
        now=NOW,
    )
    assert result.action == "extended"
    assert result.before.importance == 0.9
    assert result.entry == store.memories.get(original.entry.id)


def test_writes_of_another_process_are_seen_by_the_next_search(store, stored, profile):
    first = _found(store)
    target = next(iter(first.values()))
    store.connection.close()  # what a lingering connection does when another process waits for the file
    code = textwrap.dedent(
        """
        import sys
        from datetime import UTC, datetime
        from dream_assets.options_loader import dream_options
        from dream_assets.store import open_store
        store = open_store(sys.argv[1], dream_options())
        store.memories.reinforce(sys.argv[2], now=datetime(2026, 12, 1, tzinfo=UTC))
        store.memories.set_metadata({sys.argv[2]: {"reviewedAt": "2026-12-01"}})
        store.close()
        """
    )
    done = subprocess.run(
        [sys.executable, "-c", code, str(profile.root), target.id], capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    found = _found(store)
    assert found[target.id].reinforcement_count == target.reinforcement_count + 1
    assert found[target.id].metadata["reviewedAt"] == "2026-12-01"
    _as_in_the_file(store, found)


def test_the_cache_holds_at_most_its_size(store):
    store.memories.put_many([_entry(f"Atlas note number {i} about the release.") for i in range(ROW_CACHE_SIZE + 50)])
    for start in range(0, ROW_CACHE_SIZE + 50, 100):
        recall.search(store.memories, f"Atlas note number {start}", limit=100)
    assert 0 < len(store.memories._rows) <= ROW_CACHE_SIZE
