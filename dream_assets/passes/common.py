"""What the model-calling passes share: one model call with its reporting, and the report notes of a forced run and
of a model switch (the change gate itself, and the ledger stamp, are the runner's: gate.py, runner.py).

A dead or hanging endpoint costs one pass's retries per cycle, not every pass's: when a call finds the endpoint
unreachable (connection failure or timeout, after the backend's own retries), the failure is written to the
profile's endpoint state file under the cycle id, and every later model call of the same cycle fails at once with
that reason, without calling the endpoint. Passes of one cycle can run in separate processes (Dagster steps), which is
why the state is a file. A record of another cycle is ignored: the next cycle tries the endpoint again.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from dream_assets.file_safety import UnreadableFile, atomic_write, read_json_file
from dream_assets.llm.contracts import ModelCall, id_aliases, with_aliases
from dream_assets.model import iso
from dream_assets.passes.context import PassContext
from dream_assets.passes.report import PassReport
from dream_assets.profile import AgentProfile
from dream_assets.store.ledger import model_switch

log = logging.getLogger("dream_assets.passes")

#: How many cycles' endpoint failures the state file keeps (a few concurrent runs of one agent never evict each other).
ENDPOINT_STATE_KEEP = 16


def note_forced(ctx: PassContext, report: PassReport, what: str) -> None:
    """Say in the report that this is a forced run, why, and what it overrode."""
    report.counts["forced"] = 1
    report.extra["forced"] = ctx.force
    report.info(f"forced run ({ctx.force}): {what}")


def note_model_switch(ctx: PassContext, pass_name: str, report: PassReport) -> str | None:
    """When the pass's last stamp was answered by another backend or model than this run's, say so in the report
    (``extra["model_switch"]``; its summary says it once the pass completed) and return the reason; else None."""
    switched = model_switch(ctx.ledger.get(pass_name), ctx.model_identity)
    if switched is not None:
        report.extra["model_switch"] = switched
        report.info(f"model switch: {switched}")
    return switched


#: What ``call_model(..., shrinkable=True)`` returns when the prompt does not fit the window: the pass shows less.
CONTEXT_EXCEEDED = object()


def call_model(
    ctx: PassContext,
    report: PassReport,
    call: ModelCall,
    prompt: str,
    inputs: Mapping[str, Any] | None = None,
    *,
    shrinkable: bool = False,
    part: tuple[int, int] | None = None,
) -> Any | None:
    """One model call of the kind ``call`` (the pass's own, ``SPEC.model_call``, or another call it makes such as
    merge repair). Returns the validated response, or None after marking the report failed / deferred.

    Usage totals for this pass accumulate into ``report.usage``; the backend label goes into ``report.extra``.
    When an earlier call of this cycle found the endpoint unreachable, the report fails with that reason and the
    endpoint is not called. A prompt that does not fit the model's window (``LlmContextTokens`` less the
    ``LlmMaxTokens`` reserve) is never sent: a ``shrinkable`` call (a pass that can show fewer items) gets
    ``CONTEXT_EXCEEDED`` back, as it does when the endpoint itself says the prompt was too long; any other call
    fails with the sizes and the options to change."""
    earlier = endpoint_failure(ctx.profile, ctx.cycle_id)
    if earlier is not None:
        report.count("model_calls_not_made")
        report.fail(
            f"model endpoint not called: {earlier['pass']} could not reach it earlier in this cycle "
            f"({earlier['reason']}); it is tried again next cycle"
        )
        return None
    client = ctx.client
    request = client.request(call, prompt, inputs)
    request.part = part  # which call of how many, for the progress shown
    budget = client.budget
    if not budget.fits(request.system, request.prompt):
        if shrinkable:
            return CONTEXT_EXCEEDED
        tokens = budget.tokens(request.system, request.prompt)
        report.count("prompts_over_window")
        report.fail(
            f"the {call.name} prompt ({tokens} tokens with its directive, {budget.describe()}) does not fit the "
            "model's window and was not sent; raise LlmContextTokens, lower LlmMaxTokens or the pass's per-call "
            "limit"
        )
        return None
    metered = client.backend.name != "offline"  # the offline backend spends nothing
    refused = token_budget_refusal(ctx, budget.tokens(request.system, request.prompt)) if metered else None
    if refused is not None:
        report.count("budget_deferred")
        report.extra["budget_deferral"] = refused.to_json()  # waits for the next cycle or day: no busy back-off
        report.summary = f"{report.pass_name} deferred: budget — {refused.reason}"
        report.defer(refused.reason)
        return None
    start = len(client.usage.records)
    result = client.call(request)
    totals = client.usage.totals(call.name, since=start)
    for key, value in totals.items():
        report.usage[key] = report.usage.get(key, 0.0) + value
    opts = ctx.options
    if opts.LlmPriceInputPerMillion or opts.LlmPriceOutputPerMillion:
        cost = (
            totals.get("prompt_tokens", 0.0) * opts.LlmPriceInputPerMillion
            + totals.get("completion_tokens", 0.0) * opts.LlmPriceOutputPerMillion
        ) / 1_000_000
        report.usage["cost"] = round(report.usage.get("cost", 0.0) + cost, 6)
    if metered:
        record_token_spend(ctx, int(totals.get("total_tokens", 0.0)))
    report.extra.update(client.describe())
    if result.note:
        report.info(result.note)
    if result.deferred:
        report.defer(result.error)
        return None
    if not result.ok and result.context_exceeded and shrinkable:
        return CONTEXT_EXCEEDED
    if not result.ok:
        if result.unreachable:
            record_endpoint_failure(ctx.profile, ctx.cycle_id, call.name, result.error, ctx.now)
            report.fail(
                f"{result.error}; the rest of this cycle's model passes will not call the endpoint, "
                "it is tried again next cycle"
            )
        else:
            report.fail(result.error)
        return None
    return result.response


def plan_batches(fits: Callable[[Sequence[Any]], bool], items: Sequence[Any]) -> tuple[list[list[Any]], list[Any]]:
    """Consecutive batches of ``items`` whose prompt ``fits`` the window, each as large as fits (a binary search over
    the rendered prompt, so the count is exact, not estimated per item), and the items that do not fit even alone."""
    batches: list[list[Any]] = []
    alone: list[Any] = []
    start = 0
    while start < len(items):
        if fits(items[start:]):
            batches.append(list(items[start:]))
            break
        low, high = start, len(items) - 1  # items[start:low] fits (empty when low == start); items[start:high+1] not
        while low < high:
            mid = (low + high + 1) // 2
            if fits(items[start:mid]):
                low = mid
            else:
                high = mid - 1
        if low == start:
            alone.append(items[start])
            start += 1
            continue
        batches.append(list(items[start:low]))
        start = low
    return batches, alone


def combine_responses(responses: Sequence[Any]) -> Any:
    """The answers of one pass's batches as one answer: every list field concatenated, every mapping merged (the
    contracts are lists of items, so an answer per batch adds up)."""
    first = responses[0]
    if len(responses) == 1:
        return first
    update: dict[str, Any] = {}
    for name in type(first).model_fields:
        values = [getattr(r, name) for r in responses]
        if isinstance(values[0], list):
            update[name] = [v for value in values for v in value]
        elif isinstance(values[0], dict):
            update[name] = {k: v for value in values for k, v in value.items()}
    return first.model_copy(update=update)


def call_model_batched(
    ctx: PassContext,
    report: PassReport,
    call: ModelCall,
    items: Sequence[Any],
    render: Callable[[Sequence[Any]], tuple[str, Mapping[str, Any]]],
    *,
    what: str,
    label: Callable[[Any], str] = str,
) -> Any | None:
    """The pass's model call over ``items`` (sessions, skills, patterns...), in batches sized to the window when the
    whole prompt (``render(items)``: prompt and inputs) does not fit: each batch's prompt shows its items with the
    fixed part of the prompt, and the answers add up (``combine_responses``). An item that does not fit even alone is
    left out with a warning naming it (``items_over_window``). A plan over ``LlmMaxCallsPerPass`` calls fails the pass
    before any call, with the figures, and so does a failed batch: nothing of a pass is applied half. An endpoint
    that says a batch was too long makes the plan use smaller batches. Returns the combined answer, or None."""
    budget = ctx.client.budget
    system = ctx.client.request(call, "").system
    if not budget.bounded or not items:
        prompt, inputs = render(items)
        return call_model(ctx, report, call, prompt, inputs)
    limit = len(items)  # the largest batch, lowered when the endpoint says a batch was too long

    def fits(batch: Sequence[Any]) -> bool:
        if len(batch) > limit:
            return False
        prompt, inputs = render(batch)  # sized as sent: long ids at their short names
        return budget.fits(system, with_aliases(prompt, id_aliases(call.contract, inputs)))

    while True:
        batches, alone = plan_batches(fits, items)
        if not batches:
            report.fail(
                f"not one of the {len(items)} {what} fits the model's window with the {call.name} directive "
                f"({budget.describe()}); raise LlmContextTokens or lower LlmMaxTokens"
            )
            return None
        if len(batches) > ctx.options.LlmMaxCallsPerPass:
            report.fail(
                f"the {len(items)} {what} need {len(batches)} calls to fit the model's window ({budget.describe()}), "
                f"more than LlmMaxCallsPerPass {ctx.options.LlmMaxCallsPerPass}; nothing was sent — raise "
                "LlmMaxCallsPerPass or LlmContextTokens"
            )
            return None
        responses = []
        for number, batch in enumerate(batches, 1):
            prompt, inputs = render(batch)
            response = call_model(
                ctx, report, call, prompt, inputs, shrinkable=len(batch) > 1, part=(number, len(batches))
            )
            if response is CONTEXT_EXCEEDED:
                break
            if response is None:
                if responses:
                    report.warn(f"batch {len(responses) + 1} of {len(batches)} failed; nothing of the pass applied")
                return None
            responses.append(response)
        else:
            break
        limit = max(1, max(len(b) for b in batches) // 2)
        report.count("context_exceeded_retries")
        report.info(f"the endpoint said a batch of {what} did not fit; planning batches of at most {limit}")
    if alone:
        report.count("items_over_window", len(alone))
        shown = ", ".join(label(i) for i in alone[:5]) + (" …" if len(alone) > 5 else "")
        report.warn(
            f"{len(alone)} of the {len(items)} {what} do not fit the model's window even alone ({budget.describe()}) "
            f"and were left out: {shown}"
        )
    if len(batches) > 1:
        report.counts["calls"] = len(batches)
        report.info(f"the {len(items)} {what} were shown in {len(batches)} calls sized to the model's window")
    return combine_responses(responses)


def _spend_path(profile: AgentProfile):
    return profile.root / "token-spend.json"


def _read_spend(profile: AgentProfile) -> dict[str, dict[str, int]]:
    try:
        data = json.loads(_spend_path(profile).read_text(encoding="utf-8"))
    except FileNotFoundError:
        return {"days": {}, "cycles": {}}
    except (OSError, ValueError) as exc:
        log.warning("ignoring unreadable %s (%s); token budgets count from zero", _spend_path(profile), exc)
        return {"days": {}, "cycles": {}}
    out: dict[str, dict[str, int]] = {"days": {}, "cycles": {}}
    for key in out:
        part = data.get(key) if isinstance(data, dict) else None
        if isinstance(part, dict):
            out[key] = {str(k): int(v) for k, v in part.items() if isinstance(v, int | float)}
    return out


def token_spend(ctx: PassContext) -> tuple[int, int]:
    """Tokens this agent's model calls spent in this cycle and on this UTC day (the token budgets' counters)."""
    spend = _read_spend(ctx.profile)
    return spend["cycles"].get(ctx.cycle_id, 0), spend["days"].get(ctx.now.date().isoformat(), 0)


@dataclass(frozen=True)
class BudgetRefusal:
    """A call the token budgets refuse: which budget, its limit, what was spent, the call's estimate, and when the
    pass can run again (the next cycle, or the next UTC day). A budget deferral is not retried with back-off."""

    budget: str  # CycleTokenBudget or DailyTokenBudget
    limit: int
    spent: int
    estimate: int
    resumes: str  # "next cycle" or the next UTC midnight

    scope: str = "the cycle"  # what the budget counts: the cycle, or the UTC day

    @property
    def reason(self) -> str:
        when = "it runs next cycle" if self.resumes == "next cycle" else f"it runs again tomorrow (UTC, {self.resumes})"
        return (
            f"token budget: this call's prompt (about {self.estimate} tokens) would take {self.scope} past "
            f"{self.budget} {self.limit} ({self.spent} spent); {when}"
        )

    def to_json(self) -> dict[str, Any]:
        return {
            "kind": "budget",
            "budget": self.budget,
            "limit": self.limit,
            "spent": self.spent,
            "estimate": self.estimate,
            "resumes": self.resumes,
        }


def token_budget_refusal(ctx: PassContext, estimate: int) -> BudgetRefusal | None:
    """The refusal of a call of ``estimate`` prompt tokens that would go over CycleTokenBudget or DailyTokenBudget
    (the pass is then deferred whole, before anything is sent); None within budget or without one."""
    opts = ctx.options
    if not (opts.CycleTokenBudget or opts.DailyTokenBudget):
        return None
    cycle, day = token_spend(ctx)
    if opts.CycleTokenBudget and cycle + estimate > opts.CycleTokenBudget:
        return BudgetRefusal("CycleTokenBudget", opts.CycleTokenBudget, cycle, estimate, "next cycle")
    if opts.DailyTokenBudget and day + estimate > opts.DailyTokenBudget:
        tomorrow = datetime.combine(ctx.now.astimezone(UTC).date() + timedelta(days=1), datetime.min.time(), UTC)
        day_name = ctx.now.astimezone(UTC).date().isoformat()
        return BudgetRefusal("DailyTokenBudget", opts.DailyTokenBudget, day, estimate, iso(tomorrow) or "", day_name)
    return None


def record_token_spend(ctx: PassContext, tokens: int) -> None:
    """Add a call's tokens to this cycle's and this day's counters (kept for 31 days and 64 cycles)."""
    if tokens <= 0:
        return
    spend = _read_spend(ctx.profile)
    day = ctx.now.date().isoformat()
    spend["days"][day] = spend["days"].get(day, 0) + tokens
    spend["cycles"][ctx.cycle_id] = spend["cycles"].get(ctx.cycle_id, 0) + tokens
    spend["days"] = dict(sorted(spend["days"].items())[-31:])
    spend["cycles"] = dict(list(spend["cycles"].items())[-64:])
    try:
        atomic_write(_spend_path(ctx.profile), json.dumps(spend, indent=1, sort_keys=True))
    except OSError as exc:
        log.warning("could not write %s (%s); the token budgets miss this call", _spend_path(ctx.profile), exc)


def endpoint_failure(profile: AgentProfile, cycle_id: str) -> dict[str, str] | None:
    """This cycle's unreachable-endpoint record ({"pass", "reason", "at"}), or None: no record for this cycle, or a
    state file that cannot be read (then the endpoint is simply called)."""
    record = _endpoint_records(profile).get(cycle_id)
    if not isinstance(record, dict) or not isinstance(record.get("reason"), str):
        return None
    return {
        "pass": str(record.get("pass") or "a model pass"),
        "reason": record["reason"],
        "at": str(record.get("at") or ""),
    }


def record_endpoint_failure(profile: AgentProfile, cycle_id: str, pass_name: str, reason: str, now: datetime) -> None:
    """Remember for the rest of this cycle that the endpoint is unreachable. Written atomically; a failure to write
    only costs the later passes their own attempt."""
    records = _endpoint_records(profile)
    records.setdefault(cycle_id, {"pass": pass_name, "reason": reason, "at": iso(now)})
    newest = sorted(
        records.items(),
        key=lambda kv: str(kv[1].get("at", "")) if isinstance(kv[1], dict) else "",
        reverse=True,
    )[:ENDPOINT_STATE_KEEP]
    path = profile.endpoint_state_path
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        atomic_write(path, json.dumps({"cycles": dict(newest)}, indent=1))
    except OSError as exc:
        log.warning("could not write %s (%s); later passes of this cycle will try the endpoint themselves", path, exc)


def _endpoint_records(profile: AgentProfile) -> dict[str, Any]:
    path = profile.endpoint_state_path
    try:
        data = read_json_file(path)
    except FileNotFoundError:
        return {}
    except UnreadableFile as exc:
        log.warning("ignoring unreadable endpoint state: %s", exc)
        return {}
    cycles = data.get("cycles") if isinstance(data, dict) else None
    return dict(cycles) if isinstance(cycles, dict) else {}


def note_malformed(report: PassReport, kind: str, read: Any) -> None:
    """Malformed lines never stop a pass, and are never skipped silently either."""
    if read.malformed:
        report.count(f"malformed_{kind.replace('-', '_')}_lines", read.malformed)
        shown = "; ".join(read.problems[:3])
        report.warn(
            f"{read.malformed} malformed line(s) in the {kind} log were skipped: {shown}"
            + (" …" if len(read.problems) > 3 else "")
            + " — fix or remove those lines"
        )


@dataclass(frozen=True)
class CopyGuard:
    """Refuses model content that is a placeholder or a copy of the pass's directive example (model_text.copied),
    and a rewrite that throws most of what it replaces away. Each refusal is counted (``copied``, ``shrunk``), listed
    in the changes table and warned; :meth:`failed` then reports the pass as failed and unstamped."""

    examples: frozenset[str]

    @classmethod
    def for_call(cls, ctx: PassContext, call: ModelCall) -> CopyGuard:
        from dream_assets.llm.directives import DirectiveError, load_directive
        from dream_assets.passes.model_text import directive_examples

        try:
            directive, _ = load_directive(call, ctx.profile, ctx.options)
        except DirectiveError:  # the model call itself reports an unreadable directive
            return cls(frozenset())
        return cls(directive_examples(directive))

    def refuse(self, report: PassReport, content: str, *, field: str, target: str) -> bool:
        """True (and the refusal noted) when ``content`` is a placeholder or the directive's example."""
        from dream_assets.passes.model_text import copied

        why = copied(content, examples=self.examples)
        if why is None:
            return False
        report.count("copied")
        report.change("copied", target, f"{field} {why}")
        report.warn(f"{target} refused: {field} {why}")
        return True

    def refuse_shrink(self, report: PassReport, before: str, after: str, *, target: str) -> bool:
        """True (and noted) when a rewrite keeps less than ``MIN_KEPT_SHARE`` of the text it replaces."""
        old, new = len(before.strip()), len(after.strip())
        if old == 0 or new >= MIN_KEPT_SHARE * old:
            return False
        report.count("shrunk")
        report.change(
            "shrunk",
            target,
            f"the rewrite keeps {new} of {old} characters (under {MIN_KEPT_SHARE:.0%}): a rewrite improves a text, "
            "it does not throw most of it away",
        )
        report.warn(f"{target} refused: the rewrite would shrink it from {old} to {new} characters")
        return True

    @staticmethod
    def finish(report: PassReport, summary: str, special: Callable[[], str | None] | None = None) -> PassReport:
        """The pass's end: failed when any item was refused as copied or shrunk (``failed``), else finished with
        ``summary`` and, when given, the special stamp that ``special`` makes (computed only then) handed to the
        runner in ``report.stamp``."""
        failed = CopyGuard.failed(report, summary)
        if failed is not None:
            return failed
        if special is not None:
            report.stamp = special()
        return report.finish(summary)

    @staticmethod
    def failed(report: PassReport, summary: str) -> PassReport | None:
        """The pass reported failed when any item was refused as copied or shrunk (what applied stays applied and
        recorded); None when none was. The caller then does not stamp, so the next cycle asks again."""
        copies, shrunk = int(report.counts.get("copied", 0)), int(report.counts.get("shrunk", 0))
        if not copies and not shrunk:
            return None
        what = []
        if copies:
            what.append(f"{copies} item(s) a placeholder or the directive's example")
        if shrunk:
            what.append(f"{shrunk} rewrite(s) throwing most of a text away")
        return report.fail(
            f"the model copied or cut instead of answering: {' and '.join(what)}, refused; {summary}; not stamped, "
            "so the next cycle asks again"
        )


#: A rewrite of a skill must keep at least this share of its characters (a sparse skill is expanded, an at-risk one
#: corrected: neither comes out a fraction of what it was).
MIN_KEPT_SHARE = 0.5
