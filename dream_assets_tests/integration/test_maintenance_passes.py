from datetime import UTC, datetime, timedelta

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dream_assets.model import MemoryEntry
from dream_assets.options import DreamOptions
from dream_assets.options_loader import dream_options
from dream_assets.passes.archive_purge import run_archive_purge
from dream_assets.passes.context import PassContext
from dream_assets.passes.importance_decay import QUIET_DECAY, decayed_importance, run_importance_decay

from ..conftest import NOW


def entry(i, *, importance=0.5, reinforced=1, archived_days=None, seen_days=0, content=None, meta=None):
    return MemoryEntry(
        id=f"m{i}",
        content=content or f"Fact {i} about the Orinoco delta.",
        category="facts",
        tags=(),
        importance=importance,
        created_at=NOW - timedelta(days=500),
        updated_at=NOW,
        last_seen_at=NOW - timedelta(days=seen_days),
        reinforcement_count=reinforced,
        metadata=meta or {},
        archived_at=None if archived_days is None else NOW - timedelta(days=archived_days),
    )


def ctx(profile, store, options=None, now=NOW):
    return PassContext(profile, options or dream_options(), now, cycle_id="cycle-1", _store=store)


# ------------------------------------------------------------------ archive purge
def test_purge_deletes_only_entries_archived_longer_than_retention(profile, store):
    store.memories.put_many(
        [entry(1, archived_days=91), entry(2, archived_days=89), entry(3), entry(4, archived_days=400)]
    )
    report = run_archive_purge(ctx(profile, store))
    assert report.summary == "2 purged, 0 kept above the high-value floor"
    assert store.memories.get("m1") is None and store.memories.get("m4") is None
    assert store.memories.get("m2") is not None and store.memories.get("m3") is not None
    assert {c.target_id for c in store.changes.list("cycle-1")} == {"m1", "m4"}


@pytest.mark.parametrize("importance,reinforced", [(0.80, 1), (0.95, 1), (0.1, 5), (0.1, 214)])
def test_high_value_floor_keeps_entries_past_retention(profile, store, importance, reinforced):
    store.memories.put_many(
        [
            entry(1, importance=importance, reinforced=reinforced, archived_days=200),
            entry(2, importance=0.79, reinforced=4, archived_days=200),
        ]
    )
    report = run_archive_purge(ctx(profile, store))
    assert report.summary == "1 purged, 1 kept above the high-value floor"
    assert store.memories.get("m1") is not None and store.memories.get("m2") is None


def test_non_positive_retention_keeps_archives_forever(profile, store):
    store.memories.put_many([entry(1, archived_days=5000)])
    report = run_archive_purge(ctx(profile, store, dream_options(MemoryArchiveRetention=timedelta(0))))
    assert report.status == "skipped" and store.memories.get("m1") is not None


# ------------------------------------------------------------------ importance decay
def days_to_floor(start: float, options: DreamOptions) -> int:
    e = entry(1, importance=start)
    for day in range(1, 400):
        r = decayed_importance(e, options, e.last_seen_at + timedelta(days=day))
        if r and r[0] <= options.ImportanceDecayFloor + 1e-12:
            return day
    raise AssertionError("never reached the floor")


def test_core_memory_reaches_floor_in_about_six_months_and_minor_in_three_and_a_half():
    o = dream_options()
    assert 170 <= days_to_floor(0.95, o) <= 185  # ~6 months
    assert 95 <= days_to_floor(0.30, o) <= 110  # ~3.5 months


def test_no_decay_inside_grace_and_first_decay_applies_only_post_grace_time(profile, store):
    store.memories.put_many([entry(1, importance=0.8, seen_days=29), entry(2, importance=0.8, seen_days=30 + 45)])
    run_importance_decay(ctx(profile, store))
    assert store.memories.get("m1").importance == 0.8
    assert store.memories.get("m2").importance == pytest.approx(0.4)  # exactly one half-life past grace


def test_decay_is_keyed_on_last_seen_not_updated(profile, store):
    e = entry(1, importance=0.8, seen_days=75)
    store.memories.put_many([e])
    store.memories.update("m1", category="facts/geo", now=NOW)  # a rewrite: updated_at = now, last_seen unchanged
    run_importance_decay(ctx(profile, store))
    assert store.memories.get("m1").importance == pytest.approx(0.4)


def _run_every(step_hours: float, span_days: int, start: float) -> float:
    o = dream_options()
    e = entry(1, importance=start, seen_days=0)
    t = NOW
    end = NOW + timedelta(days=span_days)
    while t < end:
        t = min(end, t + timedelta(hours=step_hours))
        r = decayed_importance(e, o, t)
        if r:
            e = e.with_(importance=r[0], metadata={**e.metadata, "decayAppliedThrough": r[1].isoformat()})
    return e.importance


@settings(max_examples=25, deadline=None)
@given(start=st.floats(0.11, 1.0), span=st.integers(31, 200))
def test_calendar_time_invariant_across_run_frequencies(start, span):
    twice_daily = _run_every(12, span, start)
    daily = _run_every(24, span, start)
    weekly = _run_every(24 * 7, span, start)
    once = _run_every(24 * span, span, start)
    assert twice_daily == pytest.approx(daily, abs=1e-9) == pytest.approx(weekly, abs=1e-9)
    assert daily == pytest.approx(once, abs=1e-9)


@pytest.mark.parametrize("step", [timedelta(seconds=14), timedelta(minutes=5), timedelta(hours=1)])
def test_decay_too_small_to_show_writes_nothing_and_loses_no_time(step):
    """Cycles seconds or minutes apart: a run whose decay would move an importance by less than QUIET_DECAY writes
    nothing, and the time it skipped is applied later, so at every instant the applied score carried forward from its
    applied-through stamp is the exact calendar curve. Over a year (14 s: a day) at each cadence."""
    o = dream_options()
    e = entry(1, importance=0.9, seen_days=0)
    t = start = e.last_seen_at + timedelta(days=o.ImportanceDecayGraceDays)
    end = start + (timedelta(days=1) if step < timedelta(minutes=1) else timedelta(days=365))
    runs = writes = 0
    half_life = o.ImportanceDecayHalfLifeDays
    while t < end:
        t += step
        runs += 1
        r = decayed_importance(e, o, t)
        if r:
            assert e.importance - r[0] >= QUIET_DECAY or r[0] == o.ImportanceDecayFloor
            writes += 1
            e = e.with_(importance=r[0], metadata={**e.metadata, "decayAppliedThrough": r[1].isoformat()})
        through = datetime.fromisoformat(e.metadata.get("decayAppliedThrough", start.isoformat()))
        exact = max(o.ImportanceDecayFloor, 0.9 * 0.5 ** ((t - start).total_seconds() / 86400 / half_life))
        carried = max(o.ImportanceDecayFloor, e.importance * 0.5 ** ((t - through).total_seconds() / 86400 / half_life))
        assert carried == pytest.approx(exact, abs=1e-9), t
        assert e.importance - exact < QUIET_DECAY + 1e-12  # what is shown is never a visible step behind
    # every write moved the score visibly: a run per 14 s or 5 min writes a small share of what it used to
    assert writes <= int((0.9 - o.ImportanceDecayFloor) / QUIET_DECAY) + 1
    if step <= timedelta(minutes=5):
        assert writes < runs / 2, (writes, runs)


def test_a_second_cycle_seconds_after_the_first_writes_no_decay_rows(profile, store):
    store.memories.put_many([entry(i, importance=0.8, seen_days=75) for i in range(1, 6)])
    first = run_importance_decay(ctx(profile, store))
    assert first.counts["decayed"] == 5
    later = PassContext(profile, dream_options(), NOW + timedelta(seconds=14), cycle_id="cycle-2", _store=store)
    second = run_importance_decay(later)
    assert second.counts["decayed"] == 0 and not store.changes.list("cycle-2")
    assert len(store.changes.list("cycle-1")) == 5


def test_decay_does_not_move_the_corpus_fingerprint_or_touch_archived(profile, store):
    store.memories.put_many(
        [entry(1, importance=0.9, seen_days=120), entry(2, importance=0.9, seen_days=120, archived_days=3)]
    )
    fp = store.memories.fingerprint()
    report = run_importance_decay(ctx(profile, store))
    assert report.counts["decayed"] == 1
    assert store.memories.fingerprint() == fp
    assert store.memories.get("m2").importance == 0.9
    assert store.memories.get("m1").content == "Fact 1 about the Orinoco delta."


def test_half_life_zero_disables_decay(profile, store):
    store.memories.put_many([entry(1, importance=0.9, seen_days=300)])
    report = run_importance_decay(ctx(profile, store, dream_options(ImportanceDecayHalfLifeDays=0)))
    assert report.status == "skipped" and store.memories.get("m1").importance == 0.9


def test_running_twice_at_the_same_instant_decays_once(profile, store):
    store.memories.put_many([entry(1, importance=0.8, seen_days=75)])
    run_importance_decay(ctx(profile, store))
    run_importance_decay(ctx(profile, store))
    assert store.memories.get("m1").importance == pytest.approx(0.4)


def test_a_pass_that_raises_is_reported_failed_and_the_cycle_goes_on(profile, store, monkeypatch):
    from dataclasses import replace

    from dream_assets.cycle import run_cycle
    from dream_assets.passes import registry

    def broken(ctx):
        raise RuntimeError("disk on fire")

    passes = tuple(replace(p, body=broken) if p.name == "importance_decay" else p for p in registry.PASSES)
    monkeypatch.setattr(registry, "PASSES", passes)
    store.memories.put_many([entry(1, archived_days=200)])
    reports = {
        r.pass_name: r
        for r in run_cycle(profile, dream_options(), NOW, only=["archive_purge", "importance_decay", "log_retention"])
    }
    assert reports["importance_decay"].status == "failed" and "disk on fire" in reports["importance_decay"].reason
    assert reports["archive_purge"].status == "completed" and reports["log_retention"].status == "completed"


# ------------------------------------------------------------------ decay counts from the last content write
def test_a_dream_rewrite_delays_decay_to_the_merge_but_does_not_shield_the_entry(profile, store):
    from dream_assets.passes.memory_consolidation.merge import build_merged_entry

    merged_at = NOW - timedelta(days=10)
    sources = [
        entry(1, importance=0.8, seen_days=120, meta={"decayAppliedThrough": "2026-10-31T12:00:00Z"}),
        entry(2, importance=0.6, seen_days=100),
    ]
    merged = build_merged_entry(
        sources,
        entry_id="m9",
        content="Fact 1 and 2 about the Orinoco delta.",
        category="facts",
        tags=(),
        now=merged_at,
    )
    store.memories.put(merged)
    run_importance_decay(ctx(profile, store))
    # 10 days since the merge, not 30 since the carried decay stamp nor 90 past the sighting's grace
    assert store.memories.get("m9").importance == pytest.approx(0.8 * 0.5 ** (10 / 45))
    run_importance_decay(ctx(profile, store, now=NOW + timedelta(days=45)))
    assert store.memories.get("m9").importance == pytest.approx(0.8 * 0.5 ** (55 / 45))


def test_a_content_edit_after_a_decay_restarts_the_clock_and_other_edits_do_not(profile, store):
    first = NOW - timedelta(days=20)
    store.memories.put_many([entry(1, importance=0.8, seen_days=120), entry(2, importance=0.8, seen_days=120)])
    run_importance_decay(ctx(profile, store, now=first))
    after_first = store.memories.get("m1").importance
    assert after_first == store.memories.get("m2").importance < 0.8
    edit = NOW - timedelta(days=5)
    store.memories.update("m1", content="Fact 1 about the Orinoco delta, corrected.", now=edit)
    store.memories.update("m2", category="facts/geo", tags=["rivers"], now=edit)
    run_importance_decay(ctx(profile, store))
    assert store.memories.get("m1").importance == pytest.approx(after_first * 0.5 ** (5 / 45))
    assert store.memories.get("m2").importance == pytest.approx(after_first * 0.5 ** (20 / 45))
    run_importance_decay(ctx(profile, store, now=NOW + timedelta(days=9)))  # the edit is counted once
    assert store.memories.get("m1").importance == pytest.approx(after_first * 0.5 ** (14 / 45))


@pytest.mark.parametrize(
    "meta", [{}, {"decayAppliedThrough": "9999-12-31T23:00:00-05:00"}, {"mergedAt": "9999-12-31T23:00:00-05:00"}]
)
def test_a_sighting_at_the_end_of_the_calendar_is_not_decayed_and_does_not_fail_the_pass(profile, store, meta):
    """An imported last_seen_at of 9999-12-31 (or a stamp past the calendar in UTC): its grace period never ends, so
    it is not decayed, and the others are."""
    far = entry(1, importance=0.8).with_(last_seen_at=datetime(9999, 12, 31, 23, 59, 59, tzinfo=UTC), metadata=meta)
    store.memories.put_many([far, entry(2, importance=0.8, seen_days=30 + 45)])
    report = run_importance_decay(ctx(profile, store))
    assert report.status == "completed", report.summary
    assert store.memories.get("m1").importance == 0.8
    assert store.memories.get("m2").importance == pytest.approx(0.4)
