"""PassReport: what one pass did, in the shape both a person and the Dagster UI read, and what a body says to the
runner (passes/runner.py): the fingerprint of what it is about to send the model (``AboutToCall``, which the runner
answers with the change gate's decision) and the completion stamp it wants recorded (``PassReport.stamp``)."""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Any

log = logging.getLogger("dream_assets")


@dataclass
class Change:
    """One change a pass made (or refused to make), for the report table and the change log."""

    kind: str  # e.g. "merge-created", "archived", "purged", "decayed", "skill-created", "log-trimmed"
    target: str  # memory id, skill name or file
    detail: str = ""  # one line a person reads


@dataclass
class PassReport:
    pass_name: str
    status: str = "completed"  # completed | skipped | failed | deferred
    reason: str = ""  # why it skipped / failed / deferred
    summary: str = ""  # the one INFO line a person reads
    counts: dict[str, float] = field(default_factory=dict)
    changes: list[Change] = field(default_factory=list)
    lines: list[str] = field(default_factory=list)  # the log lines of this pass, in order
    usage: dict[str, float] = field(default_factory=dict)  # model calls / tokens / latency totals
    extra: dict[str, Any] = field(default_factory=dict)
    #: What the runner stamps in the pass ledger for this run, when it is not the fingerprint the body gave the change
    #: gate (a completion stamp: the corpus as the run left it, a backlog stamp), or when a skipped run counts as done.
    #: None: the gated fingerprint, stamped only when the run completed (a usable answer was applied).
    stamp: str | None = None

    # -- building ---------------------------------------------------------
    def info(self, message: str) -> None:
        self.lines.append(message)
        log.info("%s: %s", self.pass_name, message)

    def warn(self, message: str) -> None:
        self.lines.append(f"WARNING: {message}")
        log.warning("%s: %s", self.pass_name, message)

    def count(self, key: str, n: float = 1) -> None:
        self.counts[key] = self.counts.get(key, 0) + n

    def change(self, kind: str, target: str, detail: str = "") -> None:
        self.changes.append(Change(kind, target, detail))

    def skip(self, reason: str) -> PassReport:
        """Skipped, for ``reason`` (the cause, said once). The summary is the reason itself: wherever a summary is shown
        the pass's name and status stand beside it (`dream run`, `dream status`, the cycle report, the asset's
        metadata), so "<pass> skipped — " in front of it would say them twice."""
        self.status, self.reason = "skipped", reason
        self.summary = self.summary or reason
        self.info(f"skipped — {self.summary}")
        return self

    def fail(self, reason: str) -> PassReport:
        self.status, self.reason = "failed", reason
        self.summary = self.summary or f"{self.pass_name} failed — {reason}"
        self.lines.append(f"ERROR: {self.summary}")
        log.error("%s: %s", self.pass_name, self.summary)
        return self

    def defer(self, reason: str) -> PassReport:
        self.status, self.reason = "deferred", reason
        self.summary = self.summary or f"{self.pass_name} deferred — {reason}"
        self.info(self.summary)
        return self

    def finish(self, summary: str) -> PassReport:
        self.summary = summary
        self.info(summary)
        return self

    # -- reading ---------------------------------------------------------
    @property
    def model_calls(self) -> int:
        return int(self.usage.get("calls", 0))

    def changes_markdown(self, limit: int = 200) -> str:
        if not self.changes:
            return "_no changes_"
        rows = ["| kind | target | detail |", "| --- | --- | --- |"]
        for c in self.changes[:limit]:
            rows.append(f"| {_cell(c.kind)} | {_cell(c.target)} | {_cell(c.detail)} |")
        if len(self.changes) > limit:
            rows.append(f"| … | {len(self.changes) - limit} more | |")
        return "\n".join(rows)


def _cell(text: str) -> str:
    return str(text).replace("|", "\\|").replace("\n", " ")[:300]


@dataclass(frozen=True)
class AboutToCall:
    """What a gated pass body yields just before it sends its input to the model: the fingerprint of exactly that input
    and the report so far. The runner answers True (go on: the change gate let it through, or the run is forced) or
    False (the report is marked skipped with the gate's reason: the body returns it as it is). The body never reads the
    ledger's verdict itself, and the runner stamps ``fingerprint`` once the body completed."""

    fingerprint: str
    report: PassReport
