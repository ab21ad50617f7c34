"""Pass 1 — memory consolidation against hostile and careless model answers: invalid text is rejected item by item,
stand-alone removals face the removal guard, and merges that invent a specific are rejected (then repaired)."""

from __future__ import annotations

import json
from datetime import timedelta
from pathlib import Path

import pytest

from dream_assets.passes.memory_consolidation import noise_reason
from dream_assets.passes.memory_consolidation.merge import REJECTED_CLUSTER_KEY
from dream_assets.passes.memory_consolidation.select import is_reviewed
from dream_assets.text.coverage import (
    BASELINE_VOCABULARY,
    CoverageSource,
    check_merge_coverage,
    dropped_content,
    specifics_of,
)
from dream_assets.text.tokens import content_tokens

from ..conftest import NOW
from .test_memory_consolidation import NO_FLOOR, Run, answer, created, entry, live_ids, merge


@pytest.fixture
def run(profile, store) -> Run:
    return Run(profile, store)


def kinds(report) -> list[tuple[str, str]]:
    return [(c.kind, c.target) for c in report.changes]


# ----------------------------------------------------------------------------------------------- hostile text
@pytest.mark.parametrize(
    "bad_save,why",
    [
        ({"content": "Kestrel ships on Fridays.\ud800", "sourceIds": ["a", "b"]}, "lone surrogate (U+D800)"),
        ({"content": "Kestrel ships\x00 on Fridays.", "sourceIds": ["a", "b"]}, "control character (NUL)"),
        (
            {"content": "Kestrel ships on Fridays.\x1b[31m", "sourceIds": ["a", "b"]},
            "control character (U+001B)",
        ),
        (
            {
                "content": "Kestrel ships on Fridays.",
                "category": "projects\x00/kestrel",
                "sourceIds": ["a", "b"],
            },
            "category contains a control character",
        ),
        (
            {
                "content": "Kestrel ships on Fridays.",
                "category": "projects//kestrel",
                "sourceIds": ["a", "b"],
            },
            "empty '/' segment",
        ),
        (
            {"content": "Kestrel ships on Fridays.", "category": "x" * 201, "sourceIds": ["a", "b"]},
            "over the limit of 200",
        ),
        (
            {"content": "Kestrel ships on Fridays.", "tags": ["release\nnotes"], "sourceIds": ["a", "b"]},
            "tags[0] contains a control character",
        ),
        (
            {"content": "Kestrel ships on Fridays.", "tags": ["t\u202eag"], "sourceIds": ["a", "b"]},
            "invisible formatting character (U+202E)",
        ),
        (
            {
                "content": "Kestrel ships on Fridays.",
                "tags": [f"t{i}" for i in range(51)],
                "sourceIds": ["a", "b"],
            },
            "51 tags",
        ),
        ({"content": "Kestrel ships on Fridays. " * 700, "sourceIds": ["a", "b"]}, "over the limit of 16000"),
    ],
)
def test_an_invalid_item_is_rejected_with_its_reason_and_the_rest_applies(run, store, bad_save, why):
    store.memories.put_many(
        [
            entry("a", "Kestrel ships on Fridays."),
            entry("b", "Kestrel ships on Fridays!"),
            entry("w", "The user's manager is Priya Raman."),
            entry("w2", "Manager: Priya Raman."),
        ]
    )
    report = run(answer(bad_save, merge("The user's manager is Priya Raman.", "w", "w2"), delete=("a",)))
    assert report.status == "completed"
    assert report.counts["invalid_items"] == 1 and report.counts["merged"] == 1
    (bad,) = [c for c in report.changes if c.kind == "invalid-item"]
    assert bad.target == "toSave[0]" and why in bad.detail and "its sources [a, b] are kept" in bad.detail
    # The rejected item's sources stay live and are asked about again; the valid merge was applied in full.
    assert {"a", "b"} <= live_ids(store) and not is_reviewed(store.memories.get("a"))
    assert store.memories.get("w").is_archived and store.memories.get("w2").is_archived
    (merged,) = created(store, {"a", "b", "w", "w2"})
    assert merged.content == "The user's manager is Priya Raman."
    store.memories.fingerprint()  # nothing unencodable reached the store
    assert all("\ud800" not in line for line in report.lines)


def test_a_lone_surrogate_in_a_new_entry_or_repair_never_reaches_the_store(run, store):
    store.memories.put_many(
        [
            entry("a", "The manager is Priya Raman."),
            entry("b", "Manager: Priya Raman."),
            entry("k", "The badge number is 4471."),
        ]
    )
    report = run(
        answer(
            merge("Avoid \ud83d double booking.", category="anti-patterns/calendar"),
            merge("The manager is Raman.", "a", "b"),
        ),
        {"content": "The manager is Priya Raman.\udfff"},
    )
    assert report.status == "completed"
    assert report.counts["invalid_items"] == 2 and report.counts["rejected"] == 1 and report.counts["merged"] == 0
    assert {c.target for c in report.changes if c.kind == "invalid-item"} == {"toSave[0]", "repair of [a, b]"}
    assert live_ids(store) == {"a", "b", "k"}
    assert REJECTED_CLUSTER_KEY in store.memories.get("a").metadata
    store.memories.fingerprint()


def test_unusable_repeated_and_unshown_ids_are_ignored_with_a_count(run, store):
    store.memories.put_many(
        [
            entry("a", "The user said ok.", importance=0.2),
            entry("k", "The badge number is 4471."),
            entry("c", "Kestrel ships on Fridays."),
        ]
    )
    raw = (
        '{"toDelete": [17, {"id": "a"}, null, true, "a", "a", "made-up", "\\ud800", "  "],'
        ' "toSave": [{"content": "Kestrel ships on Fridays.", "category": "projects/kestrel",'
        ' "sourceIds": ["c", ["c"], "c"]}]}'
    )
    report = run(raw)
    assert report.status == "completed"
    assert report.counts["invalid_ids"] == 6  # object, null, true, lone surrogate, blank, list
    assert report.counts["duplicate_ids"] == 2  # "a" twice in toDelete, "c" twice in sourceIds
    assert report.counts["ignored_ids"] == 2  # 17 (a number is taken as text) and "made-up": never shown
    assert store.memories.get("a").is_archived and "k" in live_ids(store)  # the usable id was applied
    assert report.counts["merged"] == 1 and store.memories.get("c").is_archived  # recategorised


# ----------------------------------------------------------------------------------------------- removal guard
CORPUS = [
    entry("t1", "The Q3 review with Dana Whitfield is on 2026-09-14 in Austin."),
    entry("t2", "Q3 review: Dana Whitfield, 2026-09-14, Austin office."),  # superseded by t1
    entry("p1", "The user's badge number is 4471."),
    entry("p2", "Kestrel ships on Fridays."),
    entry("p3", "The user prefers tea over coffee."),  # no specific, default value
    entry("n1", "The user said ok.", importance=0.2),  # noise
    entry("n2", "Thanks, that helps.", importance=0.3),  # noise
    entry("d1", "Heron load tests run against staging every Monday."),
    entry("d2", "Heron load tests run against staging every Monday."),  # exact duplicate of d1
    entry("m1", "Mia has a violin lesson every Thursday at 17:00."),
    entry("v1", "The VPN gateway for Lumen is vpn2.lumen.example.", category="infra"),
]


def facts_lost(original, store) -> list[str]:
    """Original entries no single live entry carries: every specific of it (the merge coverage check) and what each
    of its sentences says (the content check) or, for an entry without any specific, every content word. Noise (a
    text of acknowledgements only, a throw-away category or tag: ``noise_reason``) is not a fact."""
    live = store.memories.list_live()
    lost = []
    for e in original:
        src = [CoverageSource(e.content, e.category)]
        if specifics_of(e.content, e.category):
            carried = any(
                check_merge_coverage(src, other.content, BASELINE_VOCABULARY).ok
                and not dropped_content(src, other.content, min_words=1)
                for other in live
            )
        else:
            carried = noise_reason(e) is not None or any(
                content_tokens(e.content) <= content_tokens(o.content) for o in live
            )
        if not carried:
            lost.append(e.id)
    return lost


def test_a_model_that_deletes_everything_it_is_shown_loses_no_fact(run, store):
    store.memories.put_many(CORPUS)

    def delete_everything(request):
        return answer(delete=tuple(e["id"] for e in request.inputs["entries"]))

    report = run(delete_everything)
    assert report.status == "completed"
    assert facts_lost(CORPUS, store) == []
    live = live_ids(store)
    # Noise and one of each fully superseded pair go; every entry holding a fact of its own stays.
    assert {"n1", "n2"}.isdisjoint(live)
    assert len(live & {"t1", "t2"}) == 1 and len(live & {"d1", "d2"}) == 1
    assert {"p1", "p2", "p3", "m1", "v1"} <= live
    assert report.counts["ephemeral"] == 4 and report.counts["guarded"] == 7 and report.counts["protected"] == 7
    assert report.summary.endswith("ephemeral 4, protected 7 (7 by the removal guard)")
    why = {c.target: c.detail for c in report.changes if c.kind == "protected"}
    assert why["p1"] == 'kept by the removal guard: no other live entry carries "4471"'
    assert why["p3"] == "kept by the removal guard: it states a fact and no other live entry carries its words"
    archived = {c.target: c.detail for c in report.changes if c.kind == "archived"}
    assert archived["n1"].startswith("ephemeral: noise")
    assert any(
        d.startswith("ephemeral: superseded — every specific of it is in live entry t") for d in archived.values()
    )
    # Every removal is undoable with the cycle.
    assert store.changes.undo_cycle("c1", now=NOW + timedelta(minutes=1)).ok
    assert live_ids(store) == {e.id for e in CORPUS}


def test_an_entry_carried_only_by_another_removal_is_kept(run, store):
    store.memories.put_many(
        [
            entry("d1", "Heron load tests run against staging every Monday."),
            entry("d2", "Heron load tests run against staging every Monday."),
            entry("k", "The badge number is 4471."),
        ]
    )
    report = run(answer(delete=("d1", "d2")))
    assert live_ids(store) == {"d2", "k"}  # d1 went because d2 carries it; d2 then carries it alone
    protected = {c.target: c.detail for c in report.changes if c.kind == "protected"}
    assert "carries everything of d1" in protected["d2"]


def test_a_guarded_entry_is_removed_when_the_guard_is_off(run, store):
    store.memories.put_many([entry("p1", "The user's badge number is 4471."), entry("k", "Kestrel ships on Fridays.")])
    kept = run(answer(delete=("p1",)))
    assert "p1" in live_ids(store) and kept.counts["guarded"] == 1 and kept.counts["ephemeral"] == 0
    store.memories.update("p1", now=NOW, content="The user's badge number is 4472.")  # re-open it for review
    off = NO_FLOOR.replace(ConsolidationRemovalGuardEnabled=False)
    report = run(answer(delete=("p1",)), options=off, now=NOW + timedelta(hours=1), cycle_id="c2")
    assert "p1" not in live_ids(store) and report.counts["ephemeral"] == 1 and report.counts["guarded"] == 0
    assert "removal guard off" in next(c.detail for c in report.changes if c.kind == "archived")


def test_a_merge_source_listed_in_to_delete_goes_with_its_merge_not_the_guard(run, store):
    store.memories.put_many(
        [
            entry("a", "Kestrel ships on Fridays."),
            entry("b", "Kestrel ships on Fridays!"),
            entry("k", "The badge number is 4471."),
        ]
    )
    report = run(answer(merge("Kestrel ships on Fridays.", "a", "b"), delete=("a", "b")))
    assert report.counts["merged"] == 1 and report.counts["archived"] == 2 and report.counts["guarded"] == 0


# ----------------------------------------------------------------------------------------------- invented specifics
SLA = [
    entry("a", "Priority 1 tickets get a first reply within 30-60 seconds."),
    entry("b", "P1 tickets: first reply in 30-60 seconds, says the Atlas runbook."),
]


def test_a_merge_that_invents_a_figure_is_rejected_and_its_sources_kept(run, store):
    store.memories.put_many(SLA)
    merged = "Priority 1 (P1) tickets get a first reply within 30-60 seconds (Atlas runbook); escalate after 30-59."
    report = run(answer(merge(merged, "a", "b")), options=NO_FLOOR.replace(MergeRepairEnabled=False))
    assert live_ids(store) == {"a", "b"} and report.counts["rejected"] == 1 and report.counts["rejected_invented"] == 1
    (row,) = [c for c in report.changes if c.kind == "merge-rejected"]
    assert 'invented "30-59"' in row.detail and "missing" not in row.detail


def test_a_repair_is_told_what_was_invented_and_removing_it_saves_the_merge(run, store):
    store.memories.put_many(SLA)
    report = run(
        answer(merge("P1 (Priority 1) tickets: first reply within 30-90 seconds, per the Atlas runbook.", "a", "b")),
        {"content": "P1 (Priority 1) tickets: first reply within 30-60 seconds, per the Atlas runbook."},
    )
    repair = run.requests[1]
    assert repair.inputs["invented"] == ["30-90"] and repair.inputs["missing"] == ["30-60"]
    assert "## Specifics the merged text invented" in repair.prompt and '- "30-90"' in repair.prompt
    (merged,) = created(store, {"a", "b"})
    assert "30-60" in merged.content and "30-90" not in merged.content
    assert report.counts["repaired"] == 1 and report.counts["rejected"] == 0
    assert any("removed 1 invented specific(s)" in line for line in report.lines)


def test_a_repair_that_still_invents_is_rejected(run, store):
    store.memories.put_many(SLA)
    report = run(
        answer(
            merge(
                "P1 (Priority 1) tickets: first reply within 30-60 seconds, per the Atlas runbook, since 2024.",
                "a",
                "b",
            )
        ),
        {"content": "P1 (Priority 1) tickets: first reply within 30-60 seconds, per the Atlas runbook, since 2025."},
    )
    assert live_ids(store) == {"a", "b"} and report.counts["rejected"] == 1 and report.counts["repaired"] == 0
    (row,) = [c for c in report.changes if c.kind == "merge-rejected"]
    assert 'invented "2025"' in row.detail


def test_a_recategorised_rewrite_with_a_wrong_year_is_rejected(run, store):
    store.memories.put_many(
        [entry("a", "The Lumen launch is on August 19, 2026."), entry("k", "The badge number is 4471.")]
    )
    report = run(
        answer(merge("The Lumen launch is on August 19, 2025.", "a", category="projects/lumen")),
        options=NO_FLOOR.replace(MergeRepairEnabled=False),
    )
    assert live_ids(store) == {"a", "k"} and store.memories.get("a").category == "facts"
    assert report.counts["rejected"] == 1 and report.counts["merged"] == 0


# ----------------------------------------------------------------------------------------------- dropped content
ADOPTION = [
    entry("a", "Caroline plans to adopt a child. The adoption process takes patience and paperwork."),
    entry("b", "Caroline plans to adopt a child!"),
]
PAPERWORK = "The adoption process takes patience and paperwork."


def test_a_merge_that_keeps_every_sentence_reordered_and_recased_needs_no_repair(run, store):
    store.memories.put_many(ADOPTION)
    report = run(
        answer(merge("the adoption process takes patience and paperwork; CAROLINE plans to adopt a child", "a", "b"))
    )
    assert report.counts["merged"] == 1 and report.counts["rejected"] == 0 and len(run.requests) == 1
    assert live_ids(store).isdisjoint({"a", "b"})


def test_a_merge_that_drops_a_sentence_without_specifics_is_rejected_and_its_sources_kept(run, store):
    store.memories.put_many(ADOPTION)
    report = run(
        answer(merge("Caroline plans to adopt a child.", "a", "b")),
        options=NO_FLOOR.replace(MergeRepairEnabled=False),
    )
    assert live_ids(store) == {"a", "b"} and report.counts["merged"] == 0
    assert report.counts["rejected"] == 1 and report.counts["rejected_dropped"] == 1
    (row,) = [c for c in report.changes if c.kind == "merge-rejected"]
    assert f'drops the content of "{PAPERWORK}"' in row.detail and "missing" not in row.detail
    assert store.memories.get("a").metadata.get(REJECTED_CLUSTER_KEY)


def test_a_repair_is_told_which_sentences_were_dropped_and_restoring_them_saves_the_merge(run, store):
    store.memories.put_many(ADOPTION)
    report = run(
        answer(merge("Caroline plans to adopt a child.", "a", "b")),
        {"content": "Caroline plans to adopt a child; the adoption process takes patience and paperwork."},
    )
    repair = run.requests[1]
    assert repair.inputs["dropped"] == [PAPERWORK] and PAPERWORK in repair.inputs["missing"]
    assert "## Source sentences whose content the merged text dropped" in repair.prompt
    assert f"- {PAPERWORK}" in repair.prompt
    (merged,) = created(store, {"a", "b"})
    assert "paperwork" in merged.content and report.counts["repaired"] == 1 and report.counts["rejected"] == 0
    assert any("restored 1 dropped sentence(s)" in line for line in report.lines)


def test_a_repair_that_still_drops_the_sentence_is_rejected(run, store):
    store.memories.put_many(ADOPTION)
    report = run(
        answer(merge("Caroline plans to adopt a child.", "a", "b")),
        {"content": "Caroline plans to adopt a child, which takes patience."},
    )
    assert live_ids(store) == {"a", "b"} and report.counts["rejected"] == 1 and report.counts["repaired"] == 0


def test_a_rewrite_that_halves_an_entry_is_rejected(run, store):
    flowers = "Melanie finds joy in flowers which represent growth, beauty, and appreciating small moments."
    store.memories.put_many([entry("f", flowers), entry("k", "The badge number is 4471.")])
    report = run(
        answer(merge("Melanie finds joy in flowers which represent growth.", "f", category="people/melanie")),
        options=NO_FLOOR.replace(MergeRepairEnabled=False),
    )
    assert live_ids(store) == {"f", "k"} and store.memories.get("f").content == flowers
    assert store.memories.get("f").category == "facts"
    assert report.counts["rejected_dropped"] == 1 and report.counts["merged"] == 0


@pytest.mark.parametrize(
    "other,removed",
    [
        # Same names, different statement: not a carrier.
        ("Caroline and Melanie both volunteer at the LGBTQ center on weekends.", False),
        # The same statement in other words: a carrier.
        ("Melanie told Caroline that the LGBTQ support group really changed her life.", True),
    ],
)
def test_the_removal_guard_wants_a_carrier_that_says_what_the_entry_says(run, store, other, removed):
    store.memories.put_many(
        [
            entry("x", "Melanie told Caroline that the LGBTQ support group changed her life."),
            entry("y", other),
        ]
    )
    report = run(answer(delete=("x",)))
    assert ("x" not in live_ids(store)) is removed and "y" in live_ids(store)
    assert report.counts["ephemeral"] == int(removed) and report.counts["guarded"] == int(not removed)
    if not removed:
        why = next(c.detail for c in report.changes if c.kind == "protected" and c.target == "x")
        assert why == "kept by the removal guard: live entry y names the same things but does not say what it says"


# ----------------------------------------------------------------------------------------------- real facts
def _eval_data() -> Path | None:
    """``shared/eval-data`` next to the checkout or one of its parents (read in place)."""
    for parent in Path(__file__).resolve().parents:
        candidate = parent / "shared" / "eval-data" / "locomo" / "locomo10.json"
        if candidate.exists():
            return candidate
    return None


def _conversation_facts(limit: int) -> list[str]:
    """Observations of the first LoCoMo conversation as an assistant of its first speaker keeps them: facts about
    that speaker are about "the user" ("The user likes painting"), so many carry no name, number or date."""
    path = _eval_data()
    if path is None:
        pytest.skip("shared/eval-data/locomo/locomo10.json is not available")
    sample = json.loads(path.read_text(encoding="utf-8"))[0]
    user = sample["conversation"]["speaker_a"]
    observations = sample["observation"]
    facts: list[str] = []
    for session in sorted(observations, key=lambda k: int(k.split("_")[1])):
        for lines in observations[session].values():
            for text, _evidence in lines:
                text = text.replace(f"{user}'s", "the user's").replace(user, "the user")
                facts.append(text[0].upper() + text[1:])
    return list(dict.fromkeys(facts))[:limit]


def test_a_model_deleting_real_conversation_facts_loses_none_of_them(run, store):
    """Facts of a real conversation, decayed well below the default importance, most of them without a date or a
    number ("Melanie is currently managing kids and work and finds it overwhelming."): an answer that deletes every
    entry it is shown loses none of them; only the acknowledgements, the scratch note and the ephemeral-tagged entry
    go, and a fact restated word for word goes as the restatement's duplicate."""
    facts = _conversation_facts(40)
    corpus = [entry(f"f{n}", text, importance=0.2, category="people") for n, text in enumerate(facts)]
    corpus += [
        entry("ack1", "The user said ok.", importance=0.2),
        entry("ack2", "Thanks, that helps!", importance=0.2),
        entry("scratch", "Draft reply half written for the weekend plans.", category="scratch/drafts"),
        entry("tagged", "Remember to ask about the weekend plans later.", tags=("ephemeral",)),
        entry("again", facts[0] + " She said so again.", importance=0.2, category="people"),
    ]
    store.memories.put_many(corpus)
    # Pure specifics-free facts are the ones the old rule retired as noise: there are many of them here.
    assert sum(1 for e in corpus[: len(facts)] if not specifics_of(e.content, e.category)) >= 5

    def delete_everything(request):
        return answer(delete=tuple(e["id"] for e in request.inputs["entries"]))

    report = run(delete_everything)
    assert report.status == "completed"
    assert facts_lost(corpus, store) == []
    live = live_ids(store)
    assert {"ack1", "ack2", "scratch", "tagged"}.isdisjoint(live)
    assert len(live & {"f0", "again"}) == 1  # one of the restated pair carries both
    assert {f"f{n}" for n in range(1, len(facts))} <= live
    assert report.counts["ephemeral"] == 5 and report.counts["guarded"] == len(facts)
    noise = {c.target: c.detail for c in report.changes if c.kind == "archived"}
    assert noise["ack1"].startswith("ephemeral: noise — no content word beyond acknowledgements")
    assert "throw-away" in noise["scratch"] and "tagged 'ephemeral'" in noise["tagged"]
