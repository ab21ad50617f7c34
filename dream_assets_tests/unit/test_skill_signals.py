"""The pure signal helpers behind the skill passes: terms, co-use, prefix families, sparse and at-risk detection."""

from datetime import timedelta

import pytest

from dream_assets.model import Skill
from dream_assets.passes.skill_gap_detection import evidence, first_user_messages, recurring_terms, term_key
from dream_assets.passes.skill_signals import (
    at_risk_signals,
    co_used_pairs,
    failure_context,
    is_sparse,
    prefix_clusters,
)
from dream_assets.passes.skill_vocabulary import SkillGapSave
from dream_assets.store.log_records import ConversationTurn, FeedbackEvent, SkillUsageEvent

from ..conftest import NOW


@pytest.mark.parametrize(
    "token,key",
    [
        ("emails", "email"),
        ("email", "email"),
        ("summaries", "summary"),
        ("process", "process"),
        ("status", "status"),
        ("analysis", "analysis"),
        ("bus", "bus"),
    ],
)
def test_plural_forms_fold_into_one_term(token, key):
    assert term_key(token) == key


def test_recurring_terms_count_sessions_not_mentions():
    firsts = {
        "a": "Summarize my emails, all the emails",
        "b": "Please summarize the unread email",
        "c": "Weather?",
    }
    terms = {t.term: t.sessions for t in recurring_terms(firsts)}
    assert terms == {"summarize": ("a", "b"), "email": ("a", "b")}  # a tie shows the shorter form


def test_only_the_first_user_message_of_a_session_counts():
    turns = [
        ConversationTurn(NOW, "s", "assistant", "Hello, how can I help?"),
        ConversationTurn(NOW + timedelta(seconds=2), "s", "user", "Later message"),
        ConversationTurn(NOW + timedelta(seconds=1), "s", "user", "First request"),
    ]
    assert first_user_messages({"s": turns, "empty": []}) == {"s": "First request"}


def test_a_proposal_needs_a_recurring_term_shared_by_two_sessions():
    terms = recurring_terms({"a": "Convert the invoice", "b": "Convert this invoice PDF", "c": "Weather in Lisbon"})
    ok = SkillGapSave(name="finance/convert-invoice", content="Steps.")
    assert evidence(ok, terms) == (["convert", "invoice"], ["a", "b"])
    assert evidence(SkillGapSave(name="weather/lookup", content="Forecast for Lisbon."), terms) == ([], [])


def test_co_used_pairs_rank_by_sessions_then_name_and_skip_unknown_skills():
    sessions = {"1": {"b", "a", "c"}, "2": {"a", "b"}, "3": {"c", "ghost", "a"}}
    assert co_used_pairs(sessions, 2, known={"a", "b", "c"}) == [("a", "b", 2), ("a", "c", 2)]
    assert co_used_pairs(sessions, 0) == []


def test_prefix_clusters_need_two_members_under_a_first_segment():
    names = ["mcp/email", "mcp/calendar", "mcp/deep/files", "travel/visa", "email-summary"]
    assert prefix_clusters(names) == {"mcp": ["mcp/calendar", "mcp/deep/files", "mcp/email"]}


@pytest.mark.parametrize("chars,age_days,sparse", [(199, 8, True), (200, 8, False), (10, 7, False), (10, 6, False)])
def test_sparse_means_short_and_older_than_the_minimum_age(chars, age_days, sparse):
    s = Skill("x", "", "y" * chars, created_at=NOW - timedelta(days=age_days))
    assert is_sparse(s, NOW, max_chars=200, min_age=timedelta(days=7)) is sparse


def test_at_risk_links_sessions_through_usage_and_feedback_skill_names():
    usage = [
        SkillUsageEvent(NOW, "s1", "a"),
        SkillUsageEvent(NOW, "s2", "b"),
        SkillUsageEvent(NOW, "s3", "c"),
    ]
    fb = [
        FeedbackEvent(NOW, "s1", "Correction", "wrong"),
        FeedbackEvent(NOW, "s2", "SessionSummary", "meh", rating="good"),
        FeedbackEvent(NOW, "s3", "SessionSummary", "bad", rating="fair", skill_names=["d", "gone"]),
        FeedbackEvent(NOW, "s4", "Positive", "nice", skill_names=["e"]),
    ]
    risky = at_risk_signals(fb, usage, known={"a", "b", "c", "d", "e"})
    assert set(risky) == {"a", "c", "d"}
    assert [s.text for s in risky["d"]] == ["bad"]


def test_failure_context_folds_repeated_texts_and_keeps_the_newest():
    fb = [FeedbackEvent(NOW - timedelta(days=d), f"s{d}", "Correction", "Double-booked.") for d in (1, 2, 3)]
    fb.append(FeedbackEvent(NOW - timedelta(days=5), "s5", "SessionSummary", "Slow.", rating="poor"))
    usage = [SkillUsageEvent(e.timestamp, e.session_id, "cal") for e in fb]
    lines = failure_context(at_risk_signals(fb, usage, known={"cal"})["cal"])
    assert lines == [
        f"{(NOW - timedelta(days=5)).date()} SessionSummary (poor) in session s5: Slow.",
        f"{(NOW - timedelta(days=1)).date()} Correction ×3 in 3 sessions: Double-booked.",
    ]
    assert failure_context(at_risk_signals(fb, usage, known={"cal"})["cal"], limit=1)[0].startswith("(1 older")
