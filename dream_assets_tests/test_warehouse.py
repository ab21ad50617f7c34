"""The log warehouse: day partitions by event time, idempotent writes, nothing dropped."""

from __future__ import annotations

import json
import threading
from datetime import UTC, date, datetime, timedelta
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from dream_assets.profile import AgentProfile
from dream_assets.store import warehouse
from dream_assets.store.warehouse import (
    WarehouseError,
    archive_lines,
    archive_source_lines,
    days,
    import_jsonl,
    iter_rows,
    read_day,
    read_unknown,
    read_window,
)

T0 = datetime(2024, 5, 1, 23, 0, tzinfo=UTC)
NOW = datetime(2024, 6, 1, tzinfo=UTC)



def line(ts: datetime | str, n: int, session: str = "s1") -> str:
    stamp = ts if isinstance(ts, str) else ts.isoformat().replace("+00:00", "Z")
    return json.dumps({"timestamp": stamp, "sessionId": session, "tool": "shell", "success": True, "n": n})


def test_lines_are_partitioned_by_their_own_utc_event_day(profile: AgentProfile) -> None:
    lines = [line(T0 + timedelta(minutes=50 * i), i) for i in range(4)]   # 23:00, 23:50, 00:40, 01:30
    assert archive_lines(profile, "tool-call", "s1.jsonl", lines, NOW) == 4
    assert days(profile, "tool-call") == [date(2024, 5, 1), date(2024, 5, 2)]
    assert [r["n"] for r in read_day(profile, "tool-call", date(2024, 5, 1))] == [0, 1]
    assert [r["n"] for r in read_day(profile, "tool-call", date(2024, 5, 2))] == [2, 3]
    assert (profile.warehouse_dir / "tool-call" / "date=2024-05-02").is_dir()


def test_a_non_utc_timestamp_is_filed_under_its_utc_day(profile: AgentProfile) -> None:
    archive_lines(profile, "tool-call", "s1.jsonl", [line("2024-05-02T01:00:00+02:00", 1)], NOW)
    assert days(profile, "tool-call") == [date(2024, 5, 1)]


def test_archiving_the_same_lines_again_adds_no_rows(profile: AgentProfile) -> None:
    lines = [line(T0 + timedelta(hours=i), i) for i in range(30)] + ["not json"]
    assert archive_lines(profile, "tool-call", "s1.jsonl", lines, NOW) == 31
    assert archive_lines(profile, "tool-call", "s1.jsonl", lines, NOW + timedelta(days=1)) == 0
    assert archive_lines(profile, "tool-call", "s1.jsonl", lines[10:] + [line(T0, 99)], NOW) == 1
    keys = [r["line_key"] for r in iter_rows(profile, "tool-call")]
    assert len(keys) == len(set(keys)) == 32


def test_idempotence_holds_across_batches_and_evicted_partitions(profile: AgentProfile,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(warehouse, "BATCH_ROWS", 7)
    monkeypatch.setattr(warehouse, "CACHED_PARTITIONS", 1)
    lines = [line(T0 + timedelta(hours=5 * i), i) for i in range(60)]   # 13 days, many small parts
    interleaved = lines[::2] + lines[1::2]                                # revisits partitions
    assert archive_lines(profile, "tool-call", "s1.jsonl", interleaved, NOW) == 60
    assert archive_lines(profile, "tool-call", "s1.jsonl", lines, NOW) == 0
    assert sorted(r["n"] for r in read_window(profile, "tool-call", T0, T0 + timedelta(days=30))) == list(range(60))


def test_lines_that_cannot_be_dated_are_kept_in_the_unknown_partition(profile: AgentProfile) -> None:
    undated = ["{torn", '{"sessionId": "s1"}', '{"timestamp": "soon"}', "[1, 2]"]
    assert archive_lines(profile, "feedback", "s1.jsonl", undated + ["", "   "], NOW) == 4
    assert sorted(read_unknown(profile, "feedback")) == sorted(undated)
    assert days(profile, "feedback") == []
    rows = list(iter_rows(profile, "feedback"))
    assert all(r["event_ts"] is None for r in rows)


def test_rows_carry_their_origin_and_archive_time(profile: AgentProfile) -> None:
    raw = '{"timestamp":"2024-05-01T10:00:00.250Z","skillName":"mcp/email"}'
    archive_lines(profile, "skill-usage", "cli-session.jsonl", [raw], NOW)
    (row,) = list(iter_rows(profile, "skill-usage"))
    assert row["raw"] == raw
    assert row["kind"] == "skill-usage" and row["source"] == "cli-session.jsonl"
    assert row["session_id"] == "cli-session"     # per-session logs: the file name names the session
    assert row["event_ts"] == datetime(2024, 5, 1, 10, 0, 0, 250_000, tzinfo=UTC)
    assert row["archived_at"] == NOW
    assert row["line_key"] == warehouse.line_key("skill-usage", "cli-session.jsonl", raw)
    part = next((profile.warehouse_dir / "skill-usage").rglob("part-*.parquet"))
    assert str(pq.read_schema(part).field("event_ts").type) == "timestamp[us, tz=UTC]"


def test_the_same_line_in_two_files_is_two_rows(profile: AgentProfile) -> None:
    same = line(T0, 1)
    n = archive_source_lines(profile, "tool-call", [("a.jsonl", same), ("b.jsonl", same), ("a.jsonl", same)], NOW)
    assert n == 2
    assert sorted(r["source"] for r in iter_rows(profile, "tool-call")) == ["a.jsonl", "b.jsonl"]


def test_read_window_is_start_inclusive_end_exclusive_and_time_ordered(profile: AgentProfile) -> None:
    lines = [line(T0 + timedelta(hours=h), h) for h in (30, 0, 2, 1, 26)]
    archive_lines(profile, "tool-call", "s1.jsonl", lines, NOW)
    got = read_window(profile, "tool-call", T0 + timedelta(hours=1), T0 + timedelta(hours=26))
    assert [r["n"] for r in got] == [1, 2]
    assert read_window(profile, "tool-call", T0, T0) == []


def test_bytes_that_are_not_utf8_are_kept_visibly(profile: AgentProfile) -> None:
    bad = b'{"timestamp":"2024-05-01T00:00:00Z","tool":"\xff"}'.decode("utf-8", "surrogateescape")
    assert archive_lines(profile, "tool-call", "s1.jsonl", [bad], NOW) == 1
    (row,) = list(iter_rows(profile, "tool-call"))
    assert "\\xff" in row["raw"]
    assert archive_lines(profile, "tool-call", "s1.jsonl", [bad], NOW) == 0


def test_import_of_a_historical_file_streams_it_and_is_idempotent(profile: AgentProfile, tmp_path: Path) -> None:
    history = tmp_path / "old-tier-routing.jsonl"
    history.write_text("\n".join(line(T0 - timedelta(days=i), i) for i in range(40)) + "\n{torn")
    assert import_jsonl(profile, "tier-routing", history, NOW) == 41
    assert import_jsonl(profile, "tier-routing", history, NOW) == 0
    assert len(days(profile, "tier-routing")) == 40
    assert read_unknown(profile, "tier-routing") == ["{torn"]
    with pytest.raises(WarehouseError, match="no such file"):
        import_jsonl(profile, "tier-routing", tmp_path / "missing.jsonl", NOW)


def test_concurrent_archives_of_the_same_lines_store_them_once(profile: AgentProfile) -> None:
    lines = [line(T0 + timedelta(minutes=i), i) for i in range(500)]
    added: list[int] = []
    threads = [threading.Thread(target=lambda: added.append(archive_lines(profile, "tool-call", "s.jsonl", lines,
                                                                          NOW))) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sum(added) == 500
    assert len(list(iter_rows(profile, "tool-call"))) == 500


@pytest.mark.parametrize("kind", ["", "../memories", "Tool Call", "a/b"])
def test_a_kind_that_is_not_a_plain_log_name_is_refused(profile: AgentProfile, kind: str) -> None:
    with pytest.raises(WarehouseError, match="invalid warehouse kind"):
        archive_lines(profile, kind, "x.jsonl", [line(T0, 1)], NOW)


def test_an_empty_warehouse_reads_empty(profile: AgentProfile) -> None:
    assert days(profile, "wisp-executions") == []
    assert read_day(profile, "wisp-executions", date(2024, 5, 1)) == []
    assert read_window(profile, "wisp-executions", T0, NOW) == []
    assert read_unknown(profile, "wisp-executions") == []
    assert list(iter_rows(profile, "wisp-executions")) == []
