"""Rehearse before switching: every model pass's real prompt, from the agent's own data, against the configured
endpoint, with nothing applied to the agent.

The passes run as they would in a cycle (forced past their change gates, in cycle order) on a throw-away copy of the
agent's profile, so the prompts, the parsing and the host's checks are the real ones and the agent's own store,
ledger and logs are untouched. Per pass: whether the prompts fit the window, whether the answers parsed, the items
the host refused and why, the tokens, the latency and, with prices, the estimated cost.
"""

from __future__ import annotations

import shutil
import tempfile
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path

from dream_assets.llm.client import build_model_client
from dream_assets.options import DreamOptions, pass_model_options
from dream_assets.passes.context import PassContext
from dream_assets.passes.registry import PASSES
from dream_assets.profile import AgentProfile

#: Counts a pass keeps for what the host refused of an answer.
REFUSAL_COUNTS = (
    "rejected",
    "refused",
    "ignored",
    "invalid_ids",
    "not_shown",
    "guarded",
    "protected",
    "unusable",
    "copied",
    "shrunk",
)


@dataclass
class PassCheck:
    pass_name: str
    status: str
    model: str
    fits: bool
    parsed: bool
    calls: int
    prompt_tokens: int
    completion_tokens: int
    latency_s: float
    cost: float
    refusals: dict[str, int] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)  # the host's warnings: why items were refused
    reason: str = ""

    @property
    def ok(self) -> bool:
        return self.fits and self.parsed and self.status != "failed"


def check_model(profile: AgentProfile, options: DreamOptions, now: datetime) -> list[PassCheck]:
    """Run each enabled model pass on a copy of ``profile`` against the configured endpoint; one check per pass."""
    out: list[PassCheck] = []
    with tempfile.TemporaryDirectory(prefix="dream-check-model-") as tmp:
        copy = AgentProfile(Path(shutil.copytree(profile.root, Path(tmp) / profile.root.name)))
        for spec in PASSES:
            if not spec.uses_model or spec.disabled(options):
                continue
            opts = pass_model_options(options, spec.name)
            client = build_model_client(opts, copy)
            ctx = PassContext(
                copy,
                opts,
                now,
                cycle_id="check-model",
                client_factory=lambda client=client: client,
                force="dream check-model: a rehearsal on a copy of the profile",
            )
            report = spec.run(ctx)
            usage = report.usage
            reason = report.reason if report.status in ("failed", "deferred") else ""
            out.append(
                PassCheck(
                    pass_name=spec.name,
                    status=report.status,
                    model=client.identity,
                    fits=not report.counts.get("prompts_over_window") and "does not fit" not in reason,
                    parsed="unusable" not in reason,
                    calls=int(usage.get("calls", 0)),
                    prompt_tokens=int(usage.get("prompt_tokens", 0)),
                    completion_tokens=int(usage.get("completion_tokens", 0)),
                    latency_s=float(usage.get("latency_s", 0.0)),
                    cost=float(usage.get("cost", 0.0)),
                    refusals={k: int(v) for k, v in report.counts.items() if k in REFUSAL_COUNTS and v},
                    notes=[line[len("WARNING: ") :] for line in report.lines if line.startswith("WARNING: ")][:5],
                    reason=reason,
                )
            )
    return out
