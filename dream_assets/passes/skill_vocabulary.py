"""What the skill passes share, so no pass imports another: the skill save items of their answers (and the
``toDelete`` / ``toSave`` answer skill consolidation and skill optimization share), the checks of a proposed skill,
what "unchanged" means for a skill, and how a skill and the catalog are shown to the model."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Annotated

from pydantic import Field

from dream_assets.llm.contracts import Contract, IdList, IdText, ShownIds
from dream_assets.llm.prompts import fenced, one_line
from dream_assets.model import Skill
from dream_assets.passes.model_text import problem
from dream_assets.store.skills import MAX_SKILL_CHARS

MAX_SUMMARY_CHARS = 2_000  # a one-line description of a skill


# --- the answers ---------------------------------------------------------------------------------------------------
#: The skills an answer may merge or delete: those the call shows (``inputs["skills"]``); a call that shows none by that
#: name (skill optimization) may name none. ``seeAlso`` may also name a skill saved in the same answer: not narrowed.
ShownSkills = Annotated[IdList, ShownIds("skills.name")]


class SkillSave(Contract):
    name: IdText
    summary: str = ""
    content: str
    source_names: ShownSkills = Field(default_factory=list, alias="sourceNames")
    see_also: IdList = Field(default_factory=list, alias="seeAlso")


class SkillConsolidationResponse(Contract):
    """Skill consolidation and skill optimization share this shape."""

    to_delete: ShownSkills = Field(default_factory=list, alias="toDelete")
    to_save: list[SkillSave] = Field(default_factory=list, alias="toSave")


class SkillGapSave(Contract):
    name: str
    summary: str = ""
    content: str


# --- checks --------------------------------------------------------------------------------------------------------
def skill_save_problem(save: SkillSave | SkillGapSave, n: int) -> str | None:
    """What is wrong with the name, content or summary of a proposed skill (``toSave[n]``), or None."""
    where = f"toSave[{n}]"
    return (
        problem(save.name, "name", field=f"{where}.name")
        or problem(save.content, "content", field=f"{where}.content", max_chars=MAX_SKILL_CHARS)
        or problem(save.summary, "text", field=f"{where}.summary", max_chars=MAX_SUMMARY_CHARS)
    )


def same_skill(a: Skill | None, b: Skill | None) -> bool:
    """Same as far as a person or the model is concerned: text, links and whether it is archived."""
    if a is None or b is None:
        return a is b
    return (a.summary, a.content, tuple(a.see_also), a.is_archived) == (
        b.summary,
        b.content,
        tuple(b.see_also),
        b.is_archived,
    )


# --- shown to the model --------------------------------------------------------------------------------------------
def skill_block(skill: Skill, notes: Sequence[str] = ()) -> list[str]:
    """``### skill: <name> — <notes>``, its summary and links, and its content in a fence it cannot break out of."""
    title = f"### skill: {skill.name}"
    if notes:
        title += " — " + " ".join(notes)
    lines = [title]
    if skill.summary:
        lines.append(f"Summary: {one_line(skill.summary)}")
    if skill.see_also:
        lines.append("See also: " + ", ".join(sorted(skill.see_also)))
    lines.append(fenced(skill.content))
    return lines


def skill_catalog(skills: Sequence[Skill]) -> list[str]:
    """``## Existing skills (N)``: one line per skill, name and summary."""
    lines = [f"## Existing skills ({len(skills)})"]
    lines += [f"- {s.name}: {one_line(s.summary) or '(no summary)'}" for s in sorted(skills, key=lambda s: s.name)]
    return lines if skills else lines + ["(none)"]
