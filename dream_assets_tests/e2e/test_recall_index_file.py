"""The recall index kept beside the store (store/index_file.py): a new process loads it instead of reading and
tokenising every row, catches up on what changed since, and gets the very index a fresh build gives (scores bit for
bit). A file that is damaged, of another tokeniser, or not vouched for by the store is logged and rebuilt, never
trusted."""

from __future__ import annotations

import logging
import random
import shutil
import threading
from datetime import timedelta

import pytest

from dream_assets import recall_index as recall
from dream_assets.demo import _memories
from dream_assets.recall_index import persist_recall_indexes
from dream_assets.save_pipeline import save_memory
from dream_assets.store import index_file
from dream_assets.store.connection import StoreConnection
from dream_assets.store.memory import MemoryStore
from dream_assets.text.similarity import exact_key
from dream_assets.text.tokens import tokenize

from ..conftest import NOW

QUERIES = [
    "Alice python standup",
    "budget review",
    "Project Atlas release",
    "meeting notes Tuesday",
    "docker deployment",
    "coffee",
    "Bob",
    "the",
    "notes general work",
]
LOG = "dream_assets.recall_index"


def _another_process(profile, options) -> tuple[StoreConnection, MemoryStore]:
    """The store as a new process finds it: a connection of its own, no index built yet."""
    conn = StoreConnection(profile.store_path, profile.store_lock_path, timeout_s=30)
    return conn, MemoryStore(conn, options)


def _index_of(memories: MemoryStore):
    recall.prepare(memories)
    return recall.of(memories)


def _same_index(a, b) -> None:
    assert a.content_tokens == b.content_tokens
    assert a.labels == b.labels
    assert a.overlap == b.overlap
    assert +a.stem_df == +b.stem_df
    assert a.exact == b.exact and a.exact_of == b.exact_of
    assert a.synced_seq == b.synced_seq
    assert a.later == b.later  # the entries a search reads below its first places for
    for query in QUERIES:
        tokens = tokenize(query)
        assert a.bm25.search(tokens, limit=40) == b.bm25.search(tokens, limit=40), query  # scores bit for bit


@pytest.fixture
def corpus(store):
    """A store of 400 entries whose recall index was built by this process and written beside it; then changed by
    saves, archives, edits and purges the file does not hold (a loader must catch up on them)."""
    entries = _memories(random.Random(5), NOW, 400)
    store.memories.put_many(entries)
    recall.search(store.memories, "warm up")  # builds the index and writes the file
    assert index_file.index_path(store.connection.db_path).exists()
    for i in range(12):
        save_memory(store.memories, f"Note {i}: Alice moved the Atlas standup to room {i}", category="work", now=NOW)
    for entry in entries[:5]:
        store.memories.archive(entry.id, now=NOW + timedelta(hours=1))
    store.memories.update(entries[10].id, content="Completely new words: zebra quantum ledger", now=NOW)
    store.memories.purge([entries[0].id], now=NOW + timedelta(days=400))
    store.memories.restore(entries[1].id, now=NOW + timedelta(hours=2))
    store.close()
    return entries


def test_a_loaded_index_equals_a_fresh_build_after_catching_up(profile, options, corpus, caplog):
    caplog.set_level(logging.INFO, logger=LOG)
    conn, loaded = _another_process(profile, options)
    try:
        loaded_index = _index_of(loaded)
        hits = {q: recall.search(loaded, q, limit=10) for q in QUERIES}
        assert loaded_index._unmade is not None  # searches never made the save-time tables
    finally:
        conn.close()
    assert any("recall index loaded" in r.getMessage() for r in caplog.records)
    index_file.index_path(profile.store_path).unlink()  # the next one must build from the rows
    caplog.clear()
    conn, built = _another_process(profile, options)
    try:
        built_index = _index_of(built)
        assert not any("recall index loaded" in r.getMessage() for r in caplog.records)
        _same_index(loaded_index, built_index)
        for q in QUERIES:
            assert [(e.id, s) for e, s in recall.search(built, q, limit=10)] == [(e.id, s) for e, s in hits[q]], q
    finally:
        conn.close()


def test_the_numpy_index_loads_the_file_to_the_scores_of_a_compiled_fresh_build(
    profile, options, corpus, caplog, monkeypatch
):
    """An install without the compiled kernel loads the same file into the numpy index, to the same results."""
    from dream_assets.text import bm25

    caplog.set_level(logging.INFO, logger=LOG)
    monkeypatch.setattr(bm25, "_bm25kernel", None)
    conn, loaded = _another_process(profile, options)
    try:
        loaded_index = _index_of(loaded)
        assert isinstance(loaded_index.bm25, bm25.NumpyBm25Index)
    finally:
        conn.close()
    assert any("recall index loaded" in r.getMessage() for r in caplog.records)
    monkeypatch.undo()
    index_file.index_path(profile.store_path).unlink()
    conn, built = _another_process(profile, options)
    try:
        built_index = _index_of(built)
        assert isinstance(built_index.bm25, bm25.CompiledBm25Index)
        _same_index(loaded_index, built_index)
    finally:
        conn.close()


def test_tables_made_ahead_of_the_first_save_equal_a_fresh_build(profile, options, corpus):
    """A server makes a loaded index's save-time tables in the background (``make_ahead``): the changes the load
    caught up on are in them, and they are those of an index built from the rows."""
    conn, loaded = _another_process(profile, options)
    try:
        recall.prepare(loaded)
        index = recall.of(loaded)
        assert not index.tables_made  # a search from the shell never makes them
        assert index.make_ahead(conn) and index.tables_made
        assert not index.make_ahead(conn)  # once
    finally:
        conn.close()
    index_file.index_path(profile.store_path).unlink()
    conn, built = _another_process(profile, options)
    try:
        _same_index(index, _index_of(built))
    finally:
        conn.close()


def test_a_save_while_the_tables_are_made_ahead_takes_those_and_decides_as_a_fresh_build(
    profile, options, corpus, monkeypatch
):
    """A save while ``make_ahead`` is making the tables does not wait for them (it looks up the file) and decides as
    a fresh build; the tables are made once."""
    decoded, started, go = [], threading.Event(), threading.Event()
    rest = index_file.LoadedFile.rest

    def held_rest(self):
        decoded.append(self)
        started.set()
        go.wait(60)
        return rest(self)

    monkeypatch.setattr(index_file.LoadedFile, "rest", held_rest)
    conn, loaded = _another_process(profile, options)
    saved = []
    try:
        recall.prepare(loaded)
        ahead = threading.Thread(target=recall.of(loaded).make_ahead, args=(conn,))
        ahead.start()
        assert started.wait(60)
        twin = corpus[20]
        save = threading.Thread(
            target=lambda: saved.append(
                save_memory(loaded, twin.content, category=twin.category, now=NOW + timedelta(days=1))
            )
        )
        save.start()
        go.set()
        save.join(120)
        ahead.join(120)
    finally:
        conn.close()
    assert len(decoded) == 1
    assert saved and saved[0].action == "reinforced" and saved[0].entry.id == twin.id


def test_saves_before_the_tables_are_made_look_up_the_file_and_get_the_tables_answers(profile, options, corpus):
    """The first saves after a load do not make the save-time tables (seconds at a million entries): they read the
    file's arrays with the changes since the load on top, and each answer is the one the made tables give."""
    conn, loaded = _another_process(profile, options)
    later = NOW + timedelta(days=1)
    try:
        index = _index_of(loaded)
        twin = corpus[20]
        again = save_memory(loaded, twin.content, category=twin.category, now=later)
        assert again.action == "reinforced" and again.entry.id == twin.id
        fresh = "Zoe filed the Atlas budget review for room 7 on Tuesday"
        new = save_memory(loaded, fresh, category="work", now=later)
        assert new.action == "created"
        loaded.archive(corpus[30].id, now=later)
        loaded.update(corpus[31].id, content="Different words now: walrus harbour", now=later)
        loaded.update(new.entry.id, content=fresh + " and Friday", now=later)
        assert not index.tables_made

        ids = [e.id for e in corpus] + [new.entry.id, "no-such-entry"]
        keys = {(e.category, exact_key(e.content)) for e in corpus}
        keys |= {("work", exact_key(fresh)), ("work", exact_key(fresh + " and Friday")), ("nowhere", "none")}
        terms = {"zzz-nowhere"}.union(*(index.stems(mid) or () for mid in ids))

        def answers():
            return [index.stems(m) for m in ids], [index.exact_ids(k) for k in keys], index.overlap_weights(terms)

        looked_up = answers()
        assert not index.tables_made
        assert index.make_ahead(conn) and index.tables_made
        assert answers() == looked_up
    finally:
        conn.close()


def test_a_save_through_a_loaded_index_decides_as_a_fresh_build(profile, options, corpus):
    """Save-time dedup reads the exact keys, overlap stems and content tokens the file restored."""
    text = corpus[20].content
    conn, loaded = _another_process(profile, options)
    try:
        result = save_memory(loaded, text, category=corpus[20].category, now=NOW + timedelta(days=1))
    finally:
        conn.close()
    assert result.action == "reinforced" and result.entry.id == corpus[20].id


@pytest.mark.parametrize(
    "damage",
    ["truncated", "flipped", "garbage", "empty"],
)
def test_a_damaged_index_file_is_logged_and_rebuilt(profile, options, corpus, caplog, damage):
    path = index_file.index_path(profile.store_path)
    data = bytearray(path.read_bytes())
    if damage == "truncated":
        data = data[: len(data) // 2]
    elif damage == "flipped":
        for at in range(len(data) // 3, len(data) // 3 + 64):
            data[at] ^= 0x5A
    elif damage == "garbage":
        data = bytearray(b"not an index" * 100)
    else:
        data = bytearray()
    path.write_bytes(bytes(data))
    caplog.set_level(logging.INFO, logger=LOG)
    conn, rebuilt = _another_process(profile, options)
    try:
        index = _index_of(rebuilt)
    finally:
        conn.close()
    warned = [r for r in caplog.records if r.levelno == logging.WARNING and str(path) in r.getMessage()]
    assert warned and "built from the store" in warned[0].getMessage()
    assert not any("recall index loaded" in r.getMessage() for r in caplog.records)
    # The rebuild wrote a good file again, which the next process loads.
    index_file.read(path)
    caplog.clear()
    conn, again = _another_process(profile, options)
    try:
        _same_index(_index_of(again), index)
    finally:
        conn.close()
    assert any("recall index loaded" in r.getMessage() for r in caplog.records)


def test_a_file_the_store_does_not_vouch_for_is_rebuilt(profile, options, corpus, caplog, tmp_path):
    """A store restored from an older copy (its row sequence behind the file's) or replaced by another store."""
    path = index_file.index_path(profile.store_path)
    older = tmp_path / "older.duckdb"
    conn, memories = _another_process(profile, options)
    try:
        recall.prepare(memories)
        conn.close()
        shutil.copy(profile.store_path, older)  # the store as the file was written
        save_memory(memories, "One more fact about the zebra ledger", now=NOW + timedelta(days=2))
        assert recall.persist(memories)
    finally:
        conn.close()
    shutil.copy(older, profile.store_path)  # restored: it does not hold the newer file's token
    caplog.set_level(logging.INFO, logger=LOG)
    conn, restored = _another_process(profile, options)
    try:
        index = _index_of(restored)
        assert not any(h.content.startswith("One more fact") for h, _ in recall.search(restored, "zebra ledger"))
    finally:
        conn.close()
    assert any("does not vouch" in r.getMessage() and str(path) in r.getMessage() for r in caplog.records)
    assert all(mid in index.content_tokens for mid in index.exact_of)


def test_a_file_of_another_tokeniser_is_rebuilt(profile, options, corpus, caplog, monkeypatch):
    monkeypatch.setattr(index_file, "_tokens_digest", "0123456789abcdef")
    caplog.set_level(logging.INFO, logger=LOG)
    conn, memories = _another_process(profile, options)
    try:
        _index_of(memories)
    finally:
        conn.close()
    assert any("another tokeniser" in r.getMessage() for r in caplog.records)


def test_the_file_is_kept_current_at_the_end_of_a_cycle(profile, options, corpus):
    conn, memories = _another_process(profile, options)
    try:
        recall.prepare(memories)
        save_memory(memories, "A fact saved during the cycle about walruses", now=NOW + timedelta(days=3))
        stamp_before = index_file.read(index_file.index_path(profile.store_path))[1]
        assert persist_recall_indexes() >= 1
        state, stamp = index_file.read(index_file.index_path(profile.store_path))
        assert stamp["synced_seq"] > stamp_before["synced_seq"]
        assert any("walruses" in t for c in state.content for t in c)
        assert persist_recall_indexes() == 0  # nothing changed since
    finally:
        conn.close()


def test_dream_status_says_which_index_recall_uses(profile, options, corpus, capsys):
    from dream_assets.cli import main as dream

    assert dream(["status", "--profile", str(profile.root)]) == 0
    line = next(li for li in capsys.readouterr().out.splitlines() if li.startswith("recall index: "))
    assert "compiled BM25 kernel" in line and "index file of 391 entries at row sequence 400" in line


_SHELL_CALL = """
import json, sys
from dream_assets.cli import main
code = main(sys.argv[1:])
heavy = sorted(m for m in ("dagster", "pandas", "mcp", "scipy", "sklearn") if m in sys.modules)
print(json.dumps({"exit": code, "heavy": heavy}), file=sys.stderr)
"""


def test_a_memory_command_from_the_shell_imports_no_dagster_pandas_or_mcp_and_loads_the_index(profile, corpus):
    import json
    import subprocess
    import sys

    def shell(*args: str) -> dict:
        done = subprocess.run(
            [sys.executable, "-c", _SHELL_CALL, "memory", *args, "--profile", str(profile.root)],
            capture_output=True,
            text=True,
            timeout=300,
            env={**__import__("os").environ, "DREAM_LOG_LEVEL": "INFO"},
        )
        report = json.loads(done.stderr.strip().splitlines()[-1])
        report["log"] = done.stderr
        return report

    searched = shell("search", "Alice standup")
    assert searched["exit"] == 0 and searched["heavy"] == [], searched["log"]
    assert "recall index loaded" in searched["log"]
    saved = shell("save", "The walrus enclosure opens at nine")
    assert saved["exit"] == 0 and saved["heavy"] == [], saved["log"]
    assert "recall index loaded" in saved["log"]
    got = shell("get", corpus[30].id)
    assert got["exit"] == 0 and got["heavy"] == [], got["log"]


def test_a_cycle_leaves_the_index_file_current(profile, options, corpus):
    from dream_assets.cycle import run_cycle
    from dream_assets.store import open_store

    store = open_store(profile, options)
    save_memory(store.memories, "The walrus enclosure opens at nine on Sundays", now=NOW + timedelta(days=3))
    before = index_file.read(index_file.index_path(profile.store_path))[1]["synced_seq"]
    run_cycle(profile, options, NOW + timedelta(days=3), only=["log_retention"])
    state, stamp = index_file.read(index_file.index_path(profile.store_path))
    assert stamp["synced_seq"] > before
    assert any("walrus" in c for c in state.content)
    store.close()


_WRITER = """
import sys
from datetime import UTC, datetime
from dream_assets.demo import _memories
import random
from dream_assets.options import DreamOptions
from dream_assets.store import open_store
from dream_assets import recall_index as recall
store = open_store(sys.argv[1], DreamOptions())
recall.search(store.memories, "warm up")
entries = _memories(random.Random(9), datetime(2026, 12, 1, tzinfo=UTC), int(sys.argv[2]))
store.memories.put_many([e.with_(id="exit-" + e.id) for e in entries])
"""


@pytest.mark.parametrize(("changes", "written"), [(3, False), (index_file.REWRITE_AFTER_CHANGES, True)])
def test_a_process_ending_with_many_unwritten_changes_writes_the_file(profile, corpus, changes, written):
    import subprocess
    import sys

    path = index_file.index_path(profile.store_path)
    before = index_file.read(path)[1]["synced_seq"]
    done = subprocess.run(
        [sys.executable, "-c", _WRITER, str(profile.root), str(changes)], capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stderr
    after = index_file.read(path)[1]["synced_seq"]
    assert (after > before) is written


@pytest.mark.parametrize(
    "hostile",
    [
        "term out of range",
        "offsets backwards",
        "id twice",
        "stems short",
        "document term out of range",
        "document offsets backwards",
        "id not UTF-8",
        "term cut inside a character",
        "later-version entry out of range",
    ],
)
def test_a_well_formed_archive_with_inconsistent_tables_is_not_trusted(profile, options, corpus, caplog, hostile):
    """Damage the archive's CRCs cannot see: a file written whole by something else, or by a faulty writer."""
    import numpy as np

    path = index_file.index_path(profile.store_path)
    state, stamp = index_file.read(path)
    arrays = index_file.encode(state, stamp["token"])
    if hostile == "term out of range":
        arrays["content_ids"][3] = 10**6
    elif hostile == "offsets backwards":
        arrays["content_off"][5], arrays["content_off"][6] = arrays["content_off"][6], arrays["content_off"][5] - 1
    elif hostile == "id twice":
        state.ids[1] = state.ids[0]
        arrays = index_file.encode(state, stamp["token"])
    elif hostile == "stems short":
        arrays["stems_off"] = arrays["stems_off"][:-2]
    elif hostile == "document term out of range":
        arrays["docs_ids"][3] = arrays["docs_vocab_off"].size  # one past the last term
    elif hostile == "document offsets backwards":
        arrays["docs_off"][5], arrays["docs_off"][6] = arrays["docs_off"][6], arrays["docs_off"][5] - 1
    elif hostile == "later-version entry out of range":
        arrays["later"] = np.array([len(state.ids)], dtype=np.int32)
    elif hostile == "id not UTF-8":
        arrays["ids_utf8"][arrays["ids_off"][2]] = 0xFF
    else:  # the first term's bytes end inside the next one's first character, which is then none
        vocab = arrays["docs_vocab_utf8"]
        arrays["docs_vocab_utf8"] = np.concatenate((vocab[:1], np.frombuffer("é".encode(), np.uint8), vocab[1:]))
        arrays["docs_vocab_off"][1:] += 2
        arrays["docs_vocab_off"][1] = 2
    with path.open("wb") as fh:
        np.savez(fh, **arrays)
    caplog.set_level(logging.INFO, logger=LOG)
    conn, memories = _another_process(profile, options)
    try:
        index = _index_of(memories)
        assert len(index.content_tokens) == len(index.bm25) > 0
    finally:
        conn.close()
    assert any("is not used" in r.getMessage() for r in caplog.records)
    assert not any("recall index loaded" in r.getMessage() for r in caplog.records)


def test_an_index_file_that_cannot_be_written_leaves_search_working(store, caplog):
    index_file.index_path(store.connection.db_path).mkdir()  # in the way of the rename
    store.memories.put_many(_memories(random.Random(5), NOW, 50))
    walrus = _memories(random.Random(6), NOW, 1)[0].with_(id="w", content="The walrus enclosure opens at nine")
    store.memories.put(walrus)
    caplog.set_level(logging.INFO, logger=LOG)
    assert [e.content for e, _ in recall.search(store.memories, "walrus")] == ["The walrus enclosure opens at nine"]
    assert any("not written" in r.getMessage() for r in caplog.records)


def test_the_files_string_lookup_finds_every_string_it_holds_and_nothing_else():
    """What a save looks up in a loaded file before its tables are made: ids and stems found by their bytes."""
    held = ["", "a", "ab", "ab\x00", "note-2024-01-01-000001", "note-2024-01-01-000002", "café", "日本語", "b" * 300]
    blob, offsets = index_file._strings(held)
    finder = index_file._Finder(blob, offsets)
    assert [finder.find(s) for s in held] == list(range(len(held)))
    for absent in ("abc", "note-2024-01-01-000003", "cafe", "b" * 299, "b" * 301, "x" * 1000, "A"):
        assert finder.find(absent) is None, absent
    assert index_file._Finder(*index_file._strings([])).find("a") is None
