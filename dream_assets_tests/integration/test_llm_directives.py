"""Directive files: built-in ones per pass, replaced entirely by an agent's own file of the same name."""

from __future__ import annotations

from importlib import resources

import pytest

from dream_assets.llm.client import ModelClient
from dream_assets.llm.directives import (
    BUILTIN_DIRECTIVES_PACKAGE,
    DirectiveError,
    load_directive,
)
from dream_assets.llm.offline import OfflineBackend
from dream_assets.options_loader import dream_options
from dream_assets.passes.registry import MODEL_CALLS, model_call
from dream_assets.profile import AgentProfile

SPEC_FILES = {
    "dream.md",
    "skill-gap.md",
    "skill-dream.md",
    "skill-optimize.md",
    "pref-dream.md",
    "wisp-failure-dream.md",
    "tier-routing-review.md",
    "contradiction-sweep.md",
    "merge-repair.md",
    "merge-check.md",
}


def test_every_pass_has_a_built_in_directive_in_the_package() -> None:
    calls = MODEL_CALLS
    assert {call.directive_file for call in calls.values()} == SPEC_FILES
    packaged = {p.name for p in resources.files(BUILTIN_DIRECTIVES_PACKAGE).iterdir()}
    assert packaged >= SPEC_FILES
    for call in calls.values():
        text, source = load_directive(call, None, dream_options())
        assert source == "built-in"
        assert "JSON" in text  # every directive states its response contract


@pytest.mark.parametrize(
    "pass_name,keys",
    [
        ("memory_consolidation", ["toDelete", "toSave", "sourceIds", "first=", "reinforced=", "subject="]),
        ("skill_gap_detection", ["toSave", "two or more sessions", "Recurring topics"]),
        ("skill_consolidation", ["sourceNames", "seeAlso", "mcp/guide", "[sparse-content]"]),
        ("skill_optimization", ["toSave", "corrected", "Sparse skills", "edge cases"]),
        (
            "preference_inference",
            [
                "user-preferences/inferred",
                "requires_user_permission",
                "1 occurrence",
                "2 occurrences",
                "3 or more",
            ],
        ),
        (
            "wisp_failure_analysis",
            [
                "failurePatterns",
                "skillAnnotations",
                "promotionNotes",
                "3 or more",
                "80%",
                "promotions",
                "definitionHash",
            ],
        ),
        ("tier_routing_review", ["findings", "tier"]),
        ("contradiction_sweep", ["supersessions", "winnerId", "loserId", "USER-CORRECTION", "later moment"]),
        ("merge_repair", ["content", "missing"]),
    ],
)
def test_built_in_directives_carry_the_spec_rules_and_contract(pass_name: str, keys: list[str]) -> None:
    text, _ = load_directive(model_call(pass_name), None, dream_options())
    for key in keys:
        assert key in text, f"{key!r} missing from the {pass_name} directive"


def test_an_agent_file_replaces_the_built_in_directive_entirely(profile: AgentProfile) -> None:
    (profile.root / "dream.md").write_text("Only merge exact duplicates. Answer in JSON.", encoding="utf-8")
    text, source = load_directive(model_call("memory_consolidation"), profile, dream_options())
    assert text == "Only merge exact duplicates. Answer in JSON."
    assert source == str(profile.root / "dream.md")
    other, other_source = load_directive(model_call("skill_gap_detection"), profile, dream_options())
    assert other_source == "built-in" and "Skill gap" in other


def test_the_override_file_name_comes_from_the_options(profile: AgentProfile) -> None:
    (profile.root / "my-skills.md").write_text("custom skill directive", encoding="utf-8")
    options = dream_options().replace(SkillDirectivePath="my-skills.md")
    assert load_directive(model_call("skill_consolidation"), profile, options)[0] == "custom skill directive"


def test_merge_repair_has_no_override(profile: AgentProfile) -> None:
    (profile.root / "merge-repair.md").write_text("ignored", encoding="utf-8")
    text, source = load_directive(model_call("merge_repair"), profile, dream_options())
    assert source == "built-in" and text != "ignored"


def test_an_empty_override_falls_back_to_the_built_in_with_a_warning(profile: AgentProfile, caplog) -> None:
    (profile.root / "pref-dream.md").write_text("  \n", encoding="utf-8")
    text, source = load_directive(model_call("preference_inference"), profile, dream_options())
    assert source == "built-in" and "Preference inference" in text
    assert "pref-dream.md" in caplog.text and "empty" in caplog.text


def test_an_unreadable_override_names_the_file_and_the_fix(profile: AgentProfile) -> None:
    (profile.root / "skill-gap.md").write_bytes(b"\xff\xfe\x00bad")
    with pytest.raises(DirectiveError, match="skill-gap.md.*UTF-8"):
        load_directive(model_call("skill_gap_detection"), profile, dream_options())


def test_a_directive_option_that_is_not_a_file_name_is_rejected(profile: AgentProfile) -> None:
    with pytest.raises(DirectiveError, match="DirectivePath"):
        load_directive(
            model_call("memory_consolidation"), profile, dream_options().replace(DirectivePath="../../etc/passwd")
        )


def test_client_requests_carry_the_directive_and_its_source(profile: AgentProfile) -> None:
    (profile.root / "tier-routing-review.md").write_text("Review routing. JSON only.", encoding="utf-8")
    client = ModelClient(OfflineBackend(), profile=profile, options=dream_options())
    request = client.request(model_call("tier_routing_review"), "stats", {"tiers": []})
    assert request.system == "Review routing. JSON only."
    assert request.directive_source.endswith("tier-routing-review.md")
