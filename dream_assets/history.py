"""Backfillable analyses over the log warehouse: for any past day, the time-windowed statistics with the window
ending that day. They read the warehouse (which outlives log retention) and write one Parquet file per day under
``analyses/<name>/date=YYYY-MM-DD/`` — rewriting a day replaces it, so re-running a partition is idempotent.
They never change the memory store or the skill catalog: history informs, the live passes act.
"""

from __future__ import annotations

import json
import os
import tempfile
from collections import Counter, defaultdict
from collections.abc import Callable
from datetime import UTC, date, datetime, time, timedelta
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from dream_assets.model import parse_ts
from dream_assets.options import DreamOptions
from dream_assets.profile import AgentProfile
from dream_assets.store import warehouse
from dream_assets.store.logs import LOG_KINDS, iter_raw_lines, log_files
from dream_assets.text.tokens import content_tokens


def day_end(day: date) -> datetime:
    return datetime.combine(day + timedelta(days=1), time(0), tzinfo=UTC)


def sync_day_to_warehouse(profile: AgentProfile, day: date, now: datetime) -> dict[str, int]:
    """Copy the lines of ``day`` still in the JSONL logs into the warehouse (idempotent: known lines are not re-added)."""
    added: dict[str, int] = {}
    for kind in LOG_KINDS:
        items: list[tuple[str, str]] = []
        for path in log_files(profile, kind):
            for _, raw in iter_raw_lines(path):
                try:
                    if parse_ts(json.loads(raw)["timestamp"]).date() == day:
                        items.append((path.name, raw))
                except (ValueError, KeyError, TypeError):
                    continue
        added[kind] = warehouse.archive_source_lines(profile, kind, items, now) if items else 0
    return added


def wisp_patterns(profile: AgentProfile, options: DreamOptions, end: datetime) -> list[dict[str, Any]]:
    """Per wisp description in the window ending at ``end``: runs, failures, success rate, failing steps, and whether it
    qualifies as a failure pattern (>= WispFailureMinFrequency failures) or a promotion candidate."""
    rows = warehouse.read_window(profile, "wisp-executions", end - options.WispAnalysisWindow, end)
    groups: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for r in rows:
        groups[str(r.get("description", ""))].append(r)
    out = []
    for description, runs in sorted(groups.items()):
        failures = [r for r in runs if not r.get("success")]
        rate = (len(runs) - len(failures)) / len(runs)
        out.append({
            "description": description, "runs": len(runs), "failures": len(failures), "success_rate": rate,
            "failed_steps": json.dumps(sorted(Counter(str(r.get("failedStep")) for r in failures if r.get("failedStep")).items())),
            "skills": json.dumps(sorted({str(r.get("skillName")) for r in runs if r.get("skillName")})),
            "failure_pattern": len(failures) >= options.WispFailureMinFrequency,
            "promotion_candidate": len(runs) >= options.WispSuccessMinFrequency and rate > options.WispSuccessMinRate,
        })
    return out


def tier_stats(profile: AgentProfile, options: DreamOptions, end: datetime) -> list[dict[str, Any]]:
    rows = warehouse.read_window(profile, "tier-routing", end - options.TierRoutingReviewWindow, end)
    groups: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for r in rows:
        groups[str(r.get("tier", ""))].append(r)
    out = []
    for tier, events in sorted(groups.items()):
        outcomes = Counter(str(e.get("outcome")) for e in events)
        latencies = [float(e["latencyMs"]) for e in events if e.get("latencyMs") is not None]
        out.append({"tier": tier, "events": len(events), "success": outcomes["success"], "failure": outcomes["failure"],
                    "escalated": outcomes["escalated"], "success_rate": outcomes["success"] / len(events),
                    "mean_latency_ms": sum(latencies) / len(latencies) if latencies else None,
                    "cost_usd": sum(float(e.get("costUsd") or 0) for e in events)})
    return out


def skill_usage(profile: AgentProfile, options: DreamOptions, end: datetime) -> list[dict[str, Any]]:
    rows = warehouse.read_window(profile, "skill-usage", end - options.SkillUsageWindow, end)
    uses = Counter(str(r.get("skillName")) for r in rows)
    sessions: dict[str, set[str]] = defaultdict(set)
    for r in rows:
        sessions[str(r.get("skillName"))].add(str(r.get("sessionId")))
    return [{"skill": k, "uses": v, "sessions": len(sessions[k])} for k, v in sorted(uses.items())]


def recurring_requests(profile: AgentProfile, options: DreamOptions, end: datetime) -> list[dict[str, Any]]:
    """Skill-gap and preference mining over archived conversations: terms of the first user message per session that
    recur in >= 2 sessions of the window (the spec's "Recurring topics" signal), with the sessions they came from."""
    rows = warehouse.read_window(profile, "conversation", end - options.SkillUsageWindow, end)
    first: dict[str, str] = {}
    for r in rows:
        if r.get("role") == "user" and r.get("sessionId") not in first:
            first[str(r["sessionId"])] = str(r.get("content", ""))
    sessions_by_term: dict[str, set[str]] = defaultdict(set)
    for sid, text in first.items():
        for term in content_tokens(text):
            sessions_by_term[term].add(sid)
    return [{"term": t, "sessions": len(s), "session_ids": json.dumps(sorted(s))}
            for t, s in sorted(sessions_by_term.items(), key=lambda kv: (-len(kv[1]), kv[0])) if len(s) >= 2]


ANALYSES: dict[str, Callable[[AgentProfile, DreamOptions, datetime], list[dict[str, Any]]]] = {
    "wisp_failure_history": wisp_patterns,
    "tier_routing_history": tier_stats,
    "skill_usage_history": skill_usage,
    "recurring_request_history": recurring_requests,
}


def analysis_path(profile: AgentProfile, name: str, day: date) -> Path:
    return profile.analyses_dir / name / f"date={day.isoformat()}" / "result.parquet"


def run_analysis(profile: AgentProfile, options: DreamOptions, name: str, day: date) -> list[dict[str, Any]]:
    """Compute one analysis for the window ending at the end of ``day`` and replace that day's file."""
    rows = ANALYSES[name](profile, options, day_end(day))
    path = analysis_path(profile, name, day)
    path.parent.mkdir(parents=True, exist_ok=True)
    table = pa.Table.from_pylist(rows) if rows else pa.table({"empty": pa.array([], pa.bool_())})
    fd, tmp = tempfile.mkstemp(dir=path.parent, suffix=".parquet.tmp")
    os.close(fd)
    pq.write_table(table, tmp)
    os.replace(tmp, path)
    return rows


def read_analysis(profile: AgentProfile, name: str, day: date) -> list[dict[str, Any]]:
    path = analysis_path(profile, name, day)
    if not path.exists():
        return []
    rows = pq.read_table(path).to_pylist()
    return [r for r in rows if "empty" not in r]


