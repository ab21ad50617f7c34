"""Hostile log lines: whatever a line holds, every log reader skips it as malformed (counted, named by file and line),
and log retention still trims and archives the file (issue "Failures are failures")."""

from __future__ import annotations

import json
import os
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dream_assets import log_analyses
from dream_assets.options_loader import dream_options
from dream_assets.passes.log_retention import run_log_retention
from dream_assets.profile import AgentProfile
from dream_assets.store import line_batch, logs, warehouse
from dream_assets.store.line_batch import read_line_blocks
from dream_assets.store.log_records import ConversationTurn, ToolCallEvent
from dream_assets.store.logs import read_events

NOW = datetime(2026, 11, 30, 12, 0, tzinfo=UTC)
TS = "2026-11-30T10:00:00Z"

#: Lines no reader may raise on. Each is a malformed line for the conversation log.
HOSTILE: dict[str, bytes] = {
    "deeply nested": b"[" * 100_000,
    "deeply nested inside a record": (
        b'{"timestamp":"'
        + TS.encode()
        + b'","sessionId":"s1","role":"user","content":'
        + b"[" * 50_000
        + b"]" * 50_000
        + b"}"
    ),
    "not UTF-8": b'{"timestamp":"' + TS.encode() + b'","sessionId":"s1","role":"user","content":"\xff\xfe"}',
    "a NUL byte": b'{"timestamp":"' + TS.encode() + b'","sessionId":"s1","role":"user","content":"a\x00b"}',
    "a value of the wrong type": b'{"timestamp":"' + TS.encode() + b'","sessionId":"s1","role":"user","content":5}',
    "a timestamp of the wrong type": b'{"timestamp":{"a":[1]},"sessionId":"s1","role":"user","content":"x"}',
    "not an object": b'["' + TS.encode() + b'"]',
    "a lone surrogate escape": (
        b'{"timestamp":"' + TS.encode() + b'","sessionId":"s1","role":"user","content":"a\\ud800b"}'
    ),
    "a low surrogate in a key": (
        b'{"timestamp":"' + TS.encode() + b'","sessionId":"s1","role":"user","content":"x","\\udc00":1}'
    ),
    "an integer too long to convert": (
        b'{"timestamp":"' + TS.encode() + b'","sessionId":"s1","role":"user","content":' + b"7" * 5000 + b"}"
    ),
}


def turn(text: str, minutes_ago: int = 30, session: str = "s1") -> bytes:
    return json.dumps(
        ConversationTurn(NOW - timedelta(minutes=minutes_ago), session, "user", text).to_json(),
        separators=(",", ":"),
    ).encode()


# --- the line splitter: a line too long to hold is skipped and reported, every other line is kept ---------------


@settings(max_examples=150, deadline=None)
@given(
    sizes=st.lists(st.integers(0, 40), max_size=30),
    newline_at_end=st.booleans(),
    block=st.integers(1, 50),
    max_line=st.integers(0, 25),
    start=st.integers(0, 30),
)
def test_lines_longer_than_the_limit_are_skipped_and_reported_where_they_are(
    tmp_path_factory: pytest.TempPathFactory,
    sizes: list[int],
    newline_at_end: bool,
    block: int,
    max_line: int,
    start: int,
) -> None:
    lines = [bytes([97 + i % 26]) * n for i, n in enumerate(sizes)]
    body = b"\n".join(lines) + (b"\n" if newline_at_end and lines else b"")
    path = tmp_path_factory.mktemp("blocks") / "log.jsonl"
    path.write_bytes(body)
    start = min(start, len(body))
    start = body.rfind(b"\n", 0, start) + 1 if start else 0  # ranges start on a line boundary
    events: list[object] = []
    for data, ends in read_line_blocks(
        path, start, None, block, max_line=max_line, oversized=lambda off, n: events.append((off, n))
    ):
        begin = 0
        for end in ends.tolist():
            events.append(bytes(data[begin:end]))
            begin = end + 1
    kept = [e for e in events if isinstance(e, bytes)]
    skipped = [e for e in events if isinstance(e, tuple)]
    reference = body[start:].split(b"\n")
    if body[start:].endswith(b"\n") or not body[start:]:
        reference = reference[:-1]  # no line after a final newline
    assert kept == [x for x in reference if len(x) <= max_line]
    assert [n for _, n in skipped] == [len(x) for x in reference if len(x) > max_line]
    for off, n in skipped:  # the offset is where that line starts
        assert (off == 0 or body[off - 1 : off] == b"\n") and body[off : off + n + 1].rstrip(b"\n") == body[
            off : off + n
        ]
        assert len(body[off:].split(b"\n")[0]) == n
    order = [len(e) if isinstance(e, bytes) else e[1] for e in events]
    assert order == [len(x) for x in reference]  # skipped lines are reported in their place


# --- the live log readers -----------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", list(HOSTILE))
def test_a_hostile_line_is_a_malformed_line_named_by_file_and_line(profile: AgentProfile, name: str) -> None:
    profile.conversation_log_path.write_bytes(b"\n".join([turn("before"), HOSTILE[name], turn("after")]) + b"\n")
    result = read_events(profile, "conversation")
    assert [t.content for t in result.events] == ["before", "after"]
    assert result.malformed == 1
    assert result.problems[0].startswith("conversation-log.jsonl:2: ")


def test_a_line_longer_than_the_limit_is_malformed_and_the_lines_after_it_keep_their_numbers(
    profile: AgentProfile,
) -> None:
    path = profile.session_log_path("tool-call", "s1")
    good = json.dumps(ToolCallEvent(NOW, "s1", "shell", True).to_json()).encode()
    huge = b'{"timestamp":"' + TS.encode() + b'","tool":"' + b"x" * (line_batch.MAX_LINE_BYTES + 10) + b'"}'
    path.write_bytes(b"\n".join([good, huge, b"{torn", good]) + b"\n")
    result = read_events(profile, "tool-call")
    assert len(result.events) == 2 and result.malformed == 2
    assert result.problems[0] == (
        f"logs/tool-call/s1.jsonl:2: line of {len(huge):,} bytes is longer than the "
        f"{line_batch.MAX_LINE_BYTES:,}-byte limit"
    )
    assert result.problems[1].startswith("logs/tool-call/s1.jsonl:3: not valid JSON")


def test_numbers_that_are_not_finite_are_malformed(profile: AgentProfile) -> None:
    path = profile.session_log_path("tool-call", "s1")
    lines = [
        json.dumps({"timestamp": TS, "tool": "shell", "success": True, "durationMs": value})
        for value in (float("inf"), float("nan"), 10**400, 12.5)
    ]
    path.write_text("\n".join(lines) + "\n")
    result = read_events(profile, "tool-call")
    assert [e.duration_ms for e in result.events] == [12.5]
    assert result.malformed == 3 and all("finite" in p for p in result.problems)


# --- the warehouse: hostile lines are archived as raw text, never an exception -------------------------------------


def _partition_rows(profile: AgentProfile, kind: str) -> dict[str, list[tuple]]:
    from dream_assets.store.parquet import read_parquet

    found: dict[str, list[tuple]] = {}
    for part in sorted((profile.warehouse_dir / kind).glob("date=*/part-*.parquet")):
        found.setdefault(part.parent.name, []).extend(
            (r["line_key"], r["source"], r["session_id"], r["event_ts"], r["raw"]) for r in read_parquet(part)
        )
    return found


def test_the_bulk_archive_files_hostile_lines_as_reading_each_alone_would(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    good = [turn(f"turn {i}", minutes_ago=i) for i in range(600)]  # enough lines for the bulk reading
    body = b"\n".join(good[:300] + list(HOSTILE.values()) + good[300:]) + b"\n"
    results = {}
    for mode, threshold in (("bulk", 0), ("alone", 10**9)):
        profile = AgentProfile(tmp_path / mode).ensure()
        path = profile.conversation_log_path
        path.write_bytes(body)
        monkeypatch.setattr(warehouse, "FAST_PATH_MIN_LINES", threshold)
        result = warehouse.archive_file_ranges(profile, "conversation", [(path, 0, None)], NOW)
        results[mode] = (
            result.added,
            result.undated,
            result.problems,
            _partition_rows(profile, "conversation"),
        )
    assert results["bulk"] == results["alone"]
    added, undated, problems, partitions = results["bulk"]
    assert added == 600 + len(HOSTILE)  # every line is kept
    unknown = [raw for *_, raw in partitions["date=unknown"]]
    assert len(unknown) == undated == 5  # those without a readable timestamp
    assert {lineno for _, lineno, _ in problems} == {301, 302, 304, 306, 307}
    assert (
        "conversation-log.jsonl",
        301,
        "archived as raw text: nested more than 64 levels deep",
    ) in problems


def test_archived_hostile_lines_read_back_as_malformed_records(profile: AgentProfile) -> None:
    path = profile.conversation_log_path
    path.write_bytes(b"\n".join([turn("kept"), *HOSTILE.values()]) + b"\n")
    warehouse.archive_file_ranges(profile, "conversation", [(path, 0, None)], NOW)
    read = logs.read_archived(profile, "conversation", NOW - timedelta(days=1), NOW)
    assert [t.content for t in read.events] == ["kept"]
    assert read.malformed == 5  # the dated hostile lines
    assert warehouse.read_window(profile, "conversation", NOW - timedelta(days=1), NOW)  # never raises
    assert log_analyses.window_events(profile, "conversation", NOW, timedelta(days=1)) == read.events


def test_a_line_too_long_to_archive_is_counted_and_named(profile: AgentProfile) -> None:
    path = profile.single_log_path("wisp-executions")
    huge = b'{"timestamp":"' + TS.encode() + b'","wispId":"' + b"w" * (line_batch.MAX_LINE_BYTES + 1) + b'"}'
    path.write_bytes(huge + b"\n" + turn("fine") + b"\n")
    result = warehouse.archive_file_ranges(profile, "wisp-executions", [(path, 0, None)], NOW)
    assert (result.lines, result.unarchivable, result.added) == ([2], [1], 1)
    assert result.problems[0][:2] == ("wisp-executions.jsonl", 1)
    assert "was not archived" in result.problems[0][2]


# --- retention and the passes that read a hostile log --------------------------------------------------------------


def test_retention_trims_and_archives_a_log_of_hostile_lines(profile: AgentProfile) -> None:
    path = profile.single_log_path("wisp-executions")
    huge = b'{"timestamp":"' + TS.encode() + b'","wispId":"' + b"w" * (line_batch.MAX_LINE_BYTES + 1) + b'"}'
    path.write_bytes(b"\n".join([*HOSTILE.values(), huge, turn("kept one"), turn("kept two")]) + b"\n")
    options = dream_options(LogRetentionMaxLinesPerFile=2)
    report = run_log_retention(profile, options, NOW)
    assert report.status == "completed" and report.counts["errors"] == 0
    assert path.read_bytes() == turn("kept one") + b"\n" + turn("kept two") + b"\n"
    assert report.counts["lines_trimmed"] == len(HOSTILE) + 1
    assert report.counts["lines_archived"] == len(HOSTILE)  # everything but the line too long
    assert report.counts["lines_unarchivable"] == 1 and report.counts["lines_undated"] == 5
    assert "1 lines too long to archive removed" in report.summary
    warning = next(line for line in report.lines if line.startswith("WARNING"))
    assert "logs/wisp-executions.jsonl:1: archived as raw text: nested more than 64 levels deep" in warning
    assert f"logs/wisp-executions.jsonl:11: line of {len(huge):,} bytes" in warning
    assert run_log_retention(profile, options, NOW).counts["lines_trimmed"] == 0  # and it keeps working


def test_the_passes_reading_a_hostile_feedback_log_and_retention_all_complete(profile: AgentProfile) -> None:
    from dream_assets.cycle import run_cycle
    from dream_assets.model import MemoryEntry, Skill
    from dream_assets.store import open_store

    feedback = profile.session_log_path("feedback", "s1")
    good = json.dumps(
        {
            "timestamp": "2026-11-30T09:00:00Z",
            "sessionId": "s1",
            "kind": "Correction",
            "text": "The deploy skill used the wrong region.",
            "skillNames": ["ops/deploy"],
        }
    ).encode()
    feedback.write_bytes(b"\n".join([*HOSTILE.values(), good]) + b"\n")
    os.utime(feedback, (NOW.timestamp(), NOW.timestamp()))
    usage = profile.session_log_path("skill-usage", "s1")
    usage.write_bytes(json.dumps({"timestamp": "2026-11-30T08:00:00Z", "skillName": "ops/deploy"}).encode() + b"\n")
    store = open_store(profile)
    try:
        store.memories.put_many(
            [
                MemoryEntry(
                    id=f"m{i}",
                    content=text,
                    category="facts",
                    tags=(),
                    importance=0.5,
                    created_at=NOW - timedelta(days=3),
                    updated_at=NOW - timedelta(days=3),
                    last_seen_at=NOW - timedelta(days=3),
                )
                for i, text in enumerate(
                    [
                        "The team deploys to eu-west-1 on Fridays.",
                        "The team deploys to eu-west-1 every Friday.",
                        "Sam owns the billing service.",
                    ]
                )
            ]
        )
        store.skills.put(
            Skill(
                name="ops/deploy",
                summary="Deploy the service",
                content="Run the deploy script.",
                created_at=NOW - timedelta(days=30),
                updated_at=NOW - timedelta(days=30),
            )
        )
    finally:
        store.close()
    profile.conversation_log_path.write_bytes(turn("Please keep answers short.") + b"\n")
    passes = ["log_retention", "memory_consolidation", "skill_optimization", "preference_inference"]
    reports = {r.pass_name: r for r in run_cycle(profile, dream_options(), NOW, only=passes)}
    assert {name: reports[name].status for name in passes} == dict.fromkeys(passes, "completed")
    for name in ("memory_consolidation", "skill_optimization", "preference_inference"):
        assert any("malformed" in line and "s1.jsonl:1" in line for line in reports[name].lines), name


def test_skill_gap_and_preference_inference_complete_on_a_hostile_conversation_log(
    profile: AgentProfile,
) -> None:
    from dream_assets.cycle import run_cycle

    lines = [
        turn("Summarise my inbox please", session="a"),
        *HOSTILE.values(),
        turn("Summarise the inbox for today", session="b"),
    ]
    profile.conversation_log_path.write_bytes(b"\n".join(lines) + b"\n")
    passes = ["skill_gap_detection", "preference_inference"]
    reports = {r.pass_name: r for r in run_cycle(profile, dream_options(), NOW, only=passes)}
    assert {name: reports[name].status for name in passes} == dict.fromkeys(passes, "completed")
    assert reports["skill_gap_detection"].counts["sessions"] == 2
    assert profile.conversation_log_path.read_bytes() == b""  # cleared, and kept in the warehouse
    assert len(warehouse.read_unknown(profile, "conversation")) == 5
