"""Consolidation quality: settled clusters, cooldown re-offers, the exact-duplicate fold, merges equal to a live
entry, and a per-call cap that does not decide the outcome."""

from __future__ import annotations

import json
from datetime import timedelta

import pytest

from dream_assets.llm.client import ModelClient
from dream_assets.llm.offline import OfflineBackend
from dream_assets.options import DreamOptions
from dream_assets.options_loader import dream_options
from dream_assets.passes.context import PassContext
from dream_assets.passes.memory_consolidation import run_memory_consolidation
from dream_assets.passes.memory_consolidation.select import (
    CLUSTER_DECLINED_KEY,
    CLUSTER_SET_KEY,
    cluster_set_id,
    is_reviewed,
)
from dream_assets.save_pipeline import save_memory

from ..conftest import NOW
from .test_memory_consolidation import NO_FLOOR, Run, answer, entry, live_ids, merge

FOLD = NO_FLOOR.replace(ConsolidationExactFoldEnabled=True)


@pytest.fixture
def run(profile, store) -> Run:
    return Run(profile, store)


# ----------------------------------------------------------------------------------------------- settled clusters
def test_a_merged_entry_and_an_old_reviewed_entry_are_offered_together(run, store):
    store.memories.put_many(
        [
            entry("a", "Melanie loves pottery classes."),
            entry("b", "Melanie said again on 12 May 2023 that she loves pottery classes."),
            entry("c", "Melanie mentioned on 3 June 2023 that she loves pottery classes.", reviewed=True),
        ]
    )
    # The scan caps clusters at two here, so only a and b are shown together; c was reviewed on its own before.
    opts = NO_FLOOR.replace(ConsolidationMaxClusterSize=2)
    run(
        answer(
            merge(
                "Melanie loves pottery classes. Melanie said again on 12 May 2023 that she loves pottery classes.",
                "a",
                "b",
            )
        ),
        options=opts,
    )
    merged = next(e for e in store.memories.list_live() if e.id not in {"a", "b", "c"})
    assert is_reviewed(merged) and is_reviewed(store.memories.get("c"))
    second = run(answer(), options=opts, now=NOW + timedelta(hours=1))
    assert len(run.requests) == 1 and [set(c) for c in run.requests[0].inputs["clusters"]] == [{merged.id, "c"}]
    assert second.counts["settled_clusters"] == 0
    # Left apart: now that exact set is settled, and not asked again before its cooldown.
    third = run(answer(), options=opts, now=NOW + timedelta(hours=2))
    assert run.requests == [] and third.counts["settled_clusters"] == 1


def test_a_merge_does_not_reopen_the_cluster_its_neighbour_was_shown_in(run, store):
    store.memories.put_many(
        [
            entry("a", "Gina opened her dance studio in the old mill."),
            entry("b", "Gina opened her own dance studio in the old mill."),
            entry("x", "Gina teaches at her dance studio in the old mill."),
        ]
    )
    run(answer(merge("Gina opened her own dance studio in the old mill.", "a", "b")))
    [request] = run.requests
    assert [set(c) for c in request.inputs["clusters"]] == [{"a", "b", "x"}]
    merged = next(e for e in store.memories.list_live() if e.id != "x")
    store.memories.put_many([entry("new", "Kestrel ships on Fridays.", created_days=0)])
    # The merged entry and x now form a cluster no call flagged, but the call that wrote the merge showed x next to
    # its sources and left x apart: only what the agent saved since is offered.
    second = run(answer(), now=NOW + timedelta(hours=1))
    [request] = run.requests
    assert "id=new" in request.prompt and "id=x" not in request.prompt
    assert merged.id not in [e["id"] for e in request.inputs["entries"]] and merged.id not in request.prompt
    assert second.counts["eligible"] == 1 and second.counts["settled_clusters"] == 1
    # Like a cluster shown and left apart, it is offered again (merge-only) once the cooldown has passed and the
    # agent saved something since.
    store.memories.put_many([entry("later", "Kestrel's release notes go out on Mondays.", created_days=0)])
    run(answer(), now=NOW + timedelta(days=7, hours=1))
    [request] = run.requests
    assert [set(c) for c in request.inputs["reoffered"]] == [{merged.id, "x"}]


def test_the_second_prompt_on_the_demo_holds_only_what_the_agent_saved_since(tmp_path):
    from dream_assets.demo import build_demo_profile
    from dream_assets.profile import AgentProfile
    from dream_assets.store import open_store

    # n = 1,000 repeats the demo's templates, so the first review merges dozens of near-duplicates and reshapes the
    # clusters of their neighbours; the second run must still show only the ten entries saved since.
    profile = AgentProfile(tmp_path / "demo").ensure()
    options = dream_options(ConsolidationMinInterval=timedelta(0), LlmBackend="offline")
    build_demo_profile(profile, NOW, options=options, n_memories=1000, with_logs=False)
    first = run_memory_consolidation(
        PassContext(profile, options.replace(ConsolidationMaxEntriesPerCall=2000), NOW, cycle_id="d1")
    )
    assert first.status == "completed" and first.counts["merged"] >= 10
    later = NOW + timedelta(hours=7)
    saved = [
        entry(f"new-{i}", text, created_days=-0.25, seen_days=-0.25)
        for i, text in enumerate(
            ["Rafael Costa joined the Pioneer team as SRE.", "The Uppsala office closes early on Fridays in July."]
        )
    ]
    open_store(profile, options).memories.put_many(saved)
    second = run_memory_consolidation(PassContext(profile, options, later, cycle_id="d2"))
    assert second.status == "completed"
    assert (second.counts["eligible"], second.counts["clusters"]) == (len(saved), 0)


def test_a_cluster_left_apart_is_reoffered_after_the_cooldown_merge_only_and_its_cooldown_doubles(run, store):
    store.memories.put_many(
        [
            entry("p", "Gina opened her dance studio in the old mill."),
            entry("q", "Gina opened her own dance studio in the old mill building."),
        ]
    )
    run(answer())
    set_id = cluster_set_id(["p", "q"])
    assert all(e.metadata[CLUSTER_SET_KEY] == set_id for e in store.memories.list_live())
    store.memories.put_many([entry("n1", "Kestrel ships on Fridays.", created_days=0)])
    run(answer(), now=NOW + timedelta(days=6))
    assert [e["id"] for e in run.requests[0].inputs["entries"]] == ["n1"]  # inside the 7-day cooldown

    store.memories.put_many([entry("n2", "The Uppsala office closes early in July.", created_days=0)])
    again = run(answer(delete=("p",)), now=NOW + timedelta(days=7, minutes=1))
    [request] = run.requests
    assert "left separate before" in request.prompt and request.inputs["reoffered"] == [["p", "q"]]
    assert again.counts["reoffered_removals_ignored"] == 1 and live_ids(store) == {"p", "q", "n1", "n2"}
    assert again.counts["declined"] == 1  # merge-only: the removal was ignored
    assert {store.memories.get(i).metadata[CLUSTER_DECLINED_KEY] for i in ("p", "q")} == {"2"}

    store.memories.put_many([entry("n3", "Rafael joined the Pioneer team.", created_days=0)])
    run(answer(), now=NOW + timedelta(days=7 + 13))
    assert run.requests[0].inputs["reoffered"] == []  # the second cooldown is 14 days
    store.memories.put_many([entry("n4", "The standup moved to room Babbage.", created_days=0)])
    run(
        answer(merge("Gina opened her own dance studio in the old mill building.", "p", "q")),
        now=NOW + timedelta(days=7 + 15),
    )
    assert len(run.requests) == 1 and len(live_ids(store) - {"n1", "n2", "n3", "n4"}) == 1


def test_an_idle_corpus_is_asked_nothing_again_past_the_cooldown_until_it_changes(run, store):
    store.memories.put_many(
        [
            entry("p", "Gina opened her dance studio in the old mill."),
            entry("q", "Gina opened her own dance studio in the old mill building."),
        ]
    )
    run(answer())
    assert len(run.requests) == 1
    # Months with nothing saved: the cluster left apart is the question already answered, asked of the same bytes.
    for days in (8, 30, 120):
        idle = run(answer(), now=NOW + timedelta(days=days))
        assert run.requests == [] and idle.counts["settled_clusters"] == 1 and idle.status == "completed"
    # One save anywhere and the corpus has moved: the cluster past its cooldown is offered again (merge-only).
    store.memories.put_many([entry("n1", "Kestrel ships on Fridays.", created_days=0)])
    run(answer(), now=NOW + timedelta(days=121))
    [request] = run.requests
    assert request.inputs["reoffered"] == [["p", "q"]]


def _offline_pass(profile, store, now, options=NO_FLOOR):
    client = ModelClient(OfflineBackend(), profile=profile, options=options)
    ctx = PassContext(
        profile,
        options,
        now,
        cycle_id=f"c{now:%j%H%M}",
        client_factory=lambda: client,
        _store=store,
    )
    return run_memory_consolidation(ctx)


def _gina(store):
    store.memories.put_many(
        [
            entry("a", "Gina opened her own dance studio in the old mill building.", category="people/gina"),
            entry("b", "Gina closed her own dance studio in the old mill building.", category="people/gina"),
        ]
    )


def test_a_cluster_settled_under_older_offline_rules_is_offered_again_and_merged_by_the_new_ones(
    profile, store, monkeypatch
):
    from dream_assets.passes.memory_consolidation import offline

    _gina(store)
    first = _offline_pass(profile, store, NOW)
    assert first.counts["left_apart"] == 1 and live_ids(store) == {"a", "b"}  # another change: two facts
    settled = _offline_pass(profile, store, NOW + timedelta(hours=1))
    assert settled.counts["settled_clusters"] == 1 and settled.counts["clusters"] == 0

    # Rules that merge the pair, released without a new version: the cluster stays settled (nothing says they
    # changed); with the version bumped it is offered again, long before its cooldown, and merged.
    monkeypatch.setattr(offline, "distinct_moments", lambda a, b: False)
    unchanged = _offline_pass(profile, store, NOW + timedelta(hours=2))
    assert unchanged.counts["settled_clusters"] == 1 and live_ids(store) == {"a", "b"}
    monkeypatch.setattr(offline, "OFFLINE_RULES_VERSION", offline.OFFLINE_RULES_VERSION + "-next")
    healed = _offline_pass(profile, store, NOW + timedelta(hours=3))
    assert healed.counts["reoffered"] == 1 and healed.counts["merged"] == 1
    [merged] = store.memories.list_live()
    assert merged.content == (
        "Gina opened her own dance studio in the old mill building.\n"
        "Gina closed her own dance studio in the old mill building."
    )


def test_a_cluster_settled_under_another_directive_is_offered_again(profile, store):
    _gina(store)
    _offline_pass(profile, store, NOW)
    assert _offline_pass(profile, store, NOW + timedelta(hours=1)).counts["settled_clusters"] == 1
    profile.directive_override_path(NO_FLOOR.DirectivePath).write_text(
        "Merge what is one fact; keep two facts apart.\n", encoding="utf-8"
    )
    again = _offline_pass(profile, store, NOW + timedelta(hours=2))
    assert again.counts["reoffered"] == 1 and again.counts["settled_clusters"] == 0
    assert live_ids(store) == {"a", "b"}  # the offline rules still leave them apart: settled under this directive
    assert _offline_pass(profile, store, NOW + timedelta(hours=3)).counts["settled_clusters"] == 1


# ----------------------------------------------------------------------------------------------- exact fold
def test_exact_duplicates_fold_into_the_oldest_without_a_model_call(run, store):
    store.memories.put_many(
        [
            entry(
                "old",
                "The user's badge number is 4471.",
                created_days=40,
                seen_days=20,
                reinforced=2,
                tags=("work",),
                metadata={"subjectTime": "2026-01"},
            ),
            entry(
                "new",
                "the user's badge number is 4471",
                created_days=5,
                seen_days=2,
                reinforced=3,
                tags=("badge",),
                importance=0.7,
                metadata={"subjectTime": "2026-01-15"},
            ),
            entry("other", "The user's badge number is 4471.", category="general", created_days=3, reviewed=True),
            entry("x", "Kestrel ships on Fridays.", reviewed=True),
        ]
    )
    report = run(answer(), options=FOLD)
    assert report.counts["folded"] == 1 and run.requests[0].inputs["entries"][0]["id"] == "old"
    kept = store.memories.get("old")
    assert kept.content == "The user's badge number is 4471." and not kept.is_archived
    assert kept.created_at == NOW - timedelta(days=40) and kept.last_seen_at == NOW - timedelta(days=2)
    assert kept.reinforcement_count == 5 and kept.importance == 0.7 and set(kept.tags) == {"work", "badge"}
    assert kept.metadata["subjectTime"] == "2026-01-15" and json.loads(kept.metadata["mergedFrom"]) == ["new"]
    assert store.memories.get("new").is_archived and not store.memories.get("other").is_archived  # other category
    rows = store.changes.list("c1")
    assert {(r.kind, r.target_id) for r in rows} >= {("updated", "old"), ("archived", "new")}


def test_a_fold_that_leaves_one_live_entry_is_a_completed_pass_not_a_skip(run, store):
    store.memories.put_many(
        [
            entry("old", "The gate code is 5521.", created_days=9),
            entry("new", "the gate code is 5521", created_days=1),
        ]
    )
    report = run(answer(), options=FOLD)
    assert report.status == "completed" and report.counts["folded"] == 1 and report.counts["live"] == 1
    assert run.requests == [] and live_ids(store) == {"old"}
    assert store.changes.undo_cycle("c1", now=NOW + timedelta(minutes=1)).ok
    assert live_ids(store) == {"old", "new"}


def test_the_fold_keeps_a_respelled_name_and_another_subject_time_apart(run, store):
    store.memories.put_many(
        [
            entry("a", "The dotfiles live on Github.", created_days=9),
            entry("b", "The dotfiles live on GitHub.", created_days=8),
            entry("c", "Standup moved to the big room.", metadata={"subjectTime": "2026-03-01"}, created_days=7),
            entry("d", "Standup moved to the big room.", metadata={"subjectTime": "2026-04-01"}, created_days=6),
        ]
    )
    report = run(answer(), options=FOLD)
    assert report.counts.get("folded", 0) == 0 and live_ids(store) == {"a", "b", "c", "d"}


def test_the_fold_can_be_turned_off(run, store):
    store.memories.put_many([entry("a", "Kestrel ships on Fridays."), entry("b", "kestrel ships on fridays")])
    report = run(answer())  # NO_FLOOR: fold off
    assert report.counts.get("folded", 0) == 0 and run.requests[0].inputs["clusters"] == [["a", "b"]]


# ----------------------------------------------------------------------------------------------- merge twins
def test_a_merge_equal_to_a_live_entry_reinforces_it_instead_of_writing_a_twin(run, store):
    store.memories.put_many(
        [
            entry("keep", "Jon works at the Fenwick bank.", created_days=50, reinforced=4, reviewed=True),
            entry("s1", "Jon works at the Fenwick bank now.", created_days=10),
            entry("s2", "Jon said again that he works at the Fenwick bank.", created_days=5),
        ]
    )
    before = live_ids(store)
    report = run(answer(merge("Jon works at the Fenwick bank.", "s1", "s2")))
    assert live_ids(store) == {"keep"} and before - live_ids(store) == {"s1", "s2"}
    kept = store.memories.get("keep")
    assert kept.reinforcement_count == 6 and json.loads(kept.metadata["mergedFrom"]) == ["s1", "s2"]
    assert report.counts["reinforced_existing"] == 1 and report.counts["merged"] == 1
    assert kept.updated_at == NOW - timedelta(days=1)  # its text did not change


def test_a_merge_says_a_restated_sentence_once_and_keeps_one_that_differs(run, store):
    store.memories.put_many(
        [
            entry("a", "The user prefers dark mode in VS Code."),
            entry("b", "User prefers dark mode in VS Code. Sam paid Evan."),
        ]
    )
    run(
        answer(
            merge("The user prefers dark mode in VS Code. User prefers dark mode in VS Code. Sam paid Evan.", "a", "b")
        )
    )
    [merged] = [e for e in store.memories.list_live()]
    assert merged.content == "The user prefers dark mode in VS Code. Sam paid Evan."


def test_a_fold_keeps_updated_at_every_tag_spelling_and_the_categories_apart(run, store):
    store.memories.put_many(
        [
            entry("old", "Kestrel deploys on Fridays.", category="projects/kestrel", tags=("Ops",), seen_days=9),
            entry(
                "new",
                "kestrel deploys on fridays",
                category="projects/kestrel",
                tags=("ops",),
                created_days=5,
                seen_days=2,
            ),
            entry("cased", "Kestrel deploys on Fridays.", category="Projects/kestrel", seen_days=3),
        ]
    )
    report = run(answer(), options=FOLD)
    assert report.counts["folded"] == 1 and live_ids(store) == {"old", "cased"}
    kept = store.memories.get("old")
    assert kept.tags == ("Ops", "ops") and kept.updated_at == NOW - timedelta(days=9)
    assert kept.last_seen_at == NOW - timedelta(days=2) and kept.reinforcement_count == 2


@pytest.mark.parametrize(
    ("category", "tags"),
    [("feedback/from-user", ("correction",)), ("capability-claims", ()), ("facts", ("user-correction",))],
)
def test_repeated_corrections_feedback_and_capability_claims_are_never_folded(run, store, category, tags):
    text = "The agent cannot read the user's calendar."
    store.memories.put_many(
        [
            entry("first", text, category=category, tags=tags, created_days=9),
            entry("again", text, category=category, tags=tags, created_days=2),
            entry("twin", text, category=category, tags=tags, created_days=1, reviewed=True),
        ]
    )
    report = run(answer(merge(text, "first", "again")), options=FOLD)
    assert report.counts.get("folded", 0) == 0 and report.counts.get("reinforced_existing", 0) == 0
    assert "twin" in live_ids(store) and store.memories.get("twin").reinforcement_count == 1


# ----------------------------------------------------------------------------------------------- save-time exact
def test_save_time_exact_duplicate_reinforces_the_oldest_without_moving_updated_at(store):
    first = save_memory(
        store.memories, "Melanie loves pottery.", category="people/melanie", now=NOW - timedelta(days=9)
    )
    save_memory(
        store.memories, "Melanie loves pottery!", category="people/melanie", now=NOW - timedelta(days=8), dedupe=False
    )
    again = save_memory(store.memories, "melanie   loves pottery", category="people/melanie", tags=("hobby",), now=NOW)
    assert again.action == "reinforced" and again.entry.id == first.entry.id
    assert again.entry.updated_at == NOW - timedelta(days=9) and again.entry.last_seen_at == NOW
    assert again.entry.reinforcement_count == 2 and again.entry.tags == ("hobby",)


def test_a_framed_re_observation_is_a_save_time_candidate_but_saved_apart(store):
    save_memory(
        store.memories, "Melanie loves pottery classes.", category="people/melanie", now=NOW - timedelta(days=9)
    )
    later = save_memory(
        store.memories,
        "On 25 May 2023, Melanie mentioned again that she loves pottery classes.",
        category="people/melanie",
        now=NOW,
    )
    assert later.action == "created" and later.matched_id is not None  # found, and kept: it carries a date
    assert len(store.memories.duplicate_clusters().clusters) == 1  # and clustering agrees


# ----------------------------------------------------------------------------------------------- the cap
def _corpus() -> list:
    facts = []
    for i, (who, thing) in enumerate(
        [
            ("Jon", "jazz piano"),
            ("Gina", "salsa dancing"),
            ("Mel", "pottery"),
            ("Ava", "rock climbing"),
            ("Tom", "oil painting"),
            ("Zoe", "chess problems"),
        ]
    ):
        cat = f"people/{who.lower()}"
        facts += [
            entry(f"f{i}a", f"{who} loves {thing} lessons.", category=cat, created_days=60 - i),
            entry(
                f"f{i}b",
                f"{who} said again on 12 May 2023 that {who} loves {thing} lessons.",
                category=cat,
                created_days=30 - i,
            ),
            entry(
                f"f{i}c",
                f"{who} loves {thing} lessons. This came up again in a chat on 9 July 2023.",
                category=cat,
                created_days=20 - i,
            ),
            entry(
                f"f{i}d",
                f"On {i + 1} March 2023, {who} went to a {thing} show in Leeds.",
                category=cat,
                created_days=15 - i,
            ),
            entry(
                f"f{i}e",
                f"On {i + 1} August 2023, {who} went to a {thing} show in Leeds.",
                category=cat,
                created_days=10 - i,
            ),
        ]
    return facts


def _converge(profile, store, options: DreamOptions, limit: int) -> tuple[list[str], int]:
    now = NOW
    for cycle in range(1, limit + 1):
        before = store.memories.fingerprint()
        client = ModelClient(OfflineBackend(), profile=profile, options=options)
        run_memory_consolidation(
            PassContext(
                profile,
                options,
                now,
                cycle_id=f"k{cycle}",
                client_factory=lambda c=client: c,
                _store=store,
            )
        )
        now += timedelta(minutes=1)
        if store.memories.fingerprint() == before and cycle > 1:
            return sorted(e.content for e in store.memories.list_live()), cycle
    raise AssertionError(f"no fixed point within {limit} cycles")


def test_the_per_call_cap_does_not_decide_the_outcome(tmp_path):
    from dream_assets.profile import AgentProfile
    from dream_assets.store import open_store

    results = {}
    for cap in (500, 4):
        profile = AgentProfile(tmp_path / f"cap{cap}").ensure()
        options = FOLD.replace(ConsolidationMaxEntriesPerCall=cap)
        store = open_store(profile, options)
        store.memories.put_many(_corpus())
        results[cap] = _converge(profile, store, options, limit=40)
        contents = results[cap][0]
        # Each durable fact ends as one entry; the two shows of each person stay two entries.
        assert len(contents) == 18
        assert sum("Leeds" in c and "March" in c and "August" in c for c in contents) == 0
    assert results[4][0] == results[500][0]
    assert results[4][1] <= 30 / 4 + 8  # bounded: about one cycle per cap-full of entries, plus the merges' rounds


# ----------------------------------------------------------------------------------------------- embeddings
def test_with_an_embedding_model_the_scan_clusters_by_cosine_and_an_idle_agent_embeds_nothing(profile, store):
    from dream_assets_tests.openai_server import OpenAITestServer, server_error

    store.memories.put_many([entry("a", "Kestrel ships on Fridays."), entry("b", "Ingrid runs the Bergen office.")])
    with OpenAITestServer() as server:
        opts = NO_FLOOR.replace(
            EmbeddingModel="test-embed",
            EmbeddingBaseUrl=server.base_url,
            EmbeddingSimilarityThreshold=0.99,
            LlmMaxRetries=0,
        )
        run = Run(profile, store, opts)
        first = run(answer())
        assert first.counts["embedded"] == 2 and len(server.embedding_requests) == 1
        assert first.usage.get("calls", 0) >= 1  # the embeddings call is in the pass's usage
        server.requests.clear()
        idle = run(now=NOW + timedelta(hours=1))
        assert idle.counts["embedded"] == 0 and server.requests == [] and run.requests == []

        store.memories.update("a", now=NOW, content="Kestrel ships on Fridays and Mondays.")
        server.script(server_error(500))
        degraded = run(answer(), now=NOW + timedelta(hours=2))
        # A failing endpoint does not switch the scan off: the clusters come from the lexical measure, said in a
        # warning, and the two unrelated entries stay apart, so only the changed one is offered.
        assert degraded.status == "completed"
        assert "the lexical measure was used" in "\n".join(degraded.lines)
        assert [e["id"] for e in run.requests[0].inputs["entries"]] == ["a"]
