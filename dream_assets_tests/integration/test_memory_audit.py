"""The memory audit over snapshot files: provenance, orphaned merge sources, repeated rejections, the trend file."""

import json
from datetime import timedelta

import pytest

from dream_assets.cycle import run_cycle
from dream_assets.demo import build_demo_profile
from dream_assets.memory_audit import merged_from, read_trend, run_audit
from dream_assets.options_loader import dream_options
from dream_assets.save_pipeline import save_memory
from dream_assets.store import open_store
from dream_assets.store.parquet import write_parquet
from dream_assets.store.snapshots import take_snapshot

from ..conftest import NOW


def _cycle_and_snapshot(profile, options, now):
    run_cycle(profile, options, now, only=["memory_consolidation"])
    take_snapshot(profile, open_store(profile, options), now)


def _merged_entry(store):
    return next(e for e in store.memories.list_live() if e.metadata.get("mergedFrom"))


def test_a_clean_consolidation_leaves_nothing_for_the_audit(profile, options):
    build_demo_profile(profile, NOW, with_logs=False)
    take_snapshot(profile, open_store(profile, options), NOW)
    _cycle_and_snapshot(profile, options, NOW + timedelta(hours=1))
    result = run_audit(profile, options, NOW + timedelta(hours=1))
    assert result.counts["unexplained_deletes"] == 0
    assert result.counts["dangling_provenance"] == 0 and result.counts["orphaned_sources"] == 0


def test_deleting_a_merged_entry_orphans_its_sources_and_deleting_a_source_dangles_provenance(profile, options):
    build_demo_profile(profile, NOW, with_logs=False)
    _cycle_and_snapshot(profile, options, NOW)
    store = open_store(profile, options)
    merged = _merged_entry(store)
    sources = merged_from(merged.metadata)
    other = next(e for e in store.memories.list_live() if e.metadata.get("mergedFrom") and e.id != merged.id)
    with store.connection.session() as conn:  # hard deletes outside the archive purge
        conn.execute("DELETE FROM memories WHERE id = ?", [merged.id])
        conn.execute("DELETE FROM memories WHERE id = ?", [merged_from(other.metadata)[0]])
    take_snapshot(profile, store, NOW + timedelta(hours=1))
    result = run_audit(profile, options, NOW + timedelta(hours=1))
    assert merged.id in result.unexplained_deletes
    assert set(sources) <= set(result.orphaned_sources)
    assert f"{other.id} -> {merged_from(other.metadata)[0]}" in result.dangling_provenance


def test_purged_sources_dangle_by_design(profile, options):
    build_demo_profile(profile, NOW, with_logs=False)
    _cycle_and_snapshot(profile, options, NOW)
    store = open_store(profile, options)
    merged = _merged_entry(store)
    store.memories.purge(merged_from(merged.metadata), now=NOW + timedelta(days=91))
    take_snapshot(profile, store, NOW + timedelta(days=91))
    result = run_audit(profile, options, NOW + timedelta(days=91))
    assert result.counts["dangling_provenance"] == 0 and result.counts["unexplained_deletes"] == 0


def test_a_cluster_rejected_cycle_after_cycle_is_reported(profile, options):
    build_demo_profile(profile, NOW, with_logs=False)
    store = open_store(profile, options)
    victims = [e.id for e in store.memories.list_live()[:2]]
    for i in range(3):
        at = (NOW + timedelta(days=i)).isoformat()
        store.memories.set_metadata(
            {v: {"consolidationRejectedCluster": "cluster-x", "consolidationRejectedAt": at} for v in victims}
        )
        take_snapshot(profile, store, NOW + timedelta(days=i))
    result = run_audit(profile, options, NOW + timedelta(days=2))
    assert result.repeated_rejections == {"cluster-x": 3}


def test_trend_file_keeps_400_days(profile, options):
    build_demo_profile(profile, NOW, with_logs=False)
    take_snapshot(profile, open_store(profile, options), NOW)
    run_audit(profile, options, NOW - timedelta(days=500))
    run_audit(profile, options, NOW - timedelta(days=10))
    run_audit(profile, options, NOW)
    assert len(read_trend(profile)) == 2
    assert all("live" in row for row in read_trend(profile))
    assert json.loads(profile.audit_trend_path.read_text().splitlines()[-1])["at"].startswith("2026-11-30")


def test_pause_file_only_when_opted_in(profile, options):
    build_demo_profile(profile, NOW, with_logs=False)
    store = open_store(profile, options)
    take_snapshot(profile, store, NOW)
    with store.connection.session() as conn:
        conn.execute("DELETE FROM memories WHERE id = (SELECT min(id) FROM memories)")
    take_snapshot(profile, store, NOW + timedelta(hours=1))
    run_audit(profile, options, NOW + timedelta(hours=1))
    assert not profile.consolidation_pause_path.exists()
    run_audit(profile, dream_options(AuditPauseOnHardDelete=True), NOW + timedelta(hours=1))
    assert profile.consolidation_pause_path.exists()


@pytest.mark.parametrize("written_before_successors", [False, True])
def test_deleting_the_entry_an_exact_duplicate_was_folded_into_orphans_the_folded_source(
    profile, options, written_before_successors
):
    """Also in a snapshot written before change rows named their successor: its rows say it in their reasons."""
    from dream_assets.model import MemoryEntry

    store = open_store(profile, options)
    for i, (text, days) in enumerate(
        (("The gate code is 5521.", 9), ("the gate code is 5521", 1), ("Kestrel ships on Fridays.", 3))
    ):
        at = NOW - timedelta(days=days)
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
    _cycle_and_snapshot(profile, options, NOW)
    assert store.memories.get("m1").is_archived and merged_from(store.memories.get("m0").metadata) == ["m1"]
    with store.connection.session() as conn:  # a hard delete outside the archive purge
        conn.execute("DELETE FROM memories WHERE id = 'm0'")
    latest, _ = take_snapshot(profile, store, NOW + timedelta(hours=1))
    if written_before_successors:
        old = ["cycle_id", "pass_name", "kind", "target_type", "target_id", "reason", "after_json", "created_at"]
        changes = latest.read("changes", old)
        write_parquet(
            latest.path / "changes.parquet",
            {k: ("TIMESTAMP" if k == "created_at" else "VARCHAR", [c[k] for c in changes]) for k in old},
        )
    result = run_audit(profile, options, NOW + timedelta(hours=1))
    assert "m0" in result.unexplained_deletes and "m1" in result.orphaned_sources


def test_a_replayed_cycle_at_the_same_instant_takes_its_snapshot_and_keeps_the_earlier_one(profile, options):
    from dream_assets.store.snapshots import list_snapshots

    build_demo_profile(profile, NOW, with_logs=False)
    store = open_store(profile, options)
    first, _ = take_snapshot(profile, store, NOW)
    save_memory(store.memories, "Replays take their own snapshot.", now=NOW)
    second, counts = take_snapshot(profile, store, NOW)  # a second cycle with the same --now
    (listed,) = list_snapshots(profile)
    assert listed.path == second.path and listed.taken_at == NOW
    assert "Replays take their own snapshot." in [r["content"] for r in listed.read("memories", ["content"])]
    kept = [p for p in profile.snapshots_dir.iterdir() if p.name.startswith(first.path.name + ".replaced-")]
    assert len(kept) == 1 and (kept[0] / "memories.parquet").is_file()
    assert run_audit(profile, options, NOW).counts["unexplained_deletes"] == 0
