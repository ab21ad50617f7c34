from datetime import timedelta

import pytest

from dream_assets.llm.base import ModelCallError
from dream_assets.llm.directives import load_directive
from dream_assets.model import MemoryEntry
from dream_assets.options_loader import dream_options
from dream_assets.passes.preference_inference import (
    CATEGORY,
    PERMISSION_KEY,
    SPEC,
    run_preference_inference,
    sensitive_terms,
)
from dream_assets.store import warehouse
from dream_assets.store.log_records import ConversationTurn, FeedbackEvent
from dream_assets.store.logs import append_event, read_events

from ..conftest import NOW, run_scripted, run_without_model


def say(profile, text, *, session="s1", minutes_ago=30, role="user"):
    append_event(profile, "conversation", ConversationTurn(NOW - timedelta(minutes=minutes_ago), session, role, text))


def run(profile, store, answers, *, options=None, cycle_id="c1"):
    return run_scripted(run_preference_inference, profile, store, answers, options=options, cycle_id=cycle_id)


def run_without_client(profile, store, options=None):
    return run_without_model(run_preference_inference, profile, store, options=options)


def saves(*items):
    return {"toDelete": [], "toSave": list(items)}


def inferred(store):
    return [e for e in store.memories.list_live() if e.category == CATEGORY]


# ------------------------------------------------------------------ the directive
def test_directive_states_the_sentiment_thresholds(profile, store):
    text, source = load_directive(SPEC.model_call, profile, dream_options())
    assert source == "built-in"
    assert "Very irritated" in text and "1 occurrence" in text
    assert "Mildly frustrated" in text and "2 occurrences" in text
    assert "casual suggestion" in text and "3 or more occurrences" in text
    say(profile, "Stop writing prose. Bullet points!")
    _, backend = run(profile, store, [saves()])
    assert backend.requests[0].system == text


# ------------------------------------------------------------------ the permission flag
def test_security_preference_is_flagged_even_when_the_model_omits_the_flag(profile, store):
    say(profile, "Never put my bank details in an email draft, I said NEVER.")
    report, _ = run(
        profile,
        store,
        [
            saves(
                {
                    "content": "Never include the user's bank details in email drafts.",
                    "category": "user-preferences/inferred",
                    "tags": ["inferred"],
                }
            )
        ],
    )
    [entry] = inferred(store)
    assert entry.metadata[PERMISSION_KEY] == "true"
    assert report.counts["host_flagged"] == 1 and report.counts["flagged"] == 1


def test_flag_is_kept_when_the_model_sets_it(profile, store):
    say(profile, "Ask me before you tell anyone the office door code.")
    run(
        profile,
        store,
        [
            saves(
                {
                    "content": "Ask before sharing the office door code with anyone.",
                    "metadata": {PERMISSION_KEY: True},
                }
            )
        ],
    )
    [entry] = inferred(store)
    assert entry.metadata[PERMISSION_KEY] == "true"
    assert sensitive_terms(entry.content) == []  # the model alone decided it


def test_ordinary_preference_carries_no_permission_flag(profile, store):
    say(profile, "Could you use 24-hour times?")
    report, _ = run(profile, store, [saves({"content": "Use 24-hour times in replies."})])
    [entry] = inferred(store)
    assert PERMISSION_KEY not in entry.metadata
    assert report.counts["flagged"] == 0


def test_model_cannot_unset_the_flag_on_sensitive_content(profile, store):
    say(profile, "Use my password manager for logins.")
    run(
        profile,
        store,
        [
            saves(
                {
                    "content": "Store new passwords in the password manager.",
                    "metadata": {PERMISSION_KEY: "false"},
                }
            )
        ],
    )
    assert inferred(store)[0].metadata[PERMISSION_KEY] == "true"


@pytest.mark.parametrize(
    "text",
    [
        "Never email the Wi-Fi password.",
        "Rotate the API key monthly.",
        "Keep the GitHub token out of chat.",
        "Enable 2FA on new accounts.",
        "Always use MFA prompts.",
        "Do not share credentials in Slack.",
        "Ask before any payment over 50 EUR.",
        "Wire transfers need a call first.",
        "Invoices need my approval first.",
        "Don't invest in crypto on my behalf.",
        "Budget approval goes through Priya.",
        "Ask before purchasing software.",
        "Use the company credit card for travel.",
        "Never read out my bank PIN.",
        "Keep secrets in the vault.",
        "Sign in with SSO only.",
        "Security reviews come before releases.",
        "Always buy refundable tickets.",
    ],
)
def test_host_classifier_flags_security_credentials_and_money(text):
    assert sensitive_terms(text), text


@pytest.mark.parametrize(
    "text",
    [
        "Use 24-hour times in replies.",
        "Write weekly reports as bullet points.",
        "Keep answers short.",
        "Prefer ripgrep over grep.",
        "Make flashcards with one fact per card.",
        "Transfer meeting notes to Notion.",
        "Pin the agenda at the top of the document.",
        "Summaries go first, details after.",
    ],
)
def test_host_classifier_leaves_ordinary_preferences_alone(text):
    assert sensitive_terms(text) == [], text


# ------------------------------------------------------------------ what is saved
def test_category_and_inferred_tag_are_forced_whatever_the_model_says(profile, store):
    say(profile, "Bullet points, not prose. Again.")
    run(
        profile,
        store,
        [
            saves(
                {
                    "content": "Write reports as bullet points, not prose.",
                    "category": "general",
                    "tags": ["formatting"],
                }
            )
        ],
    )
    [entry] = inferred(store)
    assert entry.category == "user-preferences/inferred"
    assert set(entry.tags) == {"inferred", "formatting"}


def test_to_delete_in_a_preference_answer_is_ignored(profile, store):
    store.memories.put(
        MemoryEntry(
            id="keep",
            content="The user's manager is Priya Raman.",
            category="people",
            tags=(),
            importance=0.5,
            created_at=NOW,
            updated_at=NOW,
            last_seen_at=NOW,
        )
    )
    say(profile, "Keep answers short please.")
    report, _ = run(profile, store, [{"toDelete": ["keep"], "toSave": []}])
    assert store.memories.get("keep").archived_at is None
    assert report.counts["deletes_ignored"] == 1
    assert any("only adds" in line for line in report.lines)


def test_a_preference_seen_again_reinforces_its_memory_through_save_time_dedup(profile, store):
    say(profile, "Use 24-hour times.")
    run(profile, store, [saves({"content": "Use 24-hour times in replies."})], cycle_id="c1")
    say(profile, "24-hour times, please!")
    report, _ = run(profile, store, [saves({"content": "Use 24-hour times in replies."})], cycle_id="c2")
    [entry] = inferred(store)
    assert entry.reinforcement_count == 2
    assert report.counts["reinforced"] == 1 and report.counts["created"] == 0
    [change] = store.changes.list("c2")
    assert change.kind == "updated" and change.before["reinforcement_count"] == 1


@pytest.mark.parametrize("existing_meta", [{}, {PERMISSION_KEY: "false"}])
def test_permission_flag_survives_a_merge_into_an_unflagged_memory(profile, store, existing_meta):
    store.memories.put(
        MemoryEntry(
            id="old",
            content="Never include the user's bank details in email drafts.",
            # The category the pass files inferred preferences under: only an entry of the save's category absorbs it.
            category="user-preferences/inferred",
            tags=(),
            importance=0.5,
            created_at=NOW,
            updated_at=NOW,
            last_seen_at=NOW,
            metadata=dict(existing_meta),
        )
    )
    say(profile, "NEVER put my bank details in emails.")
    report, _ = run(profile, store, [saves({"content": "Never include the user's bank details in email drafts."})])
    assert report.counts["reinforced"] == 1
    assert store.memories.get("old").metadata[PERMISSION_KEY] == "true"


def test_recent_feedback_is_sent_and_older_feedback_is_not(profile, store):
    say(profile, "Shorter, please.")
    append_event(profile, "feedback", FeedbackEvent(NOW - timedelta(days=3), "s1", "Correction", "Too long again"))
    append_event(profile, "feedback", FeedbackEvent(NOW - timedelta(days=10), "s0", "Correction", "Old complaint"))
    _, backend = run(profile, store, [saves()])
    [request] = backend.requests
    assert [f["text"] for f in request.inputs["feedback"]] == ["Too long again"]
    assert "Too long again" in request.prompt and "Old complaint" not in request.prompt
    assert "Shorter, please." in request.prompt


# ------------------------------------------------------------------ the conversation log
def test_conversation_log_is_cleared_after_a_failed_call_and_kept_in_the_warehouse(profile, store):
    say(profile, "Bullet points, not prose.", minutes_ago=40)
    say(profile, "Noted.", minutes_ago=39, role="assistant")
    report, backend = run(profile, store, [ModelCallError("connection refused")])
    assert report.status == "failed" and len(backend.requests) == 1
    assert read_events(profile, "conversation").events == []
    assert profile.conversation_log_path.read_bytes() == b""
    archived = warehouse.read_window(profile, "conversation", NOW - timedelta(days=1), NOW)
    assert [r["content"] for r in archived] == ["Bullet points, not prose.", "Noted."]
    assert warehouse.read_day(profile, "conversation", (NOW - timedelta(minutes=40)).date())


def test_conversation_log_is_cleared_after_an_unusable_answer(profile, store):
    say(profile, "Bullet points, not prose.")
    report, _ = run(profile, store, ["I think the user likes bullet points."])
    assert report.status == "failed"
    assert read_events(profile, "conversation").events == []


def test_turn_written_during_the_call_stays_for_the_next_cycle(profile, store):
    say(profile, "Keep answers short.")

    def answer(request):
        say(profile, "A turn written while the model was thinking.", session="s2", minutes_ago=1)
        return saves()

    report, _ = run(profile, store, answer)
    assert report.counts["conversation_lines_cleared"] == 1
    assert [t.content for t in read_events(profile, "conversation").events] == [
        "A turn written while the model was thinking."
    ]


def test_empty_conversation_log_makes_no_call(profile, store):
    profile.conversation_log_path.write_text("")
    report = run_without_client(profile, store)
    assert report.status == "skipped" and "empty" in report.reason


def test_missing_conversation_log_skips_with_a_reason(profile, store):
    report = run_without_client(profile, store)
    assert report.status == "skipped" and "no conversation log" in report.reason


def test_unreadable_conversation_lines_make_no_call_but_are_moved_to_the_warehouse(profile, store):
    profile.conversation_log_path.write_text('{"timestamp": "yesterday"}\nnot json\n')
    report = run_without_client(profile, store)
    assert report.status == "skipped" and "no readable turns" in report.reason
    assert profile.conversation_log_path.read_bytes() == b""
    assert len(warehouse.read_unknown(profile, "conversation")) == 2


def test_disabled_pass_skips_and_leaves_the_log_alone(profile, store):
    say(profile, "Keep answers short.")
    report = run_without_client(profile, store, dream_options(PreferenceInferenceEnabled=False))
    assert report.status == "skipped" and "PreferenceInferenceEnabled" in report.reason
    assert len(read_events(profile, "conversation").events) == 1


# ------------------------------------------------------------------ reversibility
def test_undoing_the_cycle_removes_created_preferences_and_restores_reinforced_ones(profile, store):
    store.memories.put(
        MemoryEntry(
            id="old",
            content="Use 24-hour times in replies.",
            category=CATEGORY,
            tags=("inferred",),
            importance=0.6,
            created_at=NOW - timedelta(days=9),
            updated_at=NOW - timedelta(days=9),
            last_seen_at=NOW - timedelta(days=9),
        )
    )
    before = store.memories.get("old")
    say(profile, "24h times! And never share my bank PIN.")
    run(
        profile,
        store,
        [
            saves(
                {"content": "Use 24-hour times in replies."},
                {"content": "Never reveal the user's bank PIN to anyone."},
            )
        ],
        cycle_id="pref-1",
    )
    created = [e for e in inferred(store) if e.id != "old"]
    assert len(created) == 1 and store.memories.get("old").reinforcement_count == 2

    result = store.changes.undo_cycle("pref-1", now=NOW + timedelta(minutes=5))
    assert result.ok
    assert store.memories.get(created[0].id).archived_at is not None
    assert store.memories.get("old") == before


# ------------------------------------------------------------------ hostile model text
def test_a_hostile_item_is_rejected_with_its_reason_and_the_rest_is_saved(profile, store):
    say(profile, "Use metric units, always. I said metric!")
    report, _ = run(
        profile,
        store,
        [
            saves(
                {"content": "Bad \ud800 surrogate preference"},
                {"content": "NUL\x00inside"},
                {"content": "x" * 40_000},
                {"content": "Ok text", "tags": ["fine", "\ud800"]},
                {"content": "The user wants metric units in every answer.", "tags": ["units"]},
            )
        ],
    )
    assert report.status == "completed"
    assert [e.content for e in inferred(store)] == ["The user wants metric units in every answer."]
    assert report.counts["rejected"] == 4 and report.counts["created"] == 1
    rejected = [c for c in report.changes if c.kind == "preference-rejected"]
    assert len(rejected) == 4
    assert "surrogate" in rejected[0].detail and "NUL" in rejected[1].detail and "over the limit" in rejected[2].detail
    # Nothing half written: one change row, for the one saved preference.
    assert [c.kind for c in store.changes.list("c1")] == ["created"]
