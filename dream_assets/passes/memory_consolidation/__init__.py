"""Pass 1 — Memory consolidation: merge near-duplicates, refine categories, retire noise, mine anti-patterns.

This pass can destroy an agent's memory, so the model only proposes and the host decides (spec "Pass 1 — Memory
consolidation" and "LLM response format"; DESIGN principle 4). The pass is this package: the body and ``SPEC`` here,
what it shows (select.py), the merged entry's arithmetic (merge.py), its response contracts (contract.py), its
prompts (prompt.py) and the offline backend's answers (offline.py). In order:

1. Skip (the shared opening, ``runner.opening``) while ``memory-audit/consolidation-paused.json`` exists, or
   sooner than ``ConsolidationMinInterval`` after the last completed pass (the ledger record ``memory_consolidation``
   keeps that across restarts; zero disables).
2. Gate the candidates (select.py): only new or changed entries and open near-duplicate clusters are
   shown. The lookup used to apply the answer is keyed on that eligible set, so an id the model invents or remembers
   resolves to nothing. Nothing eligible: no model call.
3. Model calls sized to the window, planned from one scan (a near-duplicate cluster too large for one call is
   offered in parts of its most similar members; select.py); the store is not held meanwhile.
   Every string of the answer is checked before anything is applied (model_text.py): an item with a lone
   surrogate, a control character, an over-long or blank text, or a malformed category or tag is rejected with
   its reason (``invalid_items``, an ``invalid-item`` row in the changes table) and the rest of the answer
   applies; ids that are not strings or not usable (``invalid_ids``), repeated within one list
   (``duplicate_ids``) or not shown this cycle (``ignored_ids``) are ignored with a count.
4. For each merge: the walls first (dream_assets/scope.py): a merge whose sources are in different scopes (LangGraph
   namespaces, ``MemoryScopeCategories``), or that would file its text under a category of another scope than its
   sources', is refused with its reason and counted (``cross_scope_refused``), its sources kept, whatever the model
   says; clusters are only ever offered within one scope, a removal's carrier must be in the removed entry's scope, and
   a new entry the model proposes without sources is never filed behind a wall. Then the coverage check (every name,
   acronym, multi-digit number and date of the sources must survive), the content check (every source sentence keeps
   most of its content words, ``dropped_content``: a dropped sentence or a sentence rewritten down to half its words
   fails it) and the invented-specifics check (no name, number or date in the merged text that no source carries, judged
   per sentence), one narrow repair call when any fails (capped per cycle; the repair prompt lists the dropped specifics
   and sentences and what was invented), and the same three checks on the repair. Single-source rewrites
   ("recategorised") face the same checks. Then one write: the sources are re-read — a source edited since it was shown
   wins and the merge waits for the next cycle — the merged entry is saved with host-computed temporal fields
   (merge.py), its sources are archived and every change-log row is written, all in one transaction. A
   crash at any point leaves the whole merge or none of it.
5. Stand-alone ("ephemeral") removals: the union of ``toDelete`` and the sources of merges that persisted is
   archived, never deleted, each archive logged with its content; a source of a merge that did not persist is kept
   even when ``toDelete`` lists it. An entry above the high-value floor is never a stand-alone removal. With
   ``ConsolidationRemovalGuardEnabled`` (default on) the removal guard applies a stand-alone removal only when the
   entry is noise by a test real facts fail (``noise_reason``: a throw-away category such as ``scratch/...``, the
   ``ephemeral`` tag, or a text of acknowledgements only such as "The user said ok."; a fact without a name, number
   or date, "Caroline likes painting", is no noise whatever its importance) — or fully
   superseded: one other live entry, found among the entry's best BM25 matches, carries every specific of it (the
   merge coverage check with the entry as the only source) and its content (the content check, every sentence
   judged), or every content word when it has no specific. An entry that only shares names with it is no carrier. That
   carrier must stay live: it is not archived by this answer, and a later removal of it in the same answer is
   refused. Each removal is decided and written, with its change-log row, in one transaction on the entry as it is
   then (an entry changed since it was shown is left alone).
6. Entries shown and left in place are stamped reviewed; sources of a rejected merge are also stamped with the
   rejected cluster. The stamps and their change-log rows are one write. Every change is a change-log row of this
   cycle, so the cycle can be undone.

Counts (report.counts, plotted in the UI): live (after the pass), reviewed (stamped reviewed this pass),
created_since_last_run, merged, repaired, rejected (rejected_invented: of those, for an invented specific;
rejected_dropped: for a dropped sentence),
ephemeral, protected, archived, eligible, withheld, plus created (new entries such as anti-patterns), deferred
(merges and removals held back by a concurrent edit), ignored_ids, invalid_ids, duplicate_ids, invalid_items.
``protected`` counts every stand-alone removal the host refused, by the high-value floor or by the removal guard;
``guarded`` is the removal guard's share, shown in the summary line when there is one.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from datetime import timedelta
from typing import Any, ClassVar

from dream_assets import recall_index as recall
from dream_assets.changes_model import SuccessorHow
from dream_assets.llm.contracts import NOT_TEXT, ModelCall, id_aliases, is_long_id, with_aliases
from dream_assets.llm.prompts import entries_sorted, render_memory_entry
from dream_assets.model import TEXT_HEAD_KEY, MemoryEntry, is_signal_entry, iso, new_id, parse_ts
from dream_assets.options import PassOptions, pass_option
from dream_assets.passes.common import (
    CONTEXT_EXCEEDED,
    CopyGuard,
    call_model,
    note_forced,
    note_malformed,
    note_model_switch,
)
from dream_assets.passes.context import PassContext
from dream_assets.passes.memory_consolidation.contract import (
    ClusterCheckResponse,
    MemoryConsolidationResponse,
    MergeRepairResponse,
)
from dream_assets.passes.memory_consolidation.merge import (
    REJECTED_AT_KEY,
    REJECTED_CLUSTER_KEY,
    build_merged_entry,
    fold_into,
    rejected_cluster_id,
)
from dream_assets.passes.memory_consolidation.offline import (
    answer_cluster_check,
    answer_memory_consolidation,
    answer_merge_repair,
    merge_groups,
)
from dream_assets.passes.memory_consolidation.prompt import (
    CLUSTER_LABELS,
    render_cluster_check,
    render_memory_consolidation,
    render_merge_repair,
)
from dream_assets.passes.memory_consolidation.select import (
    CLUSTER_DECLINED_KEY,
    CLUSTER_SET_KEY,
    REVIEWED_IN_KEY,
    REVIEWED_KEY,
    RULES_KEY,
    SPLIT_KEY,
    Selection,
    cooldown_for,
    is_reviewed,
    kept_apart_by_a_person,
    left_apart_stamps,
    review_hash,
    reviewed_in_stamp,
    rules_stamp,
    select_candidates,
)
from dream_assets.passes.memory_vocabulary import MemorySave, is_high_value
from dream_assets.passes.model_text import check_ids, problem
from dream_assets.passes.report import PassReport
from dream_assets.passes.spec import PassSpec
from dream_assets.save_pipeline import save_memory
from dream_assets.scope import NAMESPACE_PREFIX, SCOPE_KEY, ScopeRules, describe
from dream_assets.store.connection import StoreError
from dream_assets.store.dedup import REINFORCE
from dream_assets.store.dedup import decide as decide_dedup
from dream_assets.store.logs import log_exists, read_events
from dream_assets.store.memory import ContentError
from dream_assets.store.standing import without_standing_tags
from dream_assets.text.coverage import (
    CoverageSource,
    CoverageVocabulary,
    check_merge_coverage,
    content_stems,
    dropped_content,
    invented_specifics,
    load_vocabulary,
    specifics_of,
)
from dream_assets.text.restated import without_restated_sentences
from dream_assets.text.similarity import DuplicateClusters, exact_key
from dream_assets.text.tokens import content_tokens, stem

PASS = "memory_consolidation"
REPAIR_PASS = "merge_repair"
CLUSTER_CHECK_CALL = "cluster_check"
#: ``ConsolidationCallShape`` auto: the one-cluster check for an endpoint with a window this small or smaller ...
SMALL_WINDOW = 8192
#: ... or measured generating fewer tokens a second than this (``dream check-model``).
SLOW_GENERATION_TPS = 10.0
#: Cluster checks a run may make per ``LlmMaxCallsPerPass`` call when the window is unbounded (``ClusterChecks``).
UNBOUNDED_CHECKS_PER_CALL = 8
_PREVIEW = 12  # ids listed in one log line before "…"
#: Removal guard, noise by a test real facts fail: a category whose first segment names throw-away memory, a tag that
#: marks an entry as throw-away, or a text of acknowledgement words only ("ok", "thanks, that helps").
EPHEMERAL_CATEGORIES = frozenset({"ephemeral", "scratch", "scratchpad", "temp", "temporary", "transient"})
EPHEMERAL_TAG = "ephemeral"
_FILLER_STEMS = frozenset(
    stem(w)
    for w in "ok okay k thanks thank thx ty help helps helped helpful good great fine nice cool sure yes yeah yep no "
    "nope sound sounds got noted understood right alright perfect awesome welcome please cheers hi hello hey bye "
    "goodbye user agent assistant lol haha hmm wow done will do".split()
)
CARRIER_CANDIDATES = 10  # best BM25 matches searched for an entry that carries a removed one


def _inline(text: str) -> str:
    """Content inside one log line (spec: every archive is logged with the entry's content inline)."""
    return " ⏎ ".join(part.strip() for part in text.strip().splitlines() if part.strip())


def _ids(ids: Sequence[str]) -> str:
    shown = ", ".join(ids[:_PREVIEW])
    return f"[{shown}{', …' if len(ids) > _PREVIEW else ''}]"


# --------------------------------------------------------------------------------------------------- inputs
def recent_feedback(ctx: PassContext, report: PassReport) -> list[dict[str, Any]]:
    """Feedback of the last FeedbackWindow (7 days), newest FeedbackMaxSignals (50) of it, as prompt items."""
    opts = ctx.options
    if opts.FeedbackMaxSignals <= 0 or not log_exists(ctx.profile, "feedback"):
        return []  # an optional input (spec: IFeedbackStore): consolidation runs without it
    read = read_events(
        ctx.profile,
        "feedback",
        since=ctx.now - opts.FeedbackWindow,
        until=ctx.now + timedelta(microseconds=1),
    )
    note_malformed(report, "feedback", read)
    items = []
    for e in read.events[-opts.FeedbackMaxSignals :]:
        items.append(
            {
                "timestamp": iso(e.timestamp),
                "kind": e.kind,
                "rating": e.rating,
                "sessionId": e.session_id,
                "text": e.text,
                "domain": e.domain,
                "skillNames": list(e.skill_names),
            }
        )
    return items


def _entry_input(e: MemoryEntry) -> dict[str, Any]:
    return {
        "id": e.id,
        "content": e.content,
        "category": e.category,
        "tags": sorted(e.tags),
        "subject": e.subject_time or None,
    }


# --------------------------------------------------------------------------------------------------- apply state
@dataclass
class _Apply:
    """What applying one answer did, for the counts, the stamps and the summary."""

    persisted_sources: dict[str, str] = field(default_factory=dict)  # source id -> merged entry id
    merge_sources: set[str] = field(default_factory=set)  # every resolved source of any toSave merge
    untouched: set[str] = field(default_factory=set)  # not to be stamped: retried next cycle
    rejected_stamps: dict[str, dict[str, str]] = field(default_factory=dict)
    archived: set[str] = field(default_factory=set)  # archived by this answer (committed)
    pinned: dict[str, str] = field(default_factory=dict)  # carrier id -> removal that relies on it
    repairs_used: int = 0
    scopes: ScopeRules = field(default_factory=ScopeRules)  # the walls no merge or carrier crosses


@dataclass
class _Verdict:
    """The removal guard's decision on one stand-alone removal."""

    remove: bool
    reason: str
    carrier: str | None = None


def _changed_since_shown(
    selection: Selection,
    current: dict[str, MemoryEntry],
    ids: Sequence[str],
    archived_here: set[str] | frozenset[str] = frozenset(),
) -> list[str]:
    """Ids whose entry is gone, archived or rewritten since the model was shown it (a concurrent edit wins). An entry
    this answer archived itself (a source shared by two merges) is not a concurrent edit."""
    changed = []
    for i in ids:
        now_entry = current.get(i)
        if (
            now_entry is None
            or review_hash(now_entry) != selection.shown_hash[i]
            or (now_entry.is_archived and i not in archived_here)
        ):
            changed.append(i)
    return changed


def _invalid(report: PassReport, target: str, reason: str) -> None:
    """A model-provided item that cannot be applied: counted, listed in the changes table, the rest applies."""
    report.count("invalid_items")
    report.change("invalid-item", target, reason)
    report.warn(f"{target} rejected: {reason}")


def _save_problem(save: MemorySave, n: int, max_chars: int) -> str | None:
    fields_set = save.model_fields_set
    return (
        problem(save.content, "content", field=f"toSave[{n}].content", max_chars=max_chars)
        or (problem(save.category, "category", field=f"toSave[{n}].category") if "category" in fields_set else None)
        or (problem(save.tags, "tags", field=f"toSave[{n}].tags") if "tags" in fields_set else None)
    )


def _repair(
    ctx: PassContext,
    report: PassReport,
    sources: Sequence[MemoryEntry],
    merged_text: str,
    missing: Sequence[str],
    invented: Sequence[str],
    dropped: Sequence[str] = (),
) -> str | None:
    """One narrow repair call. A failed call or an unusable answer is a failed repair (the merge stays rejected),
    not a failed pass. ``missing`` in the inputs lists every string the merged text must contain again: the
    dropped specifics, then the dropped source sentences (also under ``dropped``)."""
    sub = PassReport(REPAIR_PASS)
    prompt = render_merge_repair(merged_text, sources, missing, invented, dropped)
    inputs = {
        "merged": merged_text,
        "sources": [{"id": s.id, "content": s.content} for s in sources],
        "missing": list(dict.fromkeys([*missing, *dropped])),
        "invented": list(invented),
        "dropped": list(dropped),
    }
    response = call_model(ctx, sub, MERGE_REPAIR, prompt, inputs)
    for key, value in sub.usage.items():
        report.usage[key] = report.usage.get(key, 0.0) + value
    if response is None:
        report.warn(f"merge repair call failed ({sub.reason}); the merge stays rejected")
        return None
    assert isinstance(response, MergeRepairResponse)
    bad = problem(response.content, "content", field="merge repair content", max_chars=ctx.options.MaxContentChars)
    if bad:
        _invalid(report, f"repair of {_ids([s.id for s in sources])}", f"{bad}; the merge stays rejected")
        return None
    target = f"repair of {_ids([s.id for s in sources])}"
    if CopyGuard.for_call(ctx, MERGE_REPAIR).refuse(report, response.content, field="content", target=target):
        return None  # the merge stays rejected, its sources live
    return response.content.strip()


def _save_new_entry(ctx: PassContext, report: PassReport, save: MemorySave, content: str) -> None:
    """A toSave entry without sources (an anti-pattern the model mined, or another new fact): save-time dedup applies.
    The save, its review stamp and its change-log row are one write."""
    memories = ctx.store.memories
    try:
        with ctx.store.transaction():
            # The entries a dedup match could land on, so a reinforced or extended entry is recorded with its
            # prior state.
            before = {e.id: e for e, _ in recall.search(memories, content, limit=50)}
            result = save_memory(
                memories,
                content,
                category=save.category,
                tags=without_standing_tags(save.tags),
                now=ctx.now,
                dedupe=True,
                record_change=False,  # recorded below, under this cycle
            )
            entry = result.entry
            if result.action == "created":
                reviewed = review_hash(entry)
                memories.set_metadata({entry.id: {REVIEWED_KEY: reviewed}})
                entry = entry.with_(metadata={**entry.metadata, REVIEWED_KEY: reviewed})
                ctx.record(
                    PASS,
                    "created",
                    entry,
                    before=None,
                    after=entry,
                    reason=f"new entry proposed by the model in {entry.category}",
                )
            else:
                prior = before.get(result.matched_id or "")
                ctx.record(
                    PASS,
                    "updated",
                    entry,
                    before=prior or entry,
                    after=entry,
                    reason=f"new entry proposed by the model {result.action} existing entry {entry.id} "
                    "(save-time dedup)",
                )
    except (ContentError, OSError) as exc:
        report.warn(f"could not save new entry [{save.category}] {content[:80]!r}: {exc}")
        report.count("failed_saves")
        return
    if result.action == "created":
        report.count("created")
        report.change("created", entry.id, f"[{entry.category}] {entry.content}")
        report.info(f"created memory {entry.id} [{entry.category}]: {_inline(entry.content)}")
    else:
        report.count("reinforced_by_new")
        report.change(result.action, entry.id, f"[{entry.category}] {content}")
        report.info(f"new entry {result.action} existing memory {entry.id} (save-time dedup): {_inline(content)}")


def _quoted(strings: Sequence[str]) -> str:
    return ", ".join(f'"{s}"' for s in strings)


def _apply_merge(
    ctx: PassContext,
    report: PassReport,
    selection: Selection,
    vocab: CoverageVocabulary,
    state: _Apply,
    save: MemorySave,
    sources: list[MemoryEntry],
    content: str,
) -> None:
    opts = ctx.options
    section = opts.section(MemoryConsolidationOptions)
    memories = ctx.store.memories
    ids = [s.id for s in sources]
    only = sources[0] if len(sources) == 1 else None
    category = save.category.strip() if "category" in save.model_fields_set else sources[0].category
    # The walls a user declared (LangGraph namespaces, MemoryScopeCategories) are the host's, whatever the answer
    # says: the sources share one scope and the merged entry is filed in it.
    scopes = state.scopes.spans(sources)
    target = state.scopes.of_category(category)
    if len(scopes) > 1 or target != scopes[0]:
        report.count("cross_scope_refused")
        why = (
            "its sources are in " + ", ".join(describe(x) for x in scopes)
            if len(scopes) > 1
            else f"it would file {describe(scopes[0])}'s entry under {category!r}, in {describe(target)}"
        )
        report.change("merge-refused", rejected_cluster_id(ids), f"sources {_ids(ids)} kept; {why}")
        report.info(f"refused merge of {_ids(ids)} across scopes — {why}; sources kept")
        return
    # Standing is the host's (store/standing.py): the merged entry is tagged user-correction exactly when a source is.
    tags = without_standing_tags(
        save.tags if "tags" in save.model_fields_set else sorted({t for s in sources for t in s.tags})
    )
    if (
        only is not None
        and content == only.content.strip()
        and category == only.category
        and set(tags) == set(without_standing_tags(only.tags))
    ):
        report.count("unchanged")  # an echo of the entry: nothing to replace
        return
    if only is None:
        # A sentence another kept sentence carries whole is another wording of it: the merge says it once.
        content = without_restated_sentences(content, category, vocab)

    # Nothing dropped (coverage check: specifics; content check: the sentences' words) and nothing made up
    # (invented specifics, judged per sentence).
    covered = [CoverageSource(s.content, s.category) for s in sources]
    check = check_merge_coverage(covered, content, vocab)
    invented = invented_specifics(covered, content, vocab)
    dropped = dropped_content(covered, content)
    restored = removed = kept = 0
    if (not check.ok or invented or dropped) and section.merge_repair_enabled:
        if state.repairs_used < section.merge_repair_max_per_cycle:
            state.repairs_used += 1
            revised = _repair(ctx, report, sources, content, check.missing, invented, dropped)
            if revised is not None:
                again = check_merge_coverage(covered, revised, vocab)
                again_invented = invented_specifics(covered, revised, vocab)
                again_dropped = dropped_content(covered, revised)
                if again.ok and not again_invented and not again_dropped:
                    restored, removed, kept = len(check.missing), len(invented), len(dropped)
                    content = revised
                check, invented, dropped = again, again_invented, again_dropped
        else:
            report.count("repair_capped")
            report.info(
                f"merge repair skipped for {_ids(ids)}: MergeRepairMaxPerCycle ({section.merge_repair_max_per_cycle}) "
                "reached this cycle"
            )
    if not check.ok or invented or dropped:
        cluster = rejected_cluster_id(ids)
        for i in ids:
            state.rejected_stamps[i] = {REJECTED_CLUSTER_KEY: cluster, REJECTED_AT_KEY: iso(ctx.now) or ""}
        report.count("rejected")
        why = (
            ([f"missing {_quoted(check.missing)}"] if check.missing else [])
            + ([f"drops the content of {_quoted(dropped)}"] if dropped else [])
            + ([f"invented {_quoted(invented)} (in no source)"] if invented else [])
        )
        if invented:
            report.count("rejected_invented")
        if dropped:
            report.count("rejected_dropped")
        report.change("merge-rejected", cluster, f"sources {_ids(ids)} kept; {'; '.join(why)}")
        report.info(
            f"rejected merge of {_ids(ids)} — the merged text "
            + " and ".join(
                ([f"drops {_quoted(check.missing)}"] if check.missing else [])
                + ([f"drops the content of {_quoted(dropped)}"] if dropped else [])
                + ([f"states {_quoted(invented)}, which no source does"] if invented else [])
            )
            + "; sources kept"
        )
        return

    # Replacement and retirement are one write: the merged entry, its sources archived and every change-log row,
    # or none of it. The sources are re-read inside that write: a concurrent edit wins and the merge waits.
    what = "recategorised" if only is not None else "merged"
    repaired = "; ".join(
        ([f"restored {restored} specific(s)"] if restored else [])
        + ([f"restored {kept} dropped sentence(s)"] if kept else [])
        + ([f"removed {removed} invented specific(s)"] if removed else [])
    )
    retired: list[MemoryEntry] = []
    changed: list[str] = []

    def retire(current: dict[str, MemoryEntry], into: str, how: SuccessorHow, reason: str) -> None:
        """Archive the sources into ``into``, each with its change row (one already retired by an earlier merge of
        this answer is skipped)."""
        for i in ids:
            if i in state.archived:
                continue
            after = memories.archive(i, now=ctx.now)
            ctx.record(
                PASS,
                "archived",
                after,
                before=current[i],
                after=after,
                reason=reason,
                successor_id=into,
                successor_how=how,
            )
            retired.append(current[i])

    try:
        with ctx.store.transaction():
            current = memories.get_many(ids)
            changed = _changed_since_shown(selection, current, ids, state.archived)
            twin = None if changed else _twin(ctx, content, category, ids, state)
            if twin is not None:
                # The merged text is already a live entry: that entry takes the sources in, no twin is written.
                merged = fold_into(twin, [current[i] for i in ids if i not in state.archived], tags=tags, now=ctx.now)
                if is_reviewed(twin):
                    stamps = {REVIEWED_KEY: review_hash(merged)}
                    if twin.id in selection.eligible:
                        stamps[REVIEWED_IN_KEY] = reviewed_in_stamp(ctx.cycle_id, ctx.now, selection.call)
                        if selection.rules:
                            stamps[RULES_KEY] = selection.rules
                    merged = merged.with_(metadata={**merged.metadata, **stamps})
                merged = memories.replace(merged)
                ctx.record(
                    PASS,
                    "updated",
                    merged,
                    before=twin,
                    after=merged,
                    reason=f"{what} from {_ids(ids)} equals live entry {twin.id}, which takes them in",
                )
                state.pinned.setdefault(twin.id, ids[0])
                retire(current, twin.id, SuccessorHow.FOLDED_INTO, f"merged into existing entry {twin.id}")
            elif not changed:
                merged = build_merged_entry(
                    [current[i] for i in ids],
                    entry_id=new_id(),
                    content=content,
                    category=category,
                    tags=tags,
                    now=ctx.now,
                )
                # The merged text was judged this cycle against every source: stamp it reviewed so the next cycle
                # does not re-ask the model about its own answer. Any later write re-opens it.
                lineage = next((selection.part_of[i] for i in ids if i in selection.part_of), None)
                merged = merged.with_(
                    metadata={
                        **merged.metadata,
                        REVIEWED_KEY: review_hash(merged),
                        REVIEWED_IN_KEY: reviewed_in_stamp(ctx.cycle_id, ctx.now, selection.call),
                        **({RULES_KEY: selection.rules} if selection.rules else {}),
                        **({SPLIT_KEY: lineage} if lineage else {}),
                        # a namespace's wall outlives its items (a declared scope is the option's, not carried)
                        **({SCOPE_KEY: target} if target.startswith(NAMESPACE_PREFIX) else {}),
                    }
                )
                merged = memories.put(merged)
                ctx.record(
                    PASS,
                    "created",
                    merged,
                    before=None,
                    after=merged,
                    reason=f"{what} from {_ids(ids)}" + (f"; repaired, {repaired}" if repaired else ""),
                )
                retire(current, merged.id, SuccessorHow.MERGED_INTO, f"merged into {merged.id}")
    except (ContentError, OSError) as exc:
        state.untouched.update(ids)
        report.count("failed_saves")
        report.warn(f"could not save the merge of {_ids(ids)} ({exc}); nothing of it was written, its sources are kept")
        return
    if changed:
        state.untouched.update(ids)
        report.count("deferred")
        report.change("merge-deferred", _ids(ids), f"changed since shown: {_ids(changed)}")
        report.info(f"deferred merge of {_ids(ids)} to the next cycle — {_ids(changed)} changed since it was shown")
        return
    for i in ids:
        state.persisted_sources.setdefault(i, merged.id)
    if twin is not None:
        report.count("reinforced_existing")
    report.count("merged")
    report.change("merge-created", merged.id, f"from {_ids(ids)}: {merged.content}")
    report.info(f"{what} {_ids(ids)} into {merged.id} [{merged.category}]: {_inline(merged.content)}")
    if repaired:
        report.count("repaired")
        report.info(f"repaired merge of {_ids(ids)} — {repaired}")
    for before in retired:
        state.archived.add(before.id)
        report.count("archived")
        report.change("archived", before.id, f"merged into {merged.id}: {before.content}")
        report.info(f"archived memory {before.id} (merged into {merged.id}): {_inline(before.content)}")


def _twin(ctx: PassContext, content: str, category: str, ids: Sequence[str], state: _Apply) -> MemoryEntry | None:
    """The oldest live entry, not a source of this merge and not retired by this answer, that already says the
    merged text (equal after normalising case, white space and punctuation, same category, and nothing of the
    merged text it lacks by the save-time rules)."""
    for other in recall.find_exact(ctx.store.memories, content, category):
        if other.id in ids or other.id in state.archived or is_signal_entry(other):
            continue
        if (
            decide_dedup(
                other.content,
                content,
                max_chars=ctx.options.MaxContentChars,
                stored_category=other.category,
                incoming_category=category,
            ).action
            == REINFORCE
        ):
            return other
    return None


# --------------------------------------------------------------------------------------------------- exact fold
def _same_moment(a: dict[str, str], b: dict[str, str]) -> bool:
    """Subject times that may be one moment: either is absent, they are equal, or one point refines the other
    ("2026-01" and "2026-01-15")."""
    if not a or not b or a == b:
        return True
    pa, pb = a.get("subjectTime", ""), b.get("subjectTime", "")
    return set(a) == set(b) == {"subjectTime"} and (pa.startswith(pb) or pb.startswith(pa))


def _fold_exact(ctx: PassContext, report: PassReport, live: list[MemoryEntry]) -> list[MemoryEntry]:
    """Deterministic, before the model: live entries of one category whose content is equal after normalising case,
    white space and punctuation fold into the oldest of them. The oldest keeps its text; the others must add nothing
    to it (store/dedup.py: a name written with other capitals may be a correction) and must not name another
    subject time. Each fold is one write: the kept entry with the merge arithmetic and ``mergedFrom``, the others
    archived, every change-log row. Returns the live corpus after the folds."""
    section = ctx.options.section(MemoryConsolidationOptions)
    groups: dict[tuple[str, str], list[MemoryEntry]] = {}
    for e in live:
        if not is_signal_entry(e):  # each occurrence of a correction, feedback or capability claim counts
            groups.setdefault((e.category, exact_key(e.content)), []).append(e)
    memories = ctx.store.memories
    gone: set[str] = set()
    replaced: dict[str, MemoryEntry] = {}
    for members in groups.values():
        if len(members) < 2:
            continue
        members = sorted(members, key=lambda e: (e.created_at, e.id))
        keeper, rest = members[0], []
        for other in members[1:]:
            if not _same_moment(keeper.subject_time, other.subject_time):
                continue  # the same words about another moment
            if kept_apart_by_a_person((keeper, other), ctx.now, section.settled_cooldown):
                continue  # a person undid or rejected their merge: the same words, kept as two entries
            if (
                decide_dedup(
                    keeper.content,
                    other.content,
                    max_chars=ctx.options.MaxContentChars,
                    stored_category=keeper.category,
                    incoming_category=other.category,
                ).action
                == REINFORCE
            ):
                rest.append(other)
        if not rest:
            continue
        ids = [e.id for e in rest]
        with ctx.store.transaction():
            current = memories.get_many([keeper.id, *ids])
            if any(
                current.get(e.id) is None
                or current[e.id].is_archived
                or current[e.id].content != e.content
                or current[e.id].category != e.category
                for e in (keeper, *rest)
            ):
                report.count("deferred")
                continue
            folded = fold_into(current[keeper.id], [current[i] for i in ids], now=ctx.now)
            if is_reviewed(current[keeper.id]):
                folded = folded.with_(metadata={**folded.metadata, REVIEWED_KEY: review_hash(folded)})
            folded = memories.replace(folded)
            ctx.record(
                PASS,
                "updated",
                folded,
                before=current[keeper.id],
                after=folded,
                reason=f"exact duplicates {_ids(ids)} folded in (same text after normalising case, white space "
                "and punctuation)",
            )
            for i in ids:
                after = memories.archive(i, now=ctx.now)
                ctx.record(
                    PASS,
                    "archived",
                    after,
                    before=current[i],
                    after=after,
                    reason=f"exact duplicate of {keeper.id}, folded into it",
                    successor_id=keeper.id,
                    successor_how=SuccessorHow.DUPLICATE_OF,
                )
        gone.update(ids)
        replaced[keeper.id] = folded
        report.count("folded", len(ids))
        report.count("archived", len(ids))
        report.change("folded", keeper.id, f"exact duplicates {_ids(ids)} folded in: {keeper.content}")
        report.info(f"folded exact duplicate(s) {_ids(ids)} into {keeper.id}: {_inline(keeper.content)}")
    if not gone:
        return live
    return [replaced.get(e.id, e) for e in live if e.id not in gone]


# --------------------------------------------------------------------------------------------------- removals
def _removal_verdict(ctx: PassContext, vocab: CoverageVocabulary, state: _Apply, entry: MemoryEntry) -> _Verdict:
    """The removal guard: is a stand-alone removal of ``entry`` safe? Noise is; so is an entry whose every specific
    and the content of every sentence (or, for an entry without any specific, every word) one other live entry
    carries, and will still carry after this answer: an entry that only mentions the same names carries nothing of
    what this one says. Carriers are looked for among the entry's best BM25 matches, not the whole corpus."""
    if entry.id in state.pinned:
        return _Verdict(
            False,
            f"kept: it is the live entry that carries everything of {state.pinned[entry.id]}, removed in this answer",
        )
    noise = noise_reason(entry)
    if noise:
        return _Verdict(True, f"ephemeral: noise — {noise}")
    specifics = specifics_of(entry.content, entry.category, vocab)
    words = content_tokens(entry.content)
    own = [CoverageSource(entry.content, entry.category)]
    names_only: str | None = None  # a live entry with every specific of it but not what it says
    scope = state.scopes.of_entry(entry)
    for other, _ in recall.search(ctx.store.memories, entry.content, limit=CARRIER_CANDIDATES):
        if other.id == entry.id or other.id in state.archived or other.is_archived:
            continue
        if state.scopes.of_entry(other) != scope:
            continue  # an entry behind another wall carries nothing for this one's readers
        if specifics:
            carried = check_merge_coverage(own, other.content, vocab).ok
            if carried and dropped_content(own, other.content, min_words=1):
                carried = False
                names_only = names_only or other.id
        else:
            carried = bool(words) and words <= content_tokens(other.content)
        if carried:
            what = "specific" if specifics else "word"
            return _Verdict(True, f"ephemeral: superseded — every {what} of it is in live entry {other.id}", other.id)
    if names_only:
        return _Verdict(
            False,
            f"kept by the removal guard: live entry {names_only} names the same things but does not say what it says",
        )
    names = list(dict.fromkeys(s.text for s in specifics))
    if names:
        held = _quoted(names[:5]) + (" …" if len(names) > 5 else "")
        return _Verdict(False, f"kept by the removal guard: no other live entry carries {held}")
    return _Verdict(False, "kept by the removal guard: it states a fact and no other live entry carries its words")


def noise_reason(entry: MemoryEntry) -> str | None:
    """Why ``entry`` is noise a stand-alone removal may retire without a carrier, or None when it may state a fact.
    A fact needs no name, number or date ("Caroline likes painting"), and importance says nothing about whether a
    text is one, so only what real facts fail counts: a throw-away category (first segment in
    ``EPHEMERAL_CATEGORIES``), the ``ephemeral`` tag, or a text without a content word beyond acknowledgements."""
    head = entry.category.strip().casefold().split("/", 1)[0]
    if head in EPHEMERAL_CATEGORIES:
        return f"category {entry.category!r} is throw-away memory"
    if EPHEMERAL_TAG in (t.casefold() for t in entry.tags):
        return f"tagged {EPHEMERAL_TAG!r}"
    if not (content_stems(entry.content) - _FILLER_STEMS):
        return "no content word beyond acknowledgements"
    return None


def _protect(report: PassReport, i: str, reason: str, content: str, *, guarded: bool) -> None:
    report.count("protected")
    if guarded:
        report.count("guarded")
    report.change("protected", i, reason)
    report.info(f"protected {i} from ephemeral removal ({reason}): {_inline(content)}")


def _retire(
    ctx: PassContext,
    report: PassReport,
    selection: Selection,
    vocab: CoverageVocabulary,
    state: _Apply,
    to_delete: Sequence[str],
) -> None:
    """Stand-alone ("ephemeral") removals: never a source of a merge that did not persist, never an entry above the
    high-value floor, never an entry the removal guard keeps, never an entry changed since it was shown. Each archive
    and its change-log row are one write, decided inside that write on the entry as it is then."""
    opts = ctx.options
    section = opts.section(MemoryConsolidationOptions)
    memories = ctx.store.memories
    for i in to_delete:
        if i in state.persisted_sources:
            continue  # archived with its merge
        shown_entry = selection.eligible[i]
        if i in state.merge_sources:
            # Spec "Ordering": only sources of a merge that actually persisted are retired.
            report.count("kept_unmerged_sources")
            report.info(f"kept {i}: listed in toDelete, but it is a source of a merge that was not applied")
            continue
        if is_high_value(shown_entry, opts):
            _protect(
                report,
                i,
                f"importance {shown_entry.importance:.2f}, reinforced {shown_entry.reinforcement_count}× "
                "— above the high-value floor",
                shown_entry.content,
                guarded=False,
            )
            continue
        verdict: _Verdict | None = None
        outcome = "archived"
        with ctx.store.transaction():
            before = memories.get(i)
            if before is None or before.is_archived or review_hash(before) != selection.shown_hash[i]:
                outcome = "deferred"
            elif is_high_value(before, opts):  # the floor holds on the current state too
                outcome = "floor"
            else:
                verdict = (
                    _removal_verdict(ctx, vocab, state, before)
                    if section.removal_guard_enabled
                    else _Verdict(
                        True,
                        "ephemeral: flagged by the model as noisy, low-value or superseded (removal guard off)",
                    )
                )
                if verdict.remove:
                    after = memories.archive(i, now=ctx.now)
                    ctx.record(PASS, "archived", after, before=before, after=after, reason=verdict.reason)
                else:
                    outcome = "guarded"
        if outcome == "deferred":
            state.untouched.add(i)
            report.count("deferred")
            report.info(f"left {i} alone: it changed since it was shown")
        elif outcome == "floor":
            assert before is not None
            _protect(report, i, "above the high-value floor", before.content, guarded=False)
        elif outcome == "guarded":
            assert before is not None and verdict is not None
            _protect(report, i, verdict.reason, before.content, guarded=True)
        else:
            assert before is not None and verdict is not None
            state.archived.add(i)
            if verdict.carrier:
                state.pinned[verdict.carrier] = i
            report.count("archived")
            report.count("ephemeral")
            report.change("archived", i, f"{verdict.reason}: {before.content}")
            report.info(f"archived memory {i} ({verdict.reason}): {_inline(before.content)}")


def _stamp_reviewed(
    ctx: PassContext, report: PassReport, selection: Selection, state: _Apply, *, counted_as: str = "left_apart"
) -> None:
    """Entries shown and left in place are reviewed as shown; sources of a rejected merge also carry the rejection;
    the members of a cluster shown and left whole carry its set id, when it was left apart and how many times (a
    re-offered cluster left apart again is declined once more, and its cooldown grows). The stamps and their
    change-log rows are one write."""
    section = ctx.options.section(MemoryConsolidationOptions)
    updates: dict[str, dict[str, str]] = {}
    shown_in = reviewed_in_stamp(ctx.cycle_id, ctx.now, selection.call)
    for i, shown_entry in selection.eligible.items():
        if i in state.archived or i in state.untouched:
            continue
        update: dict[str, str] = {}
        if shown_entry.metadata.get(REVIEWED_KEY) != selection.shown_hash[i]:
            update[REVIEWED_KEY] = selection.shown_hash[i]
        if shown_entry.metadata.get(REVIEWED_IN_KEY) != shown_in:
            update[REVIEWED_IN_KEY] = shown_in
        if selection.rules and shown_entry.metadata.get(RULES_KEY) != selection.rules:
            update[RULES_KEY] = selection.rules  # judged by these rules: settled under them, asked again under others
        update.update(state.rejected_stamps.get(i, {}))
        if i in selection.part_of and shown_entry.metadata.get(SPLIT_KEY) != selection.part_of[i]:
            update[SPLIT_KEY] = selection.part_of[i]  # shown in a part: its cluster's lineage, asked together again
        if update:
            updates[i] = update
    for cluster in selection.clusters:
        if any(i in state.archived or i in state.untouched or i in state.persisted_sources for i in cluster):
            continue  # not left whole: its membership changes, which is a new question
        stamps = left_apart_stamps([selection.eligible[i] for i in cluster], ctx.now)
        for i, left in stamps.items():
            updates.setdefault(i, {}).update(left)
        before = int(stamps[cluster[0]][CLUSTER_DECLINED_KEY]) - 1
        report.count(counted_as)
        if before:
            report.count("declined")
            report.info(
                f"cluster {_ids(cluster)} left apart again ({before + 1} times); offered again after "
                f"{cooldown_for(before + 1, section.settled_cooldown)}"
            )
    if not updates:
        return
    rows = []
    for i, update in updates.items():
        shown_entry = selection.eligible[i]
        reason = (
            "merge rejected by the coverage check; reviewed"
            if REJECTED_CLUSTER_KEY in update
            else "near-duplicate cluster shown together and left apart"
            if CLUSTER_SET_KEY in update
            else "reviewed, left unchanged"
        )
        rows.append(
            ctx.row(
                PASS,
                "stamped",
                shown_entry,
                before=shown_entry,
                after=shown_entry.with_(metadata={**shown_entry.metadata, **update}),
                reason=reason,
            )
        )
    with ctx.store.transaction():
        ctx.store.memories.set_metadata(updates)
        ctx.store.changes.record_many(rows, now=ctx.now)
    report.count("reviewed", sum(1 for u in updates.values() if REVIEWED_KEY in u))


def _apply(
    ctx: PassContext,
    report: PassReport,
    selection: Selection,
    vocab: CoverageVocabulary,
    response: MemoryConsolidationResponse,
    scopes: ScopeRules | None = None,
    guard: CopyGuard | None = None,
) -> None:
    # Merges, removals and saves search the corpus inside their transactions: the recall index is built before, so
    # its first build does not hold the store (an agent saving meanwhile waits for none of it).
    recall.prepare(ctx.store.memories)
    state = _Apply(scopes=scopes or ScopeRules.of(ctx.options.MemoryScopeCategories, ctx.store.memories.list_live()))
    not_shown: list[str] = []
    invalid_ids: list[str] = []
    duplicate_ids = 0
    plans: list[tuple[MemorySave, list[MemoryEntry], str]] = []
    for n, save in enumerate(response.to_save):
        found = check_ids(save.source_ids, selection.eligible, field=f"toSave[{n}].sourceIds")
        not_shown += found.not_shown
        invalid_ids += found.invalid
        duplicate_ids += len(found.duplicates)
        sources = [selection.eligible[i] for i in found.usable]
        source_ids = [s.id for s in sources]
        # A placeholder or the directive's example copied as content is no entry, whatever ids it names: refused, its
        # sources kept and shown again next cycle (the pass reports the copy as a failure).
        target = f"toSave[{n}]" + (f" (sources {_ids(source_ids)} kept)" if sources else "")
        content_given = isinstance(save.content, str) and save.content != NOT_TEXT and bool(save.content.strip())
        if content_given and (guard or CopyGuard(frozenset())).refuse(
            report, save.content, field="content", target=target
        ):
            state.merge_sources.update(source_ids)
            state.untouched.update(source_ids)
            continue
        if save.source_ids and not sources:
            report.count("skipped_unknown_sources")
            report.warn(f"skipped toSave[{n}]: none of its sourceIds was shown this cycle")
            continue
        if isinstance(save.content, str) and not save.content.strip():
            state.merge_sources.update(source_ids)  # kept even when toDelete lists them
            state.untouched.update(source_ids)  # a malformed answer for these: ask again next cycle
            report.count("skipped_blank")
            report.warn(f"skipped a toSave entry with blank content; its sources {_ids(source_ids)} are kept")
            continue
        bad = _save_problem(save, n, ctx.options.MaxContentChars)
        if bad:
            state.merge_sources.update(source_ids)
            state.untouched.update(source_ids)
            _invalid(
                report,
                f"toSave[{n}]",
                bad + (f"; its sources {_ids(source_ids)} are kept" if sources else ""),
            )
            continue
        state.merge_sources.update(source_ids)
        plans.append((save, sources, save.content.strip()))
    deletes = check_ids(response.to_delete, selection.eligible, field="toDelete")
    merge_only = {i for c in selection.reoffered for i in c}
    # a source of a merge also listed in toDelete means the merge (archived with it, or kept when it is not applied)
    kept = [i for i in deletes.usable if i in merge_only and i not in state.merge_sources]
    if kept:
        report.count("reoffered_removals_ignored", len(kept))
        report.warn(
            f"ignored the removal of {_ids(kept)}: a cluster offered again after it was left apart is merge-only"
        )
    not_shown += deletes.not_shown
    invalid_ids += deletes.invalid
    duplicate_ids += len(deletes.duplicates)
    if not_shown:
        ignored = list(dict.fromkeys(not_shown))
        report.count("ignored_ids", len(ignored))
        report.warn(f"ignored {len(ignored)} id(s) that were not shown this cycle: {_ids(ignored)}")
    if invalid_ids:
        report.count("invalid_ids", len(invalid_ids))
        report.warn(
            f"ignored {len(invalid_ids)} id(s) that are not usable ids (not a string, blank, or with "
            f"control or invisible characters): {_ids(invalid_ids)}"
        )
    if duplicate_ids:
        report.count("duplicate_ids", duplicate_ids)
        report.info(f"ignored {duplicate_ids} repeated id(s) within one list of the answer")

    for save, sources, content in plans:
        if sources:
            _apply_merge(ctx, report, selection, vocab, state, save, sources, content)
        elif scope := state.scopes.of_category(save.category):
            # The model saw every scope's entries: what it writes on its own goes to the shared pool, never behind a
            # wall (a LangGraph namespace holds what its agent put there).
            report.count("cross_scope_refused")
            why = f"a new entry the model proposes is not filed in {describe(scope)}"
            report.change("merge-refused", save.category, f"{why}: {_inline(content)[:120]}")
            report.info(f"refused new entry [{save.category}]: {why}")
        else:
            _save_new_entry(ctx, report, save, content)
    _retire(ctx, report, selection, vocab, state, [i for i in deletes.usable if i not in merge_only])
    _stamp_reviewed(ctx, report, selection, state)


# --------------------------------------------------------------------------------------------------- the pass
def _scan(
    ctx: PassContext, report: PassReport, scopes: dict[str, str] | None = None
) -> Callable[[], DuplicateClusters]:
    """The near-duplicate scan: the store's lexical measure, and with ``EmbeddingModel`` set its clusters joined by
    cosine over embeddings (vectors cached per content hash in the store, so only new or edited entries are
    embedded; calls are counted in the pass's usage): the embeddings add the near duplicates said in other words and
    take away none the lexical measure finds (at the threshold that keeps pairs labelled different apart, e5's
    clusters alone held 43 % of the real-model corpus's duplicate groups, against 96 % by the lexical measure). A
    failed embeddings call does not fail the scan: the clusters come from the lexical measure, with a warning, as a
    save's near-duplicate check falls back (a scan that fails itself still degrades the pass to new or changed
    entries, spec: "If the near-duplicate scan fails ...").

    Either way a cluster joins entries of one scope only (``scopes``: id -> scope, dream_assets/scope.py), so two
    users' near duplicates never fill one cluster's places and crowd out the cluster each would form on its own."""
    from dream_assets.llm.embedding_index import EmbeddingIndex, cosine_clusters
    from dream_assets.llm.embedding_threshold import similarity_threshold
    from dream_assets.llm.embeddings import build_embedding_provider

    memories = ctx.store.memories
    section = ctx.options.section(MemoryConsolidationOptions)

    def lexical() -> DuplicateClusters:
        threshold = None if memories.similarity_measure()[0] == "overlap" else section.similarity_threshold
        return memories.duplicate_clusters(
            threshold=threshold, max_cluster_size=section.max_cluster_size, scopes=scopes
        )

    if not ctx.options.EmbeddingModel.strip():
        return lexical

    def scan() -> DuplicateClusters:
        client = ctx.client
        start = len(client.usage.records)
        provider = build_embedding_provider(ctx.options, usage=client.usage)
        if provider is None:
            return lexical()
        try:
            live = memories.list_live()
            index = EmbeddingIndex(ctx.store, provider, now=ctx.now, pass_name=PASS)
            try:
                vectors = index.vectors(live)
            except StoreError:
                raise
            except Exception as exc:  # noqa: BLE001 - a failing endpoint: clusters by the lexical measure, as saves do
                found = lexical()
                why = f"embeddings failed ({type(exc).__name__}: {str(exc)[:300]}); the lexical measure was used"
                return replace(found, warning="; ".join(w for w in (why, found.warning) if w))
            report.counts["embedded"] = index.embedded
            threshold = similarity_threshold(ctx.options, ctx.store, now=ctx.now)
            report.extra["embedding_threshold"] = threshold.describe()
            report.info(f"near-duplicate threshold {threshold.describe()}")
            return cosine_clusters(
                [e.id for e in live],
                vectors,
                threshold.value,
                section.max_cluster_size,
                groups=None if scopes is None else [scopes.get(e.id, "") for e in live],
                joined=lexical(),
            )
        finally:
            for key, value in client.usage.totals(PASS, since=start).items():
                report.usage[key] = report.usage.get(key, 0.0) + value

    return scan


@dataclass
class ClusterChecks:
    """The cluster checks of one run: the directive (``system``) and window (``budget``) they are sent with, what
    they may still spend — the prompt tokens ``LlmMaxCallsPerPass`` full calls could send (the calls times the
    window's prompt limit: a check of a few hundred tokens is not a call of the window's size), or, with no window,
    ``UNBOUNDED_CHECKS_PER_CALL`` checks a call — and the entries they showed (``asked``: never asked about twice in
    one run)."""

    system: str
    budget: Any
    tokens: int | None
    checks: int | None
    calls: int
    asked: set[str] = field(default_factory=set)

    @classmethod
    def of(cls, system: str, budget: Any, max_calls: int) -> ClusterChecks:
        if budget.bounded:
            return cls(system, budget, tokens=max_calls * budget.prompt_limit, checks=None, calls=max_calls)
        return cls(system, budget, tokens=None, checks=max_calls * UNBOUNDED_CHECKS_PER_CALL, calls=max_calls)

    def allows(self, cost: int) -> bool:
        return (self.tokens is None or cost <= self.tokens) and (self.checks is None or self.checks > 0)

    def spend(self, cost: int) -> None:
        if self.tokens is not None:
            self.tokens -= cost
        if self.checks is not None:
            self.checks -= 1

    @property
    def spent(self) -> bool:
        return (self.tokens is not None and self.tokens <= 0) or (self.checks is not None and self.checks <= 0)

    def describe(self) -> str:
        if self.tokens is not None:
            return f"the prompt tokens of LlmMaxCallsPerPass ({self.calls}) full calls"
        return f"LlmMaxCallsPerPass ({self.calls}) x {UNBOUNDED_CHECKS_PER_CALL} checks"


def call_shape(ctx: PassContext) -> tuple[str, str]:
    """``ConsolidationCallShape`` resolved for this run's client: ("batch" or "cluster", why)."""
    chosen = ctx.options.section(MemoryConsolidationOptions).call_shape
    if chosen != "auto":
        return chosen, f"ConsolidationCallShape = {chosen}"
    client = ctx.client
    if client.backend_name != "openai":
        return "batch", f"ConsolidationCallShape = auto, {client.backend_name} backend"
    window = client.budget.window
    if 0 < window <= SMALL_WINDOW:
        return "cluster", f"ConsolidationCallShape = auto, the model's window is {window} tokens"
    facts = client.endpoint_facts()
    if facts.gen_tps is not None and facts.gen_tps < SLOW_GENERATION_TPS:
        return "cluster", f"ConsolidationCallShape = auto, the endpoint generates {facts.gen_tps:.1f} tokens a second"
    return "batch", "ConsolidationCallShape = auto"


def _cluster_part(batch: Selection, *clusters: Sequence[str]) -> Selection:
    """``batch`` narrowed to some of its clusters: what one cluster check shows, applies and stamps (or the clusters
    left apart without a call, stamped together)."""
    members = {i for c in clusters for i in c}
    sets = [set(c) for c in clusters]
    return replace(
        batch,
        eligible={i: e for i, e in batch.eligible.items() if i in members},
        shown_hash={i: h for i, h in batch.shown_hash.items() if i in members},
        clusters=[list(c) for c in clusters],
        reoffered=[c for c in batch.reoffered if set(c) in sets],
        riders=[c for c in batch.riders if set(c) in sets],
        part_of={i: lineage for i, lineage in batch.part_of.items() if i in members},
        later=[],
        backlog=0,
    )


def _cluster_answer(verdict: ClusterCheckResponse, sources: Sequence[MemoryEntry]) -> MemoryConsolidationResponse:
    """A cluster check's verdict as the consolidation answer it stands for: "merge" is one save replacing every member
    (filed under the members' category, the oldest member's when they differ; their tags together), "keep" nothing."""
    if verdict.decision != "merge":
        return MemoryConsolidationResponse()
    oldest = entries_sorted(sources)[0]
    categories = {e.category for e in sources}
    category = categories.pop() if len(categories) == 1 else oldest.category
    tags = sorted({t for e in sources for t in e.tags})
    save = MemorySave(content=verdict.content, category=category, tags=tags, sourceIds=[e.id for e in sources])
    return MemoryConsolidationResponse(toSave=[save])


def _check_clusters(
    ctx: PassContext,
    report: PassReport,
    batch: Selection,
    vocab: CoverageVocabulary,
    scopes: ScopeRules,
    guard: CopyGuard,
    checks: ClusterChecks,
) -> int | None:
    """The cluster call shape: the host proposes, the model disposes. Of each near-duplicate cluster of ``batch``, the
    host's rules take the members that describe no distinct moment with one another (``merge_groups``: a date, number
    or name one states and the other lacks, frame dates set aside; one category) and one short call per such group
    (while ``checks`` may spend) asks the model whether they are one fact and for the merged text. Its answer is applied
    as a merge of the group or the group left apart, through the same checks as a batch answer (coverage, repair,
    copy guard, scopes, review stamps). A cluster with no such group is left apart without a call. A group with an
    entry ``checks.asked`` holds (shown by a check earlier in this run, whatever its answer did) waits for the next
    run, so a model answering blank or copied text is not asked the same question again and again. The calls made;
    None when one failed."""
    made = 0
    groups: list[list[str]] = []
    riding: list[list[str]] = []  # groups of clusters offered for their cooldown alone
    riders = {frozenset(c) for c in batch.riders}
    apart: list[list[str]] = []  # distinct moments by the host's rules: no question to ask
    split: list[tuple[list[str], list[frozenset[str]]]] = []  # clusters the rules split, with their groups
    answered: set[frozenset[str]] = set()  # groups a check of this run answered
    for cluster in batch.clusters:
        found = merge_groups(
            {"entries": [_entry_input(batch.eligible[i]) for i in cluster], "clusters": [list(cluster)]}
        )
        (riding if frozenset(cluster) in riders else groups).extend(found)
        if not found:
            apart.append(cluster)
        elif [set(g) for g in found] != [set(cluster)]:
            split.append((list(cluster), [frozenset(g) for g in found]))
    if apart:  # stamped left apart in one write
        report.count("kept_apart_by_rules", len(apart))
        _apply(ctx, report, _cluster_part(batch, *apart), vocab, MemoryConsolidationResponse(), scopes, guard)
    groups = [g for g in groups if not checks.asked.intersection(g)]
    if groups:  # a cluster past its cooldown is asked only beside a question this run asks anyway
        groups += [g for g in riding if not checks.asked.intersection(g)]
    elif riding:
        report.info(f"{len(riding)} cluster(s) past their cooldown wait for a run with a question of its own")
    for n, cluster in enumerate(groups):
        part = _cluster_part(batch, cluster)
        entries = part.entries()
        prompt = render_cluster_check(entries)
        cost = checks.budget.tokens(checks.system, prompt)
        if not checks.allows(cost):
            report.count("checks_waiting", len(groups) - n)
            report.info(f"{len(groups) - n} cluster check(s) wait for the next cycle: {checks.describe()} are spent")
            break
        if len(entries) > len(CLUSTER_LABELS) or not checks.budget.fits(checks.system, prompt):
            report.count("too_large_clusters")
            report.warn(
                f"cluster {_ids(cluster)} ({len(entries)} entries) is too large for one cluster check "
                f"({checks.budget.describe()}); it waits (ConsolidationCallShape = batch offers it in parts)"
            )
            continue
        inputs = {"entries": [_entry_input(e) for e in entries], "clusters": [list(cluster)]}
        report.counts["prompt_chars"] = report.counts.get("prompt_chars", 0) + len(prompt)
        response = call_model(ctx, report, CLUSTER_CHECK, prompt, inputs)
        if response is CONTEXT_EXCEEDED:
            report.count("too_large_clusters")
            report.warn(f"the endpoint said the check of cluster {_ids(cluster)} did not fit; it waits")
            continue
        if response is None:
            return None
        assert isinstance(response, ClusterCheckResponse)
        made += 1
        checks.spend(cost)
        checks.asked.update(cluster)
        part.call = int(report.counts.get("calls", 0)) + made
        if response.decision == "keep":
            report.count("kept_apart_by_check")
        _apply(ctx, report, part, vocab, _cluster_answer(response, entries), scopes, guard)
        answered.add(frozenset(cluster))
    done = [(cluster, found) for cluster, found in split if answered.issuperset(found)]
    if done:
        _settle_whole(ctx, report, batch, done, int(report.counts.get("calls", 0)) + made)
    return made


def _settle_whole(
    ctx: PassContext,
    report: PassReport,
    batch: Selection,
    split: Sequence[tuple[list[str], list[frozenset[str]]]],
    call: int,
) -> None:
    """Clusters the host's rules split (a group asked about, members kept apart as distinct moments), each with its
    groups, every one of which a check answered: a cluster whose groups were left in place is stamped settled as a
    whole, as one cluster shown and left apart (all of them in one read and one write). Its groups' own stamps name
    only the groups, so without this the scan's cluster would be open on every run and its groups asked again. A group
    merged, a group whose answer was no answer (blank or copied text: its members are not stamped reviewed, so it is
    asked again), or an entry changed since shown is a new question: no stamp."""
    current = ctx.store.memories.get_many([i for cluster, _ in split for i in cluster])

    def left_in_place(cluster: list[str], groups: list[frozenset[str]]) -> bool:
        return all(
            i in current and not current[i].is_archived and review_hash(current[i]) == batch.shown_hash[i]
            for i in cluster
        ) and all(current[i].metadata.get(REVIEWED_KEY) == batch.shown_hash[i] for group in groups for i in group)

    whole = [cluster for cluster, groups in split if left_in_place(cluster, groups)]
    if not whole:
        return
    part = _cluster_part(batch, *whole)
    part.eligible = {i: current[i] for i in part.eligible}
    part.call = call
    _stamp_reviewed(ctx, report, part, _Apply(), counted_as="settled_whole")


def _summary(report: PassReport) -> str:
    c = report.counts
    n = {
        k: int(c.get(k, 0))
        for k in (
            "live",
            "reviewed",
            "created_since_last_run",
            "merged",
            "repaired",
            "rejected",
            "ephemeral",
            "protected",
        )
    }
    return (
        f"memory consolidation summary — live {n['live']} ({int(c.get('live_after', n['live']))} after), reviewed "
        f"{n['reviewed']}, created since last run "
        f"{n['created_since_last_run']}, merged {n['merged']}, repaired {n['repaired']}, rejected {n['rejected']}, "
        f"ephemeral {n['ephemeral']}, protected {n['protected']}"
        + (f" ({int(c['guarded'])} by the removal guard)" if c.get("guarded") else "")
    )


def paused(ctx: PassContext) -> str | None:
    """Why consolidation cannot run now: the memory audit paused it (its pause file exists); else None."""
    pause = ctx.profile.consolidation_pause_path
    if pause.exists():
        return (
            f"paused: {pause} exists (written by the memory audit); restore what was lost, then "
            "delete the file to resume"
        )
    return None


#: What a long id costs in a prompt as sent: its short name (``contracts.id_aliases``), at its longest for a call.
_SHORT_NAME = "e9999"


def _entry_tokens(count: Callable[[str], int]) -> Callable[[MemoryEntry], int]:
    """An entry's tokens in the consolidation prompt as sent (a long id shown by its short name): its rendered block
    and its id in a cluster line."""

    def cost(entry: MemoryEntry) -> int:
        shown_id = _SHORT_NAME if is_long_id(entry.id) else entry.id
        return count(render_memory_entry(entry.with_(id=shown_id))) + count(f"{shown_id}, ") + 1

    return cost


def _count_selection(report: PassReport, selection: Selection, live: list[MemoryEntry], previous: Any) -> None:
    since = previous.last_run_at if previous is not None else None
    report.counts.update(
        {
            "eligible": len(selection.eligible),
            "withheld": selection.withheld,
            "unreviewed": selection.unreviewed,
            "clusters": len(selection.clusters),
            "settled_clusters": selection.settled_clusters,
            "backlog": selection.backlog,
            "reoffered": len(selection.reoffered),
            "created_since_last_run": sum(1 for e in live if since is None or e.created_at > since),
        }
    )
    report.info(
        f"{len(selection.eligible)} of {len(live)} live entries eligible for the first call ({selection.unreviewed} "
        f"new or changed, {len(selection.clusters)} open near-duplicate cluster(s)); {selection.withheld} withheld"
        + (f"; {selection.backlog} more wait for later calls or cycles" if selection.backlog else "")
    )


def _reviewable(live: list[MemoryEntry]) -> list[MemoryEntry]:
    """The live entries the pass may show, fold or remove: not one whose text is only the head of a longer text
    (``TEXT_HEAD_KEY``, a LangGraph value over MaxContentChars), as no check of its text sees what the rest says."""
    return [e for e in live if TEXT_HEAD_KEY not in e.metadata]


def consolidate_memories(ctx: PassContext) -> PassReport:
    """The pass, after the shared opening (enabled, not paused, past ConsolidationMinInterval: runner.opening).
    Its gate is per entry (the review stamps), not the ledger's: the runner stamps the corpus as the run left it
    (``report.stamp``), for the minimum-interval floor and the change-gate sensor."""
    report = PassReport(PASS)
    opts = ctx.options
    section = opts.section(MemoryConsolidationOptions)
    previous = ctx.ledger.get(PASS)
    if ctx.ledger.warning:
        report.warn(ctx.ledger.warning)
    if ctx.force:
        note_forced(ctx, report, "every live entry is offered again, past the review stamps and the minimum interval")
    # Entries reviewed by another backend or model are reviewed once more by this one.
    switched = note_model_switch(ctx, PASS, report)

    vocab, vocab_warning = load_vocabulary(ctx.profile.coverage_vocabulary_path)  # re-read every cycle
    if vocab_warning:
        report.warn(vocab_warning)
    memories = ctx.store.memories
    started = time.perf_counter()  # a duration for the report, never a clock the logic reads
    live = _reviewable(memories.list_live())
    if section.exact_fold_enabled and len(live) >= 2:
        live = _fold_exact(ctx, report, live)
    report.counts["live"] = report.counts["live_after"] = len(live)
    if len(live) < 2:
        if report.counts.get("folded"):
            # The fold changed the corpus: that is a completed pass (undoable, stamped), not a skip.
            report.stamp = memories.fingerprint()
            return report.finish(_summary(report) + f", folded {int(report.counts['folded'])}")
        return report.skip(f"fewer than two live memories ({len(live)}): nothing to consolidate")

    feedback = recent_feedback(ctx, report)
    # Corrections that arrived since the last completed pass are worth a call on their own (anti-pattern mining),
    # even when no entry changed; older feedback was already shown with the entries of an earlier pass.
    since_last = previous.last_run_at if previous is not None else None
    fresh_corrections = [
        f
        for f in feedback
        if f.get("kind") == "Correction" and (since_last is None or parse_ts(f["timestamp"]) > since_last)
    ]
    report.counts["fresh_corrections"] = len(fresh_corrections)
    for key in (
        "merged",
        "repaired",
        "rejected",
        "ephemeral",
        "protected",
        "guarded",
        "archived",
        "reviewed",
    ):
        report.counts.setdefault(key, 0)

    # Batches sized to the model's window: each call shows whole clusters and single entries while directive +
    # items + answer reserve fit; what does not fit waits for the next call, and after LlmMaxCallsPerPass calls
    # for the next cycle. An endpoint that says the prompt was too long halves the budget and the batch is redone.
    client = ctx.client
    budget = client.budget
    report.extra["context"] = budget.describe()
    review_all = bool(ctx.force) or switched is not None
    shape, shape_why = call_shape(ctx)
    report.extra["call_shape"] = shape
    if shape == "cluster":
        report.info(f"one call per near-duplicate cluster ({shape_why}); entries outside a cluster are not sent")
        system = client.request(CLUSTER_CHECK, "").system
        fixed = 0
    else:
        system = client.request(SPEC.model_call, "").system
        fixed = budget.tokens(system, render_memory_consolidation([], [], feedback, ctx.now)) if budget.bounded else 0
    # The rules this run judges by: a cluster settled under others is asked again (select.py).
    rules = rules_stamp(client.identity, system)
    calls = 0
    shrink = 1.0
    selection = None
    guard = CopyGuard.for_call(ctx, CLUSTER_CHECK if shape == "cluster" else SPEC.model_call)
    shown: set[str] = set()
    max_calls = ctx.options.LlmMaxCallsPerPass
    checks = ClusterChecks.of(system, budget, max_calls)
    while True:
        items_budget = None
        if budget.bounded:
            items_budget = int((budget.prompt_limit - fixed) * shrink)
        # One scan plans the calls left (disjoint batches); the next scan sees what their merges made.
        scopes = ScopeRules.of(opts.MemoryScopeCategories, live)
        scope_of = {e.id: scopes.of_entry(e) for e in live}
        planned = select_candidates(
            live,
            _scan(ctx, report, scope_of if any(scope_of.values()) else None),
            section.max_entries_per_call,
            review_all=review_all,
            now=ctx.now,
            cooldown=section.settled_cooldown,
            exclude=shown,
            cost=_entry_tokens(budget.count) if items_budget is not None else None,
            budget=max(0, items_budget) if items_budget is not None else None,
            batches=max(1, max_calls - calls) if budget.bounded else 1,
            scope=scopes.of_entry,
            rules=rules,
            singles_sent=shape != "cluster",
        )
        selection = planned
        if planned.split and planned.eligible:
            report.counts["split_clusters"] = report.counts.get("split_clusters", 0) + planned.split
            report.info(
                f"{planned.split} near-duplicate cluster(s) too large for one call ({budget.describe()}) offered in "
                "parts of the most similar members; each merged part joins the rest of its cluster on a later call"
            )
        if calls == 0:
            report.extra["select_s"] = round(time.perf_counter() - started, 3)
            for warning in selection.warnings:
                report.warn(warning)
            _count_selection(report, selection, live, previous)
        if not selection.eligible and not (fresh_corrections and calls == 0):
            break
        if shape == "cluster":
            batches = [planned, *planned.later]
            if not any(b.clusters for b in batches):
                break
            made = 0
            for batch in batches:
                shown.update(batch.eligible)  # singles are not sent; they are not offered again this run
                checked = _check_clusters(ctx, report, batch, vocab, scopes, guard, checks)
                if checked is None:
                    if calls:
                        report.warn(f"a cluster check failed after {calls} call(s); the rest waits for the next cycle")
                    return report  # failed or deferred: what applied stays, nothing stamped, retried next cycle
                made += checked
                calls += checked
                report.counts["calls"] = calls
                if checks.spent:
                    break
            live = _reviewable(memories.list_live())
            if not made or checks.spent or not budget.bounded:
                break  # nothing new was asked (what merged may make new groups: asked on the next round)
            continue
        redo = False
        for batch in [planned, *planned.later]:
            entries = batch.entries()
            prompt = render_memory_consolidation(entries, batch.clusters, feedback, ctx.now, reoffered=batch.reoffered)
            inputs = {
                "entries": [_entry_input(e) for e in entries],
                "clusters": batch.clusters,
                "feedback": feedback,
                "reoffered": batch.reoffered,
            }
            sent = with_aliases(prompt, id_aliases(SPEC.model_call.contract, inputs))  # as the model layer sends it
            if budget.bounded and not budget.fits(system, sent) and len(entries) > 1:
                shrink *= 0.8  # the per-entry estimate was short (cluster lines, framing): a smaller batch
                redo = True
                break
            report.extra["prompt_chars"] = max(len(prompt), int(report.extra.get("prompt_chars", 0)))
            report.counts["prompt_chars"] = report.counts.get("prompt_chars", 0) + len(prompt)
            response = call_model(ctx, report, SPEC.model_call, prompt, inputs, shrinkable=len(entries) > 1)
            if response is CONTEXT_EXCEEDED:
                shrink *= 0.5
                report.count("context_exceeded_retries")
                report.info(f"the endpoint said the prompt of {len(entries)} entries did not fit; retrying with half")
                redo = True
                break
            if response is None:
                if calls:  # earlier batches of this run are applied and reviewed: they stay; the rest waits
                    report.warn(f"batch {calls + 1} failed after {calls} applied; the rest waits for the next cycle")
                return report  # failed or deferred: nothing of this batch applied, nothing stamped, retried next cycle
            assert isinstance(response, MemoryConsolidationResponse)
            batch.call = calls + 1
            _apply(ctx, report, batch, vocab, response, scopes, guard)
            calls += 1
            report.counts["calls"] = calls
            selection = batch
            shown.update(batch.eligible)  # a forced or switched run offers every entry once, over its batches
            if calls >= max_calls:
                break
        if not redo:
            shrink = 1.0
        live = _reviewable(memories.list_live())
        if calls >= max_calls or not budget.bounded:
            break
    assert selection is not None
    if selection.too_large:
        sizes = ", ".join(str(len(c)) for c in selection.too_large[:5])
        report.counts["too_large_clusters"] = len(selection.too_large)
        report.warn(
            f"{len(selection.too_large)} near-duplicate cluster(s) (of {sizes} entries) do not fit one call "
            f"({budget.describe()}) even two members at a time: they wait until LlmContextTokens is raised or "
            "LlmMaxTokens lowered"
        )
    remaining = selection.backlog if calls else report.counts.get("backlog", 0)
    report.counts["backlog"] = remaining
    if calls and remaining:
        report.info(f"{remaining} entries wait for the next cycle ({calls} call(s) this run, LlmMaxCallsPerPass)")
    if not calls and not selection.eligible:
        report.info(
            "nothing eligible — every live entry is reviewed and unchanged, no near-duplicate cluster is "
            "open and no new correction arrived; no model call"
        )

    report.counts["live_after"] = memories.counts()["live"]
    failed = CopyGuard.failed(report, _summary(report))
    if failed is not None:  # what applied stays applied; not stamped, so the next cycle asks again
        return failed
    # Completion, for the minimum-interval floor and the change-gate sensor (which compares the corpus fingerprint).
    report.stamp = memories.fingerprint()
    return report.finish(_summary(report))


#: Merge repair: a model call this pass makes for a merge that failed its checks (not a pass of its own).
MERGE_REPAIR = ModelCall(
    name=REPAIR_PASS,
    contract=MergeRepairResponse,
    directive_file="merge-repair.md",
    directive_option=None,
    offline=answer_merge_repair,
)

#: The one-cluster check: the call a small model answers per near-duplicate cluster (``ConsolidationCallShape``).
CLUSTER_CHECK = ModelCall(
    name=CLUSTER_CHECK_CALL,
    contract=ClusterCheckResponse,
    directive_file="merge-check.md",
    directive_option=None,
    offline=answer_cluster_check,
)

#: What each count of a memory consolidation materialization means. Counts of entries are of the live corpus the
#: pass started from (``live``): ``eligible`` + ``withheld`` = ``live``, and ``unreviewed`` is at most ``live``.
COUNTS = {
    "live": "live memories the pass started from, after the exact-duplicate fold (every entry count is of these)",
    "live_after": "live memories when the pass ended (merges and archives lower it)",
    "eligible": "live entries shown to the model: new or changed ones and members of open near-duplicate clusters, "
    "at most ConsolidationMaxEntriesPerCall",
    "withheld": "live entries not shown (live - eligible)",
    "unreviewed": "live entries new or changed since their last review, shown or waiting in the backlog",
    "backlog": "unreviewed or clustered entries over the per-call cap, left for the next cycles",
    "clusters": "open near-duplicate clusters shown to the model",
    "calls": "model calls the review took: the eligible entries are offered in batches that fit LlmContextTokens",
    "too_large_clusters": "near-duplicate clusters of which not even two members fit one call's window (or, in the "
    "cluster call shape, that do not fit one cluster check), left waiting with a warning",
    "kept_apart_by_check": "clusters a cluster check judged distinct events and left whole (cluster call shape)",
    "checks_waiting": "cluster checks left for the next cycle: the run's allowance (LlmMaxCallsPerPass full calls' "
    "prompt tokens) was spent (cluster call shape)",
    "kept_apart_by_rules": "clusters left whole without a call: every two members describe distinct moments by the "
    "host's rules (cluster call shape)",
    "settled_whole": "clusters the host's rules split into groups asked about and members kept apart, settled as one "
    "cluster once every group was answered and left in place (cluster call shape)",
    "split_clusters": "near-duplicate clusters too large for one call's window alone, offered in parts (counted "
    "once per selection that offered them)",
    "settled_clusters": "near-duplicate clusters withheld because every member is reviewed and unchanged",
    "reoffered": "shown clusters that had settled before (offered for a merge only, never a removal)",
    "created_since_last_run": "live entries created after the last completed run",
    "fresh_corrections": "user corrections in the feedback log since the last completed run",
    "prompt_chars": "characters of the prompt sent to the model (0: no call)",
    "embedded": "entries embedded for the duplicate scan (EmbeddingModel set)",
    "folded": "exact duplicates folded into their oldest twin before the model, without a call",
    "reviewed": "shown entries stamped as reviewed (not offered again until they change)",
    "merged": "merges applied",
    "repaired": "merges applied after one repair call restored what they dropped or removed what they invented",
    "repair_capped": "merges whose repair was not asked for: the pass's repair calls were used up",
    "rejected": "merges rejected by the coverage check (sources kept)",
    "rejected_dropped": "of the rejected: a name, number or date of a source was dropped",
    "rejected_invented": "of the rejected: a specific no source has was invented",
    "created": "new entries the merges wrote",
    "archived": "entries archived (merge sources and removals; never deleted)",
    "ephemeral": "entries archived as noise",
    "protected": "proposed removals refused and the entries kept (high-value floor, removal guard)",
    "guarded": "of the protected: kept by the removal guard",
    "unchanged": "merges that only repeated their one source: nothing replaced",
    "declined": "proposals not applied because the entry changed since it was shown",
    "deferred": "entries left for the next cycle (a write could not be made now)",
    "reinforced_existing": "merges whose text an existing live entry already held: that entry is reinforced instead",
    "reinforced_by_new": "live entries reinforced by a merged text saved over them",
    "kept_unmerged_sources": "sources listed for removal kept because their merge did not persist",
    "left_apart": "sources the model put in one merge that describe different things, kept apart",
    "skipped_blank": "merge items with empty text (their sources are offered again)",
    "skipped_unknown_sources": "merge items naming only ids that were not shown",
    "invalid_items": "answer items that could not be applied (listed in the changes table)",
    "invalid_ids": "ids in the answer that are not memory ids",
    "ignored_ids": "ids in the answer that were not shown this run",
    "duplicate_ids": "ids the answer listed more than once",
    "reoffered_removals_ignored": "removals of members of re-offered settled clusters, ignored (merge only)",
    "failed_saves": "merged texts the store refused to save (sources kept)",
    "cross_scope_refused": "merges refused because their sources, or the category they would be filed under, are "
    "behind different walls (LangGraph namespaces, MemoryScopeCategories), and new entries the model proposed "
    "behind a wall: sources kept, nothing written",
    "forced": "1 when the run was forced (dream/force), else 0",
    "gated": "1 when the change gate found the corpus unchanged and no call was made, else 0",
    "model_calls_not_made": "model calls not made (the endpoint failed earlier in the cycle)",
}


@dataclass(frozen=True, kw_only=True)
class MemoryConsolidationOptions(PassOptions):
    """The options section of this pass (``[passes.memory_consolidation]``)."""

    PASS: ClassVar[str] = "memory_consolidation"

    enabled: bool = pass_option(True, "pass 1: memory consolidation", alias="MemoryConsolidationEnabled")
    model: str = pass_option("", "model for memory consolidation; empty = LlmModel", alias="MemoryConsolidationModel")
    base_url: str = pass_option(
        "", "endpoint for memory consolidation; empty = LlmBaseUrl", url=True, alias="MemoryConsolidationBaseUrl"
    )
    api_key_env: str = pass_option(
        "", "API key variable for memory consolidation; empty = LlmApiKeyEnv", alias="MemoryConsolidationApiKeyEnv"
    )
    apply_mode: str = pass_option(
        "",
        "ApplyMode of memory consolidation; empty = ApplyMode",
        choices=("", "auto", "review", "review-risky"),
        alias="MemoryConsolidationApplyMode",
    )
    directive: str = pass_option("dream.md", "memory consolidation directive", alias="DirectivePath")
    min_interval: timedelta = pass_option(
        timedelta(hours=6),
        "minimum time between completed consolidation passes; zero disables",
        alias="ConsolidationMinInterval",
    )
    similarity_threshold: float = pass_option(
        0.88,
        "cosine threshold for near-duplicate clusters",
        minimum=0.0,
        maximum=1.0,
        alias="ConsolidationSimilarityThreshold",
    )
    call_shape: str = pass_option(
        "auto",
        "how consolidation asks the model: batch (the eligible entries and their near-duplicate clusters in one call, "
        "with noise removal, recategorisation and anti-pattern mining), cluster (one short call per near-duplicate "
        "cluster: same fact or not, and the merged text; what a small model answers reliably) or auto (cluster for an "
        "endpoint whose window is at most 8192 tokens or whose measured generation is under 10 tokens a second, "
        "batch otherwise and offline)",
        choices=("auto", "batch", "cluster"),
        alias="ConsolidationCallShape",
    )
    max_cluster_size: int = pass_option(
        3, "largest near-duplicate cluster offered as one group", minimum=2, alias="ConsolidationMaxClusterSize"
    )
    max_entries_per_call: int = pass_option(
        500,
        "most entries shown to the model in one consolidation call; the rest "
        "wait for later cycles (a large first review is spread out)",
        minimum=2,
        alias="ConsolidationMaxEntriesPerCall",
    )
    merge_repair_enabled: bool = pass_option(
        True, "one narrow repair call for a merge the coverage check rejects", alias="MergeRepairEnabled"
    )
    merge_repair_max_per_cycle: int = pass_option(
        10, "repair calls per cycle", minimum=0, alias="MergeRepairMaxPerCycle"
    )
    removal_guard_enabled: bool = pass_option(
        True,
        "a stand-alone removal the model proposes is applied only to noise "
        "(no names, numbers or dates, importance below 0.5) or to an entry "
        "whose every specific another live entry carries; others are kept",
        alias="ConsolidationRemovalGuardEnabled",
    )
    settled_cooldown: timedelta = pass_option(
        timedelta(days=7),
        "a cluster shown together and left apart is "
        "offered again after this long, beside a question the run asks anyway (never as a call of its own); "
        "doubles each time it is left apart again (at most 16x); zero re-offers it every such run",
        alias="ConsolidationSettledCooldown",
    )
    exact_fold_enabled: bool = pass_option(
        True,
        "fold live entries of one category whose content is equal after "
        "normalising case, white space and punctuation, before the model",
        alias="ConsolidationExactFoldEnabled",
    )


SPEC = PassSpec(
    name=PASS,
    group="memory",
    description="Memory consolidation — merges near-duplicate memories and retires noise, with safeguards.\n\nPass 1. "
    "Shows the model only new, changed or near-duplicate memories and applies its merges with host-side safeguards: "
    "coverage check (no dropped names, numbers or dates) with one repair call, high-value floor, replacement before "
    "retirement, archive never delete. Every change can be undone per cycle.",
    body=consolidate_memories,
    options=MemoryConsolidationOptions,
    after=("importance_decay",),
    reads=("memory_corpus", "feedback_log"),
    missing_input=paused,
    gate="memory_corpus",
    model_call=ModelCall(
        name=PASS,
        contract=MemoryConsolidationResponse,
        directive_file="dream.md",
        directive_option="DirectivePath",
        offline=answer_memory_consolidation,
    ),
    counts=COUNTS,
)


def run_memory_consolidation(ctx: PassContext) -> PassReport:
    """The pass with its shared opening, change gate and ledger stamp (runner.attempt: no lock, no review mode, no
    recorded outcome)."""
    from dream_assets.passes.runner import attempt

    return attempt(SPEC, ctx)
