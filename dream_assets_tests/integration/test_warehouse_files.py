"""The log warehouse's part files are written and read through DuckDB. Parts written by the earlier writer
(pyarrow's: fixtures/warehouse-pyarrow, 602 tool-call lines of one file archived at one instant, 601 of them dated
over four days and one undated) read as they were written, still deduplicate, and equal the parts written now."""

from __future__ import annotations

import json
import shutil
from datetime import UTC, datetime, timedelta
from pathlib import Path

from dream_assets.profile import AgentProfile
from dream_assets.store import warehouse

OLD = Path(__file__).resolve().parents[1] / "fixtures" / "warehouse-pyarrow"
T0 = datetime(2026, 11, 2, 8, 0, tzinfo=UTC)
ARCHIVED_AT = T0 + timedelta(days=5)


def _lines() -> list[str]:
    """The lines the fixture holds, as the earlier writer was given them."""
    dated = [
        json.dumps(
            {
                "timestamp": (T0 + timedelta(minutes=7 * i)).isoformat().replace("+00:00", "Z"),
                "sessionId": f"s{i % 3}",
                "tool": "grep",
                "n": i,
            }
        )
        for i in range(600)
    ]
    late = json.dumps({"timestamp": "2026-11-02T23:59:59.5+00:00", "tool": "ls", "text": "héllo"})
    return [*dated, "not json at all", late]


def _with_old_parts(profile: AgentProfile) -> None:
    shutil.copytree(OLD, profile.warehouse_dir / "tool-call")


def test_parts_of_the_earlier_writer_read_as_they_were_written(profile: AgentProfile) -> None:
    _with_old_parts(profile)
    records = [json.loads(line) for line in _lines() if line.startswith("{")]
    assert warehouse.days(profile, "tool-call") == [(T0 + timedelta(days=d)).date() for d in range(4)]
    for day in warehouse.days(profile, "tool-call"):
        expected = sorted(
            (r for r in records if r["timestamp"].startswith(day.isoformat())), key=lambda r: r["timestamp"]
        )
        assert warehouse.read_day(profile, "tool-call", day) == expected, day
    assert warehouse.read_unknown(profile, "tool-call") == ["not json at all"]
    window = warehouse.read_window_lines(profile, "tool-call", T0, T0 + timedelta(hours=1))
    assert [json.loads(raw)["n"] for _, raw in window] == list(range(9)) and {s for s, _ in window} == {"s1.jsonl"}


def test_lines_archived_again_over_parts_of_the_earlier_writer_add_nothing(profile: AgentProfile) -> None:
    _with_old_parts(profile)
    assert warehouse.archive_lines(profile, "tool-call", "s1.jsonl", _lines(), ARCHIVED_AT + timedelta(days=1)) == 0


def test_parts_written_now_hold_the_rows_the_earlier_writer_wrote(profile: AgentProfile, tmp_path: Path) -> None:
    _with_old_parts(profile)
    fresh = AgentProfile(tmp_path / "agents" / "fresh").ensure()
    assert warehouse.archive_lines(fresh, "tool-call", "s1.jsonl", _lines(), ARCHIVED_AT) == len(_lines())

    def rows(p: AgentProfile) -> list[dict]:
        return sorted(warehouse.iter_rows(p, "tool-call"), key=lambda r: r["line_key"])

    assert rows(fresh) == rows(profile)
