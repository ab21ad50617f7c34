"""Contradiction sweep: a later fact supersedes the stale one, under host rules the model cannot talk its way past."""

from __future__ import annotations

import json
from datetime import timedelta

import pytest

from dream_assets import recall_index as recall
from dream_assets.cycle_report import _section_of
from dream_assets.gates import gate_status
from dream_assets.input_fingerprints import data_version
from dream_assets.llm.client import ModelClient
from dream_assets.llm.scripted import ScriptedBackend
from dream_assets.model import MemoryEntry
from dream_assets.options_loader import dream_options
from dream_assets.passes.context import PassContext
from dream_assets.passes.contradiction_sweep import (
    REVIEWED_KEY,
    about_earlier_moment,
    judge,
    loss_of,
    plausible_pair,
    review_hash,
    run_contradiction_sweep,
)
from dream_assets.passes.registry import by_name
from dream_assets.passes.runner import run_pass
from dream_assets.save_pipeline import save_memory
from dream_assets.store.ledger import PassLedger
from dream_assets_tests.conftest import NOW, run_scripted, run_without_model
from dream_assets_tests.openai_server import OpenAITestServer, reply


def put(store, content, *, days_ago=10, metadata=None, tags=(), category="people/alice"):
    at = NOW - timedelta(days=days_ago)
    return save_memory(
        store.memories, content, category=category, tags=tags, metadata=metadata or {}, now=at, dedupe=False
    ).entry


def entry(eid, *, subject=None, meta=None, tags=()):
    md = dict(meta or {})
    if subject:
        md["subjectTime"] = subject
    return MemoryEntry(eid, f"text {eid}", "general", tuple(tags), 0.5, NOW, NOW, NOW, 1, md)


def every_pair(ids):
    """Every pair of ``ids`` as offered pairs (a unit test of the other rules offers them all)."""
    return {frozenset((a, b)) for a in ids for b in ids if a != b}


def answer(*pairs):
    return {"supersessions": [{"winnerId": w, "loserId": lo, "reason": "later fact"} for w, lo in pairs]}


@pytest.fixture
def paris_berlin(store):
    paris = put(store, "Alice lives in Paris near the Louvre.", days_ago=40, metadata={"subjectTime": "2024-01"})
    berlin = put(
        store, "Alice moved to Berlin, she lives in Kreuzberg now.", days_ago=2, metadata={"subjectTime": "2024-06"}
    )
    other = put(store, "Bob likes chess.", days_ago=30, category="people/bob")
    return paris, berlin, other


# --- pure rules -----------------------------------------------------------------------------------------------------


def test_hostile_pairs_are_ignored_with_their_reason():
    a, b = entry("a"), entry("b")
    shown = {"a": a, "b": b}
    verdicts = judge(
        [("a", "zz", ""), ("a", "c", ""), ("a", "a", ""), ("", "b", ""), ("a", "  ", ""), ("a", "b", "")],
        shown,
        known={"a", "b", "c"},
        offered=every_pair(shown),
    )
    assert [(v.accepted, v.why) for v in verdicts] == [
        (False, "unknown id zz"),
        (False, "id c was not shown in this call"),
        (False, "self-pair"),
        (False, "empty id"),
        (False, "empty id"),
        (True, "accepted"),
    ]


def test_a_user_correction_is_never_superseded_by_an_agent_claim_but_beats_one():
    claim = entry("claim", subject="2025-05-01")
    fix = entry("fix", subject="2024-01-01", meta={"feedbackKind": "Correction"})
    stated = entry("stated", meta={"source": "user"})
    shown = {e.id: e for e in (claim, fix, stated)}
    verdicts = judge(
        [("claim", "fix", ""), ("claim", "stated", ""), ("fix", "claim", ""), ("stated", "fix", "")],
        shown,
        set(shown),
        offered=every_pair(shown),
    )
    assert [v.accepted for v in verdicts] == [False, False, True, True]
    assert "never superseded" in verdicts[0].why


def test_a_correction_filed_under_feedback_from_user_with_the_tag_correction_is_a_user_correction():
    claim = MemoryEntry("claim", "Rocky plays bass.", "people/rocky", (), 0.5, NOW, NOW, NOW, 1, {})
    fix = MemoryEntry("fix", "Rocky plays drums.", "feedback/from-user", ("correction",), 0.5, NOW, NOW, NOW, 1, {})
    below = fix.with_(id="below", category="feedback/from-user/chat")
    untagged = fix.with_(id="untagged", tags=("music",))
    elsewhere = fix.with_(id="elsewhere", category="feedback/from-agent")
    shown = {e.id: e for e in (claim, fix, below, untagged, elsewhere)}
    verdicts = judge(
        [("claim", i, "") for i in ("fix", "below", "untagged", "elsewhere")],
        shown,
        set(shown),
        offered=every_pair(shown),
    )
    # The correction (and one filed below that category) stands; the same text without the tag, or filed by the
    # agent, is an ordinary entry the model's direction decides.
    assert [v.accepted for v in verdicts] == [False, False, True, True]
    assert "never superseded" in verdicts[0].why


@pytest.mark.parametrize(
    ("winner", "loser", "earlier"),
    [
        ("2024-01", "2024-06-03", True),
        ("2024-06-03", "2024-01", False),
        ("2024", "2024-06", False),  # overlapping moments: no evidence either way
        ("2023-12-31T23:00:00Z", "2024-01-01", True),
        ("not a date", "2024-01-01", False),
    ],
)
def test_subject_time_decides_ties(winner, loser, earlier):
    w, lo = entry("w", subject=winner), entry("l", subject=loser)
    assert about_earlier_moment(w, lo) is earlier
    (verdict,) = judge([("w", "l", "")], {"w": w, "l": lo}, {"w", "l"}, offered=every_pair("wl"))
    assert verdict.accepted is not earlier


# --- the pass -------------------------------------------------------------------------------------------------------


def test_the_stale_fact_is_archived_as_superseded_and_undo_restores_both(store, profile, paris_berlin):
    paris, berlin, _ = paris_berlin
    report, backend = run_scripted(run_contradiction_sweep, profile, store, [answer((berlin.id, paris.id))])
    assert report.status == "completed", report.reason
    assert report.counts["superseded"] == 1
    [request] = backend.requests
    assert all(f"id={request.aliases.get(e.id, e.id)} " in request.prompt for e in (paris, berlin))
    loser, winner = store.memories.get(paris.id), store.memories.get(berlin.id)
    assert loser.is_archived and loser.metadata["supersededBy"] == berlin.id
    assert winner.metadata["supersedes"] == paris.id and not winner.is_archived
    assert all(hit.id != paris.id for hit, _ in recall.search(store.memories, "Alice lives Paris"))
    (change,) = [c for c in report.changes if c.target == paris.id]
    assert change.kind == "archived" and change.detail.startswith(f"superseded by {berlin.id}")
    assert _section_of(change) == "Superseded"  # the cycle report lists it apart from other archives

    result = store.changes.undo_cycle("c1", now=NOW + timedelta(hours=1))
    assert result.ok, result
    assert not store.memories.get(paris.id).is_archived
    assert "supersededBy" not in store.memories.get(paris.id).metadata
    assert "supersedes" not in store.memories.get(berlin.id).metadata


def test_hostile_answer_changes_nothing(store, profile, paris_berlin):
    paris, berlin, other = paris_berlin
    hidden = put(store, "Carol plays the violin.", category="people/carol")
    store.memories.set_metadata({hidden.id: {REVIEWED_KEY: "x"}})  # reviewed? no: a wrong stamp re-opens it
    hostile = {
        "supersessions": [
            {"winnerId": berlin.id, "loserId": "no-such-id"},
            {"winnerId": berlin.id, "loserId": berlin.id},
            {"winnerId": "", "loserId": paris.id},
            {"loserId": paris.id},
            {"winnerId": paris.id, "loserId": berlin.id},  # an earlier moment never supersedes a later one
            {"winnerId": ["not", "an", "id"], "loserId": paris.id},
        ]
    }
    report, _ = run_scripted(
        run_contradiction_sweep,
        profile,
        store,
        [hostile],
        options=dream_options(ContradictionSweepNeighbours=1),
    )
    assert report.status == "completed", report.reason
    assert store.memories.counts()["archived"] == 0
    assert report.counts["superseded"] == 0
    assert report.counts["ignored"] == 5 and report.counts["refused"] == 1


def test_an_id_not_shown_in_the_call_is_ignored(store, profile, paris_berlin):
    paris, berlin, other = paris_berlin
    # Only Berlin is new; Bob's entry is reviewed and not similar, so it is never shown.
    store.memories.set_metadata({e.id: {REVIEWED_KEY: review_hash(e)} for e in (paris, other)})
    report, backend = run_scripted(
        run_contradiction_sweep,
        profile,
        store,
        [answer((berlin.id, other.id))],
        options=dream_options(ContradictionSweepNeighbours=1),
    )
    assert other.id not in [e["id"] for e in backend.requests[0].inputs["entries"]]
    assert not store.memories.get(other.id).is_archived
    assert report.changes[0].detail == f"ignored: id {other.id} was not shown in this call"


def test_an_agent_claim_never_supersedes_a_user_correction(store, profile):
    fix = put(store, "Alice lives in Lyon, not Paris.", days_ago=20, metadata={"feedbackKind": "Correction"})
    claim = put(store, "Alice lives in Paris.", days_ago=1, metadata={"subjectTime": "2026-11"})
    report, _ = run_scripted(run_contradiction_sweep, profile, store, [answer((claim.id, fix.id))])
    assert not store.memories.get(fix.id).is_archived
    assert report.counts["refused"] == 1


def test_unchanged_corpus_makes_no_call_on_a_real_endpoint(store, profile, paris_berlin):
    paris, berlin, _ = paris_berlin
    with OpenAITestServer() as server:
        server.script(reply(json.dumps(answer())))
        options = dream_options(LlmBackend="openai", LlmBaseUrl=server.base_url, LlmModel="m", LlmMaxRetries=0)
        ctx = PassContext(profile, options, NOW, cycle_id="c1", _store=store)
        first = run_pass(by_name("contradiction_sweep"), ctx)
        assert first.status == "completed", first.reason
        assert len(server.requests) == 1
        for hours in (1, 30):
            again = run_pass(
                by_name("contradiction_sweep"),
                PassContext(profile, options, NOW + timedelta(hours=hours), cycle_id=f"c{hours}", _store=store),
            )
            assert again.status == "skipped" and "change gate" in again.reason
        assert len(server.requests) == 1
        # The sensor's view agrees with the pass: nothing to request.
        assert gate_status("contradiction_sweep", profile, options, NOW + timedelta(hours=2)).decision.skip
        # One new entry re-opens the gate.
        put(store, "Alice moved back to Paris in December.", days_ago=0, metadata={"subjectTime": "2026-12"})
        assert not gate_status("contradiction_sweep", profile, options, NOW + timedelta(hours=2)).decision.skip


def test_nothing_new_makes_no_call(store, profile, paris_berlin):
    run_scripted(run_contradiction_sweep, profile, store, [answer()])
    report = run_without_model(
        run_contradiction_sweep, profile, store, options=dream_options(DreamPassChangeGateEnabled=False)
    )
    assert report.status == "skipped" and "no new or changed entry" in report.reason


def test_a_backlog_keeps_the_pass_due(store, profile, paris_berlin):
    options = dream_options(ContradictionSweepMaxEntriesPerCall=1)
    report, _ = run_scripted(run_contradiction_sweep, profile, store, [answer()], options=options)
    assert report.counts["backlog"] == 2
    assert not gate_status("contradiction_sweep", profile, options, NOW + timedelta(minutes=5)).decision.skip


def test_disabled_sweep_is_skipped(store, profile, paris_berlin):
    report = run_without_model(
        run_contradiction_sweep, profile, store, options=dream_options(ContradictionSweepEnabled=False)
    )
    assert report.status == "skipped" and "ContradictionSweepEnabled" in report.reason


def test_the_backlog_is_swept_call_by_call_and_then_the_gate_closes(store, profile, paris_berlin):
    paris, berlin, other = paris_berlin
    options = dream_options(ContradictionSweepMaxEntriesPerCall=1)
    sent, backlogs = [], []
    for n in range(1, 4):
        if gate_status("contradiction_sweep", profile, options, NOW + timedelta(minutes=n)).decision.skip:
            break
        report, backend = run_scripted(
            run_contradiction_sweep, profile, store, [answer()], options=options, now=NOW + timedelta(minutes=n)
        )
        sent += [(r.prompt, r.aliases) for r in backend.requests]
        backlogs.append(report.counts["backlog"])
    # Paris is shown first, Berlin and Bob wait; the next run shows Berlin and reviews Bob, who could contradict
    # neither, without showing him. Each of the others was shown as new exactly once, and once all were reviewed the
    # ledger holds the corpus's data version.
    assert backlogs == [2, 0]
    shown_new = [sum(f"NEW id={names.get(e.id, e.id)} " in p for p, names in sent) for e in (paris, berlin, other)]
    assert shown_new == [1, 1, 0]
    assert PassLedger(profile).get("contradiction_sweep").fingerprint == data_version(profile, "memory_corpus")
    idle = gate_status("contradiction_sweep", profile, options, NOW + timedelta(minutes=10))
    assert idle.decision.skip
    assert run_without_model(run_contradiction_sweep, profile, store, options=options).status == "skipped"


def test_an_entry_saved_while_the_call_runs_keeps_the_pass_due(store, profile, paris_berlin):
    late = []

    class SaveDuringCall(ScriptedBackend):
        def complete(self, request):
            # A later value of Berlin's fact: the host shows an entry only next to one it could supersede.
            late.append(
                put(
                    store,
                    "Alice moved to Munich, she lives in Schwabing now.",
                    days_ago=0,
                    metadata={"subjectTime": "2026-11"},
                )
            )
            return super().complete(request)

    backend = SaveDuringCall([answer()])
    client = ModelClient(backend, profile=profile, options=dream_options())
    ctx = PassContext(profile, dream_options(), NOW, cycle_id="c1", client_factory=lambda: client, _store=store)
    assert run_contradiction_sweep(ctx).status == "completed" and late
    assert not gate_status("contradiction_sweep", profile, dream_options(), NOW + timedelta(minutes=5)).decision.skip
    report, backend = run_scripted(run_contradiction_sweep, profile, store, [answer()], now=NOW + timedelta(minutes=5))
    [request] = backend.requests
    assert report.counts["eligible"] == 1 and f"id={request.aliases.get(late[0].id, late[0].id)} " in request.prompt


# --- the answer and the review stamps commit together; reasons are model text --------------------------------------


@pytest.fixture
def two_pairs(store):
    paris = put(store, "Alice lives in Paris near the Louvre.", days_ago=40, metadata={"subjectTime": "2024-01"})
    berlin = put(
        store, "Alice moved to Berlin, she lives in Kreuzberg.", days_ago=2, metadata={"subjectTime": "2024-06"}
    )
    tea = put(store, "Bob drinks green tea every morning.", days_ago=30, category="people/bob")
    coffee = put(store, "Bob drinks black coffee every morning now.", days_ago=1, category="people/bob")
    return (berlin, paris), (coffee, tea)


def _pairs_answer(*pairs):
    return {"supersessions": [{"winnerId": w.id, "loserId": lo.id, "reason": r} for (w, lo), r in pairs]}


@pytest.mark.parametrize(
    "reason", ["later fact \ud800", "later \x1b[31mfact\x1b[0m"], ids=["lone-surrogate", "ansi-escape"]
)
def test_a_pair_with_an_unusable_reason_is_ignored_and_the_rest_applies(store, profile, two_pairs, reason):
    first, second = two_pairs
    report, _ = run_scripted(
        run_contradiction_sweep, profile, store, [_pairs_answer((first, "moved"), (second, reason))]
    )
    assert report.status == "completed", report.reason
    assert report.counts["superseded"] == 1 and report.counts["ignored"] == 1
    assert store.memories.get(first[1].id).is_archived and not store.memories.get(second[1].id).is_archived
    assert any("supersessions[1].reason contains" in c.detail for c in report.changes)
    assert all(REVIEWED_KEY in store.memories.get(e.id).metadata for e in (*first, *second))  # reviewed, stamped


def test_a_two_megabyte_reason_is_cut_with_a_note(store, profile, two_pairs):
    first, _ = two_pairs
    report, _ = run_scripted(run_contradiction_sweep, profile, store, [_pairs_answer((first, "x" * 2_000_000))])
    assert report.status == "completed", report.reason
    assert report.counts["superseded"] == 1 and report.counts["reasons_cut"] == 1
    kept = store.memories.get(first[1].id).metadata["supersessionReason"]
    assert len(kept) <= 500
    assert any("cut to 500" in line for line in report.lines)


def test_a_failure_while_applying_leaves_neither_changes_nor_stamps_and_the_next_run_retries(
    store, profile, two_pairs, monkeypatch
):
    from dream_assets.store.memory import MemoryStore

    first, second = two_pairs
    real = MemoryStore.supersede
    calls = []

    def dies_on_the_second(self, *args, **kwargs):
        calls.append(args)
        if len(calls) == 2:
            raise RuntimeError("killed while applying")
        return real(self, *args, **kwargs)

    monkeypatch.setattr(MemoryStore, "supersede", dies_on_the_second)
    answer_ = _pairs_answer((first, "moved"), (second, "switched"))
    both = dream_options(ContradictionSweepMaxSupersededShare=1.0)  # one answer may supersede both losers
    with pytest.raises(RuntimeError, match="killed while applying"):
        run_scripted(run_contradiction_sweep, profile, store, [answer_], options=both)
    assert store.memories.counts()["archived"] == 0  # the first pair did not stay applied on its own
    assert all(REVIEWED_KEY not in e.metadata for e in store.memories.list_live())  # nor the stamps
    monkeypatch.setattr(MemoryStore, "supersede", real)
    again, backend = run_scripted(run_contradiction_sweep, profile, store, [answer_], options=both, cycle_id="c2")
    assert again.status == "completed" and again.counts["superseded"] == 2, again.summary
    assert len(backend.requests) == 1  # not "skipped — no new or changed entry"


# --- the removal guard of a supersession ------------------------------------------------------------------------------


def fact(eid, content, **meta):
    return MemoryEntry(eid, content, "people/alice", (), 0.5, NOW, NOW, NOW, 1, dict(meta))


def test_only_a_pair_the_host_offered_as_similar_may_be_a_supersession():
    a = fact("a", "Alice lives in Paris near the Louvre.")
    b = fact("b", "Alice moved to Berlin, she lives in Kreuzberg now.")
    c = fact("c", "Alice lives in Madrid.")
    shown = {e.id: e for e in (a, b, c)}
    verdicts = judge([("b", "a", ""), ("c", "a", "")], shown, set(shown), offered={frozenset(("a", "b"))})
    assert [v.accepted for v in verdicts] == [True, False]
    assert verdicts[1].why.startswith("not a pair the host offered as similar")


@pytest.mark.parametrize(
    ("winner", "loser", "accepted"),
    [
        # A later value of the same fact: Paris and the Louvre replaced by Berlin and Kreuzberg.
        ("Alice moved to Berlin, she lives in Kreuzberg now.", "Alice lives in Paris near the Louvre.", True),
        ("The user now likes pottery more than painting.", "The user likes painting.", True),
        # A date dropped with nothing in its place: a stand-alone loss of a specific.
        ("Alice's review with Dana is in Austin.", "Alice's review with Dana is on 2026-09-14 in Austin.", False),
        # Another fact about the same person: what made the loser true is not in the winner.
        ("The user went hiking with friends.", "The user likes painting sunsets by the lake.", False),
        ("Alice attended a support group on 7 May 2023.", "Alice's badge number is 4471 at the Orinoco lab.", False),
    ],
)
def test_the_winner_must_carry_what_made_the_loser_true(winner, loser, accepted):
    w, lo = fact("w", winner), fact("l", loser)
    assert (loss_of(w, lo) is None) is accepted
    (verdict,) = judge([("w", "l", "")], {"w": w, "l": lo}, {"w", "l"}, offered=every_pair("wl"))
    assert verdict.accepted is accepted
    if not accepted:
        assert verdict.why.startswith("the winner")


# --- the host proposes: only pairs where a contradiction is plausible are shown -------------------------------------


@pytest.mark.parametrize(
    ("a", "b", "plausible"),
    [
        ("Alice lives in Paris.", "Alice moved to Berlin.", True),
        ("Bob's salary is 50,000 a year.", "Bob's salary is 62,000 a year.", True),
        ("Bob eats meat.", "Bob doesn't eat meat anymore.", True),
        # Another fact about the same person: no winner could carry what made the other true.
        ("Alice lives in Paris.", "Alice plays chess with her brother on Sundays.", False),
        # The same fact said again: only the day it was observed differs.
        ("Alice lives in Paris.", "On 3 May 2024, Alice mentioned again that she lives in Paris.", False),
        # Two moments told alike: a later one does not make the earlier untrue, unless a change is said.
        (
            "On 24 July 2023, Caroline is researching adoption agencies to give kids a loving home.",
            "On 21 September 2023, Caroline is researching adoption agencies to give kids a loving home.",
            False,
        ),
        ("On 17 March 2025, Martin had dinner at Luigi's.", "On 15 June 2025, Martin had dinner at Luigi's.", False),
        ("The launch is on 3 May 2026.", "The launch moved to 10 May 2026.", True),
        # Two people doing the same: each text is about its own someone.
        (
            "Caroline is researching adoption agencies to give kids a loving home on 24 July 2023.",
            "On 4 November 2023, Melanie is researching adoption agencies to give kids a loving home.",
            False,
        ),
        ("Caroline lives in Boston.", "Melanie moved to Boston.", False),
        # A thing whose name is the value that changed is still one subject.
        ("The standup is in room Ada.", "The standup is in room Babbage now.", True),
    ],
)
def test_a_pair_is_plausible_when_it_is_one_subject_with_a_differing_specific(a, b, plausible):
    assert plausible_pair(fact("a", a), fact("b", b)) is plausible
    assert plausible_pair(fact("b", b), fact("a", a)) is plausible


def test_only_plausible_pairs_are_shown_and_an_unrelated_entry_is_reviewed_without_being_shown(store, profile):
    paris = put(store, "Alice lives in Paris.", days_ago=40)
    berlin = put(store, "Alice moved to Berlin, she lives in Kreuzberg now.", days_ago=2)
    low = put(store, "Bob's salary is 50,000 a year.", days_ago=40, category="people/bob")
    high = put(store, "Bob's salary is 62,000 a year.", days_ago=2, category="people/bob")
    chess = put(store, "Alice plays chess with her brother on Sundays.", days_ago=20)
    options = dream_options(ContradictionSweepMaxSupersededShare=0.5)  # two of the four entries shown
    report, backend = run_scripted(
        run_contradiction_sweep, profile, store, [answer((berlin.id, paris.id), (high.id, low.id))], options=options
    )
    assert report.status == "completed", report.reason
    [request] = backend.requests
    pairs = {frozenset(p) for p in request.inputs["pairs"]}
    assert pairs == {frozenset((paris.id, berlin.id)), frozenset((low.id, high.id))}
    assert chess.id not in {e["id"] for e in request.inputs["entries"]}
    assert "chess" not in request.prompt
    assert report.counts["superseded"] == 2 and report.counts["alone"] == 1
    # Reviewed all the same: the next run has nothing to ask until the entry changes.
    assert store.memories.get(chess.id).metadata[REVIEWED_KEY] == review_hash(chess)
    assert run_without_model(run_contradiction_sweep, profile, store, options=options).status == "skipped"


def test_entries_with_no_plausible_partner_are_stamped_reviewed_without_a_call(store, profile):
    entries = [
        put(store, "Alice plays chess with her brother on Sundays.", days_ago=20),
        put(store, "Bob grows tomatoes on his balcony.", days_ago=10, category="people/bob"),
        put(store, "Alice likes the violin concertos of Vivaldi.", days_ago=5),
    ]
    report = run_without_model(run_contradiction_sweep, profile, store)
    # A run that reviewed entries by the host's rules did its work, with no question for the model
    assert report.status == "completed" and "without a call" in report.summary and "could contradict" in report.summary
    assert report.counts["alone"] == 3 and not report.counts.get("calls")
    assert all(store.memories.get(e.id).metadata[REVIEWED_KEY] == review_hash(e) for e in entries)
    assert PassLedger(profile).get("contradiction_sweep").fingerprint == data_version(profile, "memory_corpus")
    # A changed entry is re-opened, as before.
    moved = put(store, "Alice moved to Berlin.", days_ago=0)
    assert not store.memories.get(moved.id).metadata.get(REVIEWED_KEY)
    assert not gate_status("contradiction_sweep", profile, dream_options(), NOW + timedelta(minutes=5)).decision.skip


def test_a_failed_call_leaves_the_entries_it_did_not_show_unstamped_too(store, profile, paris_berlin):
    paris, berlin, other = paris_berlin
    report, _ = run_scripted(run_contradiction_sweep, profile, store, [])  # no answer: the call fails
    assert report.status == "failed"
    assert all(REVIEWED_KEY not in store.memories.get(e.id).metadata for e in (paris, berlin, other))


def _people_facts() -> list[str]:
    names = ["Alice", "Bruno", "Chiara", "Dmitri", "Elena", "Farid", "Greta", "Hiro"]
    facts = [
        "{n} lives in a flat near the harbour with two cats.",
        "{n} plays the violin in a community orchestra on weekends.",
        "{n} is training for a marathon and runs every morning.",
        "{n} works as a nurse at the children's hospital.",
        "{n} is allergic to peanuts and carries an inhaler.",
    ]
    return [f.format(n=n) for n in names for f in facts]


def _people_changes() -> list[str]:
    """A later value of each of :func:`_people_facts`, in its order."""
    names = ["Alice", "Bruno", "Chiara", "Dmitri", "Elena", "Farid", "Greta", "Hiro"]
    changes = [
        "{n} now lives in a house by the river with two cats.",
        "{n} plays the cello in a community orchestra on weekends now.",
        "{n} is training for a triathlon and runs every evening now.",
        "{n} works as a nurse at the Mercy hospital now.",
        "{n} is no longer allergic to peanuts.",
    ]
    return [f.format(n=n) for n in names for f in changes]


def test_one_answer_superseding_everything_it_is_shown_is_bounded_and_guarded(store, profile):
    """The first sweep over a corpus where every entry has a later value shows every entry; an answer that declares
    every offered pair a supersession archives no more than the bound, only where the winner carries the loser, and
    says so."""
    for n, text in enumerate(_people_facts()):
        put(store, text, days_ago=40 - n, category="people")
    for text in _people_changes():
        put(store, text, days_ago=0, category="people")
    live_before = {e.id: e for e in store.memories.list_live()}

    def supersede_everything(request):
        return {"supersessions": [{"winnerId": d, "loserId": n, "reason": "newer"} for d, n in request.inputs["pairs"]]}

    report, backend = run_scripted(run_contradiction_sweep, profile, store, supersede_everything)
    assert report.status == "completed", report.reason
    shown = len(backend.requests[0].inputs["entries"])
    assert shown == len(live_before)
    bound = max(1, int(0.25 * shown))
    archived = [e for e in store.memories.list_all() if e.is_archived]
    assert len(archived) <= bound
    for loser in archived:  # each loser's winner is live and carries it
        winner = store.memories.get(loser.metadata["supersededBy"])
        assert winner is not None and not winner.is_archived
        assert loss_of(winner, live_before[loser.id]) is None
    assert report.counts["superseded"] == len(archived)
    assert report.counts["refused"] >= len(backend.requests[0].inputs["pairs"]) - bound


def test_the_bound_refuses_the_rest_and_says_so(store, profile):
    pairs = []
    topics = [
        ("Alice", "lives in Paris", "lives in Berlin"),
        ("Bruno", "drives a red Fiat", "drives a blue Volvo"),
        ("Chiara", "works at Acme", "works at Globex"),
        ("Dmitri", "studies at Oxford", "studies at Cambridge"),
        ("Elena", "plays for Boca", "plays for River"),
        ("Farid", "banks with Monzo", "banks with Revolut"),
    ]
    for name, before, after in topics:
        old = put(store, f"The user's friend {name} {before}.", days_ago=40)
        new = put(store, f"The user's friend {name} {after} now.", days_ago=2)
        pairs.append((new.id, old.id))
    options = dream_options(ContradictionSweepMaxSupersededShare=0.2, ContradictionSweepNeighbours=1)
    report, backend = run_scripted(run_contradiction_sweep, profile, store, [answer(*pairs)], options=options)
    shown = len(backend.requests[0].inputs["entries"])
    bound = max(1, int(0.2 * shown))
    assert report.counts["superseded"] == bound and report.counts["over_bound"] == len(pairs) - bound
    assert sum(1 for e in store.memories.list_all() if e.is_archived) == bound
    assert any(
        line.startswith("WARNING") and "ContradictionSweepMaxSupersededShare=0.2" in line for line in report.lines
    )
    assert f"({len(pairs) - bound} refused over the bound)" in report.summary
    rows = [c for c in report.changes if c.kind == "supersession-rejected"]
    assert len(rows) == len(pairs) - bound and all("over the bound" in c.detail for c in rows)


def test_the_purge_keeps_a_superseded_entry_while_its_winner_is_live(store, profile, paris_berlin):
    from dream_assets.passes.archive_purge import run_archive_purge

    paris, berlin, _ = paris_berlin
    report, _ = run_scripted(run_contradiction_sweep, profile, store, [answer((berlin.id, paris.id))])
    assert report.counts["superseded"] == 1
    later = NOW + timedelta(days=91)
    purge = run_archive_purge(PassContext(profile, dream_options(), later, cycle_id="p1", _store=store))
    assert purge.status == "completed" and purge.counts["purged"] == 0 and purge.counts["kept_superseded"] == 1
    assert store.memories.get(paris.id) is not None
    kept = next(c for c in purge.changes if c.target == paris.id)
    assert berlin.id in kept.detail and "history" in kept.detail
    # Once the winner is archived too and both are past retention, the whole chain goes together.
    store.memories.archive(berlin.id, now=later)
    much_later = later + timedelta(days=91)
    purge = run_archive_purge(PassContext(profile, dream_options(), much_later, cycle_id="p2", _store=store))
    assert purge.counts["purged"] == 2 and store.memories.get(paris.id) is None
