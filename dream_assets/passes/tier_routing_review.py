"""Tier routing review: routing outcomes per model tier become recallable routing rules (anti-patterns).

Spec "The change gate": the review reads its append-only log through ``TierRoutingReviewWindow`` (14 days), so it
can run out of input — without a window it would see the same trailing entries forever. The host summarises the
window per tier (requests, success / failure / escalated counts and rates, mean latency, total cost, the task kinds
served and those that went wrong); the model turns the summary into findings; each finding is saved as a memory in
``anti-patterns/routing`` (``anti-patterns/routing/<tier>-tier`` when the finding names the tier it recommends)
through save-time dedup, and recorded in the change log — the save and its row in one transaction. A finding whose
content, tags or tier is not usable text (model_text.py: a lone surrogate, a control character, blank or over-long)
is rejected with its reason (``invalid_items``, also counted in ``rejected``) and the other findings are saved.

Gated by the event watermark of the routing log, the ``tier_routing_log`` data version: entries ageing out are not
a change, a new entry is. No entries in the window
means no call. The ledger is stamped only after a usable answer was applied.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Generator, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any, ClassVar

from pydantic import Field

from dream_assets.input_fingerprints import events_watermark
from dream_assets.llm.contracts import Contract, IdText, ModelCall
from dream_assets.llm.offline import needs_judgement
from dream_assets.llm.prompts import extras
from dream_assets.options import DreamOptions, PassOptions, pass_option
from dream_assets.passes.common import CopyGuard, call_model_batched, note_malformed
from dream_assets.passes.context import PassContext
from dream_assets.passes.memory_vocabulary import save_memory_recorded
from dream_assets.passes.model_text import problem
from dream_assets.passes.report import AboutToCall, PassReport
from dream_assets.passes.spec import HistoryAnalysis, PassSpec
from dream_assets.profile import AgentProfile
from dream_assets.store.log_records import TierRoutingEvent
from dream_assets.store.logs import log_exists, read_archived, read_events
from dream_assets.store.memory import ContentError

PASS = "tier_routing_review"
LOG = "tier-routing"
CATEGORY = "anti-patterns/routing"
TAG = "routing"
FINDING_IMPORTANCE = 0.5  # spec silent: the store's default importance
_TOP_KINDS = 5


# --- the model call: response contract, prompt, offline answer --------------------------------------------------------
class RoutingFinding(Contract):
    content: str
    tags: list[str] = Field(default_factory=list)
    tier: IdText | None = None


class TierRoutingResponse(Contract):
    findings: list[RoutingFinding] = Field(default_factory=list)


def render_tier_routing(tier_stats: Sequence[Mapping[str, Any]], window_days: float) -> str:
    lines = [f"## Tier routing over the last {window_days:g} days ({len(tier_stats)} tier(s))"]
    for stats in sorted(tier_stats, key=lambda s: str(s.get("tier", ""))):
        rest = extras(stats, {"tier"})
        lines.append(f"- tier {stats.get('tier', '(unnamed)')}" + (f": {rest}" if rest else ""))
    if not tier_stats:
        lines.append("(none)")
    return "\n".join(lines) + "\n"


@dataclass
class TierSummary:
    tier: str
    outcomes: Counter[str] = field(default_factory=Counter)
    kinds: Counter[str] = field(default_factory=Counter)
    problem_kinds: Counter[str] = field(default_factory=Counter)  # task kinds that failed or escalated
    latencies: list[float] = field(default_factory=list)
    cost: float = 0.0
    costed: int = 0

    @property
    def requests(self) -> int:
        return sum(self.outcomes.values())

    def add(self, event: TierRoutingEvent) -> None:
        self.outcomes[event.outcome] += 1
        self.kinds[event.task_kind] += 1
        if event.outcome != "success":
            self.problem_kinds[event.task_kind] += 1
        if event.latency_ms is not None:
            self.latencies.append(event.latency_ms)
        if event.cost_usd is not None:
            self.cost += event.cost_usd
            self.costed += 1

    def as_input(self) -> dict[str, Any]:
        """What the prompt shows for this tier; rounded so the same window renders the same prompt."""
        n = self.requests

        def rate(outcome: str) -> float:
            return round(self.outcomes[outcome] / n, 3) if n else 0.0

        return {
            "tier": self.tier,
            "requests": n,
            "success": self.outcomes["success"],
            "failure": self.outcomes["failure"],
            "escalated": self.outcomes["escalated"],
            "success_rate": rate("success"),
            "failure_rate": rate("failure"),
            "escalation_rate": rate("escalated"),
            "mean_latency_ms": round(sum(self.latencies) / len(self.latencies), 1) if self.latencies else None,
            "total_cost_usd": round(self.cost, 6) if self.costed else None,
            "task_kinds": _top(self.kinds),
            "problem_task_kinds": _top(self.problem_kinds),
        }


def _top(counter: Counter[str]) -> list[str]:
    ranked = sorted(counter.items(), key=lambda kv: (-kv[1], kv[0]))[:_TOP_KINDS]
    return [f"{kind}×{n}" for kind, n in ranked]


def summarise(events: Iterable[TierRoutingEvent]) -> list[dict[str, Any]]:
    """Per-tier routing outcomes, tiers sorted by name."""
    tiers: dict[str, TierSummary] = {}
    for event in events:
        tiers.setdefault(event.tier, TierSummary(event.tier)).add(event)
    return [tiers[t].as_input() for t in sorted(tiers)]


def finding_category(tier: str | None) -> str:
    """``anti-patterns/routing``, or ``anti-patterns/routing/<tier>-tier`` for a finding about one tier."""
    slug = re.sub(r"[^a-z0-9]+", "-", (tier or "").casefold()).strip("-")[:40].strip("-")
    if not slug:
        return CATEGORY
    return f"{CATEGORY}/{slug if slug.endswith('tier') else slug + '-tier'}"


def no_routing_log(ctx: PassContext) -> str | None:
    return None if log_exists(ctx.profile, LOG) else "no tier-routing log (logs/tier-routing.jsonl is absent)"


def review_tier_routing(ctx: PassContext) -> Generator[AboutToCall, bool, PassReport]:
    """The pass, after the shared opening (enabled, tier-routing log present: runner.opening); gated on the log's
    watermark and stamped with it once the findings were saved."""
    report = PassReport(PASS)
    opts = ctx.options
    section = opts.section(TierRoutingReviewOptions)
    days = section.window.total_seconds() / 86400
    # The whole log is read once: its watermark is the change-gate fingerprint (the tier_routing_log data version),
    # the window is what the pass reviews.
    read = read_events(ctx.profile, LOG)
    note_malformed(report, LOG, read)
    fingerprint = events_watermark(read.events)
    since = ctx.now - section.window
    events: list[TierRoutingEvent] = [e for e in read.events if since <= e.timestamp < ctx.now]
    if not events:
        return report.skip(f"no routing entries in the last {days:g} days (TierRoutingReviewWindow): no call")
    stats = summarise(events)
    report.counts.update({"entries": len(events), "tiers": len(stats)})
    report.extra["tier_stats"] = stats
    if not (yield AboutToCall(fingerprint, report)):
        return report

    def render(tiers):
        return render_tier_routing(tiers, days), {"tier_stats": list(tiers), "window_days": days}

    response = call_model_batched(
        ctx, report, SPEC.model_call, list(stats), render, what="tiers", label=lambda s: str(s.get("tier"))
    )
    if response is None:
        return report
    for key in ("created", "reinforced", "extended", "rejected"):
        report.counts.setdefault(key, 0)
    guard = CopyGuard.for_call(ctx, SPEC.model_call)
    for n, finding in enumerate(response.findings):
        bad = (
            problem(finding.content, "content", field=f"findings[{n}].content", max_chars=opts.MaxContentChars)
            or problem(finding.tags, "tags", field=f"findings[{n}].tags")
            or (
                problem(finding.tier, "id", field=f"findings[{n}].tier")
                if finding.tier and finding.tier.strip()
                else None
            )
        )
        if bad:
            report.count("invalid_items")
            report.count("rejected")
            report.change("invalid-item", f"findings[{n}]", bad)
            report.warn(f"findings[{n}] rejected: {bad}")
            continue
        if guard.refuse(report, finding.content, field="content", target=f"findings[{n}]"):
            report.count("rejected")
            continue
        category = finding_category(finding.tier)
        metadata = {"routingTier": finding.tier.strip()} if finding.tier and finding.tier.strip() else {}
        try:
            # The save (or the reinforcement it became) and its change-log row are one write.
            with ctx.store.transaction():
                result, entry = save_memory_recorded(
                    ctx,
                    report,
                    PASS,
                    finding.content.strip(),
                    category=category,
                    tags=[TAG, *finding.tags],
                    importance=FINDING_IMPORTANCE,
                    metadata=metadata,
                    reason=f"tier routing finding over the last {days:g} days",
                )
        except ContentError as exc:
            report.warn(f"finding not saved: {exc}")
            report.count("rejected")
            continue
        report.count(result.action)
        report.change(f"routing-finding-{result.action}", entry.id, entry.content[:200])
    c = report.counts
    summary = (
        f"{len(response.findings)} routing finding(s) from {len(events)} entries over "
        f"{len(stats)} tier(s) in the last {days:g} days: {c['created']:g} created, "
        f"{c['reinforced']:g} reinforced, {c['extended']:g} extended, {c['rejected']:g} rejected"
    )
    return CopyGuard.finish(report, summary)


def run_tier_routing_review(ctx: PassContext) -> PassReport:
    """The pass with its shared opening, change gate and ledger stamp (runner.attempt: no lock, no review mode, no
    recorded outcome)."""
    from dream_assets.passes.runner import attempt

    return attempt(SPEC, ctx)


def history_stats(profile: AgentProfile, options: DreamOptions, end: datetime) -> list[dict[str, Any]]:
    """History: per-tier routing outcomes of the window ending at ``end`` (read from the log warehouse), as this pass
    summarises them."""
    section = options.section(TierRoutingReviewOptions)
    return summarise(read_archived(profile, LOG, end - section.window, end).events)


@dataclass(frozen=True, kw_only=True)
class TierRoutingReviewOptions(PassOptions):
    """The options section of this pass (``[passes.tier_routing_review]``)."""

    PASS: ClassVar[str] = "tier_routing_review"

    enabled: bool = pass_option(True, "tier routing review", alias="TierRoutingReviewEnabled")
    model: str = pass_option("", "model for tier routing review; empty = LlmModel", alias="TierRoutingReviewModel")
    base_url: str = pass_option(
        "", "endpoint for tier routing review; empty = LlmBaseUrl", url=True, alias="TierRoutingReviewBaseUrl"
    )
    api_key_env: str = pass_option(
        "", "API key variable for tier routing review; empty = LlmApiKeyEnv", alias="TierRoutingReviewApiKeyEnv"
    )
    apply_mode: str = pass_option(
        "",
        "ApplyMode of tier routing review; empty = ApplyMode",
        choices=("", "auto", "review", "review-risky"),
        alias="TierRoutingReviewApplyMode",
    )
    directive: str = pass_option(
        "tier-routing-review.md", "tier routing review directive", alias="TierRoutingDirectivePath"
    )
    window: timedelta = pass_option(
        timedelta(days=14), "how far back the tier routing review reads", alias="TierRoutingReviewWindow"
    )


SPEC = PassSpec(
    name=PASS,
    group="memory",
    description="Tier routing review — records what model-tier routing outcomes teach.\n\nSummarises model-tier "
    "routing outcomes of the last 14 days and records findings as anti-patterns/routing memories.",
    body=review_tier_routing,
    options=TierRoutingReviewOptions,
    after=("preference_inference",),
    reads=("tier_routing_log",),
    missing_input=no_routing_log,
    gate="tier_routing_log",
    model_call=ModelCall(
        name=PASS,
        contract=TierRoutingResponse,
        directive_file="tier-routing-review.md",
        directive_option="TierRoutingDirectivePath",
        offline=needs_judgement({"findings": []}),
    ),
    history=HistoryAnalysis("tier_routing_history", history_stats),
)
