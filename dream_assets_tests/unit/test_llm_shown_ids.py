"""The ids a call shows, in its schema and its prompt: an id field narrowed to them, and long ids shown by short names
that the answer's id fields are mapped back from (dream_assets.llm.contracts)."""

from __future__ import annotations

from typing import Annotated

from pydantic import Field

from dream_assets.llm.contracts import (
    Contract,
    IdList,
    IdText,
    ShownIds,
    call_schema,
    id_aliases,
    restore_ids,
    with_aliases,
)

A, B = "3d02c8ea69124429a38b46149fc38c17", "b59ef3cd99ab4239b97d9b288980c1c0"


class Pick(Contract):
    winner: Annotated[IdText, ShownIds("entries.id")] = ""
    note: str = ""


class Answer(Contract):
    drop: Annotated[IdList, ShownIds("entries.id")] = Field(default_factory=list)
    picks: list[Pick] = Field(default_factory=list)


def test_long_ids_get_short_names_in_the_order_shown_and_the_prompt_uses_them():
    inputs = {"entries": [{"id": B}, {"id": A}, {"id": B}]}
    aliases = id_aliases(Answer, inputs)
    assert aliases == {B: "e1", A: "e2"}
    prompt = f"- id={B} :: x\n- id={A} :: y\ncluster: {B}, {A}\nnot an id: {A}0"
    assert with_aliases(prompt, aliases) == f"- id=e1 :: x\n- id=e2 :: y\ncluster: e1, e2\nnot an id: {A}0"
    schema = call_schema(Answer, inputs, aliases)
    assert schema["properties"]["drop"]["items"]["enum"] == ["e1", "e2"]
    assert schema["$defs"]["Pick"]["properties"]["winner"]["enum"] == ["e1", "e2"]


def test_an_answer_naming_short_names_is_read_with_the_real_ids_and_anything_else_is_left_as_it_is():
    aliases = {B: "e1", A: "e2"}
    answer = Answer.model_validate({"drop": ["e2", "e9", A], "picks": [{"winner": "e1", "note": "e1 is newer"}]})
    restored = restore_ids(answer, aliases)
    assert restored.drop == [A, "e9", A]  # an unknown name stays for the host to refuse; a real id stays real
    assert restored.picks[0].winner == B and restored.picks[0].note == "e1 is newer"  # free text is not an id


def test_short_ids_and_names_are_shown_as_they_are():
    assert id_aliases(Answer, {"entries": [{"id": "mem-000024"}, {"id": "a"}]}) == {}
    # a short name that is itself an id the call shows would be ambiguous: no short names then
    assert id_aliases(Answer, {"entries": [{"id": A}, {"id": "e1"}]}) == {}


def test_none_shown_means_a_list_may_hold_none_and_items_that_must_name_one_cannot_be_given():
    schema = call_schema(Answer, {"entries": []})
    assert schema["properties"]["drop"]["maxItems"] == 0
    assert schema["properties"]["picks"]["maxItems"] == 0
    assert "x-shown-ids" not in str(schema)
