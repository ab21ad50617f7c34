"""The agent operations of dream_assets.agent_memory on a real store: the save-time outcomes and their history, search
filters, an old id leading to its successor, forget that undo reverses, log records validated like the log formats,
text refused with the field named, and every call marking the agent active."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from dream_assets import agent_memory as am
from dream_assets.changes_model import ChangeRow, SuccessorHow
from dream_assets.cli import main as dream
from dream_assets.llm.busy import is_busy
from dream_assets.options_loader import dream_options
from dream_assets.profile import AgentProfile
from dream_assets.store import open_store
from dream_assets.store.logs import read_events

NOW = datetime(2026, 11, 2, 9, 0, tzinfo=UTC)


@pytest.fixture
def profile(tmp_path: Path) -> AgentProfile:
    return AgentProfile(tmp_path / "agent").ensure()


def test_save_outcomes_follow_the_save_time_rules_and_enter_the_history(profile: AgentProfile) -> None:
    first = am.save(profile, "My manager is Tom Becker.", category="work", now=NOW)
    again = am.save(profile, "my manager is tom becker", category="work", now=NOW + timedelta(minutes=1))
    more = am.save(profile, "My manager is Tom Becker. He sits in Berlin.", category="work", now=NOW)
    assert (first.outcome, again.outcome, more.outcome) == ("created", "reinforced", "extended")
    assert again.id == more.id == first.id and again.reason and more.reason
    events = am.history(profile, first.id).events
    assert [e.event for e in events] == ["created", "reinforced", "extended"]
    assert events[-1].content == "My manager is Tom Becker. He sits in Berlin."
    assert {e.pass_name for e in events} == {am.AGENT_PASS}


def test_save_many_gives_the_outcomes_and_history_of_one_save_after_another(tmp_path: Path) -> None:
    """A batch whose later notes repeat, extend or sit apart from earlier ones of the same batch (rows not yet in the
    table when they are compared) ends as the same saves made one by one."""
    notes = [
        {"content": "My manager is Tom Becker.", "category": "work"},
        {"content": "The release train leaves on 2026-12-01.", "category": "work"},
        {"content": "my manager is tom becker", "category": "work"},
        {"content": "My manager is Tom Becker. He sits in Berlin.", "category": "work"},
        {"content": "Prefers tea over coffee.", "category": "personal", "tags": ["drinks"], "importance": 0.7},
        {"content": "Prefers tea over coffee. Green tea since 2025.", "category": "personal"},
        {"content": "The release train leaves on 2026-12-01.", "category": "work"},
    ]
    one, batch = (AgentProfile(tmp_path / name).ensure() for name in ("one-by-one", "batch"))
    singles = [am.save(one, **note, now=NOW) for note in notes]
    many = am.save_many(batch, notes, now=NOW)

    def shape(saved: list[am.SavedMemory]) -> list[tuple]:
        first = {}
        return [(s.outcome, first.setdefault(s.id, len(first)), s.content, s.category) for s in saved]

    assert shape(many) == shape(singles)
    assert [s.outcome for s in many] == [
        "created",
        "created",
        "reinforced",
        "extended",
        "created",
        "extended",
        "reinforced",
    ]

    def stored(profile: AgentProfile) -> list[tuple]:
        store = open_store(profile, dream_options())
        entries = sorted(store.memories.list_all(), key=lambda e: e.content)
        rows = sorted((r.kind, r.reason) for r in store.changes.list())
        return [(e.content, e.category, e.tags, e.importance, e.reinforcement_count) for e in entries] + rows

    assert stored(batch) == stored(one)
    assert [e.event for e in am.history(batch, many[0].id).events] == ["created", "reinforced", "extended"]
    assert am.search(batch, "Berlin", now=NOW).hits[0].id == many[0].id


def test_save_many_checks_every_note_before_saving_any(profile: AgentProfile) -> None:
    with pytest.raises(am.InvalidInput, match="content"):
        am.save_many(profile, [{"content": "A fine note."}, {"content": "   "}], now=NOW)
    assert open_store(profile, dream_options()).memories.list_all() == []


def test_search_filters_by_category_and_tags(profile: AgentProfile) -> None:
    am.save(profile, "The staging database is pg-staging-2.", category="infra/db", tags=["postgres"], now=NOW)
    am.save(profile, "The staging web server is web-staging-1.", category="infra/web", now=NOW)
    am.save(profile, "Staging deploys need a ticket.", category="process", tags=["postgres"], now=NOW)
    assert len(am.search(profile, "staging", now=NOW).hits) == 3
    infra = am.search(profile, "staging", category="infra", now=NOW).hits
    assert sorted(h.category for h in infra) == ["infra/db", "infra/web"]
    tagged = am.search(profile, "staging", category="infra", tags=["Postgres"], now=NOW).hits
    assert [h.content for h in tagged] == ["The staging database is pg-staging-2."]
    assert tagged[0].updated_at == "2026-11-02T09:00:00Z"
    assert len(am.search(profile, "staging", limit=1, now=NOW).hits) == 1


def test_an_old_id_leads_to_its_live_successor(profile: AgentProfile) -> None:
    a = am.save(profile, "The VPN gateway is vpn1.example.org.", now=NOW).id
    b = am.save(profile, "Office wifi password rotates monthly.", now=NOW).id
    c = am.save(profile, "Since November the VPN gateway is vpn2.example.org.", now=NOW).id
    store = open_store(profile, dream_options())
    with store.transaction():
        before = store.memories.get(a)
        after = store.memories.archive(a, now=NOW)
        store.changes.record(
            ChangeRow(
                cycle_id="c1",
                pass_name="memory_consolidation",
                kind="archived",
                target_type="memory",
                target_id=a,
                before=before,
                after=after,
                reason=f"merged into {b}",
                successor_id=b,
                successor_how=SuccessorHow.MERGED_INTO,
            ),
            now=NOW,
        )
    store.memories.supersede(b, c, now=NOW, reason="a later fact")
    old = am.get(profile, a, now=NOW)
    assert (old.status, old.merged_into, old.current_id) == ("archived", b, c)
    middle = am.get(profile, b, now=NOW)
    assert (middle.superseded_by, middle.current_id) == (c, c)
    assert am.get(profile, c, now=NOW).status == "live"
    with pytest.raises(am.NotFound, match="no memory with id"):
        am.get(profile, "0" * 32, now=NOW)


def test_forget_archives_with_its_reason_and_dream_undo_puts_it_back(profile: AgentProfile, capsys) -> None:
    entry = am.save(profile, "The printer on floor 3 is broken.", now=NOW)
    result = am.forget(profile, entry.id, reason="fixed since", now=NOW)
    assert result.archived and result.cycle_id
    gone = am.get(profile, entry.id, now=NOW)
    assert gone.status == "archived" and "fixed since" in (gone.archived_reason or "")
    assert am.search(profile, "printer", now=NOW).hits == []
    assert not am.forget(profile, entry.id, reason="again", now=NOW).archived
    assert dream(["undo", "--profile", str(profile.root), "--cycle", result.cycle_id]) == 0
    assert am.get(profile, entry.id, now=NOW).status == "live"
    assert [e.event for e in am.history(profile, entry.id).events] == ["created", "archived", "restored"]


def test_reinforce_moves_last_seen_and_refuses_an_archived_id(profile: AgentProfile) -> None:
    entry = am.save(profile, "The team standup is at 09:30.", now=NOW)
    later = NOW + timedelta(days=2)
    record = am.reinforce(profile, entry.id, now=later)
    assert record.reinforcement_count == 2 and record.last_seen_at == "2026-11-04T09:00:00Z"
    am.forget(profile, entry.id, reason="moved", now=later)
    with pytest.raises(am.NotFound, match="archived"):
        am.reinforce(profile, entry.id, now=later)


@pytest.mark.parametrize(
    ("content", "field"),
    [("bad \x00 byte", "content"), ("lone \ud800 half", "content"), ("   ", "content")],
)
def test_content_breaking_the_text_rules_is_refused_with_its_field(profile, content, field) -> None:
    with pytest.raises(am.InvalidInput, match=f"^{field} "):
        am.save(profile, content, now=NOW)
    assert open_store(profile, dream_options()).memories.counts() == {"live": 0, "archived": 0}


def test_over_long_content_names_the_limit_of_the_agents_options(profile: AgentProfile) -> None:
    profile.options_path.write_text("MaxContentChars = 40\n", encoding="utf-8")
    with pytest.raises(am.InvalidInput, match="content is 41 characters, over the limit of 40"):
        am.save(profile, "x" * 41, now=NOW)
    with pytest.raises(am.InvalidInput, match="^category "):
        am.save(profile, "fine", category="a\x07b", now=NOW)
    with pytest.raises(am.InvalidInput, match=r"^tags\[1\] "):
        am.save(profile, "fine", tags=["ok", "bad\ntag"], now=NOW)


def test_log_records_are_validated_like_the_log_formats(profile: AgentProfile) -> None:
    am.record_feedback(profile, "s1", "SessionSummary", "booked it", rating="good", now=NOW)
    am.record_skill_usage(profile, "s1", "mcp/email", action="recalled", now=NOW)
    am.record_tool_call(profile, "s1", "calendar.create", False, error="409", duration_ms=12.5, now=NOW)
    am.append_turn(profile, "s1", "user", "Book the meeting room", now=NOW)
    assert [e.rating for e in read_events(profile, "feedback").events] == ["good"]
    assert [e.action for e in read_events(profile, "skill-usage").events] == ["recalled"]
    assert [e.error for e in read_events(profile, "tool-call").events] == ["409"]
    assert [e.content for e in read_events(profile, "conversation").events] == ["Book the meeting room"]
    with pytest.raises(am.InvalidInput, match="rating"):
        am.record_feedback(profile, "s1", "SessionSummary", "no rating", now=NOW)
    with pytest.raises(am.InvalidInput, match="role"):
        am.append_turn(profile, "s1", "narrator", "x", now=NOW)
    with pytest.raises(am.InvalidInput, match="^content "):
        am.append_turn(profile, "s1", "user", "a\x00", now=NOW)
    assert len(read_events(profile, "feedback").events) == 1
    assert len(read_events(profile, "conversation").events) == 1


def test_skills_round_trip(profile: AgentProfile) -> None:
    am.save_skill(profile, "mcp/email", "Use the mail tool; confirm the recipient first.", summary="send mail")
    assert [s.name for s in am.list_skills(profile).skills] == ["mcp/email"]
    assert am.get_skill(profile, "mcp/email").content.startswith("Use the mail tool")
    with pytest.raises(am.NotFound):
        am.get_skill(profile, "mcp/none")
    with pytest.raises(am.InvalidInput, match="^name"):
        am.save_skill(profile, "../escape", "x")


def test_every_call_marks_the_agent_active_for_the_configured_window(profile: AgentProfile) -> None:
    options = dream_options(AgentActiveWindow=timedelta(seconds=90))
    stale = options.BusyLeaseStaleAfter
    am.search(profile, "anything", options=options, now=NOW)
    assert is_busy(profile, NOW + timedelta(seconds=60), stale)
    assert not is_busy(profile, NOW + timedelta(seconds=91), stale)
    assert am.status(profile, options=options, now=NOW).agent_active_until == "2026-11-02T09:01:30Z"


def test_a_zero_window_marks_nothing(tmp_path: Path) -> None:
    profile = AgentProfile(tmp_path / "quiet").ensure()
    am.search(profile, "anything", options=dream_options(AgentActiveWindow=timedelta(0)), now=NOW)
    assert not is_busy(profile, NOW, timedelta(minutes=10))


def test_status_and_report_before_any_cycle(profile: AgentProfile) -> None:
    am.save(profile, "Lunch is at noon.", now=NOW)
    status = am.status(profile, now=NOW)
    assert (status.live_memories, status.last_cycle_id) == (1, None)
    assert {p.status for p in status.passes} == {"never run"}
    assert am.last_cycle_report(profile, now=NOW).cycle_id is None
