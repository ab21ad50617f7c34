from datetime import timedelta

import pytest

from dream_assets.llm.base import ModelCallError
from dream_assets.model import MemoryEntry
from dream_assets.options_loader import dream_options
from dream_assets.passes.tier_routing_review import PASS, finding_category, run_tier_routing_review, summarise
from dream_assets.store.ledger import PassLedger
from dream_assets.store.log_records import TierRoutingEvent
from dream_assets.store.logs import append_event

from ..conftest import NOW, run_scripted, run_without_model


def route(profile, tier, outcome, *, days_ago=1.0, kind="chat", latency=None, cost=None, session="s1"):
    append_event(
        profile,
        "tier-routing",
        TierRoutingEvent(NOW - timedelta(days=days_ago), session, tier, kind, outcome, latency, cost),
    )


def run(profile, store, answers, *, options=None, now=NOW, cycle_id="c1"):
    return run_scripted(run_tier_routing_review, profile, store, answers, options=options, now=now, cycle_id=cycle_id)


def run_without_client(profile, store, options=None, now=NOW):
    return run_without_model(run_tier_routing_review, profile, store, options=options, now=now)


def findings(*items):
    return {"findings": list(items)}


def routing_memories(store):
    return [e for e in store.memories.list_live() if e.category.startswith("anti-patterns/routing")]


# ------------------------------------------------------------------ the summary (host)
def test_summary_counts_outcomes_rates_latency_and_cost_per_tier():
    events = [
        TierRoutingEvent(NOW, "s", "low", "refactor", "escalated", 300.0, 0.001),
        TierRoutingEvent(NOW, "s", "low", "refactor", "escalated", 500.0, 0.001),
        TierRoutingEvent(NOW, "s", "low", "chat", "success", None, 0.002),
        TierRoutingEvent(NOW, "s", "low", "chat", "failure", 400.0, None),
        TierRoutingEvent(NOW, "s", "high", "refactor", "success", 2000.0, 0.05),
    ]
    high, low = summarise(events)
    assert low["tier"] == "low" and low["requests"] == 4
    assert (low["success"], low["failure"], low["escalated"]) == (1, 1, 2)
    assert (low["success_rate"], low["failure_rate"], low["escalation_rate"]) == (0.25, 0.25, 0.5)
    assert low["mean_latency_ms"] == 400.0 and low["total_cost_usd"] == 0.004
    assert low["problem_task_kinds"] == ["refactor×2", "chat×1"]
    assert high["requests"] == 1 and high["success_rate"] == 1.0


@pytest.mark.parametrize(
    "tier,category",
    [
        (None, "anti-patterns/routing"),
        ("", "anti-patterns/routing"),
        ("high", "anti-patterns/routing/high-tier"),
        ("High Tier", "anti-patterns/routing/high-tier"),
        ("gpt-4o/mini", "anti-patterns/routing/gpt-4o-mini-tier"),
    ],
)
def test_finding_category_stays_under_anti_patterns_routing(tier, category):
    assert finding_category(tier) == category


# ------------------------------------------------------------------ the window
def test_window_excludes_entries_older_than_fourteen_days(profile, store):
    route(profile, "low", "success", days_ago=2)
    route(profile, "low", "escalated", days_ago=20)
    route(profile, "high", "failure", days_ago=15)
    _, backend = run(profile, store, [findings()])
    [stats] = backend.requests[0].inputs["tier_stats"]
    assert stats["tier"] == "low" and stats["requests"] == 1 and stats["escalated"] == 0
    assert "high" not in backend.requests[0].prompt


def test_only_old_entries_means_no_call(profile, store):
    route(profile, "low", "escalated", days_ago=20)
    report = run_without_client(profile, store)
    assert report.status == "skipped" and "no routing entries in the last 14 days" in report.reason


def test_missing_log_skips_with_a_reason(profile, store):
    report = run_without_client(profile, store)
    assert report.status == "skipped" and "no tier-routing log" in report.reason


def test_disabled_pass_skips(profile, store):
    route(profile, "low", "success")
    report = run_without_client(profile, store, dream_options(TierRoutingReviewEnabled=False))
    assert report.status == "skipped" and "TierRoutingReviewEnabled" in report.reason


# ------------------------------------------------------------------ findings become memories
def test_findings_are_saved_as_routing_anti_patterns_and_recorded(profile, store):
    for _ in range(3):
        route(profile, "low", "escalated", kind="refactor")
    report, _ = run(
        profile,
        store,
        [
            findings(
                {
                    "content": (
                        "Multi-file refactors escalate from the low tier 3 of 3 times: route them to the high tier."
                    ),
                    "tags": ["escalation"],
                    "tier": "high",
                },
                {"content": "Review routing weekly while the low tier escalates often.", "tags": []},
            )
        ],
    )
    by_category = {e.category: e for e in routing_memories(store)}
    assert set(by_category) == {"anti-patterns/routing/high-tier", "anti-patterns/routing"}
    assert set(by_category["anti-patterns/routing/high-tier"].tags) == {"routing", "escalation"}
    assert report.counts["created"] == 2
    changes = store.changes.list("c1")
    assert [c.kind for c in changes] == ["created", "created"]
    assert {c.target_id for c in changes} == {e.id for e in by_category.values()}


def test_a_repeated_finding_reinforces_instead_of_duplicating(profile, store):
    store.memories.put(
        MemoryEntry(
            id="known",
            content="Route multi-file refactors to the high tier.",
            category="anti-patterns/routing",
            tags=("routing",),
            importance=0.5,
            created_at=NOW - timedelta(days=30),
            updated_at=NOW - timedelta(days=30),
            last_seen_at=NOW - timedelta(days=30),
        )
    )
    route(profile, "low", "escalated", kind="refactor")
    report, _ = run(profile, store, [findings({"content": "Route multi-file refactors to the high tier."})])
    assert report.counts["reinforced"] == 1 and len(routing_memories(store)) == 1
    assert store.memories.get("known").reinforcement_count == 2
    assert store.changes.undo_cycle("c1", now=NOW + timedelta(minutes=1)).ok
    assert store.memories.get("known").reinforcement_count == 1


# ------------------------------------------------------------------ the change gate
def test_unchanged_window_makes_no_call_and_a_new_entry_does(profile, store):
    route(profile, "low", "success", days_ago=13.5)
    route(profile, "low", "escalated", days_ago=1)
    first, _ = run(profile, store, [findings()])
    assert first.status == "completed"
    assert run_without_client(profile, store).counts["gated"] == 1
    # The oldest entry ages out of the window: not a change.
    aged = run_without_client(profile, store, now=NOW + timedelta(days=1))
    assert aged.status == "skipped" and aged.counts == {"entries": 1, "tiers": 1, "gated": 1}
    route(profile, "high", "success", days_ago=0.5)
    second, backend = run(profile, store, [findings()], now=NOW + timedelta(days=1))
    assert second.status == "completed" and len(backend.requests) == 1


def test_failed_call_is_not_stamped_and_is_retried(profile, store):
    route(profile, "low", "escalated")
    report, _ = run(profile, store, ['{"findings": "not a list"}'])
    assert report.status == "failed" and PassLedger(profile).get(PASS) is None
    report, _ = run(profile, store, [ModelCallError("timeout")])
    assert report.status == "failed" and PassLedger(profile).get(PASS) is None
    retry, backend = run(profile, store, [findings()])
    assert retry.status == "completed" and len(backend.requests) == 1
    assert PassLedger(profile).get(PASS) is not None


# ------------------------------------------------------------------ hostile model text
def test_an_unusable_finding_is_rejected_with_its_reason_and_the_others_are_saved(profile, store):
    route(profile, "low", "escalated")
    report, _ = run(
        profile,
        store,
        [
            findings(
                {"content": "Route refactors to the high tier\ud800.", "tier": "high"},
                {"content": "Low tier handles chat\x00 well."},
                {"content": "Escalations cost more than starting high.", "tags": ["cost\nnotes"]},
                {"content": "Low tier is fine for chat.", "tier": "lo\u202ew"},
                {"content": "x" * 16_001},
                {"content": "Send refactors straight to the high tier.", "tier": "high"},
                {"content": "Tier given as an object.", "tier": {"name": "high"}},
            )
        ],
    )
    assert report.status == "completed"
    assert report.counts["invalid_items"] == 6 and report.counts["created"] == 1 and report.counts["rejected"] == 6
    reasons = {c.target: c.detail for c in report.changes if c.kind == "invalid-item"}
    assert "lone surrogate (U+D800)" in reasons["findings[0]"] and "control character (NUL)" in reasons["findings[1]"]
    assert "tags[0] contains a control character" in reasons["findings[2]"]
    assert "invisible formatting character (U+202E)" in reasons["findings[3]"]
    assert "over the limit of 16000" in reasons["findings[4]"]
    assert "findings[6].tier is not a string" in reasons["findings[6]"]
    [saved] = routing_memories(store)
    assert saved.content == "Send refactors straight to the high tier." and saved.category.endswith("high-tier")
    assert [r.target_id for r in store.changes.list("c1")] == [saved.id]  # the save and its row, nothing else
    store.memories.fingerprint()
