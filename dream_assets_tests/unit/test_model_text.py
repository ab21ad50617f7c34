"""model_text: what a pass refuses to apply from a model answer, and how it names the problem."""

from __future__ import annotations

import pytest

from dream_assets.llm.contracts import NOT_TEXT
from dream_assets.passes.memory_consolidation.contract import MemoryConsolidationResponse
from dream_assets.passes.model_text import check_ids, copied, directive_examples, problem, shown


@pytest.mark.parametrize(
    "value,kind,expected",
    [
        ("The launch is on 2026-03-06.\nOwner: Dana.", "content", None),
        ("Line one\r\nline two\twith a tab", "content", None),  # a CRLF line end is a line end
        ("Line one\rline two", "content", "control character (U+000D)"),
        ("Kestrel\ud800", "content", "lone surrogate (U+D800) at character 7"),
        ("bad\x00", "content", "control character (NUL) at character 3"),
        ("\x85next line", "content", "control character (U+0085)"),
        ("   \n\t", "content", "is empty"),
        ("x" * 101, "content", "101 characters, over the limit of 100"),
        ("", "text", None),  # optional text may be blank
        ("anti-patterns/routing/high-tier", "category", None),
        ("people & teams/Ana (Lisbon)", "category", None),
        ("a//b", "category", "empty '/' segment"),
        ("/a", "category", "empty '/' segment"),
        ("proj<script>", "category", "the character <"),
        ("re\u200bview", "category", "invisible formatting character (U+200B)"),
        ("node.js", "tag", None),
        ("two\nlines", "tag", "control character (U+000A)"),
        ("mcp/guide", "name", None),
        ("../escape", "name", "'..' segment"),
        ("mcp/\udfff", "name", "lone surrogate (U+DFFF)"),
        ("4f3a9c", "id", None),
        ("  ", "id", "is empty"),
        (NOT_TEXT, "id", "is not a string (an object, a list, a boolean or null)"),
        (17, "id", "is not a string (int)"),
    ],
)
def test_problem_names_what_is_wrong_or_accepts(value, kind, expected):
    found = problem(value, kind, field="f", max_chars=100)
    if expected is None:
        assert found is None
    else:
        assert found is not None and expected in found and found.startswith("f")


def test_tags_are_checked_as_a_list():
    assert problem(["a", "b"], "tags", field="tags") is None
    assert "51 tags" in problem([f"t{i}" for i in range(51)], "tags", field="tags")
    assert "tags[1] contains a lone surrogate" in problem(["ok", "\ud800"], "tags", field="tags")


def test_shown_escapes_what_cannot_be_printed_and_never_raises():
    assert shown("ok \ud800\x00\u202e") == "ok \\ud800\\u0000\\u202e"
    assert shown(NOT_TEXT) == "(not a string)" and shown({"a": 1}) == "{'a': 1}"
    assert shown("x" * 100, 10) == "x" * 10 + "…"
    shown("\ud800").encode("utf-8")


def test_ids_that_are_not_text_survive_validation_and_are_sorted_out_with_counts():
    answer = MemoryConsolidationResponse.model_validate(
        {"toDelete": [7, {"id": "a"}, None, True, [1], "a", "a", "zz", "\ud800"]}
    )
    found = check_ids(answer.to_delete, {"a", "b"}, field="toDelete")
    assert found.usable == ["a"] and found.duplicates == ["a"] and found.not_shown == ["7", "zz"]
    assert len(found.invalid) == 5 and found.ignored == 8


DIRECTIVE = """Answer with JSON. A worked example — made up:

```json
{"toSave": [{"content": "Nadia's bakery in Examplia opens at 7:00 on weekdays.", "sourceIds": ["ex-1"]}]}
```
"""


@pytest.mark.parametrize(
    "answer",
    [
        "Nadia's bakery in Examplia opens at 7:00 on weekdays.",  # the example itself
        "nadia s bakery in EXAMPLIA opens at 7 00 on weekdays",  # folded
        "Note: Nadia's bakery in Examplia opens at 7:00 on weekdays. Also on Sundays.",  # the example inside an answer
        "The Examplia office is closed on Mondays.",  # the example's made-up subject
    ],
)
def test_an_answer_copying_the_directives_worked_example_is_a_copy(answer):
    assert copied(answer, examples=directive_examples(DIRECTIVE)) is not None


def test_real_content_beside_the_example_is_not_a_copy():
    examples = directive_examples(DIRECTIVE)
    assert copied("Nadia's bakery in Lyon opens at 7:00 on weekdays.", examples=examples) is None
    # without a directive naming the made-up subject, the word alone proves nothing
    assert copied("The Examplia office is closed on Mondays.", examples=frozenset({"something else entirely"})) is None
