"""PassReport: what one pass did, in the shape both a person and the Dagster UI read."""

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
        self.status, self.reason = "skipped", reason
        self.summary = self.summary or f"{self.pass_name} skipped — {reason}"
        self.info(self.summary)
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
