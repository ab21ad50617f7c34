"""JSON extraction from messy model answers, and validation against the pass contracts."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dream_assets.llm.extract import ResponseFormatError, extract_json_object, parse_response
from dream_assets.passes.memory_consolidation.contract import MemoryConsolidationResponse, MergeRepairResponse
from dream_assets.passes.preference_inference import PreferenceInferenceResponse
from dream_assets.passes.registry import MODEL_CALLS, contract_for
from dream_assets.passes.skill_gap_detection import SkillGapResponse
from dream_assets.passes.skill_vocabulary import SkillConsolidationResponse
from dream_assets.passes.tier_routing_review import TierRoutingResponse
from dream_assets.passes.wisp_failure_analysis import WispAnalysisResponse

ANSWER = '{"toDelete": ["a"], "toSave": [{"content": "x", "sourceIds": ["a", "b"]}]}'
EXPECTED = {"toDelete": ["a"], "toSave": [{"content": "x", "sourceIds": ["a", "b"]}]}

MESSY = [
    ("bare", ANSWER),
    ("think block", f'<think>Let me weigh {{a}} against {{b}}: {{"toDelete": []}}?</think>\n{ANSWER}'),
    (
        "thinking tag with attributes",
        f'<thinking mode="deep">draft {{"toDelete": ["zzz"]}}</thinking>{ANSWER}',
    ),
    ("closing tag only (template opened it)", f"so I should merge a and b.\n</think>\n\n{ANSWER}"),
    ("unterminated think, answer last", f'<think>draft: {{"toDelete": ["nope"]}} ... final:\n{ANSWER}'),
    ("json fence", f"```json\n{ANSWER}\n```"),
    ("bare fence", f"```\n{ANSWER}\n```"),
    ("preamble", f"Sure! Here is the consolidation you asked for:\n\n{ANSWER}"),
    ("trailing prose", f"{ANSWER}\n\nI merged a and b because they say the same {{thing}}."),
    ("prose braces before", f"Placeholders like {{name}} and sets {{a, b were ignored. Answer: {ANSWER}"),
    ("everything at once", f"<think>hmm {{</think>Here you go:\n```json\n{ANSWER}\n```\nDone {{really}}."),
    ("trailing commas", '{"toDelete": ["a",], "toSave": [{"content": "x", "sourceIds": ["a", "b"],},],}'),
    (
        "pretty printed",
        '{\n  "toDelete": [\n    "a"\n  ],\n  "toSave": [\n    {"content": "x", "sourceIds": ["a", "b"]}\n  ]\n}',
    ),
]

#: pass name -> its response contract, as the pass specs define them
CONTRACTS = {name: call.contract for name, call in MODEL_CALLS.items()}


@pytest.mark.parametrize("label,text", MESSY, ids=[m[0] for m in MESSY])
def test_the_answer_object_is_found_in_messy_responses(label: str, text: str) -> None:
    assert extract_json_object(text) == EXPECTED
    parsed = parse_response(text, MemoryConsolidationResponse)
    assert parsed.to_delete == ["a"]
    assert parsed.to_save[0].source_ids == ["a", "b"]


def test_braces_and_quotes_inside_strings_do_not_confuse_the_extractor() -> None:
    text = 'Result: {"content": "use {braces} and \\"quotes\\" and } stray", "extra": {"n": [1, {"m": 2}]}} bye'
    assert extract_json_object(text) == {
        "content": 'use {braces} and "quotes" and } stray',
        "extra": {"n": [1, {"m": 2}]},
    }


def test_nested_objects_come_back_whole_not_as_inner_fragments() -> None:
    text = '{"failurePatterns": [{"description": "d", "affectedSteps": ["s"]}], "promotionNotes": {"w": "ok"}}'
    parsed = parse_response(text, WispAnalysisResponse)
    assert parsed.failure_patterns[0].affected_steps == ["s"]
    assert parsed.promotion_notes == {"w": "ok"}


FAILURES = [
    ("empty", "", "empty"),
    ("prose only", "I could not find anything to merge.", "no JSON object"),
    ("unbalanced", '{"toSave": [{"content": "x"}, {"content": "y"', "never closed"),
    ("truncated after a complete inner object", '{"content": {"a": 1}, "more": "tex', "never closed"),
    ("invalid json", '{"toDelete": [a, b]}', "invalid JSON"),
    ("array", '[{"content": "x"}]', "JSON array"),
    ("only unterminated reasoning", "<think>I think we should merge {", "no JSON object"),
]


@pytest.mark.parametrize("label,text,reason", FAILURES, ids=[f[0] for f in FAILURES])
def test_unusable_responses_fail_clearly(label: str, text: str, reason: str) -> None:
    with pytest.raises(ResponseFormatError) as err:
        parse_response(text, MemoryConsolidationResponse)
    assert reason in str(err.value)


def test_a_truncated_answer_never_yields_its_complete_inner_object() -> None:
    # The inner object alone would satisfy the merge-repair contract: applying it would be a partial apply.
    with pytest.raises(ResponseFormatError, match="never closed"):
        parse_response('{"wrapper": {"content": "only part"}, "content": "the real ans', MergeRepairResponse)


def test_the_error_quotes_the_first_200_characters_of_the_response() -> None:
    text = "No JSON here. " + "x" * 500
    with pytest.raises(ResponseFormatError) as err:
        parse_response(text, MemoryConsolidationResponse)
    assert err.value.raw_head == text[:200]
    assert repr(text[:200]) in str(err.value)
    assert text[:201] not in str(err.value)


def test_an_object_with_none_of_the_contract_keys_is_not_an_empty_answer() -> None:
    with pytest.raises(ResponseFormatError, match="none of the expected keys"):
        parse_response('{"error": "model overloaded"}', MemoryConsolidationResponse)


def test_an_echoed_example_before_a_different_answer_is_ambiguous() -> None:
    text = 'Format: {"toSave": [{"name": "a", "content": "c"}]}\nAnswer: {"toSave": [{"name": "b", "content": "d"}]}'
    with pytest.raises(ResponseFormatError, match="ambiguous"):
        parse_response(text, SkillGapResponse)


def test_the_same_object_repeated_is_not_ambiguous() -> None:
    text = '{"findings": []}\n\nAgain: {"findings": []}'
    assert parse_response(text, TierRoutingResponse).findings == []


def test_a_preamble_object_without_contract_keys_is_skipped_for_the_answer() -> None:
    text = '{"note": "thinking out loud"}\n{"toSave": []}'
    assert parse_response(text, SkillGapResponse).to_save == []


# --- contracts -------------------------------------------------------------------------------------
def test_every_pass_has_a_contract() -> None:
    assert set(CONTRACTS) == {
        "memory_consolidation",
        "merge_repair",
        "cluster_check",
        "skill_gap_detection",
        "skill_consolidation",
        "skill_optimization",
        "preference_inference",
        "wisp_failure_analysis",
        "tier_routing_review",
        "contradiction_sweep",
    }
    with pytest.raises(ValueError, match="known passes"):
        contract_for("dreaming")


def test_spec_camel_case_and_snake_case_both_validate() -> None:
    camel = parse_response(
        '{"toDelete": ["old"], "toSave": [{"name": "mcp/guide", "content": "c", '
        '"sourceNames": ["old"], "seeAlso": ["mcp/email"]}]}',
        SkillConsolidationResponse,
    )
    snake = SkillConsolidationResponse.model_validate(
        {
            "to_delete": ["old"],
            "to_save": [{"name": "mcp/guide", "content": "c", "source_names": ["old"], "see_also": ["mcp/email"]}],
        }
    )
    assert camel == snake
    assert camel.to_save[0].see_also == ["mcp/email"]


def test_nulls_take_defaults_and_numeric_ids_become_text() -> None:
    parsed = parse_response(
        '{"toDelete": [12, 13], "toSave": [{"content": "c", "category": null, "tags": null}]}',
        MemoryConsolidationResponse,
    )
    assert parsed.to_delete == ["12", "13"]
    assert parsed.to_save[0].category == "general" and parsed.to_save[0].tags == []


def test_preference_metadata_flag_is_kept_as_text() -> None:
    parsed = parse_response(
        '{"toSave": [{"content": "Confirm before paying invoices", '
        '"category": "user-preferences/inferred", "tags": ["inferred"], '
        '"metadata": {"requires_user_permission": true}}]}',
        PreferenceInferenceResponse,
    )
    assert parsed.to_save[0].metadata == {"requires_user_permission": "true"}


CONTRACT_ERRORS = [
    (MemoryConsolidationResponse, '{"toSave": [{"category": "x"}]}', "toSave.0.content"),
    (MemoryConsolidationResponse, '{"toDelete": "a,b"}', "toDelete"),
    (SkillConsolidationResponse, '{"toSave": [{"name": "x"}]}', "toSave.0.content"),
    (SkillGapResponse, '{"toSave": [{"content": "no name"}]}', "toSave.0.name"),
    (MergeRepairResponse, '{"content": ["not", "text"]}', "content"),
    (WispAnalysisResponse, '{"skillAnnotations": [{"skillName": "s"}]}', "skillAnnotations.0.annotation"),
    (TierRoutingResponse, '{"findings": [{"tier": "large"}]}', "findings.0.content"),
]


@pytest.mark.parametrize("contract,text,field", CONTRACT_ERRORS, ids=[c[2] for c in CONTRACT_ERRORS])
def test_contract_violations_name_the_field(contract: type, text: str, field: str) -> None:
    with pytest.raises(ResponseFormatError) as err:
        parse_response(text, contract)
    message = str(err.value)
    assert field in message
    assert contract.__name__ in message
    assert text[:50] in message


# ------------------------------------------------------------------ the token scanners against a plain reference
def _reference_match_object(text: str, start: int) -> int:
    depth, in_string, escaped = 0, False, False
    for i in range(start, len(text)):
        ch = text[i]
        if in_string:
            if escaped:
                escaped = False
            elif ch == "\\":
                escaped = True
            elif ch == '"':
                in_string = False
        elif ch == '"':
            in_string = True
        elif ch in "{}":
            depth += 1 if ch == "{" else -1
            if depth == 0:
                return i + 1
    return -1


def _reference_without_trailing_commas(text: str) -> str:
    out, in_string, escaped = [], False, False
    for i, ch in enumerate(text):
        if in_string:
            out.append(ch)
            if escaped:
                escaped = False
            elif ch == "\\":
                escaped = True
            elif ch == '"':
                in_string = False
        elif ch == '"':
            in_string = True
            out.append(ch)
        elif ch == ",":
            rest = text[i + 1 :].lstrip(" \t\r\n")
            if rest and rest[0] not in "}]":
                out.append(ch)
        else:
            out.append(ch)
    return "".join(out)


@settings(max_examples=500, deadline=None)
@given(st.text(alphabet='{}[]",\\ \nab:1', max_size=60))
def test_token_scanners_agree_with_a_character_by_character_reading(text):
    from dream_assets.llm.extract import _match_object, _without_trailing_commas

    assert _without_trailing_commas(text) == _reference_without_trailing_commas(text)
    for start in [i for i, ch in enumerate(text) if ch == "{"][:3]:
        assert _match_object(text, start) == _reference_match_object(text, start)
