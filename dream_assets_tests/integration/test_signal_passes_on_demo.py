"""Preference inference, wisp failure analysis and tier routing review on the demo agent, offline backend."""

import pytest

from dream_assets.demo import build_demo_profile
from dream_assets.llm.client import ModelClient
from dream_assets.llm.offline import OfflineBackend
from dream_assets.options_loader import dream_options
from dream_assets.passes.context import PassContext
from dream_assets.passes.preference_inference import run_preference_inference
from dream_assets.passes.tier_routing_review import run_tier_routing_review
from dream_assets.passes.wisp_failure_analysis import run_wisp_failure_analysis
from dream_assets.store.logs import read_events

from ..conftest import NOW

PASSES = (run_preference_inference, run_wisp_failure_analysis, run_tier_routing_review)


def cycle(profile, store, options, cycle_id):
    clients: list[ModelClient] = []

    def factory():
        clients.append(ModelClient(OfflineBackend(), profile=profile, options=options))
        return clients[-1]

    ctx = PassContext(profile, options, NOW, cycle_id=cycle_id, client_factory=factory, _store=store)
    reports = [run(ctx) for run in PASSES]
    calls = sum(len(c.usage.records) for c in clients)
    return reports, calls


@pytest.mark.slow  # every pass, twice, on the full demo
def test_every_pass_runs_on_the_demo_agent_and_a_quiet_second_run_makes_no_calls(profile, store):
    options = dream_options(LlmBackend="offline")
    build_demo_profile(profile, NOW, options=options)

    reports, calls = cycle(profile, store, options, "demo-1")
    assert [r.status for r in reports] == ["completed", "completed", "completed"]
    assert calls == 3 and all(r.model_calls == 1 for r in reports)
    pref, wisp, tier = reports
    assert pref.counts["sessions"] == 34 and read_events(profile, "conversation").events == []
    assert [p["description"] for p in wisp.extra["failure_patterns"]] == ["Convert invoice PDF to spreadsheet row"]
    assert [p["description"] for p in wisp.extra["promotion_candidates"]] == ["Summarize unread emails"]
    assert "### Known failure" in store.skills.get("finance/invoice").content
    assert {s["tier"] for s in tier.extra["tier_stats"]} == {"low", "mid", "high"}

    again, calls = cycle(profile, store, options, "demo-2")
    assert calls == 0
    assert [r.status for r in again] == ["skipped", "skipped", "skipped"]
    assert store.changes.list("demo-2") == []
