"""Usage accounting: one record per model call, totals per pass (they become materialization metadata)."""

from __future__ import annotations

import math
import threading
from dataclasses import asdict, dataclass, field
from typing import Any

#: outcome values of a UsageRecord
OUTCOMES = ("ok", "invalid-response", "error", "deferred")


@dataclass(frozen=True)
class UsageRecord:
    pass_name: str
    backend: str
    model: str
    prompt_tokens: int
    completion_tokens: int
    estimated: bool  # True when the endpoint reported no usage and the counts are estimates
    latency_s: float
    outcome: str  # one of OUTCOMES
    attempts: int = 1  # HTTP attempts, retries included
    waited_s: float = 0.0  # time spent waiting for the agent's busy model before the call
    error: str = ""
    timeout_s: float = 0.0  # the call's timeout (from the endpoint's measured speed, or LlmTimeout); 0: none

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def estimate_tokens(text: str) -> int:
    """Rough count for endpoints that report no usage: about four characters per token."""
    return math.ceil(len(text) / 4) if text else 0


@dataclass
class UsageLedger:
    records: list[UsageRecord] = field(default_factory=list)

    def __post_init__(self) -> None:
        self._lock = threading.Lock()

    def add(self, record: UsageRecord) -> UsageRecord:
        with self._lock:
            self.records.append(record)
        return record

    def mark(self) -> int:
        """A position to pass as ``since`` later, for totals of one run of a pass on a long-lived client."""
        with self._lock:
            return len(self.records)

    def totals(self, pass_name: str | None = None, *, since: int = 0) -> dict[str, float]:
        """Totals over the records of ``pass_name`` (all passes when None).

        ``calls`` counts calls that reached the backend; a call deferred by the busy wait is counted in
        ``deferred_calls`` only. ``failed_calls`` = invalid responses + errors.
        """
        with self._lock:
            rows = [r for r in self.records[since:] if pass_name is None or r.pass_name == pass_name]
        made = [r for r in rows if r.outcome != "deferred"]
        prompt = sum(r.prompt_tokens for r in made)
        completion = sum(r.completion_tokens for r in made)
        return {
            "calls": float(len(made)),
            "failed_calls": float(sum(1 for r in made if r.outcome != "ok")),
            "deferred_calls": float(len(rows) - len(made)),
            "estimated_calls": float(sum(1 for r in made if r.estimated)),
            "prompt_tokens": float(prompt),
            "completion_tokens": float(completion),
            "total_tokens": float(prompt + completion),
            "latency_s": round(sum(r.latency_s for r in made), 6),
            "busy_wait_s": round(sum(r.waited_s for r in rows), 6),
        }

    def by_pass(self) -> dict[str, dict[str, float]]:
        with self._lock:
            names = sorted({r.pass_name for r in self.records})
        return {name: self.totals(name) for name in names}
