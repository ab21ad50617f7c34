"""Back-off under contention: a pass deferred because the agent's own model stayed busy is retried, with an
exponential delay, instead of waiting for the next cycle.

A deferred pass is not a failed one (spec "Scheduling": the dream cycle waits rather than queuing behind an active
turn). Its outcome record (``pass-reports/<pass>.json``, see outcome.py) carries the deferral: which attempt this
is and when the pass is retried. The first deferral is retried ``BusyRetryInitialDelay`` (5 minutes) later, each
further one ``BusyRetryMultiplier`` (2) times later than the one before, never later than ``BusyRetryMaxDelay``
(1 hour); after ``BusyRetryMaxAttempts`` (6) retries the pass waits for the next cycle. Any other outcome (completed,
skipped, failed) ends the deferral. The agent's deferred passes are also listed in one small file
(``outcome.load_deferred``), so the retry sensor reads one file per agent, and requests a pass once its
``retry_at`` is due.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from dream_assets.model import iso, parse_ts, utc
from dream_assets.options import DreamOptions
from dream_assets.passes.report import PassReport


def retry_delay(attempt: int, *, initial: timedelta, multiplier: float, cap: timedelta) -> timedelta:
    """The wait before retry number ``attempt`` (1 = after the first deferral): ``initial * multiplier ** (attempt -
    1)``, at most ``cap``. Never overflows, whatever ``attempt``; a multiplier of 1 or less keeps ``initial``; a cap
    below ``initial`` never shortens it; a non-positive ``initial`` means no wait."""
    if initial <= timedelta(0):
        return timedelta(0)
    ceiling = max(cap, initial)
    steps = max(0, attempt - 1)
    if steps == 0 or not multiplier > 1.0:  # also NaN
        return initial
    if math.isinf(multiplier):
        return ceiling
    # Steps after which the ceiling is reached, compared as integers: a huge attempt count never becomes a float.
    ratio = ceiling / initial
    needed = math.ceil(math.log(ratio) / math.log(multiplier)) if ratio > 1 else 0
    if steps >= needed:
        return ceiling
    try:
        return min(ceiling, initial * multiplier**steps)
    except OverflowError:
        return ceiling


@dataclass(frozen=True)
class Deferral:
    attempt: int  # how many times in a row the pass has been deferred
    retry_at: datetime | None  # None: retries used up, the pass waits for the next cycle
    since: datetime  # when the first deferral of this run of deferrals happened

    def to_json(self) -> dict[str, Any]:
        return {"attempt": self.attempt, "retry_at": iso(self.retry_at), "since": iso(self.since)}


def previous_deferral(record: Mapping[str, Any] | None) -> Deferral | None:
    """The deferral of a pass's last outcome record, when its last outcome was a deferral."""
    if not record or record.get("status") != "deferred":
        return None
    return parse_deferral(record.get("deferral"))


def parse_deferral(data: Any) -> Deferral | None:
    """A deferral as ``Deferral.to_json`` wrote it; None when it is absent or cannot be read."""
    if not isinstance(data, Mapping):
        return None
    try:
        attempt = int(data.get("attempt") or 0)
        since = parse_ts(data.get("since"))
        retry_at = parse_ts(data["retry_at"]) if data.get("retry_at") else None
    except (TypeError, ValueError, OverflowError):
        return None
    return Deferral(max(0, attempt), retry_at, since) if attempt > 0 else None


def plan(previous: Deferral | None, options: DreamOptions, now: datetime) -> Deferral:
    """The deferral that follows ``previous`` (None: this is the first one in a row)."""
    now = utc(now)
    attempt = (previous.attempt if previous else 0) + 1
    since = previous.since if previous else now
    if attempt > options.BusyRetryMaxAttempts:
        return Deferral(attempt, None, since)
    delay = retry_delay(
        attempt,
        initial=options.BusyRetryInitialDelay,
        multiplier=options.BusyRetryMultiplier,
        cap=options.BusyRetryMaxDelay,
    )
    return Deferral(attempt, now + delay, since)


def note_deferral(
    report: PassReport, last_record: Mapping[str, Any] | None, options: DreamOptions, now: datetime
) -> Deferral:
    """Give a deferred report its deferral (``report.extra["deferral"]``) and say in its summary when it retries."""
    deferral = plan(previous_deferral(last_record), options, now)
    report.extra["deferral"] = deferral.to_json()
    report.counts["deferral_attempt"] = deferral.attempt
    if deferral.retry_at is not None:
        when = f"retries at {iso(deferral.retry_at)} (retry {deferral.attempt} of {options.BusyRetryMaxAttempts})"
    else:
        when = f"retries used up ({options.BusyRetryMaxAttempts}); it runs with the next cycle"
    report.summary = f"{report.pass_name} deferred — {when} — {report.reason}"
    report.info(f"deferred — {when}")
    return deferral


def retry_due(record: Mapping[str, Any] | None, now: datetime) -> datetime | None:
    """The retry time of a deferred pass (its last outcome record) when it is due at ``now``, else None."""
    return deferral_due(previous_deferral(record), now)


def deferral_due(deferral: Deferral | None, now: datetime) -> datetime | None:
    """The retry time of ``deferral`` when it is due at ``now``, else None (none, not yet, or retries used up)."""
    if deferral is None or deferral.retry_at is None or deferral.retry_at > utc(now):
        return None
    return deferral.retry_at
