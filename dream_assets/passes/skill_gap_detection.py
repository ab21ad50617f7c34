"""Pass 2 — Skill gap detection: skills for request types that recur across sessions and have no skill yet.

Spec "Pass 2": the input is the conversation log grouped by session plus the skill catalog. The first user message
of each session is tokenized and cross-session term frequencies are computed; terms found in 2+ sessions are shown to
the model as the "Recurring topics across sessions" block. A skill is created only when the same type of request
appears in 2+ sessions.

That last rule is enforced in code, not only in the directive. A proposed skill is accepted only when the first user
messages of at least two sessions share a recurring term with the proposal: its name (split on ``/``, ``-``, ``_``),
summary or content must contain a term that itself occurs in the first user messages of two or more sessions. Terms are
compared after lower-casing, dropping stopwords and request filler ("please", "help", ...), and folding a plural ``s``
("emails" = "email"). A proposal that no recurring term connects to is a one-session anecdote, and is rejected.

The pass never overwrites: a proposed name that exists in the catalog, live or archived, is skipped (merging is skill
consolidation's job, which runs next). It is delta-driven — it reads the conversation log, which preference inference
clears at the end of the cycle, so an idle agent costs nothing; on top of that the change gate keeps a log that was
not cleared (preference inference disabled or failed) from being sent twice. This pass does not clear the log.

Because the log is cleared even when this pass's call failed, a failed or deferred run leaves the span of turns it
did not process in the pass ledger, and the next run reads them back from the log warehouse together with the new
turns (``passes.conversation_input``; given up after 7 days). Each created skill and its change-log row are one
store transaction.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Generator, Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, ClassVar

from pydantic import Field

from dream_assets.llm.contracts import Contract, ModelCall
from dream_assets.llm.offline import needs_judgement
from dream_assets.llm.prompts import sessions_section
from dream_assets.model import Skill
from dream_assets.names import InvalidName, validate_skill_name
from dream_assets.options import DreamOptions, PassOptions, pass_option
from dream_assets.passes.common import CopyGuard, call_model_batched
from dream_assets.passes.context import PassContext
from dream_assets.passes.conversation_input import ConversationInput, gather, settle
from dream_assets.passes.model_text import shown as shown_text
from dream_assets.passes.report import AboutToCall, PassReport
from dream_assets.passes.skill_signals import note_malformed
from dream_assets.passes.skill_vocabulary import SkillGapSave, skill_catalog, skill_save_problem
from dream_assets.passes.spec import HistoryAnalysis, PassSpec
from dream_assets.profile import AgentProfile
from dream_assets.store.log_records import CONVERSATION, ConversationTurn
from dream_assets.store.logs import conversation_by_session, log_exists, read_archived
from dream_assets.store.skills import SkillError
from dream_assets.text.content_hash import stable_hash
from dream_assets.text.tokens import STOPWORDS, category_tokens, tokenize

PASS = "skill_gap_detection"
MIN_SESSIONS = 2

#: Words of how people ask rather than what they ask for; as recurring "topics" they would connect any proposal to
#: any pair of sessions.
REQUEST_FILLER: frozenset[str] = frozenset(
    """
    please pls thanks thank thx hi hello hey ok okay yes yeah sure
    need want like help make get let know tell give show find do
    something anything everything thing stuff one
    now today tonight tomorrow yesterday soon quickly again
    """.split()
)


# --- the model call: response contract, prompt, offline answer --------------------------------------------------------
RECURRING_TOPICS_HEADER = "Recurring topics across sessions (term frequency ≥ 2 sessions):"


class SkillGapResponse(Contract):
    to_save: list[SkillGapSave] = Field(default_factory=list, alias="toSave")


def render_skill_gap(
    sessions: Mapping[str, Sequence[Mapping[str, Any]]],
    skills: Sequence[Skill],
    recurring_terms: Sequence[tuple[str, int]],
) -> str:
    lines = sessions_section(sessions) + [""] + skill_catalog(skills)
    terms = sorted(((str(t), int(n)) for t, n in recurring_terms), key=lambda p: (-p[1], p[0]))
    if terms:  # spec, pass 2: the quantitative nudge, in exactly this form
        lines += ["", RECURRING_TOPICS_HEADER] + [f'- "{t}": {n} session(s)' for t, n in terms]
    return "\n".join(lines) + "\n"


# --- terms ---------------------------------------------------------------------------------------------------------
def term_key(token: str) -> str:
    """A token with a plural ``s`` folded, so "emails" and "email" are one term."""
    if len(token) > 4 and token.endswith("ies"):
        return token[:-3] + "y"
    if len(token) > 3 and token.endswith("s") and not token.endswith(("ss", "us", "is")):
        return token[:-1]
    return token


def _keep(token: str) -> bool:
    return len(token) > 1 and not token.isdigit() and token not in STOPWORDS and token not in REQUEST_FILLER


def message_terms(text: str) -> dict[str, str]:
    """Term key -> the first surface form it had in ``text``."""
    out: dict[str, str] = {}
    for token in tokenize(text):
        if _keep(token):
            out.setdefault(term_key(token), token)
    return out


def proposal_terms(name: str, summary: str, content: str) -> set[str]:
    """Term keys of a proposed skill: name segments (``summarize-emails`` -> summarize, email), summary, content."""
    tokens = category_tokens(name) + tokenize(summary) + tokenize(content)
    return {term_key(t) for t in tokens if _keep(t)}


@dataclass(frozen=True)
class RecurringTerm:
    term: str  # what the prompt shows: the most frequent surface form
    key: str  # what matching uses
    sessions: tuple[str, ...]  # sessions whose first user message contains it, sorted


def first_user_messages(sessions: Mapping[str, Sequence[ConversationTurn]]) -> dict[str, str]:
    """Session id -> its first user message (by time). Sessions without a user turn have none."""
    out: dict[str, str] = {}
    for sid, turns in sessions.items():
        users = sorted((t for t in turns if t.role == "user" and t.content.strip()), key=lambda t: t.timestamp)
        if users:
            out[sid] = users[0].content
    return out


def recurring_terms(first_messages: Mapping[str, str], *, min_sessions: int = MIN_SESSIONS) -> list[RecurringTerm]:
    """Terms of the first user messages found in ``min_sessions`` or more sessions, most sessions first."""
    sessions_of: dict[str, set[str]] = {}
    surfaces: dict[str, Counter[str]] = {}
    for sid, text in first_messages.items():
        for key, surface in message_terms(text).items():
            sessions_of.setdefault(key, set()).add(sid)
            surfaces.setdefault(key, Counter())[surface] += 1
    out = []
    for key, sids in sessions_of.items():
        if len(sids) >= min_sessions:
            term = min(surfaces[key].items(), key=lambda kv: (-kv[1], len(kv[0]), kv[0]))[0]
            out.append(RecurringTerm(term, key, tuple(sorted(sids))))
    return sorted(out, key=lambda t: (-len(t.sessions), t.term))


def evidence(proposal: SkillGapSave, recurring: Iterable[RecurringTerm]) -> tuple[list[str], list[str]]:
    """The recurring terms a proposal shares, and the sessions whose first user message holds one of them."""
    keys = proposal_terms(proposal.name, proposal.summary, proposal.content)
    matched = [t for t in recurring if t.key in keys]
    sessions = sorted({s for t in matched for s in t.sessions})
    return [t.term for t in matched], sessions


# --- the pass ------------------------------------------------------------------------------------------------------
def no_conversation_log(ctx: PassContext) -> str | None:
    """No conversation log and no turns left pending from an earlier run: nothing to read."""
    if log_exists(ctx.profile, CONVERSATION) or ctx.ledger.pending(PASS) is not None:
        return None
    return (
        "no conversation log (conversation-log.jsonl) — the agent does not record conversations, "
        "so there are no sessions to find recurring requests in"
    )


def detect_skill_gaps(ctx: PassContext) -> Generator[AboutToCall, bool, PassReport]:
    """The pass, after the shared opening (enabled, conversation log present: runner.opening); gated on what it sends
    (``question``'s fingerprint) and stamped with it once the answer was applied."""
    report = PassReport(PASS)
    _, read = conversation_by_session(ctx.profile)
    note_malformed(report, CONVERSATION, read)
    given = ConversationInput()
    raised = True
    try:
        given = gather(ctx, PASS, read.events, report)
        yield from _detect(ctx, report, given.sessions)
        raised = False
    finally:
        settle(ctx, PASS, given, report, raised=raised)
    return report


def run_skill_gap_detection(ctx: PassContext) -> PassReport:
    """The pass with its shared opening, change gate and ledger stamp (runner.attempt: no lock, no review mode, no
    recorded outcome)."""
    from dream_assets.passes.runner import attempt

    return attempt(SPEC, ctx)


@dataclass
class Question:
    """What one run would ask the model, or why it asks nothing (``skip``)."""

    sessions: dict[str, list[ConversationTurn]]
    firsts: dict[str, str]
    recurring: list[RecurringTerm]
    skip: str | None = None
    catalog: list[Skill] | None = None
    live: list[Skill] | None = None
    session_json: dict[str, list[dict[str, Any]]] | None = None
    terms: list[tuple[str, int]] | None = None
    fingerprint: str = ""


def question(ctx: PassContext, sessions: dict[str, list[ConversationTurn]]) -> Question:
    """What the pass would send for ``sessions`` (read-only): the recurring request types with the sessions and the
    live catalog, fingerprinted as rendered, or why nothing is sent."""
    firsts = first_user_messages(sessions)
    recurring = recurring_terms(firsts)
    asked = Question(sessions, firsts, recurring)
    if not sessions:
        asked.skip = "conversation log is empty: no new conversations since it was last cleared"
    elif len(firsts) < MIN_SESSIONS:
        asked.skip = (
            f"{len(firsts)} session(s) with a user request: a skill needs the same request type in "
            f"{MIN_SESSIONS}+ sessions"
        )
    elif not recurring:
        asked.skip = (
            f"no term of a first user message recurs across the {len(firsts)} sessions: no request "
            f"type was seen in {MIN_SESSIONS}+ sessions"
        )
    if asked.skip is not None:
        return asked
    asked.catalog = ctx.store.skills.list(include_archived=True)
    asked.live = [s for s in asked.catalog if not s.is_archived]
    asked.session_json = {sid: [t.to_json() for t in turns] for sid, turns in sessions.items()}
    asked.terms = [(t.term, len(t.sessions)) for t in recurring]
    # What is sent: the rendered sessions, catalog and recurring-topics block.
    asked.fingerprint = stable_hash(PASS, render_skill_gap(asked.session_json, asked.live, asked.terms))
    return asked


def input_fingerprint(ctx: PassContext) -> str | None:
    """The change-gate fingerprint of what the pass would send now (the sensor's view: read-only, the conversation
    log with the turns an earlier run left pending), or None when it would send nothing."""
    _, read = conversation_by_session(ctx.profile)
    asked = question(ctx, gather(ctx, PASS, read.events, PassReport(PASS)).sessions)
    return None if asked.skip is not None else asked.fingerprint


def _detect(
    ctx: PassContext, report: PassReport, sessions: dict[str, list[ConversationTurn]]
) -> Generator[AboutToCall, bool, PassReport]:
    asked = question(ctx, sessions)
    firsts, recurring = asked.firsts, asked.recurring
    if sessions:
        report.counts.update(
            {"sessions": len(sessions), "sessions_with_request": len(firsts), "recurring_terms": len(recurring)}
        )
    if asked.skip is not None:
        return report.skip(asked.skip)
    assert asked.catalog is not None and asked.live is not None
    assert asked.session_json is not None and asked.terms is not None
    catalog, live, session_json, terms = asked.catalog, asked.live, asked.session_json, asked.terms
    if not (yield AboutToCall(asked.fingerprint, report)):
        return report

    def render(ids):
        shown = {sid: session_json[sid] for sid in ids}
        inputs = {"sessions": shown, "skills": [s.name for s in live], "recurring_terms": [[t, n] for t, n in terms]}
        return render_skill_gap(shown, live, terms), inputs

    response = call_model_batched(ctx, report, SPEC.model_call, list(session_json), render, what="sessions")
    if response is None:
        return report

    existing = {s.name for s in catalog}
    created = 0
    guard = CopyGuard.for_call(ctx, SPEC.model_call)
    for index, proposal in enumerate(response.to_save):
        if _apply_proposal(ctx, report, proposal, index, existing, recurring, guard):
            created += 1
            existing.add(proposal.name)
    report.counts["created"] = created
    rejected = len(response.to_save) - created
    summary = (
        f"{created} skill(s) created from {len(firsts)} sessions "
        f"({len(recurring)} recurring terms); {rejected} proposal(s) not applied"
    )
    return CopyGuard.finish(report, summary)


def _apply_proposal(
    ctx: PassContext,
    report: PassReport,
    proposal: SkillGapSave,
    index: int,
    existing: set[str],
    recurring: Sequence[RecurringTerm],
    guard: CopyGuard,
) -> bool:
    name = proposal.name
    try:
        validate_skill_name(name)
    except InvalidName as exc:
        report.count("rejected_invalid_name")
        report.change("rejected", str(name), f"invalid name: {exc}")
        report.warn(f"proposed skill skipped: {exc} — a skill name is a relative path such as email/summarize-inbox")
        return False
    if name in existing:
        report.count("skipped_existing")
        report.change("skipped", name, "a skill of this name exists (live or archived); never overwritten here")
        report.info(
            f"proposed skill {name!r} skipped: the name exists in the catalog (live or archived) and gap "
            "detection never overwrites; skill consolidation merges overlapping skills"
        )
        return False
    if not proposal.content.strip():
        report.count("rejected_empty")
        report.warn(f"proposed skill {name!r} skipped: field 'content' is empty")
        return False
    bad = skill_save_problem(proposal, index)
    if bad:  # a lone surrogate, a control character, an over-long text: rejected before anything is written
        report.count("rejected_invalid_text")
        report.change("rejected", shown_text(name), bad)
        report.warn(f"proposed skill {shown_text(name)} skipped: {bad}")
        return False
    if guard.refuse(report, proposal.content, field=f"toSave[{index}].content", target=f"proposed skill {name!r}"):
        return False
    terms, sessions = evidence(proposal, recurring)
    if len(sessions) < MIN_SESSIONS:
        report.count("rejected_single_session")
        report.change("rejected", name, "request type not seen in 2+ sessions")
        report.info(
            f"proposed skill {name!r} rejected: it shares no term with the first request of {MIN_SESSIONS}+ "
            "sessions (a skill is created only for a request type seen in 2+ sessions)"
        )
        return False
    skill = Skill(
        name=name,
        summary=proposal.summary.strip(),
        content=proposal.content,
        created_at=ctx.now,
        updated_at=ctx.now,
    )
    shown = ", ".join(sessions[:5]) + (f" and {len(sessions) - 5} more" if len(sessions) > 5 else "")
    reason = f"recurring request in {len(sessions)} sessions ({shown}); shared terms: {', '.join(terms[:8])}"
    try:
        with ctx.store.transaction():  # the skill and its change-log row, or neither
            saved = ctx.store.skills.put(skill)  # insert only: a name created meanwhile is not overwritten
            ctx.record(PASS, "created", saved, before=None, after=saved, reason=reason)
    except (SkillError, InvalidName) as exc:
        report.count("rejected_invalid")
        report.warn(f"proposed skill {name!r} skipped: {exc}")
        return False
    report.change("skill-created", name, f"{saved.summary} — {reason}")
    report.info(f"created skill {name}: {reason}")
    return True


def recurring_requests(profile: AgentProfile, options: DreamOptions, end: datetime) -> list[dict[str, Any]]:
    """History: skill-gap and preference mining over archived conversations — terms of the first user message per
    session that recur in >= 2 sessions of the window ending at ``end`` (the spec's "Recurring topics" signal, as this
    pass computes it), with the sessions they came from."""
    first: dict[str, str] = {}
    for turn in read_archived(profile, CONVERSATION, end - options.SkillUsageWindow, end).events:
        if turn.role == "user" and turn.session_id not in first:
            first[turn.session_id] = turn.content
    return [
        {"term": t.term, "sessions": len(t.sessions), "session_ids": json.dumps(list(t.sessions))}
        for t in recurring_terms(first)
    ]


@dataclass(frozen=True, kw_only=True)
class SkillGapDetectionOptions(PassOptions):
    """The options section of this pass (``[passes.skill_gap_detection]``)."""

    PASS: ClassVar[str] = "skill_gap_detection"

    enabled: bool = pass_option(True, "pass 2: skill gap detection", alias="SkillGapEnabled")
    model: str = pass_option("", "model for skill gap detection; empty = LlmModel", alias="SkillGapDetectionModel")
    base_url: str = pass_option(
        "", "endpoint for skill gap detection; empty = LlmBaseUrl", url=True, alias="SkillGapDetectionBaseUrl"
    )
    api_key_env: str = pass_option(
        "", "API key variable for skill gap detection; empty = LlmApiKeyEnv", alias="SkillGapDetectionApiKeyEnv"
    )
    apply_mode: str = pass_option(
        "",
        "ApplyMode of skill gap detection; empty = ApplyMode",
        choices=("", "auto", "review", "review-risky"),
        alias="SkillGapDetectionApplyMode",
    )
    directive: str = pass_option("skill-gap.md", "skill gap detection directive", alias="SkillGapDirectivePath")


SPEC = PassSpec(
    name=PASS,
    group="skills",
    description="Skill gap detection — creates skills for requests that recur without one.\n\nPass 2. Finds request "
    "types that recur across at least two conversation sessions and have no skill yet, and creates skills for them "
    "(never overwriting an existing name).",
    body=detect_skill_gaps,
    options=SkillGapDetectionOptions,
    after=("log_retention",),
    reads=("conversation_log", "skill_catalog"),
    missing_input=no_conversation_log,
    gate="conversation_log",
    fingerprint=input_fingerprint,
    model_call=ModelCall(
        name=PASS,
        contract=SkillGapResponse,
        directive_file="skill-gap.md",
        directive_option="SkillGapDirectivePath",
        offline=needs_judgement({"toSave": []}),
    ),
    history=HistoryAnalysis("recurring_request_history", recurring_requests),
)
