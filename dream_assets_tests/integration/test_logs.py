"""Telemetry and conversation logs: schemas, the writer, readers, and the conversation clear."""

from __future__ import annotations

import json
import threading
from datetime import UTC, datetime, timedelta, timezone
from pathlib import Path

import pytest

from dream_assets.names import InvalidName
from dream_assets.profile import AgentProfile
from dream_assets.store import log_bytes, logs, warehouse
from dream_assets.store.log_bytes import find_cut_offset, iter_raw_lines
from dream_assets.store.log_records import (
    LOG_KINDS,
    ConversationTurn,
    FeedbackEvent,
    SkillResourceUsageEvent,
    SkillUsageEvent,
    TierRoutingEvent,
    ToolCallEvent,
    WispExecutionEvent,
)
from dream_assets.store.logs import (
    append_event,
    clear_conversation_log,
    conversation_by_session,
    log_exists,
    read_events,
    read_session,
)

T0 = datetime(2024, 5, 1, 12, 0, tzinfo=UTC)


SAMPLES = {
    "skill-usage": SkillUsageEvent(T0, "s1", "mcp/email", "recalled"),
    "tool-call": ToolCallEvent(T0, "s1", "shell", False, error="exit 1", duration_ms=12.5, skill_name="ops/deploy"),
    "feedback": FeedbackEvent(
        T0, "s1", "SessionSummary", "went fine", rating="good", domain="email", skill_names=["mcp/email"]
    ),
    "skill-resource-usage": SkillResourceUsageEvent(T0, "s1", "mcp/email", "templates/reply.md"),
    "wisp-executions": WispExecutionEvent(
        T0,
        "w1",
        "weekly report",
        False,
        skill_name="reports/weekly",
        failed_step="parse",
        error="bad csv",
        steps=["fetch", "parse"],
    ),
    "tier-routing": TierRoutingEvent(T0, "s1", "small", "summarise", "escalated", latency_ms=830.0, cost_usd=0.002),
    "conversation": ConversationTurn(T0, "s1", "user", "summarise my inbox"),
}


def write_lines(path: Path, *lines: str, newline_at_end: bool = True) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("\n".join(lines) + ("\n" if newline_at_end else ""), encoding="utf-8")


# --- schemas and the writer ----------------------------------------------------------------------------------


@pytest.mark.parametrize("kind", list(LOG_KINDS))
def test_every_record_kind_reads_back_what_was_appended(profile: AgentProfile, kind: str) -> None:
    append_event(profile, kind, SAMPLES[kind])
    result = read_events(profile, kind)
    assert result.events == [SAMPLES[kind]]
    assert result.malformed == 0
    assert log_exists(profile, kind)


def test_records_are_written_as_camel_case_json_lines_with_utc_timestamps(profile: AgentProfile) -> None:
    append_event(
        profile,
        "tool-call",
        ToolCallEvent(
            datetime(2024, 5, 1, 14, 0, tzinfo=timezone(timedelta(hours=2))),
            "s1",
            "shell",
            True,
            duration_ms=3,
        ),
    )
    line = profile.session_log_path("tool-call", "s1").read_text(encoding="utf-8")
    assert line.endswith("\n") and line.count("\n") == 1
    record = json.loads(line)
    assert record["timestamp"] == "2024-05-01T12:00:00Z"
    assert record["sessionId"] == "s1" and record["durationMs"] == 3.0 and record["skillName"] is None


@pytest.mark.parametrize(
    "kind, record, field",
    [
        ("tool-call", {"sessionId": "s1", "tool": "shell", "success": True}, "timestamp"),
        (
            "tool-call",
            {"timestamp": "yesterday", "sessionId": "s1", "tool": "shell", "success": True},
            "timestamp",
        ),
        (
            "tool-call",
            {"timestamp": "2024-05-01T00:00:00Z", "sessionId": "s1", "tool": "shell", "success": "yes"},
            "success",
        ),
        ("tool-call", {"timestamp": "2024-05-01T00:00:00Z", "sessionId": "s1", "success": True}, "tool"),
        (
            "tool-call",
            {
                "timestamp": "2024-05-01T00:00:00Z",
                "sessionId": "s1",
                "tool": "x",
                "success": True,
                "durationMs": "fast",
            },
            "durationMs",
        ),
        (
            "skill-usage",
            {"timestamp": "2024-05-01T00:00:00Z", "sessionId": "s1", "skillName": "a", "action": "used"},
            "action",
        ),
        (
            "feedback",
            {"timestamp": "2024-05-01T00:00:00Z", "sessionId": "s1", "kind": "Praise", "text": "x"},
            "kind",
        ),
        (
            "feedback",
            {"timestamp": "2024-05-01T00:00:00Z", "sessionId": "s1", "kind": "SessionSummary", "text": "x"},
            "rating",
        ),
        (
            "feedback",
            {
                "timestamp": "2024-05-01T00:00:00Z",
                "sessionId": "s1",
                "kind": "Note",
                "text": "x",
                "skillNames": "a,b",
            },
            "skillNames",
        ),
        (
            "wisp-executions",
            {"timestamp": "2024-05-01T00:00:00Z", "description": "d", "success": False},
            "wispId",
        ),
        (
            "tier-routing",
            {
                "timestamp": "2024-05-01T00:00:00Z",
                "sessionId": "s1",
                "tier": "small",
                "taskKind": "t",
                "outcome": "ok",
            },
            "outcome",
        ),
        (
            "conversation",
            {"timestamp": "2024-05-01T00:00:00Z", "sessionId": "s1", "role": "system", "content": "x"},
            "role",
        ),
        ("conversation", [1, 2], "JSON object"),
    ],
)
def test_an_invalid_record_is_rejected_naming_the_field(kind: str, record: object, field: str) -> None:
    with pytest.raises(ValueError, match=field):
        LOG_KINDS[kind].from_json(record)


def test_choices_are_accepted_in_any_letter_case_and_stored_as_documented() -> None:
    event = FeedbackEvent.from_json(
        {
            "timestamp": "2024-05-01T00:00:00Z",
            "sessionId": "s1",
            "kind": "sessionsummary",
            "text": "",
            "rating": "POOR",
        }
    )
    assert (event.kind, event.rating) == ("SessionSummary", "poor")


def test_skill_usage_action_defaults_to_invoked() -> None:
    event = SkillUsageEvent.from_json({"timestamp": "2024-05-01T00:00:00Z", "sessionId": "s1", "skillName": "a"})
    assert event.action == "invoked"


def test_a_session_summary_built_in_code_without_rating_is_refused() -> None:
    with pytest.raises(ValueError, match="rating"):
        FeedbackEvent(T0, "s1", "SessionSummary", "meh")


def test_append_refuses_a_session_id_that_would_escape_the_log_folder(profile: AgentProfile) -> None:
    with pytest.raises(InvalidName):
        append_event(profile, "tool-call", ToolCallEvent(T0, "../etc", "shell", True))
    assert not any(profile.root.rglob("*.jsonl"))


def test_append_refuses_a_record_of_another_log(profile: AgentProfile) -> None:
    with pytest.raises(TypeError, match="ToolCallEvent"):
        append_event(profile, "tool-call", SAMPLES["skill-usage"])


def test_append_refuses_a_record_it_could_not_read_back(profile: AgentProfile) -> None:
    with pytest.raises(ValueError, match="outcome"):
        append_event(profile, "tier-routing", TierRoutingEvent(T0, "s1", "small", "t", "maybe"))
    assert not profile.single_log_path("tier-routing").exists()


def test_an_append_after_a_torn_line_starts_on_a_new_line(profile: AgentProfile) -> None:
    path = profile.single_log_path("tier-routing")
    write_lines(path, '{"timestamp":"2024-05-01T00:00:00Z","sessionId":"s1","tier"', newline_at_end=False)
    append_event(profile, "tier-routing", SAMPLES["tier-routing"])
    result = read_events(profile, "tier-routing")
    assert result.events == [SAMPLES["tier-routing"]]
    assert result.malformed == 1


def test_concurrent_appends_from_threads_are_whole_lines(profile: AgentProfile) -> None:
    def writer(n: int) -> None:
        for i in range(200):
            append_event(
                profile,
                "conversation",
                ConversationTurn(T0 + timedelta(seconds=i), f"s{n}", "user", "x" * (i * 37 % 3000)),
            )

    threads = [threading.Thread(target=writer, args=(n,)) for n in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    result = read_events(profile, "conversation")
    assert len(result.events) == 800 and result.malformed == 0


# --- reading ---------------------------------------------------------------------------------------------------


def test_malformed_lines_are_skipped_and_reported_with_file_and_line(profile: AgentProfile) -> None:
    good = json.dumps(SAMPLES["tool-call"].to_json())
    path = profile.session_log_path("tool-call", "s1")
    write_lines(path, good, "not json", "", '{"timestamp": "2024-05-01T00:00:00Z", "sessionId": "s1"}', good)
    with open(path, "ab") as f:
        f.write(b'{"timestamp":"2024-05-01T00:00:00Z","sessionId":"s1","tool":"\xff","success":true}\n')
    result = read_events(profile, "tool-call")
    assert len(result.events) == 2
    assert result.malformed == 3
    assert result.problems[0].startswith("logs/tool-call/s1.jsonl:2: not valid JSON")
    assert result.problems[1].startswith("logs/tool-call/s1.jsonl:4: field 'tool'")
    assert result.problems[2] == "logs/tool-call/s1.jsonl:6: not valid UTF-8"


def test_only_the_first_twenty_problems_are_listed_but_all_are_counted(profile: AgentProfile) -> None:
    write_lines(profile.single_log_path("wisp-executions"), *["{bad"] * 30)
    result = read_events(profile, "wisp-executions")
    assert result.malformed == 30 and len(result.problems) == 20


def test_a_missing_log_is_an_empty_read_and_absent(profile: AgentProfile) -> None:
    for kind in LOG_KINDS:
        result = read_events(profile, kind)
        assert (result.events, result.malformed) == ([], 0)
        assert not log_exists(profile, kind)


def test_an_emptied_conversation_log_is_still_present(profile: AgentProfile) -> None:
    profile.conversation_log_path.write_text("")
    assert log_exists(profile, "conversation")


def test_events_of_all_sessions_are_merged_in_time_order_within_a_window(profile: AgentProfile) -> None:
    for i, sid in enumerate(["b", "a", "b", "a"]):
        append_event(profile, "skill-usage", SkillUsageEvent(T0 + timedelta(minutes=10 - i), sid, f"k{i}"))
    result = read_events(profile, "skill-usage")
    assert [e.skill_name for e in result.events] == ["k3", "k2", "k1", "k0"]
    window = read_events(profile, "skill-usage", since=T0 + timedelta(minutes=8), until=T0 + timedelta(minutes=10))
    assert [e.skill_name for e in window.events] == ["k2", "k1"]


def test_a_per_session_record_without_session_id_takes_its_file_name(profile: AgentProfile) -> None:
    write_lines(
        profile.session_log_path("skill-usage", "cli-session"),
        '{"timestamp":"2024-05-01T00:00:00Z","skillName":"a"}',
    )
    assert read_events(profile, "skill-usage").events[0].session_id == "cli-session"


def test_files_in_sub_directories_of_a_session_log_are_not_read(profile: AgentProfile) -> None:
    nested = profile.session_log_dir("feedback") / "team" / "s9.jsonl"
    write_lines(nested, json.dumps(SAMPLES["feedback"].to_json()))
    assert read_events(profile, "feedback").events == []
    assert not log_exists(profile, "feedback")


def test_read_session_returns_one_sessions_records(profile: AgentProfile) -> None:
    for sid in ("s1", "s2", "s1"):
        append_event(profile, "tool-call", ToolCallEvent(T0, sid, "shell", True))
        append_event(profile, "tier-routing", TierRoutingEvent(T0, sid, "small", "t", "success"))
    assert len(read_session(profile, "tool-call", "s1").events) == 2
    assert [e.session_id for e in read_session(profile, "tier-routing", "s2").events] == ["s2"]


def test_conversation_is_grouped_by_session_in_first_seen_order(profile: AgentProfile) -> None:
    for i, (sid, role) in enumerate([("late", "user"), ("early", "user"), ("late", "assistant")]):
        append_event(profile, "conversation", ConversationTurn(T0 + timedelta(minutes=i), sid, role, f"t{i}"))
    sessions, result = conversation_by_session(profile)
    assert list(sessions) == ["late", "early"]
    assert [t.content for t in sessions["late"]] == ["t0", "t2"]
    assert result.malformed == 0


def test_raw_lines_give_back_the_original_bytes(tmp_path: Path) -> None:
    path = tmp_path / "x.jsonl"
    path.write_bytes(b'{"a":1}\n\xff\xfe\n\ntail')
    lines = list(iter_raw_lines(path))
    assert [n for n, _ in lines] == [1, 2, 3, 4]
    assert lines[1][1].encode("utf-8", "surrogateescape") == b"\xff\xfe"
    assert lines[3][1] == "tail"


@pytest.mark.parametrize(
    "content, keep, expected",
    [
        (b"a\nb\nc\n", 2, 2),  # keeps "b\nc\n"
        (b"a\nb\nc\n", 3, 0),  # nothing to drop
        (b"a\nb\nc\n", 5, 0),
        (b"a\nb\nc\n", 0, 6),  # drop every complete line
        (b"a\nb\nc", 1, 2),  # "c" is a write in progress: kept, not counted
        (b"a\nb\nc", 0, 4),
        (b"partial", 0, 0),
        (b"", 3, 0),
    ],
)
def test_cut_offset_keeps_the_last_complete_lines(tmp_path: Path, content: bytes, keep: int, expected: int) -> None:
    path = tmp_path / "x.jsonl"
    path.write_bytes(content)
    assert find_cut_offset(path, keep) == expected


def test_cut_offset_is_found_across_read_blocks(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(log_bytes, "BLOCK", 7)
    path = tmp_path / "x.jsonl"
    lines = [f"line-{i:03d}" for i in range(100)]
    path.write_text("\n".join(lines) + "\n")
    cut = find_cut_offset(path, 13)
    assert path.read_bytes()[cut:].decode().splitlines() == lines[-13:]


# --- clearing the conversation log ------------------------------------------------------------------------------


def test_clearing_the_conversation_moves_its_lines_to_the_warehouse(profile: AgentProfile) -> None:
    turns = [ConversationTurn(T0 + timedelta(hours=20 * i), "s1", "user", f"turn {i}") for i in range(3)]
    for turn in turns:
        append_event(profile, "conversation", turn)
    assert clear_conversation_log(profile, T0 + timedelta(days=3)) == 3
    assert profile.conversation_log_path.read_text() == ""
    archived = warehouse.read_window(profile, "conversation", T0, T0 + timedelta(days=3))
    assert [ConversationTurn.from_json(r) for r in archived] == turns
    assert clear_conversation_log(profile, T0 + timedelta(days=3)) == 0


def test_clearing_leaves_a_line_still_being_written(profile: AgentProfile) -> None:
    append_event(profile, "conversation", SAMPLES["conversation"])
    with open(profile.conversation_log_path, "a") as f:
        f.write('{"timestamp":"2024-05-01T12:00:01Z","sessionId":"s1","ro')
    assert clear_conversation_log(profile, T0) == 1
    assert profile.conversation_log_path.read_text() == '{"timestamp":"2024-05-01T12:00:01Z","sessionId":"s1","ro'


def test_clearing_keeps_the_log_when_the_warehouse_write_fails(
    profile: AgentProfile, monkeypatch: pytest.MonkeyPatch
) -> None:
    append_event(profile, "conversation", SAMPLES["conversation"])
    before = profile.conversation_log_path.read_bytes()

    def broken(*args: object, **kwargs: object) -> int:
        raise OSError("disk full")

    monkeypatch.setattr(logs, "archive_file_ranges", broken)
    with pytest.raises(OSError, match="disk full"):
        clear_conversation_log(profile, T0)
    assert profile.conversation_log_path.read_bytes() == before


def test_a_turn_appended_while_clearing_is_kept(profile: AgentProfile, monkeypatch: pytest.MonkeyPatch) -> None:
    append_event(profile, "conversation", SAMPLES["conversation"])
    late = ConversationTurn(T0 + timedelta(seconds=5), "s2", "user", "arrived during the clear")
    real_archive = logs.archive_file_ranges
    writer = threading.Thread(target=append_event, args=(profile, "conversation", late))

    def archive_then_race(*args: object) -> warehouse.RangeArchive:
        writer.start()  # blocks on the conversation lock until the clear has finished
        writer.join(timeout=0.2)
        return real_archive(*args)

    monkeypatch.setattr(logs, "archive_file_ranges", archive_then_race)
    assert clear_conversation_log(profile, T0) == 1
    writer.join()
    assert read_events(profile, "conversation").events == [late]


def test_clearing_up_to_what_was_read_keeps_turns_written_since(profile: AgentProfile) -> None:
    from dream_assets.store.log_bytes import file_identity
    from dream_assets.store.logs import ConversationLogChanged

    append_event(profile, "conversation", ConversationTurn(T0, "s1", "user", "first"))
    path = profile.conversation_log_path
    cut, identity = find_cut_offset(path, 0), file_identity(path.stat())
    append_event(profile, "conversation", ConversationTurn(T0, "s1", "user", "written during the model call"))
    assert clear_conversation_log(profile, T0, upto=cut, identity=identity) == 1
    assert [t.content for t in read_events(profile, "conversation").events] == ["written during the model call"]
    with pytest.raises(ConversationLogChanged):  # the file was rewritten by the clear: the old identity is stale
        clear_conversation_log(profile, T0, upto=cut, identity=identity)
