"""The LangGraph store: LangGraph's own store semantics (ported from its store tests: namespaces by prefix and suffix
with wildcards, max_depth, limit and offset, filters on value fields, a None value deletes, a missing key is None,
created_at / updated_at, search with a query), over the real memory store, and a real LangGraph graph using it."""

from __future__ import annotations

import asyncio
import json
from datetime import timedelta

import pytest

pytest.importorskip("langgraph", reason="the langgraph extra is not installed: pip install 'dream_assets[langgraph]'")

from langgraph.config import get_store  # noqa: E402
from langgraph.graph import END, START, StateGraph  # noqa: E402
from langgraph.store.base import (  # noqa: E402
    GetOp,
    InvalidNamespaceError,
    Item,
    ListNamespacesOp,
    MatchCondition,
    PutOp,
    SearchOp,
)
from typing_extensions import TypedDict  # noqa: E402

from dream_assets.langgraph_store import LangGraphMemoryStore, item_id  # noqa: E402
from dream_assets.model import MemoryEntry  # noqa: E402
from dream_assets.passes.memory_consolidation import run_memory_consolidation  # noqa: E402
from dream_assets.save_pipeline import save_memory
from dream_assets.store import open_store  # noqa: E402
from dream_assets_tests.conftest import NOW, run_scripted  # noqa: E402


class Clock:
    """The store's time: moves a second per write, so updated_at is strictly later after an update."""

    def __init__(self) -> None:
        self.now = NOW

    def __call__(self):
        self.now += timedelta(seconds=1)
        return self.now


@pytest.fixture
def lg(profile, options):
    store = LangGraphMemoryStore(open_store(profile, options), clock=Clock())
    yield store
    store.close()


def test_put_get_update_and_delete_keep_langgraph_semantics_and_delete_archives(lg):
    ns = ("test", "documents")
    value = {"title": "Test Document", "content": "Hello, World!", "n": 1, "nested": {"a": [1, 2]}}
    lg.put(ns, "doc1", value)
    item = lg.get(ns, "doc1")
    assert isinstance(item, Item)
    assert (item.namespace, item.key, item.value) == (ns, "doc1", value)
    assert item.created_at == item.updated_at

    lg.put(ns, "doc1", {"title": "Updated Document", "content": "Hello, Updated!"})
    updated = lg.get(ns, "doc1")
    assert updated.value == {"title": "Updated Document", "content": "Hello, Updated!"}
    assert updated.updated_at > item.updated_at and updated.created_at == item.created_at

    assert lg.get(("test", "other_documents"), "doc1") is None
    assert lg.get(ns, "missing") is None

    lg.delete(ns, "doc1")
    assert lg.get(ns, "doc1") is None
    assert lg.search(ns) == []
    # Archived, not deleted: the entry is still in the file, with its text.
    entry = lg.store.memories.get(item_id(ns, "doc1"))
    assert entry is not None and entry.is_archived and entry.content == "Hello, Updated!"
    assert lg.store.memories.counts() == {"live": 0, "archived": 1}

    # Put again after a delete: the same entry comes back live with the new value.
    lg.put(ns, "doc1", {"content": "Back again"})
    assert lg.get(ns, "doc1").value == {"content": "Back again"}
    assert lg.store.memories.counts() == {"live": 1, "archived": 0}


def test_batch_runs_its_operations_in_order_and_a_none_value_deletes(lg):
    lg.put(("test", "foo"), "key1", {"data": "value1"})
    lg.put(("test", "bar"), "key2", {"data": "value2"})
    results = lg.batch(
        [
            GetOp(("test", "foo"), "key1"),
            PutOp(("test", "bar"), "key2", {"data": "value2"}),
            SearchOp(("test",), filter={"data": "value1"}, limit=10, offset=0),
            ListNamespacesOp(match_conditions=None, max_depth=None, limit=10, offset=0),
            GetOp(("test",), "key3"),
            PutOp(("test",), "key3", {"data": "value3"}),
            GetOp(("test",), "key3"),
            PutOp(("test", "foo"), "key1", None),
            GetOp(("test", "foo"), "key1"),
        ]
    )
    assert len(results) == 9
    assert results[0].value == {"data": "value1"} and results[0].key == "key1"
    assert results[1] is None and results[5] is None and results[7] is None
    assert [i.key for i in results[2]] == ["key1"]
    assert results[3] == [("test", "bar"), ("test", "foo")]
    assert results[4] is None
    assert results[6].value == {"data": "value3"}
    assert results[8] is None


def test_namespaces_are_categories_listed_by_prefix_suffix_wildcards_depth_and_pages(lg):
    namespaces = [
        ("a", "b", "c"),
        ("a", "b", "d", "e"),
        ("a", "b", "d", "i"),
        ("a", "b", "f"),
        ("a", "c", "f"),
        ("b", "a", "f"),
        ("users", "123"),
        ("users", "456", "settings"),
        ("admin", "users", "789"),
    ]
    for i, ns in enumerate(namespaces):
        lg.put(ns, f"id_{i}", {"data": f"value_{i:02d}"})
    assert lg.store.memories.get(item_id(("a", "b", "c"), "id_0")).category == "a/b/c"

    assert lg.list_namespaces(prefix=("a", "b")) == [
        ("a", "b", "c"),
        ("a", "b", "d", "e"),
        ("a", "b", "d", "i"),
        ("a", "b", "f"),
    ]
    assert lg.list_namespaces(suffix=("f",)) == [("a", "b", "f"), ("a", "c", "f"), ("b", "a", "f")]
    assert lg.list_namespaces(prefix=("a",), suffix=("f",)) == [("a", "b", "f"), ("a", "c", "f")]
    assert lg.list_namespaces(prefix=("a", "b"), max_depth=3) == [("a", "b", "c"), ("a", "b", "d"), ("a", "b", "f")]
    assert lg.list_namespaces(prefix=("a", "b"), limit=2) == [("a", "b", "c"), ("a", "b", "d", "e")]
    assert lg.list_namespaces(prefix=("a", "b"), offset=2) == [("a", "b", "d", "i"), ("a", "b", "f")]
    assert lg.list_namespaces(prefix=("a", "*", "f")) == [("a", "b", "f"), ("a", "c", "f")]
    assert lg.list_namespaces(suffix=("*", "f")) == [("a", "b", "f"), ("a", "c", "f"), ("b", "a", "f")]
    assert lg.list_namespaces(prefix=("nonexistent",)) == []
    assert lg.list_namespaces(prefix=("users", "123")) == [("users", "123")]
    assert lg.list_namespaces(prefix=("*", "users"), suffix=("*", "settings")) == []
    assert lg.list_namespaces(max_depth=2) == [
        ("a", "b"),
        ("a", "c"),
        ("admin", "users"),
        ("b", "a"),
        ("users", "123"),
        ("users", "456"),
    ]
    assert lg.batch([ListNamespacesOp(match_conditions=(MatchCondition("suffix", ("789",)),))]) == [
        [("admin", "users", "789")]
    ]
    # A deleted item's namespace is gone once nothing live is left in it.
    lg.delete(("users", "123"), "id_6")
    assert ("users", "123") not in lg.list_namespaces()


def test_search_filters_value_fields_pages_and_keeps_to_the_prefix(lg):
    data = [
        (("test", "docs"), "doc1", {"title": "First Doc", "author": "Alice", "tags": ["important"], "score": 2}),
        (("test", "docs"), "doc2", {"title": "Second Doc", "author": "Bob", "tags": ["draft"], "score": 9}),
        (("test", "images"), "img1", {"title": "Image 1", "author": "Alice", "tags": ["final"], "score": 10}),
        (("other",), "x", {"title": "Elsewhere", "author": "Alice", "score": 11}),
    ]
    for ns, key, value in data:
        lg.put(ns, key, value)
    assert len(lg.search(("test",))) == 3
    docs = lg.search(("test", "docs"))
    assert sorted(i.key for i in docs) == ["doc1", "doc2"] and all(i.namespace == ("test", "docs") for i in docs)
    assert sorted(i.key for i in lg.search(("test",), filter={"author": "Alice"})) == ["doc1", "img1"]
    assert [i.key for i in lg.search(("test",), filter={"tags": ["draft"]})] == ["doc2"]
    # Numbers compare as numbers, not as text ("9" >= "10" would be true).
    assert sorted(i.value["score"] for i in lg.search(("test",), filter={"score": {"$gte": 9}})) == [9, 10]
    assert sorted(i.value["score"] for i in lg.search(("test",), filter={"score": {"$lt": 10}})) == [2, 9]
    assert [i.key for i in lg.search(("test",), filter={"author": {"$ne": "Alice"}})] == ["doc2"]
    assert len(lg.search(("test",), limit=2)) == 2
    assert len(lg.search(("test",), offset=2)) == 1
    # Without a query: most recently updated first.
    assert [i.key for i in lg.search(())] == ["x", "img1", "doc2", "doc1"]
    assert all(i.score is None for i in lg.search(()))
    with pytest.raises(ValueError, match=r"\$regex"):
        lg.search(("test",), filter={"author": {"$regex": "A"}})


def test_search_with_a_query_is_the_stores_recall_with_the_current_fact_first(lg):
    ns = ("memories", "user-1")
    lg.put(ns, "manager-old", {"text": "The user's manager is Tom Becker.", "kind": "fact"})
    lg.put(ns, "manager-new", {"text": "The user's manager is Priya Shah since 2026-11-01.", "kind": "fact"})
    lg.put(ns, "lunch", {"text": "The user likes ramen for lunch.", "kind": "preference"})
    lg.put(("memories", "user-2"), "manager", {"text": "Their manager is Sam.", "kind": "fact"})

    hits = lg.search(ns, query="Who is my manager?")
    assert [h.key for h in hits] == ["manager-new", "manager-old"]
    assert hits[0].score >= hits[1].score > 0
    assert hits[0].value == {"text": "The user's manager is Priya Shah since 2026-11-01.", "kind": "fact"}
    assert [h.key for h in lg.search(ns, query="manager", filter={"kind": "preference"})] == []
    assert [h.key for h in lg.search(ns, query="ramen lunch", filter={"kind": "preference"})] == ["lunch"]
    assert [h.key for h in lg.search(ns, query="manager", limit=1, offset=1)] == ["manager-old"]
    assert sorted(h.key for h in lg.search(("memories",), query="manager")) == ["manager", "manager-new", "manager-old"]


def test_text_comes_from_content_text_index_paths_or_json_and_values_round_trip(lg):
    ns = ("notes",)
    lg.put(ns, "a", {"content": "Caroline moved to Porto.", "extra": 1})
    lg.put(ns, "b", {"title": "Trip", "body": {"summary": "Two weeks in Osaka"}}, index=["title", "body.summary"])
    lg.put(ns, "c", {"city": "Bergen", "people": ["Ana", "Kofi"]})
    memories = lg.store.memories
    assert memories.get(item_id(ns, "a")).content == "Caroline moved to Porto."
    assert memories.get(item_id(ns, "b")).content == "Trip\nTwo weeks in Osaka"
    assert json.loads(memories.get(item_id(ns, "c")).content) == {"city": "Bergen", "people": ["Ana", "Kofi"]}
    assert lg.get(ns, "b").value == {"title": "Trip", "body": {"summary": "Two weeks in Osaka"}}
    assert [h.key for h in lg.search(ns, query="Osaka")] == ["b"]
    assert [h.key for h in lg.search(ns, query="Bergen")] == ["c"]


def test_entries_saved_another_way_are_items_of_their_category_and_edits_show_in_get(lg):
    saved = save_memory(lg.store.memories, "The user prefers dark mode.", category="prefs/ui", now=NOW).entry
    [hit] = lg.search(("prefs",), query="dark mode")
    assert (hit.namespace, hit.key, hit.value) == (
        ("prefs", "ui"),
        saved.id,
        {"content": "The user prefers dark mode."},
    )
    assert lg.get(("prefs", "ui"), saved.id).value == {"content": "The user prefers dark mode."}
    assert lg.get(("other",), saved.id) is None
    lg.put(("prefs", "ui"), saved.id, {"content": "The user prefers light mode."})
    assert lg.store.memories.get(saved.id).content == "The user prefers light mode."
    lg.delete(("prefs", "ui"), saved.id)
    assert lg.store.memories.get(saved.id).is_archived
    # A value of other fields, or longer than an entry holds, put to it comes back whole, under the same key.
    for value in ({"content": "Dark mode after 18:00.", "n": 2}, {"content": _long_text(700, "Night shift.")}):
        lg.put(("prefs", "ui"), saved.id, value)
        assert (lg.get(("prefs", "ui"), saved.id).key, lg.get(("prefs", "ui"), saved.id).value) == (saved.id, value)
        assert [h.key for h in lg.search(("prefs", "ui"))] == [saved.id]

    # The entry's text edited after the put (here by a tool edit): get shows the current text in the value's field.
    lg.put(("notes",), "k", {"text": "Ana lives in Lisbon.", "n": 1})
    lg.store.memories.update(item_id(("notes",), "k"), content="Ana lives in Lisbon. She moved there in 2025.", now=NOW)
    assert lg.get(("notes",), "k").value == {"text": "Ana lives in Lisbon. She moved there in 2025.", "n": 1}


def test_a_key_the_dream_cycle_superseded_leads_to_its_successor(lg):
    ns = ("facts",)
    lg.put(ns, "home-2024", {"content": "Ana lives in Lisbon."})
    lg.put(ns, "home-2026", {"content": "Ana moved to Porto and lives there now."})
    old, new = item_id(ns, "home-2024"), item_id(ns, "home-2026")
    lg.store.memories.supersede(old, new, now=NOW + timedelta(days=1), reason="moved")
    item = lg.get(ns, "home-2024")
    assert (item.key, item.value) == ("home-2026", {"content": "Ana moved to Porto and lives there now."})
    assert [h.key for h in lg.search(ns, query="Ana lives")] == ["home-2026"]


def test_keys_the_dream_cycle_merged_lead_to_the_merged_entry(lg, profile):
    ns = ("facts",)
    lg.put(ns, "a", {"content": "Ana lives in Porto."})
    lg.put(ns, "b", {"content": "Ana lives in Porto, near the river."})
    sources = [item_id(ns, "a"), item_id(ns, "b")]
    merged_text = "Ana lives in Porto, near the river."
    answer = {"toDelete": [], "toSave": [{"content": merged_text, "sourceIds": sources}]}
    report, _ = run_scripted(run_memory_consolidation, profile, lg.store, [answer], now=NOW + timedelta(days=1))
    assert report.counts.get("merged") == 1, report
    [merged] = lg.store.memories.list_live()
    for key in ("a", "b"):
        item = lg.get(ns, key)
        assert (item.namespace, item.key, item.value) == (ns, merged.id, {"content": merged_text})
    assert lg.get(ns, "never-put") is None
    # Deleting one of the merged keys forgets that key only; the merged entry stays live for the other.
    lg.delete(ns, "a")
    assert lg.get(ns, "a") is None and lg.get(ns, "b").key == merged.id
    assert not lg.store.memories.get(merged.id).is_archived


def _users_with_the_same_fact(lg):
    """Alice and Bob each keep an almost identical memory in a namespace of their own."""
    alice, bob = ("memories", "alice"), ("memories", "bob")
    lg.put(alice, "drink", {"content": "Prefers green tea in the morning, no sugar.", "owner": "alice", "n": 1})
    lg.put(bob, "drink", {"content": "Prefers green tea in the morning, no sugar, with lemon.", "owner": "bob"})
    return alice, bob


def _each_keeps_its_own(lg, alice, bob):
    a, b = lg.get(alice, "drink"), lg.get(bob, "drink")
    assert (a.namespace, a.key, a.value) == (
        alice,
        "drink",
        {"content": "Prefers green tea in the morning, no sugar.", "owner": "alice", "n": 1},
    )
    assert (b.namespace, b.key, b.value["owner"]) == (bob, "drink", "bob")
    assert [(i.namespace, i.key) for i in lg.search(alice, query="green tea")] == [(alice, "drink")]
    assert [(i.namespace, i.key) for i in lg.search(bob, query="green tea")] == [(bob, "drink")]
    assert {i.value["owner"] for i in lg.search(alice)} == {"alice"}


def test_a_model_merge_across_two_users_namespaces_is_refused_and_each_keeps_their_own(lg, profile):
    alice, bob = _users_with_the_same_fact(lg)
    ids = [item_id(alice, "drink"), item_id(bob, "drink")]
    hostile = {
        "toDelete": [],
        "toSave": [{"content": "Prefers green tea in the morning, no sugar, with lemon.", "sourceIds": ids}],
    }
    report, backend = run_scripted(run_memory_consolidation, profile, lg.store, [hostile], now=NOW + timedelta(days=1))
    assert report.counts.get("merged", 0) == 0 and report.counts["cross_scope_refused"] == 1, report
    assert any("LangGraph namespace 'memories/alice'" in c.detail for c in report.changes), report.changes
    # The host never offered them as one cluster: a near duplicate behind another wall is no merge candidate.
    assert backend.requests and all(not r.inputs["clusters"] for r in backend.requests)
    _each_keeps_its_own(lg, alice, bob)


def test_a_model_cannot_move_an_item_into_another_users_namespace(lg, profile):
    alice, bob = _users_with_the_same_fact(lg)
    move = {
        "toDelete": [],
        "toSave": [
            {
                "content": "Prefers green tea in the morning, no sugar.",
                "sourceIds": [item_id(alice, "drink")],
                "category": "memories/bob",
            }
        ],
    }
    report, _ = run_scripted(run_memory_consolidation, profile, lg.store, [move], now=NOW + timedelta(days=1))
    assert report.counts["cross_scope_refused"] == 1, report
    _each_keeps_its_own(lg, alice, bob)


def test_a_model_cannot_write_a_new_entry_into_a_users_namespace(lg, profile):
    alice, bob = _users_with_the_same_fact(lg)
    copy = {
        "toDelete": [],
        "toSave": [{"content": "Prefers green tea in the morning, no sugar.", "category": "memories/bob"}],
    }
    report, _ = run_scripted(run_memory_consolidation, profile, lg.store, [copy], now=NOW + timedelta(days=1))
    assert report.counts["cross_scope_refused"] == 1, report
    assert [i.key for i in lg.search(bob)] == ["drink"]


def test_a_removal_is_not_carried_by_an_entry_in_another_users_namespace(lg, profile):
    alice, bob = ("memories", "alice"), ("memories", "bob")
    lg.put(alice, "k", {"content": "Flight to Oslo on 2026-12-04 at 09:15."})
    lg.put(bob, "k", {"content": "Flight to Oslo on 2026-12-04 at 09:15, seat 12A."})
    remove = {"toDelete": [item_id(alice, "k")], "toSave": []}
    report, _ = run_scripted(run_memory_consolidation, profile, lg.store, [remove], now=NOW + timedelta(days=1))
    assert report.counts.get("ephemeral", 0) == 0 and report.counts["protected"] == 1, report
    assert lg.get(alice, "k").value == {"content": "Flight to Oslo on 2026-12-04 at 09:15."}


def test_the_contradiction_sweep_never_supersedes_across_namespaces(lg, profile):
    from dream_assets.passes.contradiction_sweep import run_contradiction_sweep

    alice, bob = ("memories", "alice"), ("memories", "bob")
    lg.put(alice, "home", {"content": "Lives in Lisbon, in the Alfama district."})
    lg.put(bob, "home", {"content": "Lives in Porto now, in the Ribeira district."})
    a, b = item_id(alice, "home"), item_id(bob, "home")
    hostile = {"supersessions": [{"winnerId": b, "loserId": a, "reason": "moved"}]}
    report, backend = run_scripted(run_contradiction_sweep, profile, lg.store, [hostile], now=NOW + timedelta(days=1))
    assert report.counts["superseded"] == 0, report
    # Not offered as neighbours, so no call at all; were it asked, the pair would be refused across scopes.
    assert all(p == [] or a not in p or b not in p for r in backend.requests for p in r.inputs["pairs"])
    assert lg.get(alice, "home").value == {"content": "Lives in Lisbon, in the Alfama district."}
    assert lg.get(bob, "home").value == {"content": "Lives in Porto now, in the Ribeira district."}


def test_namespaces_the_store_cannot_hold_are_refused_before_anything_is_written(lg):
    for bad in [(), ("the", "thing.about"), ("some", "fun", ""), ("a/b", "c"), ("langgraph", "foo")]:
        with pytest.raises(InvalidNamespaceError):
            lg.put(bad, "foo", {"foo": "bar"})
    with pytest.raises(InvalidNamespaceError):
        lg.batch([PutOp(("x/y",), "k", {"content": "no"})])
    with pytest.raises(NotImplementedError):
        lg.put(("ok",), "k", {"content": "c"}, ttl=5)
    assert lg.store.memories.counts() == {"live": 0, "archived": 0}


def _long_text(words: int, tail: str) -> str:
    return " ".join(f"Chapter{n % 97} notes on the Meridian survey." for n in range(words)) + " " + tail


def test_a_value_over_max_content_chars_is_put_kept_whole_and_searchable_by_its_head(lg, profile):
    """LangGraph's own stores take a value of any size: so does this one. The entry holds the head of the text (what
    recall searches), get and search return the whole value, and a dream cycle neither merges nor removes it."""
    ns = ("docs", "alice")
    big = {"content": _long_text(800, "The vault code is 4471."), "source": "upload"}
    assert len(big["content"]) > 30_000
    lg.put(ns, "report", big)
    assert lg.get(ns, "report").value == big
    [hit] = lg.search(ns, query="Meridian survey")
    assert (hit.key, hit.value) == ("report", big)
    entry = lg.store.memories.get(item_id(ns, "report"))
    assert len(entry.content) <= lg.store.options.MaxContentChars and big["content"].startswith(entry.content)
    # A second long value with the same head, and a model that merges the two and removes one: the host declines.
    twin = {"content": _long_text(800, "The vault code is 9902.")}
    lg.put(ns, "report-v2", twin)
    ids = [item_id(ns, "report"), item_id(ns, "report-v2")]
    hostile = {"toDelete": [ids[1]], "toSave": [{"content": entry.content, "sourceIds": ids}]}
    run_scripted(run_memory_consolidation, profile, lg.store, [hostile, hostile], now=NOW + timedelta(days=1))
    assert lg.get(ns, "report").value == big and lg.get(ns, "report-v2").value == twin
    # Updated to another long value and deleted: the same as any value.
    lg.put(ns, "report", twin)
    assert lg.get(ns, "report").value == twin
    lg.delete(ns, "report")
    assert lg.get(ns, "report") is None


def test_async_methods_batch_through_the_same_primitive(lg):
    async def run():
        await asyncio.gather(
            lg.aput(("a",), "one", {"content": "first"}), lg.aput(("a",), "two", {"content": "second"})
        )
        got = await asyncio.gather(lg.aget(("a",), "one"), lg.aget(("a",), "two"), lg.aget(("a",), "none"))
        found = await lg.asearch(("a",), query="second")
        await lg.adelete(("a",), "one")
        return got, found, await lg.aget(("a",), "one"), await lg.alist_namespaces()

    got, found, deleted, namespaces = asyncio.run(run())
    assert [g.value if g else None for g in got] == [{"content": "first"}, {"content": "second"}, None]
    assert [f.key for f in found] == ["two"] and deleted is None and namespaces == [("a",)]


class State(TypedDict):
    user: str
    said: str
    recalled: list[str]


def remember(state: State) -> dict:
    get_store().put(("memories", state["user"]), "latest", {"content": state["said"]})
    return {}


def recall(state: State) -> dict:
    hits = get_store().search(("memories", state["user"]), query=state["said"], limit=5)
    return {"recalled": [h.value["content"] for h in hits]}


def test_a_langgraph_graph_uses_the_memory_store_as_its_long_term_store(profile, options):
    builder = StateGraph(State)
    builder.add_node("remember", remember)
    builder.add_node("recall", recall)
    builder.add_edge(START, "remember")
    builder.add_edge("remember", "recall")
    builder.add_edge("recall", END)
    store = LangGraphMemoryStore(profile, options=options)
    try:
        graph = builder.compile(store=store)
        out = graph.invoke({"user": "u1", "said": "My manager is Priya Shah.", "recalled": []})
        assert out["recalled"] == ["My manager is Priya Shah."]
        graph.invoke({"user": "u2", "said": "My manager is Tom Becker.", "recalled": []})
    finally:
        store.close()
    # The graph's memories are entries of the agent's store, one category per user, where the dream cycle finds them.
    reopened = open_store(profile, options)
    try:
        live = {e.category: e.content for e in reopened.memories.list_live()}
    finally:
        reopened.close()
    assert live == {"memories/u1": "My manager is Priya Shah.", "memories/u2": "My manager is Tom Becker."}


def test_search_without_a_query_and_list_namespaces_read_the_page_not_the_corpus(lg):
    """The store reads what a page needs: counted in rows brought out of the file, not timed. 3,000 live entries over
    three namespaces; a page of ten after an offset of five reads fifteen rows, a filtered page one chunk,
    list_namespaces the distinct categories; and each answers what reading every entry answers."""
    memories = lg.store.memories
    categories = ["users/u1/facts", "users/u2/facts", "teams/core"]
    memories.put_many(
        [
            MemoryEntry(
                id=f"m-{i:05d}",
                content=f"Fact {i} about project {i % 7}.",
                category=categories[i % 3],
                tags=(),
                importance=0.5,
                created_at=NOW - timedelta(days=1),
                updated_at=NOW - timedelta(seconds=3000 - i),
                last_seen_at=NOW,
            )
            for i in range(3000)
        ]
    )
    lg.put(("users", "u1", "facts"), "pinned", {"content": "The pinned fact.", "kind": "pinned"})  # the newest
    every = memories.list_live()  # what the answers must equal, read the long way
    newest_u1 = sorted(
        (e for e in every if e.category.startswith("users/u1/")), key=lambda e: (-e.updated_at.timestamp(), e.id)
    )

    before = memories.rows_read
    page = lg.search(("users", "u1"), limit=10, offset=5)
    assert memories.rows_read - before == 10
    assert [i.key for i in page] == [e.metadata.get("langgraphKey", e.id) for e in newest_u1[5:15]]

    before = memories.rows_read
    assert [i.key for i in lg.search(("users",), filter={"kind": "pinned"}, limit=1)] == ["pinned"]
    assert memories.rows_read - before <= 50

    before = memories.rows_read
    assert lg.list_namespaces() == [("teams", "core"), ("users", "u1", "facts"), ("users", "u2", "facts")]
    assert lg.list_namespaces(prefix=("users",), max_depth=2) == [("users", "u1"), ("users", "u2")]
    assert memories.rows_read - before == 2 * len(categories)


def test_puts_and_deletes_have_a_history_and_can_be_undone(profile, options, capsys):
    """Every LangGraph write is an agent operation with its change-log row: after a put, an update, a delete and a
    put again, ``dream memory history`` lists created, updated, archived, restored, as the same steps through the
    agent operations do; undoing the delete's cycle brings the key back, and undoing the day's puts retires it."""
    from dream_assets import agent_memory
    from dream_assets.cli import main

    clock = Clock()
    lg = LangGraphMemoryStore(open_store(profile, options), clock=clock)
    ns = ("memories", "alice")
    lg.put(ns, "tea", {"content": "Prefers green tea.", "n": 1})
    lg.put(ns, "tea", {"content": "Prefers green tea, no sugar.", "n": 2})
    lg.delete(ns, "tea")
    eid = item_id(ns, "tea")
    events = agent_memory.history(profile, eid, options=options, now=clock()).events
    assert [e.event for e in events] == ["created", "updated", "archived"]
    assert [e.content for e in events] == ["Prefers green tea.", *["Prefers green tea, no sugar."] * 2]
    assert main(["memory", "history", "--profile", str(profile.root), "--id", eid, "--json"]) == 0
    assert [e["event"] for e in json.loads(capsys.readouterr().out)["events"]] == ["created", "updated", "archived"]

    # Undo the delete: the key is back, with its value.
    undo = ["undo", "--profile", str(profile.root), "--cycle"]
    assert main([*undo, events[-1].cycle_id, "--now", clock().isoformat()]) == 0
    assert lg.get(ns, "tea").value == {"content": "Prefers green tea, no sugar.", "n": 2}
    # A put after a delete restores, and is recorded as such.
    lg.delete(ns, "tea")
    lg.put(ns, "tea", {"content": "Prefers black tea."})
    assert [e.event for e in agent_memory.history(profile, eid, options=options, now=clock()).events][-2:] == [
        "archived",
        "restored",
    ]
    # Undo the day's agent writes: the item the agent created that day is retired (archived, never deleted).
    day = events[0].cycle_id
    assert day.startswith("agent-")
    assert main([*undo, day, "--force", "--now", clock().isoformat()]) == 0
    assert lg.get(ns, "tea") is None and lg.store.memories.get(eid) is not None
    lg.close()


def test_the_store_writes_through_the_library_only():
    """The LangGraph store is an agent-facing interface: its writes are library operations (agent_memory), never
    the store's own write functions or change rows."""
    import ast
    import inspect

    import dream_assets.langgraph_store as module

    tree = ast.parse(inspect.getsource(module))
    writes = {"put", "put_many", "update", "archive", "restore", "set_metadata", "replace", "record", "record_many"}
    called = {
        node.func.attr
        for node in ast.walk(tree)
        if isinstance(node, ast.Call)
        and isinstance(node.func, ast.Attribute)
        and (
            (isinstance(node.func.value, ast.Attribute) and node.func.value.attr in ("memories", "changes", "store"))
            or (isinstance(node.func.value, ast.Name) and node.func.value.id in ("memories", "changes"))
        )
    }
    assert not called & writes, called & writes


def test_a_get_never_follows_a_successor_into_another_namespace(lg):
    """A cross-namespace merge made before the walls were kept (written here by hand): bob's key no longer leads into
    alice's namespace."""
    alice, bob = _users_with_the_same_fact(lg)
    lg.store.memories.supersede(item_id(bob, "drink"), item_id(alice, "drink"), now=NOW + timedelta(days=1))
    assert lg.get(bob, "drink") is None
    assert lg.get(alice, "drink").value["owner"] == "alice"


# ------------------------------------------------------------------------------------ differential: LangGraph's own
USERS = ("alice", "bob", "carol")
SHAPES = [("memories",), ("memories", "work"), ("profile",)]
WORDS = "Meridian survey Oslo flight ledger budget tea harbour river atlas quarry".split()


def _namespace(rng) -> tuple[str, ...]:
    user = rng.choice(USERS)
    shape = rng.choice(SHAPES)
    return (shape[0], user, *shape[1:])


def _value(rng, ns, key, version: int) -> dict:
    # Unique words at the head: recall searches the head of a long text, and no two texts are exact duplicates.
    token = f"tok{ns[1]}{key}v{version}"
    text = f"{token} {' '.join(rng.sample(WORDS, 4))} on 2026-{rng.randint(1, 12):02d}-{rng.randint(1, 28):02d}."
    if rng.random() < 0.15:
        text += " " + " ".join(f"Paragraph {n} of the {rng.choice(WORDS)} appendix." for n in range(700))
    value = {"content": text, "owner": ns[1], "n": rng.randint(0, 9)}
    if rng.random() < 0.3:
        value["meta"] = {"tier": rng.choice(["gold", "free"])}
    return value


def _filter(rng) -> dict | None:
    return rng.choice(
        [
            None,
            {"owner": rng.choice(USERS)},
            {"n": {"$gte": rng.randint(0, 9)}},
            {"n": {"$lt": rng.randint(0, 9)}, "owner": {"$ne": rng.choice(USERS)}},
            {"meta": {"tier": "gold"}},
        ]
    )


def _items(result) -> list:
    if result is None:
        return [None]
    if isinstance(result, Item):
        result = [result]
    return [i if isinstance(i, tuple) else (i.namespace, i.key, json.dumps(i.value, sort_keys=True)) for i in result]


class _Reference:
    """LangGraph's InMemoryStore, with the one difference of record made explicit: it keeps listing a namespace
    after its last key is deleted (it never forgets a namespace); the memory store lists the namespaces of live
    items."""

    def __init__(self) -> None:
        from langgraph.store.memory import InMemoryStore

        self.store = InMemoryStore()

    def batch(self, ops):
        results = self.store.batch(ops)
        for namespace in [ns for ns, items in self.store._data.items() if not items]:
            del self.store._data[namespace]
        return results


def _read_op(rng, known):
    kind = rng.random()
    if kind < 0.3 and known:
        ns, key = rng.choice(known)
        return GetOp(ns, key)
    if kind < 0.7:
        prefix = _namespace(rng)[: rng.randint(0, 2)]
        return SearchOp(prefix, filter=_filter(rng), limit=rng.choice([1, 3, 10, 100]), offset=rng.choice([0, 0, 2]))
    conditions = []
    if rng.random() < 0.5:
        conditions.append(
            MatchCondition("prefix", (rng.choice(SHAPES)[0], rng.choice([*USERS, "*"]))[: rng.randint(1, 2)])
        )
    if rng.random() < 0.4:
        conditions.append(MatchCondition("suffix", (rng.choice(["work", *USERS]),)))
    return ListNamespacesOp(
        match_conditions=tuple(conditions) or None,
        max_depth=rng.choice([None, 1, 2]),
        limit=rng.choice([2, 100]),
        offset=rng.choice([0, 0, 1]),
    )


def _agree(op, ours, theirs, mine_ordered) -> None:
    """Our answer and LangGraph's agree: exactly, but for a search's order (LangGraph's in-memory store pages in
    insertion order, this store the most recently updated first): the same items, and a page is as long as theirs and
    drawn from the same full result."""
    if isinstance(op, SearchOp):
        assert len(ours) == len(theirs), (op, ours, theirs)
        assert set(_items(ours)) <= set(mine_ordered), (op, ours)
        if op.offset == 0 and op.limit >= 100:
            assert set(_items(ours)) == set(_items(theirs)), op
    else:
        assert _items(ours) == _items(theirs), (op, ours, theirs)


def _cross_namespace_model(request):
    """A hostile model: merges every shown entry with one of another namespace (and asks to remove it), and says
    each entry of one namespace supersedes the entries of the others."""
    if request.pass_name == "memory_consolidation":
        entries = request.inputs["entries"]
        saves, delete = [], []
        for a in entries:
            other = next((b for b in entries if b["category"] != a["category"]), None)
            if other is not None:
                saves.append({"content": f"{a['content']} {other['content']}", "sourceIds": [a["id"], other["id"]]})
                delete.append(other["id"])
        return {"toSave": saves, "toDelete": delete}
    if request.pass_name == "contradiction_sweep":
        entries = request.inputs["entries"]
        pairs = [
            {"winnerId": a["id"], "loserId": b["id"], "reason": "newer"}
            for a in entries
            for b in entries
            if a["category"] != b["category"]
        ]
        return {"supersessions": pairs}
    return {}


def _dream(lg, profile, now) -> dict:
    from dream_assets.llm.client import ModelClient
    from dream_assets.llm.scripted import ScriptedBackend
    from dream_assets.options_loader import dream_options
    from dream_assets.passes.context import PassContext
    from dream_assets.passes.contradiction_sweep import run_contradiction_sweep

    opts = dream_options(ConsolidationMinInterval=timedelta(0))
    counts: dict = {}
    for run in (run_memory_consolidation, run_contradiction_sweep):
        client = ModelClient(ScriptedBackend(_cross_namespace_model), profile=profile, options=opts)
        ctx = PassContext(
            profile, opts, now, cycle_id=f"c-{now:%H%M%S}", client_factory=lambda c=client: c, _store=lg.store
        )
        report = run(ctx)
        assert report.status in ("completed", "skipped"), report
        for k in ("merged", "archived", "superseded", "folded", "cross_scope_refused", "cross_scope", "protected"):
            counts[k] = counts.get(k, 0) + int(report.counts.get(k, 0))
    return counts


@pytest.mark.slow
@pytest.mark.parametrize("seed", range(3))
def test_random_operation_sequences_agree_with_langgraphs_in_memory_store(profile, options, seed):
    """Random puts (values over MaxContentChars among them), deletes, gets, searches with filters, offsets and limits,
    list_namespaces with prefix, suffix and max_depth, in batches and async batches, over the namespaces of three
    users, with dream cycles in between whose model tries to merge, remove and supersede across those namespaces:
    every answer agrees with LangGraph's InMemoryStore."""
    import random

    rng = random.Random(seed)
    clock = Clock()
    lg = LangGraphMemoryStore(open_store(profile, options), clock=clock)
    ref = _Reference()
    known: list[tuple[tuple[str, ...], str]] = []
    versions: dict[tuple[tuple[str, ...], str], int] = {}
    refused = 0
    try:
        for step in range(60):
            ops = []
            for _ in range(rng.randint(1, 4)):  # reads first, then writes: both stores see the reads before the writes
                ops.append(_read_op(rng, known))
            for _ in range(rng.randint(0, 3)):
                if known and rng.random() < 0.25:
                    ns, key = rng.choice(known)
                    ops.append(PutOp(ns, key, None))
                else:
                    ns = _namespace(rng)
                    key = rng.choice([f"k{rng.randint(0, 5)}", *(k for n, k in known if n == ns)][:3])
                    versions[(ns, key)] = versions.get((ns, key), 0) + 1
                    ops.append(PutOp(ns, key, _value(rng, ns, key, versions[(ns, key)])))
                    known.append((ns, key))
            # Every item a search could page through, as the reads see the store (before the batch's writes).
            fulls = [
                ref.store.batch([SearchOp(op.namespace_prefix, filter=op.filter, limit=10_000)])[0]
                if isinstance(op, SearchOp)
                else None
                for op in ops
            ]
            theirs = ref.batch(ops)
            ours = asyncio.run(lg.abatch(ops)) if step % 3 == 0 else lg.batch(ops)
            for op, mine, expected, full in zip(ops, ours, theirs, fulls, strict=True):
                if not isinstance(op, PutOp):
                    _agree(op, mine, expected, _items(full) if full is not None else None)
            if step % 20 == 19:
                counts = _dream(lg, profile, clock())
                assert counts["merged"] == counts["superseded"] == counts["folded"] == counts["archived"] == 0, counts
                refused += counts["cross_scope_refused"] + counts["cross_scope"] + counts["protected"]
        # A query finds an item by the words at the head of its text, in its own namespace only.
        for ns, key in dict.fromkeys(known):
            item = ref.store.get(ns, key)
            if item is None:
                assert lg.get(ns, key) is None
                continue
            token = item.value["content"].split()[0]
            hits = lg.search(ns, query=token, limit=5)
            assert (ns, key) in [(h.namespace, h.key) for h in hits]
            assert all(h.value["owner"] == ns[1] for h in lg.search((ns[0], ns[1]), query=token, limit=50))
        assert refused, "the model's merges, removals and supersessions across namespaces reached the host"
    finally:
        lg.close()


def test_a_merge_within_a_namespace_keeps_its_wall_after_every_item_is_merged_away(lg, profile):
    """Alice's two items merge (within her namespace, as the walls allow); the merged entry is no item, yet it stays
    behind her namespace's wall: the next cycle's model cannot merge it with bob's or refile it."""
    alice, bob = ("memories", "alice"), ("memories", "bob")
    lg.put(alice, "a", {"content": "Ana lives in Porto."})
    lg.put(alice, "b", {"content": "Ana lives in Porto, near the river."})
    merge = {
        "toDelete": [],
        "toSave": [
            {"content": "Ana lives in Porto, near the river.", "sourceIds": [item_id(alice, "a"), item_id(alice, "b")]}
        ],
    }
    report, _ = run_scripted(run_memory_consolidation, profile, lg.store, [merge], now=NOW + timedelta(days=1))
    assert report.counts["merged"] == 1, report
    [merged] = lg.store.memories.list_live()
    save_memory(
        lg.store.memories, "Ana lives in Porto, near the river Douro.", category="general", now=NOW + timedelta(days=1)
    )
    lg.put(bob, "c", {"content": "Ana lives in Porto, near the river and the bridge."})
    [general] = [e for e in lg.store.memories.list_live() if e.category == "general"]
    hostile = {
        "toDelete": [],
        "toSave": [
            {"content": "Ana lives in Porto, near the river Douro.", "sourceIds": [merged.id, general.id]},
            {
                "content": "Ana lives in Porto, near the river and the bridge.",
                "sourceIds": [merged.id, item_id(bob, "c")],
            },
            {"content": "Ana lives in Porto, near the river.", "sourceIds": [merged.id], "category": "general"},
        ],
    }
    # Forced, so every live entry is shown, the merged one among them (on its own it is reviewed and withheld).
    from dream_assets.llm.client import ModelClient
    from dream_assets.llm.scripted import ScriptedBackend
    from dream_assets.options_loader import dream_options
    from dream_assets.passes.context import PassContext

    opts = dream_options()
    client = ModelClient(ScriptedBackend([hostile]), profile=profile, options=opts)
    ctx = PassContext(
        profile,
        opts,
        NOW + timedelta(days=2),
        cycle_id="c2",
        client_factory=lambda: client,
        _store=lg.store,
        force="test",
    )
    report = run_memory_consolidation(ctx)
    assert report.counts["cross_scope_refused"] == 3 and report.counts["merged"] == 0, report
    assert [i.key for i in lg.search(alice)] == [merged.id] and lg.get(alice, "a").key == merged.id
