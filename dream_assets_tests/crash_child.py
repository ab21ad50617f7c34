"""A child process for crash tests: run one pass with scripted model answers and die (``os._exit``) right after the
N-th write statement reaches the store, before anything else happens — the closest thing to a power cut or a
``kill -9`` between two writes.

Usage: ``python -m dream_assets_tests.crash_child SPEC_JSON`` where the spec holds ``profile`` (the profile root),
``pass`` (``memory_consolidation``, ``skill_consolidation`` or ``importance_decay``), ``answers`` (scripted model
answers), ``now`` (ISO), ``cycle``, ``kill_at`` (0: never) and optionally ``write_chunk`` (entries per bulk write
transaction, store/memory.py ``WRITE_CHUNK``). Exit status ``KILLED`` when it died at the write, 0 when the pass
completed (it then prints its status, counts and the number of write statements it made as one JSON line).

With ``trials`` (a list of ``[kill_at, profile]``) instead, the process imports everything once and forks one child
per trial (each a separate process that dies at its write), then prints ``{kill_at: exit status}`` as one JSON line:
the same crash, without paying the interpreter start-up per trial.
"""

from __future__ import annotations

import json
import os
import sys
from contextlib import contextmanager
from datetime import timedelta

KILLED = 86
_WRITES = ("INSERT", "UPDATE", "DELETE")


class _CountingConnection:
    """A DuckDB connection that counts write statements and ends the process after the chosen one."""

    def __init__(self, conn, state: dict) -> None:
        self._conn = conn
        self._state = state

    def execute(self, sql, *args, **kwargs):
        result = self._conn.execute(sql, *args, **kwargs)
        if str(sql).lstrip().upper().startswith(_WRITES):
            self._state["writes"] += 1
            if self._state["writes"] == self._state["kill_at"]:
                os._exit(KILLED)
        return result

    def __getattr__(self, name):
        return getattr(self._conn, name)


def _instrument(kill_at: int) -> dict:
    from dream_assets.store.connection import StoreConnection

    state = {"writes": 0, "kill_at": kill_at}
    original = StoreConnection.session

    @contextmanager
    def session(self):
        with original(self) as conn:
            yield _CountingConnection(conn, state)

    StoreConnection.session = session  # type: ignore[method-assign]
    return state


def main(argv: list[str]) -> int:
    spec = json.loads(argv[0])
    if "trials" in spec:
        return _fork_trials(spec)
    state = _instrument(int(spec.get("kill_at") or 0))
    return _run(spec, state)


def _fork_trials(spec: dict) -> int:
    import dream_assets.passes.skill_consolidation  # noqa: F401 - imported once, before forking
    from dream_assets.llm.client import ModelClient  # noqa: F401
    from dream_assets.text.coverage import BASELINE_VOCABULARY, CoverageSource, check_merge_coverage
    from dream_assets.text.similarity import find_duplicate_clusters

    # What the pass builds on first use (the word-frequency baseline, the TF-IDF vectoriser) is built here, once;
    # no store is opened before forking.
    check_merge_coverage(
        [CoverageSource("Warm-up for Austin on 2026-01-02.", "general")], "warm up", BASELINE_VOCABULARY
    )
    find_duplicate_clusters([("a", "warm up text"), ("b", "warm up text too")], 0.88, 3)

    statuses: dict[int, int] = {}
    for kill_at, profile in spec["trials"]:
        sys.stdout.flush()
        pid = os.fork()
        if pid == 0:  # the trial: a process of its own, dying at its write
            try:
                state = _instrument(int(kill_at))
                with open(os.devnull, "w") as quiet:
                    sys.stdout = quiet
                    code = _run({**spec, "profile": profile}, state)
            except BaseException:  # noqa: BLE001 - any escape is a failed trial, reported by its status
                import traceback

                traceback.print_exc()
                code = 2
            os._exit(code)
        _, status = os.waitpid(pid, 0)
        statuses[int(kill_at)] = os.waitstatus_to_exitcode(status)
    print(json.dumps(statuses))
    return 0


def _run(spec: dict, state: dict) -> int:
    from dream_assets.llm.client import ModelClient
    from dream_assets.llm.scripted import ScriptedBackend
    from dream_assets.model import parse_ts
    from dream_assets.passes.context import PassContext
    from dream_assets.profile import AgentProfile

    if spec.get("write_chunk"):  # before any pass module is imported (options with the pass sections import them)
        from dream_assets.store import memory

        memory.WRITE_CHUNK = int(spec["write_chunk"])
    from dream_assets.options_loader import dream_options

    profile = AgentProfile(spec["profile"])
    options = dream_options(ConsolidationMinInterval=timedelta(0), DreamPassChangeGateEnabled=False)
    client = ModelClient(ScriptedBackend(spec["answers"]), profile=profile, options=options)
    ctx = PassContext(profile, options, parse_ts(spec["now"]), cycle_id=spec["cycle"], client_factory=lambda: client)
    if spec["pass"] == "memory_consolidation":
        from dream_assets.passes.memory_consolidation import run_memory_consolidation as run
    elif spec["pass"] == "importance_decay":
        from dream_assets.passes.importance_decay import run_importance_decay as run
    else:
        from dream_assets.passes.skill_consolidation import run_skill_consolidation as run
    report = run(ctx)
    ctx.store.close()
    print(json.dumps({"status": report.status, "counts": report.counts, "writes": state["writes"]}))
    return 0 if report.status == "completed" else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
