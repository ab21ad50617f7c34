"""Pool slots come back from runs that died.

Every model step claims a slot of the `llm` pool in the instance's event log storage, and a run frees it when the step
ends. A run whose process dies (``kill -9``, an out-of-memory kill, a machine that goes away, a PostgreSQL outage that
ends the process) never frees it, and Dagster's run monitoring does not help for these runs: it only watches the
worker of a run the daemon launched through a launcher that can check workers (not the default launcher, not
``dream run``'s in-process run), and it frees slots only of runs that already finished. Without this module one crash
stops every model pass of every agent for good.

So every run shows signs of life, and dead runs are found by whoever needs their slots:

- a run keeps its host, its process id and a heartbeat (seconds since the epoch, refreshed every
  ``heartbeat_interval``) in its tags (``dream/host``, ``dream/pid``, ``dream/heartbeat``), from a thread of the
  process running it (:class:`RunHeartbeat`, started by the deployment resource for every run);
- :func:`free_slots_of_dead_runs` looks at every run that holds or waits for a slot: a run that finished, or no longer
  exists, or whose process is gone (same host, its pid no longer alive), or whose last sign of life (heartbeat, else
  start) is older than ``RunTimeout`` is dead: it is marked failed (saying why) and its slots are freed;
- ``dream run`` calls it before its run and again while one of its steps waits for a slot, and the
  ``dead_run_sensor`` calls it in the daemon, so slots come back with or without a daemon.

A live run on another machine whose heartbeat cannot reach the instance for longer than ``RunTimeout`` (a PostgreSQL
outage that long) is taken for dead: it loses its slot (the next model pass elsewhere may overlap with it) and is
marked failed; the store's own locks keep the agents' data safe either way.
"""

from __future__ import annotations

import logging
import os
import socket
import time
from collections.abc import Callable
from dataclasses import dataclass

import dagster as dg

from dream_assets.liveness import Heartbeat, pid_alive

log = logging.getLogger("dream_assets.orchestration.run_liveness")

HOST_TAG = "dream/host"
PID_TAG = "dream/pid"
HEARTBEAT_TAG = "dream/heartbeat"
_HOST = socket.gethostname()


#: The instance pool every model step claims a slot of (one model call at a time per instance by default).
LLM_POOL = "llm"


def lost_the_row_race(exc: BaseException) -> bool:
    """Is ``exc`` the unique violation of a pool's limit row that another run inserted first (SQLAlchemy's
    IntegrityError, known by name: the storage's driver is not imported here)?"""
    return type(exc).__name__ == "IntegrityError"


def ensure_pool_rows(instance: dg.DagsterInstance, pools: tuple[str, ...] = (LLM_POOL,)) -> None:
    """Create each pool's default limit row before any step of the run claims a slot of it.

    A step's first claim creates the row when it is missing; on a fresh PostgreSQL instance two runs' first claims
    then both insert it, and the loser's insert fails inside Dagster's transaction, which fails that step (a cycle of
    one agent lost in a fleet). Made here, at the start of every run, the race is taken as won by whoever inserted
    the row first, and no claim needs to create it. Anything going wrong here is only logged: the claim itself then
    tries again and fails the step honestly if the instance's database is really unusable."""
    storage = instance.event_log_storage
    try:
        if not storage.supports_global_concurrency_limits:
            return
        default_limit = storage.get_pool_config().default_pool_limit
        if default_limit is None:
            return  # no default: a pool without a row has no limit, and Dagster creates none
        current = {pool.name: pool for pool in storage.get_pool_limits()}
        for name in pools:
            known = current.get(name)
            if known is not None and not (known.from_default and known.limit != default_limit):
                continue
            try:
                storage.initialize_concurrency_limit_to_default(name)
            except Exception as exc:  # noqa: BLE001 - the race below; the claim retries anything else
                if not lost_the_row_race(exc):
                    raise
                log.info("pool %s: another run created its limit row first", name)
    except Exception as exc:  # noqa: BLE001 - a pre-warm only; the step's claim reports a real failure
        log.warning("could not prepare the %s pool's limit row (%s); the first claim will", pools, exc)


def heartbeat_interval(timeout_s: float) -> float:
    """How often a run refreshes its heartbeat: a fifth of the run timeout, between 1 and 30 seconds."""
    return max(1.0, min(30.0, timeout_s / 5))


class RunHeartbeat(Heartbeat):
    """Keeps the liveness tags of one run fresh from a background thread, until :meth:`stop`. A heartbeat that cannot
    be written (the instance's database is unreachable) is logged and tried again at the next beat."""

    def __init__(self, instance: dg.DagsterInstance, run_id: str, interval_s: float) -> None:
        self._instance = instance
        self._run_id = run_id
        self.beats = 0
        self._warned = False
        super().__init__(interval_s, name=f"run-heartbeat-{run_id[:8]}")

    def beat(self) -> None:
        try:
            self._instance.add_run_tags(
                self._run_id, {HOST_TAG: _HOST, PID_TAG: str(os.getpid()), HEARTBEAT_TAG: f"{time.time():.3f}"}
            )
            self.beats += 1
            self._warned = False
        except Exception as exc:  # noqa: BLE001 - a missed heartbeat is retried; it never fails the run
            if not self._warned:
                log.warning("run %s: could not record its heartbeat (%s); retrying", self._run_id, exc)
                self._warned = True


@dataclass(frozen=True)
class DeadRun:
    run_id: str
    why: str


def why_dead(record: dg.RunRecord | None, *, now_s: float, timeout_s: float) -> str | None:
    """Why a run that holds or waits for a pool slot is dead, or None while it may still be running."""
    if record is None:
        return "the run no longer exists"
    run = record.dagster_run
    if run.is_finished:
        return f"the run finished ({run.status.value}) without freeing its slots"
    tags = run.tags
    pid = _int(tags.get(PID_TAG))
    if tags.get(HOST_TAG) == _HOST and pid is not None:
        if not pid_alive(pid):
            return f"its process (pid {pid} on {_HOST}) is gone"
        return None  # alive on this machine, however long it takes
    beat = _float(tags.get(HEARTBEAT_TAG))
    started = record.start_time or record.create_timestamp.timestamp()
    last = max(beat or 0.0, started or 0.0)
    if timeout_s > 0 and now_s - last > timeout_s:
        what = "heartbeat" if beat else "start"
        where = f" (pid {pid} on {tags.get(HOST_TAG)})" if pid is not None else ""
        return (
            f"no sign of life{where} for {now_s - last:.0f} s (last {what}), over the run timeout of {timeout_s:.0f} s"
        )
    return None


def free_slots_of_dead_runs(
    instance: dg.DagsterInstance,
    *,
    timeout_s: float,
    keep: str | None = None,
    now: Callable[[], float] = time.time,
) -> list[DeadRun]:
    """Mark failed every dead run (see :func:`why_dead`) that holds or waits for a pool slot, and free its slots.
    ``keep``: the caller's own run, never touched. Returns the runs freed. Never raises for one run: a run that cannot
    be handled (the database went away) is logged and left for the next call."""
    storage = instance.event_log_storage
    if not storage.supports_global_concurrency_limits:
        return []
    freed: list[DeadRun] = []
    for run_id in sorted(storage.get_concurrency_run_ids()):
        if run_id == keep:
            continue
        try:
            record = instance.get_run_record_by_id(run_id)
            why = why_dead(record, now_s=now(), timeout_s=timeout_s)
            if why is None:
                continue
            storage.free_concurrency_slots_for_run(run_id)
            if record is not None and not record.dagster_run.is_finished:
                instance.report_run_failed(
                    record.dagster_run, f"Marked failed and its pool slots freed: {why} (dream run liveness check)."
                )
            log.warning("freed the pool slots of run %s: %s", run_id, why)
            freed.append(DeadRun(run_id, why))
        except Exception as exc:  # noqa: BLE001 - one run that cannot be checked never stops the others
            log.warning("could not check run %s for pool slots to free: %s", run_id, exc)
    return freed


def _int(value: str | None) -> int | None:
    try:
        return int(value) if value is not None else None
    except ValueError:
        return None


def _float(value: str | None) -> float | None:
    try:
        return float(value) if value is not None else None
    except ValueError:
        return None


#: While a step waits for a slot: how often its claim is retried (and a signal noticed), and dead runs looked for.
CLAIM_RETRY_S = 1.0
SWEEP_EVERY_S = 2.0


class SlotWait:
    """Wraps the slot claims of one in-process run (``dream run``) on its instance, for the duration of a ``with``.

    While a step waits for a slot, its claim is retried every ``CLAIM_RETRY_S`` (Dagster's own back-off reaches 15 s),
    dead runs are looked for every ``SWEEP_EVERY_S`` (their slots freed), and a SIGTERM or SIGINT ends the wait: Dagster
    holds such signals back during a run and its in-process executor never looks at them while it waits, so without
    this the run would wait on. The run then fails as interrupted, its pending claim withdrawn; ``interrupted`` says
    so, ``waited_s`` how long its steps waited in all."""

    def __init__(self, instance: dg.DagsterInstance, *, timeout_s: float) -> None:
        self._instance = instance
        self._storage = instance.event_log_storage
        self._timeout_s = timeout_s
        self._next_sweep = 0.0
        self.run_id: str | None = None
        self.interrupted = False
        self.waited_s = 0.0
        self.freed: list[DeadRun] = []

    def __enter__(self) -> SlotWait:
        real = type(self._storage).claim_concurrency_slot

        def claim(concurrency_key: str, run_id: str, step_key: str, priority: int | None = None):  # noqa: ANN202
            return self._claim(real, concurrency_key, run_id, step_key, priority)

        self._storage.claim_concurrency_slot = claim  # type: ignore[method-assign]
        return self

    def __exit__(self, *exc: object) -> None:
        self._storage.__dict__.pop("claim_concurrency_slot", None)

    def _claim(self, real, concurrency_key, run_id, step_key, priority):  # noqa: ANN001, ANN202
        # Dagster has no public way to look at a signal it captured without consuming it and swapping the process's
        # signal handlers (``dg.raise_execution_interrupts``), nor a public hook on slot claims: both stay internal.
        from dagster._utils.interrupts import check_captured_interrupt

        self.run_id = run_id
        if check_captured_interrupt():
            self.interrupted = True
            raise dg.DagsterExecutionInterruptedError(
                f"stopped by a signal while {step_key} waited for a {concurrency_key} slot"
            )
        try:
            status = real(self._storage, concurrency_key, run_id, step_key, priority)
        except Exception as exc:  # noqa: BLE001 - only the race below is retried; anything else is raised again
            if not lost_the_row_race(exc):
                raise
            # Two runs on a fresh instance both created the pool's default limit row; the loser's insert failed, and
            # the row is there now: claim again.
            status = real(self._storage, concurrency_key, run_id, step_key, priority)
        if status.is_claimed:
            return status
        started = time.monotonic()
        if started >= self._next_sweep:
            self.freed += free_slots_of_dead_runs(self._instance, timeout_s=self._timeout_s, keep=run_id)
            self._next_sweep = time.monotonic() + SWEEP_EVERY_S
        while time.monotonic() - started < CLAIM_RETRY_S:
            if check_captured_interrupt():
                break  # noticed at once by the next claim, which Dagster makes without waiting
            time.sleep(0.05)
        self.waited_s += time.monotonic() - started
        return status.with_sleep_interval(0.0)
