"""A conversation pass whose model call failed retries next cycle over the turns it did not process, read back from
the log warehouse after the conversation log was cleared (issue "Failures are failures")."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from dream_assets.llm.base import ModelCallError
from dream_assets.llm.busy import model_busy
from dream_assets.options_loader import dream_options
from dream_assets.passes.context import PassContext
from dream_assets.passes.conversation_input import PENDING_MAX_AGE
from dream_assets.passes.preference_inference import CATEGORY, run_preference_inference
from dream_assets.passes.skill_gap_detection import run_skill_gap_detection
from dream_assets.store.ledger import PassLedger
from dream_assets.store.log_records import ConversationTurn
from dream_assets.store.logs import append_event, read_events

from ..conftest import NOW, run_scripted

DAY = timedelta(days=1)
NOTHING = {"toDelete": [], "toSave": []}
INVOICE_SKILL = {
    "name": "finance/convert-invoice",
    "summary": "Convert an invoice PDF into a spreadsheet row",
    "content": "1. Open the invoice PDF.\n2. Read vendor, date and amount.\n3. Append a spreadsheet row.",
}


def say(profile, text, *, at, session="s1", role="user"):
    append_event(profile, "conversation", ConversationTurn(at, session, role, text))


def preference(profile, store, answers, now, options=None):
    return run_scripted(
        run_preference_inference,
        profile,
        store,
        answers,
        now=now,
        options=options,
        cycle_id=f"pref-{now:%j%H}",
    )


def skill_gap_detection(profile, store, answers, now):
    return run_scripted(run_skill_gap_detection, profile, store, answers, now=now, cycle_id=f"gap-{now:%j%H}")


@pytest.mark.parametrize("failure", [ModelCallError("connection refused"), "The user likes bullet points, I think."])
def test_preference_inference_retries_a_failed_cycles_turns_from_the_warehouse(profile, store, failure):
    say(profile, "Stop writing prose, I want bullet points!", at=NOW - timedelta(hours=3))
    say(profile, "Noted.", at=NOW - timedelta(hours=3) + timedelta(seconds=5), role="assistant")
    first, _ = preference(profile, store, [failure], NOW)
    assert first.status == "failed"
    assert read_events(profile, "conversation").events == []  # cleared all the same (spec)

    say(profile, "Always answer in English.", at=NOW + DAY - timedelta(hours=1), session="s2")
    save = {"toDelete": [], "toSave": [{"content": "Answer with bullet points, not prose."}]}
    second, backend = preference(profile, store, [save], NOW + DAY)
    assert second.status == "completed" and second.counts["turns_retried"] == 2
    prompt = backend.requests[0].prompt
    assert "Stop writing prose, I want bullet points!" in prompt and "Always answer in English." in prompt
    assert [e.content for e in store.memories.list_live() if e.category == CATEGORY] == [
        "Answer with bullet points, not prose."
    ]

    say(profile, "Use metric units.", at=NOW + 2 * DAY - timedelta(hours=1), session="s3")
    third, backend = preference(profile, store, [NOTHING], NOW + 2 * DAY)
    prompt = backend.requests[0].prompt
    assert "Use metric units." in prompt
    assert "bullet points" not in prompt and "Always answer in English." not in prompt
    assert third.counts["turns_retried"] == 0


def test_a_deferred_call_is_retried_like_a_failed_one(profile, store):
    say(profile, "Keep answers short.", at=NOW - timedelta(hours=2))
    options = dream_options(BusyMaxWait=timedelta(0))
    with model_busy(profile, now=datetime.now(UTC), heartbeat_every=None):
        first, backend = preference(profile, store, [NOTHING], NOW, options=options)
    assert first.status == "deferred" and backend.requests == []
    second, backend = preference(profile, store, [NOTHING], NOW + DAY)
    assert "Keep answers short." in backend.requests[0].prompt


def test_each_conversation_pass_keeps_its_own_unprocessed_turns(profile, store):
    say(
        profile,
        "Convert the attached invoice into the expenses spreadsheet",
        at=NOW - timedelta(hours=5),
        session="a",
    )
    say(profile, "Please convert this invoice PDF into a row", at=NOW - timedelta(hours=4), session="b")
    gap, _ = skill_gap_detection(profile, store, [ModelCallError("connection refused")], NOW)
    pref, _ = preference(profile, store, [NOTHING], NOW)  # succeeds, and clears the log
    assert (gap.status, pref.status) == ("failed", "completed")
    assert read_events(profile, "conversation").events == []
    ledger = PassLedger(profile)
    assert ledger.pending("skill_gap_detection") is not None and ledger.pending("preference_inference") is None

    say(profile, "What's the weather in Lisbon?", at=NOW + DAY - timedelta(hours=1), session="c")
    gap, backend = skill_gap_detection(profile, store, [{"toSave": [INVOICE_SKILL]}], NOW + DAY)
    assert gap.status == "completed" and {s.name for s in store.skills.list()} == {"finance/convert-invoice"}
    prompt = backend.requests[0].prompt
    assert "Convert the attached invoice" in prompt and "weather in Lisbon" in prompt
    pref, backend = preference(profile, store, [NOTHING], NOW + DAY)
    assert "Convert the attached invoice" not in backend.requests[0].prompt  # preference had processed them

    say(profile, "Convert the March invoice too", at=NOW + 2 * DAY - timedelta(hours=2), session="d")
    say(profile, "Convert April's invoice as well", at=NOW + 2 * DAY - timedelta(hours=1), session="e")
    gap, backend = skill_gap_detection(profile, store, [NOTHING], NOW + 2 * DAY)
    prompt = backend.requests[0].prompt
    assert "March invoice" in prompt and "Convert the attached invoice" not in prompt
    assert PassLedger(profile).pending("skill_gap_detection") is None


def test_turns_left_unprocessed_longer_than_the_limit_are_given_up_with_a_warning(profile, store):
    say(profile, "Never schedule meetings before 10am.", at=NOW - timedelta(hours=1))
    preference(profile, store, [ModelCallError("connection refused")], NOW)
    later = NOW + PENDING_MAX_AGE + DAY
    say(profile, "Sign emails with my first name only.", at=later - timedelta(hours=1))
    report, backend = preference(profile, store, [ModelCallError("connection refused")], later)
    assert "meetings before 10am" not in backend.requests[0].prompt
    assert any("older than 7 days and are given up" in line for line in report.lines)
    assert PassLedger(profile).pending("preference_inference").since == later - timedelta(hours=1)


def test_a_pass_that_cannot_write_its_change_row_saves_nothing(profile, store, monkeypatch):
    say(profile, "Use 24-hour times.", at=NOW - timedelta(hours=1))

    def refuse(*args, **kwargs):
        raise RuntimeError("change log unavailable")

    monkeypatch.setattr(store.changes, "record", refuse)
    answer = {"toDelete": [], "toSave": [{"content": "Use 24-hour times in replies."}]}
    with pytest.raises(RuntimeError, match="change log unavailable"):
        preference(profile, store, [answer], NOW)
    assert store.memories.list_live() == []  # the save was rolled back with its row
    assert PassLedger(profile).pending("preference_inference") is not None  # and the turns are retried


def test_a_skill_created_by_gap_detection_is_rolled_back_without_its_change_row(profile, store, monkeypatch):
    say(
        profile,
        "Convert the attached invoice into the expenses spreadsheet",
        at=NOW - timedelta(hours=5),
        session="a",
    )
    say(profile, "Please convert this invoice PDF into a row", at=NOW - timedelta(hours=4), session="b")

    def refuse(*args, **kwargs):
        raise RuntimeError("change log unavailable")

    monkeypatch.setattr(store.changes, "record", refuse)
    with pytest.raises(RuntimeError, match="change log unavailable"):
        skill_gap_detection(profile, store, [{"toSave": [INVOICE_SKILL]}], NOW)
    assert store.skills.list(include_archived=True) == []
    monkeypatch.undo()
    ctx = PassContext(profile, dream_options(), NOW, _store=store)
    assert ctx.ledger.pending("skill_gap_detection") is not None
