import multiprocessing as mp
from contextlib import contextmanager
from datetime import timedelta

import pytest

from dream_assets import recall_index as recall
from dream_assets.changes_model import ChangeRow
from dream_assets.model import MemoryEntry
from dream_assets.save_pipeline import save_memory
from dream_assets.store import open_store
from dream_assets.store.memory import ContentError, NotFound
from dream_assets.text.tokens import tokenize

from ..conftest import NOW


def test_save_get_and_list(store):
    r = save_memory(
        store.memories,
        "The user's timezone is Europe/Berlin.",
        category="user-preferences/timezone",
        tags=["timezone", "profile", "timezone"],
        importance=0.7,
        now=NOW,
    )
    assert r.action == "created"
    got = store.memories.get(r.entry.id)
    assert got.content == "The user's timezone is Europe/Berlin."
    assert got.tags == ("profile", "timezone")
    assert got.created_at == got.last_seen_at == got.updated_at == NOW
    assert got.reinforcement_count == 1 and got.archived_at is None
    assert [e.id for e in store.memories.list_live()] == [r.entry.id]
    assert store.memories.list_archived() == []


@pytest.mark.parametrize(
    "content,error", [("", "empty"), ("   \n", "empty"), ("x" * 16_001, "over the limit of 16000")]
)
def test_invalid_content_is_refused_with_a_clear_error(store, content, error):
    with pytest.raises(ContentError, match=error):
        save_memory(store.memories, content, now=NOW)
    assert store.memories.counts() == {"live": 0, "archived": 0}


def test_importance_out_of_range_is_refused(store):
    with pytest.raises(ContentError, match="importance"):
        save_memory(store.memories, "A fact", importance=1.5, now=NOW)


def test_paraphrase_above_threshold_reinforces_instead_of_creating(store):
    a = save_memory(store.memories, "The user prefers dark mode in the code editor.", now=NOW)
    b = save_memory(store.memories, "the user prefers dark mode in the code editor", now=NOW + timedelta(days=3))
    assert b.action == "reinforced" and b.matched_id == a.entry.id and b.similarity >= 0.88
    live = store.memories.list_live()
    assert len(live) == 1
    assert live[0].reinforcement_count == 2
    assert live[0].last_seen_at == NOW + timedelta(days=3)
    assert live[0].created_at == NOW


def test_near_copy_with_more_detail_extends_the_entry(store):
    base = (
        "Deploys to the staging cluster run every Tuesday after the release review, are owned by the platform "
        "team and are announced in the deploys channel with a changelog link."
    )
    first = save_memory(store.memories, base, now=NOW)
    for fact in ["The user drinks green tea.", "Invoices are due on the 5th.", "Standup is at 9:30."]:
        save_memory(store.memories, fact, now=NOW)
    r = save_memory(store.memories, base[:-1] + " and a rollback plan.", now=NOW + timedelta(days=1))
    assert r.action == "extended" and r.matched_id == first.entry.id
    live = {e.id: e for e in store.memories.list_live()}
    assert len(live) == 4
    assert live[first.entry.id].content.endswith("with a changelog link and a rollback plan.")
    assert live[first.entry.id].reinforcement_count == 2


def test_a_distinct_fact_creates_a_new_entry(store):
    save_memory(store.memories, "The user prefers dark mode in the code editor.", now=NOW)
    r = save_memory(store.memories, "The user's daughter is called Mia and plays the violin.", now=NOW)
    assert r.action == "created"
    assert store.memories.counts()["live"] == 2


def test_same_wording_different_subject_time_is_kept_apart(store):
    meta1 = {"subjectTimeStart": "2026-03-01", "subjectTimeEnd": "2026-03-05"}
    meta2 = {"subjectTimeStart": "2026-08-10", "subjectTimeEnd": "2026-08-14"}
    save_memory(store.memories, "The user went on a ski trip to Innsbruck.", metadata=meta1, now=NOW)
    r = save_memory(store.memories, "The user went on a ski trip to Innsbruck.", metadata=meta2, now=NOW)
    assert r.action == "created"


def test_bm25_search_ranks_the_specific_match_first_and_ignores_archived(store):
    ids = {}
    for key, text in {
        "email": "Use the mcp email tool to send the weekly report to Sarah.",
        "tea": "The user likes green tea in the afternoon.",
        "report": "The weekly report is due on Friday.",
        "old": "The old weekly report email went to Bob.",
    }.items():
        ids[key] = save_memory(store.memories, text, now=NOW, dedupe=False).entry.id
    store.memories.archive(ids["old"], now=NOW)
    hits = recall.search(store.memories, "send report email to Sarah", limit=5)
    assert hits[0][0].id == ids["email"]
    assert ids["old"] not in [e.id for e, _ in hits]
    assert ids["tea"] not in [e.id for e, _ in hits]
    assert all(hits[i][1] >= hits[i + 1][1] for i in range(len(hits) - 1))


def test_search_covers_category_and_tags(store):
    r = save_memory(store.memories, "Prefers aisle seats.", category="travel/flights", tags=["airline"], now=NOW)
    save_memory(store.memories, "Likes window views at home.", category="home", now=NOW)
    assert recall.search(store.memories, "flights")[0][0].id == r.entry.id
    assert recall.search(store.memories, "airline")[0][0].id == r.entry.id


def test_archive_restore_and_purge(store):
    e = save_memory(store.memories, "A fact to retire.", now=NOW).entry
    store.memories.archive(e.id, now=NOW + timedelta(days=1))
    assert store.memories.get(e.id).archived_at == NOW + timedelta(days=1)
    assert store.memories.get(e.id, include_archived=False) is None
    assert recall.search(store.memories, "fact retire") == []
    store.memories.restore(e.id, now=NOW + timedelta(days=2))
    assert recall.search(store.memories, "fact retire")[0][0].id == e.id
    with pytest.raises(ContentError, match="live"):
        store.memories.purge([e.id], now=NOW)
    store.memories.archive(e.id, now=NOW + timedelta(days=3))
    purged = store.memories.purge([e.id], now=NOW + timedelta(days=100))
    assert [p.id for p in purged] == [e.id]
    assert store.memories.get(e.id) is None
    assert e.id in store.memories.purged_ids()


def test_reinforce_touches_only_last_seen_and_count(store):
    e = save_memory(store.memories, "Episode: the user visited the Louvre.", now=NOW).entry
    r = store.memories.reinforce(e.id, now=NOW + timedelta(days=40))
    assert r.content == e.content and r.created_at == e.created_at
    assert r.last_seen_at == NOW + timedelta(days=40) and r.reinforcement_count == 2
    with pytest.raises(NotFound):
        store.memories.reinforce("nope", now=NOW)


def test_update_changes_fields_and_keeps_last_seen(store):
    e = save_memory(store.memories, "Coffee order: flat white.", now=NOW).entry
    u = store.memories.update(
        e.id, content="Coffee order: oat flat white.", tags=["coffee"], now=NOW + timedelta(hours=1)
    )
    assert u.content == "Coffee order: oat flat white." and u.tags == ("coffee",)
    assert u.updated_at == NOW + timedelta(hours=1) and u.last_seen_at == NOW
    assert recall.search(store.memories, "oat")[0][0].id == e.id


def test_fingerprint_covers_content_not_importance_or_usage(store):
    a = save_memory(store.memories, "Fact one about Paris.", now=NOW).entry
    save_memory(store.memories, "Fact two about Rome.", now=NOW)
    fp = store.memories.fingerprint()
    store.memories.set_importance({a.id: 0.11}, now=NOW + timedelta(days=60))
    store.memories.reinforce(a.id, now=NOW + timedelta(days=61))
    assert store.memories.fingerprint() == fp
    store.memories.update(a.id, content="Fact one about Paris, France.", now=NOW)
    assert store.memories.fingerprint() != fp


def _numbered_facts(n: int) -> list[MemoryEntry]:
    """``n`` distinct live entries m0, m1, … created at NOW."""
    return [
        MemoryEntry(
            id=f"m{i}",
            content=f"Fact number {i} about topic {i * 7}",
            category="c",
            tags=("t",),
            importance=0.5,
            created_at=NOW,
            updated_at=NOW,
            last_seen_at=NOW,
        )
        for i in range(n)
    ]


def test_fingerprint_is_order_independent(profile, tmp_path, options):
    from dream_assets.profile import AgentProfile

    other = open_store(AgentProfile(tmp_path / "other").ensure(), options)
    entries = _numbered_facts(20)
    s = open_store(profile, options)
    s.memories.put_many(entries)
    other.memories.put_many(list(reversed(entries)))
    assert s.memories.fingerprint() == other.memories.fingerprint()


def test_fingerprint_is_unambiguous_at_field_boundaries(profile, tmp_path, options):
    from dream_assets.profile import AgentProfile

    a = open_store(profile, options)
    b = open_store(AgentProfile(tmp_path / "b").ensure(), options)
    base = dict(importance=0.5, created_at=NOW, updated_at=NOW, last_seen_at=NOW, tags=())
    a.memories.put(MemoryEntry(id="x", content="ab", category="c", **base))
    b.memories.put(MemoryEntry(id="x", content="a", category="bc", **base))
    assert a.memories.fingerprint() != b.memories.fingerprint()


def test_the_kept_fingerprint_equals_a_full_recompute_after_every_kind_of_write(store):
    m = store.memories
    seen = {m.fingerprint()}

    def step(changes: bool) -> None:
        fp = m.fingerprint()
        assert fp == m.recomputed_fingerprint()
        assert (fp not in seen) == changes
        seen.add(fp)

    a = save_memory(
        m, "Zoë's café serves ☕ at 7:00 — naïve résumé.", category="places/ünï", tags=["café"], now=NOW
    ).entry
    step(True)
    b = save_memory(m, "The user's sister lives in Kraków.", now=NOW).entry
    step(True)
    m.put_many(
        [
            MemoryEntry(
                id=f"bulk-{i}",
                content=f"Bulk fact {i} with emoji 🚀 number {i * 3}",
                category="bulk",
                tags=("t",),
                importance=0.5,
                created_at=NOW,
                updated_at=NOW,
                last_seen_at=NOW,
                archived_at=NOW if i % 2 else None,
            )
            for i in range(6)
        ]
    )
    step(True)
    m.reinforce(a.id, now=NOW + timedelta(days=1))
    m.set_importance({a.id: 0.2, b.id: 0.9}, now=NOW + timedelta(days=2))
    m.set_metadata({a.id: {"note": "x"}})
    save_memory(m, "Zoë's café serves ☕ at 7:00 — naïve résumé.", category="places/ünï", now=NOW + timedelta(days=3))
    step(False)
    m.update(a.id, tags=["café", "morning"], now=NOW)
    step(True)
    m.update(b.id, category="people/family", now=NOW)
    step(True)
    m.update(b.id, content="The user's sister lives in Kraków, Poland.", now=NOW)
    step(True)
    m.archive(b.id, now=NOW)
    step(True)
    m.restore(b.id, now=NOW)
    assert m.fingerprint() == m.recomputed_fingerprint()
    m.archive(b.id, now=NOW)
    m.purge([b.id, "bulk-1"], now=NOW)
    assert m.fingerprint() == m.recomputed_fingerprint()
    m.replace(m.get("bulk-3").with_(archived_at=None))
    step(True)


def test_undoing_a_cycle_puts_the_fingerprint_back(store):
    m = store.memories
    kept = save_memory(m, "The user's dentist is Dr. Okafor in Accra.", now=NOW).entry
    gone = save_memory(m, "Project Nimbus moved its standup to 10:15.", now=NOW).entry
    before = m.fingerprint()
    later = NOW + timedelta(hours=1)
    with store.transaction():
        edited = m.update(kept.id, content="The user's dentist is Dr. Okafor in Accra, Ghana.", now=later)
        store.changes.record(
            ChangeRow(
                cycle_id="c1",
                pass_name="memory_consolidation",
                kind="updated",
                target_type="memory",
                target_id=kept.id,
                before=kept,
                after=edited,
                reason="merge",
            ),
            now=later,
        )
        archived = m.archive(gone.id, now=later)
        store.changes.record(
            ChangeRow(
                cycle_id="c1",
                pass_name="memory_consolidation",
                kind="archived",
                target_type="memory",
                target_id=gone.id,
                before=gone,
                after=archived,
                reason="merge",
            ),
            now=later,
        )
    assert m.fingerprint() != before
    store.changes.undo_cycle("c1", now=later + timedelta(minutes=5))
    assert m.fingerprint() == before == m.recomputed_fingerprint()


def test_a_rolled_back_write_leaves_the_fingerprint_as_it_was(store):
    a = save_memory(store.memories, "Fact one about Paris.", now=NOW).entry
    before = store.memories.fingerprint()
    with pytest.raises(RuntimeError):
        with store.transaction():
            store.memories.update(a.id, content="Fact one about Lyon.", now=NOW)
            save_memory(store.memories, "Fact two about Rome.", now=NOW)
            raise RuntimeError("the pass failed")
    assert store.memories.fingerprint() == before == store.memories.recomputed_fingerprint()


def _die_inside_a_write(root: str, entry_id: str) -> None:
    import os

    from dream_assets.options_loader import dream_options
    from dream_assets.profile import AgentProfile

    st = open_store(AgentProfile(root), dream_options())
    with st.transaction():
        st.memories.update(entry_id, content="Fact one about Lyon.", now=NOW)
        save_memory(st.memories, "Fact three about Oslo.", now=NOW)
        os._exit(3)


def test_a_process_killed_inside_a_write_leaves_a_fingerprint_that_matches_the_rows(profile, options):
    st = open_store(profile, options)
    a = save_memory(st.memories, "Fact one about Paris.", now=NOW).entry
    before = st.memories.fingerprint()
    st.close()
    ctx = mp.get_context("spawn")
    p = ctx.Process(target=_die_inside_a_write, args=(str(profile.root), a.id))
    p.start()
    p.join(120)
    assert p.exitcode == 3
    st = open_store(profile, options)
    assert [e.content for e in st.memories.list_live()] == ["Fact one about Paris."]
    assert st.memories.fingerprint() == before == st.memories.recomputed_fingerprint()
    st.close()


def test_a_store_written_by_an_older_version_gets_its_fingerprint_on_open(profile, options):
    import duckdb

    from dream_assets.store.connection import close_all

    st = open_store(profile, options)
    a = save_memory(st.memories, "Fact one about Paris.", now=NOW).entry
    save_memory(st.memories, "Fact two about Rome.", now=NOW)
    before = st.memories.fingerprint()
    st.close()
    close_all()
    with duckdb.connect(str(profile.store_path)) as raw:  # written by a version without per-row fingerprint parts
        raw.execute("ALTER TABLE memories DROP COLUMN fp_h1")
        raw.execute("ALTER TABLE memories DROP COLUMN fp_h2")
        raw.execute("CREATE TABLE memory_fingerprint (live BIGINT NOT NULL, h1 UBIGINT NOT NULL, h2 UBIGINT NOT NULL)")
        raw.execute("INSERT INTO memory_fingerprint VALUES (2, 1, 1)")  # version 3's running sums, now stale
        raw.execute("UPDATE meta SET value = '3' WHERE key = 'schema_version'")
        raw.execute("UPDATE memories SET content = 'Fact one about Lyon.' WHERE id = ?", [a.id])
    st = open_store(profile, options)
    assert st.memories.fingerprint() == st.memories.recomputed_fingerprint() != before
    st.memories.update(a.id, content="Fact one about Paris.", now=NOW)
    assert st.memories.fingerprint() == before
    with st.connection.session() as conn:
        assert conn.execute(
            "SELECT count(*) FROM duckdb_tables() WHERE table_name = 'memory_fingerprint'"
        ).fetchone() == (0,)
    st.close()


def test_reading_the_fingerprint_reads_the_kept_sums_not_the_rows(store):
    """The fingerprint is the sums every write of the store keeps, read as one row: a row changed behind the store's
    back moves the fingerprint computed from the rows, not the kept one. (How long reading it takes at a million
    entries is ``store.fingerprint_ms`` in benchmarks/store.py.)"""
    store.memories.put_many(_numbered_facts(50))
    kept = store.memories.fingerprint()
    assert kept == store.memories.recomputed_fingerprint()
    with store.connection.transaction() as conn:
        conn.execute("UPDATE memories SET content = content || ' Edited.' WHERE id = (SELECT min(id) FROM memories)")
    assert store.memories.fingerprint() == kept != store.memories.recomputed_fingerprint()


def test_duplicate_clusters_use_options(store):
    texts = [
        "The user's favourite colour is teal.",
        "The user's favourite colour is teal!",
        "The user's favorite colour is teal.",
        "Meeting notes: the budget review moved to March.",
        "An unrelated fact about bicycles and rain.",
    ]
    for t in texts:
        save_memory(store.memories, t, now=NOW, dedupe=False)
    result = store.memories.duplicate_clusters(threshold=0.8, max_cluster_size=3)
    assert result.method == "overlap" and result.threshold == 0.8  # the default lexical measure
    assert len(result.clusters) == 1 and len(result.clusters[0]) >= 2
    tfidf = store.memories.duplicate_clusters(threshold=0.8, max_cluster_size=3, method="tfidf")
    assert tfidf.method == "tfidf"
    assert len(tfidf.clusters) == 1 and len(tfidf.clusters[0]) >= 2


def test_tfidf_measure_is_an_option(profile, options):
    store = open_store(profile, options.replace(LexicalSimilarityMeasure="tfidf"))
    save_memory(store.memories, "The user's favourite colour is teal.", now=NOW, dedupe=False)
    save_memory(store.memories, "The user's favourite colour is teal!", now=NOW, dedupe=False)
    result = store.memories.duplicate_clusters()
    assert result.method == "tfidf" and result.threshold == options.ConsolidationSimilarityThreshold
    assert result.clusters == [[e.id for e in store.memories.list_live()]]


def test_store_sees_writes_of_another_process(profile, options):
    s = open_store(profile, options)
    save_memory(s.memories, "A first fact about lighthouses.", now=NOW)
    assert recall.search(s.memories, "lighthouses")
    ctx = mp.get_context("spawn")
    p = ctx.Process(target=_save_many, args=(str(profile.root), "volcano", 5))
    p.start()
    p.join(60)
    assert p.exitcode == 0
    assert len(recall.search(s.memories, "volcano", limit=10)) == 5


def _save_many(root: str, word: str, n: int) -> None:
    from dream_assets.options_loader import dream_options
    from dream_assets.profile import AgentProfile

    st = open_store(AgentProfile(root), dream_options())
    for i in range(n):
        save_memory(
            st.memories,
            f"Distinct {word} fact number {i}: {word} {i * 13} erupted in year {1900 + i}.",
            now=NOW,
            dedupe=False,
        )
    st.close()


def _writer(root: str, tag: str, n: int) -> None:
    from dream_assets.options_loader import dream_options
    from dream_assets.profile import AgentProfile

    st = open_store(AgentProfile(root), dream_options())
    for i in range(n):
        save_memory(st.memories, f"Process {tag} wrote fact {i} about item-{tag}-{i}.", now=NOW, dedupe=False)
    st.close()


@pytest.mark.slow  # two processes saving at once
def test_two_processes_saving_at_once_lose_nothing(profile, options):
    ctx = mp.get_context("spawn")
    procs = [ctx.Process(target=_writer, args=(str(profile.root), tag, 40)) for tag in ("a", "b")]
    for p in procs:
        p.start()
    for p in procs:
        p.join(120)
    assert [p.exitcode for p in procs] == [0, 0]
    s = open_store(profile, options)
    contents = {e.content for e in s.memories.list_live()}
    assert len(contents) == 80
    assert all(f"Process {t} wrote fact {i} about item-{t}-{i}." in contents for t in "ab" for i in range(40))


def test_an_entry_purged_and_put_back_by_another_process_is_found_again(profile, options):
    """The recall index catches up with other processes' writes in the order they were made: a purge followed by the
    entry coming back (an undone purge) leaves it findable."""
    from dream_assets.store.connection import StoreConnection
    from dream_assets.store.memory import MemoryStore

    def connection():
        return StoreConnection(profile.store_path, profile.store_lock_path, linger_s=0)

    ours = MemoryStore(connection(), options)
    kept = ours.put(
        MemoryEntry(
            id="m-lease",
            content="Ana Ruiz signed the Lisbon lease.",
            category="general",
            tags=(),
            importance=0.5,
            created_at=NOW,
            updated_at=NOW,
            last_seen_at=NOW,
            reinforcement_count=1,
            metadata={},
        )
    )
    assert [e.id for e, _ in recall.search(ours, "Lisbon lease")] == [kept.id]  # our index is built and in step
    theirs = MemoryStore(connection(), options)  # stands for another process
    archived = theirs.archive(kept.id, now=NOW)
    theirs.purge([kept.id], now=NOW)
    theirs.put(archived)
    theirs.restore(kept.id, now=NOW)
    assert [e.id for e, _ in recall.search(ours, "Lisbon lease")] == [kept.id]


def test_recall_index_built_at_once_equals_the_one_kept_in_step_with_every_write(store):
    from dream_assets.recall_index import RecallIndex

    recall.search(store.memories, "start the index")  # built on the empty store, then kept in step write by write
    saved = [
        save_memory(store.memories, text, category=category, tags=tags, now=NOW + timedelta(minutes=i)).entry
        for i, (text, category, tags) in enumerate(
            [
                ("The user prefers dark mode in VS Code.", "prefs", ["editor"]),
                ("Melanie said again on 12 May 2023 that she loves pottery.", "people", ["melanie"]),
                ("Café meetings in Zürich every Tuesday.", "places", []),
                ("The user's dog is called Rex.", "pets", ["dog", "rex"]),
                ("Kestrel alert 7732 was caused by a schema change.", "incidents", ["incidents"]),
                ("said again", "notes", []),
                ("Project Atlas deploys through GitHub Actions (ref 12).", "projects/atlas", ["ci"]),
            ]
        )
    ]
    store.memories.update(saved[0].id, content="The user prefers light mode in VS Code.", now=NOW)
    store.memories.archive(saved[1].id, now=NOW)
    store.memories.archive(saved[2].id, now=NOW)
    store.memories.purge([saved[2].id], now=NOW)
    kept = recall.of(store.memories)
    with store.connection.session() as conn:
        fresh = RecallIndex()
        fresh.ensure(conn)
    assert fresh.synced_seq == kept.synced_seq
    assert fresh.content_tokens == kept.content_tokens and fresh.overlap == kept.overlap
    assert +fresh.stem_df == +kept.stem_df and fresh.exact == kept.exact and fresh.exact_of == kept.exact_of
    for query in ["dark mode", "light mode editor", "pottery melanie", "dog rex pets", "kestrel schema", "atlas ci"]:
        assert fresh.bm25.search(tokenize(query), limit=5) == kept.bm25.search(tokenize(query), limit=5)


def _entry(i: int, content: str) -> MemoryEntry:
    return MemoryEntry(
        id=f"m-{i:03d}",
        content=content,
        category=("people", "places", "projects")[i % 3],
        tags=(f"t{i % 4}",),
        importance=0.5,
        created_at=NOW,
        updated_at=NOW,
        last_seen_at=NOW,
        reinforcement_count=1,
        metadata={},
    )


def test_a_recall_index_built_outside_the_store_lets_others_write_and_still_equals_one_built_at_once(
    profile, options, monkeypatch
):
    """The first index build reads the live rows a few at a time, each read its own short session, so another
    process writes between the reads (it could not if the build held the file); the rows it added, rewrote, archived,
    purged or put back meanwhile are in the index exactly as a build inside one session sees them."""
    from dream_assets.store import memory
    from dream_assets.store.connection import StoreConnection

    monkeypatch.setattr(recall, "INDEX_READ_CHUNK", 4)
    topics = ["lease in Lisbon", "Heron load tests", "oat milk flat whites", "Kestrel alert 7732", "dark mode"]
    theirs = memory.MemoryStore(StoreConnection(profile.store_path, profile.store_lock_path, linger_s=0), options)
    theirs.put_many([_entry(i, f"Fact {i} is about the {topics[i % 5]} and person {i}.") for i in range(30)])
    theirs.archive("m-029", now=NOW)
    writes = iter(
        [
            lambda: save_memory(
                theirs, "Priya Shah owns the Lisbon lease since 2026-11-01.", category="places", now=NOW
            ),
            lambda: theirs.update("m-025", content="Fact 25 moved to the Heron load tests.", now=NOW),  # unread yet
            lambda: theirs.archive("m-001", now=NOW),  # read already
            lambda: theirs.purge(["m-001"], now=NOW),
            lambda: theirs.restore("m-029", now=NOW),
            lambda: theirs.update("m-002", tags=["moved"], now=NOW),  # read already
        ]
    )
    sessions = []

    class Ours(StoreConnection):
        @contextmanager
        def session(self):
            if not self.in_session:  # another process's write lands before each of our sessions
                sessions.append(next(writes, lambda: None)())
            with super().session() as conn:
                yield conn

    ours = memory.MemoryStore(Ours(profile.store_path, profile.store_lock_path, linger_s=0), options)
    recall.prepare(ours)
    assert recall.of(ours).ready and len(sessions) >= 30 // 4 + 1
    with theirs._conn.session() as conn:
        fresh = recall.RecallIndex()
        fresh.ensure(conn)
    kept = recall.of(ours)
    assert fresh.synced_seq == kept.synced_seq and set(fresh.bm25) == set(kept.bm25)
    assert "m-001" not in kept.bm25 and "m-029" in kept.bm25 and len(kept.bm25) == 30
    assert fresh.content_tokens == kept.content_tokens and fresh.overlap == kept.overlap
    assert +fresh.stem_df == +kept.stem_df and fresh.exact == kept.exact and fresh.exact_of == kept.exact_of
    for query in ["Lisbon lease", "Heron load tests", "flat whites", "moved", "person 25", "Priya", "dark mode t1"]:
        assert fresh.bm25.search(tokenize(query), limit=8) == kept.bm25.search(tokenize(query), limit=8)
    assert [e.id for e, _ in recall.search(ours, "Fact 25 moved Heron")][0] == "m-025"
