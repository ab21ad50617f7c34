"""Where an archived entry went is written by the change that archived it (``successor_id``, ``successor_how``), for
every way an entry is archived into another: a merge, a merge equal to a live entry, the exact-duplicate fold, a
supersession, a skill merge, and a review set applied later. ``memory get`` and ``history`` read that field, never
the reason's text."""

from __future__ import annotations

from datetime import timedelta

import pytest

from dream_assets import agent_memory as am
from dream_assets import cycle_ids
from dream_assets.changes_model import Actor, ChangeRow, SuccessorHow
from dream_assets.cli import main
from dream_assets.folders.transfer import export_jsonl, import_jsonl
from dream_assets.options_loader import dream_options
from dream_assets.passes.contradiction_sweep import run_contradiction_sweep
from dream_assets.passes.skill_consolidation import run_skill_consolidation
from dream_assets.profile import AgentProfile
from dream_assets.store import open_store
from dream_assets.store.connection import close_all

from ..conftest import NOW, run_scripted
from ..e2e.test_review import _run as run_pass_in_mode
from ..e2e.test_review import two_demos  # noqa: F401 (a fixture)
from .test_contradiction_sweep import answer as sweep_answer
from .test_contradiction_sweep import paris_berlin  # noqa: F401 (a fixture)
from .test_folder_transfer import dreamed  # noqa: F401 (a fixture)
from .test_memory_consolidation import Run, answer, entry, live_ids, merge
from .test_memory_consolidation_quality import FOLD
from .test_skill_passes import catalog, context, scripted, skill, some_usage


@pytest.fixture
def run(profile, store) -> Run:
    return Run(profile, store)


def _went(store, cycle: str = "c1", target_type: str = "memory") -> dict[str, tuple[str | None, SuccessorHow]]:
    """Each target the cycle archived, with the successor its row names."""
    return {
        r.target_id: (r.successor_id, r.successor_how)
        for r in store.changes.list(cycle)
        if r.kind == "archived" and r.target_type == target_type
    }


def test_a_merge_names_the_new_entry_its_sources_went_into(run, store, profile):
    store.memories.put_many(
        [
            entry("a", "The user's manager is Priya Raman."),
            entry("b", "User's manager: Priya Raman."),
        ]
    )
    run(answer(merge("The user's manager is Priya Raman.", "a", "b", category="people/work")))
    (new,) = [e for e in store.memories.list_live()]
    assert _went(store) == {"a": (new.id, SuccessorHow.MERGED_INTO), "b": (new.id, SuccessorHow.MERGED_INTO)}
    got = am.get(profile, "a", now=NOW)
    assert (got.merged_into, got.superseded_by, got.current_id) == (new.id, None, new.id)
    assert [e.event for e in am.history(profile, "a", now=NOW).events][-1] == "merged out"


def test_a_merge_equal_to_a_live_entry_names_that_entry_as_folded_into(run, store, profile):
    store.memories.put_many(
        [
            entry("keep", "Jon works at the Fenwick bank.", created_days=50, reinforced=4, reviewed=True),
            entry("s1", "Jon works at the Fenwick bank now.", created_days=10),
            entry("s2", "Jon said again that he works at the Fenwick bank.", created_days=5),
        ]
    )
    run(answer(merge("Jon works at the Fenwick bank.", "s1", "s2")))
    assert live_ids(store) == {"keep"}
    assert _went(store) == {"s1": ("keep", SuccessorHow.FOLDED_INTO), "s2": ("keep", SuccessorHow.FOLDED_INTO)}
    assert am.get(profile, "s2", now=NOW).merged_into == "keep"


def test_an_exact_duplicate_names_the_entry_it_was_folded_into(run, store, profile):
    store.memories.put_many(
        [entry("old", "The gate code is 5521.", created_days=9), entry("new", "the gate code is 5521", created_days=1)]
    )
    run(answer(), options=FOLD)
    assert _went(store) == {"new": ("old", SuccessorHow.DUPLICATE_OF)}
    got = am.get(profile, "new", now=NOW)
    assert (got.merged_into, got.current_id) == ("old", "old")


def test_a_supersession_names_the_winner(store, profile, paris_berlin):  # noqa: F811
    paris, berlin, _ = paris_berlin
    report, _ = run_scripted(run_contradiction_sweep, profile, store, [sweep_answer((berlin.id, paris.id))])
    assert report.counts["superseded"] == 1
    assert _went(store) == {paris.id: (berlin.id, SuccessorHow.SUPERSEDED_BY)}
    got = am.get(profile, paris.id, now=NOW)
    assert (got.merged_into, got.superseded_by, got.current_id) == (None, berlin.id, berlin.id)
    assert [e.event for e in am.history(profile, paris.id, now=NOW).events][-1] == "superseded"
    # the undo says what it did from the field too
    result = store.changes.undo_cycle("c1", now=NOW + timedelta(hours=1))
    assert result.done("unsuperseded") == [f"memory {paris.id}"]


def test_a_skill_merge_names_the_skill_its_sources_went_into(profile, store, options):
    catalog(store, skill("summarize-emails"), skill("email-summary", "Summarise emails."), skill("mcp/email"))
    some_usage(profile)
    merged = {
        "name": "email/summarize-inbox",
        "summary": "Summarise an inbox",
        "content": "List senders, asks and deadlines as bullet points with action items.",
        "sourceNames": ["summarize-emails", "email-summary"],
    }
    client, _ = scripted(profile, options, [{"toSave": [merged]}])
    run_skill_consolidation(context(profile, store, client))
    assert _went(store, target_type="skill") == {
        "summarize-emails": ("email/summarize-inbox", SuccessorHow.MERGED_INTO),
        "email-summary": ("email/summarize-inbox", SuccessorHow.MERGED_INTO),
    }


def test_a_save_time_absorb_archives_nothing_and_names_no_successor(profile):
    first = am.save(profile, "The staging database is pg-staging-2.", now=NOW)
    again = am.save(profile, "The staging database is pg-staging-2.", now=NOW + timedelta(minutes=1))
    assert again.outcome == "reinforced" and again.id == first.id
    rows = open_store(profile).changes.for_target("memory", first.id)
    assert [r.kind for r in rows] == ["created", "updated"]
    assert {(r.actor, r.cycle_id, r.successor_how) for r in rows} == {
        (Actor.AGENT_SAVE, cycle_ids.agent_day(NOW), SuccessorHow.NONE)
    }


def test_a_forget_whose_reason_names_another_entry_has_no_successor(profile):
    kept = am.save(profile, "The office is on floor 3.", now=NOW)
    gone = am.save(profile, "Printer jams daily on floor 3, report to IT.", now=NOW)
    result = am.forget(profile, gone.id, reason=f"duplicate, merged into {kept.id} by hand", now=NOW)
    assert result.cycle_id == cycle_ids.forget(NOW, gone.id)
    got = am.get(profile, gone.id, now=NOW)
    assert (got.status, got.merged_into, got.superseded_by, got.current_id) == ("archived", None, None, None)
    assert [e.event for e in am.history(profile, gone.id, now=NOW).events] == ["created", "archived"]
    (row,) = [r for r in open_store(profile).changes.list(result.cycle_id)]
    assert (row.actor, row.pass_name, row.successor_how) == (Actor.AGENT_FORGET, "forget", SuccessorHow.NONE)


def _archive_by_hand(profile, entry_id: str, *, reason: str, successor_id: str | None, how: SuccessorHow) -> None:
    store = open_store(profile)
    with store.transaction():
        before = store.memories.get(entry_id)
        after = store.memories.archive(entry_id, now=NOW)
        store.changes.record(
            ChangeRow(
                cycle_id="c1",
                pass_name="memory_consolidation",
                kind="archived",
                target_type="memory",
                target_id=entry_id,
                before=before,
                after=after,
                reason=reason,
                successor_id=successor_id,
                successor_how=how,
            ),
            now=NOW,
        )


def test_memory_get_reads_where_an_entry_went_from_the_field_not_the_reason(profile):
    a = am.save(profile, "Kestrel ships on Fridays from dock 4.", now=NOW).id
    b = am.save(profile, "The VPN gateway is vpn1.example.org.", now=NOW).id
    c = am.save(profile, "Office wifi password rotates monthly.", now=NOW).id
    d = am.save(profile, "Heron load tests run against staging every Monday.", now=NOW).id
    _archive_by_hand(profile, a, reason=f"superseded by {b}: says so", successor_id=c, how=SuccessorHow.MERGED_INTO)
    got = am.get(profile, a, now=NOW)
    assert (got.merged_into, got.superseded_by, got.current_id) == (c, None, c)
    assert got.archived_reason == f"superseded by {b}: says so"  # the reason stays the person's text
    assert am.history(profile, a, now=NOW).events[-1].event == "merged out"
    _archive_by_hand(profile, d, reason=f"merged into {b}", successor_id=None, how=SuccessorHow.NONE)
    got = am.get(profile, d, now=NOW)
    assert (got.merged_into, got.superseded_by, got.current_id) == (None, None, None)
    assert am.history(profile, d, now=NOW).events[-1].event == "archived"


def test_a_review_set_applied_later_names_where_its_archived_entries_went(two_demos):  # noqa: F811
    auto, reviewed = two_demos
    run_pass_in_mode(auto, "memory_consolidation", "auto", "c1")
    run_pass_in_mode(reviewed, "memory_consolidation", "review", "c1")
    assert main(["apply", "--profile", str(reviewed.root), "--cycle", "c1"]) == 0
    close_all()
    went_auto, went_reviewed = _went(open_store(auto)), _went(open_store(reviewed))
    assert any(how is not SuccessorHow.NONE for _, how in went_auto.values())  # the demo has folds and merges
    assert {t: how for t, (_, how) in went_reviewed.items()} == {t: how for t, (_, how) in went_auto.items()}
    live = {e.id for e in open_store(reviewed).memories.list_live()}
    for target, (_, how) in went_reviewed.items():
        if how is not SuccessorHow.NONE:
            assert am.get(reviewed, target, now=NOW).current_id in live


def test_cycle_ids_keep_the_shapes_stored_before():
    assert cycle_ids.agent_day(NOW) == "agent-2026-11-30"
    assert cycle_ids.forget(NOW, "0123456789abcdef") == "forget-20261130T120000000000Z-0123456789ab"
    assert cycle_ids.restore(NOW, "0123456789abcdef") == "restore-20261130T120000Z-0123456789ab"
    assert cycle_ids.save("0123456789abcdef") == "save-0123456789ab"
    assert cycle_ids.undo("c1") == "undo-c1" and cycle_ids.undone("undo-c1") == "c1"
    assert cycle_ids.undone("c1") is None
    shapes = {
        "agent-2026-11-30": Actor.AGENT_SAVE,
        "forget-20261130T120000000000Z-0123456789ab": Actor.AGENT_FORGET,
        "save-0123456789ab": Actor.SAVE_DEDUP,
        "restore-20261130T120000Z-0123456789ab": Actor.RESTORE,
        "undo-save-0123456789ab": Actor.UNDO,
        "3f2b9c1e-5d0a-4c39-9d6e-0c1b2a3d4e5f": Actor.PASS,
    }
    assert {c: cycle_ids.actor_of(c) for c in shapes} == shapes


@pytest.mark.parametrize(
    "fields,why",
    [
        ({"pass_name": "undo", "actor": Actor.PASS}, "a pass's row needs the pass's name"),
        ({"pass_name": "memory_consolidation", "actor": Actor.UNDO}, "is recorded under pass_name 'undo'"),
        ({"pass_name": "p", "successor_id": "x"}, "go together"),
        ({"pass_name": "p", "successor_how": SuccessorHow.MERGED_INTO}, "go together"),
        ({}, "give actor or pass_name"),
        ({"pass_name": "p", "target_type": "note"}, "field target_type"),
    ],
)
def test_a_change_row_that_contradicts_itself_is_refused_naming_the_field(fields, why):
    base = dict(cycle_id="c1", kind="archived", target_type="memory", target_id="x1", before=None, after=None)
    with pytest.raises(ValueError, match=why):
        ChangeRow(**{**base, "reason": "r", **fields})


def test_dream_restore_is_recorded_by_its_actor_under_its_cycle(profile, capsys):
    entry_id = am.save(profile, "The printer on floor 3 is broken.", now=NOW).id
    am.forget(profile, entry_id, reason="fixed", now=NOW)
    later = NOW + timedelta(hours=1)
    assert main(["restore", "--profile", str(profile.root), "--id", entry_id, "--now", later.isoformat()]) == 0
    cycle = cycle_ids.restore(later, entry_id)
    assert f"recorded as cycle {cycle}" in capsys.readouterr().out
    (row,) = open_store(profile, dream_options()).changes.list(cycle)
    assert (row.actor, row.pass_name, row.kind) == (Actor.RESTORE, "restore", "restored")


def test_an_export_imported_elsewhere_says_where_each_archived_entry_went(dreamed, tmp_path):  # noqa: F811
    """The export's change lines carry the reasons; the import gives its rows their successors from them."""
    path = tmp_path / "export.jsonl"
    path.write_text(export_jsonl(dreamed, archived=True), encoding="utf-8")
    copy = AgentProfile(tmp_path / "agents" / "copy").ensure()
    import_jsonl(copy, path)

    def went(profile) -> dict[str, tuple]:
        archived = [e.id for e in open_store(profile).memories.list_all() if e.is_archived]
        return {i: (r.merged_into, r.superseded_by, r.current_id) for i in archived for r in [am.get(profile, i)]}

    assert any(merged for merged, _, _ in went(dreamed).values())  # the cycle merged
    assert went(copy) == went(dreamed)
