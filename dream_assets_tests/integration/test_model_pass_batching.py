"""The model passes other than consolidation and the sweep batch to the window too: a prompt that does not fit is
shown in several calls, each within the window, and the answers add up; an item that does not fit even alone is left
out with its name; a plan over LlmMaxCallsPerPass sends nothing. Real stores, the real HTTP test server."""

from __future__ import annotations

import json
import re
from datetime import timedelta

from dream_assets.llm.budget import MESSAGE_OVERHEAD, budget_for
from dream_assets.llm.client import build_model_client
from dream_assets.options_loader import dream_options
from dream_assets.passes.common import plan_batches
from dream_assets.passes.context import PassContext
from dream_assets.passes.registry import MODEL_CALLS
from dream_assets.passes.tier_routing_review import render_tier_routing, run_tier_routing_review, summarise
from dream_assets.store.log_records import TierRoutingEvent
from dream_assets.store.logs import append_event, read_events
from dream_assets_tests.openai_server import OpenAITestServer, Reply, reply

from ..conftest import NOW

TIER_LINE = re.compile(r"^- tier (t\d+)", re.MULTILINE)


def _finding_per_tier() -> Reply:
    def decide(body):
        tiers = TIER_LINE.findall(body["messages"][1]["content"])
        found = [{"content": f"Tier {t} escalated every lookup: route lookups past it.", "tags": []} for t in tiers]
        return reply(json.dumps({"findings": found}))

    return Reply(decide=decide)


def _review(profile, store, server, **options):
    opts = dream_options(
        LlmBaseUrl=server.base_url, LlmModel="test-model", LlmMaxRetries=0, LlmStructuredOutput="off", **options
    )
    client = build_model_client(opts, profile)
    ctx = PassContext(profile, opts, NOW, cycle_id="c1", client_factory=lambda: client)
    ctx._store = store
    return run_tier_routing_review(ctx), client


def _window_for_a_third(profile, reserve: int) -> int:
    """A window that holds the directive and about a third of the tier lines."""
    system = build_model_client(dream_options(), profile).request(MODEL_CALLS["tier_routing_review"], "").system
    count = budget_for(0, reserve).count
    stats = summarise(read_events(profile, "tier-routing").events)
    return reserve + 2 * MESSAGE_OVERHEAD + count(system) + count(render_tier_routing(stats, 14)) // 3


def test_a_prompt_over_the_window_is_shown_in_batches_and_the_answers_add_up(profile, store):
    for n in range(90):
        for _ in range(2):
            event = TierRoutingEvent(NOW - timedelta(days=1), f"s{n}", f"t{n:03d}", "lookup", "escalated", None, None)
            append_event(profile, "tier-routing", event)
    reserve = 512
    window = _window_for_a_third(profile, reserve)
    with OpenAITestServer(default=_finding_per_tier(), context_limit=window) as server:
        report, _ = _review(profile, store, server, LlmContextTokens=window, LlmMaxTokens=reserve)
        assert report.status == "completed", report.reason
        prompts = [r.body["messages"][1]["content"] for r in server.requests]
    assert 3 <= len(prompts) <= 5 and report.counts["calls"] == len(prompts)
    assert server.context_refusals == 0 and server.largest_prompt_tokens <= window
    shown = [t for p in prompts for t in TIER_LINE.findall(p)]
    assert sorted(shown) == [f"t{n:03d}" for n in range(90)]  # every tier shown, once
    saved = [e for e in store.memories.list_live() if e.category.startswith("anti-patterns/routing")]
    assert {t for e in saved for t in re.findall(r"t\d{3}", e.content)} == set(shown)  # every batch's findings


def test_a_plan_over_the_call_cap_sends_nothing_and_says_what_to_raise(profile, store):
    for n in range(90):
        event = TierRoutingEvent(NOW - timedelta(days=1), f"s{n}", f"t{n:03d}", "lookup", "escalated", None, None)
        append_event(profile, "tier-routing", event)
    reserve = 512
    window = _window_for_a_third(profile, reserve)
    with OpenAITestServer(default=_finding_per_tier()) as server:
        report, _ = _review(profile, store, server, LlmContextTokens=window, LlmMaxTokens=reserve, LlmMaxCallsPerPass=2)
        assert not server.requests
    assert report.status == "failed" and "LlmMaxCallsPerPass 2" in report.reason


def test_batches_are_as_large_as_fit_and_an_item_too_large_alone_is_set_apart():
    sizes = [3, 3, 3, 9, 2, 2, 2, 2]
    batches, alone = plan_batches(lambda batch: sum(batch) <= 6, sizes)
    assert batches == [[3, 3], [3], [2, 2, 2], [2]] and alone == [9]
