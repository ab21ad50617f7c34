"""Prompt rendering: the spec's annotations, and byte-identical prompts for the same inputs."""

from __future__ import annotations

import random
from datetime import UTC, datetime, timedelta

from dream_assets.llm.prompts import render_memory_entry
from dream_assets.model import MemoryEntry, Skill
from dream_assets.passes.memory_consolidation.prompt import render_memory_consolidation, render_merge_repair
from dream_assets.passes.preference_inference import render_preference_inference
from dream_assets.passes.skill_consolidation import render_skill_consolidation
from dream_assets.passes.skill_gap_detection import render_skill_gap
from dream_assets.passes.skill_optimization import SPARSE_REVIEW_NOTE, render_skill_optimization
from dream_assets.passes.tier_routing_review import render_tier_routing
from dream_assets.passes.wisp_failure_analysis import render_wisp_failures

NOW = datetime(2026, 11, 30, 12, 0, tzinfo=UTC)


def entry(
    eid: str,
    content: str,
    *,
    days_old: int = 10,
    seen_days_ago: int = 1,
    n: int = 1,
    category: str = "general",
    tags: tuple[str, ...] = (),
    metadata: dict | None = None,
) -> MemoryEntry:
    created = NOW - timedelta(days=days_old)
    return MemoryEntry(
        id=eid,
        content=content,
        category=category,
        tags=tags,
        importance=0.5,
        created_at=created,
        updated_at=created,
        last_seen_at=NOW - timedelta(days=seen_days_ago),
        reinforcement_count=n,
        metadata=metadata or {},
    )


def skill(name: str, content: str = "Steps: 1. do it.", summary: str = "", see_also: tuple[str, ...] = ()) -> Skill:
    return Skill(name=name, summary=summary, content=content, see_also=see_also)


def test_a_memory_entry_carries_its_temporal_context() -> None:
    e = entry(
        "m1",
        "Alice prefers 24-hour times.",
        days_old=40,
        seen_days_ago=3,
        n=3,
        category="user-preferences/time",
        tags=("time", "alice"),
        metadata={"subjectTimeStart": "2026-05-01", "subjectTimeEnd": "2026-05-03", "other": "x"},
    )
    assert render_memory_entry(e) == (
        "- id=m1 [user-preferences/time] tags=alice,time first=2026-10-21 last=2026-11-27 reinforced=3× "
        "subject=2026-05-01..2026-05-03 :: Alice prefers 24-hour times."
    )


def test_an_entry_observed_once_on_one_day_shows_neither_last_nor_reinforced() -> None:
    once = entry("m1", "Alice prefers 24-hour times.", days_old=3, seen_days_ago=3, n=1)
    assert render_memory_entry(once) == "- id=m1 [general] first=2026-11-27 :: Alice prefers 24-hour times."
    again = entry("m1", "Alice prefers 24-hour times.", days_old=3, seen_days_ago=3, n=2)
    assert " reinforced=2× ::" in render_memory_entry(again) and "last=" not in render_memory_entry(again)


def test_a_session_shows_its_day_once_and_each_message_its_time_of_day() -> None:
    from dream_assets.llm.prompts import sessions_section

    turns = [
        {"timestamp": "2026-10-27T23:59:30Z", "role": "user", "content": "Summarize my emails"},
        {"timestamp": "2026-10-28T00:00:10Z", "role": "assistant", "content": "Done"},
    ]
    assert sessions_section({"s1": turns}) == [
        "## Conversation log (1 session(s))",
        "### Session s1 (2 message(s), 2026-10-27)",
        "- [23:59] user: Summarize my emails",
        "- [2026-10-28 00:00] assistant: Done",  # past midnight: the date is shown
    ]
    assert sessions_section({"s2": [{"role": "user", "content": "hi"}]})[1:] == [
        "### Session s2 (1 message(s))",
        "- user: hi",
    ]


def test_subject_appears_only_with_subject_time_metadata() -> None:
    assert "subject=" not in render_memory_entry(entry("m1", "x", metadata={"source": "chat"}))
    assert "subject=2026-08-19 ::" in render_memory_entry(entry("m1", "x", metadata={"subjectTime": "2026-08-19"}))
    assert "subject=2026-08-19.. ::" in render_memory_entry(
        entry("m1", "x", metadata={"subjectTimeStart": "2026-08-19"})
    )


def test_multi_line_content_stays_inside_its_list_item() -> None:
    text = render_memory_entry(entry("m1", "line one\n- not a new entry"))
    assert text.endswith(":: line one\n    - not a new entry")


FEEDBACK = [
    {
        "timestamp": "2026-11-28T09:00:00Z",
        "kind": "Correction",
        "text": "Use metric units",
        "rating": None,
        "sessionId": "s1",
    },
    {
        "timestamp": "2026-11-29T09:00:00Z",
        "kind": "SessionSummary",
        "text": "Went well",
        "rating": "good",
        "sessionId": "s2",
    },
]


def test_memory_consolidation_prompt_lists_entries_clusters_and_feedback_newest_first() -> None:
    entries = [entry("b", "Bob lives in Lisbon."), entry("a", "Bob is based in Lisbon.", days_old=20)]
    prompt = render_memory_consolidation(entries, [["b", "a"]], FEEDBACK, NOW)
    assert prompt.startswith("Current time: 2026-11-30T12:00:00Z\n")
    assert "## Near-duplicate clusters (1)" in prompt and "- cluster 1: a, b" in prompt
    assert prompt.index("Went well") < prompt.index("Use metric units")
    assert "- 2026-11-28T09:00:00Z [Correction] session=s1 :: Use metric units" in prompt
    assert prompt.index("id=a ") < prompt.index("id=b ")  # first seen first


def test_prompts_are_byte_identical_whatever_order_the_store_returns() -> None:
    entries = [entry(f"m{i}", f"fact {i}", days_old=i % 5, tags=("x", "y")) for i in range(30)]
    clusters = [["m3", "m1"], ["m9", "m4", "m7"]]
    first = render_memory_consolidation(entries, clusters, FEEDBACK, NOW)
    rng = random.Random(7)
    for _ in range(5):
        shuffled = entries[:]
        rng.shuffle(shuffled)
        fb = FEEDBACK[:]
        rng.shuffle(fb)
        again = render_memory_consolidation(shuffled, [list(reversed(c)) for c in reversed(clusters)], fb, NOW)
        assert again.encode() == first.encode()


def test_skill_consolidation_annotates_usage_sparse_pairs_and_prefixes() -> None:
    skills = [skill("mcp/email", "Send mail.", summary="Email"), skill("mcp/calendar"), skill("notes", "x")]
    prompt = render_skill_consolidation(
        skills,
        {"mcp/email": 4},
        {"notes"},
        [("mcp/email", "mcp/calendar", 3)],
        {"mcp": ["mcp/email", "mcp/calendar"]},
    )
    assert "### skill: mcp/email — used 4× in 30 days" in prompt
    assert "### skill: notes — used 0× in 30 days [sparse-content]" in prompt
    assert "- mcp/calendar + mcp/email: 3 session(s)" in prompt
    assert "- mcp/*: mcp/calendar, mcp/email" in prompt
    again = render_skill_consolidation(
        list(reversed(skills)),
        {"mcp/email": 4},
        {"notes"},
        [("mcp/calendar", "mcp/email", 3)],
        {"mcp": ["mcp/calendar", "mcp/email"]},
    )
    assert again == prompt


def test_skill_content_with_fences_cannot_break_out() -> None:
    prompt = render_skill_consolidation([skill("s", "```bash\nls\n```")], {}, set(), [], {})
    assert "````\n```bash\nls\n```\n````" in prompt


def test_skill_gap_prompt_carries_the_spec_recurring_topics_block() -> None:
    sessions = {
        "s2": [{"timestamp": "2026-11-29T10:00:00Z", "role": "user", "content": "summarize my email"}],
        "s1": [
            {"timestamp": "2026-11-28T10:00:00Z", "role": "user", "content": "email digest please"},
            {"timestamp": "2026-11-28T10:00:05Z", "role": "assistant", "content": "Here it is"},
        ],
    }
    prompt = render_skill_gap(sessions, [skill("notes", summary="Take notes")], [("summarize", 3), ("email", 4)])
    assert (
        "Recurring topics across sessions (term frequency ≥ 2 sessions):\n"
        '- "email": 4 session(s)\n'
        '- "summarize": 3 session(s)\n'
    ) in prompt
    assert prompt.index("### Session s1") < prompt.index("### Session s2")
    assert prompt.index("email digest please") < prompt.index("Here it is")  # conversation order kept
    assert "- notes: Take notes" in prompt


def test_sparse_skills_get_the_spec_review_note() -> None:
    prompt = render_skill_optimization([(skill("mail"), ["User corrected: wrong recipient"])], [skill("tiny", "x")])
    assert SPARSE_REVIEW_NOTE == (
        "### Review note: This skill has minimal content.\nExpand it with concrete steps, examples, and edge cases."
    )
    assert "```\nx\n```\n" + SPARSE_REVIEW_NOTE in prompt
    assert "#### Failure context\n- User corrected: wrong recipient" in prompt
    assert prompt.count("Review note") == 1  # at-risk skills are not sparse-annotated


def test_merge_repair_prompt_lists_the_dropped_specifics() -> None:
    prompt = render_merge_repair(
        "Meeting moved.", [entry("a", "Meeting with May moved to 2026-08-19.")], ["May", "2026-08-19", "May"]
    )
    assert '- "2026-08-19"\n- "May"' in prompt
    assert "Meeting with May" in prompt


def test_preference_wisp_and_tier_prompts_are_deterministic() -> None:
    sessions = {"s1": [{"timestamp": "2026-11-28T10:00:00Z", "role": "user", "content": "no emojis please"}]}
    assert render_preference_inference(sessions, FEEDBACK) == render_preference_inference(sessions, FEEDBACK[::-1])
    failures = [
        {
            "description": "fetch calendar",
            "skill_name": "mcp/calendar",
            "count": 4,
            "failed_steps": ["fetch"],
            "errors": ["invalid date"],
        },
        {"description": "digest", "skill_name": None, "count": 3, "failed_steps": [], "errors": []},
    ]
    successes = [{"description": "weather", "runs": 9, "successes": 9, "success_rate": 1.0}]
    wisp = render_wisp_failures(failures, successes)
    assert wisp == render_wisp_failures(failures[::-1], successes)
    assert '- "fetch calendar" (skill mcp/calendar) count=4 failed_steps=fetch\n    error: invalid date' in wisp
    assert '- "weather" runs=9 successes=9 success_rate=1' in wisp
    tiers = [{"tier": "small", "requests": 40, "escalations": 9}, {"tier": "large", "requests": 5}]
    tier = render_tier_routing(tiers, 14)
    assert tier == render_tier_routing(tiers[::-1], 14)
    assert "- tier small: escalations=9 requests=40" in tier
