"""A forced run (`dream run --force PASS`, the `dream/force` run tag): the named pass ignores its change gate and the
minimum-interval floor once, the ledger records the run as forced with its reason, and the next plain run is gated
again."""

from __future__ import annotations

import json
from datetime import timedelta

import pytest

from dream_assets.llm.client import ModelClient
from dream_assets.llm.scripted import ScriptedBackend
from dream_assets.model import MemoryEntry, Skill
from dream_assets.options_loader import dream_options
from dream_assets.passes.context import PassContext
from dream_assets.passes.memory_consolidation import run_memory_consolidation
from dream_assets.passes.skill_consolidation import run_skill_consolidation
from dream_assets.store.ledger import PassLedger
from dream_assets.store.log_records import SkillUsageEvent
from dream_assets.store.logs import append_event

from ..conftest import NOW

REASON = "switched to a real model"
NOTHING = {"toDelete": [], "toSave": []}


def _context(profile, store, backend: ScriptedBackend | None, *, now, force=None, cycle="c1") -> PassContext:
    def factory() -> ModelClient:
        if backend is None:
            pytest.fail("the model client was built although the pass should not call the model")
        return ModelClient(backend, profile=profile, options=dream_options())

    return PassContext(profile, dream_options(), now, cycle_id=cycle, client_factory=factory, _store=store, force=force)


def _memories(store) -> None:
    for i, text in enumerate(
        (
            "Ana Ruiz signed the Lisbon lease in 2025.",
            "The Oslo kickoff is on 3 March.",
            "Ben prefers tea over coffee in the morning.",
        )
    ):
        at = NOW - timedelta(days=30)
        store.memories.put(
            MemoryEntry(
                id=f"m{i}",
                content=text,
                category="facts",
                tags=(),
                importance=0.5,
                created_at=at,
                updated_at=at,
                last_seen_at=at,
                reinforcement_count=1,
                metadata={},
            )
        )


def test_forced_consolidation_calls_the_model_once_past_the_floor_and_the_next_plain_run_is_held(profile, store):
    _memories(store)
    backend = ScriptedBackend([NOTHING, NOTHING])
    first = run_memory_consolidation(_context(profile, store, backend, now=NOW))
    assert first.status == "completed" and len(backend.requests) == 1
    later = NOW + timedelta(hours=1)  # within the default 6-hour floor, nothing changed since
    held = run_memory_consolidation(_context(profile, store, None, now=later, cycle="c2"))
    assert held.status == "skipped" and "minimum interval" in held.reason

    forced = run_memory_consolidation(_context(profile, store, backend, now=later, force=REASON, cycle="c3"))
    assert forced.status == "completed" and len(backend.requests) == 2
    assert forced.counts["forced"] == 1 and forced.counts["eligible"] == 3
    assert {i["id"] for i in backend.requests[1].inputs["entries"]} == {"m0", "m1", "m2"}
    record = PassLedger(profile).get("memory_consolidation")
    assert record.forced == REASON and record.last_run_at == later
    on_disk = json.loads(profile.ledger_path.read_text())["passes"]["memory_consolidation"]
    assert on_disk["forced"] == REASON

    again = run_memory_consolidation(_context(profile, store, None, now=later + timedelta(hours=1), cycle="c4"))
    assert again.status == "skipped" and "minimum interval" in again.reason
    assert len(backend.requests) == 2


def test_a_forced_run_does_not_override_the_audit_pause(profile, store):
    _memories(store)
    profile.consolidation_pause_path.parent.mkdir(parents=True, exist_ok=True)
    profile.consolidation_pause_path.write_text("{}")
    report = run_memory_consolidation(_context(profile, store, None, now=NOW, force=REASON))
    assert report.status == "skipped" and "paused" in report.reason


def _skills(profile, store) -> None:
    append_event(profile, "skill-usage", SkillUsageEvent(NOW - timedelta(days=1), "u1", "mcp/email"))
    at = NOW - timedelta(days=100)
    for name in ("mcp/email", "mcp/calendar"):
        store.skills.put(
            Skill(
                name=name,
                summary=f"About {name}",
                content=f"{name}: confirm, gather, do, verify.",
                see_also=(),
                created_at=at,
                updated_at=at,
                last_used_at=None,
            )
        )


def test_forced_skill_consolidation_ignores_the_change_gate_once_and_says_what_the_gate_said(profile, store):
    _skills(profile, store)
    backend = ScriptedBackend([NOTHING, NOTHING])
    assert run_skill_consolidation(_context(profile, store, backend, now=NOW)).status == "completed"
    later = NOW + timedelta(hours=1)
    gated = run_skill_consolidation(_context(profile, store, None, now=later, cycle="c2"))
    assert gated.status == "skipped" and "change gate" in gated.reason

    forced = run_skill_consolidation(_context(profile, store, backend, now=later, force=REASON, cycle="c3"))
    assert forced.status == "completed" and len(backend.requests) == 2
    assert any(
        "forced run (switched to a real model): change gate ignored (it said: input unchanged" in line
        for line in forced.lines
    )
    assert PassLedger(profile).get("skill_consolidation").forced == REASON

    again = run_skill_consolidation(_context(profile, store, None, now=later + timedelta(hours=1), cycle="c4"))
    assert again.status == "skipped" and "change gate" in again.reason


def test_a_plain_completed_run_clears_the_forced_mark(profile, store):
    _skills(profile, store)
    backend = ScriptedBackend([NOTHING, NOTHING])
    run_skill_consolidation(_context(profile, store, backend, now=NOW, force=REASON))
    assert PassLedger(profile).get("skill_consolidation").forced == REASON
    store.skills.put(
        Skill(
            name="mcp/weather",
            summary="About weather",
            content="Call the weather tool.",
            see_also=(),
            created_at=NOW,
            updated_at=NOW,
            last_used_at=None,
        )
    )
    assert (
        run_skill_consolidation(_context(profile, store, backend, now=NOW + timedelta(hours=1), cycle="c2")).status
        == "completed"
    )
    assert PassLedger(profile).get("skill_consolidation").forced is None


def test_a_force_tag_naming_an_unknown_pass_fails_the_run_with_the_list_of_passes(root, instance):
    from dream_assets.definitions import build_definitions
    from dream_assets.orchestration.deployment import NOW_TAG, DreamDeployment
    from dream_assets.orchestration.partitions import AGENTS
    from dream_assets.orchestration.run_tags import FORCE_TAG
    from dream_assets.profile import AgentProfile

    AgentProfile(root / "a1").ensure()
    defs = build_definitions(deployment=DreamDeployment(profile_root=str(root)))
    instance.add_dynamic_partitions(AGENTS, ["a1"])
    result = defs.resolve_job_def("dream_cycle").execute_in_process(
        instance=instance,
        partition_key="a1",
        raise_on_error=False,
        tags={NOW_TAG: "2026-11-30T12:00:00Z", FORCE_TAG: "memory_consolidation,skill_consolidaton"},
    )
    assert not result.success
    messages = [
        e.event_specific_data.user_failure_data.description
        for e in result.get_step_failure_events()
        if e.event_specific_data.user_failure_data is not None
    ]
    assert messages and "unknown pass(es) 'skill_consolidaton' to force" in messages[0]
    assert "passes: log_retention, archive_purge" in messages[0]
    assert not result.get_asset_materialization_events()  # nothing ran


def test_status_says_the_last_completed_run_was_forced_and_why(profile, store, capsys):
    from dream_assets.cli import main

    _memories(store)
    backend = ScriptedBackend([NOTHING])
    run_memory_consolidation(_context(profile, store, backend, now=NOW, force=REASON))
    store.close()
    assert main(["status", "--profile", str(profile.root), "--now", NOW.isoformat()]) == 0
    lines = [line for line in capsys.readouterr().out.splitlines() if "last completed" in line]
    assert any(f"(forced: {REASON})" in line for line in lines)
