"""Pass 3 — Skill consolidation: merge overlapping skills, add prefix-family guides, cross-reference, prune.

Spec "Pass 3". The model sees every live skill with its content, its usage count over ``SkillUsageWindow``,
``[sparse-content]`` where it applies, the top ``SkillCoUsedPairs`` co-used pairs and the prefix clusters. The host
then applies the answer with these rules, all in code:

- Safety guard: ``toDelete`` with an empty ``toSave`` is a directive violation — nothing is applied and the pass is
  not stamped, so the next cycle asks again. Likewise no deletion happens unless at least one replacement was saved.
- Replacement first, then retirement: each save is one write together with its change-log row and the retirement
  of its sources (a crash leaves the whole merge or none of it), so only the sources of a save that persisted are
  retired; prunes follow, each one write with its row, and only once a save persisted. Retired and pruned skills are
  archived (restorable), never deleted.
- Every model-provided string is checked first (model_text.py): a save with a bad name, a blank, over-long or
  unencodable content or summary is rejected with its reason (``invalid_items``, an ``invalid-item`` row in the
  changes table) and the rest of the answer applies; names that are not usable, repeated or not shown are ignored
  with a count (``invalid_names``, ``duplicate_names``, ``ignored_names``).
- A merged skill carries the earliest ``created_at`` and the latest ``last_used_at`` of its sources.
- Only skills that were shown can be merged or pruned; a skill edited since it was read is left alone (the edit wins),
  judged inside the same write that would change it.
- Names are validated; ``seeAlso`` entries naming no live skill after this answer are dropped, and references to a
  skill retired into a merge are pointed at the merged skill.

Corpus-wide, so it is behind the change gate: the fingerprint is the live catalog's content
(``SkillStore.fingerprint()``), not the usage counts, which drift as old events age out (spec "The change gate").
"""

from __future__ import annotations

from collections.abc import Collection, Generator, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar

from dream_assets.changes_model import SuccessorHow
from dream_assets.llm.contracts import ModelCall
from dream_assets.llm.offline import needs_judgement
from dream_assets.model import Skill
from dream_assets.names import InvalidName
from dream_assets.options import PassOptions, pass_option
from dream_assets.passes.common import CopyGuard, call_model_batched
from dream_assets.passes.context import PassContext
from dream_assets.passes.model_text import IdCheck, check_ids, problem, shown
from dream_assets.passes.report import AboutToCall, PassReport
from dream_assets.passes.skill_signals import (
    co_used_pairs,
    note_malformed,
    prefix_clusters,
    read_window,
    session_skills,
    sparse_names,
    usage_counts,
)
from dream_assets.passes.skill_vocabulary import (
    SkillConsolidationResponse,
    SkillSave,
    same_skill,
    skill_block,
    skill_save_problem,
)
from dream_assets.passes.spec import PassSpec
from dream_assets.store.logs import log_exists
from dream_assets.store.skills import SkillError, SkillStore

PASS = "skill_consolidation"
USAGE_LOG = "skill-usage"


# --- the model call: response contract, prompt, offline answer --------------------------------------------------------
def render_skill_consolidation(
    skills: Sequence[Skill],
    usage_counts: Mapping[str, int],
    sparse: Collection[str],
    co_used: Sequence[tuple[str, str, int]],
    prefix_clusters: Mapping[str, Sequence[str]],
    *,
    window_days: float = 30,
) -> str:
    days = f"{window_days:g}"
    lines = [f"## Skills ({len(skills)})"]
    for skill in sorted(skills, key=lambda s: s.name):
        notes = [f"used {int(usage_counts.get(skill.name, 0))}× in {days} days"]
        if skill.name in sparse:
            notes.append("[sparse-content]")
        lines += skill_block(skill, notes) + [""]
    pairs = sorted(((min(a, b), max(a, b), int(n)) for a, b, n in co_used), key=lambda p: (-p[2], p[0], p[1]))
    lines.append(f"## Top co-used skill pairs (invoked in the same session, last {days} days)")
    lines += [f"- {a} + {b}: {n} session(s)" for a, b, n in pairs] or ["(none)"]
    lines += ["", "## Prefix clusters (skills grouped by name prefix)"]
    lines += [f"- {prefix}/*: {', '.join(sorted(members))}" for prefix, members in sorted(prefix_clusters.items())] or [
        "(none)"
    ]
    return "\n".join(lines) + "\n"


def catalog_snapshot(skills: SkillStore, attempts: int = 3) -> tuple[str, list[Skill]]:
    """The live skills and the fingerprint of exactly those skills (re-read if an edit landed in between)."""
    fingerprint, live = "", []
    for _ in range(max(1, attempts)):
        fingerprint = skills.fingerprint()
        live = skills.list()
        if skills.fingerprint() == fingerprint:
            break
    return fingerprint, live


def no_usage_log(ctx: PassContext) -> str | None:
    """Spec "DI registration": the skill passes need the skill usage store. Without it every count would read 0 and
    the model could prune skills that are in daily use."""
    if log_exists(ctx.profile, USAGE_LOG):
        return None
    return (
        "no skill-usage log (logs/skill-usage/): usage counts are the evidence that keeps used "
        "skills from being pruned; record skill usage to enable this pass"
    )


def consolidate_skills(ctx: PassContext) -> Generator[AboutToCall, bool, PassReport]:
    """The pass, after the shared opening (enabled, skill-usage log present: runner.opening); gated on the catalog's
    fingerprint and stamped with it once the answer was applied."""
    report = PassReport(PASS)
    opts = ctx.options
    section = opts.section(SkillConsolidationOptions)
    fingerprint, skills = catalog_snapshot(ctx.store.skills)
    report.counts["skills"] = len(skills)
    if len(skills) < 2:
        return report.skip(f"{len(skills)} live skill(s): nothing to merge or cross-reference")
    if not (yield AboutToCall(fingerprint, report)):
        return report

    usage = read_window(ctx.profile, USAGE_LOG, ctx.now, opts.SkillUsageWindow)
    note_malformed(report, USAGE_LOG, usage)
    names = {s.name for s in skills}
    counts = {n: c for n, c in usage_counts(usage.events).items() if n in names}
    sparse = sparse_names(skills, ctx.now, max_chars=opts.SparseSkillMaxChars, min_age=opts.SparseSkillMinAge)
    pairs = co_used_pairs(session_skills(usage.events), section.co_used_pairs, known=names)
    clusters = prefix_clusters(names)
    window_days = opts.SkillUsageWindow.total_seconds() / 86400
    report.counts.update({"sparse": len(sparse), "co_used_pairs": len(pairs), "prefix_clusters": len(clusters)})

    def render(batch):
        # a batch shows its skills with the pairs and prefix clusters among them (skills that belong together are
        # next to each other: in name order, a prefix cluster is one run of the catalog)
        shown = {s.name for s in batch}
        batch_pairs = [p for p in pairs if p[0] in shown and p[1] in shown]
        batch_clusters = {
            prefix: kept for prefix, members in clusters.items() if len(kept := [n for n in members if n in shown]) > 1
        }
        prompt = render_skill_consolidation(
            batch, counts, sparse & shown, batch_pairs, batch_clusters, window_days=window_days
        )
        inputs = {
            "skills": [
                {
                    "name": s.name,
                    "summary": s.summary,
                    "content": s.content,
                    "seeAlso": list(s.see_also),
                    "uses": counts.get(s.name, 0),
                    "sparse": s.name in sparse,
                }
                for s in batch
            ],
            "co_used": [[a, b, n] for a, b, n in batch_pairs],
            "prefix_clusters": batch_clusters,
        }
        return prompt, inputs

    response = call_model_batched(
        ctx,
        report,
        SPEC.model_call,
        sorted(skills, key=lambda s: s.name),
        render,
        what="skills",
        label=lambda s: s.name,
    )
    if response is None:
        return report
    assert isinstance(response, SkillConsolidationResponse)

    if response.to_delete and not response.to_save:
        report.count("directive_violations")
        shown = ", ".join(map(str, response.to_delete[:10])) + (" …" if len(response.to_delete) > 10 else "")
        return report.skip(
            f"directive violation: the answer deletes {len(response.to_delete)} skill(s) ({shown}) "
            "without saving any replacement; nothing applied and the pass is not stamped, so the next "
            "cycle asks again (spec 'Pass 3' safety guard)"
        )

    outcome = apply_consolidation(
        ctx, report, response, {s.name: s for s in skills}, CopyGuard.for_call(ctx, SPEC.model_call)
    )
    return CopyGuard.finish(report, outcome.summary())


@dataclass(frozen=True, kw_only=True)
class SkillConsolidationOptions(PassOptions):
    """The options section of this pass (``[passes.skill_consolidation]``)."""

    PASS: ClassVar[str] = "skill_consolidation"

    enabled: bool = pass_option(True, "pass 3: skill consolidation", alias="SkillConsolidationEnabled")
    model: str = pass_option("", "model for skill consolidation; empty = LlmModel", alias="SkillConsolidationModel")
    base_url: str = pass_option(
        "", "endpoint for skill consolidation; empty = LlmBaseUrl", url=True, alias="SkillConsolidationBaseUrl"
    )
    api_key_env: str = pass_option(
        "", "API key variable for skill consolidation; empty = LlmApiKeyEnv", alias="SkillConsolidationApiKeyEnv"
    )
    apply_mode: str = pass_option(
        "",
        "ApplyMode of skill consolidation; empty = ApplyMode",
        choices=("", "auto", "review", "review-risky"),
        alias="SkillConsolidationApplyMode",
    )
    directive: str = pass_option("skill-dream.md", "skill consolidation directive", alias="SkillDirectivePath")
    co_used_pairs: int = pass_option(
        10, "co-used skill pairs shown to skill consolidation", minimum=0, alias="SkillCoUsedPairs"
    )


SPEC = PassSpec(
    name=PASS,
    group="skills",
    description="Skill consolidation — merges overlapping skills and links related ones.\n\nPass 3. Merges overlapping "
    "skills, adds guide skills for prefix families (mcp/*), fills seeAlso and prunes redundant skills (archived, "
    "restorable). Skipped when the catalog has not changed (change gate).",
    body=consolidate_skills,
    options=SkillConsolidationOptions,
    after=("wisp_failure_analysis",),
    reads=("skill_catalog", "skill_usage_log"),
    missing_input=no_usage_log,
    gate="skill_catalog",
    model_call=ModelCall(
        name=PASS,
        contract=SkillConsolidationResponse,
        directive_file="skill-dream.md",
        directive_option="SkillDirectivePath",
        offline=needs_judgement({"toDelete": [], "toSave": []}),
    ),
)


def run_skill_consolidation(ctx: PassContext) -> PassReport:
    """The pass with its shared opening, change gate and ledger stamp (runner.attempt: no lock, no review mode, no
    recorded outcome)."""
    from dream_assets.passes.runner import attempt

    return attempt(SPEC, ctx)


# --- applying an answer ------------------------------------------------------------------------------------------
@dataclass
class _Planned:
    save: SkillSave
    sources: list[Skill]  # shown skills merged into this one (the target itself excluded)
    target_shown: Skill | None  # the shown skill of the same name, when the save rewrites one


@dataclass
class ConsolidationOutcome:
    merged: int = 0
    created: int = 0
    guides: int = 0
    updated: int = 0
    unchanged: int = 0
    archived: int = 0
    rejected: int = 0
    see_also_dropped: int = 0
    redirects: dict[str, str | None] = field(default_factory=dict)

    def summary(self) -> str:
        return (
            f"{self.merged} merged, {self.created} created ({self.guides} guide(s)), {self.updated} updated, "
            f"{self.archived} archived, {self.unchanged} unchanged, {self.rejected} rejected, "
            f"{self.see_also_dropped} seeAlso link(s) dropped"
        )


def _valid_name(name: str) -> bool:
    return problem(name, "name", field="name") is None


def _invalid(report: PassReport, outcome: ConsolidationOutcome, target: str, reason: str) -> None:
    """A model-provided item that cannot be applied: counted, listed in the changes table; the rest applies."""
    outcome.rejected += 1
    report.count("invalid_items")
    report.change("invalid-item", target, reason)
    report.warn(f"{target} rejected: {reason}")


def _note_ids(report: PassReport, found: IdCheck, what: str) -> None:
    if found.invalid:
        report.count("invalid_names", len(found.invalid))
        report.warn(
            f"{what}: {len(found.invalid)} entr(y/ies) that are not usable skill names ignored: "
            + ", ".join(found.invalid[:10])
        )
    if found.duplicates:
        report.count("duplicate_names", len(found.duplicates))
    if found.not_shown:
        report.count("ignored_names", len(found.not_shown))
        report.warn(
            f"{what} names {', '.join(shown(n, 60) for n in found.not_shown[:10])}, which "
            f"{'is' if len(found.not_shown) == 1 else 'are'} not a live skill that was shown; ignored"
        )


def _plan(
    report: PassReport,
    response: SkillConsolidationResponse,
    shown_skills: Mapping[str, Skill],
    outcome: ConsolidationOutcome,
    guard: CopyGuard,
) -> list[_Planned]:
    planned: list[_Planned] = []
    seen: set[str] = set()
    for n, save in enumerate(response.to_save):
        name = save.name
        if isinstance(save.content, str) and not save.content.strip() and _valid_name(name):
            outcome.rejected += 1
            report.warn(f"toSave entry {name!r} skipped: field 'content' is empty, so its sources are kept")
            continue
        bad = skill_save_problem(save, n)
        if bad:
            _invalid(report, outcome, f"toSave[{n}]", bad + ("; its sources are kept" if save.source_names else ""))
            continue
        if name in seen:
            outcome.rejected += 1
            report.warn(f"toSave lists {name!r} twice; the first entry is used")
            continue
        target = f"toSave[{n}] ({name!r})"
        if guard.refuse(report, save.content, field="content", target=target):
            outcome.rejected += 1
            continue
        rewritten = shown_skills.get(name)
        if rewritten is not None and guard.refuse_shrink(report, rewritten.content, save.content, target=target):
            outcome.rejected += 1
            continue
        found = check_ids([s for s in save.source_names if s != name], shown_skills, field=f"toSave[{n}].sourceNames")
        _note_ids(report, found, f"skill {name!r}: sourceNames")
        seen.add(name)
        planned.append(_Planned(save, [shown_skills[s] for s in found.usable], shown_skills.get(name)))
    return planned


def _filter_see_also(
    name: str, wanted: Iterable[str], allowed: set[str], redirects: Mapping[str, str | None]
) -> tuple[list[str], list[str]]:
    """``wanted`` with retired names redirected to their merge target; self, unknown and invalid names dropped."""
    kept: list[str] = []
    dropped: list[str] = []
    for raw in wanted:
        target = redirects.get(raw, raw) if raw in redirects else raw
        if target is None or not _valid_name(target) or target not in allowed:
            dropped.append(shown(raw, 60))
        elif target != name and target not in kept:
            kept.append(target)
    return kept, dropped


def apply_consolidation(
    ctx: PassContext,
    report: PassReport,
    response: SkillConsolidationResponse,
    shown_skills: Mapping[str, Skill],
    guard: CopyGuard | None = None,
) -> ConsolidationOutcome:
    """Apply one answer. Each save is one write with its change-log row and the retirement of its sources (a merge is
    whole or absent); each prune and each link repair is one write with its row. ``guard`` refuses a save whose
    content is a placeholder or the directive's example, and a rewrite of a skill keeping under half of it (its
    sources are kept)."""
    store = ctx.store.skills
    outcome = ConsolidationOutcome()
    planned = _plan(report, response, shown_skills, outcome, guard or CopyGuard(frozenset()))
    planned_names = {p.save.name for p in planned}

    found = check_ids(response.to_delete, shown_skills, field="toDelete")
    _note_ids(report, found, "toDelete")
    # A source of a merge listed in toDelete too (small models do this) means the merge: it is retired with its merge
    # when that applies and kept when it does not, never pruned on its own.
    merge_sources = {n for save in response.to_save for n in save.source_names if n != save.name}
    deletes: list[str] = []
    unmerged: list[str] = []
    for name in found.usable:
        if name in planned_names:
            report.warn(f"toDelete names {name!r}, which the answer also saves; it is kept")
        elif name in merge_sources:
            if not any(src.name == name for p in planned for src in p.sources):
                unmerged.append(name)
        else:
            deletes.append(name)
    if unmerged:
        report.count("kept_unmerged_sources", len(unmerged))
        report.info(f"kept {', '.join(unmerged)}: listed in toDelete, but a source of a merge that was not applied")
    # Where retired skills go, for seeAlso: a merge source to its merged skill, a pruned skill nowhere.
    planned_redirects: dict[str, str | None] = {}
    for p in planned:
        for src in p.sources:
            if src.name in planned_names:
                report.info(f"{src.name!r} is a source of {p.save.name!r} but is also saved itself; it is kept")
            else:
                planned_redirects.setdefault(src.name, p.save.name)
    for name in deletes:
        planned_redirects.setdefault(name, None)
    allowed = ({s.name for s in store.list()} | planned_names) - set(planned_redirects)

    # 1. Replacement first: each save, with the retirement of its sources, in one write.
    persisted: list[Skill] = []
    for p in planned:
        saved = _persist(ctx, report, p, allowed, planned_redirects, planned_names, outcome)
        if saved is not None:
            persisted.append(saved)

    # 2. Then the prunes — only once something was saved (spec 'Pass 3' safety guard).
    if persisted:
        for name in deletes:
            if name not in outcome.redirects:
                _retire(ctx, report, name, shown_skills[name], None, "pruned as redundant (toDelete)", outcome)
    else:
        refused = set(deletes) | set(planned_redirects)
        if refused:
            report.count("refused_deletes", len(refused))
            report.warn(
                f"{len(refused)} deletion(s) refused ({', '.join(sorted(refused))}): no replacement skill was "
                "saved, and deletions need one (spec 'Pass 3' safety guard)"
            )

    # 3. No dangling seeAlso: links to a retired skill follow it into its merge or are dropped.
    _repair_links(ctx, report, {s.name for s in persisted}, outcome)
    report.counts.update(
        {
            "merged": outcome.merged,
            "created": outcome.created,
            "guides": outcome.guides,
            "updated": outcome.updated,
            "archived": outcome.archived,
            "unchanged": outcome.unchanged,
            "rejected": outcome.rejected,
            "see_also_dropped": outcome.see_also_dropped,
        }
    )
    return outcome


def _retire(
    ctx: PassContext,
    report: PassReport,
    name: str,
    shown_skill: Skill,
    target: str | None,
    reason: str,
    outcome: ConsolidationOutcome,
) -> None:
    """Archive one skill with its change-log row, in one write, unless it changed since it was read (the edit wins)."""
    store = ctx.store.skills
    with ctx.store.transaction():
        current = store.get(name)
        if current is None or current.is_archived or not same_skill(current, shown_skill):
            archived = None
        else:
            archived = store.archive(name, now=ctx.now)
            ctx.record(PASS, "archived", archived, before=current, after=archived, reason=reason)
    if archived is None:
        report.warn(f"skill {name!r} not archived: it changed since it was read (the edit wins)")
        return
    _note_retired(report, name, target, reason, outcome)


def _note_retired(
    report: PassReport, name: str, target: str | None, reason: str, outcome: ConsolidationOutcome
) -> None:
    report.change("skill-archived", name, reason + " — restorable")
    report.info(f"archived skill {name} ({reason}); restore with the undo of this cycle or SkillStore.restore")
    outcome.archived += 1
    outcome.redirects[name] = target


class _Moved(Exception):
    """A skill the save depends on changed since the catalog was read: nothing of the save is written."""


def _persist(
    ctx: PassContext,
    report: PassReport,
    p: _Planned,
    allowed: set[str],
    redirects: Mapping[str, str | None],
    planned_names: set[str],
    outcome: ConsolidationOutcome,
) -> Skill | None:
    """One save and the retirement of its sources, as one write. Returns the saved skill, or None (nothing written)."""
    store = ctx.store.skills
    save, name = p.save, p.save.name
    retire = [s for s in p.sources if s.name not in planned_names and s.name not in outcome.redirects]
    try:
        with ctx.store.transaction():
            current = store.get(name)
            if p.target_shown is not None and not same_skill(current, p.target_shown):
                raise _Moved(f"skill {name!r} not rewritten: it changed since it was read (the edit wins)")
            if p.target_shown is None and current is not None and not current.is_archived:
                raise _Moved(
                    f"skill {name!r} not written: it was created after the catalog was read (never overwritten)"
                )
            # A source already retired into an earlier save of this answer is as it was shown.
            moved = [
                s.name for s in p.sources if s.name not in outcome.redirects and not same_skill(store.get(s.name), s)
            ]
            if moved:
                raise _Moved(
                    f"merge into {name!r} skipped: source(s) {', '.join(moved)} changed since they were "
                    "read; sources kept"
                )

            base = current if current is not None and not current.is_archived else None
            summary = (
                save.summary.strip() or (base.summary if base else "") or (p.sources[0].summary if p.sources else "")
            )
            if "see_also" in save.model_fields_set:
                wanted: Sequence[str] = save.see_also
            else:  # no seeAlso in the answer: keep the links the skill (or its sources) had
                wanted = list(base.see_also) if base else [n for s in p.sources for n in s.see_also]
            see_also, dropped = _filter_see_also(name, wanted, allowed, redirects)
            # Spec "Metadata preservation": earliest CreatedAt and latest LastUsedAt of the sources (the store also
            # keeps the target's own, when it exists).
            kwargs: dict[str, Any] = {}
            if p.sources:
                kwargs["created_at"] = min(s.created_at for s in p.sources)
                used = [s.last_used_at for s in p.sources if s.last_used_at is not None]
                kwargs["last_used_at"] = max(used) if used else None
            skill = Skill(name=name, summary=summary, content=save.content, see_also=tuple(see_also), **kwargs)
            if base is not None and not p.sources and same_skill(base, skill):
                outcome.unchanged += 1
                return None
            saved = store.save(skill, now=ctx.now)
            src_names = [s.name for s in p.sources]
            if src_names:
                kind_label, reason = "skill-merged", f"merged from {', '.join(src_names)}"
            elif current is None:
                is_guide = name.rsplit("/", 1)[-1] == "guide" and "/" in name
                kind_label = "guide-created" if is_guide else "skill-created"
                reason = "prefix-family guide" if is_guide else "new skill"
            else:
                kind_label = "skill-updated"
                reason = "re-created over an archived skill of the same name" if current.is_archived else "rewritten"
                if base is not None and base.content == saved.content and base.summary == saved.summary:
                    reason = "seeAlso updated"
            ctx.record(
                PASS,
                "created" if current is None else "updated",
                saved,
                before=current,
                after=saved,
                reason=reason,
            )
            retired: list[str] = []
            for src in retire:
                before = store.get(src.name)
                archived = store.archive(src.name, now=ctx.now)
                ctx.record(
                    PASS,
                    "archived",
                    archived,
                    before=before,
                    after=archived,
                    reason=f"merged into {name}",
                    successor_id=name,
                    successor_how=SuccessorHow.MERGED_INTO,
                )
                retired.append(src.name)
    except _Moved as exc:
        outcome.rejected += 1
        report.warn(str(exc))
        return None
    except (SkillError, InvalidName) as exc:
        outcome.rejected += 1
        report.warn(f"skill {name!r} not saved: {exc}; nothing of it was written, its sources are kept")
        return None

    if dropped:
        outcome.see_also_dropped += len(dropped)
        report.info(f"skill {name!r}: seeAlso entries naming no live skill dropped: {', '.join(dropped)}")
    if src_names:
        outcome.merged += 1
    elif current is None:
        outcome.created += 1
        outcome.guides += int(kind_label == "guide-created")
    else:
        outcome.updated += 1
    report.change(kind_label, name, reason + (f"; seeAlso: {', '.join(saved.see_also)}" if saved.see_also else ""))
    report.info(f"{kind_label} {name}: {reason}")
    for src_name in retired:
        _note_retired(report, src_name, name, f"merged into {name}", outcome)
    return saved


def _repair_links(ctx: PassContext, report: PassReport, saved_names: set[str], outcome: ConsolidationOutcome) -> None:
    store = ctx.store.skills
    live = store.list()
    live_names = {s.name for s in live}
    retired = set(outcome.redirects)
    for skill in live:
        if skill.name not in saved_names and not retired.intersection(skill.see_also):
            continue
        kept, dropped = _filter_see_also(skill.name, skill.see_also, live_names, outcome.redirects)
        if tuple(kept) == tuple(skill.see_also):
            continue
        redirected = [n for n in skill.see_also if outcome.redirects.get(n) in kept]
        parts = ([f"redirected {', '.join(redirected)} to the merged skill"] if redirected else []) + (
            [f"dropped {', '.join(dropped)}"] if dropped else []
        )
        reason = "seeAlso links to retired skills " + "; ".join(parts)
        with ctx.store.transaction():
            current = store.get(skill.name)
            if current is None or not same_skill(current, skill):
                continue  # edited meanwhile: the edit wins, its links are its own
            saved = store.save(skill.with_(see_also=tuple(kept)), now=ctx.now)
            ctx.record(PASS, "updated", saved, before=skill, after=saved, reason=reason)
        outcome.see_also_dropped += len(dropped)
        report.change("see-also-repaired", skill.name, reason)
        report.info(f"skill {skill.name}: {reason}")
