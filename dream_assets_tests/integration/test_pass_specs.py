"""One complete PassSpec per pass: the registry is complete, the shared opening skips with the passes' own reasons,
and a gated pass stamps exactly the data version of its input, which its gate compares."""

from __future__ import annotations

from dataclasses import dataclass, replace
from datetime import timedelta

import pytest

from dream_assets.gates import GATED_PASSES, gate_status
from dream_assets.input_fingerprints import INPUT_ASSETS, data_version
from dream_assets.llm.client import ModelClient
from dream_assets.llm.directives import load_directive
from dream_assets.llm.offline import OfflineBackend
from dream_assets.model import MemoryEntry, Skill
from dream_assets.options import pass_option
from dream_assets.options_loader import dream_options
from dream_assets.passes import memory_consolidation
from dream_assets.passes.context import PassContext
from dream_assets.passes.registry import MODEL_CALLS, PASSES, by_name, model_call
from dream_assets.passes.report import PassReport
from dream_assets.passes.runner import run_pass
from dream_assets.passes.spec import spec_problems
from dream_assets.passes.tier_routing_review import TierRoutingReviewOptions
from dream_assets.store.ledger import PassLedger
from dream_assets.store.log_records import (
    ConversationTurn,
    FeedbackEvent,
    SkillUsageEvent,
    TierRoutingEvent,
    WispExecutionEvent,
)
from dream_assets.store.logs import append_event

from ..conftest import NOW


def never(ctx):
    raise AssertionError("the pass body ran although the opening should have skipped it")


def offline_ctx(profile, options=None, now=NOW, **kw):
    opts = options or dream_options()
    return PassContext(
        profile, opts, now, client_factory=lambda: ModelClient(OfflineBackend(), profile=profile, options=opts), **kw
    )


# ------------------------------------------------------------------ completeness
@pytest.mark.parametrize("spec", PASSES, ids=lambda s: s.name)
def test_every_registered_pass_is_complete(spec):
    assert spec_problems(spec) == []


@dataclass(frozen=True, kw_only=True)
class WindowAsSwitch(TierRoutingReviewOptions):
    """The tier routing review's section with a duration for a switch."""

    enabled: timedelta = pass_option(timedelta(days=14), "a window, not a switch", alias="TierRoutingReviewWindow")


def test_an_incomplete_spec_is_reported_naming_the_pass_and_the_field():
    spec = by_name("tier_routing_review")
    broken = replace(
        spec,
        options=WindowAsSwitch,
        reads=("routing_log",),
        model_call=replace(spec.model_call, directive_file="missing.md", offline=lambda inputs: ({"findings": 3}, "")),
    )
    found = spec_problems(broken)
    problems = "\n".join(found)
    assert "options key enabled is a timedelta, not a bool" in problems
    assert "reads unknown input(s) routing_log" in problems
    assert "gate 'tier_routing_log' is not one of the inputs it reads" in problems
    assert "directive file missing.md is not in the package data" in problems
    assert "the offline answer does not fit its contract" in problems
    assert len(found) == 5 and all(p.startswith("pass 'tier_routing_review': ") for p in found)


def test_the_registry_lists_each_pass_once_in_an_order_that_respects_after():
    names = [p.name for p in PASSES]
    assert len(names) == len(set(names))
    for i, spec in enumerate(PASSES):
        assert set(spec.after) <= set(names[:i]), spec.name
        assert set(spec.reads) <= set(INPUT_ASSETS)


def test_the_model_calls_are_the_model_passes_plus_merge_repair_and_the_cluster_check_which_are_not_passes():
    model_passes = {p.name for p in PASSES if p.uses_model}
    assert set(MODEL_CALLS) == model_passes | {"merge_repair", "cluster_check"}
    assert "cluster_check" not in {p.name for p in PASSES}
    assert model_call("cluster_check") is memory_consolidation.CLUSTER_CHECK
    assert all(call.name == name for name, call in MODEL_CALLS.items())
    assert "merge_repair" not in {p.name for p in PASSES}
    repair = model_call("merge_repair")
    assert repair is memory_consolidation.MERGE_REPAIR
    assert repair.directive_option is None and load_directive(repair, None, dream_options())[1] == "built-in"
    with pytest.raises(KeyError, match="known passes: memory_consolidation"):
        model_call("merge_repairs")


def test_the_readers_read_the_spec(profile):
    spec = by_name("skill_gap_detection")
    custom = profile.directive_override_path(getattr(dream_options(), spec.model_call.directive_option))
    custom.parent.mkdir(parents=True, exist_ok=True)
    custom.write_text("my own gap directive, answer in JSON", encoding="utf-8")
    assert load_directive(spec.model_call, profile, dream_options()) == (
        "my own gap directive, answer in JSON",
        str(custom),
    )
    answer, note = OfflineBackend().answer(spec.model_call, {})
    assert spec.model_call.contract.model_validate(answer).to_save == [] and "judgement" in note
    assert (
        set(GATED_PASSES)
        == {p.name for p in PASSES if p.gate is not None}
        == {
            "memory_consolidation",
            "skill_gap_detection",
            "skill_consolidation",
            "skill_optimization",
            "wisp_failure_analysis",
            "tier_routing_review",
            "contradiction_sweep",
        }
    )


# ------------------------------------------------------------------ the shared opening
@pytest.mark.parametrize("spec", PASSES, ids=lambda s: s.name)
def test_a_disabled_pass_is_skipped_by_the_opening_with_its_option_named(profile, spec):
    options = dream_options().replace(**{spec.enabled_by: False})
    report = run_pass(replace(spec, body=never), offline_ctx(profile, options))
    assert report.status == "skipped"
    assert report.reason.startswith(f"disabled ({spec.enabled_by} = false)")


@pytest.mark.parametrize("spec", [p for p in PASSES if p.missing_input is not None], ids=lambda s: s.name)
def test_a_pass_whose_required_input_is_absent_is_skipped_with_its_own_reason(profile, spec):
    if spec.name == "memory_consolidation":
        profile.consolidation_pause_path.parent.mkdir(parents=True, exist_ok=True)
        profile.consolidation_pause_path.write_text("{}")
    report = run_pass(replace(spec, body=never), offline_ctx(profile))
    assert report.status == "skipped" and report.reason == spec.missing_input(offline_ctx(profile))


def test_the_minimum_interval_holds_the_pass_back_and_a_forced_run_passes_it(profile):
    spec = by_name("memory_consolidation")
    PassLedger(profile).stamp(spec.name, "fp", NOW - timedelta(hours=1))
    options = dream_options().replace(ConsolidationMinInterval=timedelta(hours=6))
    held = run_pass(replace(spec, body=never), offline_ctx(profile, options))
    assert held.status == "skipped" and held.counts["floored"] == 1
    assert held.reason == (
        "minimum interval: last completed 2026-11-30T11:00:00Z, next allowed at 2026-11-30T17:00:00Z "
        "(ConsolidationMinInterval 6:00:00)"
    )
    assert held.summary == held.reason  # said once, beside the pass's name and status
    ran = []

    def body(ctx):
        ran.append(ctx.force)
        return PassReport(spec.name).finish("ran")

    forced = run_pass(replace(spec, body=body), offline_ctx(profile, options, force="operator"))
    assert forced.status == "completed" and ran == ["operator"]
    later = run_pass(replace(spec, body=body), offline_ctx(profile, options, now=NOW + timedelta(hours=5)))
    assert later.status == "completed" and ran == ["operator", None]


# ------------------------------------------------------------------ one change-detection model
def _memory(i, content):
    return MemoryEntry(f"m{i}", content, "facts", (), 0.5, NOW, NOW, NOW)


def _skill(name):
    return Skill(name, name, f"How to {name} a thing, step by step.", created_at=NOW, updated_at=NOW)


def _wisp(minutes_ago):
    return WispExecutionEvent(
        NOW - timedelta(minutes=minutes_ago), f"w{minutes_ago}", "deploy the site", success=False, failed_step="push"
    )


def _route(minutes_ago, outcome):
    return TierRoutingEvent(NOW - timedelta(minutes=minutes_ago), "s1", "low", "chat", outcome)


def _seed(profile, store, pass_name):
    if pass_name == "memory_consolidation":
        store.memories.put_many([_memory(1, "Lives in Lisbon."), _memory(2, "Plays the cello on Sundays.")])
    elif pass_name == "contradiction_sweep":  # two similar entries: the sweep shows them to the model
        store.memories.put_many([_memory(1, "Lives in Lisbon near the river."), _memory(2, "Lives in Porto now.")])
    elif pass_name == "skill_consolidation":
        store.skills.put(_skill("alpha"))
        store.skills.put(_skill("beta"))
        append_event(profile, "skill-usage", SkillUsageEvent(NOW - timedelta(hours=2), "s1", "alpha"))
    elif pass_name == "wisp_failure_analysis":
        for minutes in (300, 200, 100):
            append_event(profile, "wisp-executions", _wisp(minutes))
    elif pass_name == "skill_gap_detection":  # one request type in two sessions
        _say(profile, "s1", "Convert the attached invoice into the expenses spreadsheet", 300)
        _say(profile, "s2", "Please convert this invoice PDF into a row", 200)
    elif pass_name == "skill_optimization":  # a skill used in a session with a correction
        store.skills.put(_skill("mcp/calendar"))
        append_event(profile, "skill-usage", SkillUsageEvent(NOW - timedelta(hours=2), "s1", "mcp/calendar"))
        _correct(profile, "s1", 110)
    else:
        append_event(profile, "tier-routing", _route(120, "failure"))


def _move(profile, store, pass_name):
    if pass_name in ("memory_consolidation", "contradiction_sweep"):
        store.memories.put(_memory(3, "Adopted a cat named Io."))
    elif pass_name == "skill_consolidation":
        store.skills.put(_skill("gamma"))
    elif pass_name == "wisp_failure_analysis":
        append_event(profile, "wisp-executions", _wisp(5))
    elif pass_name == "skill_gap_detection":
        _say(profile, "s3", "Convert one more invoice into a spreadsheet row", 5)
    elif pass_name == "skill_optimization":
        _correct(profile, "s1", 5)
    else:
        append_event(profile, "tier-routing", _route(5, "success"))


def _say(profile, session, text, minutes_ago):
    append_event(profile, "conversation", ConversationTurn(NOW - timedelta(minutes=minutes_ago), session, "user", text))


def _correct(profile, session, minutes_ago):
    event = FeedbackEvent(NOW - timedelta(minutes=minutes_ago), session, "Correction", "It was double-booked.")
    append_event(profile, "feedback", event)


@pytest.mark.parametrize("pass_name", [p for p in GATED_PASSES if by_name(p).fingerprint is None])
def test_a_gated_pass_stamps_the_data_version_of_its_input_and_its_gate_compares_it(profile, store, pass_name):
    spec = by_name(pass_name)
    _seed(profile, store, pass_name)
    first = run_pass(spec, offline_ctx(profile))
    assert first.status == "completed", first.reason
    stamped = PassLedger(profile).get(pass_name).fingerprint
    assert stamped == data_version(profile, spec.gate)
    idle = gate_status(pass_name, profile, dream_options(), NOW + timedelta(hours=7))
    assert idle.fingerprint == stamped and idle.decision.skip  # an idle agent: nothing requested, no model call
    _move(profile, store, pass_name)
    moved = gate_status(pass_name, profile, dream_options(), NOW + timedelta(hours=7))
    assert not moved.decision.skip and moved.decision.reason == "input changed since the last run"
    assert moved.fingerprint == data_version(profile, spec.gate) != stamped


@pytest.mark.parametrize("pass_name", [p for p in GATED_PASSES if by_name(p).fingerprint is not None])
def test_a_pass_gated_on_what_it_sends_is_gated_alike_by_its_sensor(profile, store, pass_name):
    """Skill gap detection and skill optimization fingerprint what they would send (not one input's data version):
    the sensor computes the same fingerprint the runner stamped, so an idle agent is not requested and new input
    is."""
    spec = by_name(pass_name)
    later = NOW + timedelta(hours=1)
    before = gate_status(pass_name, profile, dream_options(), later)
    assert before.decision.skip and before.decision.reason.startswith("nothing to run on"), before.decision.reason
    _seed(profile, store, pass_name)
    due = gate_status(pass_name, profile, dream_options(), later)
    assert not due.decision.skip and due.fingerprint
    first = run_pass(spec, offline_ctx(profile))
    assert first.status == "completed", first.reason
    stamped = PassLedger(profile).get(pass_name).fingerprint
    assert stamped == due.fingerprint
    idle = gate_status(pass_name, profile, dream_options(), later)
    assert idle.decision.skip and idle.fingerprint == stamped, idle.decision.reason
    again = run_pass(spec, offline_ctx(profile, now=later))
    assert again.status == "skipped" and again.reason.startswith("change gate: input unchanged"), again.reason
    _move(profile, store, pass_name)
    moved = gate_status(pass_name, profile, dream_options(), later)
    assert not moved.decision.skip and moved.decision.reason == "input changed since the last run"
    assert moved.fingerprint != stamped
