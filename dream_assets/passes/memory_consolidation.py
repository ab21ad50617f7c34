"""Pass 1 — Memory consolidation: merge near-duplicates, refine categories, retire noise, mine anti-patterns.

This pass can destroy an agent's memory, so the model only proposes and the host decides (spec "Pass 1 — Memory
consolidation" and "LLM response format"; DESIGN principle 4). In order:

1. Skip while ``memory-audit/consolidation-paused.json`` exists, or sooner than ``ConsolidationMinInterval`` after
   the last completed pass (the ledger record ``memory_consolidation`` keeps that across restarts; zero disables).
2. Gate the candidates (consolidation_select.py): only new or changed entries and open near-duplicate clusters are
   shown. The lookup used to apply the answer is keyed on that eligible set, so an id the model invents or remembers
   resolves to nothing. Nothing eligible: no model call.
3. One model call (the store is not held meanwhile). For each merge: the coverage check (every name, acronym,
   multi-digit number and date of the sources must survive), one narrow repair call when it fails (capped per cycle),
   then a re-read of the sources — a source edited since it was shown wins and the merge waits for the next cycle —
   and the merged entry is saved with host-computed temporal fields (consolidation_merge.py).
4. Retirement after replacement: the union of ``toDelete`` and the sources of merges that persisted is archived,
   never deleted, each archive logged with its content. A source of a merge that did not persist is kept even when
   ``toDelete`` lists it. Entries above the high-value floor are never stand-alone ("ephemeral") removals.
5. Entries shown and left in place are stamped reviewed; sources of a rejected merge are also stamped with the
   rejected cluster. Every change is a change-log row of this cycle, so the cycle can be undone.

Counts (report.counts, plotted in the UI): live (after the pass), reviewed (stamped reviewed this pass),
created_since_last_run, merged, repaired, rejected, ephemeral, protected, archived, eligible, withheld, plus created
(new entries such as anti-patterns), deferred (merges and removals held back by a concurrent edit), ignored_ids.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

from dream_assets.llm.contracts import MemoryConsolidationResponse, MemorySave, MergeRepairResponse
from dream_assets.llm.prompts import render_memory_consolidation, render_merge_repair
from dream_assets.model import MemoryEntry, iso, new_id, parse_ts
from dream_assets.passes.archive_purge import is_high_value
from dream_assets.passes.common import call_model, note_malformed, stamp
from dream_assets.passes.consolidation_merge import (
    REJECTED_AT_KEY,
    REJECTED_CLUSTER_KEY,
    build_merged_entry,
    rejected_cluster_id,
)
from dream_assets.passes.consolidation_select import REVIEWED_KEY, Selection, review_hash, select_candidates
from dream_assets.passes.context import PassContext
from dream_assets.passes.report import PassReport
from dream_assets.store.logs import log_exists, read_events
from dream_assets.store.memory import ContentError
from dream_assets.text.coverage import (
    CoverageSource,
    CoverageVocabulary,
    check_merge_coverage,
    load_vocabulary,
)

PASS = "memory_consolidation"
REPAIR_PASS = "merge_repair"
_PREVIEW = 12  # ids listed in one log line before "…"


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
    read = read_events(ctx.profile, "feedback", since=ctx.now - opts.FeedbackWindow,
                       until=ctx.now + timedelta(microseconds=1))
    note_malformed(report, "feedback", read)
    items = []
    for e in read.events[-opts.FeedbackMaxSignals:]:
        items.append({"timestamp": iso(e.timestamp), "kind": e.kind, "rating": e.rating, "sessionId": e.session_id,
                      "text": e.text, "domain": e.domain, "skillNames": list(e.skill_names)})
    return items


def _entry_input(e: MemoryEntry) -> dict[str, Any]:
    return {"id": e.id, "content": e.content, "category": e.category, "tags": sorted(e.tags),
            "subject": e.subject_time or None}


# --------------------------------------------------------------------------------------------------- apply state
@dataclass
class _Apply:
    """What applying one answer did, for the counts, the stamps and the summary."""

    persisted_sources: dict[str, str] = field(default_factory=dict)   # source id -> merged entry id
    merge_sources: set[str] = field(default_factory=set)              # every resolved source of any toSave merge
    untouched: set[str] = field(default_factory=set)                  # not to be stamped: retried next cycle
    rejected_stamps: dict[str, dict[str, str]] = field(default_factory=dict)
    archived: set[str] = field(default_factory=set)
    repairs_used: int = 0


def _changed_since_shown(selection: Selection, current: dict[str, MemoryEntry], ids: Sequence[str]) -> list[str]:
    """Ids whose entry is gone, archived or rewritten since the model was shown it (a concurrent edit wins)."""
    changed = []
    for i in ids:
        now_entry = current.get(i)
        if now_entry is None or now_entry.is_archived or review_hash(now_entry) != selection.shown_hash[i]:
            changed.append(i)
    return changed


def _repair(ctx: PassContext, report: PassReport, sources: Sequence[MemoryEntry], merged_text: str,
            missing: Sequence[str]) -> str | None:
    """One narrow repair call. A failed call is a failed repair (the merge stays rejected), not a failed pass."""
    sub = PassReport(REPAIR_PASS)
    prompt = render_merge_repair(merged_text, sources, missing)
    inputs = {"merged": merged_text, "sources": [{"id": s.id, "content": s.content} for s in sources],
              "missing": list(missing)}
    response = call_model(ctx, sub, REPAIR_PASS, prompt, inputs)
    for key, value in sub.usage.items():
        report.usage[key] = report.usage.get(key, 0.0) + value
    if response is None:
        report.warn(f"merge repair call failed ({sub.reason}); the merge stays rejected")
        return None
    assert isinstance(response, MergeRepairResponse)
    return response.content


def _save_new_entry(ctx: PassContext, report: PassReport, save: MemorySave, content: str) -> None:
    """A toSave entry without sources (an anti-pattern the model mined, or another new fact): save-time dedup applies."""
    memories = ctx.store.memories
    # The entries a dedup match could land on, so a reinforced or extended entry is recorded with its prior state.
    before = {e.id: e for e, _ in memories.search(content, limit=10)}
    try:
        result = memories.save(content, category=save.category, tags=save.tags, now=ctx.now, dedupe=True)
    except (ContentError, OSError) as exc:
        report.warn(f"could not save new entry [{save.category}] {content[:80]!r}: {exc}")
        report.count("failed_saves")
        return
    entry = result.entry
    if result.action == "created":
        stamped = {**entry.metadata, REVIEWED_KEY: review_hash(entry)}
        memories.set_metadata({entry.id: {REVIEWED_KEY: stamped[REVIEWED_KEY]}})
        entry = entry.with_(metadata=stamped)
        ctx.record(PASS, "created", entry, before=None, after=entry,
                   reason=f"new entry proposed by the model in {entry.category}")
        report.count("created")
        report.change("created", entry.id, f"[{entry.category}] {entry.content}")
        report.info(f"created memory {entry.id} [{entry.category}]: {_inline(entry.content)}")
    else:
        prior = before.get(result.matched_id or "")
        ctx.record(PASS, "updated", entry, before=prior or entry, after=entry,
                   reason=f"new entry proposed by the model {result.action} existing entry {entry.id} (save-time dedup)")
        report.count("reinforced_by_new")
        report.change(result.action, entry.id, f"[{entry.category}] {content}")
        report.info(f"new entry {result.action} existing memory {entry.id} (save-time dedup): {_inline(content)}")


def _apply_merge(ctx: PassContext, report: PassReport, selection: Selection, vocab: CoverageVocabulary,
                 state: _Apply, save: MemorySave, sources: list[MemoryEntry], content: str) -> None:
    opts = ctx.options
    ids = [s.id for s in sources]
    only = sources[0] if len(sources) == 1 else None
    category = save.category if "category" in save.model_fields_set else sources[0].category
    tags = save.tags if "tags" in save.model_fields_set else sorted({t for s in sources for t in s.tags})
    if only is not None and content == only.content.strip() and category == only.category \
            and set(tags) == set(only.tags):
        report.count("unchanged")  # an echo of the entry: nothing to replace
        return

    check = check_merge_coverage([CoverageSource(s.content, s.category) for s in sources], content, vocab)
    repaired_from = 0
    if not check.ok and opts.MergeRepairEnabled:
        if state.repairs_used < opts.MergeRepairMaxPerCycle:
            state.repairs_used += 1
            revised = _repair(ctx, report, sources, content, check.missing)
            if revised is not None and revised.strip():
                again = check_merge_coverage([CoverageSource(s.content, s.category) for s in sources], revised, vocab)
                if again.ok:
                    repaired_from, content, check = len(check.missing), revised.strip(), again
                else:
                    check = again
        else:
            report.count("repair_capped")
            report.info(f"merge repair skipped for {_ids(ids)}: MergeRepairMaxPerCycle ({opts.MergeRepairMaxPerCycle}) "
                        "reached this cycle")
    if not check.ok:
        cluster = rejected_cluster_id(ids)
        for i in ids:
            state.rejected_stamps[i] = {REJECTED_CLUSTER_KEY: cluster, REJECTED_AT_KEY: iso(ctx.now) or ""}
        report.count("rejected")
        missing = ", ".join(f'"{m}"' for m in check.missing)
        report.change("merge-rejected", cluster, f"sources {_ids(ids)} kept; missing {missing}")
        report.info(f"rejected merge of {_ids(ids)} — the merged text drops {missing}; sources kept")
        return

    # Replacement first: re-read the sources just before writing; a concurrent edit wins and the merge waits.
    current = ctx.store.memories.get_many(ids)
    changed = _changed_since_shown(selection, current, ids)
    if changed:
        state.untouched.update(ids)
        report.count("deferred")
        report.change("merge-deferred", _ids(ids), f"changed since shown: {_ids(changed)}")
        report.info(f"deferred merge of {_ids(ids)} to the next cycle — {_ids(changed)} changed since it was shown")
        return
    merged = build_merged_entry([current[i] for i in ids], entry_id=new_id(), content=content, category=category,
                                tags=tags, now=ctx.now)
    # The merged text was judged this cycle against every source: stamp it reviewed so the next cycle does not
    # re-ask the model about its own answer. Any later write re-opens it.
    merged = merged.with_(metadata={**merged.metadata, REVIEWED_KEY: review_hash(merged)})
    try:
        merged = ctx.store.memories.put(merged)
    except (ContentError, OSError) as exc:
        state.untouched.update(ids)
        report.count("failed_saves")
        report.warn(f"could not save the merge of {_ids(ids)} ({exc}); its sources are kept")
        return
    what = "recategorised" if only is not None else "merged"
    ctx.record(PASS, "created", merged, before=None, after=merged,
               reason=f"{what} from {_ids(ids)}" + (f"; repaired, restored {repaired_from} specific(s)" if repaired_from else ""))
    for i in ids:
        state.persisted_sources.setdefault(i, merged.id)
    report.count("merged")
    report.change("merge-created", merged.id, f"from {_ids(ids)}: {merged.content}")
    report.info(f"{what} {_ids(ids)} into {merged.id} [{merged.category}]: {_inline(merged.content)}")
    if repaired_from:
        report.count("repaired")
        report.info(f"repaired merge of {_ids(ids)} — restored {repaired_from} specific(s)")


def _retire(ctx: PassContext, report: PassReport, selection: Selection, state: _Apply,
            to_delete: Sequence[str]) -> None:
    """Archive the sources of persisted merges and the ephemeral removals, never a changed or protected entry."""
    opts = ctx.options
    reasons: dict[str, str] = {i: f"merged into {m}" for i, m in state.persisted_sources.items()}
    for i in dict.fromkeys(to_delete):
        if i not in selection.eligible or i in reasons:
            continue
        shown = selection.eligible[i]
        if i in state.merge_sources:
            # Spec "Ordering": only sources of a merge that actually persisted are retired.
            report.count("kept_unmerged_sources")
            report.info(f"kept {i}: listed in toDelete, but it is a source of a merge that was not applied")
            continue
        if is_high_value(shown, opts):
            report.count("protected")
            report.change("protected", i, f"importance {shown.importance:.2f}, reinforced "
                                          f"{shown.reinforcement_count}× — above the high-value floor")
            report.info(f"protected {i} from ephemeral removal (importance {shown.importance:.2f}, reinforced "
                        f"{shown.reinforcement_count}×): {_inline(shown.content)}")
            continue
        reasons[i] = "ephemeral: flagged by the model as noisy, low-value or superseded"
    if not reasons:
        return
    current = ctx.store.memories.get_many(reasons)
    changed = set(_changed_since_shown(selection, current, list(reasons)))
    for i, why in reasons.items():
        if i in changed:
            state.untouched.add(i)
            report.count("deferred")
            report.info(f"left {i} alone: it changed since it was shown ({why})")
            continue
        before = current[i]
        if i not in state.persisted_sources and is_high_value(before, opts):  # the floor holds on the current state too
            report.count("protected")
            report.info(f"protected {i} from ephemeral removal: {_inline(before.content)}")
            continue
        after = ctx.store.memories.archive(i, now=ctx.now)
        state.archived.add(i)
        ctx.record(PASS, "archived", after, before=before, after=after, reason=why)
        report.count("archived")
        if i not in state.persisted_sources:
            report.count("ephemeral")
        report.change("archived", i, f"{why}: {before.content}")
        report.info(f"archived memory {i} ({why}): {_inline(before.content)}")


def _stamp_reviewed(ctx: PassContext, report: PassReport, selection: Selection, state: _Apply) -> None:
    """Entries shown and left in place are reviewed as shown; sources of a rejected merge also carry the rejection."""
    updates: dict[str, dict[str, str]] = {}
    for i, shown in selection.eligible.items():
        if i in state.archived or i in state.untouched:
            continue
        update: dict[str, str] = {}
        if shown.metadata.get(REVIEWED_KEY) != selection.shown_hash[i]:
            update[REVIEWED_KEY] = selection.shown_hash[i]
        update.update(state.rejected_stamps.get(i, {}))
        if update:
            updates[i] = update
    if not updates:
        return
    ctx.store.memories.set_metadata(updates)
    rows = []
    for i, update in updates.items():
        shown = selection.eligible[i]
        reason = ("merge rejected by the coverage check; reviewed" if REJECTED_CLUSTER_KEY in update
                  else "reviewed, left unchanged")
        rows.append({"cycle_id": ctx.cycle_id, "pass_name": PASS, "kind": "stamped", "target_type": "memory",
                     "target_id": i, "before": shown, "after": shown.with_(metadata={**shown.metadata, **update}),
                     "reason": reason})
    ctx.store.changes.record_many(rows, now=ctx.now)
    report.count("reviewed", sum(1 for u in updates.values() if REVIEWED_KEY in u))


def _apply(ctx: PassContext, report: PassReport, selection: Selection, vocab: CoverageVocabulary,
           response: MemoryConsolidationResponse) -> None:
    state = _Apply()
    ignored: list[str] = []
    plans: list[tuple[MemorySave, list[MemoryEntry], str]] = []
    for save in response.to_save:
        wanted = list(dict.fromkeys(save.source_ids))
        sources = [selection.eligible[i] for i in wanted if i in selection.eligible]
        ignored += [i for i in wanted if i not in selection.eligible]
        content = save.content.strip()
        if wanted and not sources:
            report.count("skipped_unknown_sources")
            report.warn(f"skipped a toSave entry: none of its sourceIds {_ids(wanted)} was shown this cycle")
            continue
        if not content:
            state.merge_sources.update(s.id for s in sources)  # kept even when toDelete lists them
            state.untouched.update(s.id for s in sources)  # a malformed answer for these: ask again next cycle
            report.count("skipped_blank")
            report.warn(f"skipped a toSave entry with blank content; its sources {_ids([s.id for s in sources])} are kept")
            continue
        state.merge_sources.update(s.id for s in sources)
        plans.append((save, sources, content))
    ignored += [i for i in response.to_delete if i not in selection.eligible]
    if ignored:
        ignored = list(dict.fromkeys(ignored))
        report.count("ignored_ids", len(ignored))
        report.warn(f"ignored {len(ignored)} id(s) that were not shown this cycle: {_ids(ignored)}")

    for save, sources, content in plans:
        if sources:
            _apply_merge(ctx, report, selection, vocab, state, save, sources, content)
        else:
            _save_new_entry(ctx, report, save, content)
    _retire(ctx, report, selection, state, response.to_delete)
    _stamp_reviewed(ctx, report, selection, state)


# --------------------------------------------------------------------------------------------------- the pass
def _summary(report: PassReport) -> str:
    c = report.counts
    n = {k: int(c.get(k, 0)) for k in ("live", "reviewed", "created_since_last_run", "merged", "repaired", "rejected",
                                        "ephemeral", "protected")}
    return (f"memory consolidation summary — live {n['live']}, reviewed {n['reviewed']}, created since last run "
            f"{n['created_since_last_run']}, merged {n['merged']}, repaired {n['repaired']}, rejected {n['rejected']}, "
            f"ephemeral {n['ephemeral']}, protected {n['protected']}")


def run_memory_consolidation(ctx: PassContext) -> PassReport:
    report = PassReport(PASS)
    opts = ctx.options
    if not opts.MemoryConsolidationEnabled:
        return report.skip("disabled (MemoryConsolidationEnabled = false)")
    pause = ctx.profile.consolidation_pause_path
    if pause.exists():
        return report.skip(f"paused: {pause} exists (written by the memory audit); restore what was lost, then "
                           "delete the file to resume")
    previous = ctx.ledger.get(PASS)
    if ctx.ledger.warning:
        report.warn(ctx.ledger.warning)
    if previous is not None and opts.ConsolidationMinInterval > timedelta(0):
        allowed = previous.last_run_at + opts.ConsolidationMinInterval
        if ctx.now < allowed:
            report.counts["floored"] = 1
            report.summary = (f"memory consolidation skipped — last completed {iso(previous.last_run_at)}, next allowed "
                              f"at {iso(allowed)} (ConsolidationMinInterval {opts.ConsolidationMinInterval})")
            return report.skip(f"minimum interval: last completed {iso(previous.last_run_at)}")

    vocab, vocab_warning = load_vocabulary(ctx.profile.coverage_vocabulary_path)  # re-read every cycle
    if vocab_warning:
        report.warn(vocab_warning)
    memories = ctx.store.memories
    started = time.perf_counter()  # a duration for the report, never a clock the logic reads
    live = memories.list_live()
    if len(live) < 2:
        report.counts["live"] = len(live)
        return report.skip(f"fewer than two live memories ({len(live)}): nothing to consolidate")

    selection = select_candidates(live, memories.duplicate_clusters, ctx.options.ConsolidationMaxEntriesPerCall)
    report.extra["select_s"] = round(time.perf_counter() - started, 3)
    for warning in selection.warnings:
        report.warn(warning)
    since = previous.last_run_at if previous is not None else None
    report.counts.update({
        "eligible": len(selection.eligible), "withheld": selection.withheld, "unreviewed": selection.unreviewed,
        "clusters": len(selection.clusters), "settled_clusters": selection.settled_clusters,
        "backlog": selection.backlog,
        "created_since_last_run": sum(1 for e in live if since is None or e.created_at > since),
    })
    for key in ("merged", "repaired", "rejected", "ephemeral", "protected", "archived", "reviewed"):
        report.counts.setdefault(key, 0)
    report.info(f"{len(selection.eligible)} of {len(live)} live entries eligible ({selection.unreviewed} new or "
                f"changed, {len(selection.clusters)} open near-duplicate cluster(s)); {selection.withheld} withheld"
                + (f"; {selection.backlog} more wait for later cycles (ConsolidationMaxEntriesPerCall "
                   f"{ctx.options.ConsolidationMaxEntriesPerCall})" if selection.backlog else ""))

    feedback = recent_feedback(ctx, report)
    # Corrections that arrived since the last completed pass are worth a call on their own (anti-pattern mining),
    # even when no entry changed; older feedback was already shown with the entries of an earlier pass.
    since_last = previous.last_run_at if previous is not None else None
    fresh_corrections = [f for f in feedback if f.get("kind") == "Correction"
                         and (since_last is None or parse_ts(f["timestamp"]) > since_last)]
    report.counts["fresh_corrections"] = len(fresh_corrections)
    if selection.eligible or fresh_corrections:
        entries = selection.entries()
        prompt = render_memory_consolidation(entries, selection.clusters, feedback, ctx.now)
        inputs = {"entries": [_entry_input(e) for e in entries], "clusters": selection.clusters, "feedback": feedback}
        report.extra["prompt_chars"] = len(prompt)
        report.counts["prompt_chars"] = len(prompt)
        response = call_model(ctx, report, PASS, prompt, inputs)
        if response is None:
            return report  # failed or deferred: nothing applied, nothing stamped, retried next cycle
        assert isinstance(response, MemoryConsolidationResponse)
        _apply(ctx, report, selection, vocab, response)
    else:
        report.info("nothing eligible — every live entry is reviewed and unchanged, no near-duplicate cluster is "
                    "open and no new correction arrived; no model call")

    report.counts["live"] = memories.counts()["live"]
    # Completion, for the minimum-interval floor and the change-gate sensor (which compares the corpus fingerprint).
    stamp(ctx, PASS, memories.fingerprint())
    return report.finish(_summary(report))
