"""Wisp failure analysis: recurring wisp failures annotate the skills that produced them; steady successes are
flagged for promotion, and the model may promote one to a resource of an existing skill.

Spec "Wisp failure analysis": the last ``WispAnalysisWindow`` (14 days) of wisp executions, grouped by description.
The HOST decides what qualifies (DESIGN principle 4: the model proposes, the host decides):

- a failure pattern is a description that failed at least ``WispFailureMinFrequency`` (3) times in the window; its
  affected steps are the ``failedStep`` values, its producers the ``skillName`` of the failed runs;
- a promotion candidate is a description run at least ``WispSuccessMinFrequency`` (5) times with a success rate
  strictly above ``WispSuccessMinRate`` (80 %: exactly 80 % does not qualify).

The model classifies the failure patterns and writes the annotations. An annotation is appended to a skill only
when that skill produced a qualifying failure pattern and exists, live, in the catalog — this pass never creates or
revives a skill, and the same annotation text is never appended twice. Model output about anything the host did
not qualify is ignored (and counted). Nothing qualifying means no call. Every model-provided string is checked
before it is used (model_text.py): an item carrying a lone surrogate, a control character or an over-long text is
rejected with its reason (``invalid_items``) and the rest applies; each annotation is written with its change-log
row in one transaction, on the skill as it is then.

A promotion applies a candidate: the model names an existing skill, a relative file name and the definition hash the
prompt showed for the candidate (the most frequent ``definition`` of its successful runs); the host appends that
body verbatim, with its hash, when it was first seen and when it was promoted, as a resource section of the skill, in
one transaction with its change-log row (undoable per cycle). A promotion naming a skill that does not exist, a hash
that matches no candidate, or an empty skill name, file name or hash is skipped with its reason; a missing
description falls back to the candidate's.

The pass is gated by the event watermark of the wisp execution log, the ``wisp_execution_log`` data version
(``input_fingerprints.events_watermark``): runs ageing out of the window are not a change, a new run is. The ledger
is stamped only after a usable answer was applied.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections import Counter
from collections.abc import Generator, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Annotated, Any, ClassVar

from pydantic import Field

from dream_assets.input_fingerprints import events_watermark
from dream_assets.llm.contracts import Contract, IdText, ModelCall, ShownIds
from dream_assets.llm.prompts import extras, one_line, value_text
from dream_assets.model import Skill, iso, utc
from dream_assets.options import DreamOptions, PassOptions, pass_option
from dream_assets.passes.common import CopyGuard, call_model_batched, note_malformed
from dream_assets.passes.context import PassContext
from dream_assets.passes.model_text import problem, shown
from dream_assets.passes.report import AboutToCall, PassReport
from dream_assets.passes.spec import HistoryAnalysis, PassSpec
from dream_assets.profile import AgentProfile
from dream_assets.store.log_records import WispExecutionEvent
from dream_assets.store.logs import log_exists, read_archived, read_events
from dream_assets.store.skills import MAX_SKILL_CHARS, SkillError

PASS = "wisp_failure_analysis"
LOG = "wisp-executions"
SECTION_HEADING = "### Known failure"
RESOURCE_HEADING = "### Resource"
MAX_ANNOTATION_CHARS = 2_000  # an annotation is a negative example or a corrected pattern, not a document
MAX_LABEL_CHARS = 200  # a failure classification is a label
_MAX_ERRORS = 3  # distinct errors quoted per pattern
_MAX_ERROR_CHARS = 300


# --- the model call: response contract, prompt, offline answer --------------------------------------------------------
class WispFailurePattern(Contract):
    description: str
    classification: str = ""
    affected_steps: list[str] = Field(default_factory=list, alias="affectedSteps")


class WispSkillAnnotation(Contract):
    skill_name: Annotated[IdText, ShownIds("failure_patterns.skill_name")] = Field(alias="skillName")
    annotation: str


class WispPromotion(Contract):
    """Attach a promotion candidate's definition (named by its hash: the model never supplies the body) to an existing
    skill as a resource file. Missing fields are empty text, so the pass skips that promotion with its reason."""

    skill_name: Annotated[IdText, ShownIds("success_patterns.skill_name", "failure_patterns.skill_name")] = Field(
        default="", alias="skillName"
    )
    file_name: IdText = Field(default="", alias="fileName")
    definition_hash: Annotated[IdText, ShownIds("promotion_candidates.definition_hash")] = Field(
        default="", alias="definitionHash"
    )
    description: str = ""


class WispAnalysisResponse(Contract):
    failure_patterns: list[WispFailurePattern] = Field(default_factory=list, alias="failurePatterns")
    skill_annotations: list[WispSkillAnnotation] = Field(default_factory=list, alias="skillAnnotations")
    # wisp description -> why it is (or is not) worth promoting to a stored wisp skill
    promotion_notes: dict[str, str] = Field(default_factory=dict, alias="promotionNotes")
    promotions: list[WispPromotion] = Field(default_factory=list)


def _pattern_line(p: Mapping[str, Any], shown: Sequence[str]) -> list[str]:
    head = f'- "{p.get("description", "")}"'
    if p.get("skill_name"):
        head += f" (skill {p['skill_name']})"
    for key in shown:
        if p.get(key) not in (None, "", [], {}):
            head += f" {key}={value_text(p[key])}"
    extra = extras(p, {"description", "skill_name", "errors", *shown})
    lines = [head + (f" {extra}" if extra else "")]
    for err in p.get("errors") or []:
        lines.append(f"    error: {one_line(err)}")
    return lines


def render_wisp_failures(
    failure_patterns: Sequence[Mapping[str, Any]], success_patterns: Sequence[Mapping[str, Any]]
) -> str:
    def order(p: Mapping[str, Any]) -> tuple[int, str]:
        return (-int(p.get("count") or p.get("runs") or 0), str(p.get("description", "")))

    lines = [f"## Recurring failure patterns ({len(failure_patterns)})"]
    for p in sorted(failure_patterns, key=order):
        lines += _pattern_line(p, ("count", "failed_steps"))
    if not failure_patterns:
        lines.append("(none)")
    lines += ["", f"## Consistent success patterns — promotion candidates ({len(success_patterns)})"]
    for p in sorted(success_patterns, key=order):
        lines += _pattern_line(p, ("runs", "successes", "success_rate"))
    if not success_patterns:
        lines.append("(none)")
    return "\n".join(lines) + "\n"


def _annotation(p: Mapping[str, Any]) -> str:
    steps = [str(s) for s in p.get("failed_steps") or []]
    errors = [str(e) for e in p.get("errors") or []]
    text = f'Known failure ({int(p.get("count") or 0)}× in the review window) in wisp "{p.get("description", "")}"'
    detail = []
    if steps:
        detail.append(f"step {', '.join(steps)}")
    if errors:
        detail.append(errors[0])
    return text + (": " + " — ".join(detail) if detail else "")


def _wisp_failure_analysis(inputs: Mapping[str, Any]) -> dict[str, Any]:
    patterns = [p for p in inputs.get("failure_patterns") or [] if isinstance(p, Mapping)]
    return {
        "failurePatterns": [
            {
                "description": str(p.get("description", "")),
                "classification": "unclassified (offline)",
                "affectedSteps": [str(s) for s in p.get("failed_steps") or []],
            }
            for p in patterns
        ],
        "skillAnnotations": [
            {"skillName": str(p["skill_name"]), "annotation": _annotation(p)} for p in patterns if p.get("skill_name")
        ],
        "promotionNotes": {},
    }


def answer_wisp_failure_analysis(inputs: Mapping[str, Any]) -> tuple[dict[str, Any], str]:
    """The offline backend's answer (``ModelCall.offline``). Inputs: ``{"failure_patterns": [{"description",
    "skill_name", "count", "failed_steps", "errors"}], "success_patterns": [...]}``. The host's failure patterns echoed
    with classification "unclassified (offline)", and for each pattern with a skill an annotation that quotes only the
    data. No promotion notes."""
    return _wisp_failure_analysis(inputs), "offline backend: failure patterns echoed unclassified; no promotion notes"


# --- grouping (pure) ---------------------------------------------------------------------------------------------


@dataclass
class WispGroup:
    """The runs of one wisp description inside the window."""

    description: str
    runs: int = 0
    successes: int = 0
    failed_steps: Counter[str] = field(default_factory=Counter)
    errors: Counter[str] = field(default_factory=Counter)
    producers: Counter[str] = field(default_factory=Counter)  # skill names of the failed runs
    skills: Counter[str] = field(default_factory=Counter)  # skill names of all runs
    # definition body of the successful runs -> (runs, first seen): what a promotion may attach
    definitions: dict[str, tuple[int, datetime]] = field(default_factory=dict)

    @property
    def failures(self) -> int:
        return self.runs - self.successes

    @property
    def success_rate(self) -> float:
        return self.successes / self.runs if self.runs else 0.0

    def add(self, event: WispExecutionEvent) -> None:
        self.runs += 1
        if event.skill_name:
            self.skills[event.skill_name] += 1
        if event.success:
            self.successes += 1
            if event.definition and event.definition.strip():
                runs, first = self.definitions.get(event.definition, (0, event.timestamp))
                self.definitions[event.definition] = (runs + 1, min(first, event.timestamp))
            return
        if event.failed_step:
            self.failed_steps[event.failed_step] += 1
        if event.error:
            self.errors[event.error.strip()[:_MAX_ERROR_CHARS]] += 1
        if event.skill_name:
            self.producers[event.skill_name] += 1


def description_key(description: str) -> str:
    """Runs are grouped by description; white space and letter case do not make a different wisp."""
    return " ".join(description.split()).casefold()


def group_executions(events: Iterable[WispExecutionEvent]) -> dict[str, WispGroup]:
    """Executions grouped by description (first spelling seen is kept); runs without a description are left out."""
    groups: dict[str, WispGroup] = {}
    for event in events:
        key = description_key(event.description)
        if not key:
            continue
        group = groups.get(key)
        if group is None:
            group = groups[key] = WispGroup(" ".join(event.description.split()))
        group.add(event)
    return groups


def is_failure_pattern(group: WispGroup, options: DreamOptions) -> bool:
    section = options.section(WispFailureAnalysisOptions)
    return group.failures >= section.failure_min_frequency


def is_promotion_candidate(group: WispGroup, options: DreamOptions) -> bool:
    # "> 80 %" is strict (spec): 4 of 5 runs is exactly 0.8 and does not qualify. Float division of two small
    # integers rounds to the same double as the decimal literal, so the boundary compares exactly.
    section = options.section(WispFailureAnalysisOptions)
    return group.runs >= section.success_min_frequency and group.success_rate > section.success_min_rate


def _ranked(counter: Counter[str]) -> list[str]:
    return [k for k, _ in sorted(counter.items(), key=lambda kv: (-kv[1], kv[0]))]


def failure_input(group: WispGroup) -> dict[str, Any]:
    """A failure pattern as the prompt renderer and the offline backend read it."""
    producers = _ranked(group.producers)
    out: dict[str, Any] = {
        "description": group.description,
        "skill_name": producers[0] if producers else None,
        "count": group.failures,
        "runs": group.runs,
        "failed_steps": _ranked(group.failed_steps),
        "errors": _ranked(group.errors)[:_MAX_ERRORS],
    }
    if len(producers) > 1:
        out["other_skills"] = producers[1:]
    return out


def success_input(group: WispGroup) -> dict[str, Any]:
    skills = _ranked(group.skills)
    return {
        "description": group.description,
        "skill_name": skills[0] if skills else None,
        "runs": group.runs,
        "successes": group.successes,
        "success_rate": round(group.success_rate, 3),
    }


@dataclass(frozen=True)
class PromotionCandidate:
    """The definition a steady success ran with: its most frequent body among the successful runs (ties: the one
    first seen), the body's hash and when it was first seen in the window."""

    description: str
    body: str
    definition_hash: str
    created_at: datetime


def definition_hash(body: str) -> str:
    return "sha256:" + hashlib.sha256(body.encode("utf-8")).hexdigest()


def promotion_candidate(group: WispGroup) -> PromotionCandidate | None:
    """None when no successful run of the group recorded its definition."""
    if not group.definitions:
        return None
    body, (_, first) = min(group.definitions.items(), key=lambda kv: (-kv[1][0], kv[1][1], kv[0]))
    return PromotionCandidate(group.description, body, definition_hash(body), utc(first))


def render_promotion_candidates(candidates: Sequence[PromotionCandidate]) -> str:
    """The definitions the model may promote, each with the hash it must name."""
    if not candidates:
        return ""
    lines = ["", f"## Promotion candidate definitions ({len(candidates)})"]
    for c in candidates:
        fence = _fence(c.body)
        lines += [
            f'### "{c.description}" definitionHash={c.definition_hash} first seen {iso(c.created_at)}',
            fence,
            c.body.rstrip("\n"),
            fence,
        ]
    return "\n".join(lines) + "\n"


def _fence(body: str) -> str:
    """A backtick fence longer than any run of backticks in ``body``, so the body is quoted verbatim."""
    longest = max((len(m) for m in re.findall(r"`+", body)), default=0)
    return "`" * max(3, longest + 1)


def resource_section(file_name: str, description: str, candidate: PromotionCandidate, now: datetime) -> str:
    """The resource block a promotion appends to a skill: the file name, its description, the definition hash, when
    the definition was first seen and when it was promoted, then the body verbatim."""
    fence = _fence(candidate.body)
    return (
        f"{RESOURCE_HEADING} `{file_name}`\n"
        f"description: {' '.join(description.split())}\n"
        f"definitionHash: {candidate.definition_hash}\n"
        f"createdAt: {iso(candidate.created_at)}\n"
        f"promotedAt: {iso(now)}\n"
        f"{fence}\n{candidate.body.rstrip(chr(10))}\n{fence}\n"
    )


def promoted_hashes(skill_content: str) -> set[str]:
    """The definition hashes of the resource sections of a skill, read from each section's own header (the lines
    between its heading and its fenced body), exactly: a hash quoted inside a promoted body or the skill's prose is
    not a promotion."""
    found: set[str] = set()
    fence: str | None = None
    in_header = False
    for line in skill_content.splitlines():
        if fence is not None:
            if line.strip() == fence:
                fence = None
            continue
        if line.startswith(f"{RESOURCE_HEADING} "):
            in_header = True
        elif in_header and line.startswith("```"):
            fence, in_header = line.strip(), False
        elif in_header and line.startswith("definitionHash: "):
            found.add(line[len("definitionHash: ") :].strip())
    return found


_FILE_NAME = re.compile(r"^(?!/)(?!.*(?:^|/)\.\.?(?:/|$))[A-Za-z0-9._/-]{1,200}$")


# --- annotations (pure) ------------------------------------------------------------------------------------------


def _norm(text: str) -> str:
    return " ".join(text.split()).casefold()


def annotate(content: str, annotations: Sequence[str], heading: str) -> tuple[str, list[str]]:
    """``content`` with one dated section per annotation not already in it; returns (new content, appended)."""
    present = _norm(content)
    appended: list[str] = []
    for text in annotations:
        key = _norm(text)
        if not key or key in present:
            continue
        content = f"{content.rstrip()}\n\n{heading}\n{text.strip()}\n"
        present = _norm(content)
        appended.append(text.strip())
    return content, appended


# --- the pass ----------------------------------------------------------------------------------------------------


def no_wisp_log(ctx: PassContext) -> str | None:
    return None if log_exists(ctx.profile, LOG) else "no wisp execution log (logs/wisp-executions.jsonl is absent)"


def _item_label(item: Any) -> str:
    return str(item.get("description", "") if isinstance(item, dict) else getattr(item, "description", item))


def analyse_wisp_failures(ctx: PassContext) -> Generator[AboutToCall, bool, PassReport]:
    """The pass, after the shared opening (enabled, wisp execution log present: runner.opening); gated on the log's
    watermark and stamped with it once the answer was applied."""
    report = PassReport(PASS)
    opts = ctx.options
    section = opts.section(WispFailureAnalysisOptions)
    days = f"{section.window.total_seconds() / 86400:g}"
    # The whole log is read once: its watermark is the change-gate fingerprint (the wisp_execution_log data version),
    # the window is what the pass analyses.
    read = read_events(ctx.profile, LOG)
    note_malformed(report, LOG, read)
    fingerprint = events_watermark(read.events)
    since = ctx.now - section.window
    events: list[WispExecutionEvent] = [e for e in read.events if since <= e.timestamp < ctx.now]
    groups = group_executions(events)
    failures = sorted((g for g in groups.values() if is_failure_pattern(g, opts)), key=lambda g: g.description)
    promotions = sorted((g for g in groups.values() if is_promotion_candidate(g, opts)), key=lambda g: g.description)
    report.counts.update(
        {
            "executions": len(events),
            "descriptions": len(groups),
            "failure_patterns": len(failures),
            "promotion_candidates": len(promotions),
        }
    )
    report.extra["promotion_candidates"] = [success_input(g) for g in promotions]
    if not failures and not promotions:
        return report.skip(
            f"no recurring failure (≥ {section.failure_min_frequency}) or consistent success pattern "
            f"(≥ {section.success_min_frequency} runs, > {section.success_min_rate:.0%}) among "
            f"{len(events)} execution(s) in the last {days} days: no call"
        )
    if not (yield AboutToCall(fingerprint, report)):
        return report

    failure_inputs = [failure_input(g) for g in failures]
    success_inputs = [success_input(g) for g in promotions]
    candidates = [c for c in (promotion_candidate(g) for g in promotions) if c is not None]

    def render(items):
        failed = [x for kind, x in items if kind == "failure"]
        succeeded = [x for kind, x in items if kind == "success"]
        promotable = [x for kind, x in items if kind == "candidate"]
        inputs = {
            "failure_patterns": failed,
            "success_patterns": succeeded,
            "promotion_candidates": [
                {"description": c.description, "definition_hash": c.definition_hash, "created_at": iso(c.created_at)}
                for c in promotable
            ],
            "window_days": float(days),
        }
        return render_wisp_failures(failed, succeeded) + render_promotion_candidates(promotable), inputs

    items = (
        [("failure", x) for x in failure_inputs]
        + [("success", x) for x in success_inputs]
        + [("candidate", c) for c in candidates]
    )
    response = call_model_batched(
        ctx, report, SPEC.model_call, items, render, what="patterns", label=lambda item: _item_label(item[1])
    )
    if response is None:
        return report

    by_key = {description_key(g.description): g for g in failures}
    classification = _classifications(report, response.failure_patterns, by_key)
    for g in failures:
        label = classification.get(description_key(g.description), "")
        steps = _ranked(g.failed_steps)
        report.change(
            "failure-pattern",
            g.description,
            f"{g.failures} of {g.runs} runs failed"
            + (f" at {', '.join(steps)}" if steps else "")
            + (f"; {label}" if label else ""),
        )
    report.extra["failure_patterns"] = [
        {**failure_input(g), "classification": classification.get(description_key(g.description), "")} for g in failures
    ]

    guard = CopyGuard.for_call(ctx, SPEC.model_call)
    annotated = _apply_annotations(ctx, report, response.skill_annotations, failures, guard)
    _report_promotions(report, response.promotion_notes, promotions)
    promoted = _apply_promotions(ctx, report, response.promotions, candidates, guard)
    summary = (
        f"{len(failures)} recurring failure pattern(s), {annotated} skill(s) annotated, "
        f"{len(promotions)} promotion candidate(s), {promoted} promoted, from {len(events)} execution(s) in the last "
        f"{days} days"
    )
    return CopyGuard.finish(report, summary)


def run_wisp_failure_analysis(ctx: PassContext) -> PassReport:
    """The pass with its shared opening, change gate and ledger stamp (runner.attempt: no lock, no review mode, no
    recorded outcome)."""
    from dream_assets.passes.runner import attempt

    return attempt(SPEC, ctx)


def history_patterns(profile: AgentProfile, options: DreamOptions, end: datetime) -> list[dict[str, Any]]:
    """History: per wisp description in the window ending at ``end`` (read from the log warehouse): runs, failures,
    success rate, failing steps, and whether it qualifies as a failure pattern or a promotion candidate — by this
    pass's own grouping and thresholds."""
    section = options.section(WispFailureAnalysisOptions)
    groups = group_executions(read_archived(profile, LOG, end - section.window, end).events)
    return [
        {
            "description": g.description,
            "runs": g.runs,
            "failures": g.failures,
            "success_rate": g.success_rate,
            "failed_steps": json.dumps(sorted(g.failed_steps.items())),
            "skills": json.dumps(sorted(g.skills)),
            "failure_pattern": is_failure_pattern(g, options),
            "promotion_candidate": is_promotion_candidate(g, options),
        }
        for _, g in sorted(groups.items())
    ]


def _classifications(report: PassReport, patterns: Sequence[Any], by_key: dict[str, WispGroup]) -> dict[str, str]:
    found: dict[str, str] = {}
    ignored = 0
    for n, p in enumerate(patterns):
        bad = problem(p.description, "text", field=f"failurePatterns[{n}].description") or problem(
            p.classification, "text", field=f"failurePatterns[{n}].classification", max_chars=MAX_LABEL_CHARS
        )
        if bad:
            _invalid(report, f"failurePatterns[{n}]", bad)
            continue
        key = description_key(p.description)
        if key not in by_key:
            ignored += 1
            continue
        found.setdefault(key, p.classification.strip())
    if ignored:
        report.warn(
            f"{ignored} failure pattern(s) in the answer do not match a recurring failure found in the window; ignored"
        )
        report.count("patterns_ignored", ignored)
    return found


def _apply_annotations(
    ctx: PassContext,
    report: PassReport,
    proposals: Sequence[Any],
    failures: Sequence[WispGroup],
    guard: CopyGuard | None = None,
) -> int:
    """Append the qualified annotations, one save and one change row per skill (an annotation that is a placeholder or
    the directive's example is refused by ``guard``, whatever skill it names). Returns the skills annotated."""
    producers: dict[str, list[str]] = {}
    for g in failures:
        for name in g.producers:
            producers.setdefault(name, []).append(g.description)
    wanted: dict[str, list[str]] = {}
    ignored: list[str] = []
    for n, p in enumerate(proposals):
        bad = problem(p.skill_name, "id", field=f"skillAnnotations[{n}].skillName") or problem(
            p.annotation, "text", field=f"skillAnnotations[{n}].annotation"
        )
        if bad:
            _invalid(report, f"skillAnnotations[{n}]", bad)
            continue
        name, text = p.skill_name.strip(), p.annotation.strip()
        if (
            text
            and guard is not None
            and guard.refuse(report, text, field="annotation", target=f"skillAnnotations[{n}]")
        ):
            continue
        if name not in producers:
            ignored.append(name)
            continue
        if not text:
            continue
        if len(text) > MAX_ANNOTATION_CHARS:
            report.warn(
                f"annotation for skill {name} is {len(text)} characters (limit {MAX_ANNOTATION_CHARS}); not appended"
            )
            report.count("annotations_rejected")
            continue
        wanted.setdefault(name, []).append(text)
    if ignored:
        report.warn(
            f"annotation(s) for {', '.join(sorted({shown(i, 60) for i in ignored}))} ignored: not the "
            "producer of a recurring failure pattern in the window"
        )
        report.count("annotations_ignored", len(ignored))

    annotated = 0
    day = (iso(ctx.now) or "")[:10]
    for name in sorted(wanted):
        descriptions = producers[name]
        heading = f"{SECTION_HEADING} ({day})"
        if len(descriptions) == 1:
            heading += f': wisp "{descriptions[0]}"'
        # Read, append and write with the change-log row in one transaction: an edit in between cannot be lost, and
        # a crash cannot leave an annotation without its row.
        try:
            with ctx.store.transaction():
                skill = ctx.store.skills.get(name, include_archived=True)
                if skill is None or skill.is_archived:
                    outcome = "absent"
                else:
                    content, appended = annotate(skill.content, wanted[name], heading)
                    if not appended:
                        outcome = "present"
                    elif len(content) > MAX_SKILL_CHARS:
                        outcome = "too-long"
                    else:
                        after = ctx.store.skills.save(skill.with_(content=content), now=ctx.now)
                        _record(ctx, name, skill, after, descriptions)
                        outcome = "annotated"
        except SkillError as exc:
            report.warn(f"skill {name} not annotated: {exc}")
            continue
        if outcome == "absent":
            report.warn(
                f"skill {name} produced a recurring wisp failure but is "
                f"{'archived' if skill else 'not in the catalog'}; not annotated (this pass never creates or "
                "restores skills)"
            )
            report.count("annotations_ignored", len(wanted[name]))
            continue
        report.count("annotations_already_present", len(wanted[name]) - len(appended))
        if outcome == "present":
            continue
        if outcome == "too-long":
            report.warn(f"skill {name}: the annotation would take it past {MAX_SKILL_CHARS} characters; not appended")
            report.count("annotations_rejected", len(appended))
            continue
        annotated += 1
        report.count("annotations_appended", len(appended))
        report.change("skill-annotated", name, " | ".join(a[:120] for a in appended))
    report.count("skills_annotated", annotated)
    return annotated


def _invalid(report: PassReport, target: str, reason: str) -> None:
    """A model-provided item that cannot be used: counted, listed in the changes table; the rest of the answer
    applies."""
    report.count("invalid_items")
    report.change("invalid-item", target, reason)
    report.warn(f"{target} rejected: {reason}")


def _record(ctx: PassContext, name: str, before: Skill, after: Skill, descriptions: Sequence[str]) -> None:
    ctx.record(
        PASS,
        "updated",
        after,
        before=before,
        after=after,
        reason="known-failure annotation from recurring wisp failures: " + "; ".join(f'"{d}"' for d in descriptions),
    )


def _report_promotions(report: PassReport, notes: dict[str, str], promotions: Sequence[WispGroup]) -> None:
    by_key: dict[str, str] = {}
    for k, v in notes.items():
        bad = problem(k, "text", field="promotionNotes key") or problem(
            v, "text", field=f"promotionNotes[{shown(k, 40)}]", max_chars=MAX_ANNOTATION_CHARS
        )
        if bad:
            _invalid(report, "promotionNotes", bad)
            continue
        by_key[description_key(k)] = str(v).strip()
    qualified = {description_key(g.description) for g in promotions}
    ignored = [k for k in by_key if k not in qualified]
    if ignored:
        report.warn(f"{len(ignored)} promotion note(s) for descriptions that are not promotion candidates; ignored")
    candidates = []
    for g in promotions:
        note = by_key.get(description_key(g.description), "")
        candidates.append({**success_input(g), "note": note})
        report.change(
            "promotion-candidate",
            g.description,
            f"{g.successes} of {g.runs} runs succeeded ({g.success_rate:.0%})" + (f"; {note}" if note else ""),
        )
    report.extra["promotion_candidates"] = candidates


def _apply_promotions(
    ctx: PassContext,
    report: PassReport,
    proposals: Sequence[Any],
    candidates: Sequence[PromotionCandidate],
    guard: CopyGuard | None = None,
) -> int:
    """Attach the promoted definitions to their skills, one transaction with its change row per promotion. The body,
    hash and creation time come from the candidate the hash names, never from the model. Returns the promotions
    applied; the rest are skipped, counted and listed with their reason (a description that is a placeholder or the
    directive's example is refused by ``guard``)."""
    by_hash = {c.definition_hash: c for c in candidates}
    report.counts.setdefault("promotions_applied", 0)
    report.counts.setdefault("promotions_skipped", 0)
    applied = 0
    for n, p in enumerate(proposals):
        target = f"promotions[{n}]"
        description = p.description if isinstance(p.description, str) else ""
        if (
            description.strip()
            and guard is not None
            and guard.refuse(report, description, field="description", target=target)
        ):
            continue
        name, file_name, digest = (str(v).strip() for v in (p.skill_name, p.file_name, p.definition_hash))
        bad = (
            problem(p.skill_name, "id", field=f"{target}.skillName")
            or problem(p.file_name, "id", field=f"{target}.fileName")
            or problem(p.definition_hash, "id", field=f"{target}.definitionHash")
            or problem(p.description, "text", field=f"{target}.description", max_chars=MAX_LABEL_CHARS)
        )
        candidate = by_hash.get(digest)
        if not name or not file_name or not digest:
            empty = "skillName" if not name else "fileName" if not file_name else "definitionHash"
            why = f"{empty} is empty"
        elif bad:
            why = bad
        elif candidate is None:
            why = f"definitionHash {shown(digest, 80)} matches no promotion candidate of this window"
        elif not _FILE_NAME.fullmatch(file_name):
            why = f"fileName {shown(file_name, 80)} is not a relative file name (letters, digits, . _ - /; no ..)"
        else:
            why = _promote(ctx, report, name, file_name, p.description, candidate)
        if why:
            report.count("promotions_skipped")
            report.change("promotion-rejected", name or target, why)
            report.warn(f"{target} skipped: {why}")
            continue
        applied += 1
    return applied


def _promote(
    ctx: PassContext, report: PassReport, name: str, file_name: str, description: str, candidate: PromotionCandidate
) -> str:
    """Attach ``candidate`` to skill ``name`` as ``file_name``; returns why it was skipped, or "" when applied."""
    description = description.strip() or candidate.description
    try:
        with ctx.store.transaction():
            skill = ctx.store.skills.get(name, include_archived=True)
            if skill is None or skill.is_archived:
                return f"skill {shown(name, 80)} does not exist{' (archived)' if skill else ''}"
            if candidate.definition_hash in promoted_hashes(skill.content):
                return f"definition {candidate.definition_hash[:19]}… is already a resource of skill {name}"
            content = f"{skill.content.rstrip()}\n\n{resource_section(file_name, description, candidate, ctx.now)}"
            if len(content) > MAX_SKILL_CHARS:
                return f"skill {name} would pass {MAX_SKILL_CHARS} characters with this resource"
            after = ctx.store.skills.save(skill.with_(content=content), now=ctx.now)
            ctx.record(
                PASS,
                "updated",
                after,
                before=skill,
                after=after,
                reason=f'promoted wisp "{candidate.description}" ({candidate.definition_hash}) as resource {file_name}',
            )
    except SkillError as exc:
        return str(exc)
    report.count("promotions_applied")
    report.change("wisp-promoted", name, f'{file_name} ← "{description}" ({candidate.definition_hash[:19]}…)')
    return ""


@dataclass(frozen=True, kw_only=True)
class WispFailureAnalysisOptions(PassOptions):
    """The options section of this pass (``[passes.wisp_failure_analysis]``)."""

    PASS: ClassVar[str] = "wisp_failure_analysis"

    enabled: bool = pass_option(True, "wisp failure analysis", alias="WispFailureAnalysisEnabled")
    model: str = pass_option("", "model for wisp failure analysis; empty = LlmModel", alias="WispFailureAnalysisModel")
    base_url: str = pass_option(
        "", "endpoint for wisp failure analysis; empty = LlmBaseUrl", url=True, alias="WispFailureAnalysisBaseUrl"
    )
    api_key_env: str = pass_option(
        "", "API key variable for wisp failure analysis; empty = LlmApiKeyEnv", alias="WispFailureAnalysisApiKeyEnv"
    )
    apply_mode: str = pass_option(
        "",
        "ApplyMode of wisp failure analysis; empty = ApplyMode",
        choices=("", "auto", "review", "review-risky"),
        alias="WispFailureAnalysisApplyMode",
    )
    directive: str = pass_option(
        "wisp-failure-dream.md", "wisp failure analysis directive", alias="WispFailureDirectivePath"
    )
    window: timedelta = pass_option(
        timedelta(days=14), "how far back wisp executions are read", alias="WispAnalysisWindow"
    )
    failure_min_frequency: int = pass_option(
        3, "failures of one description that make a pattern", minimum=1, alias="WispFailureMinFrequency"
    )
    success_min_frequency: int = pass_option(
        5, "runs of one description needed for a promotion candidate", minimum=1, alias="WispSuccessMinFrequency"
    )
    success_min_rate: float = pass_option(
        0.80,
        "success rate that must be exceeded for a promotion candidate",
        minimum=0.0,
        maximum=1.0,
        alias="WispSuccessMinRate",
    )


SPEC = PassSpec(
    name=PASS,
    group="skills",
    description="Wisp failure analysis — annotates skills whose workflows keep failing.\n\nFinds workflow (wisp) "
    "descriptions that failed 3+ times in 14 days and annotates the skills that produced them; flags consistently "
    "successful ones (5+ runs, over 80 %) as promotion candidates, and attaches the definitions the model promotes to "
    "existing skills as resources (undoable).",
    body=analyse_wisp_failures,
    options=WispFailureAnalysisOptions,
    after=("skill_gap_detection",),
    reads=("wisp_execution_log", "skill_catalog"),
    missing_input=no_wisp_log,
    gate="wisp_execution_log",
    model_call=ModelCall(
        name=PASS,
        contract=WispAnalysisResponse,
        directive_file="wisp-failure-dream.md",
        directive_option="WispFailureDirectivePath",
        offline=answer_wisp_failure_analysis,
    ),
    history=HistoryAnalysis("wisp_failure_history", history_patterns),
)
