"""The last outcome of each pass of one agent: what `dream status` and the cycle report show, and what keeps the
counts of a skipped pass.

Every run of a pass (completed, skipped, failed or deferred) writes ``pass-reports/<pass>.json`` in the profile,
atomically, while the pass's own lock is held, so the schedule, a change-gate sensor, `dream run` and the library
cycle all leave the same record. The pass ledger only records completions; this file records the last status with its
reason, counts, model usage and changes, and keeps the counts and usage of the last completed run.

A skipped pass carries the same numeric keys as its last completed run, so plots over time have no gaps: counts that
describe the input (live entries, skills, the open window's executions ...) keep the value that still holds — the live
memory and skill counts are measured again — and counts of what a run does (merged, archived, tokens ...) are 0.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Mapping
from datetime import datetime
from pathlib import Path
from typing import Any

from dream_assets.file_safety import UnreadableFile, atomic_write, read_json_file
from dream_assets.model import iso, parse_ts, utc
from dream_assets.passes.report import Change, PassReport
from dream_assets.profile import AgentProfile
from dream_assets.store.locks import path_lock

log = logging.getLogger("dream_assets.passes.outcome")

RECORD_VERSION = 1
#: Changes kept per record (the cycle report lists them; the change log keeps every undoable one).
KEEP_CHANGES = 500

#: Counts that describe the input or the corpus rather than what a run did: a skipped run keeps their last value.
LEVEL_COUNTS = frozenset(
    {
        "live",
        "live_after",
        "eligible",
        "withheld",
        "unreviewed",
        "clusters",
        "settled_clusters",
        "backlog",
        "skills",
        "sparse",
        "co_used_pairs",
        "prefix_clusters",
        "at_risk",
        "executions",
        "descriptions",
        "failure_patterns",
        "entries",
        "tiers",
        "kept_high_value",
        "at_floor",
    }
)


def load_outcome(profile: AgentProfile, pass_name: str) -> dict[str, Any] | None:
    """The last recorded outcome of ``pass_name``, or None (never run, or a record that cannot be read — logged)."""
    path = profile.pass_report_path(pass_name)
    try:
        data = read_json_file(path)
    except FileNotFoundError:
        return None
    except UnreadableFile as exc:
        log.warning("pass record %s; it is rewritten at the next run of %s", exc, pass_name)
        return None
    if not isinstance(data, dict) or data.get("pass") != pass_name or not isinstance(data.get("status"), str):
        log.warning("pass record %s is not a record of %s; it is rewritten at its next run", path, pass_name)
        return None
    return data


def load_outcomes(profile: AgentProfile, pass_names: list[str]) -> dict[str, dict[str, Any]]:
    return {name: rec for name in pass_names if (rec := load_outcome(profile, name)) is not None}


def fill_skipped_counts(
    report: PassReport,
    last_completed: Mapping[str, Any] | None,
    measured: Mapping[str, Callable[[], float]] | None = None,
) -> None:
    """Give a skipped report the numeric keys of the last completed run: level counts keep their value (measured
    again where ``measured`` can), the rest 0; model usage keys 0. Keys the skip already set are kept."""
    if not last_completed:
        return
    measured = measured or {}
    for key, value in (last_completed.get("counts") or {}).items():
        if key in report.counts:
            continue
        if key in LEVEL_COUNTS:
            getter = measured.get(key)
            try:
                report.counts[key] = getter() if getter is not None else value
            except Exception as exc:  # noqa: BLE001 - a count that cannot be measured now keeps its last value
                log.warning(
                    "%s: could not measure %s for the skipped run (%s); keeping %s",
                    report.pass_name,
                    key,
                    exc,
                    value,
                )
                report.counts[key] = value
        else:
            report.counts[key] = 0
    for key in last_completed.get("usage") or {}:
        report.usage.setdefault(key, 0.0)


def record_outcome(
    profile: AgentProfile,
    report: PassReport,
    *,
    now: datetime,
    cycle_id: str,
    measured: Mapping[str, Callable[[], float]] | None = None,
) -> PassReport:
    """Complete a skipped report's counts and write the pass's record. Never raises: a record that cannot be written
    is logged (the pass's own outcome stands)."""
    try:
        previous = load_outcome(profile, report.pass_name)
        last_completed = (previous or {}).get("last_completed")
        if report.status == "skipped":
            fill_skipped_counts(report, last_completed, measured)
        record = outcome_record(report, now=now, cycle_id=cycle_id)
        if report.status == "completed":
            record["last_completed"] = {
                "at": record["at"],
                "cycle_id": cycle_id,
                "counts": record["counts"],
                "usage": record["usage"],
            }
        elif last_completed:
            record["last_completed"] = last_completed
        _write_json(profile.pass_report_path(report.pass_name), record)
        _list_deferral(profile, report.pass_name, record)
    except Exception as exc:  # noqa: BLE001 - the status record is for people; it never fails the pass
        log.warning("could not record the outcome of %s for agent %s: %s", report.pass_name, profile.agent_id, exc)
    return report


def outcome_record(report: PassReport, *, now: datetime, cycle_id: str) -> dict[str, Any]:
    return {
        "version": RECORD_VERSION,
        "pass": report.pass_name,
        "status": report.status,
        "reason": report.reason,
        "summary": report.summary,
        "at": iso(utc(now)),
        "cycle_id": cycle_id,
        "counts": {k: _number(v) for k, v in sorted(report.counts.items())},
        "usage": {k: _number(v) for k, v in sorted(report.usage.items())},
        "model_calls": report.model_calls,
        "changes": [{"kind": c.kind, "target": c.target, "detail": c.detail} for c in report.changes[:KEEP_CHANGES]],
        "changes_total": len(report.changes),
        "fingerprint": report.extra.get("fingerprint"),
        # A deferred pass: which deferral in a row this is and when it is retried (passes/deferral.py).
        "deferral": report.extra.get("deferral"),
        # A pass deferred by a token budget: which budget, its figures, and when it can run (not retried before).
        "budget_deferral": report.extra.get("budget_deferral"),
    }


def deferred_index_path(profile: AgentProfile) -> Path:
    """The agent's deferred passes with their retry times: what the retry sensor reads (one small file per agent)."""
    return profile.root / "pass-reports" / "deferred-passes.json"


def load_deferred(profile: AgentProfile) -> dict[str, dict[str, Any]]:
    """Pass name -> the deferral of its last outcome (``attempt``, ``retry_at``, ``since``) with its ``summary``, for
    every pass of the agent whose last outcome was a deferral. Empty when there is none, or when the file cannot be
    read (logged; it is rewritten at the next outcome that changes it)."""
    path = deferred_index_path(profile)
    try:
        data = read_json_file(path)
    except FileNotFoundError:
        return {}
    except UnreadableFile as exc:
        log.warning("deferred-pass list %s; it is rewritten at the next deferral", exc)
        return {}
    passes = data.get("passes") if isinstance(data, dict) else None
    if not isinstance(passes, dict):
        log.warning("deferred-pass list %s has no 'passes' object; it is rewritten at the next deferral", path)
        return {}
    return {str(k): v for k, v in passes.items() if isinstance(v, dict)}


def _list_deferral(profile: AgentProfile, pass_name: str, record: Mapping[str, Any]) -> None:
    """Keep the deferred-pass list in step with the outcome just recorded: a deferral is listed, any other outcome
    removes the pass. Passes of one agent record outcomes concurrently, hence the lock around the rewrite."""
    path = deferred_index_path(profile)
    deferral = record.get("deferral") if record.get("status") == "deferred" else None
    if not isinstance(deferral, dict) and not path.exists():
        return  # the common case: nothing deferred, nothing listed
    with path_lock(path.with_name(f".{path.name}.lock"), timeout=30):
        listed = load_deferred(profile)
        if isinstance(deferral, dict):
            listed[pass_name] = {**deferral, "summary": record.get("summary") or ""}
        elif listed.pop(pass_name, None) is None:
            return  # not listed: nothing to remove
        if listed:
            _write_json(path, {"version": RECORD_VERSION, "passes": dict(sorted(listed.items()))})
        else:
            path.unlink(missing_ok=True)


def changes_of(record: Mapping[str, Any]) -> list[Change]:
    return [
        Change(str(c.get("kind", "")), str(c.get("target", "")), str(c.get("detail", "")))
        for c in record.get("changes") or []
        if isinstance(c, dict)
    ]


def recorded_at(record: Mapping[str, Any]) -> datetime | None:
    try:
        return parse_ts(record.get("at"))
    except (TypeError, ValueError):
        return None


def _number(value: Any) -> float | int:
    value = float(value)
    return int(value) if value.is_integer() else value


def _write_json(path: Path, payload: Mapping[str, Any]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    atomic_write(path, json.dumps(payload, indent=2, sort_keys=True))
