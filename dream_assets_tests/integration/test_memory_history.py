"""A memory's whole history from the change log: an entry merged from two notes, decayed, superseded, restored,
forgotten, purged and brought back by an undo lists every step, with cycle, pass, reason and the text at each."""

from __future__ import annotations

import json
from datetime import timedelta

from dream_assets import agent_memory as am
from dream_assets.cli import main
from dream_assets.llm.client import ModelClient
from dream_assets.llm.scripted import ScriptedBackend
from dream_assets.options_loader import dream_options
from dream_assets.passes.archive_purge import run_archive_purge
from dream_assets.passes.context import PassContext
from dream_assets.passes.contradiction_sweep import run_contradiction_sweep
from dream_assets.passes.importance_decay import run_importance_decay
from dream_assets.passes.memory_consolidation import run_memory_consolidation
from dream_assets.save_pipeline import save_memory

from ..conftest import NOW

PARIS = "Alice lives in Paris near the Louvre."


def _pass(pass_fn, profile, store, cycle_id, now, answer=None, **options):
    opts = dream_options(ConsolidationMinInterval=timedelta(0), ConsolidationExactFoldEnabled=False, **options)
    client = ModelClient(ScriptedBackend(answer or (lambda r: {})), profile=profile, options=opts)
    report = pass_fn(PassContext(profile, opts, now, cycle_id=cycle_id, client_factory=lambda: client, _store=store))
    assert report.status == "completed", (report.pass_name, report.reason)
    return report


def _save(store, content, *, days_ago, metadata=None, category="people/alice"):
    at = NOW - timedelta(days=days_ago)
    return save_memory(store.memories, content, category=category, metadata=metadata or {}, now=at, dedupe=False).entry


def test_an_entry_merged_superseded_restored_and_purged_lists_every_step(profile, store, capsys):
    a = _save(store, PARIS, days_ago=90, metadata={"subjectTime": "2024-01"})
    b = _save(store, "Alice lives in Paris, near the Louvre museum.", days_ago=80, metadata={"subjectTime": "2024-01"})

    def merge_all(request):
        return {
            "toDelete": [],
            "toSave": [{"content": PARIS, "sourceIds": [e["id"] for e in request.inputs["entries"]]}],
        }

    _pass(run_memory_consolidation, profile, store, "c1", NOW, merge_all)
    (merged,) = store.memories.list_live()
    assert merged.id not in (a.id, b.id)
    _pass(run_importance_decay, profile, store, "c2", NOW + timedelta(days=60))
    berlin = _save(
        store, "Alice moved to Berlin, she lives in Kreuzberg now.", days_ago=-60, metadata={"subjectTime": "2024-06"}
    )
    sweep = {"supersessions": [{"winnerId": berlin.id, "loserId": merged.id, "reason": "she moved"}]}
    _pass(run_contradiction_sweep, profile, store, "c3", NOW + timedelta(days=61), lambda r: sweep)
    assert store.memories.get(merged.id).is_archived
    restored_at = NOW + timedelta(days=62)
    store.close()
    assert main(["restore", "--profile", str(profile.root), "--id", merged.id, "--now", restored_at.isoformat()]) == 0
    am.forget(profile, merged.id, reason="no longer needed", now=restored_at + timedelta(hours=1))
    am.forget(profile, berlin.id, reason="no longer needed", now=restored_at + timedelta(hours=1))
    from dream_assets.store import open_store

    store = open_store(profile)
    purge_at = restored_at + timedelta(days=100)
    assert _pass(run_archive_purge, profile, store, "c4", purge_at).counts["purged"] >= 1
    assert store.memories.get(merged.id) is None
    store.close()
    assert main(["undo", "--profile", str(profile.root), "--cycle", "c4", "--now", purge_at.isoformat()]) == 0
    capsys.readouterr()

    events = am.history(profile, merged.id).events
    steps = [(e.event, e.cycle_id, e.pass_name) for e in events]
    assert [s[0] for s in steps] == [
        "merged in",
        "decayed",
        "superseded",
        "restored",
        "archived",
        "purged",
        "unpurged",
    ], steps
    assert steps[0][1:] == ("c1", "memory_consolidation") and steps[1][1:] == ("c2", "importance_decay")
    assert steps[2][1:] == ("c3", "contradiction_sweep") and steps[3][2] == "restore"
    assert steps[5][1:] == ("c4", "archive_purge") and steps[6][1:] == ("undo-c4", "undo")
    assert all(e.content == PARIS for e in events)  # the text at each step, the decay's too
    assert events[1].importance is not None and events[1].importance < events[0].importance
    assert f"superseded by {berlin.id}" in events[2].reason and "kept archived until" in events[6].reason
    assert events[5].undone_at is not None and events[6].undone_at is None
    # the sources' histories say they were merged out, into the merged entry
    source = am.history(profile, a.id).events
    assert [e.event for e in source] == ["merged out", "purged", "unpurged"]
    assert merged.id in source[0].reason and source[0].content == PARIS

    # the command line lists the same steps, and --json the same events
    assert main(["memory", "history", "--profile", str(profile.root), "--id", merged.id]) == 0
    out = capsys.readouterr().out
    assert [ln.split()[1] for ln in out.splitlines() if ln[:1].isdigit()][:3] == ["merged", "decayed", "superseded"]
    assert main(["memory", "history", "--profile", str(profile.root), "--id", merged.id, "--json"]) == 0
    assert [e["event"] for e in json.loads(capsys.readouterr().out)["events"]] == [e.event for e in events]
