"""The memory service driven directly, as an agent's interface or an operator's tool calls it: undo of a cycle and of
one change, the agent's own undo that refuses a dream cycle, a restore and its undo, review list / apply / reject,
one status shared with `dream status`, and a refused file of the linked folder that makes an undo partial. Real
profiles, real stores, real cycles."""

from __future__ import annotations

import ast
import shutil
from datetime import timedelta
from pathlib import Path

import pytest

from dream_assets import agent_memory, service
from dream_assets.cli import main
from dream_assets.cycle import run_cycle
from dream_assets.options_loader import dream_options
from dream_assets.profile import AgentProfile
from dream_assets.store import open_store
from dream_assets.store.connection import close_all

from ..conftest import NOW

LATER = NOW + timedelta(hours=1)
CYCLE = "cycle-1"
DAY = f"agent-{NOW:%Y-%m-%d}"


def _what_counts(profile: AgentProfile) -> dict[str, tuple]:
    """Every entry, live and archived, as a person reads it: text, category, tags, archive state."""
    return {
        e.id: (e.content, e.category, tuple(e.tags), e.archived_at)
        for e in open_store(profile, dream_options()).memories.list_all()
    }


@pytest.fixture(scope="module")
def cycled(tmp_path_factory) -> tuple[Path, dict[str, tuple]]:
    """The small demo agent after one cycle that merged, decayed and purged: (its folder, the entries before)."""
    from dream_assets.demo import build_demo_profile

    profile = AgentProfile(tmp_path_factory.mktemp("service") / "demo")
    build_demo_profile(profile, NOW, n_memories=0)
    before = _what_counts(profile)
    reports = run_cycle(
        profile,
        dream_options(),
        NOW,
        cycle_id=CYCLE,
        only=["archive_purge", "importance_decay", "memory_consolidation"],
    )
    assert all(r.status == "completed" for r in reports), [(r.pass_name, r.reason) for r in reports]
    close_all()
    return profile.root, before


@pytest.fixture
def agent(cycled, tmp_path) -> tuple[AgentProfile, dict[str, tuple]]:
    root, before = cycled
    copy = tmp_path / "agents" / "demo"
    shutil.copytree(root, copy)
    return AgentProfile(copy), before


# --- undo -----------------------------------------------------------------------------------------------------------


def test_undo_of_a_cycle_puts_every_entry_back_and_a_second_undo_finds_nothing_left(agent):
    profile, before = agent
    assert _what_counts(profile) != before
    report = service.undo(profile, cycle_id=CYCLE, now=LATER)
    assert report.outcome == "done" and report.undo_cycle_id == f"undo-{CYCLE}"
    assert not report.refused and not report.not_restored and not report.files_refused
    assert {"unmerged", "retired", "unpurged"} <= set(report.kinds())
    after = _what_counts(profile)
    assert {i: after[i][:3] for i in before} == {i: v[:3] for i, v in before.items()}
    assert all(after[i][3] == before[i][3] for i in before)  # live again, or archived as before
    assert all(after[i][3] is not None for i in set(after) - set(before))  # what the cycle created is retired
    assert f"undo of cycle {CYCLE}: {len(report.put_back)} put back" in report.summary

    again = service.undo(profile, cycle_id=CYCLE, now=LATER)
    assert again.outcome == "done" and not again.put_back and again.already_undone
    assert again.undo_cycle_id is None


def test_undo_names_an_unknown_cycle_and_change_and_changes_nothing(agent):
    profile, _ = agent
    before = _what_counts(profile)
    with pytest.raises(service.NotFound, match="no such cycle 'no-such-cycle'"):
        service.undo(profile, cycle_id="no-such-cycle", now=LATER)
    with pytest.raises(service.NotFound, match="no change 'no-such-change'"):
        service.undo(profile, change_id="no-such-change", now=LATER)
    with pytest.raises(service.InvalidInput, match="cycle_id or change_id"):
        service.undo(profile, now=LATER)
    assert _what_counts(profile) == before


def _change_of(profile: AgentProfile, entry_id: str, event: str) -> str:
    """The id of the change ``event`` of an entry, as its history shows it."""
    events = agent_memory.history(profile, entry_id, now=LATER).events
    return next(e.change_id for e in events if e.event == event and e.undone_at is None)


def test_undo_of_one_change_takes_back_that_change_alone_and_refuses_one_a_later_change_built_on(profile):
    kept = agent_memory.save(profile, "The staging database is refreshed every Monday.", now=NOW)
    saved = agent_memory.save(profile, "Deploys need two approvals from the platform team.", now=NOW)
    agent_memory.put(profile, saved.id, "Deploys need three approvals from the platform team.", now=NOW)
    created = _change_of(profile, saved.id, "created")

    blocked = service.undo(profile, change_id=created, now=LATER)
    assert blocked.outcome == "nothing" and blocked.blocked_by == [DAY]
    assert "undo that change (or its cycle) first" in blocked.refused[0]
    assert agent_memory.get(profile, saved.id, now=LATER).content.startswith("Deploys need three")

    put = service.undo(profile, change_id=_change_of(profile, saved.id, "updated"), now=LATER)
    assert put.outcome == "done" and [p.kind for p in put.put_back] == ["put back"]
    assert put.undo_cycle_id == f"undo-{put.change_id}"
    assert (
        agent_memory.get(profile, saved.id, now=LATER).content == "Deploys need two approvals from the platform team."
    )

    retired = service.undo(profile, change_id=created, now=LATER)
    assert retired.outcome == "done" and [p.kind for p in retired.put_back] == ["retired"]
    assert agent_memory.get(profile, saved.id, now=LATER).status == "archived"
    assert agent_memory.get(profile, kept.id, now=LATER).status == "live"  # the other save of the day stays

    assert service.undo(profile, change_id=created, now=LATER).already_undone == [f"memory {saved.id}"]


def test_dream_undo_change_from_the_command_line(profile, capsys):
    saved = agent_memory.save(profile, "The on-call rota changes on Fridays.", now=NOW)
    change = _change_of(profile, saved.id, "created")
    code = main(["undo", "--profile", str(profile.root), "--change", change, "--now", LATER.isoformat()])
    out = capsys.readouterr().out
    assert code == 0, out
    assert f"retired memory {saved.id}" in out and f"undo of change {change} (cycle {DAY}): 1 put back" in out
    assert agent_memory.get(profile, saved.id, now=LATER).status == "archived"


def test_undo_own_takes_back_the_agents_forget_and_refuses_a_dream_cycle_by_name(agent):
    profile, _ = agent
    before = _what_counts(profile)
    with pytest.raises(service.Refused, match=f"cycle {CYCLE} is not the agent's own"):
        service.undo_own(profile, cycle_id=CYCLE, now=LATER)
    dream_change = open_store(profile).changes.list(CYCLE)[0].change_id
    with pytest.raises(service.Refused, match=f"change {dream_change} was made by "):
        service.undo_own(profile, change_id=dream_change, now=LATER)
    assert _what_counts(profile) == before

    live = next(i for i, v in before.items() if v[3] is None)
    forgot = agent_memory.forget(profile, live, reason="no longer true", now=LATER)
    report = service.undo_own(profile, cycle_id=forgot.cycle_id, now=LATER)
    assert report.outcome == "done" and [p.kind for p in report.put_back] == ["put back live"]
    assert agent_memory.get(profile, live, now=LATER).status == "live"


# --- restore --------------------------------------------------------------------------------------------------------


def test_restore_puts_an_archived_memory_back_and_its_undo_archives_it_again(profile):
    saved = agent_memory.save(profile, "The VPN certificate expires in March.", now=NOW)
    agent_memory.forget(profile, saved.id, reason="renewed", now=NOW)

    restored = service.restore(profile, saved.id, now=LATER)
    assert (restored.status, restored.content) == ("restored", "The VPN certificate expires in March.")
    assert restored.cycle_id and restored.undo_command.endswith(f"--cycle {restored.cycle_id}")
    assert agent_memory.get(profile, saved.id, now=LATER).status == "live"
    assert service.restore(profile, saved.id, now=LATER).status == "already_live"
    assert agent_memory.history(profile, saved.id, now=LATER).events[-1].event == "restored"

    undone = service.undo_own(profile, cycle_id=restored.cycle_id, now=LATER)
    assert undone.outcome == "done" and [p.kind for p in undone.put_back] == ["archived again"]
    assert agent_memory.get(profile, saved.id, now=LATER).status == "archived"

    with pytest.raises(service.NotFound, match="no such id"):
        service.restore(profile, "no-such-memory", now=LATER)


# --- review ---------------------------------------------------------------------------------------------------------


def test_review_list_shows_the_held_set_and_apply_then_reject_decide_it(demo):
    reports = run_cycle(demo, dream_options(ApplyMode="review"), NOW, only=["memory_consolidation"], cycle_id="held")
    assert all(r.status in ("completed", "skipped") for r in reports)
    before = _what_counts(demo)
    listed = service.review_list(demo, now=NOW)
    assert listed.pending >= 2 and [s.cycle_id for s in listed.sets] == ["held"]
    changes = listed.sets[0].changes
    assert all(c.lines[0].startswith(f"change {c.id}  memory_consolidation") for c in changes)
    assert all(c.targets for c in changes)

    first, rest = changes[0], changes[1:]
    applied = service.review_decide(demo, "apply", change_ids=[first.id], reason="looks right", now=NOW)
    assert applied.outcome == "done" and [c.id for c in applied.done] == [first.id]
    assert applied.undo_cycle_id == "held"
    assert _what_counts(demo) != before
    again = service.review_decide(demo, "apply", change_ids=[first.id], now=NOW)
    assert again.outcome == "nothing" and again.not_found == [f"{first.id}: already applied (looks right)"]

    rejected = service.review_decide(demo, "reject", cycle_id="held", reason="not now", now=NOW)
    assert rejected.outcome == "done" and {c.id for c in rejected.done} == {c.id for c in rest}
    assert rejected.undo_cycle_id is None
    assert service.review_list(demo, now=NOW).pending == 0

    undone = service.undo(demo, cycle_id=applied.undo_cycle_id, now=LATER)
    assert undone.outcome == "done" and undone.put_back
    after = _what_counts(demo)
    assert {i: after[i] for i in before} == before


def test_review_decide_names_what_is_missing(profile):
    with pytest.raises(service.InvalidInput, match="give cycle_id or change_ids"):
        service.review_decide(profile, "apply", now=NOW)
    with pytest.raises(service.InvalidInput, match="decision 'maybe'"):
        service.review_decide(profile, "maybe", cycle_id="x", now=NOW)  # type: ignore[arg-type]
    nothing = service.review_decide(profile, "reject", cycle_id="no-such-set", now=NOW)
    assert nothing.outcome == "nothing" and nothing.not_found == ["no-such-set: no change set of that cycle"]


# --- status ---------------------------------------------------------------------------------------------------------


def test_status_is_one_shape_with_the_counts_dream_status_prints(agent, capsys):
    profile, _ = agent
    agent_memory.save(profile, "The release train leaves on Thursdays.", now=LATER)
    status = service.status(profile, now=LATER)
    assert main(["status", "--profile", str(profile.root), "--now", LATER.isoformat()]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0] == (
        f"agent demo: {status.live_memories} live memories, {status.archived_memories} archived, {status.skills} skills"
    )
    assert lines[1] == f"recall index: {status.recall_index}"
    store = open_store(profile)
    counts = store.memories.counts()
    assert (status.live_memories, status.archived_memories) == (counts["live"], counts["archived"])
    assert status.skills == len(store.skills.list())
    assert status.last_cycle_id == CYCLE
    by_name = {p.name: p for p in status.passes}
    assert by_name["memory_consolidation"].status == "completed"
    assert by_name["memory_consolidation"].fingerprint and by_name["memory_consolidation"].next_run
    assert any(line.strip() == f"next run: {by_name['memory_consolidation'].next_run}" for line in lines)
    # the agent's own call answers the same shape, with the same counts
    own = agent_memory.status(profile, now=LATER)
    assert type(own) is type(status)
    assert (own.live_memories, own.archived_memories, own.skills) == (
        status.live_memories,
        status.archived_memories,
        status.skills,
    )


# --- the linked folder ----------------------------------------------------------------------------------------------


def test_a_file_of_the_linked_folder_the_undo_cannot_put_back_makes_it_partial(profile, tmp_path):
    from ..e2e.test_folders import _linked, _merge_release_notes, _scripted_cycle

    folder = _linked(profile, tmp_path, "claude-code")
    _scripted_cycle(profile, _merge_release_notes, cycle_id="merge-cycle")
    path = folder / "project_release.md"
    path.write_text(path.read_text(encoding="utf-8") + "- Added by hand.\n", encoding="utf-8")
    report = service.undo(profile, cycle_id="merge-cycle", now=NOW)
    assert report.outcome == "partial" and report.put_back
    assert report.files_refused == [f"{path}: edited since the cycle wrote it"]
    assert f"NOT put back {path}: edited since the cycle wrote it" in report.files
    assert "1 refused (1 file(s) of the linked folder, named above)" in report.summary


# --- the CLI is a shell ---------------------------------------------------------------------------------------------


def test_the_cli_imports_nothing_from_the_store_nor_the_review_rules():
    import dream_assets.cli as cli

    tree = ast.parse(Path(cli.__file__).read_text(encoding="utf-8"))
    imported: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            imported |= {node.module or "", *(f"{node.module}.{a.name}" for a in node.names)}
        elif isinstance(node, ast.Import):
            imported |= {a.name for a in node.names}
    bad = sorted(m for m in imported if m.startswith("dream_assets.store") or m == "dream_assets.passes.review")
    assert not bad, f"cli.py imports {bad}: it calls the service instead"
    source = Path(cli.__file__).read_text(encoding="utf-8")
    assert "changes.record" not in source and "open_store" not in source


def test_no_module_of_the_service_hides_one_of_its_operations() -> None:
    """``service.save``, ``service.status``... stay functions after every module of the package was loaded (a
    submodule named like an operation replaces it on the package when first imported)."""
    import importlib
    import pkgutil
    import types

    import dream_assets.service as service

    for info in pkgutil.iter_modules(service.__path__):
        importlib.import_module(f"dream_assets.service.{info.name}")
    hidden = [name for name in service.__all__ if isinstance(getattr(service, name, None), types.ModuleType)]
    assert not hidden, hidden
    assert callable(service.save) and callable(service.status) and callable(service.undo)
