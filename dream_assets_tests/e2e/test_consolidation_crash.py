"""A crash between any two writes of a consolidation apply leaves each change with its change-log row: a whole merge
or none of it, no archived source without its row, no merged entry without its row, and undo restores exactly.

Each trial is a real child process (crash_child.py) that dies with ``os._exit`` right after its N-th write statement;
the parent then opens the store the child left behind and checks it. N runs over every write the apply makes."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from datetime import timedelta
from pathlib import Path

import pytest

from dream_assets.model import Skill
from dream_assets.options_loader import dream_options
from dream_assets.profile import AgentProfile
from dream_assets.store import open_store
from dream_assets.store.log_records import SkillUsageEvent
from dream_assets.store.logs import append_event

from ..conftest import NOW
from ..crash_child import KILLED
from ..integration.test_memory_consolidation import answer, entry, merge
from ..integration.test_memory_consolidation_safety import facts_lost

ROOT = Path(__file__).resolve().parents[2]
CYCLE = "crash-cycle"


def _child(spec: dict) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.run(
        [sys.executable, "-m", "dream_assets_tests.crash_child", json.dumps(spec)],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )


def _trials(base: Path, tmp: Path, pass_name: str, answers: list) -> tuple[dict, list[tuple[int, Path]]]:
    """Run once to completion (counting writes), then once per write N, killed right after it (two processes,
    each forking one child per trial)."""
    spec = {"pass": pass_name, "answers": answers, "now": NOW.isoformat(), "cycle": CYCLE}
    clean = tmp / "complete"
    shutil.copytree(base, clean)
    done = _child({**spec, "profile": str(clean), "kill_at": 0})
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout.strip().splitlines()[-1])
    writes = int(result["writes"])
    assert writes >= 8, result

    roots = {n: tmp / f"kill-{n:03d}" for n in range(1, writes + 1)}
    for root in roots.values():
        shutil.copytree(base, root)

    def batch(ns: list[int]) -> dict[str, int]:
        proc = _child({**spec, "trials": [[n, str(roots[n])] for n in ns]})
        assert proc.returncode == 0, proc.stderr[-3000:]
        return json.loads(proc.stdout.strip().splitlines()[-1])

    with ThreadPoolExecutor(max_workers=2) as pool:
        statuses = {
            int(k): v for part in pool.map(batch, [list(roots)[0::2], list(roots)[1::2]]) for k, v in part.items()
        }
    assert statuses == {n: KILLED for n in roots}, statuses  # every trial died at its write, none got through
    return result, [(0, clean), *sorted(roots.items())]


# ----------------------------------------------------------------------------------------------- memory consolidation
MEMORIES = [
    entry("a", "Kestrel ships on Fridays."),
    entry("b", "Kestrel ships on Fridays!"),
    entry("w", "The user's manager is Priya Raman."),
    entry("w2", "Manager: Priya Raman, based in Krakow."),
    entry("n", "The user said ok.", importance=0.2),
    entry("d1", "Heron load tests run against staging every Monday."),
    entry("d2", "Heron load tests run against staging every Monday."),
    entry("k", "The badge number is 4471."),
]
MEMORY_ANSWER = answer(
    merge("Kestrel ships on Fridays.", "a", "b", category="projects/kestrel"),
    merge("The user's manager is Priya Raman, based in Krakow.", "w", "w2", category="people/work"),
    merge("Check the calendar for conflicts before booking.", category="anti-patterns/calendar"),
    delete=("n", "d1", "a"),
)


def _memory_state(store) -> dict:
    return {e.id: (e.content, e.category, e.tags, e.is_archived) for e in store.memories.list_all()}


def _check_memory_store(root: Path, trial: int) -> None:
    store = open_store(AgentProfile(root), dream_options())
    try:
        original = {e.id for e in MEMORIES}
        rows = store.changes.list(CYCLE)
        now = {e.id: e for e in store.memories.list_all()}
        archived = {i for i in original if now[i].is_archived}
        assert archived == {r.target_id for r in rows if r.kind == "archived"}, f"write {trial}: archive without row"
        extra = {i for i, e in now.items() if i not in original and not e.is_archived}
        assert extra == {r.target_id for r in rows if r.kind == "created"}, f"write {trial}: entry without row"
        for i in extra:  # a merge is whole: every source of a live merged entry is archived, into it
            for source in json.loads(now[i].metadata.get("mergedFrom", "[]")):
                assert now[source].is_archived, f"write {trial}: merge {i} live but its source {source} too"
        for r in rows:
            if r.kind == "archived" and r.reason.startswith("merged into "):
                assert r.reason.split()[-1] in extra, f"write {trial}: {r.target_id} archived into a missing merge"
        assert facts_lost(MEMORIES, store) == [], f"write {trial}"
        if any(r.kind != "stamped" for r in rows):
            before = {e.id: (e.content, e.category, e.tags, False) for e in MEMORIES}
            assert store.changes.undo_cycle(CYCLE, now=NOW + timedelta(minutes=5)).ok, f"write {trial}"
            after = _memory_state(store)
            assert {i: after[i] for i in original} == before, f"write {trial}: undo did not restore exactly"
            assert all(after[i][3] for i in after if i not in original)
    finally:
        store.close()


@pytest.mark.slow  # a fault run: a process killed at every write
def test_a_kill_at_any_write_of_a_consolidation_apply_leaves_whole_changes(tmp_path):
    base = tmp_path / "base"
    profile = AgentProfile(base).ensure()
    seed = open_store(profile, dream_options())
    seed.memories.put_many(MEMORIES)
    seed.close()
    result, trials = _trials(base, tmp_path, "memory_consolidation", [MEMORY_ANSWER])
    counts = result["counts"]
    # b and d2 are exact duplicates of a and d1: the fold retires them before the answer applies (its writes are
    # killed too), so the answer's removal of d1 then has no carrier left and the removal guard keeps it.
    assert counts["merged"] == 2 and counts["created"] == 1 and counts["folded"] == 2
    assert counts["ephemeral"] == 1 and counts["guarded"] == 1
    assert len(trials) == result["writes"] + 1
    for n, root in trials:
        _check_memory_store(root, n)


# ----------------------------------------------------------------------------------------------- skill consolidation
SKILLS = [
    Skill(name="mcp/email-send", summary="Send email", content="Send an email with the MCP mail tool. " * 8),
    Skill(name="mcp/email-draft", summary="Draft email", content="Draft an email with the MCP mail tool. " * 8),
    Skill(name="mcp/calendar", summary="Calendar", content="Read the calendar with the MCP calendar tool. " * 8),
    Skill(name="old/unused", summary="Unused", content="An old way to send faxes. " * 8),
]
SKILL_ANSWER = {
    "toSave": [
        {
            "name": "mcp/email",
            "summary": "Send and draft email",
            "content": "Draft, then send, with the MCP mail tool.",
            "sourceNames": ["mcp/email-send", "mcp/email-draft"],
            "seeAlso": ["mcp/calendar"],
        },
        {
            "name": "mcp/guide",
            "summary": "Which MCP tool",
            "content": "Mail: mcp/email. Calendar: mcp/calendar.",
            "seeAlso": ["mcp/email", "mcp/calendar", "mcp/email-send"],
        },
    ],
    "toDelete": ["old/unused"],
}


def _skill_state(store) -> dict:
    return {s.name: (s.summary, s.content, s.see_also, s.is_archived) for s in store.skills.list(include_archived=True)}


def _check_skill_store(root: Path, trial: int, before: dict) -> None:
    store = open_store(AgentProfile(root), dream_options())
    try:
        rows = store.changes.list(CYCLE)
        now = {s.name: s for s in store.skills.list(include_archived=True)}
        archived = {n for n in before if now[n].is_archived}
        assert archived == {r.target_id for r in rows if r.kind == "archived"}, f"write {trial}: archive without row"
        new = {n for n, s in now.items() if n not in before and not s.is_archived}
        assert new == {r.target_id for r in rows if r.kind == "created"}, f"write {trial}: skill without row"
        # A merge is whole: the merged skill and the retirement of both its sources, or none of it.
        merged = "mcp/email" in new
        assert {"mcp/email-send", "mcp/email-draft"} & archived == (
            {"mcp/email-send", "mcp/email-draft"} if merged else set()
        ), f"write {trial}"
        assert "old/unused" not in archived or new, f"write {trial}: a prune without any saved replacement"
        if any(r.kind != "stamped" for r in rows):
            assert store.changes.undo_cycle(CYCLE, now=NOW + timedelta(minutes=5)).ok, f"write {trial}"
            after = _skill_state(store)
            assert {n: after[n] for n in before} == before, f"write {trial}: undo did not restore exactly"
            assert all(after[n][3] for n in after if n not in before)
    finally:
        store.close()


@pytest.mark.slow  # a fault run: a process killed at every write
def test_a_kill_at_any_write_of_a_skill_consolidation_apply_leaves_whole_changes(tmp_path):
    base = tmp_path / "base"
    profile = AgentProfile(base).ensure()
    seed = open_store(profile, dream_options())
    for skill in SKILLS:
        seed.skills.save(skill, now=NOW - timedelta(days=20))
    before = _skill_state(seed)
    seed.close()
    append_event(profile, "skill-usage", SkillUsageEvent(NOW - timedelta(days=1), "s1", "mcp/email-send"))
    result, trials = _trials(base, tmp_path, "skill_consolidation", [SKILL_ANSWER])
    assert result["counts"]["merged"] == 1 and result["counts"]["archived"] == 3
    for n, root in trials:
        _check_skill_store(root, n, before)
