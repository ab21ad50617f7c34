"""Typed response contracts: the JSON shape each pass accepts from the model.

Field aliases are the spec's camelCase JSON ("LLM response format": ``toDelete``, ``toSave``,
``sourceIds``, ``sourceNames``, ``seeAlso``); the snake_case names work too. Unknown keys are ignored,
``null`` for a field with a default means the default, and numbers where text is expected (ids such as
``42``) are taken as text. Validation is otherwise strict: a response that does not fit is a failed call,
never a partial apply.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Annotated, Any

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, field_validator, model_validator


class Contract(BaseModel):
    """Base of every response model."""

    model_config = ConfigDict(populate_by_name=True, extra="ignore", coerce_numbers_to_str=True)

    @model_validator(mode="before")
    @classmethod
    def _null_means_default(cls, data: Any) -> Any:
        # Small local models often write `"tags": null`; dropping the key lets the default apply, while a
        # required field that is null still fails validation.
        if isinstance(data, dict):
            return {k: v for k, v in data.items() if v is not None}
        return data


#: Stands in for an item of an id or name list that is not text (an object, a list, true, null), so the pass can
#: ignore that one item with a count instead of the whole answer failing validation. Never a real id (NUL).
NOT_TEXT = "\x00not-text"


def _ids_as_text(value: Any) -> Any:
    if not isinstance(value, list):
        return value
    return [
        v if isinstance(v, str) else str(v) if isinstance(v, int | float) and not isinstance(v, bool) else NOT_TEXT
        for v in value
    ]


def _id_as_text(value: Any) -> Any:
    return _ids_as_text([value])[0]


IdList = Annotated[list[str], BeforeValidator(_ids_as_text)]
IdText = Annotated[str, BeforeValidator(_id_as_text)]


def _metadata_text(value: Any) -> Any:
    if isinstance(value, dict):
        return {str(k): (str(v).lower() if isinstance(v, bool) else v) for k, v in value.items()}
    return value


# --- memory consolidation / preference inference -------------------------------------------------
class MemorySave(Contract):
    content: str
    category: str = "general"
    tags: list[str] = Field(default_factory=list)
    source_ids: IdList = Field(default_factory=list, alias="sourceIds")
    # Preference inference sets e.g. {"requires_user_permission": "true"} (spec, pass 5).
    metadata: dict[str, str] = Field(default_factory=dict)

    @field_validator("metadata", mode="before")
    @classmethod
    def _metadata_as_text(cls, value: Any) -> Any:
        return _metadata_text(value)


class MemoryConsolidationResponse(Contract):
    to_delete: IdList = Field(default_factory=list, alias="toDelete")
    to_save: list[MemorySave] = Field(default_factory=list, alias="toSave")


class PreferenceInferenceResponse(MemoryConsolidationResponse):
    """Same shape as memory consolidation (spec: "Memory consolidation / preference inference")."""


# --- merge repair ---------------------------------------------------------------------------------
class MergeRepairResponse(Contract):
    content: str


# --- skills ------------------------------------------------------------------------------------------
class SkillSave(Contract):
    name: IdText
    summary: str = ""
    content: str
    source_names: IdList = Field(default_factory=list, alias="sourceNames")
    see_also: IdList = Field(default_factory=list, alias="seeAlso")


class SkillConsolidationResponse(Contract):
    """Skill consolidation and skill optimization share this shape."""

    to_delete: IdList = Field(default_factory=list, alias="toDelete")
    to_save: list[SkillSave] = Field(default_factory=list, alias="toSave")


SkillOptimizationResponse = SkillConsolidationResponse


class SkillGapSave(Contract):
    name: str
    summary: str = ""
    content: str


class SkillGapResponse(Contract):
    to_save: list[SkillGapSave] = Field(default_factory=list, alias="toSave")


# --- wisp failure analysis ------------------------------------------------------------------------
class WispFailurePattern(Contract):
    description: str
    classification: str = ""
    affected_steps: list[str] = Field(default_factory=list, alias="affectedSteps")


class WispSkillAnnotation(Contract):
    skill_name: IdText = Field(alias="skillName")
    annotation: str


class WispPromotion(Contract):
    """Attach a promotion candidate's definition (named by its hash: the model never supplies the body) to an existing
    skill as a resource file. Missing fields are empty text, so the pass skips that promotion with its reason."""

    skill_name: IdText = Field(default="", alias="skillName")
    file_name: IdText = Field(default="", alias="fileName")
    definition_hash: IdText = Field(default="", alias="definitionHash")
    description: str = ""


class WispAnalysisResponse(Contract):
    failure_patterns: list[WispFailurePattern] = Field(default_factory=list, alias="failurePatterns")
    skill_annotations: list[WispSkillAnnotation] = Field(default_factory=list, alias="skillAnnotations")
    # wisp description -> why it is (or is not) worth promoting to a stored wisp skill
    promotion_notes: dict[str, str] = Field(default_factory=dict, alias="promotionNotes")
    promotions: list[WispPromotion] = Field(default_factory=list)


# --- tier routing review -----------------------------------------------------------------------------
class RoutingFinding(Contract):
    content: str
    tags: list[str] = Field(default_factory=list)
    tier: IdText | None = None


class TierRoutingResponse(Contract):
    findings: list[RoutingFinding] = Field(default_factory=list)


# --- contradiction sweep ------------------------------------------------------------------------------
class Supersession(Contract):
    """One proposed pair: ``winnerId`` supersedes ``loserId``. Missing ids are empty text, so the pass ignores that
    pair with its reason instead of the whole answer failing."""

    winner_id: IdText = Field(default="", alias="winnerId")
    loser_id: IdText = Field(default="", alias="loserId")
    reason: str = ""


class ContradictionSweepResponse(Contract):
    supersessions: list[Supersession] = Field(default_factory=list)


@dataclass(frozen=True)
class ModelCall:
    """One kind of model call, defined next to the pass that makes it (its ``PassSpec.model_call``; merge repair is
    a call of memory consolidation, not a pass): the response contract, the directive (the option naming an agent's
    override file, None when there is none, and the built-in file, in the top-level ``directives/`` folder installed
    as the package data of ``dream_assets.directives``) and the offline backend's answer (structured inputs ->
    (answer, note)). The pass hands its call to the model layer (``ModelClient.request``), which never looks a call
    up by name; the table of every call by name is the passes' (``dream_assets.passes.registry.MODEL_CALLS``)."""

    name: str  # the pass name, also the usage and ledger key
    contract: type[Contract]
    directive_file: str
    directive_option: str | None
    offline: Callable[[Mapping[str, Any]], tuple[dict[str, Any], str]]
