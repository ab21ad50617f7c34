"""The Python API on first use: a store opened from a folder path with the agent's own options, calls that default
their clock to now, a log record appended without naming its log, and a cycle run from the profile alone."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from dream_assets.cycle import run_cycle
from dream_assets.model import Skill
from dream_assets.profile import AgentProfile
from dream_assets.save_pipeline import save_memory
from dream_assets.store import open_store
from dream_assets.store.log_records import FeedbackEvent, SkillUsageEvent
from dream_assets.store.logs import append_event, read_events
from dream_assets.store.memory import ContentError


def test_open_store_from_a_path_applies_the_agents_dream_toml(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.delenv("DREAM__MaxContentChars", raising=False)
    root = tmp_path / "a"
    root.mkdir()
    (root / "dream.toml").write_text("MaxContentChars = 40\n", encoding="utf-8")
    store = open_store(str(root))
    try:
        assert store.options.MaxContentChars == 40
        with pytest.raises(ContentError, match="MaxContentChars"):
            save_memory(store.memories, "x" * 41)
        assert store.memories.counts()["live"] == 0
    finally:
        store.close()


def test_open_store_applies_the_environment_over_the_file(tmp_path: Path, monkeypatch) -> None:
    root = tmp_path / "a"
    root.mkdir()
    (root / "dream.toml").write_text("MaxContentChars = 40\n", encoding="utf-8")
    monkeypatch.setenv("DREAM__MaxContentChars", "60")
    store = open_store(Path(root))
    try:
        assert store.options.MaxContentChars == 60
        assert save_memory(store.memories, "y" * 50).action == "created"
    finally:
        store.close()


def test_calls_without_now_use_the_current_utc_time(tmp_path: Path) -> None:
    before = datetime.now(UTC)
    store = open_store(AgentProfile(tmp_path / "a"))
    try:
        saved = save_memory(store.memories, "The build server is ci-7 in Frankfurt.").entry
        reinforced = store.memories.reinforce(saved.id)
        archived = store.memories.archive(saved.id)
        skill = store.skills.save(Skill("mcp/email", "send mail", "Use the mail tool to send a message."))
    finally:
        store.close()
    after = datetime.now(UTC) + timedelta(seconds=1)
    for at in (saved.created_at, reinforced.last_seen_at, archived.archived_at, skill.updated_at):
        assert at is not None and before - timedelta(seconds=1) <= at <= after
    assert reinforced.reinforcement_count == 2


def test_append_event_takes_the_log_from_the_record(tmp_path: Path) -> None:
    profile = AgentProfile(tmp_path / "a")
    append_event(tmp_path / "a", FeedbackEvent(session_id="s1", kind="Note", text="prefers short answers"))
    append_event(profile, "skill-usage", SkillUsageEvent(session_id="s1", skill_name="mcp/email"))
    feedback = read_events(profile, "feedback").events
    assert [e.text for e in feedback] == ["prefers short answers"]
    assert abs(feedback[0].timestamp - datetime.now(UTC)) < timedelta(minutes=1)
    assert [e.skill_name for e in read_events(profile, "skill-usage").events] == ["mcp/email"]
    with pytest.raises(TypeError, match="skill-usage"):
        append_event(profile, "skill-usage", FeedbackEvent(session_id="s1", kind="Note", text="x"))


def test_a_record_read_from_disk_still_needs_its_timestamp() -> None:
    with pytest.raises(ValueError, match="timestamp"):
        FeedbackEvent.from_json({"sessionId": "s1", "kind": "Note", "text": "x"})


def test_run_cycle_takes_only_the_profile_folder(tmp_path: Path) -> None:
    root = tmp_path / "a"
    store = open_store(root)
    try:
        save_memory(store.memories, "The deploy window is Tuesday 14:00 UTC.")
    finally:
        store.close()
    reports = run_cycle(root, only=["archive_purge", "importance_decay"])
    assert [r.pass_name for r in reports] == ["archive_purge", "importance_decay"]
    assert all(r.status != "failed" for r in reports), [(r.pass_name, r.reason) for r in reports]
