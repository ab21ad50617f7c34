"""docs/log-formats.md shows the record schemas the readers apply: its tables are what the models generate, and
what a table says is required or optional is what reading a line does."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path
from typing import ClassVar

import pytest

from dream_assets.store.log_records import (
    LOG_KINDS,
    FeedbackEvent,
    Id,
    LogRecord,
    ToolCallEvent,
    example_records,
    record_table,
    records_section,
    with_records_section,
)

DOC = Path(__file__).resolve().parents[2] / "docs" / "log-formats.md"
T0 = datetime(2024, 5, 1, 12, 0, tzinfo=UTC)


def test_the_documented_tables_are_the_ones_the_models_generate() -> None:
    doc = DOC.read_text(encoding="utf-8")
    assert with_records_section(doc) == doc, (
        "docs/log-formats.md differs from the record models: run "
        "`.venv/bin/python -m dream_assets.store.log_records docs/log-formats.md`"
    )
    for kind, cls in LOG_KINDS.items():
        assert f"### {kind} — `{cls.__name__}`\n\n{record_table(cls)}" in doc


def test_a_model_change_shows_in_the_generated_section() -> None:
    class Extended(ToolCallEvent):
        log_kind: ClassVar[str] = "tool-call"
        host: Id

    assert "| `host` | string | required |" in record_table(Extended)
    assert "`host`" not in records_section()
    with pytest.raises(ValueError, match="no generated record tables"):
        with_records_section("# Log formats\n")


def _row_presence(cls: type[LogRecord]) -> dict[str, str]:
    rows = record_table(cls).splitlines()[2:]
    return {row.split(" | ")[0].strip("| `"): row.split(" | ")[2] for row in rows}


def _complete(kind: str) -> dict:
    """A record of ``kind`` with every field given."""
    values = {
        "timestamp": "2024-05-01T12:00:00Z",
        "sessionId": "s1",
        "skillName": "mcp/email",
        "action": "loaded",
        "tool": "shell",
        "success": False,
        "error": "boom",
        "durationMs": 3.5,
        "kind": "SessionSummary",
        "text": "ok",
        "rating": "fair",
        "domain": "email",
        "skillNames": ["mcp/email"],
        "resource": "README.md",
        "wispId": "w1",
        "description": "sync",
        "failedStep": "fetch",
        "steps": ["fetch"],
        "definition": "steps:\n  - fetch\n",
        "tier": "small",
        "taskKind": "summarize",
        "outcome": "success",
        "latencyMs": 12.0,
        "costUsd": 0.01,
        "role": "user",
        "content": "hello",
    }
    return {key: values[key] for key in LOG_KINDS[kind].json_keys}


@pytest.mark.parametrize("kind", list(LOG_KINDS))
def test_what_a_table_calls_required_a_reader_requires(kind: str) -> None:
    cls = LOG_KINDS[kind]
    full = _complete(kind)
    assert cls.from_json(full).to_json() == full  # every key written back as read
    for key, presence in _row_presence(cls).items():
        line = {k: v for k, v in full.items() if k != key}
        if presence.startswith("required"):
            with pytest.raises(ValueError, match=f"field '{key}'"):
                cls.from_json(line)
        elif key == "rating":  # optional, except on a SessionSummary
            assert cls.from_json({**line, "kind": "Note"}).rating is None
            with pytest.raises(ValueError, match="'rating' is required for a SessionSummary"):
                cls.from_json(line)
        else:
            record = cls.from_json(line)
            shown = presence.removeprefix("optional, default `").split("`")[0] if "default" in presence else None
            if key == "definition":  # written only when present: a log without definitions keeps its lines
                assert key not in record.to_json() and record.definition is None
            else:
                assert record.to_json()[key] in (None, [], shown)


def test_the_documented_examples_are_valid_records() -> None:
    examples = example_records()
    assert set(examples) == {"skill-usage", "tool-call", "feedback"}
    doc = DOC.read_text(encoding="utf-8")
    for kind, record in examples.items():
        line = LOG_KINDS[kind].example
        assert f"```json\n{line}\n```" in doc
        assert record.to_json() == json.loads(line)


def test_snake_case_keys_are_not_read_from_a_line() -> None:
    line = {"timestamp": "2024-05-01T12:00:00Z", "session_id": "s1", "tool": "shell", "success": True}
    with pytest.raises(ValueError, match="field 'sessionId' is missing"):
        ToolCallEvent.from_json(line)


def test_a_record_built_in_code_by_position_or_name_is_the_same_record() -> None:
    by_position = FeedbackEvent(datetime(2024, 5, 1, 14, 0), "s1", "Note", "text", None, "email", ["a"])
    by_name = FeedbackEvent(
        timestamp=T0.replace(hour=14), session_id="s1", kind="note", text="text", domain="email", skill_names=["a"]
    )
    assert by_position == by_name and by_position.timestamp.tzinfo is UTC
    with pytest.raises(TypeError, match="two values for field 'session_id'"):
        FeedbackEvent(T0, "s1", session_id="s2", kind="Note", text="")
    with pytest.raises(ValueError, match="field 'durationMs' must be a finite number"):
        ToolCallEvent(T0, "s1", "shell", True, duration_ms=float("nan"))
