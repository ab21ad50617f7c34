"""Pass 4 — Skill optimization: improve skills from failure signals, expand sparse ones.

Spec "Pass 4". Two kinds of skill are sent:

- at risk: used in a session (skill-usage events, or the ``skillNames`` of the session's feedback) that has
  Correction feedback or a SessionSummary rated poor or fair. Each is sent with its failure context: the correction
  and summary texts of those sessions. Signals are read over ``SkillUsageWindow`` (the spec gives no window of its own
  for this pass; it is the window the usage that links a skill to a session is read over).
- sparse: fewer than ``SparseSkillMaxChars`` characters and older than ``SparseSkillMinAge``; sent with the spec's
  review note.

Nothing to send means no model call. The answer may only rewrite skills that were sent (others are ignored with a
warning), keeps their names, and never deletes (``toDelete`` is ignored with a warning). Every model-provided string
is checked before it is applied (model_text.py): an invalid item is rejected with its reason (``invalid_items``),
the rest applies; each rewrite and its change-log row are one write.

What has been answered is not asked again:

- A failure signal no older than this pass's last (not undone) rewrite of a skill was already acted on, so it no
  longer puts that skill at risk; a sparse skill this pass already expanded, and nobody edited since, is not re-sent.
- The change gate covers the selected skills' content and their failure context. It is kept per skill — the skill's
  content fingerprint and a watermark of its signals (newest signal and the signals at that instant) — and the pass
  runs only when the selection holds an item it did not hold when last stamped. Failure signals are windowed, so
  signals ageing out of the window, or a skill dropping out of the selection with them, is not a change; a new
  signal or an edited skill is.
"""

from __future__ import annotations

from collections.abc import Generator, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Annotated, ClassVar

from pydantic import Field

from dream_assets.llm.contracts import IdText, ModelCall, ShownIds
from dream_assets.llm.offline import needs_judgement
from dream_assets.llm.prompts import one_line
from dream_assets.model import Skill
from dream_assets.names import InvalidName
from dream_assets.options import PassOptions, pass_option
from dream_assets.passes.common import CopyGuard, call_model_batched
from dream_assets.passes.context import PassContext
from dream_assets.passes.model_text import problem, shown
from dream_assets.passes.report import AboutToCall, PassReport
from dream_assets.passes.skill_signals import (
    FailureSignal,
    WindowRead,
    at_risk_signals,
    failure_context,
    is_sparse,
    note_malformed,
    read_window,
)
from dream_assets.passes.skill_vocabulary import (
    MAX_SUMMARY_CHARS,
    SkillConsolidationResponse,
    SkillSave,
    same_skill,
    skill_block,
)
from dream_assets.passes.spec import PassSpec
from dream_assets.store.logs import log_exists
from dream_assets.store.skills import MAX_SKILL_CHARS, SkillError
from dream_assets.text.content_hash import event_watermark_fingerprint, skill_fingerprint, stable_hash

PASS = "skill_optimization"
REQUIRED_LOGS = ("skill-usage", "feedback")
FINGERPRINT_PREFIX = "skill-optimization:v1:"
_ITEM_CHARS = 16


# --- the model call: response contract, prompt, offline answer --------------------------------------------------------
# No docstrings on the contracts: a model reads their schema, where a docstring would be words it pays for.
class SkillRewrite(SkillSave):
    # a rewrite keeps its skill's name: one of the skills the call shows (at risk or sparse)
    name: Annotated[IdText, ShownIds("at_risk.name", "sparse.name")]


class SkillOptimizationResponse(SkillConsolidationResponse):
    # skill consolidation's shape, its rewrites naming only the skills sent; toDelete and sourceNames name skills of
    # inputs["skills"], which this call does not show, so they may hold none
    to_save: list[SkillRewrite] = Field(default_factory=list, alias="toSave")


SPARSE_REVIEW_NOTE = (
    "### Review note: This skill has minimal content.\nExpand it with concrete steps, examples, and edge cases."
)


def render_skill_optimization(at_risk: Sequence[tuple[Skill, Sequence[str]]], sparse: Sequence[Skill]) -> str:
    lines = [f"## At-risk skills ({len(at_risk)}): used in sessions with corrections or poor/fair summaries"]
    for skill, context in sorted(at_risk, key=lambda p: p[0].name):
        lines += skill_block(skill)
        lines.append("#### Failure context")
        lines += [f"- {one_line(c)}" for c in context] or ["(none recorded)"]
        lines.append("")
    if not at_risk:
        lines += ["(none)", ""]
    lines.append(f"## Sparse skills ({len(sparse)})")
    for skill in sorted(sparse, key=lambda s: s.name):
        lines += skill_block(skill) + [SPARSE_REVIEW_NOTE, ""]
    if not sparse:
        lines.append("(none)")
    return "\n".join(lines).rstrip("\n") + "\n"


@dataclass
class OptimizationCandidates:
    at_risk: list[tuple[Skill, list[FailureSignal]]] = field(default_factory=list)
    sparse: list[Skill] = field(default_factory=list)
    reads: list[WindowRead] = field(default_factory=list)
    answered_signals: int = 0  # signals left out because this pass already rewrote the skill after them

    @property
    def empty(self) -> bool:
        return not self.at_risk and not self.sparse

    def items(self) -> list[str]:
        """One short hash per selected skill: its content, plus the watermark of its failure signals when at risk."""
        out = {
            _item("at-risk", s, event_watermark_fingerprint((x.timestamp, x.key) for x in sig))
            for s, sig in self.at_risk
        }
        out |= {_item("sparse", s, "") for s in self.sparse}
        return sorted(out)

    def fingerprint(self) -> str:
        return FINGERPRINT_PREFIX + ",".join(self.items())


def _item(kind: str, skill: Skill, watermark: str) -> str:
    content = skill_fingerprint(skill.name, skill.summary, skill.content, skill.see_also)
    return stable_hash(kind, skill.name, content, watermark)[:_ITEM_CHARS]


def last_rewrites(ctx: PassContext) -> dict[str, datetime]:
    """Skill name -> when this pass last rewrote it (changes that were undone do not count)."""
    out: dict[str, datetime] = {}
    for change in ctx.store.changes.list(pass_name=PASS):
        if change.target_type == "skill" and change.kind == "updated" and change.undone_at is None:
            prev = out.get(change.target_id)
            out[change.target_id] = change.created_at if prev is None else max(prev, change.created_at)
    return out


def select_candidates(ctx: PassContext) -> OptimizationCandidates:
    """The at-risk and sparse skills this cycle would send. Reads the logs and the catalog; changes nothing."""
    opts = ctx.options
    skills = {s.name: s for s in ctx.store.skills.list()}
    usage = read_window(ctx.profile, "skill-usage", ctx.now, opts.SkillUsageWindow)
    feedback = read_window(ctx.profile, "feedback", ctx.now, opts.SkillUsageWindow)
    rewritten = last_rewrites(ctx)
    out = OptimizationCandidates(reads=[usage, feedback])
    for name, signals in at_risk_signals(feedback.events, usage.events, known=skills).items():
        since = rewritten.get(name)
        fresh = [s for s in signals if since is None or s.timestamp > since]
        out.answered_signals += len(signals) - len(fresh)
        if fresh:
            out.at_risk.append((skills[name], fresh))
    risky = {s.name for s, _ in out.at_risk}
    for skill in skills.values():
        if skill.name in risky or not is_sparse(
            skill, ctx.now, max_chars=opts.SparseSkillMaxChars, min_age=opts.SparseSkillMinAge
        ):
            continue
        done = rewritten.get(skill.name)
        if done is not None and done >= skill.updated_at:
            continue  # this pass already expanded it and nobody edited it since
        out.sparse.append(skill)
    return out


def input_fingerprint(ctx: PassContext) -> str | None:
    """The change-gate fingerprint of what the pass would send now (the sensor's view: read-only), or None when no
    skill is at risk or sparse."""
    found = select_candidates(ctx)
    return None if found.empty else _gate_fingerprint(ctx, found.fingerprint(), found.items())


def _gate_fingerprint(ctx: PassContext, current: str, items: Sequence[str]) -> str:
    """The stamped fingerprint when every current item was already in it (nothing new), else the current one."""
    record = ctx.ledger.get(PASS)
    if record is not None and record.fingerprint.startswith(FINGERPRINT_PREFIX):
        stamped = set(record.fingerprint[len(FINGERPRINT_PREFIX) :].split(","))
        if set(items) <= stamped:
            return record.fingerprint
    return current


def no_signal_logs(ctx: PassContext) -> str | None:
    """The skill-usage or feedback log is absent: without both, no at-risk skill can be found."""
    missing = [kind for kind in REQUIRED_LOGS if not log_exists(ctx.profile, kind)]
    if not missing:
        return None
    absent = " and no ".join(f"{kind} log (logs/{kind}/)" for kind in missing)
    return f"no {absent}: skill optimization needs skill usage and feedback to find at-risk skills (spec 'Pass 4')"


def optimize_skills(ctx: PassContext) -> Generator[AboutToCall, bool, PassReport]:
    """The pass, after the shared opening (enabled, skill-usage and feedback logs present: runner.opening); gated on
    its selected items (nothing new when every one was in the last stamp) and stamped with this run's selection once
    the answer was applied."""
    report = PassReport(PASS)
    opts = ctx.options
    found = select_candidates(ctx)
    for read in found.reads:
        note_malformed(report, read.kind, read)
    report.counts.update(
        {
            "at_risk": len(found.at_risk),
            "sparse": len(found.sparse),
            "answered_signals": found.answered_signals,
        }
    )
    if found.empty:
        return report.skip("no at-risk or sparse skills: nothing to improve")
    items = found.items()
    current = found.fingerprint()
    if not (yield AboutToCall(_gate_fingerprint(ctx, current, items), report)):
        return report

    at_risk = []
    for skill, signals in found.at_risk:
        context = failure_context(signals)
        if is_sparse(skill, ctx.now, max_chars=opts.SparseSkillMaxChars, min_age=opts.SparseSkillMinAge):
            context.append(
                f"Also sparse: only {len(skill.content.strip())} characters of content — expand it with "
                "concrete steps, examples and edge cases."
            )
        at_risk.append((skill, context))

    def render(items):
        risky = [(s, c) for kind, s, c in items if kind == "at_risk"]
        sparse = [s for kind, s, _ in items if kind == "sparse"]
        inputs = {
            "at_risk": [{"name": s.name, "content": s.content, "context": c} for s, c in risky],
            "sparse": [{"name": s.name, "content": s.content} for s in sparse],
        }
        return render_skill_optimization(risky, sparse), inputs

    items = [("at_risk", s, c) for s, c in at_risk] + [("sparse", s, []) for s in found.sparse]
    response = call_model_batched(
        ctx, report, SPEC.model_call, items, render, what="skills", label=lambda item: item[1].name
    )
    if response is None:
        return report
    assert isinstance(response, SkillConsolidationResponse)

    sent = {s.name: s for s, _ in found.at_risk} | {s.name: s for s in found.sparse}
    reasons = {s.name: f"at risk: {len(sig)} failure signal(s)" for s, sig in found.at_risk}
    reasons |= {s.name: f"sparse: expanded from {len(s.content.strip())} characters" for s in found.sparse}
    updated = _apply(ctx, report, response, sent, reasons, CopyGuard.for_call(ctx, SPEC.model_call))
    report.counts["updated"] = updated
    summary = (
        f"{updated} skill(s) improved of {len(sent)} sent ({len(found.at_risk)} at risk, {len(found.sparse)} sparse)"
    )
    return CopyGuard.finish(report, summary, special=lambda: current)


def _apply(
    ctx: PassContext,
    report: PassReport,
    response: SkillConsolidationResponse,
    sent: dict[str, Skill],
    reasons: dict[str, str],
    guard: CopyGuard,
) -> int:
    """Rewrite the sent skills the answer improves. Each rewrite is checked first (model_text.py: a bad name, a blank,
    over-long or unencodable content or summary rejects that item with its reason; a placeholder, the directive's
    example or a rewrite keeping under half of the skill is refused by ``guard``) and then written with its
    change-log row in one transaction, on the skill as it is then (an edit since it was read wins)."""
    store = ctx.store.skills
    if response.to_delete:
        report.count("ignored_deletes", len(response.to_delete))
        report.warn(
            f"toDelete ignored ({', '.join(shown(n, 60) for n in response.to_delete[:10])}): skill "
            "optimization improves skills and never deletes them"
        )
    updated = 0
    done: set[str] = set()
    live_names = {s.name for s in store.list()}
    for n, save in enumerate(response.to_save):
        name = save.name
        bad = problem(name, "name", field=f"toSave[{n}].name")
        content_given = isinstance(save.content, str) and bool(save.content.strip())
        if content_given and guard.refuse(report, save.content, field=f"toSave[{n}].content", target=f"skill {name!r}"):
            done.add(name)  # a copy instead of an answer: refused whatever skill it names
            continue
        if bad is None and name not in sent:
            report.count("ignored")
            report.warn(
                f"toSave entry {name!r} ignored: only the skills that were sent may be rewritten "
                "(an improved skill keeps its name)"
            )
            continue
        if bad is None and name in done:
            report.warn(f"toSave lists {name!r} twice; the first entry is used")
            continue
        if bad is None and isinstance(save.content, str) and not save.content.strip():
            done.add(name)
            report.count("ignored")
            report.warn(f"skill {name!r} not rewritten: field 'content' is empty")
            continue
        bad = (
            bad
            or problem(save.content, "content", field=f"toSave[{n}].content", max_chars=MAX_SKILL_CHARS)
            or problem(save.summary, "text", field=f"toSave[{n}].summary", max_chars=MAX_SUMMARY_CHARS)
        )
        if bad:
            report.count("invalid_items")
            report.change("invalid-item", f"toSave[{n}]", bad)
            report.warn(f"toSave[{n}] rejected: {bad}")
            continue
        done.add(name)
        if guard.refuse_shrink(report, sent[name].content, save.content, target=f"skill {name!r}"):
            continue
        try:
            with ctx.store.transaction():
                current = store.get(name)
                if current is None or not same_skill(current, sent[name]):
                    outcome = "moved"
                else:
                    see_also = current.see_also
                    if "see_also" in save.model_fields_set:
                        see_also = tuple(
                            dict.fromkeys(x for x in save.see_also if x != name and x in live_names and _valid(x))
                        )
                        dropped = [shown(x, 60) for x in save.see_also if x not in see_also and x != name]
                        if dropped:
                            report.info(
                                f"skill {name!r}: seeAlso entries naming no live skill dropped: {', '.join(dropped)}"
                            )
                    new = current.with_(
                        summary=save.summary.strip() or current.summary,
                        content=save.content,
                        see_also=see_also,
                    )
                    if same_skill(current, new):
                        outcome = "unchanged"
                    else:
                        saved = store.save(new, now=ctx.now)
                        ctx.record(PASS, "updated", saved, before=current, after=saved, reason=reasons[name])
                        outcome = "updated"
        except (SkillError, InvalidName) as exc:
            report.count("ignored")
            report.warn(f"skill {name!r} not rewritten: {exc}")
            continue
        if outcome == "moved":
            report.count("ignored")
            report.warn(f"skill {name!r} not rewritten: it changed since it was read (the edit wins)")
        elif outcome == "unchanged":
            report.count("unchanged")
        else:
            assert current is not None
            report.change(
                "skill-improved",
                name,
                f"{reasons[name]}; {len(current.content)} -> {len(saved.content)} chars",
            )
            report.info(f"improved skill {name} ({reasons[name]})")
            updated += 1
    return updated


@dataclass(frozen=True, kw_only=True)
class SkillOptimizationOptions(PassOptions):
    """The options section of this pass (``[passes.skill_optimization]``)."""

    PASS: ClassVar[str] = "skill_optimization"

    enabled: bool = pass_option(True, "pass 4: skill optimization", alias="SkillOptimizationEnabled")
    model: str = pass_option("", "model for skill optimization; empty = LlmModel", alias="SkillOptimizationModel")
    base_url: str = pass_option(
        "", "endpoint for skill optimization; empty = LlmBaseUrl", url=True, alias="SkillOptimizationBaseUrl"
    )
    api_key_env: str = pass_option(
        "", "API key variable for skill optimization; empty = LlmApiKeyEnv", alias="SkillOptimizationApiKeyEnv"
    )
    apply_mode: str = pass_option(
        "",
        "ApplyMode of skill optimization; empty = ApplyMode",
        choices=("", "auto", "review", "review-risky"),
        alias="SkillOptimizationApplyMode",
    )
    directive: str = pass_option(
        "skill-optimize.md", "skill optimization directive", alias="SkillOptimizeDirectivePath"
    )


SPEC = PassSpec(
    name=PASS,
    group="skills",
    description="Skill optimization — improves skills behind corrected or poorly rated sessions.\n\nPass 4. Improves "
    "skills used in sessions with corrections or poor/fair ratings, and expands sparse skills.",
    body=optimize_skills,
    options=SkillOptimizationOptions,
    after=("skill_consolidation",),
    reads=("skill_catalog", "feedback_log", "skill_usage_log"),
    missing_input=no_signal_logs,
    gate="feedback_log",
    fingerprint=input_fingerprint,
    model_call=ModelCall(
        name=PASS,
        contract=SkillOptimizationResponse,
        directive_file="skill-optimize.md",
        directive_option="SkillOptimizeDirectivePath",
        offline=needs_judgement({"toDelete": [], "toSave": []}),
    ),
)


def run_skill_optimization(ctx: PassContext) -> PassReport:
    """The pass with its shared opening, change gate and ledger stamp (runner.attempt: no lock, no review mode, no
    recorded outcome)."""
    from dream_assets.passes.runner import attempt

    return attempt(SPEC, ctx)


def _valid(name: str) -> bool:
    return problem(name, "name", field="name") is None
