"""Review before apply: a pass in ``review`` or ``review-risky`` leaves the live store as it was, its changes wait as
a pending set, and applying the whole set gives what ``auto`` would have done; a change whose target was edited
meanwhile is refused, a rejected merge is remembered as a cluster left apart, and pending sets expire."""

from __future__ import annotations

import shutil
import subprocess
import sys
import textwrap
from datetime import timedelta

import pytest

from dream_assets.cli import main
from dream_assets.cycle import run_cycle
from dream_assets.options_loader import dream_options
from dream_assets.passes import review
from dream_assets.passes.memory_consolidation.select import CLUSTER_DECLINED_KEY, CLUSTER_SET_KEY, cluster_set_id
from dream_assets.passes.registry import PASSES
from dream_assets.profile import AgentProfile
from dream_assets.store import open_store
from dream_assets.store.connection import close_all

from ..conftest import NOW

LATER = NOW + timedelta(hours=1)
STORE_PASSES = [p.name for p in PASSES if p.options is not None and p.options.reviewable()]


def _dump(profile: AgentProfile) -> tuple[list[dict], list[dict]]:
    """Every entry (live and archived) and skill, in full."""
    store = open_store(profile, dream_options())
    return (
        sorted((e.to_dict() for e in store.memories.list_all()), key=lambda d: d["id"]),
        sorted((s.to_dict() for s in store.skills.list(include_archived=True)), key=lambda d: d["name"]),
    )


def _as_a_user_sees_it(profile: AgentProfile) -> tuple:
    """The store without ids a pass draws at random (a merged entry's): content, category, tags, importance,
    reinforcement and archive state of every entry; every skill."""
    entries, skills = _dump(profile)
    memories = sorted(
        (
            e["content"],
            e["category"],
            tuple(e["tags"]),
            round(e["importance"], 9),
            e["reinforcement_count"],
            e["archived_at"],
        )
        for e in entries
    )
    return memories, [(s["name"], s["summary"], s["content"], tuple(s["see_also"]), s["archived_at"]) for s in skills]


@pytest.fixture
def two_demos(demo, tmp_path) -> tuple[AgentProfile, AgentProfile]:
    other = tmp_path / "other" / "demo"
    close_all()  # an idle connection letting go checkpoints its log: never in the middle of the copy
    shutil.copytree(demo.root, other)
    return demo, AgentProfile(other)


def _run(profile: AgentProfile, pass_name: str, mode: str, cycle: str) -> None:
    options = dream_options(ApplyMode=mode)
    reports = run_cycle(profile, options, NOW, only=[pass_name], cycle_id=cycle)
    assert all(r.status in ("completed", "skipped") for r in reports), [(r.pass_name, r.summary) for r in reports]


@pytest.mark.slow  # every pass that writes the store, each on its own copy of the store
def test_each_pass_in_review_leaves_the_live_store_unchanged(demo):
    """Every pass that writes the store, one after another in one cycle: the entries and skills stay byte for byte
    what they were."""
    before = _dump(demo)
    options = dream_options(ApplyMode="review")
    reports = run_cycle(demo, options, NOW, only=STORE_PASSES, cycle_id="c-review")
    assert all(r.status in ("completed", "skipped") for r in reports), [(r.pass_name, r.summary) for r in reports]
    assert _dump(demo) == before
    store = open_store(demo, options)
    pending = review.list_changes(store)
    assert pending, "the demo gives the passes something to change"
    assert {c.pass_name for c in pending} >= {"archive_purge", "memory_consolidation"}
    assert not store.changes.list("c-review"), "nothing of a held change is in the change log yet"
    assert not (demo.root / ".review").exists(), "the private copies are gone"


def _as_the_statuses_say(profile: AgentProfile) -> list[str]:
    """Entries and skills not as the pass's pending changes say: each target as the last applied change left it, or
    as the first change found it when none was applied."""
    store = open_store(profile, dream_options())
    expected: dict[tuple[str, str], tuple] = {}
    for c in review.list_changes(store, status=None):
        for t in c.targets:
            if c.status == review.APPLIED:
                expected[(t.type, t.id)] = (t.after, f"applied {c.label}")
            else:
                expected.setdefault((t.type, t.id), (t.before, f"{c.status} {c.label}"))
    wrong = []
    for (kind, i), (record, why) in expected.items():
        now = review._current(store, kind, i)
        if review._edited(now, record):
            wrong.append(f"{kind} {i} is not as the {why} says")
    return wrong


@pytest.mark.parametrize("pass_name", STORE_PASSES)
def test_each_pass_in_review_risky_holds_what_it_holds(demo, pass_name):
    """Each pass on its own in review-risky: a held change has not moved its targets, an applied one (a safe kind)
    has, and nothing else in the store moved."""
    _run(demo, pass_name, "review-risky", "c1")
    store = open_store(demo, dream_options())
    held, applied = review.list_changes(store), review.list_changes(store, status=review.APPLIED)
    assert all(c.safe for c in applied)
    if pass_name in ("importance_decay", "archive_purge"):
        assert not held, "decay and retention purges are safe kinds"
    assert not _as_the_statuses_say(demo)
    applied_targets = {(t.type, t.id) for c in applied for t in c.targets}
    held_only = {(t.type, t.id) for c in held for t in c.targets} - applied_targets
    rows = {(c.target_type, c.target_id) for c in store.changes.list("c1") if c.kind != "stamped"}
    assert rows <= applied_targets, "every change in the log is one of the applied safe changes"
    assert not rows & held_only


def test_review_risky_applies_only_the_safe_kinds(two_demos):
    auto, risky = two_demos
    before = _dump(risky)
    _run(risky, "memory_consolidation", "review-risky", "c1")
    store = open_store(risky, dream_options())
    held = review.list_changes(store)
    applied = review.list_changes(store, status=review.APPLIED)
    assert held and all(not c.safe for c in held)
    assert {c.label for c in held} & {"merge", "stand-alone removal", "new entry"}
    assert all(c.safe for c in applied)
    # The held merges did not move: every source of a held merge is still live and unchanged.
    entries = {e["id"]: e for e in _dump(risky)[0]}
    old = {e["id"]: e for e in before[0]}
    for c in held:
        for t in c.targets:
            if t.before is not None:
                assert entries[t.id] == old[t.id] or t.id in {x.id for a in applied for x in a.targets}


@pytest.mark.parametrize("pass_name", STORE_PASSES)
def test_apply_of_a_whole_set_equals_auto(two_demos, pass_name):
    auto, reviewed = two_demos
    _run(auto, pass_name, "auto", "c1")
    _run(reviewed, pass_name, "review", "c1")
    assert main(["apply", "--profile", str(reviewed.root), "--cycle", "c1", "--reason", "looks right"]) in (0, 2)
    close_all()
    assert _as_a_user_sees_it(reviewed) == _as_a_user_sees_it(auto)
    # Applied changes are in the change log like automatic ones: the kinds per target match.
    a, r = open_store(auto, dream_options()), open_store(reviewed, dream_options())
    kinds = lambda s: sorted((c.pass_name, c.kind) for c in s.changes.list("c1"))  # noqa: E731
    assert kinds(r) == kinds(a)


def test_applied_changes_undo_like_auto_ones(demo):
    before = _dump(demo)
    _run(demo, "memory_consolidation", "review", "c1")
    assert main(["apply", "--profile", str(demo.root), "--cycle", "c1"]) == 0
    assert _dump(demo) != before
    assert main(["undo", "--profile", str(demo.root), "--cycle", "c1"]) == 0
    live = sorted((e["content"], e["category"]) for e in _dump(demo)[0] if e["archived_at"] is None)
    assert live == sorted((e["content"], e["category"]) for e in before[0] if e["archived_at"] is None)


def _propose_decay_and_consolidation(profile: AgentProfile) -> None:
    """Both passes in review under one cycle, consolidation's set stored first: each pass proposes on the live store
    as it is (neither moves it), so which is stored first must not matter to the apply."""
    for pass_name in ("memory_consolidation", "importance_decay"):
        _run(profile, pass_name, "review", "c1")


def _decayed_as_proposed(profile: AgentProfile) -> None:
    store = open_store(profile, dream_options())
    [decay] = review.list_changes(store, status=None, cycle_id="c1")[:1]
    assert decay.pass_name == "importance_decay" and decay.status == review.APPLIED, (decay.label, decay.status)
    # an entry no later change of the set touched keeps the importance the decay gave it
    later = {
        t.id
        for c in review.list_changes(store, status=None, cycle_id="c1")[1:]
        if c.label != "review stamps"
        for t in c.targets
    }
    entries = {e.id: e for e in store.memories.list_all()}
    alone = [t for t in decay.targets if t.id not in later]
    assert alone and all(entries[t.id].importance == pytest.approx(t.after["importance"]) for t in alone)


def test_applying_a_whole_cycle_applies_the_decay_before_the_folds_over_the_same_entries(demo, capsys):
    """Every pass of a set proposes at the cycle's time: the set applies in the spec's pass order (decay before
    consolidation), so a fold over a decayed entry does not make the decay look edited meanwhile."""
    _propose_decay_and_consolidation(demo)
    store = open_store(demo, dream_options())
    pending = review.list_changes(store)
    decayed = {t.id for c in pending if c.pass_name == "importance_decay" for t in c.targets}
    folded = {t.id for c in pending if c.label == "exact fold" for t in c.targets}
    assert decayed & folded, "the demo decays entries that consolidation folds"
    capsys.readouterr()
    assert main(["apply", "--profile", str(demo.root), "--cycle", "c1"]) == 0
    assert "refused" not in capsys.readouterr().err
    assert not review.list_changes(store)
    assert {c.status for c in review.list_changes(store, status=None)} == {review.APPLIED}
    _decayed_as_proposed(demo)


_CRASHING_APPLY = textwrap.dedent("""
    import os, sys
    from dream_assets.cli import main
    from dream_assets.passes import review

    root, step, after_n = sys.argv[1], sys.argv[2], int(sys.argv[3])
    seen = 0

    def crash(name):
        global seen
        if name == step:
            seen += 1
            if seen > after_n:
                os._exit(9)

    review.step_hook = crash
    main(["apply", "--profile", root, "--cycle", "c1"])
    os._exit(0)
""")


@pytest.mark.parametrize("after_n", [0, 1, 4])
@pytest.mark.slow  # a fault run: an apply killed inside a change's transaction, then run again
def test_an_apply_killed_half_way_applies_the_rest_with_the_decay_on_retry(demo, capsys, after_n):
    _propose_decay_and_consolidation(demo)
    close_all()
    done = subprocess.run(
        [sys.executable, "-c", _CRASHING_APPLY, str(demo.root), "apply:written", str(after_n)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 9, done.stderr
    store = open_store(demo, dream_options())
    assert len(review.list_changes(store, status=review.APPLIED)) == after_n
    capsys.readouterr()
    assert main(["apply", "--profile", str(demo.root), "--cycle", "c1"]) == 0
    assert "refused" not in capsys.readouterr().err
    assert {c.status for c in review.list_changes(store, status=None)} == {review.APPLIED}
    _decayed_as_proposed(demo)


def test_a_change_whose_target_was_edited_meanwhile_is_refused_and_reported(demo, capsys):
    _run(demo, "memory_consolidation", "review", "c1")
    store = open_store(demo, dream_options())
    merge = next(c for c in review.list_changes(store) if c.label == "merge")
    source = review.merge_sources(merge)[0]
    edited = store.memories.get(source)
    store.memories.replace(edited.with_(content=edited.content + " (edited by hand)"))
    capsys.readouterr()
    code = main(["apply", "--profile", str(demo.root), "--change", merge.change_id, "--reason", "ok"])
    out = capsys.readouterr()
    assert code == 1
    assert f"refused {merge.change_id}" in out.err and source in out.err and "edited" in out.err
    assert store.memories.get(source).content.endswith("(edited by hand)")
    assert not store.memories.get(source).is_archived
    [closed] = [c for c in review.list_changes(store, status=None) if c.change_id == merge.change_id]
    assert closed.status == review.REFUSED
    # The rest of the set still waits, and applies; only changes built on the edited entry are refused too.
    capsys.readouterr()
    code = main(["apply", "--profile", str(demo.root), "--cycle", "c1"])
    refusals = [line for line in capsys.readouterr().err.splitlines() if line.startswith("refused")]
    assert code == (1 if refusals else 0)
    assert all(source in line for line in refusals)
    assert not review.list_changes(store)
    assert store.memories.get(source).content.endswith("(edited by hand)")


def test_reject_stamps_the_cluster_and_it_is_not_proposed_again(demo, capsys):
    _run(demo, "memory_consolidation", "review", "c1")
    store = open_store(demo, dream_options())
    pending = review.list_changes(store)
    merge = next(c for c in pending if c.label == "merge")
    sources = review.merge_sources(merge)
    others = [c.change_id for c in pending if c.change_id != merge.change_id]
    assert main(["apply", "--profile", str(demo.root), "--change", *others]) == 0
    assert main(["reject", "--profile", str(demo.root), "--change", merge.change_id, "--reason", "two people"]) == 0
    stamped = store.memories.get_many(sources)
    assert all(e.metadata.get(CLUSTER_SET_KEY) == cluster_set_id(sources) for e in stamped.values())
    assert all(e.metadata.get(CLUSTER_DECLINED_KEY) == "1" for e in stamped.values())
    assert all(not e.is_archived for e in stamped.values())
    [closed] = [c for c in review.list_changes(store, status=None) if c.change_id == merge.change_id]
    assert closed.status == review.REJECTED and closed.decision_reason == "two people"
    # The next consolidation (forced, on the same store) does not propose that merge again.
    options = dream_options(ApplyMode="review", DreamPassChangeGateEnabled=False, ConsolidationMinInterval=timedelta(0))
    reports = run_cycle(demo, options, LATER, only=["memory_consolidation"], cycle_id="c2")
    assert reports[0].status == "completed", reports[0].summary
    again = [c for c in review.list_changes(store, cycle_id="c2") if c.label == "merge"]
    assert all(set(review.merge_sources(c)) != set(sources) for c in again)


def test_pending_sets_expire_and_say_so(demo, capsys):
    options = dream_options(ApplyMode="review", ReviewExpiryDays=2)
    run_cycle(demo, options, NOW, only=["memory_consolidation"], cycle_id="c1")
    store = open_store(demo, options)
    n = len(review.decisions(store))
    assert n
    capsys.readouterr()
    assert main(["review", "--profile", str(demo.root), "--now", (NOW + timedelta(days=1)).isoformat()]) == 0
    out = capsys.readouterr().out
    assert f"{n} change(s) wait" in out and "expires 2026-12-02" in out
    assert main(["review", "--profile", str(demo.root), "--now", (NOW + timedelta(days=3)).isoformat()]) == 0
    out = capsys.readouterr().out
    assert "nothing waits for review" in out and f"{n} expired" in out
    code = main(["apply", "--profile", str(demo.root), "--cycle", "c1", "--now", (NOW + timedelta(days=3)).isoformat()])
    assert code == 2
    assert "expired" in capsys.readouterr().err


def test_review_lists_readable_diffs(demo, capsys):
    _run(demo, "memory_consolidation", "review", "c1")
    store = open_store(demo, dream_options())
    merge = next(c for c in review.list_changes(store) if c.label == "merge")
    capsys.readouterr()
    assert main(["review", "--profile", str(demo.root)]) == 0
    out = capsys.readouterr().out
    assert f"change {merge.change_id}  memory_consolidation  merge" in out
    source = review.merge_sources(merge)[0]
    text = next(t.before["content"] for t in merge.targets if t.id == source)
    assert f"- [{next(t.before['category'] for t in merge.targets if t.id == source)}] {text}" in out
    assert "dream apply" in out and "dream reject" in out


def test_apply_twice_and_unknown_ids(demo, capsys):
    _run(demo, "archive_purge", "review", "c1")
    store = open_store(demo, dream_options())
    [first, *_] = review.list_changes(store)
    assert main(["apply", "--profile", str(demo.root), "--change", first.change_id]) == 0
    capsys.readouterr()
    assert main(["apply", "--profile", str(demo.root), "--change", first.change_id]) == 2
    assert "already applied" in capsys.readouterr().err
    assert main(["apply", "--profile", str(demo.root), "--change", "nonsense"]) == 2
    assert "no such pending change" in capsys.readouterr().err


def _review_check(result):
    [check] = [
        e.event_specific_data
        for e in result.all_events
        if e.event_type_value == "ASSET_CHECK_EVALUATION"
        and e.event_specific_data.check_name == "nothing_waits_for_review"
    ]
    return check


@pytest.mark.slow  # three Dagster runs on a real instance
def test_dagster_check_warns_and_the_apply_job_applies_from_run_config(root, demo, instance):
    import dagster as dg

    from dream_assets.definitions import build_definitions
    from dream_assets.orchestration.deployment import NOW_TAG, DreamDeployment
    from dream_assets.orchestration.partitions import AGENTS

    (demo.root / "dream.toml").write_text('MemoryConsolidationApplyMode = "review"\n', encoding="utf-8")
    before = _dump(demo)
    instance.add_dynamic_partitions(AGENTS, ["demo"])
    defs = build_definitions(DreamDeployment(profile_root=str(root), now=NOW.isoformat()))
    cycle = defs.resolve_job_def("dream_cycle").execute_in_process(
        instance=instance,
        partition_key="demo",
        tags={NOW_TAG: NOW.isoformat()},
        asset_selection=[dg.AssetKey("memory_consolidation"), dg.AssetKey("review_queue")],
    )
    assert cycle.success
    close_all()
    assert _dump(demo) == before
    n = len(review.decisions(open_store(demo, dream_options())))
    warned = _review_check(cycle)
    assert not warned.passed and warned.severity == dg.AssetCheckSeverity.WARN
    assert f"agent demo: {n} change(s) wait for review" in warned.description

    applied = defs.resolve_job_def("apply_change_set").execute_in_process(
        instance=instance,
        partition_key="demo",
        tags={NOW_TAG: NOW.isoformat()},
        run_config={"ops": {"review_queue": {"config": {"decision": "apply", "cycle": cycle.run_id, "reason": "ok"}}}},
    )
    assert applied.success
    green = _review_check(applied)
    assert green.passed and "nothing waits for review" in green.description
    close_all()
    store = open_store(demo, dream_options())
    assert not review.list_changes(store)
    applied_now = review.list_changes(store, status=review.APPLIED)
    assert len([c for c in applied_now if not review.marks_only(c)]) == n, "every decision, and its housekeeping too"
    assert {c.kind for c in store.changes.list(cycle.run_id)} >= {"created", "archived"}

    # A decision on nothing waiting fails the run, naming what it could not find.
    again = defs.resolve_job_def("apply_change_set").execute_in_process(
        instance=instance,
        partition_key="demo",
        run_config={"ops": {"review_queue": {"config": {"decision": "apply", "change_ids": ["nonsense"]}}}},
        raise_on_error=False,
    )
    assert not again.success
    [failure] = again.get_step_failure_events()
    assert "nonsense: no such pending change" in failure.event_specific_data.error.message


def test_the_cycle_report_and_status_show_what_waits(demo, capsys):
    _run(demo, "memory_consolidation", "review", "c1")
    n = len(review.decisions(open_store(demo, dream_options())))
    capsys.readouterr()
    assert main(["report", "--profile", str(demo.root), "--cycle", "c1"]) == 0
    out = capsys.readouterr().out
    assert f"## Waiting for review ({n})" in out and "memory_consolidation, pending:" in out
    assert f"dream apply --profile {demo.root} --cycle c1" in out
    assert main(["status", "--profile", str(demo.root), "--now", NOW.isoformat()]) == 0
    out = capsys.readouterr().out
    assert f"review: {n} change(s) wait for review (" in out and "the first expires 2026-12-14" in out
    assert main(["status", "--profile", str(demo.root), "--now", (NOW + timedelta(days=15)).isoformat()]) == 0
    out = capsys.readouterr().out
    assert f"review: {n} change(s) expired unreviewed" in out and "wait for review" not in out
    later = (NOW + timedelta(days=15)).isoformat()
    assert main(["report", "--profile", str(demo.root), "--cycle", "c1", "--now", later]) == 0
    out = capsys.readouterr().out
    assert "## Waiting for review (0)" in out and "memory_consolidation, expired:" in out and "not applied" in out


def test_housekeeping_marks_wait_with_their_set_but_are_never_a_decision(demo):
    """The sweep's "seen unchanged" marks and consolidation's review stamps are held with the cycle's set (the live
    store does not take them before a decision), are not listed or counted as changes waiting for review, and an
    apply of the set writes them with the rest."""
    from dream_assets import service
    from dream_assets.passes.contradiction_sweep import REVIEWED_KEY

    _run(demo, "contradiction_sweep", "review", "c1")
    store = open_store(demo, dream_options())
    held = review.list_changes(store)
    marks = [c for c in held if review.marks_only(c)]
    assert marks, "the demo's sweep marks the entries it saw unchanged"
    assert all(c.label == "review stamps" and c.safe for c in marks)
    marked = {t.id for c in marks for t in c.targets}
    assert not any(REVIEWED_KEY in store.memories.get(i).metadata for i in marked), "held, not yet in the live store"
    listed = service.review_list(demo, now=NOW)
    shown = {c.id for s in listed.sets for c in s.changes}
    assert not shown & {c.change_id for c in marks}
    assert listed.pending == len(held) - len(marks) == len(shown)
    assert review.waiting(store, NOW).count == listed.pending
    service.review_decide(demo, "apply", cycle_id="c1", now=NOW)
    store = open_store(demo, dream_options())
    assert all(REVIEWED_KEY in store.memories.get(i).metadata for i in marked if not store.memories.get(i).is_archived)
    assert not review.list_changes(store), "the apply of the set took its housekeeping too"
