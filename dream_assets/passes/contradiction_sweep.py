"""Contradiction sweep: a later fact supersedes the stale one it contradicts ("lives in Paris" / "moved to Berlin").

A gated, delta-driven pass after memory consolidation. Each new or changed live entry (its content, category or tags
differ from the review stamp ``contradictionReviewedHash`` in its metadata) is shown to the model next to the live
entries it could contradict: of the entries most similar to it (BM25 over the live corpus), at most
``ContradictionSweepNeighbours`` that the host proposes as a plausible pair (:func:`plausible_pair`: they differ in a
name, number, date or place — frame dates aside —, or one says "moved", "no longer", "now", "correction" or denies what
the other states; not when they open with different names, each about its own someone, nor when, with no change said,
only their dates differ, two moments of one kind; and in one direction at least the rules below would let a supersession
stand, so the winner carries what made the loser true but the changed value). A new or changed entry with no such
partner is not shown: it is stamped reviewed with the answer's stamps, or at once when no entry is shown (no call). A
call thus holds only the pairs where a contradiction is plausible; the host refuses any other whatever the answer. The
model answers pairs where one entry supersedes the other. The host decides (DESIGN principle 4):

- a pair with an empty id, an id that is not a live entry (unknown), an id of a live entry that was not shown in this
  call, or the same id twice (a self-pair) is ignored, counted and listed with its reason;
- a pair whose entries are behind different walls (dream_assets/scope.py: LangGraph namespaces,
  ``MemoryScopeCategories``) is refused with its reason and counted (``cross_scope``), and such an entry is never
  shown as another's neighbour;
- a user correction (``standing.is_user_correction``: saved from feedback of kind Correction, stated by the user,
  or filed under ``feedback/from-user`` with the tag ``correction``, as ``model.user_correction_signs`` reads them;
  an entry merged from one stays one) is never superseded by an entry that is not itself a user correction, whatever
  the model proposes; a user correction superseding an agent's own claim is accepted (recall ranks by the same
  standing: store/recall.py);
- between entries of equal standing, subject time decides: an entry about a later moment may supersede one about an
  earlier moment, never the reverse. The moment is the ``subjectTime`` point, else the ``subjectTimeStart`` ..
  ``subjectTimeEnd`` span (a date of day, month or year precision covers that whole day, month or year); a pair is
  refused only when the winner's moment ends before the loser's begins. Without a subject time on both sides, or when
  the moments overlap, the model's direction stands;
- the loser is archived with ``supersededBy`` (never deleted), the winner carries ``supersedes``; both changes and
  their change-log rows are one transaction, so the cycle can be undone, which restores both records. A pair whose
  entries changed since they were shown, or whose loser or winner an earlier pair of the same answer archived, waits.

The change gate: the gate input is ``memory_corpus``, whose data version (the live corpus's id, content, category and
tags: ``MemoryStore.fingerprint``) the pass stamps in the ledger and its sensor compares, as for memory consolidation;
an unchanged corpus makes no call, and so does a corpus with nothing new or changed. Review stamps are metadata, so they
never move that data version. The shown entries are stamped reviewed only after a usable answer arrived, in the
transaction that applies it (so a kill or a failure leaves both or neither, and an undo puts the stamps back too: an
undone pair is not proposed again until one of its entries changes). A reason is model text: one with a lone surrogate
or a control character refuses its pair, one over 500 characters is cut with a note; one that is a placeholder or the
directive's example reason refuses its pair as copied (``CopyGuard``), leaves both entries unstamped, and fails the
pass unstamped, so the next run asks again. When more entries wait than one
call shows (``ContradictionSweepMaxEntriesPerCall``), the ledger records the run with a fingerprint no data version
equals (:func:`backlog_stamp`), so the pass stays due and the change-gate sensor requests it again for the rest; the run
that reviews the last of them stamps the data version itself.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Collection, Container, Generator, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Annotated, ClassVar

from pydantic import Field

from dream_assets import recall_index as recall
from dream_assets.changes_model import SuccessorHow
from dream_assets.llm.contracts import NOT_TEXT, Contract, IdText, ModelCall, ShownIds
from dream_assets.llm.offline import needs_judgement
from dream_assets.llm.prompts import render_memory_entry
from dream_assets.model import TEXT_HEAD_KEY, MemoryEntry, iso
from dream_assets.options import PassOptions, pass_option
from dream_assets.passes.common import CONTEXT_EXCEEDED, CopyGuard, call_model
from dream_assets.passes.context import PassContext
from dream_assets.passes.model_text import problem, shown
from dream_assets.passes.report import AboutToCall, PassReport
from dream_assets.passes.spec import PassSpec
from dream_assets.scope import ScopeRules, describe
from dream_assets.store.memory import SUPERSEDED_BY_KEY, SUPERSEDES_KEY, ContentError, MemoryStore, NotFound
from dream_assets.store.recall import about_earlier_moment
from dream_assets.store.standing import is_user_correction
from dream_assets.text.change import says_change
from dream_assets.text.content_hash import stable_hash
from dream_assets.text.coverage import (
    BASELINE_VOCABULARY,
    CoverageSource,
    CoverageVocabulary,
    check_merge_coverage,
    content_stems,
    invented_specifics,
    load_vocabulary,
    specifics_of,
)
from dream_assets.text.framing import DATE, without_frame_dates
from dream_assets.text.restated import negations
from dream_assets.text.tokens import stem, tokenize

PASS = "contradiction_sweep"
REVIEWED_KEY = "contradictionReviewedHash"
#: A supersession reason is kept with the archived entry (the store keeps 500 characters of it).
MAX_REASON_CHARS = 500
#: The winner must carry at least this share of the loser's content words (those of the superseded value aside).
KEPT_SHARE = 0.5
__all__ = [
    "PASS",
    "REVIEWED_KEY",
    "SUPERSEDED_BY_KEY",
    "SUPERSEDES_KEY",
    "SPEC",
    "Verdict",
    "backlog_stamp",
    "is_user_correction",
    "judge",
    "loss_of",
    "offered_pairs",
    "run_contradiction_sweep",
    "sweep_contradictions",
]


# --- the model call: response contract, prompt, offline answer --------------------------------------------------------
class Supersession(Contract):
    """One proposed pair: ``winnerId`` supersedes ``loserId``. Missing ids are empty text, so the pass ignores that
    pair with its reason instead of the whole answer failing."""

    winner_id: Annotated[IdText, ShownIds("entries.id")] = Field(default="", alias="winnerId")
    loser_id: Annotated[IdText, ShownIds("entries.id")] = Field(default="", alias="loserId")
    reason: str = ""


class ContradictionSweepResponse(Contract):
    supersessions: list[Supersession] = Field(default_factory=list)


# --- pure decisions -----------------------------------------------------------------------------------------------


def review_hash(entry: MemoryEntry) -> str:
    """What the sweep reviewed of an entry: its content, category and tags (reinforcement and decay do not re-open)."""
    return stable_hash("contradiction-review", entry.content, entry.category, sorted(entry.tags))


def needs_review(entry: MemoryEntry) -> bool:
    return entry.metadata.get(REVIEWED_KEY) != review_hash(entry)


@dataclass(frozen=True)
class Verdict:
    winner_id: str
    loser_id: str
    accepted: bool
    why: str  # the refusal reason, or the rule that accepted it
    reason: str = ""  # the model's reason


def loss_of(winner: MemoryEntry, loser: MemoryEntry, vocab: CoverageVocabulary = BASELINE_VOCABULARY) -> str | None:
    """Why ``winner`` cannot stand in for ``loser`` (the removal guard's spirit: a supersession archives the loser,
    so the winner must carry what made it true except the superseded value), or None when it can. The superseded
    value is what the winner replaces: each specific of the loser the winner does not carry must be matched by one
    the winner brings (Paris and the Louvre by Berlin and Kreuzberg), and the winner carries at least ``KEPT_SHARE``
    of the loser's other content words (it is a later value of the same fact, not another fact)."""
    own = [CoverageSource(loser.content, loser.category)]
    lost = check_merge_coverage(own, winner.content, vocab).missing
    brought = invented_specifics(own, winner.content, vocab)
    if len(lost) > len(brought):
        return (
            f"the winner does not carry {_listed(lost)} of the entry it would supersede"
            + (f" and replaces only {_listed(brought)}" if brought else " and replaces none of it")
            + ": a stand-alone loss of specifics"
        )
    gone = {stem for value in lost for stem in content_stems(value)}
    words = content_stems(loser.content) - gone
    kept = words & (content_stems(winner.content) | gone)
    if words and len(kept) < KEPT_SHARE * len(words):
        return (
            f"the winner carries {len(kept)} of the {len(words)} content words of the entry it would supersede: "
            "it says something else, not a later value of the same fact"
        )
    return None


def _listed(values: Sequence[str], limit: int = 4) -> str:
    shown = ", ".join(f'"{v}"' for v in values[:limit])
    return shown + (" …" if len(values) > limit else "")


def offered_pairs(neighbours: Mapping[str, Sequence[str]]) -> set[frozenset[str]]:
    """The pairs the host offered as similar: each new or changed entry with each of its shown neighbours."""
    return {frozenset((d, n)) for d, ns in neighbours.items() for n in ns if n != d}


def judge(
    proposals: Sequence[tuple[str, str, str]],
    shown: Mapping[str, MemoryEntry],
    known: Container[str],
    *,
    offered: Collection[frozenset[str]],
    vocab: CoverageVocabulary = BASELINE_VOCABULARY,
    max_superseded: int | None = None,
    scope: Callable[[MemoryEntry], str] | None = None,
) -> list[Verdict]:
    """Host rules over the model's ``(winner id, loser id, reason)`` pairs. ``shown``: the entries of this call by id;
    ``known``: every live id; ``offered``: the pairs the host offered as similar (:func:`offered_pairs`), the only
    ones that may be a supersession; ``max_superseded``: how many supersessions one answer may carry (the rest are
    refused, in answer order); ``scope``: the wall each entry is behind (a pair across walls is refused). Returns one
    verdict per proposal, in order."""
    verdicts: list[Verdict] = []
    accepted = 0
    for winner_id, loser_id, reason in proposals:
        w, lo = (winner_id or "").strip(), (loser_id or "").strip()

        def refuse(why: str, w: str = w, lo: str = lo, reason: str = reason) -> None:
            verdicts.append(Verdict(w, lo, False, why, reason))

        if not w or not lo or NOT_TEXT in (w, lo):
            refuse("empty id")
        elif w == lo:
            refuse("self-pair")
        elif missing := [i for i in (w, lo) if i not in shown and i not in known]:
            refuse(f"unknown id {missing[0]}")
        elif hidden := [i for i in (w, lo) if i not in shown]:
            refuse(f"id {hidden[0]} was not shown in this call")
        elif scope is not None and (sides := (scope(shown[w]), scope(shown[lo])))[0] != sides[1]:
            refuse(f"across scopes: the winner is in {describe(sides[0])}, the loser in {describe(sides[1])}")
        elif frozenset((w, lo)) not in offered:
            refuse("not a pair the host offered as similar: only an entry and a live entry shown next to it may be one")
        else:
            winner, loser = shown[w], shown[lo]
            refusal = host_refusal(winner, loser, vocab)
            if refusal is not None:
                refuse(refusal)
            elif max_superseded is not None and accepted >= max_superseded:
                refuse(_over_bound(max_superseded))
            else:
                accepted += 1
                by_user = is_user_correction(winner) and not is_user_correction(loser)
                why = "a user correction supersedes an agent's own claim" if by_user else "accepted"
                verdicts.append(Verdict(w, lo, True, why, reason))
    return verdicts


def host_refusal(
    winner: MemoryEntry, loser: MemoryEntry, vocab: CoverageVocabulary = BASELINE_VOCABULARY
) -> str | None:
    """Why the host refuses ``winner`` superseding ``loser`` whatever the model says (standing, subject time, what
    the winner carries: the rules :func:`judge` applies to a pair of shown entries), or None when it may stand."""
    w_user, l_user = is_user_correction(winner), is_user_correction(loser)
    if l_user and not w_user:
        return "a user correction is never superseded by an entry that is not one"
    if w_user == l_user and about_earlier_moment(winner, loser):
        return "the proposed winner is about an earlier moment than the entry it would supersede"
    return loss_of(winner, loser, vocab)


def may_conflict(a: MemoryEntry, b: MemoryEntry, vocab: CoverageVocabulary = BASELINE_VOCABULARY) -> bool:
    """Whether ``a`` and ``b`` are one subject told two ways, as a later fact changes an earlier one. Either of them
    says a change (a change word: "moved", "no longer", "now", "instead", "correction"; or a negation the other
    lacks) and, names set aside, ``SAME_SUBJECT_SHARE`` of the words of the shorter are the other's (at least one);
    or a name, number, date or place one states the other does not (the dates that only say when a fact was
    observed, "On 3 May, Alice mentioned again that ...", set aside: text/framing.py) and that share of the words
    of both are the same. In both cases they name someone or something in common, or neither names anyone, or
    they name different ones and at least two words, and that share of the words of both, are the same; "moved",
    "lives" and "home" count as one word, and so do "salary", "earns" and "raise", and "works", "job" and "company".
    "Alice lives in Paris" and "Alice moved to Berlin" are; "Alice lives in Paris" and "Alice plays chess on
    Sundays" are two subjects; two wordings of one fact are told one way. Never one subject: two texts that open
    with different names (each is about its own someone: "Caroline is researching adoption agencies" and "Melanie
    is ..."), and, with no change said, two that differ only in dates (two moments: "On 24 July, Caroline went
    hiking" and "On 21 September, ...")."""
    ta, tb = without_frame_dates(a.content), without_frame_dates(b.content)
    names_a, names_b = _names(ta, a.category, vocab), _names(tb, b.category, vocab)
    lead_a, lead_b = _lead_name(ta, names_a), _lead_name(tb, names_b)
    if lead_a and lead_b and lead_a != lead_b:
        return False  # each is about its own someone ("Caroline is researching ..." / "Melanie is ..."): two facts
    words_a, words_b = _subject_words(ta, names_a), _subject_words(tb, names_b)
    shared = len(words_a & words_b)
    if (names_a or names_b) and not names_a & names_b:
        # No name in common: two people's facts, or one thing whose name is the value that changed ("the standup is
        # in room Ada" / "in room Babbage"). Only the second shares the rest of its words.
        return shared >= max(2.0, SAME_SUBJECT_SHARE * len(words_a | words_b))
    if says_change(a.content) or says_change(b.content) or negations(ta) != negations(tb):
        # The changed value may be any words ("green tea" / "black coffee now"): most of the shorter one's are shared.
        return shared >= max(1.0, SAME_SUBJECT_SHARE * min(len(words_a), len(words_b)))
    if shared < SAME_SUBJECT_SHARE * len(words_a | words_b) or not shared:
        return False
    source = [CoverageSource(tb, b.category)]
    differing = {*check_merge_coverage(source, ta, vocab).missing, *invented_specifics(source, ta, vocab)}
    if not differing:
        return False
    # Told alike but on other days ("On 24 July, Caroline is researching adoption agencies" / "On 21 September,
    # ..."), with no word of change: two moments, and a later one does not make an earlier one untrue.
    kinds = {sp.text: sp.kind for text, entry in ((ta, a), (tb, b)) for sp in specifics_of(text, entry.category, vocab)}
    return any(kinds.get(value) != "date" for value in differing)


#: Two entries are about one subject when this share of their words (names and change words aside) both say: of
#: the shorter one's when one of them says a change, else of the words of both.
SAME_SUBJECT_SHARE = 0.5
#: Words of one subject a change is told in: a move changes where one lives, a raise what one earns.
_SUBJECT_OF = {
    stem(word): subject
    for subject, words in {
        "home": "live lives living lived move moves moved moving relocate relocated resides home address",
        "income": "salary earn earns earning earned income pay paid wage raise",
        "job": "work works working worked job jobs employed employer company hired quit promoted",
    }.items()
    for word in words.split()
}
_CHANGE_STEMS = frozenset(
    stem(word)
    for word in "now nowadays anymore instead longer change changed switch switched stop stopped correction "
    "corrected actually became become used".split()
)


def _names(text: str, category: str, vocab: CoverageVocabulary) -> frozenset[str]:
    return frozenset(
        stem(t)
        for sp in specifics_of(text, category, vocab)
        if sp.kind in ("name", "acronym")
        for t in tokenize(sp.text)
    )


#: What may stand before a sentence's subject without being it: a date it happened on ("On 24 July 2023, ...").
_LEADING_DATE = re.compile(rf"^\W*(?:(?:on|in|during|since|by)\s+)?(?:{DATE})\s*,?\s*", re.IGNORECASE)


def _lead_name(text: str, names: frozenset[str]) -> str | None:
    """The name a text opens with (a leading date aside), when its first word is one of its ``names``: whom or
    what the text is about ("Caroline is researching ...", "On 4 November 2023, Melanie ..."); else None ("The
    standup is in room Ada", "My manager is Priya")."""
    first = next(iter(tokenize(_LEADING_DATE.sub("", text, count=1))), None)
    return stem(first) if first is not None and stem(first) in names else None


def _subject_words(text: str, names: frozenset[str]) -> frozenset[str]:
    return frozenset(_SUBJECT_OF.get(w, w) for w in content_stems(text) - names) - _CHANGE_STEMS


def plausible_pair(a: MemoryEntry, b: MemoryEntry, vocab: CoverageVocabulary = BASELINE_VOCABULARY) -> bool:
    """Whether one of ``a`` and ``b`` could supersede the other: they are one subject told two ways
    (:func:`may_conflict`) and, in one direction at least, the host would let the supersession stand
    (:func:`host_refusal`: standing, subject time, the winner carrying what made the loser true but the changed
    value; any other pair the host refuses whatever the answer). Only such a pair is worth a model's tokens."""
    if not may_conflict(a, b, vocab):
        return False
    return host_refusal(a, b, vocab) is None or host_refusal(b, a, vocab) is None


#: Refusals of a pair the host judged (not an unusable id): counted as ``refused``.
_REFUSALS = ("a user correction", "the proposed winner", "the winner", "not a pair", "over the bound", "across scopes")


def _over_bound(limit: int) -> str:
    return (
        f"over the bound: one answer supersedes at most {limit} entr{'y' if limit == 1 else 'ies'} "
        "(ContradictionSweepMaxSupersededShare of the entries reviewed)"
    )


def superseded_bound(shown: int, share: float) -> int:
    """How many supersessions one answer over ``shown`` entries may apply: ``share`` of them, at least one."""
    return max(1, int(share * shown))


# --- selection ----------------------------------------------------------------------------------------------------


@dataclass
class Selection:
    """The entries of one call: the new or changed ones (``delta``), each with the ids of the live entries it could
    contradict; and the new or changed ones that could contradict none (``alone``: reviewed without a call)."""

    delta: list[MemoryEntry]
    neighbours: dict[str, list[str]]
    shown: dict[str, MemoryEntry]
    backlog: int = 0
    unreviewed: int = 0
    notes: list[str] = field(default_factory=list)
    alone: list[MemoryEntry] = field(default_factory=list)


#: Of the entries most similar to a new or changed one, this many times ``ContradictionSweepNeighbours`` are looked at
#: for those it could contradict (most similar entries are not in conflict with it).
CANDIDATES_PER_NEIGHBOUR = 3


def select(
    live: Sequence[MemoryEntry],
    search: Callable[[str, int], Sequence[tuple[MemoryEntry, float]]],
    *,
    neighbours: int,
    max_entries: int,
    scope: Callable[[MemoryEntry], str] | None = None,
    plausible: Callable[[MemoryEntry, MemoryEntry], bool] | None = None,
) -> Selection:
    """New or changed entries (oldest first, at most ``max_entries`` of them shown) with at most ``neighbours`` of
    the live entries most similar to each by ``search`` (BM25 over the live corpus), of the entry's own ``scope``
    only, that ``plausible`` says it could contradict (:func:`plausible_pair`; every similar entry when None). An
    entry with none is ``alone``: nothing to ask the model about it (or nothing more: a pair of two new or changed
    entries is shown once, in the block of the first)."""
    unreviewed = [e for e in live if needs_review(e)]
    delta: list[MemoryEntry] = []
    alone: list[MemoryEntry] = []
    near: dict[str, list[MemoryEntry]] = {}
    offered: set[frozenset[str]] = set()
    examined = 0
    for entry in unreviewed:
        if len(delta) >= max_entries:
            break
        examined += 1
        found: list[MemoryEntry] = []
        paired = False  # with an entry shown before it, in that entry's block
        own = scope(entry) if scope is not None else ""
        # Neighbours behind another wall are skipped, and so are those it could not contradict: more are asked for
        # than are shown.
        asked = neighbours + 1 if plausible is None else CANDIDATES_PER_NEIGHBOUR * (neighbours + 1)
        for hit, _score in search(entry.content, asked if scope is None else 4 * asked):
            if (scope is not None and scope(hit) != own) or TEXT_HEAD_KEY in hit.metadata:
                continue
            if hit.id == entry.id or hit.is_archived or len(found) >= neighbours:
                continue
            if plausible is None or plausible(entry, hit):
                if plausible is not None and frozenset((entry.id, hit.id)) in offered:
                    paired = True
                    continue
                found.append(hit)
        offered.update(frozenset((entry.id, hit.id)) for hit in found)
        if not found and not paired and plausible is not None:
            alone.append(entry)
        else:
            delta.append(entry)
            near[entry.id] = found
    shown = {e.id: e for e in delta}
    for entry in delta:
        for hit in near[entry.id]:
            shown.setdefault(hit.id, hit)
    return Selection(
        delta,
        {i: [h.id for h in hits] for i, hits in near.items()},
        shown,
        backlog=len(unreviewed) - examined,
        unreviewed=len(unreviewed),
        alone=alone,
    )


def backlog_stamp(data_version: str, backlog: int) -> str:
    """What the ledger records for a run that left ``backlog`` new or changed entries for later: a value no data
    version of ``memory_corpus`` equals (those start with ``memories:``), so the gate stays open."""
    return f"backlog:{backlog}:{data_version}"


# --- prompt -------------------------------------------------------------------------------------------------------


def render_prompt(selection: Selection, now: datetime) -> str:
    def line(entry: MemoryEntry, new: bool) -> str:
        text = render_memory_entry(entry)[2:]
        marks = (["NEW"] if new else []) + (["USER-CORRECTION"] if is_user_correction(entry) else [])
        return f"- {' '.join(marks) + ' ' if marks else ''}{text}"

    out = [
        f"Today: {now.date().isoformat()}",
        f"## New or changed entries ({sum(1 for e in selection.delta if selection.neighbours.get(e.id))}), each with "
        "the live entries it may contradict",
        "Answer the pairs where one entry makes the other stale (a later fact replacing an earlier one). Two facts "
        "that can both be true are not a supersession.",
    ]
    # An entry whose pairs are all in earlier blocks has no block of its own.
    for n, entry in enumerate([e for e in selection.delta if selection.neighbours.get(e.id)], 1):
        out += ["", f"### {n}", line(entry, True)]
        out += [line(selection.shown[i], False) for i in selection.neighbours[entry.id]]
    return "\n".join(out)


def _entry_input(entry: MemoryEntry) -> dict[str, object]:
    return {
        "id": entry.id,
        "content": entry.content,
        "category": entry.category,
        "subject": entry.subject_time,
        "created_at": iso(entry.created_at),
        "user_correction": is_user_correction(entry),
    }


# --- the pass -----------------------------------------------------------------------------------------------------


def sweep_contradictions(ctx: PassContext) -> Generator[AboutToCall, bool, PassReport]:
    """The pass after the shared opening (runner.opening); gated on the corpus's data version as it starts. A run
    that got through stamps its completion stamp (``_completion_stamp``); one with fewer than two live entries counts
    as done on the corpus it saw."""
    report = PassReport(PASS)
    opts = ctx.options
    section = opts.section(ContradictionSweepOptions)
    memories = ctx.store.memories
    start_fingerprint = memories.fingerprint()  # read before the corpus: a write in between re-opens the gate
    # An entry whose text is only the head of a longer one (a LangGraph value over MaxContentChars) is left alone:
    # no check of its text could see what the rest says.
    live = [e for e in memories.list_live() if TEXT_HEAD_KEY not in e.metadata]
    report.counts["live"] = len(live)
    for key in ("superseded", "ignored", "refused", "waiting", "over_bound"):
        report.counts.setdefault(key, 0)
    if not (yield AboutToCall(start_fingerprint, report)):
        return report
    if len(live) < 2:
        report.stamp = start_fingerprint
        return report.skip(f"fewer than two live memories ({len(live)}): nothing can supersede anything; no call")
    max_entries = section.max_entries_per_call
    scopes = ScopeRules.of(opts.MemoryScopeCategories, live)
    vocab, vocab_warning = load_vocabulary(ctx.profile.coverage_vocabulary_path)
    if vocab_warning:
        report.warn(vocab_warning)
    while True:  # a prompt over the model's window shows fewer entries: the rest waits for the next run
        selection = select(
            live,
            lambda query, limit: recall.search(memories, query, limit=limit),
            neighbours=section.neighbours,
            max_entries=max_entries,
            scope=scopes.of_entry if scopes.walls else None,
            plausible=lambda a, b: plausible_pair(a, b, vocab),
        )
        report.counts.update(
            {
                "unreviewed": selection.unreviewed,
                "eligible": len(selection.delta),
                "alone": len(selection.alone),
                "backlog": selection.backlog,
            }
        )
        if not selection.delta:
            _stamp_reviewed(memories, selection.alone)
            report.stamp = _completion_stamp(memories)
            if not selection.alone:
                return report.skip("no new or changed entry: no call")
            # Reviewed by the host's rules: a run that did its work, with no question for the model.
            report.counts["live"] = memories.counts()["live"]
            report.summary = (
                f"contradiction sweep — live {int(report.counts['live'])}, {len(selection.alone)} new or changed "
                "reviewed without a call: none has a live entry it could contradict"
            )
            report.info(report.summary)
            return report
        report.info(
            f"{len(selection.delta)} new or changed entr{'y' if len(selection.delta) == 1 else 'ies'} shown with "
            f"{len(selection.shown) - len(selection.delta)} live entries they could contradict"
            + (
                f"; {len(selection.alone)} could contradict none and are reviewed without a call"
                if selection.alone
                else ""
            )
            + (f"; {selection.backlog} more wait for the next run" if selection.backlog else "")
        )
        prompt = render_prompt(selection, ctx.now)
        report.counts["prompt_chars"] = len(prompt)
        response = call_model(
            ctx,
            report,
            SPEC.model_call,
            prompt,
            {
                "entries": [_entry_input(e) for e in selection.shown.values()],
                "pairs": [[d, n] for d, ns in selection.neighbours.items() for n in ns],
            },
            shrinkable=len(selection.delta) > 1,
        )
        if response is not CONTEXT_EXCEEDED:
            break
        report.count("context_exceeded_retries")
        max_entries = max(1, len(selection.delta) // 2)
        report.info(f"the prompt does not fit the model's window; showing at most {max_entries} entries")
    if response is None:
        return report  # failed or deferred: nothing applied, nothing stamped
    assert isinstance(response, ContradictionSweepResponse)
    live_ids = {e.id for e in live}
    # The entries this run reviewed: those shown, and those found to have no entry they could contradict.
    reviewed = len(selection.shown) + len(selection.alone)
    bound = superseded_bound(reviewed, section.max_superseded_share)
    proposals, unusable, copied = _checked_reasons(report, response, CopyGuard.for_call(ctx, SPEC.model_call))
    verdicts = unusable + judge(
        proposals,
        selection.shown,
        live_ids,
        offered=offered_pairs(selection.neighbours),
        vocab=vocab,
        max_superseded=bound,
        scope=scopes.of_entry,
    )
    over = sum(1 for v in verdicts if not v.accepted and v.why.startswith("over the bound"))
    report.counts["cross_scope"] = sum(1 for v in verdicts if not v.accepted and v.why.startswith("across scopes"))
    report.counts["over_bound"] = over
    if over:
        report.warn(
            f"the answer proposed {over} supersession(s) more than one answer may apply ({bound} of "
            f"{reviewed} entries reviewed, ContradictionSweepMaxSupersededShare="
            f"{section.max_superseded_share:g}): refused, those entries stay live"
        )
    # The answer and the review stamps commit together: a kill or an error before the commit leaves neither (the
    # entries are shown again next run), never stamps without the answer. The stamps come first inside the
    # transaction so that each change row's "before" carries them: an undo restores the reviewed entries, and an
    # undone pair is not proposed again until one of its entries changes.
    # The entries of a pair whose reason was copied are not stamped reviewed: the next run shows them again.
    with ctx.store.transaction():
        _stamp_reviewed(memories, [e for e in [*selection.delta, *selection.alone] if e.id not in copied])
        _apply(ctx, report, selection, verdicts)
    report.counts["live"] = memories.counts()["live"]
    summary = (
        f"contradiction sweep — live {int(report.counts['live'])}, shown {len(selection.delta)} new or changed, "
        f"superseded {int(report.counts['superseded'])}, refused {int(report.counts['refused'])}, "
        f"ignored {int(report.counts['ignored'])}, waiting {int(report.counts['waiting'])}"
        + (f" ({int(report.counts['over_bound'])} refused over the bound)" if report.counts["over_bound"] else "")
    )
    # what applied stays applied; a copy is not stamped, so the next run asks again
    return CopyGuard.finish(report, summary, special=lambda: _completion_stamp(memories))


def _completion_stamp(memories: MemoryStore) -> str:
    """What a run that got this far records: the data version, or its backlog stamp while any live entry still waits
    for review (the backlog past this call, or an entry saved while the call ran)."""
    version = memories.fingerprint()  # read before the corpus: an entry saved in between is counted as waiting
    waiting = sum(1 for e in memories.list_live() if needs_review(e))
    return backlog_stamp(version, waiting) if waiting else version


def _stamp_reviewed(memories: MemoryStore, entries: Sequence[MemoryEntry]) -> None:
    memories.set_metadata({e.id: {REVIEWED_KEY: review_hash(e)} for e in entries})


def _checked_reasons(
    report: PassReport, response: ContradictionSweepResponse, guard: CopyGuard | None = None
) -> tuple[list[tuple[str, str, str]], list[Verdict], set[str]]:
    """The answer's pairs with reasons that may be stored, a refused verdict for each pair whose reason may not
    (model text: a lone surrogate or a control character such as an ANSI escape refuses the pair; a reason longer
    than ``MAX_REASON_CHARS`` is cut, with a note), and the ids of the pairs whose reason is a placeholder or the
    directive's example (refused by ``guard``, counted as ``copied``: the model copied instead of judging)."""
    proposals: list[tuple[str, str, str]] = []
    unusable: list[Verdict] = []
    copied: set[str] = set()
    guard = guard or CopyGuard(frozenset())
    for i, s in enumerate(response.supersessions):
        reason = s.reason if isinstance(s.reason, str) and s.reason != NOT_TEXT else ""
        field_name = f"supersessions[{i}].reason"
        bad = problem(reason, "text", field=field_name, max_chars=len(reason) + 1)
        if bad:
            unusable.append(Verdict(str(s.winner_id or ""), str(s.loser_id or ""), False, bad))
            continue
        pair = f"supersession {shown(s.winner_id, 40)} > {shown(s.loser_id, 40)}"
        if reason.strip() and guard.refuse(report, reason, field="reason", target=pair):
            copied.update(x for x in (s.winner_id, s.loser_id) if isinstance(x, str))
            continue
        if len(reason) > MAX_REASON_CHARS:
            report.warn(f"{field_name} is {len(reason)} characters: cut to {MAX_REASON_CHARS}")
            report.count("reasons_cut")
            reason = reason[: MAX_REASON_CHARS - 1] + "…"
        proposals.append((s.winner_id, s.loser_id, reason))
    return proposals, unusable, copied


def _apply(ctx: PassContext, report: PassReport, selection: Selection, verdicts: Sequence[Verdict]) -> None:
    memories = ctx.store.memories
    for v in verdicts:
        label = f"{shown(v.winner_id, 40) if v.winner_id else '∅'} > {shown(v.loser_id, 40) if v.loser_id else '∅'}"
        if not v.accepted:
            kind = "refused" if v.why.startswith(_REFUSALS) else "ignored"
            report.count(kind)
            report.change("supersession-rejected", label, f"{kind}: {v.why}")
            report.info(f"supersession {label} {kind}: {v.why}")
            continue
        shown_w, shown_l = selection.shown[v.winner_id], selection.shown[v.loser_id]
        try:
            with ctx.store.transaction():
                winner, loser = memories.get(v.winner_id), memories.get(v.loser_id)
                if winner is None or loser is None or winner.is_archived or loser.is_archived:
                    raise _Waits("an entry of the pair is no longer live (an earlier pair of this answer archived it)")
                if (winner.content, loser.content) != (shown_w.content, shown_l.content):
                    raise _Waits("an entry of the pair changed since it was shown")
                why = v.reason.strip() or v.why
                (l_before, l_after), (w_before, w_after) = memories.supersede(
                    loser.id, winner.id, now=ctx.now, reason=why
                )
                ctx.record(
                    PASS,
                    "archived",
                    l_after,
                    before=l_before,
                    after=l_after,
                    reason=f"superseded by {winner.id}: {why}",
                    successor_id=winner.id,
                    successor_how=SuccessorHow.SUPERSEDED_BY,
                )
                ctx.record(
                    PASS, "updated", w_after, before=w_before, after=w_after, reason=f"supersedes {loser.id}: {why}"
                )
        except (_Waits, ContentError, NotFound) as exc:
            report.count("waiting")
            report.change("supersession-waiting", label, str(exc))
            report.info(f"supersession {label} waits: {exc}")
            continue
        report.count("superseded")
        report.change(
            "archived", loser.id, f"superseded by {winner.id}: {_short(loser.content)} → {_short(winner.content)}"
        )


class _Waits(Exception):
    pass


def _short(text: str, limit: int = 80) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


@dataclass(frozen=True, kw_only=True)
class ContradictionSweepOptions(PassOptions):
    """The options section of this pass (``[passes.contradiction_sweep]``)."""

    PASS: ClassVar[str] = "contradiction_sweep"

    enabled: bool = pass_option(
        True, "contradiction sweep: a later fact supersedes the stale one", alias="ContradictionSweepEnabled"
    )
    model: str = pass_option("", "model for contradiction sweep; empty = LlmModel", alias="ContradictionSweepModel")
    base_url: str = pass_option(
        "", "endpoint for contradiction sweep; empty = LlmBaseUrl", url=True, alias="ContradictionSweepBaseUrl"
    )
    api_key_env: str = pass_option(
        "", "API key variable for contradiction sweep; empty = LlmApiKeyEnv", alias="ContradictionSweepApiKeyEnv"
    )
    apply_mode: str = pass_option(
        "",
        "ApplyMode of contradiction sweep; empty = ApplyMode",
        choices=("", "auto", "review", "review-risky"),
        alias="ContradictionSweepApplyMode",
    )
    directive: str = pass_option(
        "contradiction-sweep.md", "contradiction sweep directive", alias="ContradictionSweepDirectivePath"
    )
    neighbours: int = pass_option(
        4,
        "live entries most similar to a new or changed entry shown next to it",
        minimum=1,
        alias="ContradictionSweepNeighbours",
    )
    max_entries_per_call: int = pass_option(
        500,
        "new or changed entries shown in one sweep call; the rest wait for the next run",
        minimum=1,
        alias="ContradictionSweepMaxEntriesPerCall",
    )
    max_superseded_share: float = pass_option(
        0.25,
        "most of the entries one sweep run reviews (those shown, and those found to have no entry they could "
        "contradict) that its answer may supersede (at least one); the rest are refused and the report says so",
        minimum=0.0,
        maximum=1.0,
        alias="ContradictionSweepMaxSupersededShare",
    )


SPEC = PassSpec(
    name=PASS,
    group="memory",
    description="Contradiction sweep — archives a memory a later fact makes stale, as superseded.\n\nShows the model "
    "new or changed memories next to the live memories most similar to them and applies the pairs where one supersedes "
    "the other: the loser is archived with supersededBy (the winner carries supersedes), a user correction is never "
    "superseded by an agent's claim, an entry about a later moment never loses to an earlier one. Skipped when the "
    "corpus has not changed (change gate). Every change can be undone per cycle.",
    body=sweep_contradictions,
    options=ContradictionSweepOptions,
    after=("memory_consolidation",),
    reads=("memory_corpus",),
    gate="memory_corpus",
    model_call=ModelCall(
        name=PASS,
        contract=ContradictionSweepResponse,
        directive_file="contradiction-sweep.md",
        directive_option="ContradictionSweepDirectivePath",
        offline=needs_judgement({"supersessions": []}),
    ),
)


def run_contradiction_sweep(ctx: PassContext) -> PassReport:
    """The pass with its shared opening, change gate and ledger stamp (runner.attempt: no lock, no review mode, no
    recorded outcome)."""
    from dream_assets.passes.runner import attempt

    return attempt(SPEC, ctx)
