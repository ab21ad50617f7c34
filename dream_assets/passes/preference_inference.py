"""Pass 5 — Preference inference: durable user preferences from the conversation log and recent feedback.

Spec "Pass 5 — Preference inference":
- Input: the full conversation log grouped by session, plus feedback signals of the last ``FeedbackWindow`` (7 days,
  newest ``FeedbackMaxSignals`` shown). The sentiment thresholds (very irritated: 1 occurrence, mildly frustrated: 2,
  casual: 3+) are applied by the model and stated in the directive ``pref-dream.md``.
- Output: long-term memories with category ``user-preferences/inferred`` and tag ``inferred``. The host forces both,
  whatever the model wrote, and saves through save-time dedup, so a preference seen again reinforces its memory.
- ``metadata["requires_user_permission"] = "true"`` for preferences touching security, credentials or financial
  decisions. The host sets it when the model does *or* when :func:`sensitive_terms` finds such a term in the content
  (DESIGN principle 4: safety is enforced in code, not in prompts), so a model that forgets the flag cannot drop it.
- ``toDelete`` is ignored: this pass only adds (a warning says so).
- The conversation log is cleared after the pass whether the call succeeded, failed or was deferred ("always cleared
  ... regardless of LLM success or failure, to prevent unbounded growth"); its lines are copied into the log
  warehouse first, so nothing is lost and backfills can still read them. Only the lines this pass read are
  removed: a turn the agent appends while the model is thinking stays for the next cycle.
- A failed or deferred call is retried next cycle over the same turns: the pass ledger keeps the span of turns not
  processed, and the next run reads them back from the warehouse with the new turns of the log
  (``passes.conversation_input``; given up after 7 days). Each saved preference and its change-log row are one
  store transaction.

Host classifier (:data:`SENSITIVE_PATTERNS`), case-insensitive, word-bounded:

=============  ===============================================================================================
credentials    password / passphrase / passcode, PIN, credential(s), token(s), API key, secret(s), private key,
               SSH key, keychain, vault, recovery code, login / log in / sign in, SSO
security       security, 2FA / MFA / two-factor / multi-factor, OTP / one-time code, authenticator,
               authentication, encrypt / decrypt, permission(s) / access rights
financial      bank / banking, IBAN, SWIFT, routing or account number, credit or debit card, card number, CVV,
               payment(s), PayPal, payroll, wire / bank / money transfer or transferring money or funds,
               invoice approval (approve ... invoice, invoice ... approval), budget approval, purchase /
               purchasing, buy / buying, invest / investment, stock(s) / shares / crypto / bitcoin, trading,
               loan, mortgage, tax(es), refund, wallet, spending limit, financial / finances
=============  ===============================================================================================

A false positive costs one confirmation question; a false negative lets the agent act on a security or money
preference unasked, so the list leans wide.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

from dream_assets.llm.contracts import ModelCall
from dream_assets.llm.offline import needs_judgement
from dream_assets.llm.prompts import feedback_section, sessions_section
from dream_assets.options import PassOptions, pass_option
from dream_assets.passes.common import CopyGuard, call_model_batched, note_malformed
from dream_assets.passes.context import PassContext
from dream_assets.passes.conversation_input import ConversationInput, gather, settle
from dream_assets.passes.memory_vocabulary import MemoryChanges, save_memory_recorded
from dream_assets.passes.model_text import problem, shown
from dream_assets.passes.report import PassReport
from dream_assets.passes.spec import PassSpec
from dream_assets.profile import AgentProfile
from dream_assets.store.locks import path_lock
from dream_assets.store.log_bytes import file_identity, find_cut_offset
from dream_assets.store.log_records import CONVERSATION, ConversationTurn
from dream_assets.store.logs import (
    ConversationLogChanged,
    LogRead,
    clear_conversation_log,
    conversation_by_session,
    log_exists,
    read_events,
)
from dream_assets.store.memory import ContentError
from dream_assets.store.standing import without_standing_tags

PASS = "preference_inference"
CATEGORY = "user-preferences/inferred"
TAG = "inferred"
PERMISSION_KEY = "requires_user_permission"
# Spec silent on the importance of an inferred preference: a little above the store default (0.5), because a
# preference that passed its sentiment threshold is something the user asked for, not an incidental fact.
INFERRED_IMPORTANCE = 0.6

_TRUE = {"true", "yes", "1", "y"}

#: (area, label, pattern) — see the module docstring for the documented list.
SENSITIVE_PATTERNS: tuple[tuple[str, str, re.Pattern[str]], ...] = tuple(
    (area, label, re.compile(pattern, re.IGNORECASE))
    for area, label, pattern in (
        ("credentials", "password", r"pass(?:word|phrase|code)s?"),
        ("credentials", "PIN", r"(?-i:\bPINs?\b)|\bpin (?:code|number)s?\b"),
        ("credentials", "credential", r"\bcredentials?\b"),
        ("credentials", "token", r"\btokens?\b"),
        ("credentials", "API key", r"\bapi[ _-]?keys?\b"),
        ("credentials", "secret", r"\bsecrets?\b"),
        ("credentials", "private key", r"\b(?:private|ssh|gpg|pgp) keys?\b"),
        ("credentials", "keychain", r"\bkeychains?\b|\bvaults?\b"),
        ("credentials", "recovery code", r"\brecovery (?:codes?|keys?|phrases?)\b"),
        ("credentials", "login", r"\blog-?ins?\b|\blog(?:ging)? in\b|\bsign(?:ing)?[ -]in\b|\bsso\b"),
        ("security", "security", r"\bsecurity\b"),
        ("security", "2FA", r"\b[2m]fa\b|\btwo[ -]factor\b|\bmulti[ -]factor\b"),
        ("security", "one-time code", r"\botps?\b|\bone[ -]time (?:code|password|pin)s?\b"),
        ("security", "authentication", r"\bauthenticat\w*"),
        ("security", "encryption", r"\b(?:en|de)crypt\w*"),
        ("security", "permissions", r"\bpermissions?\b|\baccess rights?\b"),
        ("financial", "bank", r"\bbank(?:s|ing)?\b"),
        ("financial", "account number", r"\biban\b|\bswift\b|\b(?:routing|account|sort) (?:number|code)s?\b"),
        ("financial", "card", r"\b(?:credit|debit|bank) cards?\b|\bcard numbers?\b|\bcvv\b"),
        ("financial", "payment", r"\bpayments?\b|\bpaypal\b|\bpayroll\b"),
        (
            "financial",
            "transfer",
            r"\b(?:wire|bank|money|fund|funds|cash) transfers?\b"
            r"|\btransfer(?:s|red|ring)? (?:of )?(?:money|funds|cash|[$€£])",
        ),
        (
            "financial",
            "invoice approval",
            r"\bapprov\w*\b.{0,40}\binvoices?\b|\binvoices?\b.{0,40}\bapprov\w*",
        ),
        ("financial", "budget approval", r"\bapprov\w*\b.{0,40}\bbudgets?\b|\bbudgets?\b.{0,40}\bapprov\w*"),
        ("financial", "purchase", r"\bpurchas\w*|\bbuy(?:s|ing)?\b"),
        (
            "financial",
            "investment",
            r"\binvest\w*|\bstocks?\b|\bshares\b|\bcrypto\w*|\bbitcoin\b|\btrading\b",
        ),
        ("financial", "loan", r"\bloans?\b|\bmortgages?\b"),
        ("financial", "tax", r"\btax(?:es)?\b|\brefunds?\b"),
        ("financial", "wallet", r"\bwallets?\b|\bspending limits?\b"),
        ("financial", "finances", r"\bfinanc(?:e|es|ial|ially)\b"),
    )
)


# --- the model call: response contract, prompt, offline answer --------------------------------------------------------
class PreferenceInferenceResponse(MemoryChanges):
    """Same shape as memory consolidation (spec: "Memory consolidation / preference inference")."""


def render_preference_inference(
    sessions: Mapping[str, Sequence[Mapping[str, Any]]], feedback: Sequence[Mapping[str, Any]]
) -> str:
    lines = sessions_section(sessions) + [""] + feedback_section(feedback, "Recent feedback signals")
    return "\n".join(lines) + "\n"


def sensitive_terms(text: str) -> list[str]:
    """Labels of the security, credential or financial terms in ``text`` (empty when none), in list order."""
    return [label for _, label, pattern in SENSITIVE_PATTERNS if pattern.search(text)]


# --- the pass ----------------------------------------------------------------------------------------------------


def no_conversation_log(ctx: PassContext) -> str | None:
    """No conversation log and no turns left pending from an earlier run: nothing to infer from."""
    if log_exists(ctx.profile, CONVERSATION) or ctx.ledger.pending(PASS) is not None:
        return None
    return f"no conversation log ({ctx.profile.conversation_log_path.name} is absent): nothing to infer from"


def infer_preferences(ctx: PassContext) -> PassReport:
    """The pass, after the shared opening (enabled, conversation log present: runner.opening)."""
    report = PassReport(PASS)
    snapshot = _read_conversation(ctx.profile)
    if snapshot.read.malformed:
        report.count("malformed_conversation_lines", snapshot.read.malformed)
        report.warn(
            f"conversation log: {snapshot.read.malformed} unreadable line(s) skipped (they are kept in the "
            f"log warehouse): {'; '.join(snapshot.read.problems[:5])}"
        )
    given = ConversationInput()
    raised = True
    try:
        given = gather(ctx, PASS, snapshot.read.events, report)
        if not given.sessions:
            if snapshot.cut == 0:
                report.skip("the conversation log is empty: no call")
            else:
                report.skip("the conversation log has no readable turns: no call")
        else:
            _infer(ctx, report, given)
        raised = False
    finally:
        # Pending turns are recorded before the log is cleared: a stop in between leaves them in both places.
        settle(ctx, PASS, given, report, raised=raised)
        _clear(ctx, report, snapshot)
    return report


def run_preference_inference(ctx: PassContext) -> PassReport:
    """The pass with its shared opening, change gate and ledger stamp (runner.attempt: no lock, no review mode, no
    recorded outcome)."""
    from dream_assets.passes.runner import attempt

    return attempt(SPEC, ctx)


def _infer(ctx: PassContext, report: PassReport, given: ConversationInput) -> None:
    sessions = {sid: [t.to_json() for t in turns] for sid, turns in given.sessions.items()}
    feedback = _recent_feedback(ctx, report)
    turns = sum(len(t) for t in sessions.values())
    report.counts.update({"sessions": len(sessions), "turns": turns, "feedback_signals": len(feedback)})

    def render(ids):
        shown = {sid: sessions[sid] for sid in ids}
        return render_preference_inference(shown, feedback), {"sessions": shown, "feedback": feedback}

    response = call_model_batched(ctx, report, SPEC.model_call, list(sessions), render, what="sessions")
    if response is None:
        return
    if response.to_delete:
        report.warn(
            f"the answer asked to delete {len(response.to_delete)} entr(y/ies); ignored — preference "
            "inference only adds"
        )
        report.count("deletes_ignored", len(response.to_delete))
    for key in ("created", "reinforced", "extended", "flagged", "host_flagged", "rejected"):
        report.counts.setdefault(key, 0)
    guard = CopyGuard.for_call(ctx, SPEC.model_call)
    for n, item in enumerate(response.to_save):
        # Model text is untrusted: an item with a lone surrogate, a control character or an over-long text is
        # rejected with its reason before anything is written; the rest of the answer still applies.
        bad = (
            problem(item.content, "content", field=f"toSave[{n}].content", max_chars=ctx.options.MaxContentChars)
            or problem(list(item.tags), "tags", field=f"toSave[{n}].tags")
            or next(
                (
                    found
                    for key, value in item.metadata.items()
                    for found in (
                        problem(key, "id", field=f"toSave[{n}].metadata key"),
                        problem(value, "text", field=f"toSave[{n}].metadata[{shown(key)}]"),
                    )
                    if found
                ),
                None,
            )
        )
        if bad:
            report.count("rejected")
            report.change("preference-rejected", f"toSave[{n}]", bad)
            report.warn(f"preference not saved: {bad}")
            continue
        if guard.refuse(report, item.content, field="content", target=f"preference toSave[{n}]"):
            continue  # a placeholder or the directive's example is no preference
        _save_preference(ctx, report, item.content, list(item.tags), dict(item.metadata))
    c = report.counts
    summary = (
        f"{len(response.to_save)} preference(s) proposed from {len(sessions)} session(s): "
        f"{c['created']:g} created, {c['reinforced']:g} reinforced, {c['extended']:g} extended, "
        f"{c['flagged']:g} need the user's permission, {c['rejected']:g} rejected"
    )
    # A copy is a failure of the pass: its turns stay pending (settle) and are asked again next cycle.
    CopyGuard.finish(report, summary)


def _save_preference(
    ctx: PassContext, report: PassReport, content: str, tags: list[str], metadata: dict[str, str]
) -> None:
    content = content.strip()
    model_flag = str(metadata.get(PERMISSION_KEY, "")).strip().lower() in _TRUE
    hits = sensitive_terms(content)
    flag = model_flag or bool(hits)
    # Only the permission flag is taken from the model's metadata: temporal and housekeeping keys are the host's.
    meta = {PERMISSION_KEY: "true"} if flag else {}
    reason = "inferred user preference" + (" (requires the user's permission)" if flag else "")
    try:
        result, entry = save_memory_recorded(
            ctx,
            report,
            PASS,
            content,
            category=CATEGORY,
            tags=[TAG, *without_standing_tags(tags)],  # the model never grants user-correction standing
            importance=INFERRED_IMPORTANCE,
            metadata=meta,
            reason=reason,
            required_metadata=meta,
        )
    except ContentError as exc:
        report.warn(f"preference not saved: {exc}")
        report.count("rejected")
        return
    report.count(result.action)
    if flag:
        report.count("flagged")
        if not model_flag:
            report.count("host_flagged")
            report.info(
                f"{entry.id}: flagged {PERMISSION_KEY} by the host (content mentions {', '.join(hits)}); "
                "the model did not set it"
            )
    report.change(f"preference-{result.action}", entry.id, content[:200])


def _recent_feedback(ctx: PassContext, report: PassReport) -> list[dict[str, Any]]:
    if not log_exists(ctx.profile, "feedback"):
        report.info("no feedback log: inferring from the conversation log alone")
        return []
    read = read_events(ctx.profile, "feedback", since=ctx.now - ctx.options.FeedbackWindow, until=ctx.now)
    note_malformed(report, "feedback", read)
    newest = read.events[::-1][: ctx.options.FeedbackMaxSignals]
    return [e.to_json() for e in newest]


# --- the conversation log: read, then remove exactly what was read ----------------------------------------------


@dataclass
class _ConversationSnapshot:
    sessions: dict[str, list[ConversationTurn]]
    read: LogRead
    cut: int  # bytes of complete lines that were read (what the clear removes)
    identity: tuple[int, int] | None  # the file read; a rewrite since then gives it a new identity


def _read_conversation(profile: AgentProfile) -> _ConversationSnapshot:
    """Read the log under the writers' lock, so the turns read and the byte range later removed are the same."""
    path = profile.conversation_log_path
    with path_lock(profile.log_lock_path(CONVERSATION)):
        sessions, read = conversation_by_session(profile)
        if not path.is_file():
            return _ConversationSnapshot(sessions, read, 0, None)
        return _ConversationSnapshot(sessions, read, find_cut_offset(path, 0), file_identity(path.stat()))


def _clear(ctx: PassContext, report: PassReport, snapshot: _ConversationSnapshot) -> None:
    """Copy the lines read into the warehouse, then remove them; turns appended since stay for the next cycle.

    ``store.logs.clear_conversation_log`` bounded to the snapshot. A failure is a warning, not a failed pass: the
    lines stay in the log and are read again next cycle.
    """
    if snapshot.cut == 0:
        return
    name = ctx.profile.conversation_log_path.name
    problems: list[str] = []
    try:
        moved = clear_conversation_log(
            ctx.profile, ctx.now, upto=snapshot.cut, identity=snapshot.identity, problems=problems
        )
    except ConversationLogChanged:
        report.warn(f"{name} was rewritten while the pass ran; not cleared this cycle (it is read again next cycle)")
        return
    except (OSError, ValueError, TimeoutError) as exc:
        report.warn(f"{name} could not be cleared ({type(exc).__name__}: {exc}); it is read again next cycle")
        return
    report.count("conversation_lines_cleared", moved)
    report.info(f"conversation log cleared: {moved} line(s) moved to the log warehouse")
    # Lines archived as raw text were already reported as unreadable; a line too long to archive is gone: say so.
    too_long = [p for p in problems if p.endswith("it was not archived")]
    if too_long:
        report.count("conversation_lines_unarchivable", len(too_long))
        report.warn(
            f"line(s) of {name} too long to archive were removed with the rest (the log must not grow "
            f"without bound): {'; '.join(too_long[:5])}" + (" …" if len(too_long) > 5 else "")
        )


@dataclass(frozen=True, kw_only=True)
class PreferenceInferenceOptions(PassOptions):
    """The options section of this pass (``[passes.preference_inference]``)."""

    PASS: ClassVar[str] = "preference_inference"

    enabled: bool = pass_option(True, "pass 5: preference inference", alias="PreferenceInferenceEnabled")
    model: str = pass_option("", "model for preference inference; empty = LlmModel", alias="PreferenceInferenceModel")
    base_url: str = pass_option(
        "", "endpoint for preference inference; empty = LlmBaseUrl", url=True, alias="PreferenceInferenceBaseUrl"
    )
    api_key_env: str = pass_option(
        "", "API key variable for preference inference; empty = LlmApiKeyEnv", alias="PreferenceInferenceApiKeyEnv"
    )
    apply_mode: str = pass_option(
        "",
        "ApplyMode of preference inference; empty = ApplyMode",
        choices=("", "auto", "review", "review-risky"),
        alias="PreferenceInferenceApplyMode",
    )
    directive: str = pass_option("pref-dream.md", "preference inference directive", alias="PreferenceDirectivePath")


SPEC = PassSpec(
    name=PASS,
    group="memory",
    description="Preference inference — saves durable user preferences found in conversations.\n\nPass 5. Infers "
    "durable user preferences from the conversation log and recent feedback, saves them as user-preferences/inferred "
    "memories (flagged when they touch security or money), then clears the log.",
    body=infer_preferences,
    options=PreferenceInferenceOptions,
    disabled_note="; the conversation log is left as it is",
    after=("memory_consolidation", "skill_gap_detection"),
    reads=("conversation_log", "feedback_log"),
    missing_input=no_conversation_log,
    model_call=ModelCall(
        name=PASS,
        contract=PreferenceInferenceResponse,
        directive_file="pref-dream.md",
        directive_option="PreferenceDirectivePath",
        offline=needs_judgement({"toDelete": [], "toSave": []}),
    ),
)
