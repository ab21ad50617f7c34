"""Two cycles on the demo agent (as `make run` twice), then `dream undo` of both, newest first: the store is the
pre-cycle snapshot again — live entries, importances, archive state, skills — and whatever is not exactly as before
is named by the undo's output, with the reason."""

from __future__ import annotations

import re
from datetime import timedelta

import pytest

from dream_assets.cli import main
from dream_assets.cycle import run_cycle
from dream_assets.cycle_report import build_cycle_report
from dream_assets.options_loader import dream_options
from dream_assets.passes.registry import PASSES
from dream_assets.store import open_store
from dream_assets.store.changes import KEEP_ARCHIVED_UNTIL_KEY
from dream_assets.store.connection import close_all

from ..conftest import NOW


def _dump(profile) -> dict[tuple[str, str], dict]:
    store = open_store(profile)
    try:
        out = {("memory", e.id): e.to_dict() for e in store.memories.list_all()}
        out.update({("skill", s.name): s.to_dict() for s in store.skills.list(include_archived=True)})
        return out
    finally:
        store.close()
        close_all()


@pytest.mark.slow  # two whole cycles on the full demo and their undo: about 20 s on 2 loaded cores
def test_two_demo_cycles_undone_newest_first_give_back_the_pre_cycle_store_or_say_what_differs(full_demo, capsys):
    before = _dump(full_demo)
    for cycle, at in (("c1", NOW), ("c2", NOW + timedelta(hours=1))):
        reports = run_cycle(full_demo, dream_options(), at, cycle_id=cycle)
        assert all(r.status != "failed" for r in reports), [(r.pass_name, r.reason) for r in reports]
    close_all()
    store = open_store(full_demo)
    kinds = {c.kind for c in store.changes.list("c1")}
    assert {"decayed", "purged", "created", "archived"} <= kinds, kinds  # decay, purge and merges to undo
    assert {c.kind for c in store.changes.list("c2")} >= {"decayed"}
    # the cycle's report says, before any undo, what an undo of it would leave behind
    created = sum(1 for c in store.changes.list("c1") if c.kind == "created")
    report = build_cycle_report(full_demo, store, "c1", [p.name for p in PASSES], profile_arg="demo").markdown()
    assert f"An undo retires the {created} entries this cycle created" in report and "archived rows" in report
    store.close()
    capsys.readouterr()

    out = ""
    at = (NOW + timedelta(hours=2)).isoformat()
    for cycle in ("c2", "c1"):
        assert main(["undo", "--profile", str(full_demo.root), "--cycle", cycle, "--now", at]) == 0
        captured = capsys.readouterr()
        assert "refused" not in captured.err and "NOT restored" not in captured.err, captured.err
        out += captured.out
    after = _dump(full_demo)

    assert set(before) <= set(after), "nothing the cycles touched is missing"
    # entries the cycles created are retired, named one by one, and the output says they stay as archived rows
    created = set(after) - set(before)
    assert created and all(after[k]["archived_at"] is not None for k in created)
    assert all(f"retired {k[0]} {k[1]}:" in out for k in created)
    assert "stay as archived rows" in out
    unpurged = set(re.findall(r"unpurged memory (\S+):", out))
    assert unpurged and "kept archived until" in out
    # every remaining difference is a review mark the output names, or the keep mark of a purge undone
    named = set(re.findall(r"review marks on \d+ entries \(metadata ([^)]*)\)", out)[0].split(", "))
    for key, was in before.items():
        now = dict(after[key])
        if key[0] == "memory":
            meta = dict(now["metadata"])
            if key[1] in unpurged:
                assert meta.pop(KEEP_ARCHIVED_UNTIL_KEY)
            differing = {k for k in set(meta) | set(was["metadata"]) if meta.get(k) != was["metadata"].get(k)}
            assert differing <= named, (key, differing - named)
            now["metadata"] = {**meta, **{k: was["metadata"][k] for k in differing if k in was["metadata"]}}
            for k in differing - set(was["metadata"]):
                now["metadata"].pop(k)
        assert now == was, key  # content, importance, timestamps and archive state exactly as before
