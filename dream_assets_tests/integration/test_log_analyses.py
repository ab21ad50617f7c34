"""Backfillable analyses over the warehouse use the live passes' own grouping and thresholds."""

from datetime import timedelta

import pytest

from dream_assets.demo import build_demo_profile
from dream_assets.log_analyses import read_analysis, run_analysis, sync_day_to_warehouse

from ..conftest import NOW


def _warehouse_with_demo(profile, options):
    build_demo_profile(profile, NOW)
    for d in range(40, -1, -1):
        sync_day_to_warehouse(profile, (NOW - timedelta(days=d)).date(), NOW)


@pytest.mark.slow  # every analysis on the full demo
def test_history_for_a_past_day_matches_what_the_live_passes_would_say(profile, options):
    _warehouse_with_demo(profile, options)
    day = NOW.date()
    wisp = {r["description"]: r for r in run_analysis(profile, options, "wisp_failure_history", day)}
    assert wisp["Convert invoice PDF to spreadsheet row"]["failure_pattern"] is True
    assert wisp["Summarize unread emails"]["promotion_candidate"] is True
    tiers = {r["tier"]: r for r in run_analysis(profile, options, "tier_routing_history", day)}
    assert set(tiers) == {"low", "mid", "high"} and all(r["requests"] > 0 for r in tiers.values())
    terms = {r["term"]: r for r in run_analysis(profile, options, "recurring_request_history", day)}
    assert "meeting" in terms or "room" in terms
    assert all(r["sessions"] >= 2 for r in terms.values())
    usage = {r["skill"]: r for r in run_analysis(profile, options, "skill_usage_history", day)}
    assert usage["mcp/email"]["uses"] >= 2
    assert read_analysis(profile, "tier_routing_history", day) == list(tiers.values())


@pytest.mark.slow  # every analysis on the full demo
def test_a_day_before_any_activity_has_empty_results(profile, options):
    _warehouse_with_demo(profile, options)
    assert run_analysis(profile, options, "wisp_failure_history", (NOW - timedelta(days=200)).date()) == []
    assert read_analysis(profile, "wisp_failure_history", (NOW - timedelta(days=200)).date()) == []
