"""Fault benchmark: crashes, hostile model answers, hostile log lines and concurrent saves, on real stores.

Prints one JSON object per line ({"name": "faults.<metric>", "n": ..., "value": ..., "unit": ...}):

* faults.facts_lost — live facts (every name, acronym, number and date of an entry that was live before) that are in
  no live entry afterwards and cannot be brought back by undoing the cycle. Target 0.
* faults.partial_applies — answers left half applied: a store change without its change-log row, a merged entry whose
  sources are still live, a source archived "merged into" an entry that does not exist. Target 0.
* faults.misreported — a failure shown as completed or skipped: an unusable model answer, a raised pass, a pass that
  could not read its input, reported as anything but failed. Target 0.
* faults.undo_failures — a cycle whose undo raised, refused, or did not bring the live corpus back exactly. Target 0.
* faults.hostile_file_failures — a cycle, a pass, `dream status` or the retry sensor's read that failed on a hostile
  agent file (UTF-16, deeply nested or impossible lease, future heartbeat, deeply nested deferred list, pass record or
  ledger); faults.hostile_file_stuck — a model pass deferred by such a lease once it was stale. Target 0.
* faults.fleet_stalled_s — (not with --quick) after a `dream run` holding the `llm` pool slot is killed, the time until
  another agent's run holds it; target at most faults.run_timeout_s (the RunTimeout the runs were given).
* faults.superseded_purged — entries the contradiction sweep archived as superseded that the archive purge
  hard-deleted while their winner is live. Target 0.
* faults.embedding_failures — saves under a hostile embeddings endpoint that landed on an unrelated entry, vectors of
  that endpoint left in the cache, or embeddings not working again once the endpoint is fixed. Target 0.
* faults.person_edits_lost — in a linked memory folder, a note a person kept or a save they made that is in no live
  file of the folder afterwards (cut out into archive/, overwritten, written outside the folder). Target 0.
* faults.cross_namespace_leaks — one user's memory found in another user's LangGraph namespace: a get that leads
  into another namespace, a namespace whose items name another user, a merged entry or a supersession joining two
  namespaces, a save absorbed into another namespace's entry. Target 0 (faults.langgraph_refused: the proposals
  across namespaces the host refused).
* the trial counts of each section, and the wall time.

Sections (each in real processes on real DuckDB files):
1. kill during a consolidation apply: a child process runs memory consolidation with a scripted answer (merges,
   removals, a new entry) and exits with os._exit just before its k-th write statement, for every k;
2. kill during an undo: the same cycle is undone in a child that exits before its k-th write; the parent's undo
   (without force) must then finish the job;
3. fuzzed model answers across every model-calling pass (random and hostile JSON, ids that were not shown, delete
   everything, surrogates, NUL, huge strings, deep nesting);
4. hostile log lines in every log, then a whole cycle (offline backend);
5. an agent saving 20 facts a second while cycles with a delete-everything model run on the same store;
6. fuzzed contradiction-sweep answers over a corpus never swept (mass supersession of every offered pair both ways,
   pairs never offered, unknown ids, junk), then the archive purge 91 days on;
7. a hostile embeddings endpoint (identical, zero, wrong-dimension, short, non-finite vectors) under an agent's
   saves, then the endpoint fixed; another size and identical vectors also while nothing is cached for the model.
8. hostile agent files: each kind in one agent's profile, then cycles a simulated day apart (one day of memory
   consolidation with --quick, twelve of whole cycles without), `dream status` and the retry sensor's read, and a
   neighbour agent;
9. review before apply: a consolidation held for review (ApplyMode review) must leave the store as it was; then an
   apply and a reject of its pending set each killed before every write in turn (a forked child), each finished by
   deciding again, with no change half applied, refused or left waiting; fuzzed change ids (none decides anything,
   every one is reported not found); an apply twice (the second decides and moves nothing);
10. (not with --quick) against a throwaway PostgreSQL: the server stops in the middle of a `dream run` and comes back
   (what the run printed must match the pass records: faults.misreported; no fact lost, no change half applied),
   then a `dream run` holding the `llm` slot is killed with SIGKILL and another agent's run starts;
11. linked memory folders (Claude Code format): a person's edits between cycles (a sentence added, a heading renamed,
   a note moved to another file, a file split, one of two copies deleted), one folder linked to two agents after a
   merge that extends a note, archive/ swapped for a symlink to a folder outside between the read and the write-back,
   and a person's save in the instant before a write-back's replace (one round with --quick, six without);
12. LangGraph namespaces: three users' namespaces with near-identical facts (some values over MaxContentChars) put
   through the LangGraph store, then memory consolidation and the contradiction sweep with a model that merges,
   refiles, removes and supersedes across the namespaces, then a save of one user's text into another's namespace;
13. undo of a review set with a linked folder: a merge of two notes in two files held for review, applied, written out
   by a sync (one file moved to archive/, its index line dropped); its `dream undo --cycle` killed (a forked child)
   before write statements of the store's undo and before each step on the folder's files, then run again: it must
   exit 0 with nothing refused, every file as before the set, the folder and the store agreeing.

    .venv/bin/python benchmarks/faults.py            # the full run (10,000 fuzzed answers; about 10 minutes on 2 cores)
    .venv/bin/python benchmarks/faults.py --quick    # a CI-sized run (a few hundred trials; about a minute)
"""

from __future__ import annotations

import argparse
import json
import logging
import multiprocessing as mp
import os
import random
import re
import shutil
import subprocess
import sys
import tempfile
import time
import traceback
from collections import Counter
from collections.abc import Callable, Iterable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from dream_assets.changes_model import ChangeRow, SuccessorHow
from dream_assets.demo import build_demo_profile  # noqa: E402
from dream_assets.options import DreamOptions  # noqa: E402
from dream_assets.options_loader import dream_options
from dream_assets.profile import AgentProfile  # noqa: E402
from dream_assets.save_pipeline import save_memory
from dream_assets.store.connection import connect_quietly  # noqa: E402
from dream_assets.text.coverage import BASELINE_VOCABULARY, CoverageSource, check_merge_coverage  # noqa: E402
from dream_assets_tests.workers import map_in_workers, spawn_pool  # noqa: E402

NOW = datetime(2026, 11, 30, 12, 0, tzinfo=UTC)
MODEL_PASSES = (
    "memory_consolidation",
    "skill_gap_detection",
    "wisp_failure_analysis",
    "skill_consolidation",
    "skill_optimization",
    "preference_inference",
    "tier_routing_review",
)
#: The fuzzed model calls: each model pass's own, and memory consolidation's one-cluster check (the pass run with
#: ConsolidationCallShape = cluster, as a small model's endpoint gets it).
FUZZED_CALLS = (*MODEL_PASSES, "cluster_check")
_KILL_ENV = "DREAM_FAULTS_KILL_AT"
_COUNT_ENV = "DREAM_FAULTS_COUNT_FILE"


def emit(name: str, n: int, value: float, unit: str) -> None:
    print(json.dumps({"name": name, "n": n, "value": round(value, 3), "unit": unit}), flush=True)


# ---------------------------------------------------------------------------------------------- fixtures
def build_template(root: Path, n_memories: int = 40) -> AgentProfile:
    from dream_assets.store.connection import close_all

    profile = AgentProfile(root / "template")
    build_demo_profile(profile, NOW - timedelta(hours=1), n_memories=n_memories)
    close_all()
    return profile


def clone(template: AgentProfile, dest: Path) -> AgentProfile:
    """A working copy: the store, ledger and conversation log are copied; the read-only logs are shared (symlink)."""
    dest.mkdir(parents=True)
    for item in template.root.iterdir():
        if item.name in ("logs",):
            (dest / item.name).symlink_to(item, target_is_directory=True)
        elif item.name.startswith(".locks") or item.name == "warehouse":
            continue
        elif item.is_dir():
            shutil.copytree(item, dest / item.name)
        else:
            shutil.copy2(item, dest / item.name)
    return AgentProfile(dest)


def _rows(conn: Any, cycle_id: str | None) -> tuple[dict, dict, list]:
    mem = conn.execute("SELECT id, content, category, tags, archived_at, metadata FROM memories").fetchall()
    skl = conn.execute("SELECT name, summary, content, see_also, archived_at FROM skills").fetchall()
    chg = (
        []
        if cycle_id is None
        else conn.execute(
            "SELECT kind, target_type, target_id, after_json, reason, undone_at FROM changes WHERE cycle_id = ? "
            "ORDER BY ordinal",
            [cycle_id],
        ).fetchall()
    )
    memories = {
        r[0]: {
            "content": r[1],
            "category": r[2],
            "tags": r[3],
            "archived": r[4] is not None,
            "metadata": json.loads(r[5]),
        }
        for r in mem
    }
    skills = {r[0]: {"summary": r[1], "content": r[2], "see_also": r[3], "archived": r[4] is not None} for r in skl}
    rows = [
        {
            "kind": r[0],
            "type": r[1],
            "id": r[2],
            "after": json.loads(r[3]) if r[3] else None,
            "reason": r[4],
            "undone": r[5] is not None,
        }
        for r in chg
    ]
    return memories, skills, rows


def _read(profile: AgentProfile, cycle_id: str | None = None) -> tuple[dict, dict, list]:
    """Memories, skills and (for ``cycle_id``) change rows as plain data, straight from the file with plain SQL
    (the store under test is not asked to report on itself)."""
    conn = connect_quietly(str(profile.store_path), read_only=True)
    try:
        return _rows(conn, cycle_id)
    finally:
        conn.close()


def memory_state(profile: AgentProfile) -> dict[str, dict[str, Any]]:
    return _read(profile)[0]


def change_rows(profile: AgentProfile, cycle_id: str) -> list[dict[str, Any]]:
    return _read(profile, cycle_id)[2]


# ---------------------------------------------------------------------------------------------- invariants
def lost_facts(before: dict[str, dict[str, Any]], after: dict[str, dict[str, Any]]) -> list[str]:
    """Ids of entries live before whose specifics are not all carried by the live corpus after."""
    live_text = "\n".join(e["content"] for e in after.values() if not e["archived"])
    lost = []
    for mid, e in before.items():
        if e["archived"]:
            continue
        kept = after.get(mid)
        if kept is not None and not kept["archived"] and kept["content"] == e["content"]:
            continue
        if not check_merge_coverage([CoverageSource(e["content"], e["category"])], live_text, BASELINE_VOCABULARY).ok:
            lost.append(mid)
    return lost


_VISIBLE = ("content", "category", "tags", "archived")
# "merged into X", or "merged into existing entry X" when a merge equal to a live entry was absorbed by it.
_MERGED_INTO = re.compile(r"merged into (?:existing entry )?([^\s;,]+)")


def partial_applies(
    before: dict[str, dict[str, Any]],
    after: dict[str, dict[str, Any]],
    rows: list[dict[str, Any]],
    skills_before: dict[str, dict[str, Any]] | None = None,
    skills_after: dict[str, dict[str, Any]] | None = None,
) -> list[str]:
    """Changes the store shows that the change log does not explain, and merges applied by half."""
    problems = []
    recorded = {(r["type"], r["id"]) for r in rows if r["kind"] != "stamped"}
    for mid, e in after.items():
        old = before.get(mid)
        if old is None or any(old[k] != e[k] for k in _VISIBLE):
            if ("memory", mid) not in recorded:
                problems.append(f"memory {mid} changed with no change row")
    for mid in before:
        if mid not in after and ("memory", mid) not in recorded:
            problems.append(f"memory {mid} vanished with no change row")
    for mid, e in after.items():
        merged_from = e["metadata"].get("mergedFrom")
        if mid in before or not merged_from or e["archived"]:
            continue
        try:
            sources = json.loads(merged_from)
        except ValueError:
            sources = []
        for sid in sources:
            src = after.get(sid)
            if src is not None and not src["archived"] and src == before.get(sid):
                problems.append(f"merge {mid} persisted but its source {sid} is still live")
    for r in rows:
        merged_into = _MERGED_INTO.match(r["reason"])
        if r["kind"] == "archived" and merged_into:
            target = merged_into.group(1)
            pool = after if r["type"] == "memory" else (skills_after or {})
            if target not in pool or pool[target]["archived"]:
                problems.append(f"{r['type']} {r['id']} archived as merged into {target}, which is not live")
    if skills_before is not None and skills_after is not None:
        for name, s in skills_after.items():
            old = skills_before.get(name)
            if (old is None or old != s) and ("skill", name) not in recorded:
                problems.append(f"skill {name} changed with no change row")
        for name in skills_before:
            if name not in skills_after:
                problems.append(f"skill {name} vanished")
    return problems


def undo_restores(
    profile: AgentProfile, cycle_id: str, before: dict[str, dict[str, Any]], options: DreamOptions
) -> str | None:
    """Undo the cycle; None when the live corpus is back exactly, else what went wrong."""
    from dream_assets.store import open_store

    rows = [r for r in change_rows(profile, cycle_id) if r["kind"] != "stamped" and not r["undone"]]
    if rows:
        store = open_store(profile, options)
        try:
            result = store.changes.undo_cycle(cycle_id, now=NOW + timedelta(minutes=5))
        except Exception as exc:  # noqa: BLE001 - the benchmark counts it
            return f"undo raised {type(exc).__name__}: {exc}"
        finally:
            store.close()
        if getattr(result, "refused", None):
            return f"undo refused: {result.refused[:2]}"
    after = memory_state(profile)
    live_before = {m: e["content"] for m, e in before.items() if not e["archived"]}
    live_after = {m: e["content"] for m, e in after.items() if not e["archived"]}
    if live_before != live_after:
        missing = sorted(set(live_before) - set(live_after))[:3]
        extra = sorted(set(live_after) - set(live_before))[:3]
        return f"live corpus not restored: missing {missing}, extra {extra}"
    return None


# ---------------------------------------------------------------------------------------------- running passes
def _strings_under(inputs: Any, keys: tuple[str, ...]) -> list[str]:
    """Every string value under one of ``keys`` anywhere in a request's structured inputs, first seen first."""
    found: list[str] = []

    def walk(x: Any) -> None:
        if isinstance(x, dict):
            for k, v in x.items():
                if k in keys and isinstance(v, str):
                    found.append(v)
                else:
                    walk(v)
        elif isinstance(x, list):
            for v in x:
                walk(v)

    walk(inputs)
    return list(dict.fromkeys(found))


def _ids_shown(inputs: Any) -> list[str]:
    return _strings_under(inputs, ("id", "name", "skillName"))


def _texts_shown(inputs: Any) -> list[str]:
    return _strings_under(inputs, ("content", "text"))


def run_pass(
    profile: AgentProfile,
    pass_name: str,
    answer: Callable[[Any], Any],
    *,
    cycle_id: str,
    options: DreamOptions | None = None,
    now: datetime = NOW,
    state: list | None = None,
) -> tuple[Any, list[Any]]:
    """Run one pass with a scripted model. With ``state`` (a list), the store's rows after the pass are read with plain
    SQL through the file the pass already has open (saving a second ~15 ms open) and appended to it."""
    from dream_assets.llm.client import ModelClient
    from dream_assets.llm.scripted import ScriptedBackend
    from dream_assets.passes import runner
    from dream_assets.passes.context import PassContext
    from dream_assets.passes.registry import by_name

    options = options or dream_options()
    backend = ScriptedBackend(answer)
    client = ModelClient(backend, profile=profile, options=options)
    ctx = PassContext(profile, options, now, cycle_id=cycle_id, client_factory=lambda: client)
    try:
        report = runner.run_pass(by_name(pass_name), ctx)
        if state is not None:
            with ctx.store.connection.session() as conn:
                state.append(_rows(conn, cycle_id))
    finally:
        if "store" in ctx.__dict__:
            ctx.store.close()
    return report, backend.requests


# ---------------------------------------------------------------------------------------------- 1 + 2: kills
def consolidation_answer(request: Any) -> Any:
    """A realistic answer: merge shown near-duplicate clusters (keeping every sentence), drop two entries, add one."""
    if request.pass_name == "merge_repair":
        return {"content": "\n".join([request.inputs["merged"], *[s["content"] for s in request.inputs["sources"]]])}
    entries = {e["id"]: e for e in request.inputs.get("entries", [])}
    saves, used = [], set()
    for cluster in request.inputs.get("clusters", []):
        ids = [i for i in cluster if i in entries and i not in used]
        if len(ids) < 2:
            continue
        used.update(ids)
        text = " ".join(dict.fromkeys(entries[i]["content"].strip() for i in ids))
        saves.append({"content": text, "category": entries[ids[0]]["category"], "sourceIds": ids})
    rest = [i for i in entries if i not in used]
    saves.append(
        {
            "content": "Anti-pattern: confirm the meeting room with Facilities before the Friday review.",
            "category": "anti-patterns/scheduling",
            "sourceIds": [],
        }
    )
    return {"toSave": saves, "toDelete": rest[:2] + [next(iter(used), "")]}


def _install_kill_hook() -> None:
    """In a child process: count write statements through the store's connection helper and exit before the k-th."""
    from contextlib import contextmanager

    from dream_assets.store import connection as connection_module

    kill_at = int(os.environ.get(_KILL_ENV, "0"))
    count_file = os.environ.get(_COUNT_ENV)
    state = {"writes": 0}
    writes = ("INSERT", "UPDATE", "DELETE", "COMMIT")

    class Proxy:
        def __init__(self, conn: Any) -> None:
            self._conn = conn

        def execute(self, sql: str, *args: Any, **kwargs: Any) -> Any:
            if sql.lstrip().upper().startswith(writes):
                self._write()
            return self._conn.execute(sql, *args, **kwargs)

        def commit(self) -> Any:  # how the connection helper commits (no COMMIT statement)
            self._write()
            return self._conn.commit()

        def _write(self) -> None:
            state["writes"] += 1
            if count_file:
                Path(count_file).write_text(str(state["writes"]))
            if kill_at and state["writes"] >= kill_at:
                os._exit(77)

        def __getattr__(self, name: str) -> Any:
            return getattr(self._conn, name)

    original = connection_module.StoreConnection.session

    @contextmanager
    def session(self: Any):  # type: ignore[no-untyped-def]
        with original(self) as conn:
            yield Proxy(conn)

    connection_module.StoreConnection.session = session  # type: ignore[method-assign]


def _child_body(kind: str, root: str, cycle: str, kill_at: int, count_file: str | None) -> None:
    """A forked crash child: install the kill hook, run the apply or the undo, exit."""
    if kill_at:
        os.environ[_KILL_ENV] = str(kill_at)
    else:
        os.environ.pop(_KILL_ENV, None)
    if count_file:
        os.environ[_COUNT_ENV] = count_file
    else:
        os.environ.pop(_COUNT_ENV, None)
    _install_kill_hook()
    profile = AgentProfile(Path(root))
    if kind == "consolidate":
        run_pass(profile, "memory_consolidation", consolidation_answer, cycle_id=cycle)
    elif kind in ("apply", "reject"):
        from dream_assets.passes.review import decide
        from dream_assets.store import open_store

        store = open_store(profile, dream_options())
        decide(
            store, kind, cycle_id=cycle, reason="fault trial", now=NOW + timedelta(minutes=5), options=dream_options()
        )
        store.close()
    else:
        from dream_assets.store import open_store
        from dream_assets.store.changes import UndoRefused

        store = open_store(profile, dream_options())
        try:
            store.changes.undo_cycle(cycle, now=NOW + timedelta(minutes=5))
        except UndoRefused:
            pass  # nothing (left) to undo: the parent checks the outcome
        store.close()
    os._exit(0)


def _child(kind: str, profile: AgentProfile, cycle: str, kill_at: int, count_file: Path | None = None) -> int:
    """Run the apply or the undo in a forked process (cheap: everything is imported already) and wait for it."""
    from dream_assets.store.connection import close_all

    close_all()  # no DuckDB handle, lock or linger timer may cross the fork
    proc = mp.get_context("fork").Process(
        target=_child_body,
        args=(kind, str(profile.root), cycle, kill_at, str(count_file) if count_file else None),
    )
    proc.start()
    proc.join(timeout=300)
    if proc.exitcode not in (0, 77):
        raise RuntimeError(f"crash child {kind} (kill at {kill_at}) ended with exit code {proc.exitcode}")
    return int(proc.exitcode)


def _sample(points: list[int], quick: bool) -> list[int]:
    if quick and len(points) > 12:
        return sorted(set(points[:: max(1, len(points) // 12)] + [points[-1]]))
    return points


def kill_trials(template: AgentProfile, work: Path, quick: bool, tally: Counter, notes: list[str]) -> None:
    """Count the write statements of a whole apply and of the undo of that cycle, then kill before each one in turn,
    the trials shared between two shard processes (each forks its own crash children)."""
    count_file = work / "count"
    _child("consolidate", clone(template, work / "probe"), "cycle-k", 0, count_file)
    total = int(count_file.read_text()) if count_file.exists() else 0
    consolidated = clone(template, work / "consolidated")  # the undo trials start from the applied cycle
    _child("consolidate", consolidated, "cycle-u", 0)
    _child("undo", clone(consolidated, work / "undo-probe"), "cycle-u", 0, count_file)
    undo_total = int(count_file.read_text()) if count_file.exists() else 0
    apply_points = _sample(list(range(1, total + 1)), quick)
    undo_points = _sample(list(range(1, undo_total + 1)), quick)
    shards = []
    for i in range(2):
        spec = {
            "template": str(template.root),
            "consolidated": str(consolidated.root),
            "work": str(work / f"s{i}"),
            "apply": apply_points[i::2],
            "undo": undo_points[i::2],
            "total": total,
            "undo_total": undo_total,
        }
        shards.append(
            subprocess.Popen(
                [sys.executable, __file__, "--kill-shard", json.dumps(spec)],
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
            )
        )
    for proc in shards:
        out, err = proc.communicate(timeout=1800)
        if proc.returncode != 0:
            raise RuntimeError(f"kill shard failed: {err[-2000:]}")
        result = json.loads(out.strip().splitlines()[-1])
        tally.update(result["tally"])
        notes.extend(result["notes"])
    tally["apply_writes"] = total
    tally["undo_writes"] = undo_total


def kill_shard(spec: dict[str, Any]) -> dict[str, Any]:
    """One shard of the kill trials (run as ``faults.py --kill-shard SPEC``)."""
    logging.disable(logging.WARNING)
    template, consolidated = AgentProfile(Path(spec["template"])), AgentProfile(Path(spec["consolidated"]))
    work = Path(spec["work"])
    work.mkdir(parents=True)
    tally: Counter = Counter()
    notes: list[str] = []
    before = memory_state(template)
    total, undo_total = spec["total"], spec["undo_total"]
    for k in spec["apply"]:
        profile = clone(template, work / f"kill-apply-{k}")
        _child("consolidate", profile, "cycle-k", k)
        after, _, rows = _read(profile, "cycle-k")
        tally["kill_trials"] += 1
        partial = partial_applies(before, after, rows)
        if partial:
            tally["partial_applies"] += 1
            notes.append(f"kill before write {k}/{total} of an apply: {partial[0]}")
        problem = undo_restores(profile, "cycle-k", before, dream_options())
        if problem:
            tally["undo_failures"] += 1
            notes.append(f"kill before write {k}/{total} of an apply, then undo: {problem}")
        if lost_facts(before, memory_state(profile)):
            tally["facts_lost"] += 1
        shutil.rmtree(profile.root, ignore_errors=True)
    # An undo killed half-way, then undone again without force, must finish the job.
    for k in spec["undo"]:
        profile = clone(consolidated, work / f"kill-undo-{k}")
        _child("undo", profile, "cycle-u", k)
        tally["kill_trials"] += 1
        problem = undo_restores(profile, "cycle-u", before, dream_options())
        if problem:
            tally["undo_failures"] += 1
            notes.append(f"kill before write {k}/{undo_total} of an undo, then undo again: {problem}")
        if lost_facts(before, memory_state(profile)):
            tally["facts_lost"] += 1
        shutil.rmtree(profile.root, ignore_errors=True)
    return {"tally": dict(tally), "notes": notes[:20]}


# ---------------------------------------------------------------------------------------------- 10: review path
def _pending_rows(profile: AgentProfile) -> list[dict[str, Any]]:
    """The pending-change table, straight from the file, in the order the pass made the changes."""
    conn = connect_quietly(str(profile.store_path), read_only=True)
    try:
        rows = conn.execute(
            "SELECT change_id, status, label, targets_json FROM pending_changes ORDER BY created_at, cycle_id, position"
        ).fetchall()
    finally:
        conn.close()
    return [{"id": r[0], "status": r[1], "label": r[2], "targets": json.loads(r[3])} for r in rows]


def review_half_done(profile: AgentProfile) -> list[str]:
    """Entries whose state disagrees with the statuses of the pending changes that touch them: each must be as the
    last applied change left it, or as the first change found it when none was applied."""
    state = memory_state(profile)
    expected: dict[str, tuple[Any, str]] = {}
    for c in _pending_rows(profile):
        for t in c["targets"]:
            if t["type"] != "memory":
                continue
            if c["status"] == "applied":
                expected[t["id"]] = (t["after"], f"applied {c['label']} {c['id']}")
            elif t["id"] not in expected:
                expected[t["id"]] = (t["before"], f"{c['status']} {c['label']} {c['id']}")
    problems = []
    for mid, (record, why) in expected.items():
        e = state.get(mid)
        now = None if e is None else (e["content"], e["category"], tuple(json.loads(e["tags"])), e["archived"])
        want = (
            None
            if record is None
            else (
                record["content"],
                record["category"],
                tuple(record["tags"]),
                bool(record.get("archived_at")),
            )
        )
        if now != want:
            problems.append(f"memory {mid} is not as {why} says")
    return problems


def review_trials(template: AgentProfile, work: Path, quick: bool, tally: Counter, notes: list[str]) -> None:
    """A consolidation held for review (ApplyMode review), then: kills before each write of an apply and of a reject
    (in a forked child), each finished by deciding again in the parent; fuzzed change ids; and an apply twice."""
    from dream_assets.passes.review import decide, list_changes
    from dream_assets.store import open_store

    before = memory_state(template)
    reviewed = clone(template, work / "reviewed")
    run_pass(
        reviewed,
        "memory_consolidation",
        consolidation_answer,
        cycle_id="cycle-r",
        options=dream_options(ApplyMode="review"),
    )
    if memory_state(reviewed) != before:
        tally["partial_applies"] += 1
        notes.append("a consolidation in ApplyMode review moved the live store")
    count_file = work / "review-count"
    totals = {}
    for kind in ("apply", "reject"):
        _child(kind, clone(reviewed, work / f"review-probe-{kind}"), "cycle-r", 0, count_file)
        totals[kind] = int(count_file.read_text()) if count_file.exists() else 0
    later = NOW + timedelta(minutes=10)
    for kind in ("apply", "reject"):
        for k in _sample(list(range(1, totals[kind] + 1)), quick):
            profile = clone(reviewed, work / f"review-{kind}-{k}")
            _child(kind, profile, "cycle-r", k)
            tally["review_trials"] += 1
            half = review_half_done(profile) + partial_applies(
                before, memory_state(profile), change_rows(profile, "cycle-r")
            )
            if half:
                tally["partial_applies"] += 1
                notes.append(f"kill before write {k}/{totals[kind]} of a {kind}: {half[0]}")
            store = open_store(profile, dream_options())
            try:
                result = decide(store, kind, cycle_id="cycle-r", reason="again", now=later, options=dream_options())
                left = list_changes(store)
            finally:
                store.close()
            if result.refused or result.failed or left:
                # nothing was edited meanwhile: a refusal, a failure or a change still waiting is a wrong report
                tally["misreported"] += 1
                notes.append(f"{kind} again after a kill at {k}: {(result.refused + result.failed)[:1] or left[:1]}")
            if review_half_done(profile):
                tally["partial_applies"] += 1
                notes.append(f"{kind} again after a kill at {k}: {review_half_done(profile)[0]}")
            if lost_facts(before, memory_state(profile)):
                tally["facts_lost"] += 1
            shutil.rmtree(profile.root, ignore_errors=True)
    # Fuzzed change ids: none names a pending change, so nothing is decided and every one is reported not found.
    rng = random.Random(23)
    profile = clone(reviewed, work / "review-fuzz")
    store = open_store(profile, dream_options())
    real = [c.change_id for c in list_changes(store)]
    try:
        for _ in range(40 if quick else 400):
            ids = [
                rng.choice(
                    [
                        rng.choice(_HOSTILE_TEXT),
                        "cycle-r",
                        "' OR 1=1 --",
                        (rng.choice(real) if real else "x")[:-1],
                        (rng.choice(real) if real else "x").upper(),
                        str(rng.random()),
                    ]
                )
                for _ in range(rng.randint(1, 4))
            ]
            tally["review_trials"] += 1
            try:
                result = decide(
                    store, rng.choice(["apply", "reject"]), change_ids=ids, now=later, options=dream_options()
                )
            except Exception as exc:  # noqa: BLE001 - the benchmark counts it
                tally["misreported"] += 1
                notes.append(f"fuzzed change ids {ids!r:.80}: {type(exc).__name__}: {exc}")
                continue
            if result.done or len(result.not_found) != len(dict.fromkeys(ids)):
                tally["misreported"] += 1
                notes.append(f"fuzzed change ids {ids!r:.80}: decided {result.done}, not found {result.not_found}")
        if [c.change_id for c in list_changes(store)] != real:
            tally["partial_applies"] += 1
            notes.append("fuzzed change ids changed what waits for review")
        first = decide(store, "apply", cycle_id="cycle-r", now=later, options=dream_options())
    finally:
        store.close()
    # Apply twice: the second apply decides nothing and moves nothing.
    state = memory_state(profile)
    store = open_store(profile, dream_options())
    try:
        second = decide(store, "apply", cycle_id="cycle-r", now=later, options=dream_options())
    finally:
        store.close()
    tally["review_trials"] += 2
    if first.refused or first.failed or not first.done or second.done or not second.not_found:
        tally["misreported"] += 1
        notes.append(f"apply twice: first {first}, second {second}")
    if memory_state(profile) != state or review_half_done(profile):
        tally["partial_applies"] += 1
        notes.append("apply twice: the second apply moved the store")
    if lost_facts(before, memory_state(profile)):
        tally["facts_lost"] += 1
    tally["review_apply_writes"] = totals["apply"]
    tally["review_reject_writes"] = totals["reject"]


# ---------------------------------------------------------------------------------------------- 3: fuzzed answers
_HOSTILE_TEXT = [
    "\ud800",
    "a\x00b",
    "\x1b[31mred",
    "x" * 200_000,
    "",
    "   ",
    "\u202e reversed",
    "null",
    "🙂" * 50,
    "line\r\nbreak",
    '{"toSave": []}',
    "../../etc/passwd",
    "\udfff lone low",
]


def _rand_text(rng: random.Random, shown_texts: list[str]) -> str:
    roll = rng.random()
    if roll < 0.25 and shown_texts:
        return rng.choice(shown_texts)
    if roll < 0.45 and len(shown_texts) >= 2:
        return " ".join(rng.sample(shown_texts, 2))
    if roll < 0.6 and shown_texts:  # a mangled source: a swapped figure or a dropped half
        text = rng.choice(shown_texts)
        return (
            text[: len(text) // 2]
            if rng.random() < 0.5
            else "".join(str((int(c) + 1) % 10) if c.isdigit() else c for c in text)
        )
    if roll < 0.8:
        return rng.choice(_HOSTILE_TEXT)
    return "".join(rng.choice("abcdefghij KLMNOP 0123456789.,-") for _ in range(rng.randint(1, 120)))


def _rand_id(rng: random.Random, shown: list[str]) -> Any:
    roll = rng.random()
    if roll < 0.7 and shown:
        return rng.choice(shown)
    return rng.choice(["not-shown", "", 42, None, ["nested"], {"id": "x"}, "\ud800", "x" * 5000, 3.5, True])


def _rand_value(rng: random.Random, depth: int = 0) -> Any:
    roll = rng.random()
    if depth > 3 or roll < 0.4:
        return rng.choice([None, 0, -1, 1e308, True, "", "text", "\ud800", [], {}])
    if roll < 0.7:
        return [_rand_value(rng, depth + 1) for _ in range(rng.randint(0, 3))]
    return {rng.choice(["toSave", "toDelete", "content", "x"]): _rand_value(rng, depth + 1) for _ in range(2)}


def fuzz_answer(rng: random.Random, pass_name: str, inputs: Any) -> str:
    shown = _ids_shown(inputs)
    texts = _texts_shown(inputs)
    roll = rng.random()
    if roll < 0.08:
        return rng.choice(
            [
                "",
                "I cannot help with that.",
                "{",
                "[" * 100_000,
                "{" * 50_000,
                '{"toSave": [' * 3000,
                "<think>" + "x" * 1000,
                '```json\n{"toSave": }\n```',
                "\x00" * 10,
                "\ud800",
            ]
        )
    if roll < 0.15:
        return json.dumps(_rand_value(rng))
    if pass_name == "merge_repair":
        obj: Any = {"content": _rand_text(rng, texts)}
    elif pass_name == "cluster_check":
        obj = {
            "differences": rng.choice(["none", _rand_text(rng, texts)]),
            "decision": rng.choice(["merge", "merge", "keep", "both", "", 3]),
            "content": _rand_text(rng, texts),
        }
    elif pass_name in ("memory_consolidation", "preference_inference"):
        if roll < 0.3:  # delete everything shown, and more
            obj = {"toDelete": shown + ["not-shown"], "toSave": []}
        else:
            saves = []
            for _ in range(rng.randint(0, 4)):
                save: dict[str, Any] = {
                    "content": _rand_text(rng, texts),
                    "sourceIds": [_rand_id(rng, shown) for _ in range(rng.randint(0, 3))],
                }
                if rng.random() < 0.5:
                    save["category"] = rng.choice(
                        ["general", "", "a" * 300, "x\x00y", "user-preferences/inferred", "\ud800", 7]
                    )
                if rng.random() < 0.4:
                    save["tags"] = [rng.choice(["t", "", "\ud800", "x" * 500, 5]) for _ in range(rng.randint(0, 60))]
                if rng.random() < 0.2:
                    save["metadata"] = {"requires_user_permission": rng.choice([True, "yes", None, {"a": 1}])}
                saves.append(save)
            obj = {
                "toSave": saves,
                "toDelete": [_rand_id(rng, shown) for _ in range(rng.randint(0, len(shown) + 1))],
            }
    elif pass_name in ("skill_consolidation", "skill_optimization", "skill_gap_detection"):
        if roll < 0.3 and pass_name != "skill_gap_detection":
            obj = {"toDelete": shown, "toSave": []}
        else:
            saves = []
            for _ in range(rng.randint(0, 3)):
                saves.append(
                    {
                        "name": rng.choice([*shown[:5], "new/skill", "", "../x", "a" * 400, "\ud800", "n\x00"]),
                        "summary": _rand_text(rng, texts),
                        "content": _rand_text(rng, texts),
                        "sourceNames": [_rand_id(rng, shown) for _ in range(rng.randint(0, 3))],
                        "seeAlso": [_rand_id(rng, shown) for _ in range(rng.randint(0, 3))],
                    }
                )
            obj = {"toSave": saves, "toDelete": [_rand_id(rng, shown) for _ in range(rng.randint(0, 3))]}
    elif pass_name == "wisp_failure_analysis":
        obj = {
            "failurePatterns": [
                {
                    "description": _rand_text(rng, texts),
                    "classification": _rand_text(rng, []),
                    "affectedSteps": [_rand_text(rng, [])],
                }
                for _ in range(rng.randint(0, 3))
            ],
            "skillAnnotations": [
                {"skillName": _rand_id(rng, shown), "annotation": _rand_text(rng, texts)}
                for _ in range(rng.randint(0, 3))
            ],
            "promotionNotes": {_rand_text(rng, []): _rand_text(rng, []) for _ in range(rng.randint(0, 2))},
        }
    else:  # tier routing
        obj = {
            "findings": [
                {
                    "content": _rand_text(rng, texts),
                    "tags": [_rand_text(rng, [])],
                    "tier": rng.choice([None, "high", "\ud800", "x" * 300]),
                }
                for _ in range(rng.randint(0, 3))
            ]
        }
    text = json.dumps(obj)
    if rng.random() < 0.1:
        text = f"<think>let me see</think>\n```json\n{text}\n```\nDone."
    return text


def _usable(pass_name: str, text: str) -> bool:
    from dream_assets.llm.extract import parse_response
    from dream_assets.passes.registry import contract_for

    try:
        parse_response(text, contract_for(pass_name))
    except Exception:  # noqa: BLE001 - anything that does not parse is unusable
        return False
    return True


def fuzz_worker(job: tuple[str, str, int, int]) -> dict[str, Any]:
    template_root, work_root, start, count = job
    logging.disable(logging.WARNING)  # the passes' own warnings about hostile answers would drown the results
    template = AgentProfile(Path(template_root))
    template_state = _read(template)  # every working copy starts as an exact copy of the template
    tally: Counter = Counter()
    notes: list[str] = []
    for trial in range(start, start + count):
        rng = random.Random(trial)
        pass_name = FUZZED_CALLS[trial % len(FUZZED_CALLS)]
        run_name, options = (
            ("memory_consolidation", dream_options(ConsolidationCallShape="cluster"))
            if pass_name == "cluster_check"
            else (pass_name, None)
        )
        profile = clone(template, Path(work_root) / f"fuzz-{trial}")
        before, skills_before, _ = template_state
        answers: list[tuple[str, str]] = []

        def answer(request: Any, rng: random.Random = rng, answers: list = answers) -> str:
            text = fuzz_answer(rng, request.pass_name, request.inputs)
            answers.append((request.pass_name, text))
            return text

        cycle = f"fuzz-{trial}"
        state: list = []
        try:
            report, _requests = run_pass(profile, run_name, answer, cycle_id=cycle, options=options, state=state)
            status, reason = report.status, report.reason
        except Exception as exc:  # noqa: BLE001 - a pass that raises out of the runner is itself a defect
            status, reason = "raised", f"{type(exc).__name__}: {exc}"
            notes.append(f"{pass_name} trial {trial} raised out of the pass runner: {reason[:200]}")
        tally["fuzz_trials"] += 1
        main = [t for p, t in answers if p == pass_name]
        if status == "raised" or (main and status in ("completed", "skipped") and not _usable(pass_name, main[0])):
            tally["misreported"] += 1
            notes.append(f"{pass_name} trial {trial}: unusable answer reported as {status}: {main[0][:80]!r}")
        after, skills_after, rows = state[0] if state else _read(profile, cycle)
        partial = partial_applies(before, after, rows, skills_before, skills_after)
        if partial:
            tally["partial_applies"] += 1
            notes.append(f"{pass_name} trial {trial}: {partial[0]}")
        lost = lost_facts(before, after)
        if lost:
            problem = undo_restores(profile, cycle, before, dream_options())
            if problem:
                tally["facts_lost"] += 1
                notes.append(f"{pass_name} trial {trial}: lost {lost[:2]} and undo failed: {problem}")
        elif rng.random() < 0.1:  # undo is exercised on a sample of the others
            problem = undo_restores(profile, cycle, before, dream_options())
            if problem:
                tally["undo_failures"] += 1
                notes.append(f"{pass_name} trial {trial}: {problem}")
        shutil.rmtree(profile.root, ignore_errors=True)
    return {"tally": dict(tally), "notes": notes[:20]}


def fuzz_trials(template: AgentProfile, work: Path, trials: int, tally: Counter, notes: list[str]) -> None:
    workers = max(1, min(2, os.cpu_count() or 1))
    per = max(1, trials // (workers * 8))
    jobs = [(str(template.root), str(work), start, min(per, trials - start)) for start in range(0, trials, per)]
    # A worker that dies (killed, out of memory) ends the section with WorkerDied, counted as a section error,
    # instead of leaving the pool waiting on it for ever.
    with spawn_pool(workers) as pool:
        for result in map_in_workers(pool, fuzz_worker, jobs):
            tally.update(result["tally"])
            notes.extend(result["notes"])


# ---------------------------------------------------------------------------------------------- 4: hostile logs
HOSTILE_LINES = [
    b"[" * 100_000,
    b"{" * 100_000,
    b'{"a":' * 20_000,
    b"\xff\xfe\xfa not utf-8",
    b"\x00\x00\x00",
    b'{"timestamp": "\\ud800", "sessionId": "\\ud800"}',
    b'{"timestamp": 12, "kind": []}',
    b"[]",
    b"null",
    b"x" * 3_000_000,
    b'{"timestamp": "2026-11-30T11:00:00Z", "role": "user", "content": "\\u0000"}',
]


def hostile_log_trial(template: AgentProfile, work: Path, tally: Counter, notes: list[str]) -> None:
    profile = AgentProfile(work / "hostile")
    shutil.copytree(template.root, profile.root)
    targets = [p for p in profile.root.rglob("*.jsonl")]
    for path in targets:
        with path.open("ab") as fh:
            for line in HOSTILE_LINES:
                fh.write(line + b"\n")
    code = (
        "import json, sys\n"
        "from datetime import datetime\n"
        "from dream_assets.cycle import run_cycle\n"
        "from dream_assets.options import DreamOptions\n"
        "from dream_assets.profile import AgentProfile\n"
        "reports = run_cycle(AgentProfile(sys.argv[1]), DreamOptions(), datetime.fromisoformat(sys.argv[2]))\n"
        "print(json.dumps([[r.pass_name, r.status, r.reason] for r in reports]))\n"
    )
    proc = subprocess.run(
        [sys.executable, "-c", code, str(profile.root), NOW.isoformat()],
        capture_output=True,
        text=True,
        timeout=600,
        cwd=Path(__file__).resolve().parents[1],
    )
    tally["hostile_log_trials"] += 1
    if proc.returncode != 0:
        tally["misreported"] += 1
        notes.append(f"a cycle over hostile log lines crashed: {proc.stderr[-400:]}")
        return
    for name, status, reason in json.loads(proc.stdout.strip().splitlines()[-1]):
        if status == "failed":
            # A malformed line is skipped and counted; a pass that fails because of one is a defect.
            tally["hostile_log_pass_failures"] += 1
            notes.append(f"hostile log lines failed {name}: {reason[:200]}")


# ---------------------------------------------------------------------------------------------- 5: concurrent saves
#: Each concurrent trial runs until the agent saved at least this many times and the pass ran this many cycles beside
#: it (and for at least its given duration), however slow the machine; past the guard it stops and is reported.
CONCURRENT_MIN_SAVES = 21
CONCURRENT_MIN_CYCLES = 3
CONCURRENT_GUARD_S = 600.0


def _agent_saves(root: str, stop: Any, progress: Any, out: str) -> None:
    from dream_assets.store import open_store

    profile = AgentProfile(Path(root))
    store = open_store(profile, dream_options())
    saved, errors, i = [], [], 0
    while not stop.is_set():
        i += 1
        text = (
            f"Concurrent fact {i}: Zorblat-{i:05d} reported {1000 + i} widgets to Quillon on 2026-11-{1 + i % 28:02d}."
        )
        try:
            save_memory(store.memories, text, category="general", now=NOW + timedelta(seconds=i))
            saved.append(text)
            progress.value = len(saved)
        except Exception as exc:  # noqa: BLE001 - counted: a save the agent was told failed is not silent
            errors.append(f"{type(exc).__name__}: {exc}")
        time.sleep(0.05)
    Path(out).write_text(json.dumps({"saved": saved, "errors": errors}))


def concurrent_trial(template: AgentProfile, work: Path, seconds: float, tally: Counter, notes: list[str]) -> None:
    profile = clone(template, work / "concurrent")
    out = work / "agent.json"
    ctx = mp.get_context("spawn")
    stop, progress = ctx.Event(), ctx.Value("i", 0)
    agent = ctx.Process(target=_agent_saves, args=(str(profile.root), stop, progress, str(out)))
    agent.start()
    started = time.monotonic()
    cycle = 0
    options = dream_options().replace(ConsolidationMinInterval=timedelta(0))

    def delete_everything(request: Any) -> Any:
        return {"toDelete": _ids_shown(request.inputs), "toSave": []}

    while True:
        elapsed = time.monotonic() - started
        if elapsed >= seconds and cycle >= CONCURRENT_MIN_CYCLES and progress.value >= CONCURRENT_MIN_SAVES:
            break
        if elapsed > CONCURRENT_GUARD_S:
            notes.append(
                f"concurrent trial stopped after {elapsed:.0f}s: {cycle} cycle(s), {progress.value} agent save(s)"
            )
            break
        cycle += 1
        report, _ = run_pass(
            profile,
            "memory_consolidation",
            delete_everything,
            cycle_id=f"conc-{cycle}",
            options=options,
            now=NOW + timedelta(hours=cycle),
        )
        if report.status == "failed":
            notes.append(f"consolidation beside a saving agent failed: {report.reason[:200]}")
            tally["concurrent_pass_failures"] += 1
    stop.set()
    agent.join(timeout=120)
    data = json.loads(out.read_text()) if out.exists() else {"saved": [], "errors": ["agent did not finish"]}
    after = memory_state(profile)
    live_text = "\n".join(e["content"] for e in after.values() if not e["archived"])
    missing = [
        t
        for t in data["saved"]
        if not check_merge_coverage([CoverageSource(t, "general")], live_text, BASELINE_VOCABULARY).ok
    ]
    tally["concurrent_saves"] += len(data["saved"])
    tally["concurrent_save_errors"] += len(data["errors"])
    tally["concurrent_cycles"] += cycle
    if missing:
        tally["facts_lost"] += len(missing)
        notes.append(f"{len(missing)} concurrently saved fact(s) missing from the live corpus, e.g. {missing[0]!r}")
    if data["errors"]:
        notes.append(f"{len(data['errors'])} agent save(s) raised, e.g. {data['errors'][0][:200]}")


# ---------------------------------------------------------------------------------------------- 6: sweep answers
def sweep_answer(rng: random.Random, inputs: Any) -> str:
    """A fuzzed contradiction-sweep answer: mass supersession (every offered pair, both ways, and pairs never
    offered), ids that were not shown, self-pairs, junk values, or text that is no answer at all."""
    shown = [e["id"] for e in inputs.get("entries", [])]
    offered = [tuple(p) for p in inputs.get("pairs", [])]
    roll = rng.random()
    if roll < 0.1:
        return rng.choice(["", "{", "no contradictions here", '{"supersessions": {}}', "[" * 50_000, "\ud800"])
    pairs: list[tuple[Any, Any]] = []
    if roll < 0.5:  # mass supersession: everything offered, in both directions
        pairs = [(a, b) for a, b in offered] + [(b, a) for a, b in offered]
    elif roll < 0.7:  # any two shown entries, offered or not
        pairs = [(rng.choice(shown), rng.choice(shown)) for _ in range(len(shown))] if shown else []
    else:
        pairs = [(_rand_id(rng, shown), _rand_id(rng, shown)) for _ in range(rng.randint(0, 8))]
    rng.shuffle(pairs)
    return json.dumps(
        {
            "supersessions": [
                {"winnerId": w, "loserId": lo, "reason": rng.choice(["newer", "", "x" * 300, 7])} for w, lo in pairs
            ]
        }
    )


def sweep_trials(template: AgentProfile, work: Path, trials: int, tally: Counter, notes: list[str]) -> None:
    """Fuzzed sweep answers over a corpus never swept (the first sweep shows every entry), then the archive purge
    91 days later: no answer half applied, no more superseded than the bound, no fact lost beyond undo, and no
    superseded entry hard-deleted while its winner is live."""
    from dream_assets.store import open_store

    logging.disable(logging.WARNING)
    before, _, _ = _read(template)
    options = dream_options()
    try:
        for trial in range(trials):
            rng = random.Random(10_000 + trial)
            profile = clone(template, work / f"sweep-{trial}")
            cycle = f"sweep-{trial}"
            answers: list[str] = []
            shown: list[int] = []

            def answer(request: Any, rng: random.Random = rng, answers: list = answers, shown: list = shown) -> str:
                shown.append(len(request.inputs.get("entries", [])))
                answers.append(sweep_answer(rng, request.inputs))
                return answers[-1]

            state: list = []
            report, _ = run_pass(profile, "contradiction_sweep", answer, cycle_id=cycle, state=state)
            tally["sweep_trials"] += 1
            if answers and report.status in ("completed", "skipped") and not _usable("contradiction_sweep", answers[0]):
                tally["misreported"] += 1
                notes.append(f"sweep trial {trial}: unusable answer reported as {report.status}")
            after, _, rows = state[0] if state else _read(profile, cycle)
            partial = partial_applies(before, after, rows)
            if partial:
                tally["partial_applies"] += 1
                notes.append(f"sweep trial {trial}: {partial[0]}")
            superseded = [m for m, e in after.items() if e["archived"] and not before[m]["archived"]]
            tally["sweep_superseded"] += len(superseded)
            if shown and len(superseded) > max(1, int(options.ContradictionSweepMaxSupersededShare * shown[0])):
                tally["partial_applies"] += 1
                notes.append(f"sweep trial {trial}: {len(superseded)} superseded of {shown[0]} shown, over the bound")
            held = {m: after[m]["metadata"].get("supersededBy") for m in superseded}
            # The purge 91 days on: a superseded entry whose winner is still live must survive it.
            from dream_assets.passes.archive_purge import run_archive_purge
            from dream_assets.passes.context import PassContext

            store = open_store(profile, options)
            try:
                later = NOW + timedelta(days=91)
                run_archive_purge(PassContext(profile, options, later, cycle_id=f"{cycle}-purge", _store=store))
                for m, winner in held.items():
                    w = store.memories.get(winner) if winner else None
                    if store.memories.get(m) is None and w is not None and not w.is_archived:
                        tally["superseded_purged"] += 1
                        notes.append(f"sweep trial {trial}: purge deleted {m}, superseded by live {winner}")
                if held:
                    store.changes.undo_cycle(f"{cycle}-purge", now=later + timedelta(minutes=1))
            finally:
                store.close()
            if lost_facts(before, after):
                problem = undo_restores(profile, cycle, before, options)
                if problem:
                    tally["facts_lost"] += 1
                    notes.append(f"sweep trial {trial}: facts lost and undo failed: {problem}")
            shutil.rmtree(profile.root, ignore_errors=True)
    finally:
        logging.disable(logging.NOTSET)


# ---------------------------------------------------------------------------------------------- 7: embeddings
def _unrelated_text(rng: random.Random) -> str:
    """A fact sharing no word with the demo corpus (made-up words), so no save of it may land on an entry."""
    word = lambda: "".join(rng.choice("bcdfghklmnprstvz") + rng.choice("aeiou") for _ in range(3))  # noqa: E731
    return f"The {word()} {word()} ledger lists {rng.randint(100, 999)} crates of {word()} for {word()}."


def embeddings_trials(template: AgentProfile, work: Path, saves: int, tally: Counter, notes: list[str]) -> None:
    """A hostile embeddings endpoint (the same vector for every text, all-zero, another size, too few, NaN) under an
    agent's saves: no save may fail, land on an unrelated entry or leave a vector of that endpoint in the cache; once
    the endpoint is fixed a restatement is found by embeddings again."""
    from dream_assets.llm.embedding_index import EmbeddingIndex
    from dream_assets.llm.embeddings import build_embedding_provider
    from dream_assets.save_pipeline import SAVE_EMBEDDING_PAUSE
    from dream_assets.store import open_store
    from dream_assets.store.embeddings import EmbeddingCache
    from dream_assets_tests.openai_server import EMBEDDING_DIM, HOSTILE_EMBEDDINGS, OpenAITestServer, hostile_embeddings

    logging.disable(logging.WARNING)
    try:
        with OpenAITestServer() as server:
            base = dream_options().replace(
                LexicalSimilarityMeasure="tfidf",
                LlmMaxRetries=0,
                LlmTimeout=timedelta(seconds=5),
                EmbeddingModel="faults-embedding",
                EmbeddingBaseUrl=server.base_url,
            )
            # Each kind against a cache holding the corpus's healthy vectors; then, with nothing cached for the model
            # yet, another size (refused by EmbeddingDimensions) and one vector for every text.
            trials = [(kind, False) for kind in HOSTILE_EMBEDDINGS] + [("wrong-dimension", True), ("identical", True)]
            for kind, cold in trials:
                rng = random.Random(kind)
                options = base.replace(EmbeddingDimensions=EMBEDDING_DIM) if cold else base
                profile = clone(template, work / f"embeddings-{kind}{'-cold' if cold else ''}")
                store = open_store(profile, options)
                try:
                    server.embeddings = None
                    live = store.memories.list_live()
                    provider = build_embedding_provider(options)
                    if not cold:
                        EmbeddingIndex(store, provider, now=NOW).vectors(live)  # the corpus's healthy vectors, cached
                    cache = EmbeddingCache(store.connection)
                    cached = cache.count("faults-embedding")
                    server.embeddings = hostile_embeddings(kind)
                    for n in range(saves):
                        tally["embedding_saves"] += 1
                        try:
                            result = save_memory(
                                store.memories, _unrelated_text(rng), now=NOW + timedelta(seconds=1 + n)
                            )
                        except Exception as exc:  # noqa: BLE001 - a save must never fail on the endpoint
                            tally["misreported"] += 1
                            notes.append(f"embeddings {kind}: a save raised {type(exc).__name__}: {exc}"[:300])
                            continue
                        if result.action != "created":
                            tally["embedding_wrong_merges"] += 1
                            notes.append(f"embeddings {kind}: an unrelated save was {result.action}")
                    if cache.count("faults-embedding") != cached:
                        tally["embedding_poisoned"] += 1
                        notes.append(f"embeddings {kind}: vectors of the broken endpoint were cached")
                    server.embeddings = None
                    later = NOW + SAVE_EMBEDDING_PAUSE + timedelta(minutes=1)
                    again = save_memory(
                        store.memories, live[0].content + " It was counted twice.", category=live[0].category, now=later
                    )  # a restatement is one in the same category: another category means another memory
                    if again.action == "created" or "lexical measure was used" in (again.reason or ""):
                        tally["embedding_not_recovered"] += 1
                        notes.append(f"embeddings {kind}: fixed endpoint, restatement: {again.action} {again.reason}")
                finally:
                    store.close()
                shutil.rmtree(profile.root, ignore_errors=True)
    finally:
        logging.disable(logging.NOTSET)


# ---------------------------------------------------------------------------------------------- main
# ---------------------------------------------------------------------------------------------- 6: hostile agent files
_DEEP = "[" * 100_000 + "]" * 100_000


def _hostile_agent_files(profile: AgentProfile) -> dict[str, tuple[Path, bytes]]:
    """Files an agent or a person can write, each in a form that once stopped the agent: kind -> (path, bytes)."""
    from dream_assets.passes.outcome import deferred_index_path

    lease = profile.busy_lease_path / "turn.json"
    stale = {"pid": 4242, "host": "elsewhere", "heartbeat": (NOW - timedelta(hours=2)).isoformat()}
    return {
        "lease_utf16": (lease, json.dumps(stale).encode("utf-16")),
        "lease_deep": (lease, _DEEP.encode()),
        "lease_huge_pid": (lease, json.dumps({**stale, "pid": 2**70, "host": os.uname().nodename}).encode()),
        "lease_future_heartbeat": (lease, json.dumps({**stale, "heartbeat": "2099-01-01T00:00:00Z"}).encode()),
        "deferred_deep": (deferred_index_path(profile), ('{"passes": ' + _DEEP + "}").encode()),
        "pass_record_deep": (profile.pass_report_path("memory_consolidation"), _DEEP.encode()),
        "pass_record_utf16_garbage": (profile.pass_report_path("contradiction_sweep"), b"\xff\xfe\x00\xd8{\x00"),
        "ledger_deep": (profile.ledger_path, _DEEP.encode()),
    }


def hostile_file_section(template: AgentProfile, work: Path, quick: bool, tally: Counter, notes: list[str]) -> None:
    """--quick: one simulated day of memory consolidation (a model pass); else 12 days of whole cycles."""
    if quick:
        hostile_file_trials(template, work, 1, tally, notes, only=("memory_consolidation",))
    else:
        hostile_file_trials(template, work, 12, tally, notes)


def hostile_file_trials(
    template: AgentProfile,
    work: Path,
    days: int,
    tally: Counter,
    notes: list[str],
    only: tuple[str, ...] | None = None,
) -> None:
    """For each hostile file kind: an agent whose profile holds it runs a cycle a day for ``days`` simulated days
    (the lease files are written now, so they are stale from the first simulated day); a model pass deferred for the
    busy lease, a failed pass, a crash of the cycle, of `dream status` or of the retry sensor's read, and a neighbour
    agent that cannot run, are counted. ``only``: the passes each cycle runs (None: all)."""
    import contextlib
    import io

    from dream_assets.cli import main as dream_cli
    from dream_assets.cycle import run_cycle
    from dream_assets.llm.client import ModelClient
    from dream_assets.llm.offline import OfflineBackend
    from dream_assets.llm.scripted import ScriptedBackend
    from dream_assets.passes.outcome import load_deferred
    from dream_assets.store.connection import close_all

    offline = OfflineBackend()
    neighbour = clone(template, work / "hostile-files" / "neighbour")
    for kind, (rel_path, data) in _hostile_agent_files(template).items():
        profile = clone(template, work / "hostile-files" / kind)
        path = profile.root / rel_path.relative_to(template.root)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)
        left = (NOW - timedelta(hours=1)).timestamp()  # left behind by a crashed agent (or a person) an hour ago
        os.utime(path, (left, left))
        tally["hostile_file_trials"] += 1
        for day in range(1, days + 1):
            now = NOW + timedelta(days=day)
            for agent in (profile, neighbour) if tally["hostile_file_trials"] == 1 else (profile,):
                options = dream_options(BusyMaxWait=timedelta(0))
                # A backend that calls a model (the offline one never waits for the agent's turn), answering offline.
                client = ModelClient(ScriptedBackend(offline.complete), profile=agent, options=options)
                try:
                    reports = run_cycle(agent, options, now, only=only, client_factory=lambda c=client: c)
                except Exception as exc:  # noqa: BLE001 - the cycle itself must never raise
                    tally["hostile_file_failures"] += 1
                    notes.append(f"{kind}: the cycle of {agent.agent_id} raised {type(exc).__name__}: {exc}"[:300])
                    continue
                for r in reports:
                    if r.status == "failed":
                        tally["hostile_file_failures"] += 1
                        notes.append(f"{kind}: {r.pass_name} of {agent.agent_id} failed on day {day}: {r.reason[:200]}")
                    elif r.status == "deferred":
                        tally["hostile_file_stuck"] += 1  # the lease is stale (or unreadable) by now
                        notes.append(
                            f"{kind}: {r.pass_name} of {agent.agent_id} deferred on day {day}: {r.reason[:200]}"
                        )
            close_all()
        try:
            load_deferred(profile)
            with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
                code = dream_cli(
                    ["status", "--profile", str(profile.root), "--now", (NOW + timedelta(days=days)).isoformat()]
                )
            if code != 0:
                raise RuntimeError(f"dream status exited {code}")
        except BaseException as exc:  # noqa: BLE001 - the status and the sensor's read must never raise
            tally["hostile_file_failures"] += 1
            notes.append(f"{kind}: reading the agent's status raised {type(exc).__name__}: {exc}"[:300])
        close_all()


# ---------------------------------------------------------------------------------------------- 7: PostgreSQL outage
_RUN_ID = re.compile(r"^run ([0-9a-f-]{36}) ", re.M)
_PASS_LINE = re.compile(r"^  (\w+)\s+(completed|skipped|failed|deferred|not run)\s", re.M)


def _dream_run(profile: AgentProfile, env: dict[str, str], out: Path) -> subprocess.Popen:
    handle = open(out, "w", encoding="utf-8")  # noqa: SIM115 - the process owns it until it ends
    return subprocess.Popen(
        [sys.executable, "-m", "dream_assets.cli", "run", "--profile", str(profile.root), "--now", NOW.isoformat()],
        cwd=Path(__file__).resolve().parents[1],
        env=env,
        stdout=handle,
        stderr=subprocess.STDOUT,
    )


def _misreported_passes(profile: AgentProfile, said: str) -> list[str]:
    """Passes whose status `dream run` printed differs from the pass record of that run (the store is the truth)."""
    from dream_assets.passes.outcome import load_outcome

    found = _RUN_ID.search(said)
    if found is None:
        return ["dream run printed no run id: " + said[-300:]]
    run_id, shown = found.group(1), dict(_PASS_LINE.findall(said))
    wrong = []
    for name in MODEL_PASSES + ("log_retention", "archive_purge", "importance_decay", "contradiction_sweep"):
        record = load_outcome(profile, name)
        truth = record["status"] if record and record.get("cycle_id") == run_id else "not run"
        if name in shown and shown[name] != truth:
            wrong.append(f"{name}: dream run said {shown[name]!r}, its pass record says {truth!r}")
    return wrong


def _wait_for(check: Callable[[], Any], timeout_s: float, poll_s: float = 0.2) -> Any:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            found = check()
        except Exception:  # noqa: BLE001 - the database may be away for a moment: look again
            found = None
        if found:
            return found
        time.sleep(poll_s)
    return None


def outage_trials(work: Path, tally: Counter, notes: list[str], run_timeout_s: float = 120.0) -> None:
    """Against a throwaway PostgreSQL (deploy/dagster-postgres.yaml): (1) the server stops in the middle of a
    `dream run` and comes back; what the run printed must match the pass records, and no fact is lost or change half
    applied; (2) a `dream run` holding the `llm` slot is killed with SIGKILL and another agent's run starts: the time
    until a model pass of any agent holds the slot again is ``faults.fleet_stalled_s`` (target: at most the run
    timeout, ``faults.run_timeout_s``)."""
    import dagster as dg

    from dream_assets.store.connection import close_all
    from dream_assets_tests.openai_server import OpenAITestServer, hang
    from dream_assets_tests.postgres_server import PostgresUnavailable, start_postgres

    root = Path(__file__).resolve().parents[1]
    try:
        server_cm = start_postgres()
        pg = server_cm.__enter__()
    except PostgresUnavailable as exc:
        notes.append(f"outage section skipped: no PostgreSQL server ({exc})")
        return
    saved_env = dict(os.environ)
    try:
        db = pg.create_database("faults_outage")
        home = work / "outage-home"
        home.mkdir()
        shutil.copy(root / "deploy" / "dagster-postgres.yaml", home / "dagster.yaml")
        os.environ.update(pg.env(db))
        env = {
            **os.environ,
            "DAGSTER_HOME": str(home),
            "DREAM__RunTimeout": str(int(run_timeout_s)),
            "DREAM_LOG_LEVEL": "WARNING",
        }
        agents = {}
        for i, name in enumerate(("alpha", "bravo", "charlie")):
            agents[name] = AgentProfile(work / "outage" / name)
            build_demo_profile(agents[name], NOW - timedelta(hours=1), n_memories=40, seed=i + 1)
        close_all()

        # (1) the server stops while a cycle runs, and comes back
        alpha = agents["alpha"]
        before = memory_state(alpha)
        out = work / "outage-alpha.out"
        proc = _dream_run(alpha, env, out)
        first = alpha.pass_report_path("importance_decay")
        _wait_for(first.exists, 300)
        pg.stop()
        time.sleep(5)
        pg.start()
        try:
            proc.wait(timeout=900)
        except subprocess.TimeoutExpired:
            proc.kill()
            tally["outage_problems"] += 1
            notes.append("a dream run did not end within 900 s of a PostgreSQL outage")
        tally["outage_trials"] += 1
        said = out.read_text(encoding="utf-8", errors="replace")
        wrong = _misreported_passes(alpha, said)
        tally["misreported"] += len(wrong)
        notes.extend(f"outage: {w}" for w in wrong)
        after = memory_state(alpha)
        found = _RUN_ID.search(said)
        lost = lost_facts(before, after)
        tally["facts_lost"] += len(lost)
        if found:
            half = partial_applies(before, after, change_rows(alpha, found.group(1)))
            tally["partial_applies"] += len(half)
            notes.extend(f"outage: {h}" for h in half[:3])

        # (2) kill -9 a dream run that holds the llm slot; another agent's run must get it back
        with OpenAITestServer(default=hang(900)) as llm, dg.DagsterInstance.from_config(str(home)) as instance:
            bravo, charlie = agents["bravo"], agents["charlie"]
            (bravo.root / "dream.toml").write_text(
                f'LlmBaseUrl = "{llm.base_url}"\nLlmModel = "test"\nLlmTimeout = 900\nLlmMaxRetries = 0\n',
                encoding="utf-8",
            )

            def claimed() -> list[str]:
                return [c.run_id for c in instance.event_log_storage.get_concurrency_info("llm").claimed_slots]

            holder = _dream_run(bravo, env, work / "outage-bravo.out")
            held = _wait_for(lambda: llm.requests and claimed(), 300)
            if not held:
                holder.kill()
                tally["outage_problems"] += 1
                notes.append("outage: the hanging run never held the llm slot")
                return
            holder.kill()  # SIGKILL while it holds the slot
            holder.wait(timeout=60)
            killed = time.monotonic()
            waiter = _dream_run(charlie, env, work / "outage-charlie.out")
            got = _wait_for(lambda: [r for r in claimed() if r not in held] or waiter.poll() is not None, 900, 0.1)
            stalled = time.monotonic() - killed
            waiter.wait(timeout=900)
            tally["outage_trials"] += 1
            emit("faults.fleet_stalled_s", 1, stalled, "s")
            emit("faults.run_timeout_s", 1, run_timeout_s, "s")
            said = (work / "outage-charlie.out").read_text(encoding="utf-8", errors="replace")
            if not got or stalled > run_timeout_s or waiter.returncode != 0:
                tally["outage_problems"] += 1
                notes.append(f"outage: the next agent waited {stalled:.0f} s for the llm slot: {said[-300:]}")
            dead = instance.get_run_by_id(held[0])
            if dead is None or dead.status != dg.DagsterRunStatus.FAILURE:
                tally["misreported"] += 1
                notes.append(f"outage: the killed run is {dead.status if dead else 'gone'}, not failed")
    finally:
        os.environ.clear()
        os.environ.update(saved_env)
        close_all()
        server_cm.__exit__(None, None, None)


# ---------------------------------------------------------------------------------------------- 11: linked folders

#: A Claude Code memory folder: topic files of notes, each note with its own specifics (the fragments checked).
_FOLDER_FILES = {
    "project_release.md": (
        "project",
        "Release freeze",
        [
            "The merge freeze for release 4.2 begins on 2026-03-05; Dana Whitfield owns the release.",
            "Non-critical merges wait until the branch is cut on 2026-03-12.",
            "Release 4.3 ships on 2026-04-20 with the offline mode.",
        ],
    ),
    "project_infra.md": (
        "project",
        "Infrastructure",
        [
            "The ingest API runs on Hetzner CX22 in Falkenstein.",
            "Backups go to bucket s3://ingest-bak-7 every night at 02:00.",
        ],
    ),
    "user_role.md": (
        "user",
        None,
        [
            "The user is a data engineer on the ingest team and has written Go for 10 years.",
            "Prefers pnpm over npm in every JavaScript project.",
        ],
    ),
    "user_tools.md": (
        "user",
        None,
        [
            "Uses Helix as the editor on Fedora 41.",
            "Keeps a Zettelkasten in Obsidian since 2021.",
        ],
    ),
    "reference_dashboards.md": (
        "reference",
        None,
        [
            'The Grafana board "Ingest API p99" tracks request latency; on-call watches it.',
        ],
    ),
}


def _folder_file(kind: str, heading: str | None, notes: list[str]) -> str:
    head = f"---\nname: {kind}\ndescription: {kind} notes\ntype: {kind}\n---\n"
    if heading:
        return head + f"# {heading}\n\n" + "".join(f"- {n}\n" for n in notes)
    return head + "\n".join(f"{n}\n" for n in notes)


def _make_folder(folder: Path) -> list[str]:
    """Write the folder; returns every note's text."""
    folder.mkdir(parents=True)
    index = ["# Memory Index", ""]
    for rel, (kind, heading, notes) in _FOLDER_FILES.items():
        (folder / rel).write_text(_folder_file(kind, heading, notes), encoding="utf-8")
        index.append(f"- [{rel[:-3]}]({rel}) — {kind}")
    (folder / "MEMORY.md").write_text("\n".join(index) + "\n", encoding="utf-8")
    return [n for _, _, notes in _FOLDER_FILES.values() for n in notes]


def _edit(folder: Path, rel: str, old: str, new: str) -> None:
    path = folder / rel
    text = path.read_text(encoding="utf-8")
    if old not in text:
        raise AssertionError(f"{rel}: {old!r} not found")
    path.write_text(text.replace(old, new, 1), encoding="utf-8")


def _person_edits(rng: random.Random) -> list[tuple[str, Callable[[Path], list[str]]]]:
    """Edits a person makes between cycles, each returning the texts the folder must still carry after it."""

    def sentence_added(folder: Path) -> list[str]:
        rel = rng.choice(["project_release.md", "project_infra.md", "user_role.md"])
        note = rng.choice(_FOLDER_FILES[rel][2])
        extended = note + " Confirmed again on 2026-11-02."
        _edit(folder, rel, note, extended)
        return [extended]

    def heading_renamed(folder: Path) -> list[str]:
        rel = rng.choice(["project_release.md", "project_infra.md"])
        heading = _FOLDER_FILES[rel][1]
        _edit(folder, rel, f"# {heading}\n", f"# {heading} (renamed)\n")
        return []

    def moved(folder: Path) -> list[str]:
        note = rng.choice(_FOLDER_FILES["user_role.md"][2])
        _edit(folder, "user_role.md", f"{note}\n", "")
        with open(folder / "user_tools.md", "a", encoding="utf-8") as fh:
            fh.write(f"\n{note}\n")
        return []

    def split(folder: Path) -> list[str]:
        notes = _FOLDER_FILES["project_release.md"][2]
        moved_out = notes[rng.randrange(len(notes))]
        _edit(folder, "project_release.md", f"- {moved_out}\n", "")
        (folder / "project_release_next.md").write_text(
            _folder_file("project", "Release freeze", [moved_out]), encoding="utf-8"
        )
        with open(folder / "MEMORY.md", "a", encoding="utf-8") as fh:
            fh.write("- [next](project_release_next.md) — project\n")
        return []

    def copy_deleted(folder: Path) -> list[str]:  # the copy was read in a cycle of its own: see folder_trials
        note = _FOLDER_FILES["user_tools.md"][2][0]
        _edit(folder, "user_role.md", f"\n{note}\n", "")
        return []

    return [
        ("sentence_added", sentence_added),
        ("heading_renamed", heading_renamed),
        ("moved_to_another_file", moved),
        ("file_split", split),
        ("copy_deleted", copy_deleted),
    ]


def _folder_text(folder: Path) -> str:
    """What a session loads: every file of the folder outside archive/, as one text with whitespace folded."""
    return " ".join(
        " ".join(p.read_text(encoding="utf-8").split())
        for p in sorted(folder.rglob("*.md"))
        if "archive" not in p.parts
    )


def _live_text(profile: AgentProfile) -> str:
    from dream_assets.store import open_store

    store = open_store(profile)
    try:
        return "\n".join(" ".join(e.content.split()) for e in store.memories.list_live())
    finally:
        store.close()


def folder_trials(work: Path, quick: bool, tally: Counter, notes: list[str]) -> None:
    """Linked memory folders (Claude Code format): a person's edits of every kind between cycles, one folder linked to
    two agents, ``archive/`` swapped for a symlink to a folder outside between a read and its write-back, and a save
    by the person in the instant before a write-back's replace. Emits faults.person_edits_lost (a note a person kept
    or an edit they made that is in no live file of the folder afterwards) and faults.folder_trials; a note in no
    live memory counts in faults.facts_lost, a write outside the folder or a failure reported as anything but failed
    in faults.misreported."""
    import dream_assets.folders.sync as sync
    from dream_assets import agent_memory
    from dream_assets.folders import link_folder, plan_write_back, read_folder, write_back

    rng = random.Random(11)
    lost_edits = 0
    trials = 0
    base = work / "folders"

    def check(tag: str, folder: Path, agents: list[AgentProfile], kept: list[str]) -> None:
        nonlocal lost_edits
        text = _folder_text(folder)
        for note in kept:
            folded = " ".join(note.split())
            if folded not in text:
                lost_edits += 1
                notes.append(f"folder {tag}: {note!r} is in no live file of the folder")
            for agent in agents:  # its memory may hold more (an extension, a merge): all its words in one
                if not any(set(folded.split()) <= set(t.split()) for t in _live_text(agent).splitlines()):
                    tally["facts_lost"] += 1
                    notes.append(f"folder {tag}: {note!r} has no live memory in {agent.agent_id}")

    def cycle(agent: AgentProfile, hour: int, tag: str) -> None:
        at = NOW + timedelta(hours=hour)
        read = read_folder(agent, now=at)
        written = write_back(agent, now=at)
        if read.status != "completed" or written.status != "completed":
            tally["misreported"] += 1
            notes.append(f"folder {tag}: read {read.status} ({read.reason}), write {written.status} ({written.reason})")

    rounds = 1 if quick else 6
    for r in range(rounds):
        for name, edit in _person_edits(rng):
            tag = f"{name}-{r}"
            folder, agent = base / tag / "memory", AgentProfile(base / tag / "agent").ensure()
            kept = _make_folder(folder)
            link_folder(agent, folder, "claude-code")
            cycle(agent, 0, tag)
            if name == "copy_deleted":  # a second copy of a note, in a file of the same type, read as one memory
                with open(folder / "user_role.md", "a", encoding="utf-8") as fh:
                    fh.write(f"\n{_FOLDER_FILES['user_tools.md'][2][0]}\n")
                cycle(agent, 1, tag)
            added = edit(folder)
            kept = [n for n in kept if not any(n in a for a in added)] + added
            for hour in (2, 3):
                cycle(agent, hour, tag)
            check(tag, folder, [agent], kept)
            trials += 1

        # one folder, two agents: A merges two notes into one that extends a note B holds
        tag = f"two_agents-{r}"
        folder = base / tag / "memory"
        kept = _make_folder(folder)
        a, b = (AgentProfile(base / tag / n).ensure() for n in ("agent-a", "agent-b"))
        for agent in (a, b):
            link_folder(agent, folder, "claude-code")
            cycle(agent, 0, tag)
        from dream_assets.store import open_store

        store = open_store(a)
        try:
            live = {e.content: e for e in store.memories.list_live()}
            first, second = (live[n] for n in _FOLDER_FILES["project_release.md"][2][:2])
            merged = f"{first.content} {second.content}"
            with store.transaction():
                new = save_memory(store.memories, merged, category=first.category, now=NOW, dedupe=False).entry
                for old in (first, second):
                    store.memories.archive(old.id, now=NOW)
                    store.changes.record(
                        ChangeRow(
                            cycle_id=f"merge-{r}",
                            pass_name="memory_consolidation",
                            kind="archived",
                            target_type="memory",
                            target_id=old.id,
                            before=old,
                            after=None,
                            reason=f"merged into {new.id}",
                            successor_id=new.id,
                            successor_how=SuccessorHow.MERGED_INTO,
                        ),
                        now=NOW,
                    )
        finally:
            store.close()
        for hour, agent in enumerate((a, b, a, b, a), start=1):
            cycle(agent, hour, tag)
        check(tag, folder, [a, b], [merged, *kept[2:]])
        trials += 1

        # archive/ swapped for a symlink to a folder outside between the plan and the write
        tag = f"symlink-{r}"
        folder, agent = base / tag / "memory", AgentProfile(base / tag / "agent").ensure()
        kept = _make_folder(folder)
        link_folder(agent, folder, "claude-code")
        cycle(agent, 0, tag)
        gone = rng.choice(kept)
        store = open_store(agent)
        try:
            victim = next(e for e in store.memories.list_live() if e.content == gone)
        finally:
            store.close()
        agent_memory.forget(agent, victim.id, reason="retired", now=NOW, active=False)
        plan = plan_write_back(agent, now=NOW)
        outside = base / tag / "outside"
        outside.mkdir()
        (folder / "archive").symlink_to(outside, target_is_directory=True)
        report = sync.apply_write_back(agent, plan)
        if list(outside.iterdir()) or report.status != "failed":
            tally["misreported"] += 1
            notes.append(f"folder {tag}: wrote {sorted(p.name for p in outside.iterdir())}, reported {report.status}")
        if " ".join(gone.split()) not in _folder_text(folder):
            lost_edits += 1
            notes.append(f"folder {tag}: {gone!r} left the folder while its archive copy could not be written")
        trials += 1

        # a person saves a file in the instant between the write-back's last look at it and its replace
        tag = f"race-{r}"
        folder, agent = base / tag / "memory", AgentProfile(base / tag / "agent").ensure()
        kept = _make_folder(folder)
        link_folder(agent, folder, "claude-code")
        cycle(agent, 0, tag)
        store = open_store(agent)
        try:
            victim = next(e for e in store.memories.list_live() if "Go for 10 years" in e.content)
        finally:
            store.close()
        agent_memory.forget(agent, victim.id, reason="retired", now=NOW, active=False)
        target = folder / "user_role.md"
        saved = f"Works from Lisbon since 2025 (trial {r})."

        def person_saves(path: Path, target: Path = target, saved: str = saved) -> None:
            if path == target and saved not in path.read_text(encoding="utf-8"):
                tmp = path.with_name(".user_role.md.swp")
                tmp.write_text(path.read_text(encoding="utf-8") + f"\n{saved}\n", encoding="utf-8")
                os.replace(tmp, path)  # the way an editor saves

        hook = sync._before_replace
        sync._before_replace = person_saves
        try:
            report = write_back(agent, now=NOW)
        finally:
            sync._before_replace = hook
        if report.status == "failed":
            tally["misreported"] += 1
            notes.append(f"folder {tag}: the write-back failed: {report.reason}")
        cycle(agent, 1, tag)
        check(tag, folder, [agent], [saved])
        trials += 1
    tally["folder_trials"] += trials
    tally["person_edits_lost"] += lost_edits  # with those of the undo trials of section 13, which run first
    emit("faults.person_edits_lost", trials, tally["person_edits_lost"], "count")
    emit("faults.folder_trials", trials, trials, "count")


# ------------------------------------------------------------------------------ 13: undo of a review set, killed
#: A near copy of the first release note, in a topic file of its own: the review set merges the two.
_OWNER_NOTE = "Merge freeze for release 4.2 begins 2026-03-05, owned by Dana Whitfield."


def _merge_release(request: Any) -> Any:
    """The consolidation answer of the review set: the two release-freeze notes as one (the first note's text)."""
    if request.pass_name != "memory_consolidation":
        return {}
    entries = request.inputs.get("entries", [])
    ids = [e["id"] for e in entries if "4.2" in e["content"]]
    if len(ids) < 2:
        return {"toDelete": [], "toSave": []}
    text = _FOLDER_FILES["project_release.md"][2][0]
    return {"toDelete": [], "toSave": [{"content": text, "category": "project", "sourceIds": ids}]}


def _relocated(base: Path, dest: Path) -> AgentProfile:
    """A copy of ``base`` (an agent and its linked folder) at ``dest``, the folder paths its records hold made
    ``dest``'s; the copy's agent."""
    shutil.copytree(base, dest, ignore=shutil.ignore_patterns(".locks*"))
    for path in (dest / "agent").rglob("*.json"):
        text = path.read_text(encoding="utf-8")
        path.write_text(text.replace(str(base), str(dest)), encoding="utf-8")
    return AgentProfile(dest / "agent")


def _folder_undo_body(root: str, cycle: str, kill_store: int, kill_file: int, count_file: str | None) -> None:
    """A forked crash child: ``dream undo --cycle`` of the review set, exiting before its ``kill_store``-th write
    statement or before its ``kill_file``-th step on the folder's files (counted into ``count_file`` when given)."""
    import contextlib
    import io

    import dream_assets.folders.sync as sync
    from dream_assets.cli import main as dream

    os.environ[_KILL_ENV] = str(kill_store)
    _install_kill_hook()  # counts the store's writes into the file _COUNT_ENV names, when the parent set it
    steps = {"files": 0}

    def step(path: Path) -> None:
        steps["files"] += 1
        if count_file:
            Path(count_file).write_text(str(steps["files"]))
        if kill_file and steps["files"] >= kill_file:
            os._exit(77)

    sync._before_undo_step = step
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
        rc = dream(["undo", "--profile", root, "--cycle", cycle])
    os._exit(0 if rc == 0 else 1)


def _folder_undo_child(root: Path, cycle: str, kill_store: int, kill_file: int, count_file: Path | None = None) -> int:
    from dream_assets.store.connection import close_all

    close_all()
    proc = mp.get_context("fork").Process(
        target=_folder_undo_body,
        args=(str(root), cycle, kill_store, kill_file, str(count_file) if count_file else None),
    )
    proc.start()
    proc.join(timeout=300)
    return int(proc.exitcode if proc.exitcode is not None else -1)


def folder_undo_trials(work: Path, quick: bool, tally: Counter, notes: list[str]) -> None:
    """A Claude Code folder whose two release-freeze notes (in two files) a consolidation held for review merges;
    the set applied and written out by a ``dream sync``; then its ``dream undo --cycle`` killed (a forked child)
    before a write statement of the store's undo and before each step on the folder's files in turn, and run again
    in the parent. Every run again must exit 0 with nothing refused (faults.misreported), leave the folder's files
    as they were before the set, and the folder and the store agreeing: a write-back then has nothing to do
    (faults.partial_applies); every note in a live file and a live memory (faults.person_edits_lost,
    faults.facts_lost). Emits faults.folder_undo_trials."""
    import contextlib
    import io

    from dream_assets.cli import main as dream
    from dream_assets.folders import link_folder, plan_write_back, read_folder, write_back
    from dream_assets.passes.review import decide
    from dream_assets.store import open_store
    from dream_assets.store.connection import close_all

    base = work / "folder-undo" / "base"
    folder, agent = base / "memory", AgentProfile(base / "agent").ensure()
    kept = _make_folder(folder)
    (folder / "project_release_owner.md").write_text(_folder_file("project", None, [_OWNER_NOTE]), encoding="utf-8")
    with open(folder / "MEMORY.md", "a", encoding="utf-8") as fh:
        fh.write("- [owner](project_release_owner.md) — project\n")
    kept.append(_OWNER_NOTE)
    link_folder(agent, folder, "claude-code")
    if read_folder(agent, now=NOW).status != "completed" or write_back(agent, now=NOW).status != "completed":
        raise RuntimeError("the folder of the undo trials could not be read and written")
    before = {p.relative_to(folder).as_posix(): p.read_bytes() for p in folder.rglob("*") if p.is_file()}
    run_pass(agent, "memory_consolidation", _merge_release, cycle_id="set-f", options=dream_options(ApplyMode="review"))
    store = open_store(agent, dream_options())
    try:
        applied = decide(store, "apply", cycle_id="set-f", now=NOW + timedelta(minutes=5), options=dream_options())
    finally:
        store.close()
    written = write_back(agent, now=NOW + timedelta(minutes=6))  # the `dream sync` that writes the set out
    if not applied.done or written.status != "completed" or (folder / "project_release_owner.md").exists():
        raise RuntimeError(f"the review set was not applied and written out: {applied}, {written.status}")
    close_all()

    count = work / "folder-undo" / "count"
    probe = _relocated(base, work / "folder-undo" / "probe")
    os.environ[_COUNT_ENV] = str(count)  # the store's write statements of a whole undo
    try:
        _folder_undo_child(probe.root, "set-f", 0, 0)
    finally:
        os.environ.pop(_COUNT_ENV, None)
    store_writes = int(count.read_text()) if count.exists() else 0
    count.unlink(missing_ok=True)
    probe = _relocated(base, work / "folder-undo" / "probe-files")
    _folder_undo_child(probe.root, "set-f", 0, 0, count)
    file_steps = int(count.read_text()) if count.exists() else 0
    if store_writes == 0 or file_steps == 0:
        raise RuntimeError(f"the undo of the review set wrote nothing ({store_writes} writes, {file_steps} file steps)")
    points = [(k, 0) for k in _sample(list(range(1, store_writes + 1)), quick)][:: 3 if quick else 1]
    points += [(0, k) for k in range(1, file_steps + 1)]
    trials = 0
    for kill_store, kill_file in points:
        tag = f"undo killed at {'write' if kill_store else 'file step'} {kill_store or kill_file}"
        dest = work / "folder-undo" / f"kill-{kill_store}-{kill_file}"
        trial = _relocated(base, dest)
        if _folder_undo_child(trial.root, "set-f", kill_store, kill_file) != 77:
            notes.append(f"folder {tag}: the child was not killed")
            continue
        trials += 1
        out, err = io.StringIO(), io.StringIO()
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            rc = dream(["undo", "--profile", str(trial.root), "--cycle", "set-f"])
        if rc != 0 or "NOT put back" in err.getvalue() or " 0 refused" not in out.getvalue():
            tally["misreported"] += 1
            notes.append(f"folder {tag}, run again: exit {rc}: {(err.getvalue() or out.getvalue())[-300:]}")
        moved = dest / "memory"
        now_files = {p.relative_to(moved).as_posix(): p.read_bytes() for p in moved.rglob("*") if p.is_file()}
        outside = {k: v for k, v in now_files.items() if not k.startswith("archive/")}
        if outside != {k: v for k, v in before.items() if not k.startswith("archive/")}:
            tally["partial_applies"] += 1
            notes.append(f"folder {tag}: files not as before the set: {sorted(set(outside) ^ set(before))}")
        text = _folder_text(moved)
        for note in kept:
            if " ".join(note.split()) not in text:
                tally["person_edits_lost"] += 1
                notes.append(f"folder {tag}: {note!r} is in no live file of the folder")
        live = _live_text(trial).splitlines()
        for note in kept:  # its memory may hold more (a merge): all its words in one
            if not any(set(note.split()) <= set(t.split()) for t in live):
                tally["facts_lost"] += 1
                notes.append(f"folder {tag}: {note!r} has no live memory after the undo")
        if plan_write_back(trial, now=NOW + timedelta(minutes=10)).changes:
            tally["partial_applies"] += 1
            notes.append(f"folder {tag}: the folder and the store disagree after the undo (a write-back would write)")
        close_all()
        shutil.rmtree(dest, ignore_errors=True)
    tally["folder_undo_trials"] += trials
    tally["folder_undo_file_steps"] = file_steps
    emit("faults.folder_undo_trials", trials, trials, "count")


# ------------------------------------------------------------------------------------------ 11: LangGraph namespaces
LG_USERS = ("Alice", "Bob", "Carol")
#: Facts every user holds in near-identical words: the clusters a scan without walls would join across namespaces.
LG_FACTS = (
    "{u} prefers green tea in the morning, no sugar.",
    "{u} has the dentist on 2026-12-{d:02d} at 09:15 with Dr. Alvarez.",
    "{u} flies to Oslo on 2026-12-{d:02d} for the Meridian review.",
    "{u} keeps the VPN token in the top drawer of desk 4{d}.",
)


def _lg_value(rng: random.Random, user: str, n: int) -> dict[str, Any]:
    text = LG_FACTS[n % len(LG_FACTS)].format(u=user, d=rng.randint(1, 9))
    if rng.random() < 0.3:  # a near duplicate of the user's own fact: a merge the walls allow
        text += rng.choice([" Noted again.", " Confirmed by phone.", " As before."])
    if rng.random() < 0.15:  # over MaxContentChars: stored whole, searchable by its head, left alone by the dream
        text += " " + " ".join(f"{user} appendix line {i} on the Meridian ledger." for i in range(500))
    return {"content": text, "owner": user, "n": n}


def langgraph_answer(rng: random.Random, pass_name: str, inputs: Any, every_id: list[str]) -> Any:
    """A hostile model over several users' namespaces: merges of entries of different namespaces (keeping every
    sentence, so only the walls refuse them), a user's entry refiled or copied into another's namespace, removals of
    an entry whose twin lives in another namespace, supersessions across namespaces both ways; and some merges within
    one namespace, which the walls allow."""
    if pass_name == "merge_repair":
        return {"content": "\n".join([inputs["merged"], *[s["content"] for s in inputs["sources"]]])}
    entries = inputs.get("entries", [])
    if pass_name == "contradiction_sweep":
        ids = [e["id"] for e in entries] + rng.sample(every_id, min(len(every_id), 8))
        pairs = [(a, b) for a in ids for b in ids if a != b]
        rng.shuffle(pairs)
        return {"supersessions": [{"winnerId": w, "loserId": lo, "reason": "newer"} for w, lo in pairs[:40]]}
    by_category: dict[str, list[dict]] = {}
    for e in entries:
        by_category.setdefault(e["category"], []).append(e)
    categories = sorted(by_category)
    saves: list[dict[str, Any]] = []
    delete: list[str] = []
    for e in entries:
        others = [c for c in categories if c != e["category"]]
        if not others:
            continue
        other = rng.choice(by_category[rng.choice(others)])
        roll = rng.random()
        if roll < 0.5:
            save = {"content": f"{e['content']} {other['content']}", "sourceIds": [e["id"], other["id"]]}
            if rng.random() < 0.5:
                save["category"] = rng.choice(categories)
            saves.append(save)
        elif roll < 0.65:
            saves.append({"content": e["content"], "sourceIds": [e["id"]], "category": other["category"]})
        elif roll < 0.75:  # a copy of it, as a new entry, behind another user's wall
            saves.append({"content": e["content"], "sourceIds": [], "category": other["category"]})
        elif roll < 0.85:
            delete.append(e["id"])
    for members in by_category.values():
        if len(members) >= 2 and rng.random() < 0.5:
            pair = rng.sample(members, 2)
            saves.append({"content": " ".join(m["content"] for m in pair), "sourceIds": [m["id"] for m in pair]})
    rng.shuffle(saves)
    return {"toSave": saves, "toDelete": delete}


def _namespace_leaks(lg: Any, items: dict[tuple[tuple[str, ...], str], dict], state: tuple[dict, dict, list]) -> list:
    """Where one user's memory reached another's namespace: a get that leads into another namespace or returns
    another user's value, a namespace whose items name another user, a live merged entry or a supersession whose
    entries were in different namespaces."""
    leaks = []
    for ns, key in items:
        item = lg.get(ns, key)
        if item is not None and (tuple(item.namespace) != ns or item.value.get("owner", ns[1]) != ns[1]):
            leaks.append(f"get {ns}/{key} returned {tuple(item.namespace)}/{item.key}")
    for user in LG_USERS:
        ns = ("memories", user)
        for item in lg.search(ns, limit=1000):
            text = str(item.value.get("content", ""))
            strangers = [u for u in LG_USERS if u != user and u in text.split()]
            if strangers or tuple(item.namespace[:2]) != ns:
                leaks.append(f"{ns} holds {item.key} naming {strangers}: {text[:80]!r}")
    memories = state[0]
    for mid, e in memories.items():
        if e["archived"]:
            winner = memories.get(e["metadata"].get("supersededBy", ""))
            if winner is not None and winner["category"] != e["category"]:
                leaks.append(f"{mid} of {e['category']} superseded by an entry of {winner['category']}")
            continue
        try:
            sources = json.loads(e["metadata"].get("mergedFrom", "[]"))
        except ValueError:
            sources = []
        spread = {memories[s]["category"] for s in sources if s in memories} - {e["category"]}
        if spread:
            leaks.append(f"{mid} of {e['category']} merged from entries of {sorted(spread)}")
    return leaks


def langgraph_trials(work: Path, trials: int, tally: Counter, notes: list[str]) -> None:
    """Three users' LangGraph namespaces holding near-identical facts (some values over MaxContentChars), a dream
    cycle whose model merges, refiles, removes and supersedes across the namespaces, then a save of one user's exact
    text into another's namespace: no memory reaches another namespace (faults.cross_namespace_leaks), no fact is
    lost beyond undo, no answer is half applied, every put is recorded, and a refused proposal is reported."""
    from dream_assets import agent_memory
    from dream_assets.langgraph_store import LangGraphMemoryStore, item_id
    from dream_assets.store.connection import close_all

    logging.disable(logging.WARNING)
    leaks = refused = 0
    try:
        for trial in range(trials):
            rng = random.Random(20_000 + trial)
            profile = AgentProfile(work / f"langgraph-{trial}").ensure()
            ticks = iter(range(1_000_000))  # the puts' times: a second apart, hours before the cycle (no busy lease)
            lg = LangGraphMemoryStore(
                profile, clock=lambda t=ticks: NOW - timedelta(hours=3) + timedelta(seconds=next(t))
            )
            items: dict[tuple[tuple[str, ...], str], dict] = {}
            for user in LG_USERS:
                for n in range(rng.randint(3, 6)):
                    ns, key = ("memories", user), f"fact-{n}"
                    items[(ns, key)] = _lg_value(rng, user, n)
                    lg.put(ns, key, items[(ns, key)])
            with lg.store.connection.session() as conn:
                before, _, put_rows = _rows(conn, f"agent-{(NOW - timedelta(hours=3)):%Y-%m-%d}")
            if {r["id"] for r in put_rows if r["kind"] == "created"} != {item_id(ns, k) for ns, k in items}:
                tally["partial_applies"] += 1
                notes.append(f"langgraph trial {trial}: a put without its change row")
            every_id = sorted(before)
            for pass_name in ("memory_consolidation", "contradiction_sweep"):
                cycle = f"langgraph-{trial}-{pass_name}"
                state: list = []

                def answer(request: Any, rng: random.Random = rng, every: list = every_id) -> Any:
                    return langgraph_answer(rng, request.pass_name, request.inputs, every)

                report, _ = run_pass(profile, pass_name, answer, cycle_id=cycle, state=state)
                tally["langgraph_passes"] += 1
                if report.status != "completed":
                    tally["misreported"] += 1
                    notes.append(f"langgraph trial {trial}: {pass_name} {report.status}: {report.reason}")
                    continue
                after, _, rows = state[0]
                refused += int(report.counts.get("cross_scope_refused", 0)) + int(report.counts.get("cross_scope", 0))
                partial = partial_applies(before, after, rows)
                if partial:
                    tally["partial_applies"] += 1
                    notes.append(f"langgraph trial {trial}: {partial[0]}")
                if lost_facts(before, after):
                    problem = undo_restores(profile, cycle, before, dream_options())
                    if problem:
                        tally["facts_lost"] += 1
                        notes.append(f"langgraph trial {trial}: facts lost and undo failed: {problem}")
                    with lg.store.connection.session() as conn:
                        after = _rows(conn, None)[0]
                found = _namespace_leaks(lg, items, (after, {}, rows))
                leaks += len(found)
                notes += [f"langgraph trial {trial}: {leak}" for leak in found[:3]]
                before = after
            for (ns, key), value in items.items():  # every value comes back whole, the long ones too
                item = lg.get(ns, key)
                if item is not None and tuple(item.namespace) == ns and item.key == key and item.value != value:
                    tally["facts_lost"] += 1
                    notes.append(f"langgraph trial {trial}: {ns}/{key} came back changed")
            # Save-time dedup: one user's exact text saved into another's namespace is a new entry there.
            (ns, key), value = rng.choice([(k, v) for k, v in items.items() if len(v["content"]) < 1000])
            other = ("memories", rng.choice([u for u in LG_USERS if u != ns[1]]))
            saved = agent_memory.save(profile, value["content"], category="/".join(other), now=NOW, active=False)
            if saved.category != "/".join(other) or saved.outcome != "created":
                leaks += 1
                notes.append(f"langgraph trial {trial}: a save into {other} was {saved.outcome} into {saved.id}")
            tally["langgraph_trials"] += 1
            lg.close()
            close_all()
            shutil.rmtree(profile.root, ignore_errors=True)
    finally:
        logging.disable(logging.NOTSET)
    tally["cross_namespace_leaks"] += leaks
    emit("faults.cross_namespace_leaks", tally["langgraph_trials"], leaks, "count")
    emit("faults.langgraph_trials", tally["langgraph_trials"], tally["langgraph_trials"], "count")
    emit("faults.langgraph_refused", tally["langgraph_trials"], refused, "count")


def main(argv: Iterable[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="CI-sized run")
    parser.add_argument("--trials", type=int, default=None, help="fuzzed answers (default 10,000; 280 with --quick)")
    parser.add_argument("--notes", type=int, default=10, help="how many example problems to print on stderr")
    parser.add_argument("--kill-shard", help=argparse.SUPPRESS)
    args = parser.parse_args(list(argv) if argv is not None else None)
    if args.kill_shard:
        print(json.dumps(kill_shard(json.loads(args.kill_shard))))
        return 0
    trials = args.trials if args.trials is not None else (280 if args.quick else 10_000)
    started = time.perf_counter()
    tally: Counter = Counter()
    notes: list[str] = []
    with tempfile.TemporaryDirectory(prefix="dream-faults-") as tmp:
        work = Path(tmp)
        template = build_template(work)
        sections: list[tuple[str, Callable[[], None]]] = [
            ("kill", lambda: kill_trials(template, work, args.quick, tally, notes)),
            ("review", lambda: review_trials(template, work, args.quick, tally, notes)),
            ("fuzz", lambda: fuzz_trials(template, work, trials, tally, notes)),
            ("hostile_logs", lambda: hostile_log_trial(template, work, tally, notes)),
            (
                "concurrent",
                lambda: concurrent_trial(template, work, 8.0 if args.quick else 30.0, tally, notes),
            ),
            ("sweep", lambda: sweep_trials(template, work, 8 if args.quick else 300, tally, notes)),
            ("embeddings", lambda: embeddings_trials(template, work, 4 if args.quick else 40, tally, notes)),
            ("langgraph", lambda: langgraph_trials(work, 3 if args.quick else 40, tally, notes)),
            (
                "hostile_files",
                lambda: hostile_file_section(template, work, args.quick, tally, notes),
            ),
        ]
        sections.append(("folder_undo", lambda: folder_undo_trials(work, args.quick, tally, notes)))
        sections.append(("folder", lambda: folder_trials(work, args.quick, tally, notes)))
        if not args.quick:
            sections.append(("outage", lambda: outage_trials(work, tally, notes)))
        for name, section in sections:
            t0 = time.perf_counter()
            try:
                section()
            except Exception:  # noqa: BLE001 - a section that cannot run is reported, and counts as misreported
                tally["section_errors"] += 1
                notes.append(f"section {name} could not run: {traceback.format_exc()[-600:]}")
            emit(f"faults.{name}_seconds", 0, time.perf_counter() - t0, "s")
    n = (
        tally["kill_trials"]
        + tally["review_trials"]
        + tally["fuzz_trials"]
        + tally["hostile_log_trials"]
        + tally["concurrent_saves"]
        + tally["sweep_trials"]
        + tally["embedding_saves"]
    )
    emit("faults.facts_lost", n, tally["facts_lost"], "count")
    emit("faults.partial_applies", n, tally["partial_applies"], "count")
    emit(
        "faults.misreported",
        n,
        tally["misreported"]
        + tally["hostile_log_pass_failures"]
        + tally["section_errors"]
        + tally["hostile_file_failures"],
        "count",
    )
    emit("faults.undo_failures", n, tally["undo_failures"], "count")
    emit("faults.superseded_purged", n, tally["superseded_purged"], "count")
    emit(
        "faults.embedding_failures",
        n,
        tally["embedding_wrong_merges"] + tally["embedding_poisoned"] + tally["embedding_not_recovered"],
        "count",
    )
    for key in (
        "kill_trials",
        "apply_writes",
        "undo_writes",
        "review_trials",
        "review_apply_writes",
        "review_reject_writes",
        "fuzz_trials",
        "hostile_log_trials",
        "concurrent_saves",
        "concurrent_save_errors",
        "concurrent_cycles",
        "concurrent_pass_failures",
        "sweep_trials",
        "sweep_superseded",
        "embedding_saves",
        "hostile_file_trials",
        "hostile_file_failures",
        "hostile_file_stuck",
        "outage_trials",
        "outage_problems",
        "folder_undo_file_steps",
    ):
        emit(f"faults.{key}", n, tally[key], "count")
    emit("faults.seconds", n, time.perf_counter() - started, "s")
    for note in notes[: args.notes]:
        print(f"note: {note}", file=sys.stderr)
    bad = (
        tally["facts_lost"]
        + tally["partial_applies"]
        + tally["misreported"]
        + tally["undo_failures"]
        + tally["hostile_log_pass_failures"]
        + tally["section_errors"]
        + tally["superseded_purged"]
        + tally["embedding_wrong_merges"]
        + tally["embedding_poisoned"]
        + tally["embedding_not_recovered"]
        + tally["hostile_file_failures"]
        + tally["hostile_file_stuck"]
        + tally["outage_problems"]
        + tally["person_edits_lost"]
        + tally["cross_namespace_leaks"]
    )
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
