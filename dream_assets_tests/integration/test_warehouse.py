"""The log warehouse: day partitions by event time, idempotent writes, nothing dropped."""

from __future__ import annotations

import hashlib
import json
import tempfile
import threading
from datetime import UTC, date, datetime, timedelta
from pathlib import Path
from unittest import mock

import duckdb
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dream_assets.profile import AgentProfile
from dream_assets.store import line_batch, warehouse
from dream_assets.store.log_bytes import iter_lines_between
from dream_assets.store.parquet import read_parquet
from dream_assets.store.warehouse import (
    WarehouseError,
    archive_file_ranges,
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
    lines = [line(T0 + timedelta(minutes=50 * i), i) for i in range(4)]  # 23:00, 23:50, 00:40, 01:30
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


def test_idempotence_holds_across_batches_and_evicted_partitions(
    profile: AgentProfile, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(warehouse, "BATCH_ROWS", 7)
    monkeypatch.setattr(warehouse, "CACHED_PARTITIONS", 1)
    lines = [line(T0 + timedelta(hours=5 * i), i) for i in range(60)]  # 13 days, many small parts
    interleaved = lines[::2] + lines[1::2]  # revisits partitions
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
    assert row["session_id"] == "cli-session"  # per-session logs: the file name names the session
    assert row["event_ts"] == datetime(2024, 5, 1, 10, 0, 0, 250_000, tzinfo=UTC)
    assert row["archived_at"] == NOW
    assert row["line_key"] == warehouse.line_key("skill-usage", "cli-session.jsonl", raw)
    part = next((profile.warehouse_dir / "skill-usage").rglob("part-*.parquet"))
    with duckdb.connect() as con:
        types = dict(con.execute(f"SELECT name, type FROM parquet_schema('{part}')").fetchall())
        meta = con.execute(f"SELECT name, logical_type FROM parquet_schema('{part}')").fetchall()
    # A timestamp adjusted to UTC, in microseconds, as every part of the warehouse has had it.
    assert types["event_ts"] == "INT64" and "isAdjustedToUTC=1" in str(dict(meta)["event_ts"])
    assert "MICROS" in str(dict(meta)["event_ts"])


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


def test_a_session_id_escaping_a_lone_surrogate_is_kept_as_its_escape(profile: AgentProfile) -> None:
    """``"sessionId": "\\ud800"`` decodes to text no UTF-8 column holds: the line is archived (never the whole batch
    refused, which failed the pass reading the log), its session id spelled as the escape it was written with."""
    lines = [
        '{"timestamp": "2024-05-01T00:00:00Z", "sessionId": "\\ud800"}',
        '{"timestamp": "\\ud800", "sessionId": "\\ud800"}',
    ]
    assert archive_lines(profile, "conversation", "s1.jsonl", lines, NOW) == 2
    assert {row["session_id"] for row in iter_rows(profile, "conversation")} == {"\\ud800"}


def tier_line(ts: datetime, n: int) -> str:
    return json.dumps(
        {
            "timestamp": ts.isoformat().replace("+00:00", "Z"),
            "sessionId": "s1",
            "tier": "small",
            "taskKind": "summary",
            "outcome": "success",
            "latencyMs": n,
        }
    )


def test_import_of_a_historical_file_streams_it_and_is_idempotent(profile: AgentProfile, tmp_path: Path) -> None:
    history = tmp_path / "old-tier-routing.jsonl"
    history.write_text("\n".join(tier_line(T0 - timedelta(days=i), i) for i in range(40)) + "\n{torn")
    first = import_jsonl(profile, "tier-routing", history, NOW)
    assert (first.imported, first.valid, first.malformed, first.wrong_kind) == (40, 40, 1, 0)
    assert len(first.problems) == 1 and first.problems[0].startswith("old-tier-routing.jsonl:41: ")
    again = import_jsonl(profile, "tier-routing", history, NOW)
    assert (again.imported, again.already_there, again.malformed) == (0, 40, 1)
    assert len(days(profile, "tier-routing")) == 40
    assert read_unknown(profile, "tier-routing") == []  # a line that is not a record is not imported
    with pytest.raises(WarehouseError, match="no such file"):
        import_jsonl(profile, "tier-routing", tmp_path / "missing.jsonl", NOW)


def test_import_takes_only_records_of_its_kind_and_counts_the_rest(profile: AgentProfile, tmp_path: Path) -> None:
    wisp = {"timestamp": "2025-03-01T10:00:00Z", "wispId": "w1", "description": "Sync CRM", "success": False}
    lines = [
        json.dumps(wisp),  # 1 imported
        line(T0, 1),  # 2 a tool-call record
        "not json at all",  # 3 malformed
        json.dumps({k: v for k, v in wisp.items() if k != "wispId"}),  # 4 a required field is missing
        json.dumps({**wisp, "success": "yes"}),  # 5 a field of the wrong type
        json.dumps({**wisp, "timestamp": "yesterday"}),  # 6 no readable timestamp
        "[" * 100 + "]" * 100,  # 7 nested too deeply
        "",  #   blank: not counted
        json.dumps({**wisp, "wispId": "w2", "description": "x" * 2000}),  # 9 longer than the limit
        json.dumps({**wisp, "wispId": "w3", "timestamp": "2025-03-02T10:00:00Z"}),  # 10 imported
    ]
    path = tmp_path / "wisps.jsonl"
    path.write_bytes("\n".join(lines).encode() + b"\n" + b'{"wispId":"\xff"}\n')  # 11 not UTF-8
    with mock.patch.object(line_batch, "MAX_LINE_BYTES", 1000):
        result = import_jsonl(profile, "wisp-executions", path, NOW)
    assert (result.imported, result.malformed, result.wrong_kind) == (2, 7, 1)
    assert result.other_kinds == {"tool-call": 1}
    where = [p.split(": ", 1)[0] for p in result.problems]
    assert where == [f"wisps.jsonl:{n}" for n in (2, 3, 4, 5, 6, 7, 9, 11)]
    assert "a tool-call record, not a wisp-executions record" in result.problems[0]
    assert "'wispId' is missing" in result.problems[2] and "'success' must be true or false" in result.problems[3]
    assert "1,000-byte limit" in result.problems[6] and "not valid UTF-8" in result.problems[7]
    assert [r["wispId"] for r in read_day(profile, "wisp-executions", date(2025, 3, 1))] == ["w1"]
    assert [r["wispId"] for r in read_day(profile, "wisp-executions", date(2025, 3, 2))] == ["w3"]
    assert read_unknown(profile, "wisp-executions") == []


def test_import_of_an_unknown_kind_is_refused_before_anything_is_written(profile: AgentProfile, tmp_path: Path) -> None:
    path = tmp_path / "x.jsonl"
    path.write_text(line(T0, 1) + "\n")
    with pytest.raises(WarehouseError) as err:
        import_jsonl(profile, "tool-calls", path, NOW)
    assert "unknown log kind 'tool-calls'" in str(err.value)
    assert all(k in str(err.value) for k in ("skill-usage", "tool-call", "wisp-executions", "conversation"))
    assert not (profile.warehouse_dir / "tool-calls").exists()
    with pytest.raises(WarehouseError, match="not a file"):
        import_jsonl(profile, "tool-call", tmp_path, NOW)


def test_importing_lines_retention_already_archived_adds_nothing(profile: AgentProfile, tmp_path: Path) -> None:
    path = tmp_path / "s7.jsonl"
    path.write_text("".join(line(T0 + timedelta(minutes=i), i, session="s7") + "\n" for i in range(5)))
    assert archive_file_ranges(profile, "tool-call", [(path, 0, None)], NOW).added == 5
    result = import_jsonl(profile, "tool-call", path, NOW)
    assert (result.imported, result.already_there) == (0, 5)


def test_concurrent_archives_of_the_same_lines_store_them_once(profile: AgentProfile) -> None:
    lines = [line(T0 + timedelta(minutes=i), i) for i in range(500)]
    added: list[int] = []
    threads = [
        threading.Thread(target=lambda: added.append(archive_lines(profile, "tool-call", "s.jsonl", lines, NOW)))
        for _ in range(4)
    ]
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


# --- bulk reading: the same rows as reading every line with json.loads -------------------------------------

# Lines in the shape the log writer emits (or json.dumps with its default separators): read in bulk.
BULK_READABLE = [
    '{"timestamp":"2024-05-01T10:00:00Z","sessionId":"s1","tool":"shell","success":true,"durationMs":12.5}',
    '{"timestamp": "2024-05-01T10:00:00.5Z", "sessionId": "s2", "tool": "shell", "n": 1}',
    '{"timestamp":"2024-05-01T23:59:59.999999+00:00","wispId":"w1","steps":["fetch","parse"],"error":null}',
    '{"timestamp":"2024-05-02T00:00:00Z","sessionId":"","kind":"Note"}',
    '{"timestamp":"2024-05-02T08:30:00.123Z","sessionId":"s3","text":"naïve café ✓, 1 < 2"}',
    '{"timestamp":"2024-05-02T08:30:00Z","content":"say \\"hi\\"\\n\\u00e9"}',
    '{"timestamp":"2024-05-02T08:30:00Z"}\r',
    '{"timestamp":"2024-05-01T10:00:00Z","meta":{"sessionId":"inner"}}',  # not the line's session
]
# Lines whose fields the bulk reading cannot vouch for: each is read with json.loads, whatever it holds.
READ_ALONE = [
    '{"sessionId":"s1","timestamp":"2024-05-01T10:00:00Z"}',  # keys in another order
    '{"timestamp":"2024-05-01T10:00:00Z","timestamp":"2024-06-01T10:00:00Z"}',  # Python keeps the last
    '{"timestamp":"2024-05-01T10:00:00Z","sessionId":"a","sessionId":"b"}',
    '{"timestamp":"2024-05-01T10:00:00Z","time\\u0073tamp":"2024-07-01T00:00:00Z"}',  # the same key, escaped
    '{"timestamp":"2024-05-01T10:00:00Z","sessi\\u006fnId":"s9"}',
    '{"timestamp":"2024-05-01T10:00:00Z","sessionId":5}',
    '{"timestamp":"2024-05-01T10:00:00Z","sessionId":"s\\u0031"}',
    '{"timestamp":"2024-05-01T10:00:00Z","x":1,}',  # not JSON to Python
    '{"timestamp":"2024-05-01T10:00:00Z","x":[1,2,]}',
    '{"timestamp":"2024-05-01T10:00:00Z","x":nan}',
    '{"timestamp":"2024-05-01T10:00:00Z","x":-NaN}',
    '{"timestamp":"2024-05-01T10:00:00Z","x":inf}',
    '{"timestamp":"2024-05-01T10:00:00Z","x":[NaN, Infinity, -Infinity]}',  # JSON to Python
    '{"timestamp":"2024-05-01T10:00:00Z","wispId":"w1","descr',  # torn by a crash
    '{"timestamp":"2024-05-01T10:00:00Z"} {"x":1}',
    '{"timestamp":"2024-05-01T10:00:00Z","x":"tab\there"}',
    '{"timestamp":"2024-05-01T10:00:00Z","x":"\\ud800"}',
    '{"timestamp":"2024-05-01T10:00:00Z","x":01}',
    '{"timestamp":"2024-02-30T10:00:00Z"}',  # no such day
    '{"timestamp":"2024-05-01T10:00:00.1234567Z"}',
    '{"timestamp":"2024-05-01T12:00:00+02:00"}',
    '{"timestamp":"2024-05-01T10:00:00z"}',
    '{"timestamp":"2024-05-01 10:00:00Z"}',
    '{"timestamp":" 2024-05-01T10:00:00Z"}',
    '{"timestamp":"0999-05-01T10:00:00Z"}',
    '{"timestamp":1714557600}',
    '{"timestamp":"soon"}',
    '["2024-05-01T10:00:00Z"]',
    '\ufeff{"timestamp":"2024-05-01T10:00:00Z"}',
    b'{"timestamp":"2024-05-01T10:00:00Z","tool":"\xff"}'.decode("utf-8", "surrogateescape"),
    "{torn",
    "not json",
]
BLANK = ["", "   ", "\t", "\x0c"]


def _archived(root: Path, kind: str, *, bulk: bool, archive) -> tuple[int, dict[str, list[tuple]]]:
    """Archive with the bulk reading on (for every batch) or off (every line read alone with json.loads)."""
    profile = AgentProfile(root).ensure()
    with mock.patch.object(warehouse, "FAST_PATH_MIN_LINES", 0 if bulk else 10**9):
        added = archive(profile)
    return added, _partitions(profile, kind)


def _partitions(profile: AgentProfile, kind: str) -> dict[str, list[tuple]]:
    """Each partition's rows, in the order its part files hold them."""
    found: dict[str, list[tuple]] = {}
    for part in sorted((profile.warehouse_dir / kind).glob("date=*/part-*.parquet")):
        found.setdefault(part.parent.name, []).extend(
            (r["line_key"], r["source"], r["session_id"], r["event_ts"], r["raw"], r["archived_at"])
            for r in read_parquet(part)
        )
    return found


def _bulk_and_one_by_one(tmp_path: Path, kind: str, archive) -> tuple[tuple, tuple]:
    return (
        _archived(tmp_path / "bulk", kind, bulk=True, archive=archive),
        _archived(tmp_path / "one-by-one", kind, bulk=False, archive=archive),
    )


def test_lines_in_the_writers_shape_are_read_in_bulk_and_the_others_one_by_one() -> None:
    with line_batch.connect() as con:
        lines = BULK_READABLE + READ_ALONE
        raw = line_batch.Lines.of([text.encode("utf-8", "surrogateescape") for text in lines])
        fast = line_batch.classify(con, raw).fast.tolist()
    assert fast == [True] * len(BULK_READABLE) + [False] * len(READ_ALONE)


def test_bulk_reading_files_every_line_where_reading_it_alone_would(tmp_path: Path) -> None:
    lines = BULK_READABLE + READ_ALONE + BLANK
    items = [(source, text) for text in lines for source in ("s1.jsonl", "other.jsonl")]  # per-session logs
    bulk, one_by_one = _bulk_and_one_by_one(
        tmp_path, "tool-call", lambda p: archive_source_lines(p, "tool-call", items, NOW)
    )
    assert bulk == one_by_one
    added, partitions = bulk
    assert added == 2 * (len(lines) - len(BLANK))
    assert set(partitions) == {
        "date=2024-05-01",
        "date=2024-05-02",
        "date=2024-06-01",
        "date=2024-07-01",
        "date=0999-05-01",
        "date=unknown",
    }


def test_bulk_and_line_by_line_keys_are_the_same_so_earlier_archives_stay_idempotent(
    profile: AgentProfile,
) -> None:
    lines = BULK_READABLE + READ_ALONE
    with mock.patch.object(warehouse, "FAST_PATH_MIN_LINES", 10**9):
        assert archive_lines(profile, "tool-call", "s1.jsonl", lines, NOW) == len(lines)
    with mock.patch.object(warehouse, "FAST_PATH_MIN_LINES", 0):
        assert archive_lines(profile, "tool-call", "s1.jsonl", lines, NOW + timedelta(days=1)) == 0
        assert archive_lines(profile, "tool-call", "s2.jsonl", BULK_READABLE, NOW) == len(BULK_READABLE)
    for row in iter_rows(profile, "tool-call"):
        original = next(text for text in lines if warehouse._storable(text) == row["raw"])
        data = b"tool-call\0" + row["source"].encode() + b"\0" + original.encode("utf-8", "surrogateescape")
        assert row["line_key"] == hashlib.sha256(data).hexdigest()


def test_a_large_batch_keeps_every_line_with_its_own_fields(profile: AgentProfile) -> None:
    # Large enough that DuckDB reads it in several chunks: each row must still get its own line's fields.
    lines = [line(T0 + timedelta(seconds=37 * i), i, session=f"s{i % 7}") for i in range(20_000)]
    lines[123] = "{torn"
    assert archive_lines(profile, "tier-routing", "tier-routing.jsonl", lines, NOW) == 20_000
    rows = list(iter_rows(profile, "tier-routing"))
    assert len(rows) == 20_000
    for row in rows:
        if row["raw"] == "{torn":
            assert row["event_ts"] is None and row["session_id"] is None
            continue
        record = json.loads(row["raw"])
        assert row["event_ts"] == T0 + timedelta(seconds=37 * record["n"])
        assert row["session_id"] == record["sessionId"] == f"s{record['n'] % 7}"


def _log_bytes() -> bytes:
    body = [text.encode("utf-8", "surrogateescape") for text in BULK_READABLE + READ_ALONE + BLANK]
    body += [line(T0 + timedelta(minutes=i), i).encode() for i in range(50)]
    body += [b'{"timestamp":"2024-05-01T10:00:00Z","tool":"\xc3"}', b"\xff\xfe", b"x" * 300]
    return b"\n".join(body) + b"\r\n" + b'{"timestamp":"2024-05-03T00:00:00Z","partial":tr'  # no final newline


@pytest.mark.parametrize("block_bytes", [16 << 20, 97])  # 97: lines straddle blocks, some are longer than one
def test_archiving_byte_ranges_of_a_file_equals_archiving_its_lines(tmp_path: Path, block_bytes: int) -> None:
    log = tmp_path / "s7.jsonl"
    log.write_bytes(_log_bytes())
    size = log.stat().st_size
    middle = log.read_bytes().index(b"\n", size // 2) + 1
    ranges = [(log, 0, middle), (log, middle, size - 7), (log, size - 7, None)]  # the last two end mid-line
    expected_lines = [list(iter_lines_between(log, start, end or size)) for _, start, end in ranges]
    with mock.patch.object(warehouse, "BATCH_BYTES", block_bytes):
        result = [None]

        def by_ranges(p: AgentProfile) -> int:
            result[0] = archive_file_ranges(p, "feedback", ranges, NOW)
            return result[0].added

        by_blocks = _archived(tmp_path / "ranges", "feedback", bulk=True, archive=by_ranges)
    by_lines = _archived(
        tmp_path / "lines",
        "feedback",
        bulk=False,
        archive=lambda p: archive_source_lines(
            p, "feedback", [(log.name, text) for texts in expected_lines for text in texts], NOW
        ),
    )
    # Tiny blocks make many parts per partition, so compare each partition's rows whatever part holds them.
    assert by_blocks[0] == by_lines[0]
    assert {day: sorted(rows, key=repr) for day, rows in by_blocks[1].items()} == {
        day: sorted(rows, key=repr) for day, rows in by_lines[1].items()
    }
    assert result[0].lines == [len(texts) for texts in expected_lines]
    assert result[0].errors == [None, None, None]


def test_many_small_files_archive_as_their_lines_would_each_with_its_own_counts_and_line_numbers(
    tmp_path: Path,
) -> None:
    # Small files are read whole and split into lines together; every file's count, error and line numbers stay its
    # own, and the rows are the ones archiving each file's lines would write.
    logs = tmp_path / "logs"
    logs.mkdir()
    ranges: list[tuple[Path, int, int | None]] = []
    for i in range(40):
        body = "".join(line(T0 + timedelta(minutes=i, seconds=k), k, session=f"s{i}") + "\n" for k in range(i % 5))
        if i % 7 == 3:
            body += "{torn\n" + line(T0, 99, session=f"s{i}") + "\n"  # line (i % 5) + 1 is not a record
        if i % 9 == 4:
            body += line(T0, 98, session=f"s{i}")  # no final newline
        path = logs / f"s{i}.jsonl"
        path.write_text(body)
        ranges.append((path, 0, len(body.encode())))
        if i == 20:
            ranges.append((logs / "gone.jsonl", 0, 100))
    expected = [list(iter_lines_between(p, 0, end)) if p.exists() else [] for p, _, end in ranges]
    results = {}

    def by_ranges(key: str):
        def run(p: AgentProfile) -> int:
            results[key] = archive_file_ranges(p, "tool-call", ranges, NOW)
            return results[key].added

        return run

    together = _archived(tmp_path / "together", "tool-call", bulk=True, archive=by_ranges("together"))
    with mock.patch.object(warehouse, "SMALL_RANGE_BYTES", 0):  # every file read block by block
        alone = _archived(tmp_path / "alone", "tool-call", bulk=True, archive=by_ranges("alone"))
    by_lines = _archived(
        tmp_path / "lines",
        "tool-call",
        bulk=True,
        archive=lambda p: archive_source_lines(
            p,
            "tool-call",
            [(path.name, text) for (path, _, _), texts in zip(ranges, expected, strict=True) for text in texts],
            NOW,
        ),
    )
    assert together[0] == alone[0] == by_lines[0] == sum(len(texts) for texts in expected)
    assert {day: sorted(rows, key=repr) for day, rows in together[1].items()} == {
        day: sorted(rows, key=repr) for day, rows in by_lines[1].items()
    }
    assert together[1] == alone[1]
    got, want = results["together"], results["alone"]
    assert got.lines == want.lines == [len(texts) for texts in expected]
    assert [type(e) for e in got.errors] == [type(e) for e in want.errors]
    assert isinstance(got.errors[21], FileNotFoundError) and sum(e is not None for e in got.errors) == 1
    torn = [(f"s{i}.jsonl", i % 5 + 1) for i in range(40) if i % 7 == 3]
    assert [(source, lineno) for source, lineno, _ in got.problems] == torn
    assert got.problems == want.problems and got.undated == want.undated == len(torn)


def test_ranges_are_reported_archived_only_once_their_lines_are_in_the_warehouse(
    profile: AgentProfile, tmp_path: Path
) -> None:
    ranges: list[tuple[Path, int, int | None]] = []
    for i in range(30):
        path = tmp_path / f"s{i}.jsonl"
        path.write_text("".join(line(T0 + timedelta(minutes=i), k, session=f"s{i}") + "\n" for k in range(1 + i % 4)))
        ranges.append((path, 0, None if i % 5 == 0 else path.stat().st_size))  # some read block by block
    calls: list[int] = []

    def archived(k: int, result: warehouse.RangeArchive) -> None:
        stored = {row["source"] for row in iter_rows(profile, "tool-call")}
        assert {path.name for path, _, _ in ranges[:k]} <= stored  # written, synced and renamed into place
        assert result.lines[:k] == [1 + i % 4 for i in range(k)]
        calls.append(k)

    with mock.patch.object(warehouse, "BATCH_BYTES", 1500), mock.patch.object(warehouse, "BATCH_ROWS", 7):
        result = archive_file_ranges(profile, "tool-call", ranges, NOW, on_archived=archived)
    assert result.added == sum(1 + i % 4 for i in range(30))
    assert calls == sorted(calls) and calls[-1] == 30 and len(set(calls)) >= 3  # reported as it goes, not at the end


def test_a_range_that_cannot_be_read_is_reported_and_the_others_archived(profile: AgentProfile, tmp_path: Path) -> None:
    good = tmp_path / "s1.jsonl"
    good.write_text(line(T0, 1) + "\n" + line(T0, 2) + "\n")
    result = archive_file_ranges(profile, "tool-call", [(tmp_path / "gone.jsonl", 0, 100), (good, 0, None)], NOW)
    assert isinstance(result.errors[0], FileNotFoundError) and result.errors[1] is None
    assert result.lines == [0, 2] and result.added == 2
    assert [r["n"] for r in read_day(profile, "tool-call", T0.date())] == [1, 2]


def test_parts_hold_a_days_rows_in_event_time_order(profile: AgentProfile) -> None:
    lines = [line(T0 + timedelta(minutes=(i * 7919) % 600), i) for i in range(1_000)]  # shuffled times
    archive_lines(profile, "tool-call", "s1.jsonl", lines, NOW)
    for part in (profile.warehouse_dir / "tool-call").rglob("part-*.parquet"):
        stamps = [r["event_ts"] for r in read_parquet(part, ["event_ts"])]
        assert stamps == sorted(stamps)


_stamps = st.one_of(
    st.datetimes(min_value=datetime(1990, 1, 1), max_value=datetime(2100, 1, 1)).flatmap(
        lambda dt: st.sampled_from(
            [
                dt.isoformat() + "Z",
                dt.isoformat() + "+00:00",
                dt.isoformat() + "+02:00",
                dt.isoformat(),
                dt.strftime("%Y-%m-%dT%H:%M:%S.%f")[:-3] + "Z",
                dt.strftime("%Y-%m-%d %H:%M:%SZ"),
            ]
        )
    ),
    st.sampled_from(["2024-02-30T00:00:00Z", "", "soon", "2024-05-01T10:00:00.1234567Z"]),
    st.integers(),
    st.none(),
)
_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=True) | st.text(),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=5), inner, max_size=3),
    max_leaves=6,
)
_records = st.tuples(
    st.dictionaries(st.sampled_from(["tool", "text", "n", "meta"]) | st.text(max_size=6), _values, max_size=4),
    _stamps,
    st.one_of(st.none(), st.text(max_size=8), st.integers()),
    st.booleans(),
    st.sampled_from([(",", ":"), (", ", ": ")]),
    st.booleans(),
    st.sampled_from(
        [
            "",
            "",
            "",
            "torn",
            ',"timestamp":"2030-01-01T00:00:00Z"',
            ',"sessionId":"late"',
            ",",
            ',"x":nan',
            ',"x":NaN',
            ',"x":[1,]',
            " x",
        ]
    ),
    st.integers(0, 200),
)


def _render(record: tuple) -> str:
    fields, stamp, session, session_first, separators, ascii_only, change, cut = record
    head = {"timestamp": stamp, **({"sessionId": session} if session is not None else {})}
    if session_first:
        head = dict(reversed(list(head.items())))
    text = json.dumps({**head, **fields}, separators=separators, ensure_ascii=ascii_only)
    if change == "torn":
        return text[:cut]
    return text[:-1] + change + "}" if change else text  # a repeated key, a trailing comma, nan, junk...


@settings(max_examples=40, deadline=None)
@given(records=st.lists(_records, min_size=1, max_size=25))
@pytest.mark.slow  # a property search over many line sets
def test_bulk_reading_equals_reading_each_line_alone_for_any_line(records: list[tuple]) -> None:
    lines = [_render(r) for r in records]
    with tempfile.TemporaryDirectory() as tmp:
        bulk, one_by_one = _bulk_and_one_by_one(
            Path(tmp), "feedback", lambda p: archive_lines(p, "feedback", "s1.jsonl", lines, NOW)
        )
    assert bulk == one_by_one


@pytest.mark.parametrize("body", [b"", b"\n", b"\n\n  \n", b"{torn"])
def test_empty_or_blank_files_and_ranges_archive_what_they_hold(
    profile: AgentProfile, tmp_path: Path, body: bytes
) -> None:
    log = tmp_path / "s1.jsonl"
    log.write_bytes(body)
    result = archive_file_ranges(profile, "tool-call", [(log, 0, None), (log, 0, 0), (log, 1, 1)], NOW)
    assert result.lines == [len(list(iter_lines_between(log, 0, len(body)))), 0, 0]
    assert result.added == (1 if body == b"{torn" else 0)
