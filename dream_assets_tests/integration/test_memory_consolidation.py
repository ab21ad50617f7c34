"""Pass 1 — memory consolidation, end to end with scripted model answers (spec "Pass 1 — Memory consolidation" through
"Episode reinforcement", and "LLM response format")."""

from __future__ import annotations

import json
import logging
from datetime import timedelta

import pytest

from dream_assets.llm.client import ModelClient
from dream_assets.llm.scripted import ScriptedBackend
from dream_assets.model import MemoryEntry
from dream_assets.options import DreamOptions
from dream_assets.options_loader import dream_options
from dream_assets.passes.context import PassContext
from dream_assets.passes.memory_consolidation import run_memory_consolidation
from dream_assets.passes.memory_consolidation.merge import REJECTED_AT_KEY, REJECTED_CLUSTER_KEY
from dream_assets.passes.memory_consolidation.select import REVIEWED_KEY, is_reviewed, review_hash
from dream_assets.store import open_store
from dream_assets.store.ledger import PassLedger
from dream_assets.store.log_records import FeedbackEvent
from dream_assets.store.logs import append_event

from ..conftest import NOW

# The exact-duplicate fold has its own tests (test_memory_consolidation_quality.py); here duplicates reach the model.
NO_FLOOR = dream_options(ConsolidationMinInterval=timedelta(0), ConsolidationExactFoldEnabled=False)


def entry(
    ident: str,
    content: str,
    *,
    category: str = "facts",
    tags: tuple[str, ...] = (),
    importance: float = 0.5,
    created_days: float = 30,
    seen_days: float = 1,
    reinforced: int = 1,
    metadata: dict | None = None,
    reviewed: bool = False,
) -> MemoryEntry:
    e = MemoryEntry(
        id=ident,
        content=content,
        category=category,
        tags=tags,
        importance=importance,
        created_at=NOW - timedelta(days=created_days),
        updated_at=NOW - timedelta(days=seen_days),
        last_seen_at=NOW - timedelta(days=seen_days),
        reinforcement_count=reinforced,
        metadata=dict(metadata or {}),
    )
    if reviewed:
        e = e.with_(metadata={**e.metadata, REVIEWED_KEY: review_hash(e)})
    return e


def merge(content: str, *source_ids: str, category: str | None = None, tags: list[str] | None = None) -> dict:
    save: dict = {"content": content, "sourceIds": list(source_ids)}
    if category is not None:
        save["category"] = category
    if tags is not None:
        save["tags"] = tags
    return save


def answer(*saves: dict, delete: tuple[str, ...] = ()) -> dict:
    return {"toDelete": list(delete), "toSave": list(saves)}


class Run:
    """One pass over the test profile with scripted answers; keeps the backend to inspect what was sent."""

    def __init__(self, profile, store, options: DreamOptions = NO_FLOOR) -> None:
        self.profile, self.store, self.options = profile, store, options
        self.backend: ScriptedBackend | None = None

    def __call__(self, *answers, now=NOW, cycle_id: str = "c1", options: DreamOptions | None = None):
        opts = options or self.options
        self.backend = ScriptedBackend(answers[0] if len(answers) == 1 and callable(answers[0]) else list(answers))
        client = ModelClient(self.backend, profile=self.profile, options=opts)
        ctx = PassContext(
            self.profile,
            opts,
            now,
            cycle_id=cycle_id,
            client_factory=lambda: client,
            _store=self.store,
        )
        return run_memory_consolidation(ctx)

    @property
    def requests(self):
        return self.backend.requests if self.backend else []


@pytest.fixture
def run(profile, store) -> Run:
    return Run(profile, store)


def live_ids(store) -> set[str]:
    return {e.id for e in store.memories.list_live()}


def created(store, before: set[str]) -> list[MemoryEntry]:
    return [e for e in store.memories.list_live() if e.id not in before]


# ----------------------------------------------------------------------------------------------- candidate gating
def test_withheld_entries_are_never_shown_and_invented_ids_resolve_to_nothing(run, store):
    store.memories.put_many(
        [
            entry("old", "The Orinoco survey report lives in the Lumen drive.", reviewed=True),
            entry("new", "The user's dentist is Dr. Alvarez in Valencia."),
        ]
    )
    report = run(
        answer(
            merge("The Orinoco survey report lives in the Lumen drive.", "old", category="docs"),
            delete=("old", "made-up-id"),
        )
    )
    assert "old" not in run.requests[0].prompt and "id=new" in run.requests[0].prompt
    assert [e["id"] for e in run.requests[0].inputs["entries"]] == ["new"]
    assert live_ids(store) == {"old", "new"}  # nothing withheld can be archived or replaced
    assert report.counts["ignored_ids"] == 2 and report.counts["merged"] == 0 and report.counts["archived"] == 0
    assert report.counts["eligible"] == 1 and report.counts["withheld"] == 1


def test_nothing_eligible_makes_no_model_call(run, store):
    store.memories.put_many(
        [
            entry("a", "Kestrel ships on Fridays.", reviewed=True),
            entry("b", "The user's badge number is 4471.", reviewed=True),
        ]
    )
    report = run()
    assert run.requests == [] and report.model_calls == 0
    assert report.status == "completed" and "no model call" in "\n".join(report.lines)


def test_settled_cluster_is_not_reoffered_and_one_edit_reopens_it(run, store):
    store.memories.put_many(
        [
            entry("d1", "The user prefers dark mode in VS Code."),
            entry("d2", "The user prefers dark mode in VS Code!"),
            entry("x", "Ingrid Solberg runs the Bergen office of project Quartz."),
        ]
    )
    first = run(answer())
    assert first.counts["clusters"] == 1 and first.counts["reviewed"] == 3
    assert all(is_reviewed(e) for e in store.memories.list_live())

    second = run(now=NOW + timedelta(hours=1))
    assert run.requests == [] and second.counts["settled_clusters"] == 1 and second.counts["eligible"] == 0

    store.memories.update("d2", now=NOW, content="The user prefers dark mode in VS Code, always.")
    third = run(answer(), now=NOW + timedelta(hours=2))
    assert len(run.requests) == 1
    assert [e["id"] for e in run.requests[0].inputs["entries"]] == ["d1", "d2"]  # the whole cluster, not "x"
    assert run.requests[0].inputs["clusters"] == [["d1", "d2"]]
    assert third.counts["withheld"] == 1


def test_reinforcement_reopens_an_entry_but_importance_decay_does_not(run, store):
    store.memories.put_many(
        [
            entry("a", "Kestrel ships on Fridays.", reviewed=True),
            entry("b", "The user's badge number is 4471.", reviewed=True),
        ]
    )
    store.memories.set_importance({"a": 0.2}, now=NOW)
    run()
    assert run.requests == []
    store.memories.reinforce("b", now=NOW)
    run(answer())
    assert [e["id"] for e in run.requests[0].inputs["entries"]] == ["b"]


def test_failed_cluster_scan_degrades_to_unreviewed_only(run, store, monkeypatch):
    store.memories.put_many(
        [
            entry("a", "Kestrel ships on Fridays.", reviewed=True),
            entry("b", "Kestrel ships on Fridays!", reviewed=True),
            entry("c", "The user's badge number is 4471."),
        ]
    )

    def broken(**_kw):
        raise MemoryError("similarity matrix too large")

    monkeypatch.setattr(store.memories, "duplicate_clusters", broken)
    report = run(answer())
    assert [e["id"] for e in run.requests[0].inputs["entries"]] == ["c"]
    assert any("near-duplicate scan failed" in line for line in report.lines)


def test_a_failing_embeddings_scan_clusters_by_the_lexical_measure(profile, store):
    from dream_assets_tests.openai_server import refusing_base_url

    store.memories.put_many(
        [
            entry("a", "Kestrel ships on Fridays.", reviewed=True),
            entry("b", "Kestrel ships on Fridays!", reviewed=True),
            entry("c", "The user's badge number is 4471.", reviewed=True),
        ]
    )
    with refusing_base_url() as dead:
        options = NO_FLOOR.replace(EmbeddingModel="test-embedding", EmbeddingBaseUrl=dead, LlmMaxRetries=0)
        run = Run(profile, store, options)
        report = run(answer())
    assert report.status == "completed", report.reason
    (request,) = run.requests
    assert sorted(e["id"] for e in request.inputs["entries"]) == [
        "a",
        "b",
    ]  # the reviewed pair is still offered as a cluster, found by the lexical measure
    assert any("embeddings failed" in line and "lexical measure" in line for line in report.lines)


def test_prompt_carries_temporal_context_and_recent_feedback(run, store, profile):
    store.memories.put_many(
        [
            entry(
                "a",
                "Retro for the checkout outage.",
                created_days=40,
                seen_days=3,
                reinforced=4,
                metadata={"subjectTime": "2026-02-03"},
            ),
            entry("b", "The user's badge number is 4471."),
        ]
    )
    append_event(
        profile,
        "feedback",
        FeedbackEvent(
            NOW - timedelta(days=2),
            "s1",
            "Correction",
            "Check the calendar before booking.",
            domain="calendar",
        ),
    )
    append_event(profile, "feedback", FeedbackEvent(NOW - timedelta(days=9), "s0", "Correction", "Too old to show."))
    run(answer())
    prompt = run.requests[0].prompt
    assert (
        "first=2026-10-21 last=2026-11-27 reinforced=4× subject=2026-02-03 :: Retro for the checkout outage." in prompt
    )
    assert "Check the calendar before booking." in prompt and "Too old to show." not in prompt


def test_feedback_is_capped_at_the_newest_signals(run, store, profile):
    store.memories.put_many([entry("a", "Kestrel ships on Fridays."), entry("b", "The badge number is 4471.")])
    for i in range(5):
        append_event(
            profile,
            "feedback",
            FeedbackEvent(NOW - timedelta(hours=10 - i), f"s{i}", "Correction", f"signal number {i}"),
        )
    run(answer(), options=NO_FLOOR.replace(FeedbackMaxSignals=2))
    fb = run.requests[0].inputs["feedback"]
    assert [f["text"] for f in fb] == ["signal number 3", "signal number 4"]


# ----------------------------------------------------------------------------------------------- applying merges
def test_merge_without_to_delete_still_archives_its_sources(run, store):
    store.memories.put_many(
        [entry("a", "The user's manager is Priya Raman."), entry("b", "User's manager: Priya Raman.")]
    )
    report = run(answer(merge("The user's manager is Priya Raman.", "a", "b", category="people/work")))
    assert live_ids(store) - {"a", "b"} == live_ids(store) and len(live_ids(store)) == 1
    merged = store.memories.list_live()[0]
    assert merged.content == "The user's manager is Priya Raman." and merged.category == "people/work"
    assert (
        json.loads(merged.metadata["mergedFrom"]) == ["a", "b"]
        and merged.metadata["mergedAt"] == "2026-11-30T12:00:00Z"
    )
    assert store.memories.get("a").is_archived and store.memories.get("b").is_archived  # archived, never deleted
    assert report.counts["merged"] == 1 and report.counts["archived"] == 2 and report.counts["ephemeral"] == 0


def test_a_merge_whose_sources_are_also_in_to_delete_is_taken_as_the_merge(run, store):
    """A small model lists a merge's sources in toDelete as well: that is the merge, not a separate removal and not a
    conflict — the sources are archived with it, and nothing is refused or counted as ignored."""
    store.memories.put_many(
        [entry("a", "The user's manager is Priya Raman."), entry("b", "User's manager: Priya Raman.")]
    )
    merged = merge("The user's manager is Priya Raman.", "a", "b", category="people/work")
    report = run(answer(merged, delete=("a", "b")))
    [merged] = store.memories.list_live()
    assert json.loads(merged.metadata["mergedFrom"]) == ["a", "b"]
    assert store.memories.get("a").is_archived and store.memories.get("b").is_archived
    assert report.counts["merged"] == 1 and report.counts["archived"] == 2
    assert report.counts["ephemeral"] == 0 and report.counts.get("kept_unmerged_sources", 0) == 0
    assert report.counts.get("ignored_ids", 0) == 0 and report.status == "completed"


def test_sources_in_to_delete_of_a_merge_that_is_refused_are_kept(run, store):
    """The same redundant answer whose merge drops a specific: the merge is refused, and its sources stay live —
    toDelete does not remove on its own what the merge was to carry."""
    store.memories.put_many(
        [
            entry("a", "The user's manager is Priya Raman, based in the Lisbon office."),
            entry("b", "User's manager: Priya Raman (Lisbon office), since March 2024."),
        ]
    )
    lossy = merge("The user's manager is Priya.", "a", "b")
    report = run(answer(lossy, delete=("a", "b")), answer(lossy, delete=("a", "b")))
    assert live_ids(store) == {"a", "b"}
    assert report.counts["merged"] == 0 and report.counts["ephemeral"] == 0
    assert report.counts["kept_unmerged_sources"] == 2


def test_a_reoffered_clusters_merge_with_its_sources_in_to_delete_is_no_ignored_removal(run, store):
    from dream_assets.passes.memory_consolidation.select import CLUSTER_SET_KEY, cluster_set_id

    store.memories.put_many(
        [
            entry("p", "Gina opened her dance studio in the old mill."),
            entry("q", "Gina opened her own dance studio in the old mill building."),
        ]
    )
    run(answer())
    assert all(e.metadata[CLUSTER_SET_KEY] == cluster_set_id(["p", "q"]) for e in store.memories.list_live())
    merged = merge("Gina opened her own dance studio in the old mill building.", "p", "q")
    store.memories.put_many([entry("n", "Kestrel ships on Fridays.", created_days=0)])  # the corpus moved
    again = run(answer(merged, delete=("p", "q")), now=NOW + timedelta(days=7, minutes=1))
    assert again.counts["reoffered"] == 1 and again.counts["merged"] == 1
    assert again.counts.get("reoffered_removals_ignored", 0) == 0
    assert "p" not in live_ids(store) and "q" not in live_ids(store)


def test_merge_arithmetic_is_the_hosts_not_the_models(run, store):
    store.memories.put_many(
        [
            entry(
                "a",
                "Lisbon trip with Ana Ribeiro.",
                created_days=300,
                seen_days=200,
                reinforced=2,
                importance=0.4,
                metadata={
                    "subjectTimeStart": "2026-05-12",
                    "subjectTimeEnd": "2026-05-14",
                    "source": "chat",
                    "decayAppliedThrough": "2026-10-01T00:00:00Z",
                },
            ),
            entry(
                "b",
                "Lisbon trip with Ana Ribeiro, the Web Summit.",
                created_days=100,
                seen_days=5,
                reinforced=7,
                importance=0.7,
                metadata={
                    "subjectTimeStart": "2026-05-11",
                    "subjectTimeEnd": "2026-05-16",
                    "decayAppliedThrough": "2026-11-01T00:00:00Z",
                },
            ),
        ]
    )
    run(answer(merge("Lisbon trip with Ana Ribeiro, the Web Summit.", "a", "b", category="episodes/travel")))
    (merged,) = store.memories.list_live()
    assert merged.created_at == NOW - timedelta(days=300)  # first seen preserved
    assert merged.last_seen_at == NOW - timedelta(days=5)  # latest observation, never reset to now
    assert merged.reinforcement_count == 9  # the sum
    assert merged.importance == 0.7
    assert merged.subject_time == {
        "subjectTimeStart": "2026-05-11",
        "subjectTimeEnd": "2026-05-16",
    }  # widened
    assert "source" not in merged.metadata  # other metadata dropped
    assert merged.metadata["decayAppliedThrough"] == "2026-11-01T00:00:00Z"


def test_merged_distinct_moments_keep_an_honest_subject_range(run, store):
    store.memories.put_many(
        [
            entry("a", "Incident retro for the checkout outage.", metadata={"subjectTime": "2026-02-03"}),
            entry("b", "Incident retro for the checkout outage!", metadata={"subjectTime": "2026-09-14"}),
        ]
    )
    run(answer(merge("Incident retro for the checkout outage.", "a", "b")))
    (merged,) = store.memories.list_live()
    assert merged.subject_time == {"subjectTimeStart": "2026-02-03", "subjectTimeEnd": "2026-09-14"}


def test_model_omitting_category_and_tags_keeps_the_sources(run, store):
    store.memories.put_many(
        [
            entry("a", "Kestrel ships on Fridays.", category="projects/kestrel", tags=("release",)),
            entry("b", "Kestrel ships on Fridays!", category="projects/kestrel", tags=("ship",)),
        ]
    )
    run(answer({"content": "Kestrel ships on Fridays.", "sourceIds": ["a", "b"]}))
    (merged,) = store.memories.list_live()
    assert merged.category == "projects/kestrel" and merged.tags == ("release", "ship")


def test_blank_merge_content_is_skipped_and_its_sources_kept(run, store):
    store.memories.put_many([entry("a", "Kestrel ships on Fridays."), entry("b", "Kestrel ships on Fridays!")])
    report = run(answer(merge("   ", "a", "b"), delete=("a", "b")))
    assert live_ids(store) == {"a", "b"}
    assert report.counts["skipped_blank"] == 1 and any("blank content" in line for line in report.lines)
    assert not is_reviewed(store.memories.get("a"))  # asked again next cycle


def test_failed_save_keeps_the_sources(profile):
    opts = NO_FLOOR.replace(MaxContentChars=100)
    store = open_store(profile, opts)
    run = Run(profile, store, opts)
    store.memories.put_many([entry("a", "Kestrel ships on Fridays."), entry("b", "Kestrel ships on Fridays!")])
    too_long = "Kestrel ships on Fridays. " * 20
    report = run(answer(merge(too_long, "a", "b"), delete=("a", "b")))
    # Checked before anything is written: the item is rejected with its reason, its sources kept.
    assert live_ids(store) == {"a", "b"} and report.counts["invalid_items"] == 1
    assert [(c.kind, c.target) for c in report.changes] == [("invalid-item", "toSave[0]")]
    assert "over the limit of 100" in report.changes[0].detail
    assert report.counts["kept_unmerged_sources"] == 2
    assert {r.kind for r in store.changes.list("c1")} <= {"stamped"}
    assert report.status == "completed"


def test_a_storage_error_while_saving_keeps_the_sources(run, store, monkeypatch):
    store.memories.put_many([entry("a", "Kestrel ships on Fridays."), entry("b", "Kestrel ships on Fridays!")])

    def disk_full(_entry):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(store.memories, "put", disk_full)
    report = run(answer(merge("Kestrel ships on Fridays.", "a", "b")))
    assert live_ids(store) == {"a", "b"} and report.counts["failed_saves"] == 1 and report.counts["archived"] == 0


def test_recategorisation_replaces_a_single_source(run, store):
    store.memories.put_many(
        [
            entry("a", "The user lives in Europe/Lisbon time.", category="general"),
            entry("b", "The badge number is 4471."),
        ]
    )
    report = run(
        answer(
            merge(
                "The user lives in Europe/Lisbon time.",
                "a",
                category="user-preferences/timezone",
                tags=["timezone"],
            )
        )
    )
    (moved,) = created(store, {"a", "b"})
    assert moved.category == "user-preferences/timezone" and store.memories.get("a").is_archived
    assert report.counts["merged"] == 1


def test_an_echoed_entry_is_not_churned(run, store):
    store.memories.put_many(
        [entry("a", "Kestrel ships on Fridays.", tags=("release",)), entry("b", "The badge number is 4471.")]
    )
    report = run(answer(merge("Kestrel ships on Fridays.", "a", category="facts", tags=["release"])))
    assert live_ids(store) == {"a", "b"} and report.counts["merged"] == 0 and report.counts["unchanged"] == 1


# ----------------------------------------------------------------------------------------------- coverage check
@pytest.mark.parametrize(
    "sources,merged",
    [
        (
            ["The user's manager is Priya Raman.", "User's manager: Priya Raman, since March."],
            "The user's manager is Raman, since March.",
        ),  # a name
        (
            [
                "Deployments for Atlas go through the CI pipeline on AWS.",
                "Atlas deploys via the CI pipeline.",
            ],
            "Atlas deploys via the CI pipeline.",
        ),  # an acronym
        (
            ["Expense reports are due on the 25th of each month.", "Expense reports are due monthly."],
            "Expense reports are due monthly.",
        ),  # a multi-digit number
        (
            ["The Lumen launch is on August 19, 2026.", "The Lumen launch date is set."],
            "The Lumen launch date is set.",
        ),  # a date
    ],
)
def test_merge_dropping_a_specific_is_rejected_and_sources_kept(run, store, sources, merged):
    store.memories.put_many([entry("a", sources[0]), entry("b", sources[1])])
    report = run(answer(merge(merged, "a", "b")), options=NO_FLOOR.replace(MergeRepairEnabled=False))
    assert live_ids(store) == {"a", "b"} and len(run.requests) == 1
    assert report.counts["rejected"] == 1 and report.counts["merged"] == 0
    a, b = store.memories.get("a"), store.memories.get("b")
    assert a.metadata[REJECTED_CLUSTER_KEY] == b.metadata[REJECTED_CLUSTER_KEY]
    assert a.metadata[REJECTED_AT_KEY] == "2026-11-30T12:00:00Z"


def test_rejected_cluster_id_is_stable_across_cycles(run, store):
    store.memories.put_many([entry("a", "The manager is Priya Raman."), entry("b", "Manager: Priya Raman.")])
    opts = NO_FLOOR.replace(MergeRepairEnabled=False)
    run(answer(merge("The manager is Raman.", "a", "b")), options=opts)
    first = store.memories.get("a").metadata[REJECTED_CLUSTER_KEY]
    store.memories.update("a", now=NOW, content="The manager is Priya Raman (Lisbon).")
    store.memories.update("b", now=NOW, content="Manager: Priya Raman (Lisbon).")
    run(answer(merge("The manager is Raman (Lisbon).", "b", "a")), options=opts, now=NOW + timedelta(hours=1))
    assert store.memories.get("a").metadata[REJECTED_CLUSTER_KEY] == first
    assert store.memories.get("a").metadata[REJECTED_AT_KEY] == "2026-11-30T13:00:00Z"


def test_equivalent_date_spelling_is_accepted(run, store):
    store.memories.put_many(
        [
            entry("a", "The Lumen launch is on August 19, 2026."),
            entry("b", "Lumen launches on 19 August 2026."),
        ]
    )
    report = run(answer(merge("The Lumen launch is on 2026-08-19.", "a", "b")))
    assert report.counts["merged"] == 1 and report.counts["rejected"] == 0


def test_vocabulary_file_is_read_every_cycle_and_a_malformed_one_falls_back(run, store, profile):
    opts = NO_FLOOR.replace(MergeRepairEnabled=False)

    def attempt(n: int, now):
        a, b = f"a{n}", f"b{n}"
        store.memories.put_many(
            [
                entry(a, f"In the staging setup of Rocky build {n} uses Terraform."),
                entry(b, f"Build {n} uses Terraform."),
            ]
        )
        # The merge keeps what the entries say and leaves out only the name "Rocky".
        return run(answer(merge(f"In the staging setup build {n} uses Terraform.", a, b)), options=opts, now=now)

    assert attempt(10, NOW).counts["rejected"] == 1  # "Rocky" mid-sentence is a name under the baseline

    profile.coverage_vocabulary_path.write_text("{not json", encoding="utf-8")
    malformed = attempt(20, NOW + timedelta(hours=1))
    assert malformed.counts["rejected"] == 1 and malformed.counts["merged"] == 0
    assert any("merge-coverage-vocabulary.json" in line and "built-in" in line for line in malformed.lines)

    profile.coverage_vocabulary_path.write_text(json.dumps({"extraCommonWords": ["Rocky"]}), encoding="utf-8")
    assert attempt(30, NOW + timedelta(hours=2)).counts["merged"] == 1


# ----------------------------------------------------------------------------------------------- merge repair
def test_repair_restores_the_dropped_specific(run, store, caplog):
    store.memories.put_many(
        [
            entry("a", "The user's manager is Priya Raman."),
            entry("b", "User's manager is Priya Raman, based in Krakow."),
        ]
    )
    caplog.set_level(logging.INFO, logger="dream_assets")
    report = run(
        answer(merge("The user's manager is Priya, based in Krakow.", "a", "b")),
        {"content": "The user's manager is Priya Raman, based in Krakow."},
    )
    assert [r.pass_name for r in run.requests] == ["memory_consolidation", "merge_repair"]
    assert run.requests[1].inputs["missing"] == ["Raman"]
    assert '"Raman"' in run.requests[1].prompt
    (merged,) = created(store, {"a", "b"})
    assert merged.content == "The user's manager is Priya Raman, based in Krakow."
    assert report.counts["repaired"] == 1 and report.counts["merged"] == 1 and report.counts["rejected"] == 0
    assert "repaired merge of [a, b] — restored 1 specific(s)" in caplog.text
    assert report.usage["calls"] == 2


def test_a_repair_that_still_drops_a_specific_is_rejected(run, store):
    store.memories.put_many(
        [
            entry("a", "The user's manager is Priya Raman."),
            entry("b", "User's manager is Priya Raman, based in Krakow."),
        ]
    )
    report = run(
        answer(merge("The user's manager is Priya, based in Krakow.", "a", "b")),
        {"content": "The user's manager is Priya, in Krakow."},
    )
    assert live_ids(store) == {"a", "b"} and report.counts["rejected"] == 1 and report.counts["repaired"] == 0
    assert REJECTED_CLUSTER_KEY in store.memories.get("b").metadata


def test_a_failed_repair_call_rejects_the_merge_but_not_the_pass(run, store):
    store.memories.put_many([entry("a", "The manager is Priya Raman."), entry("b", "Manager: Priya Raman.")])
    report = run(answer(merge("The manager is Raman.", "a", "b")), "this is not json")
    assert report.status == "completed" and report.counts["rejected"] == 1 and live_ids(store) == {"a", "b"}


def test_repair_attempts_are_capped_per_cycle(run, store):
    store.memories.put_many(
        [
            entry("a", "The manager is Priya Raman."),
            entry("b", "Manager: Priya Raman."),
            entry("c", "Atlas deploys on AWS."),
            entry("d", "Atlas deploys on AWS!"),
        ]
    )
    report = run(
        answer(merge("The manager is Raman.", "a", "b"), merge("Atlas deploys.", "c", "d")),
        {"content": "The manager is Raman."},
        options=NO_FLOOR.replace(MergeRepairMaxPerCycle=1),
    )
    assert [r.pass_name for r in run.requests] == ["memory_consolidation", "merge_repair"]
    assert report.counts["rejected"] == 2 and report.counts["repair_capped"] == 1
    assert live_ids(store) == {"a", "b", "c", "d"}


def test_disabled_repair_makes_no_second_call(run, store):
    store.memories.put_many([entry("a", "The manager is Priya Raman."), entry("b", "Manager: Priya Raman.")])
    run(answer(merge("The manager is Raman.", "a", "b")), options=NO_FLOOR.replace(MergeRepairEnabled=False))
    assert len(run.requests) == 1


# ----------------------------------------------------------------------------------------------- removals
def test_floor_blocks_ephemeral_removal_of_a_214_times_reinforced_entry(run, store):
    store.memories.put_many(
        [
            entry(
                "mia",
                "The user's daughter Mia has a violin lesson every Thursday at 17:00.",
                importance=0.3,
                reinforced=214,
            ),
            entry("vip", "Never post to #general without approval.", importance=0.85),
            entry("noise", "The user said ok.", importance=0.3),
        ]
    )
    report = run(answer(delete=("mia", "vip", "noise")))
    assert live_ids(store) == {"mia", "vip"}
    assert report.counts["protected"] == 2 and report.counts["ephemeral"] == 1 and report.counts["archived"] == 1
    assert report.counts["guarded"] == 0  # both kept by the floor, before the removal guard is asked


def test_a_high_value_entry_may_still_be_merged(run, store):
    store.memories.put_many(
        [
            entry("mia", "Mia has a violin lesson every Thursday at 17:00.", reinforced=214),
            entry("mia2", "Mia has violin every Thursday at 17:00.", reinforced=3),
        ]
    )
    report = run(answer(merge("Mia has a violin lesson every Thursday at 17:00.", "mia", "mia2")))
    (merged,) = store.memories.list_live()
    assert merged.reinforcement_count == 217 and report.counts["merged"] == 1 and report.counts["protected"] == 0


def test_a_source_of_a_rejected_merge_listed_in_to_delete_is_kept(run, store):
    store.memories.put_many([entry("a", "The manager is Priya Raman."), entry("b", "Manager: Priya Raman.")])
    report = run(
        answer(merge("The manager is Raman.", "a", "b"), delete=("a", "b")),
        options=NO_FLOOR.replace(MergeRepairEnabled=False),
    )
    assert live_ids(store) == {"a", "b"} and report.counts["archived"] == 0
    assert report.counts["kept_unmerged_sources"] == 2


def test_every_archive_is_logged_with_its_content(run, store, caplog):
    store.memories.put_many(
        [
            entry("a", "Kestrel ships on Fridays."),
            entry("b", "Kestrel ships on Fridays!"),
            entry("n", "The user said thanks for the notes.", importance=0.3),
        ]
    )
    caplog.set_level(logging.INFO, logger="dream_assets")
    run(answer(merge("Kestrel ships on Fridays.", "a", "b"), delete=("n",)))
    info = [r.getMessage() for r in caplog.records if r.levelno == logging.INFO]
    assert any("archived memory a (merged into" in m and "Kestrel ships on Fridays." in m for m in info)
    assert any("archived memory n (ephemeral" in m and "thanks for the notes" in m for m in info)


# ----------------------------------------------------------------------------------------------- anti-patterns
def test_corrections_are_mined_into_anti_pattern_entries(run, store, profile):
    store.memories.put_many([entry("a", "Kestrel ships on Fridays."), entry("b", "The badge number is 4471.")])
    append_event(
        profile,
        "feedback",
        FeedbackEvent(
            NOW - timedelta(days=1),
            "s1",
            "Correction",
            "The meeting was double-booked; check the calendar first.",
            domain="calendar",
        ),
    )
    tip = "Check the calendar for conflicts before booking; calendar-mcp writes double-book on retry."
    report = run(answer(merge(tip, category="anti-patterns/calendar", tags=["calendar"])))
    assert "double-booked" in run.requests[0].prompt
    (mined,) = created(store, {"a", "b"})
    assert mined.category == "anti-patterns/calendar" and mined.content == tip and report.counts["created"] == 1
    assert is_reviewed(mined)

    store.memories.update("a", now=NOW, content="Kestrel ships on Fridays at noon.")
    again = run(answer(merge(tip, category="anti-patterns/calendar")), now=NOW + timedelta(hours=1))
    assert again.counts.get("created", 0) == 0 and again.counts["reinforced_by_new"] == 1  # save-time dedup
    assert store.memories.get(mined.id).reinforcement_count == 2


# ----------------------------------------------------------------------------------------------- concurrency
def test_a_source_edited_during_the_model_call_defers_the_merge(run, store):
    store.memories.put_many([entry("a", "Kestrel ships on Fridays."), entry("b", "Kestrel ships on Fridays!")])

    def model(request):
        # The agent edits an entry while the model is thinking: the store must not be held across the call.
        open_store(run.profile, run.options).memories.update("a", now=NOW, content="Kestrel ships on Thursdays now.")
        return answer(merge("Kestrel ships on Fridays.", "a", "b"))

    report = run(model)
    assert live_ids(store) == {"a", "b"} and report.counts["deferred"] == 1 and report.counts["merged"] == 0
    assert store.memories.get("a").content == "Kestrel ships on Thursdays now."
    assert not is_reviewed(store.memories.get("a")) and not is_reviewed(store.memories.get("b"))
    run(answer(), now=NOW + timedelta(hours=1))
    assert {e["id"] for e in run.requests[0].inputs["entries"]} >= {"a", "b"}  # offered again next cycle


def test_an_entry_edited_during_the_call_is_not_removed(run, store):
    store.memories.put_many([entry("a", "The user said ok."), entry("b", "The badge number is 4471.")])

    def model(request):
        open_store(run.profile, run.options).memories.update(
            "a", now=NOW, content="The user said ok to the Lumen plan."
        )
        return answer(delete=("a",))

    report = run(model)
    assert "a" in live_ids(store) and report.counts["ephemeral"] == 0 and report.counts["deferred"] == 1


# ----------------------------------------------------------------------------------------------- skips and floors
def test_pause_file_skips_the_whole_pass(run, store, profile):
    store.memories.put_many([entry("a", "Kestrel ships on Fridays."), entry("b", "The badge number is 4471.")])
    profile.consolidation_pause_path.parent.mkdir(parents=True, exist_ok=True)
    profile.consolidation_pause_path.write_text("{}", encoding="utf-8")
    report = run()
    assert report.status == "skipped" and "paused" in report.reason and run.requests == []
    profile.consolidation_pause_path.unlink()
    assert run(answer()).status == "completed"


def test_minimum_interval_holds_across_a_restart(profile, store):
    store.memories.put_many([entry("a", "Kestrel ships on Fridays."), entry("b", "The badge number is 4471.")])
    runner = Run(profile, store, dream_options())  # default ConsolidationMinInterval: 6 hours
    assert runner(answer()).status == "completed"
    assert PassLedger(profile).get("memory_consolidation").last_run_at == NOW

    restarted = Run(profile, open_store(profile, dream_options()), dream_options())  # a new process: new store, ledger
    store.memories.put_many([entry("c", "Heron load tests use staging.")])
    early = restarted(now=NOW + timedelta(hours=2))
    assert early.status == "skipped" and restarted.requests == []
    assert early.summary.startswith("minimum interval: last completed 2026-11-30T12:00:00Z, next allowed at")
    assert restarted(answer(), now=NOW + timedelta(hours=6)).status == "completed"
    assert len(restarted.requests) == 1


def test_zero_minimum_interval_disables_the_floor(run, store):
    store.memories.put_many([entry("a", "Kestrel ships on Fridays."), entry("b", "The badge number is 4471.")])
    run(answer(), options=dream_options(ConsolidationMinInterval=timedelta(0)))
    store.memories.put_many([entry("c", "Heron load tests use staging.")])
    report = run(answer(), now=NOW + timedelta(minutes=1), options=dream_options(ConsolidationMinInterval=timedelta(0)))
    assert report.status == "completed" and len(run.requests) == 1


def test_a_failed_model_call_applies_and_stamps_nothing(run, store, profile):
    store.memories.put_many([entry("a", "Kestrel ships on Fridays."), entry("b", "The badge number is 4471.")])
    report = run("I think you should merge a and b")
    assert report.status == "failed"
    assert not any(is_reviewed(e) for e in store.memories.list_live())
    assert PassLedger(profile).get("memory_consolidation") is None


def test_fewer_than_two_memories_returns_early(run, store):
    store.memories.put_many([entry("a", "Kestrel ships on Fridays.")])
    report = run()
    assert report.status == "skipped" and run.requests == []


# ----------------------------------------------------------------------------------------------- summary and change log
def test_summary_line_and_counts(run, store, profile, caplog):
    store.memories.put_many(
        [
            entry("old", "Orinoco survey notes live in Lumen.", created_days=10, reviewed=True),
            entry("a", "Kestrel ships on Fridays.", created_days=2),
            entry("b", "Kestrel ships on Fridays!", created_days=2),
            entry("n", "The user said thanks for the notes.", created_days=1, importance=0.3),
            entry("vip", "Mia has violin every Thursday at 17:00.", reinforced=80),
            entry("h", "The Heron notes moved to the Lumen drive.", created_days=1),
        ]
    )
    ledger = PassLedger(profile)
    ledger.stamp("memory_consolidation", "x", NOW - timedelta(days=5))
    caplog.set_level(logging.INFO, logger="dream_assets")
    report = run(answer(merge("Kestrel ships on Fridays.", "a", "b"), delete=("n", "vip", "h")))
    assert report.summary == (
        "memory consolidation summary — live 6 (4 after), reviewed 2, created since last run 4, merged 1, "
        "repaired 0, rejected 0, ephemeral 1, protected 2 (1 by the removal guard)"
    )
    assert report.summary in caplog.text
    for key in (
        "live",
        "reviewed",
        "created_since_last_run",
        "merged",
        "repaired",
        "rejected",
        "ephemeral",
        "protected",
        "archived",
        "eligible",
        "withheld",
    ):
        assert key in report.counts
    assert report.counts["archived"] == 3 and report.counts["eligible"] == 5 and report.counts["withheld"] == 1
    assert report.counts["guarded"] == 1 and "h" in live_ids(store)


def test_every_change_is_recorded_under_the_cycle(run, store):
    store.memories.put_many(
        [
            entry("a", "Kestrel ships on Fridays."),
            entry("b", "Kestrel ships on Fridays!"),
            entry("n", "The user said ok.", importance=0.3),
            entry("k", "The badge number is 4471."),
        ]
    )
    run(
        answer(
            merge("Kestrel ships on Fridays.", "a", "b"),
            merge("Avoid booking without checking the calendar.", category="anti-patterns/calendar"),
            delete=("n",),
        ),
        cycle_id="cycle-7",
    )
    rows = store.changes.list("cycle-7")
    kinds = sorted((r.kind, r.target_id) for r in rows if r.kind != "created")
    assert kinds == [("archived", "a"), ("archived", "b"), ("archived", "n"), ("stamped", "k")]
    created_rows = [r for r in rows if r.kind == "created"]
    assert len(created_rows) == 2 and all(r.before is None and r.after for r in created_rows)
    archived_a = next(r for r in rows if r.target_id == "a")
    assert (
        archived_a.before["archived_at"] is None
        and archived_a.after["archived_at"]
        and "merged into" in archived_a.reason
    )


def test_undo_restores_the_corpus_exactly(run, store):
    store.memories.put_many(
        [
            entry("a", "Kestrel ships on Fridays.", tags=("release",)),
            entry("b", "Kestrel ships on Fridays!"),
            entry("n", "The user said ok.", importance=0.3),
            entry("k", "The badge number is 4471.", category="ids"),
            entry("w", "The user's manager is Priya Raman."),
            entry("w2", "Manager: Priya Raman."),
        ]
    )

    def state():
        return {e.id: (e.content, e.category, e.tags, e.is_archived) for e in store.memories.list_all()}

    before = state()
    report = run(
        answer(
            merge("Kestrel ships on Fridays.", "a", "b", category="projects/kestrel"),
            merge("Avoid booking without checking the calendar.", category="anti-patterns/calendar"),
            merge("The manager is Raman.", "w", "w2"),
            delete=("n",),
        ),
        {"content": "The manager is Raman."},
        cycle_id="cycle-9",
    )
    assert report.counts["merged"] == 1 and report.counts["archived"] == 3 and report.counts["created"] == 1
    new_ids = set(state()) - set(before)

    result = store.changes.undo_cycle("cycle-9", now=NOW + timedelta(minutes=5))
    assert result.ok
    after = state()
    assert {k: v for k, v in after.items() if k in before} == before
    assert all(after[i][3] for i in new_ids)  # what the cycle created is retired (archived), not deleted
    assert live_ids(store) == {i for i, v in before.items() if not v[3]}


# ----------------------------------------------------------------------------------------------- the demo agent
@pytest.mark.slow  # two runs on the full demo
def test_demo_agent_second_run_offers_the_model_nothing(tmp_path):
    from dream_assets.demo import build_demo_profile
    from dream_assets.profile import AgentProfile

    profile = AgentProfile(tmp_path / "demo").ensure()
    opts = dream_options(ConsolidationMinInterval=timedelta(0), LlmBackend="offline")
    build_demo_profile(profile, NOW, options=opts)
    first = run_memory_consolidation(PassContext(profile, opts, NOW, cycle_id="d1"))
    # Word-for-word duplicates fold before the model; the rest are merged by it.
    assert first.status == "completed" and first.model_calls == 1 and first.counts["merged"] >= 5
    assert first.counts["merged"] + first.counts["folded"] >= 8
    assert first.counts["rejected"] == 0
    second = run_memory_consolidation(PassContext(profile, opts, NOW + timedelta(hours=1), cycle_id="d2"))
    assert second.status == "completed" and second.model_calls == 0 and second.counts["eligible"] == 0
    store = open_store(profile, opts)
    peanuts = [e for e in store.memories.list_live() if "allergic to peanuts" in e.content]
    assert len(peanuts) == 1 and peanuts[0].reinforcement_count == 3
    assert peanuts[0].created_at == NOW - timedelta(days=300)
    assert all(not e.metadata.get("mergedFrom") or e.metadata.get("mergedAt") for e in store.memories.list_live())


def test_a_large_first_review_is_spread_over_cycles_by_the_per_call_cap(run, store):
    store.memories.put_many(
        [
            entry(f"e{i:02d}", f"Distinct fact {i}: the {w} ticket {1000 + i} belongs to Team {w}.")
            for i, w in enumerate(["Atlas", "Heron", "Juniper", "Kestrel", "Lumen", "Nimbus", "Orchid"])
        ]
    )
    capped = NO_FLOOR.replace(ConsolidationMaxEntriesPerCall=3)
    first = run(answer(), options=capped)
    assert len(run.requests[0].inputs["entries"]) == 3
    assert first.counts["backlog"] == 4
    second = run(answer(), options=capped, now=NOW + timedelta(minutes=1))
    shown_second = {e["id"] for e in run.requests[0].inputs["entries"]}
    assert len(shown_second) == 3 and second.counts["backlog"] == 1
    run(answer(), options=capped, now=NOW + timedelta(minutes=2))
    assert len(run.requests[0].inputs["entries"]) == 1
    assert all(is_reviewed(e) for e in store.memories.list_live())


def test_a_new_correction_alone_is_worth_one_call_and_only_once(run, store, profile):
    store.memories.put_many(
        [
            entry("a", "Kestrel ships on Fridays.", reviewed=True),
            entry("b", "The badge number is 4471.", reviewed=True),
        ]
    )
    run(answer(), now=NOW - timedelta(hours=2))  # a completed pass before the correction arrived
    assert run.requests == []
    append_event(
        profile,
        "feedback",
        FeedbackEvent(
            NOW - timedelta(hours=1),
            "s1",
            "Correction",
            "Never book rooms on the 3rd floor; they are being renovated.",
            domain="scheduling",
        ),
    )
    tip = "Do not book 3rd-floor rooms while they are being renovated."
    report = run(answer(merge(tip, category="anti-patterns/scheduling")))
    assert len(run.requests) == 1 and run.requests[0].inputs["entries"] == []
    assert "3rd floor" in run.requests[0].prompt and report.counts["created"] == 1
    run(answer(), now=NOW + timedelta(hours=1))  # the same correction is not re-sent
    assert run.requests == []


@pytest.mark.parametrize(
    ("content", "category", "tags", "reinforced"),
    [
        ("The user prefers dark mode.", "prefs", ("editor", "theme"), 1),
        ("Café in Zürich — every Tuesday", "places/eu", ("", "zürich", "zürich", "b", "a"), 214),
        ("x", "", (), 0),
    ],
)
def test_review_hash_is_the_review_fingerprint_of_the_entry(content, category, tags, reinforced) -> None:
    from datetime import UTC, datetime, timezone

    from dream_assets.model import iso
    from dream_assets.text.content_hash import review_fingerprint

    for seen in (
        NOW,
        datetime(2026, 3, 1, 12, 30, 15, 123456, tzinfo=timezone(timedelta(hours=2))),
        NOW.astimezone(UTC),
    ):
        e = entry("m1", content, category=category, tags=tags, reinforced=reinforced).with_(last_seen_at=seen)
        assert review_hash(e) == review_fingerprint(content, category, tags, reinforced, iso(seen))


# ----------------------------------------------------------------------------------------------- scopes (walls)
SCOPED = NO_FLOOR.replace(MemoryScopeCategories="users/*")


def test_declared_scopes_are_walls_a_model_merge_cannot_cross(run, store):
    """MemoryScopeCategories=users/*: users/alice/... and users/bob/... are two scopes. Their near duplicates are never
    offered as one cluster, and a merge the model proposes across them anyway (or one that would file a user's fact
    under another user's or the shared categories) is refused with its reason; within one scope merges still apply."""
    store.memories.put_many(
        [
            entry("a1", "Weekly sync with the platform team on Tuesday at 10:00.", category="users/alice/work"),
            entry("a2", "Weekly sync with the platform team on Tuesday at 10:00 in room B.", category="users/alice"),
            entry("b1", "Weekly sync with the platform team on Tuesday at 10:00.", category="users/bob/work"),
            entry("b2", "Weekly sync with the platform team on Tuesday at 10:00 in room C.", category="users/bob"),
            entry("g1", "Weekly sync with the platform team on Tuesday at 10:00, remote.", category="general"),
        ]
    )
    report = run(
        answer(
            merge("Weekly sync with the platform team on Tuesday at 10:00 in room B.", "a1", "b1"),
            merge("Weekly sync with the platform team on Tuesday at 10:00, remote.", "g1", category="users/bob"),
            merge("Weekly sync with the platform team on Tuesday at 10:00 in room C.", "b2", category="general"),
            merge("Weekly sync with the platform team on Tuesday at 10:00 in room B.", "a1", "a2"),
        ),
        options=SCOPED,
    )
    assert report.counts["cross_scope_refused"] == 3 and report.counts["merged"] == 1, report
    refused = [c.detail for c in report.changes if c.kind == "merge-refused"]
    assert len(refused) == 3 and "scope 'users/alice'" in refused[0] and "scope 'users/bob'" in refused[0]
    assert {"b1", "b2", "g1"} <= live_ids(store) and not {"a1", "a2"} & live_ids(store)
    [merged] = [e for e in store.memories.list_live() if e.id not in {"b1", "b2", "g1"}]
    assert merged.category == "users/alice/work" and "memoryScope" not in merged.metadata  # the option is the truth
    # Offered: the near duplicates of one scope as one cluster, never with another user's or the shared ones.
    clusters = run.requests[0].inputs["clusters"]
    assert clusters and all(len({i[0] for i in c}) == 1 for c in clusters), clusters


def test_without_declared_scopes_categories_other_than_langgraph_namespaces_still_merge(run, store):
    store.memories.put_many(
        [
            entry("a1", "Weekly sync with the platform team on Tuesday at 10:00.", category="users/alice"),
            entry("b1", "Weekly sync with the platform team on Tuesday at 10:00 in room B.", category="users/bob"),
        ]
    )
    report = run(answer(merge("Weekly sync with the platform team on Tuesday at 10:00 in room B.", "a1", "b1")))
    assert report.counts["merged"] == 1 and report.counts.get("cross_scope_refused", 0) == 0, report
