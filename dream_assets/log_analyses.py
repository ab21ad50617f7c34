"""Backfillable analyses over the log warehouse: for any past day, the time-windowed statistics with the window
ending that day. They read the warehouse (which outlives log retention) and write one Parquet file per day under
``analyses/<name>/date=YYYY-MM-DD/`` — rewriting a day replaces it, so re-running a partition is idempotent.
They never change the memory store or the skill catalog: history informs, the live passes act.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable
from datetime import UTC, date, datetime, time, timedelta
from pathlib import Path
from typing import Any

from dream_assets.file_safety import atomic_path
from dream_assets.model import parse_ts
from dream_assets.options import DreamOptions
from dream_assets.passes.registry import PASSES
from dream_assets.passes.skill_signals import usage_counts
from dream_assets.profile import AgentProfile
from dream_assets.store import warehouse
from dream_assets.store.line_batch import parse_json_line
from dream_assets.store.log_bytes import iter_raw_lines
from dream_assets.store.log_records import LOG_KINDS
from dream_assets.store.logs import log_files, read_archived
from dream_assets.store.parquet import read_parquet, write_parquet


def day_end(day: date) -> datetime:
    return datetime.combine(day + timedelta(days=1), time(0), tzinfo=UTC)


def sync_day_to_warehouse(profile: AgentProfile, day: date, now: datetime) -> dict[str, int]:
    """Copy the lines of ``day`` still in the JSONL logs into the warehouse (idempotent: known lines are not
    re-added)."""
    added: dict[str, int] = {}
    for kind in LOG_KINDS:
        items: list[tuple[str, str]] = []
        for path in log_files(profile, kind):
            for _, raw in iter_raw_lines(path):
                try:  # a line that is not a dated record is not this day's (retention archives it as raw text)
                    if parse_ts(parse_json_line(raw)["timestamp"]).date() == day:
                        items.append((path.name, raw))
                except (ValueError, KeyError, TypeError, OverflowError):
                    continue
        added[kind] = warehouse.archive_source_lines(profile, kind, items, now) if items else 0
    return added


def window_events(profile: AgentProfile, kind: str, end: datetime, window: timedelta) -> list[Any]:
    """The warehouse's records of ``kind`` in [end - window, end), as the log's event records (a row that no longer
    reads as a valid record is left out, by the live log reader's own rules)."""
    return read_archived(profile, kind, end - window, end).events


def skill_usage(profile: AgentProfile, options: DreamOptions, end: datetime) -> list[dict[str, Any]]:
    """Per skill: uses and sessions in the window ending at ``end``."""
    events = window_events(profile, "skill-usage", end, options.SkillUsageWindow)
    sessions: dict[str, set[str]] = defaultdict(set)
    for e in events:
        sessions[e.skill_name].add(e.session_id)
    return [{"skill": k, "uses": v, "sessions": len(sessions[k])} for k, v in sorted(usage_counts(events).items())]


#: Analysis name -> rows for the window ending at a day's end: each pass's own history analysis
#: (``PassSpec.history``), and skill usage (a signal the skill passes share, not one pass's).
ANALYSES: dict[str, Callable[[AgentProfile, DreamOptions, datetime], list[dict[str, Any]]]] = {
    **{spec.history.name: spec.history.compute for spec in PASSES if spec.history is not None},
    "skill_usage_history": skill_usage,
}


def analysis_path(profile: AgentProfile, name: str, day: date) -> Path:
    return profile.analyses_dir / name / f"date={day.isoformat()}" / "result.parquet"


def run_analysis(profile: AgentProfile, options: DreamOptions, name: str, day: date) -> list[dict[str, Any]]:
    """Compute one analysis for the window ending at the end of ``day`` and replace that day's file."""
    rows = ANALYSES[name](profile, options, day_end(day))
    path = analysis_path(profile, name, day)
    path.parent.mkdir(parents=True, exist_ok=True)
    # The columns of the first row, as a table of rows is read; a day without rows is a file with no rows.
    columns: dict[str, tuple[str, list[Any]]] = {"empty": ("BOOLEAN", [])}
    if rows:
        columns = {k: (_column_type(name, k, [r.get(k) for r in rows]), [r.get(k) for r in rows]) for k in rows[0]}
    with atomic_path(path) as tmp:  # DuckDB writes a file by its name
        write_parquet(tmp, columns)
    return rows


def _column_type(analysis: str, column: str, values: list[Any]) -> str:
    """The Parquet column type of an analysis's values (each column one kind of value; None is null)."""
    given = [v for v in values if v is not None]
    if not given:
        return "VARCHAR"
    if all(isinstance(v, bool) for v in given):
        return "BOOLEAN"
    if all(isinstance(v, int) and not isinstance(v, bool) for v in given):
        return "BIGINT"
    if all(isinstance(v, int | float) and not isinstance(v, bool) for v in given):
        return "DOUBLE"
    if all(isinstance(v, str) for v in given):
        return "VARCHAR"
    if all(isinstance(v, list) and all(isinstance(x, str) for x in v) for v in given):
        return "VARCHAR[]"
    kinds = sorted({type(v).__name__ for v in given})
    raise ValueError(f"analysis {analysis}: column {column!r} mixes {', '.join(kinds)} values; give it one kind")


def read_analysis(profile: AgentProfile, name: str, day: date) -> list[dict[str, Any]]:
    path = analysis_path(profile, name, day)
    if not path.exists():
        return []
    return [r for r in read_parquet(path) if "empty" not in r]
