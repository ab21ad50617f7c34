"""Budgets and price: a pass whose prompt would take the agent past DailyTokenBudget or CycleTokenBudget is deferred
whole with the reason, nothing sent; the next day it runs. Prices give a cost figure per pass and per cycle. Real
stores, the real HTTP test server."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta

from dream_assets.cycle import run_cycle
from dream_assets.options_loader import dream_options
from dream_assets_tests.openai_server import OpenAITestServer, reply

NOW = datetime(2026, 11, 30, 12, 0, tzinfo=UTC)
ANSWER = json.dumps({"findings": [], "failurePatterns": [], "skillAnnotations": [], "promotionNotes": {}})


def _one(demo, options, now, name, cycle):
    [report] = run_cycle(demo, options, now, cycle_id=cycle, only=[name])
    return report


def test_a_daily_budget_defers_a_pass_whole_and_the_next_day_it_runs(demo):
    with OpenAITestServer(default=reply(ANSWER, prompt_tokens=900, completion_tokens=100)) as server:
        options = dream_options(
            LlmBaseUrl=server.base_url,
            LlmModel="test-model",
            LlmMaxRetries=0,
            # over 1000 spent + the next prompt, whose count is calibrated by the usage the first answer reported
            DailyTokenBudget=2000,
            LlmPriceInputPerMillion=2.0,
            LlmPriceOutputPerMillion=8.0,
        )
        first = _one(demo, options, NOW, "tier_routing_review", "c1")
        assert first.status == "completed", first.reason
        assert first.usage["cost"] == round((900 * 2.0 + 100 * 8.0) / 1e6, 6)
        sent = len(server.requests)

        held = _one(demo, options, NOW + timedelta(hours=1), "wisp_failure_analysis", "c2")
        assert held.status == "deferred"
        assert "DailyTokenBudget 2000 (1000 spent)" in held.reason and "tomorrow" in held.reason
        assert len(server.requests) == sent  # never half-run: nothing was sent

        tomorrow = _one(demo, options, NOW + timedelta(days=1), "wisp_failure_analysis", "c3")
        assert tomorrow.status == "completed", tomorrow.reason
        assert len(server.requests) == sent + 1


def test_a_cycle_budget_defers_what_would_go_over_in_that_cycle_only(demo):
    with OpenAITestServer(default=reply(ANSWER, prompt_tokens=900, completion_tokens=100)) as server:
        options = dream_options(LlmBaseUrl=server.base_url, LlmModel="test-model", LlmMaxRetries=0, CycleTokenBudget=10)
        report = _one(demo, options, NOW, "tier_routing_review", "c1")
        assert report.status == "deferred" and "CycleTokenBudget 10" in report.reason
        assert not server.requests


def test_a_budget_deferral_says_so_with_its_figures_and_is_not_retried_with_back_off(demo):
    from dream_assets.passes.outcome import load_deferred, load_outcome

    with OpenAITestServer(default=reply(ANSWER, prompt_tokens=900, completion_tokens=100)) as server:
        options = dream_options(
            LlmBaseUrl=server.base_url, LlmModel="test-model", LlmMaxRetries=0, DailyTokenBudget=1500
        )
        assert _one(demo, options, NOW, "tier_routing_review", "c1").status == "completed"
        held = _one(demo, options, NOW + timedelta(hours=1), "wisp_failure_analysis", "c2")
    assert held.status == "deferred"
    assert held.summary.startswith("wisp_failure_analysis deferred: budget — ")
    record = load_outcome(demo, "wisp_failure_analysis")
    assert record["deferral"] is None  # no busy back-off: no retry time
    budget = record["budget_deferral"]
    assert (budget["budget"], budget["limit"], budget["spent"]) == ("DailyTokenBudget", 1500, 1000)
    assert budget["estimate"] > 0 and budget["resumes"] == "2026-12-01T00:00:00Z"
    assert "wisp_failure_analysis" not in load_deferred(demo)  # the retry sensor never requests it
