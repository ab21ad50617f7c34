"""Fleet benchmark: many small agents on one Dagster instance. Prints one JSON object per line:
{"name", "n", "value", "unit"}.

    .venv/bin/python benchmarks/fleet.py          # N = 100 and 1,000
    .venv/bin/python benchmarks/fleet.py --quick  # N = 100 only, 10 cycles timed, no daemon run

The instance is PostgreSQL-backed (deploy/dagster-postgres.yaml) when a server can be had: the DAGSTER_PG_*
variables of an existing one, else a throwaway server from Debian's ``postgresql`` package on 127.0.0.1; otherwise
Dagster's embedded SQLite storage. ``fleet.postgres`` says which (1 or 0).

Per N:
- ``fleet.discovery_tick_s``: the discovery sensor's first tick (every agent new) and ``fleet.discovery_idle_tick_s``
  (nothing new);
- ``fleet.schedule_tick_s``: one tick of the cycle schedule (a run request per agent);
- ``fleet.gate_tick_s``: the slowest gate sensor's first tick, every agent unseen;
- a full cycle for every agent in 2 worker processes: the first 50 through the dream_cycle job in-process, as a
  run worker executes it (``fleet.cycles_per_hour``, its n is the number of cycles timed), the rest through the
  library (the same passes, without Dagster's event log) to keep the run short; then the ticks that decide every
  agent again (the cycle moved each ledger; a tick decides what its time budget allows and leaves the rest):
  ``fleet.gate_after_cycle_tick_s`` (the slowest of them), ``fleet.gate_after_cycle_ticks`` (how many the slowest
  sensor needed) and ``fleet.gate_after_cycle_runs_launched``; then one more tick, nothing changed:
  ``fleet.gate_idle_tick_s`` and ``fleet.idle_runs_launched`` (target 0).
Targets at 1,000: each tick <= 10 s, idle_runs_launched = 0.

Daemon (not with --quick; alone with --daemon-only), all on the same instance: ``fleet.inprocess_cycle_s`` (the demo
agent's cycle in-process, in a process that has Dagster loaded), ``fleet.dream_run_s`` (``dream run`` on an
identical agent as a fresh process, start-up included, as ``make run`` runs it) and ``fleet.daemon_cycle_s`` (the
same cycle on an identical demo agent launched by ``dagster-daemon`` through the queued run coordinator and the
default run launcher, start to end as the UI shows it); ``fleet.daemon_ratio`` is daemon over in-process (target
<= 2).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import dagster as dg  # noqa: E402

from dream_assets.demo import build_demo_profile  # noqa: E402
from dream_assets.profile import AgentProfile  # noqa: E402
from dream_assets.store.connection import close_all  # noqa: E402
from dream_assets_tests.daemon import running_daemon  # noqa: E402
from dream_assets_tests.workers import WorkerDied, map_in_workers, spawn_pool  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
PG_VARS = ("DAGSTER_PG_HOST", "DAGSTER_PG_PORT", "DAGSTER_PG_USERNAME", "DAGSTER_PG_PASSWORD", "DAGSTER_PG_DB")


def emit(name: str, n: int, value: float, unit: str) -> None:
    print(json.dumps({"name": name, "n": n, "value": round(value, 3), "unit": unit}), flush=True)


def note(text: str) -> None:
    print(f"fleet: {text}", file=sys.stderr, flush=True)


@contextlib.contextmanager
def fleet_instance(workdir: Path, tag: str) -> Iterator[tuple[Path, bool]]:
    """A DAGSTER_HOME folder and whether it is Postgres-backed; the environment is set for it while in use."""
    home = workdir / f"home-{tag}"
    home.mkdir()
    saved = {k: os.environ.get(k) for k in (*PG_VARS, "DAGSTER_HOME")}
    os.environ["DAGSTER_HOME"] = str(home)
    try:
        if all(os.environ.get(k) is not None for k in PG_VARS[:3]) and os.environ.get("DAGSTER_PG_DB"):
            shutil.copy(ROOT / "deploy" / "dagster-postgres.yaml", home / "dagster.yaml")
            yield home, True
            return
        try:
            from dream_assets_tests.postgres_server import PostgresUnavailable, start_postgres
        except ImportError:  # pragma: no cover - the tests folder is part of the checkout
            PostgresUnavailable, start_postgres = RuntimeError, None
        if start_postgres is not None:
            try:
                server_cm = start_postgres()
                server = server_cm.__enter__()
            except PostgresUnavailable as exc:
                note(f"no PostgreSQL ({exc}); using Dagster's embedded SQLite storage")
            else:
                try:
                    os.environ.update(server.env(server.create_database(f"fleet_{tag}")))
                    shutil.copy(ROOT / "deploy" / "dagster-postgres.yaml", home / "dagster.yaml")
                    yield home, True
                finally:
                    server_cm.__exit__(None, None, None)
                return
        shutil.copy(ROOT / "deploy" / "dagster.yaml", home / "dagster.yaml")
        yield home, False
    finally:
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


def make_agents(root: Path, n: int, now: datetime) -> list[str]:
    """N small agents: one built by the demo generator, copied (a profile's files hold no agent id)."""
    template = root.parent / f"template-{n}"
    build_demo_profile(AgentProfile(template), now, n_memories=6, seed=1, with_logs=False)
    close_all()  # the template's store is closed (and checkpointed) before its files are copied
    root.mkdir(parents=True)
    agents = []
    for i in range(n):
        agent = f"agent-{i:04d}"
        shutil.copytree(template, root / agent)
        agents.append(agent)
    return agents


def _definitions(root: Path, now: datetime):
    from dream_assets.definitions import build_definitions
    from dream_assets.orchestration.deployment import DreamDeployment

    deployment = DreamDeployment(profile_root=str(root), now=now.isoformat())
    return build_definitions(deployment=deployment), deployment


def _tick(sensor, instance, deployment, cursor=None):  # one evaluation, as the daemon runs it
    started = time.perf_counter()
    with dg.build_sensor_context(instance=instance, cursor=cursor, resources={"deployment": deployment}) as ctx:
        result = sensor(ctx)
    elapsed = time.perf_counter() - started
    requests = list(getattr(result, "run_requests", None) or [])
    if isinstance(result, dg.RunRequest):
        requests = [result]
    elif isinstance(result, list):
        requests = [r for r in result if isinstance(r, dg.RunRequest)]
    return elapsed, requests, getattr(result, "cursor", None), result


#: Agents whose cycle runs through the dream_cycle job (the rest run the same passes through the library).
DAGSTER_CYCLES = 50
QUICK_DAGSTER_CYCLES = 10
QUIET = {"loggers": {"console": {"config": {"log_level": "WARNING"}}}}


def _cycle_worker(args: tuple[str, str, str, list[str]]) -> int:
    """Run the dream_cycle job in-process for each agent of this worker's share (a run worker's work)."""
    home, root, now_iso, agents = args
    os.environ["DAGSTER_HOME"] = home
    defs, _ = _definitions(Path(root), datetime.fromisoformat(now_iso))
    job = defs.resolve_job_def("dream_cycle")
    failed = 0
    with dg.DagsterInstance.get() as instance:
        for agent in agents:
            result = job.execute_in_process(
                instance=instance, partition_key=agent, raise_on_error=False, run_config=QUIET
            )
            failed += not result.success
    return failed


def _library_worker(args: tuple[str, str, list[str]]) -> int:
    """The same passes through the library (dream_assets.cycle.run_cycle), for agents beyond DAGSTER_CYCLES."""
    from dream_assets.cycle import run_cycle
    from dream_assets.options_loader import dream_options

    root, now_iso, agents = args
    failed = 0
    for agent in agents:
        reports = run_cycle(AgentProfile(Path(root) / agent), dream_options(), datetime.fromisoformat(now_iso))
        failed += any(r.status == "failed" for r in reports)
    return failed


def fleet(n: int, workdir: Path, workers: int, dagster_cycles: int = DAGSTER_CYCLES) -> None:
    now = datetime.now(UTC).replace(microsecond=0)
    root = workdir / f"agents-{n}"
    started = time.perf_counter()
    agents = make_agents(root, n, now)
    note(f"{n} agents created in {time.perf_counter() - started:.1f} s")
    with fleet_instance(workdir, str(n)) as (home, postgres):
        emit("fleet.postgres", n, 1 if postgres else 0, "bool")
        defs, deployment = _definitions(root, now)
        with dg.DagsterInstance.get() as instance:
            discovery = defs.resolve_sensor_def("agent_discovery_sensor")
            elapsed, _, _, result = _tick(discovery, instance, deployment)
            for request in getattr(result, "dynamic_partitions_requests", None) or []:
                instance.add_dynamic_partitions(request.partitions_def_name, list(request.partition_keys))
            emit("fleet.discovery_tick_s", n, elapsed, "s")
            registered = set(instance.get_dynamic_partitions("agents"))
            if registered != set(agents):
                note(f"discovery registered {len(registered)} of {n} agents")
            elapsed, _, _, _ = _tick(discovery, instance, deployment)
            emit("fleet.discovery_idle_tick_s", n, elapsed, "s")

            schedule = defs.resolve_schedule_def("dream_cycle_schedule")
            started = time.perf_counter()
            with dg.build_schedule_context(
                instance=instance, scheduled_execution_time=now, resources={"deployment": deployment}
            ) as ctx:
                result = schedule(ctx)
            emit("fleet.schedule_tick_s", n, time.perf_counter() - started, "s")
            scheduled = len(result) if isinstance(result, list) else 0
            if scheduled != n:
                note(f"the schedule requested {scheduled} cycle(s) for {n} agents")

            gates = [s for s in defs.sensors if s.name.endswith("_change_gate")]
            cursors: dict[str, str | None] = {}
            slowest = 0.0
            for sensor in gates:
                elapsed, _, cursor, _ = _tick(sensor, instance, deployment)
                cursors[sensor.name] = cursor
                slowest = max(slowest, elapsed)
            emit("fleet.gate_tick_s", n, slowest, "s")

        # Cycles through Dagster for the first DAGSTER_CYCLES agents (the throughput figure), and the same passes
        # through the library for the rest, so that every agent has had its cycle before the idle ticks.
        through_dagster, rest = agents[:dagster_cycles], agents[dagster_cycles:]
        shares = [through_dagster[i::workers] for i in range(workers)]
        started = time.perf_counter()
        with spawn_pool(workers) as pool:
            jobs = [(str(home), str(root), now.isoformat(), s) for s in shares]
            failed = sum(map_in_workers(pool, _cycle_worker, jobs))
            elapsed = time.perf_counter() - started
            if rest:
                library = [(str(root), now.isoformat(), rest[i::workers]) for i in range(workers)]
                failed += sum(map_in_workers(pool, _library_worker, library))
        if failed:
            note(f"{failed} of {n} cycles failed")
        emit(
            "fleet.cycles_per_hour",
            len(through_dagster),
            len(through_dagster) / elapsed * 3600,
            f"cycles/h, {workers} workers",
        )

        with dg.DagsterInstance.get() as instance:
            # The ticks after the cycle decide every agent again (the cycle moved each ledger), a time budget's worth
            # per tick; once every agent is decided, a tick finds nothing changed: the steady state of an idle fleet.
            slowest_settle, settle_ticks, launched_settle = 0.0, 0, 0
            for sensor in gates:
                ticks = 0
                while ticks < 50:
                    ticks += 1
                    elapsed, requests, cursor, result = _tick(sensor, instance, deployment, cursors.get(sensor.name))
                    cursors[sensor.name] = cursor
                    slowest_settle = max(slowest_settle, elapsed)
                    launched_settle += len(requests)
                    skip = getattr(getattr(result, "skip_reason", None), "skip_message", "") or ""
                    if "left for the next tick" not in skip:
                        break
                settle_ticks = max(settle_ticks, ticks)
            emit("fleet.gate_after_cycle_tick_s", n, slowest_settle, "s")
            emit("fleet.gate_after_cycle_ticks", n, settle_ticks, "ticks")
            emit("fleet.gate_after_cycle_runs_launched", n, launched_settle, "runs")
            slowest, launched = 0.0, 0
            for sensor in gates:
                elapsed, requests, cursor, _ = _tick(sensor, instance, deployment, cursors.get(sensor.name))
                slowest = max(slowest, elapsed)
                launched += len(requests)
            emit("fleet.gate_idle_tick_s", n, slowest, "s")
            emit("fleet.idle_runs_launched", n, launched, "runs")


def daemon_vs_inprocess(workdir: Path, timeout: float = 600) -> None:
    from dream_assets.launch.cycle import run_cycle_in_dagster

    now = datetime.now(UTC).replace(microsecond=0)
    inproc_root, fresh_root, daemon_root = workdir / "inproc", workdir / "fresh", workdir / "daemon"
    for root in (inproc_root, fresh_root, daemon_root):
        build_demo_profile(AgentProfile(root / "demo"), now)
    close_all()

    with fleet_instance(workdir, "daemon") as (home, postgres):
        # In-process, on the same instance the daemon uses (as `make run` uses the persistent instance): the cycle in
        # a process that has Dagster loaded, and `dream run` as a fresh process, start-up included.
        started = time.perf_counter()
        run = run_cycle_in_dagster(AgentProfile(inproc_root / "demo"), now=now.isoformat())
        inprocess = time.perf_counter() - started
        if not run.ok:
            note(f"the in-process cycle did not succeed: {run.failed or run.step_errors}")
        emit("fleet.inprocess_cycle_s", 1, inprocess, "s")
        started = time.perf_counter()
        fresh = subprocess.run(
            [str(Path(sys.executable).parent / "dream"), "run", "--profile", str(fresh_root / "demo")],
            cwd=ROOT,
            capture_output=True,
            text=True,
        )
        if fresh.returncode != 0:
            note(f"dream run exited {fresh.returncode}: {fresh.stderr[-500:]}")
        emit("fleet.dream_run_s", 1, time.perf_counter() - started, "s")
        env = {
            **os.environ,
            "DREAM__ProfileRoot": str(daemon_root),
            "DREAM__InitialDelay": "0",
        }
        with running_daemon(env, workdir / "daemon.log"):
            deadline = time.monotonic() + timeout
            with dg.DagsterInstance.get() as instance:
                while time.monotonic() < deadline:
                    # the whole cycle the start-up sensor launched (gate sensors may launch single passes too)
                    started_by = {"dagster/sensor_name": "dream_startup_sensor"}
                    records = instance.get_run_records(filters=dg.RunsFilter(job_name="dream_cycle", tags=started_by))
                    finished = [r for r in records if r.dagster_run.is_finished]
                    if finished:
                        record = finished[0]
                        if record.dagster_run.status != dg.DagsterRunStatus.SUCCESS:
                            note(f"the daemon-launched cycle ended {record.dagster_run.status.value}")
                        duration = record.end_time - record.start_time
                        queued = record.end_time - record.create_timestamp.timestamp()
                        emit("fleet.daemon_cycle_s", 1, duration, "s")
                        emit("fleet.daemon_queue_to_end_s", 1, queued, "s")
                        emit("fleet.daemon_ratio", 1, duration / inprocess, "x (against the in-process cycle)")
                        return
                    time.sleep(1)
                note(f"no daemon-launched cycle finished within {timeout:.0f} s")


def main() -> None:
    parser = argparse.ArgumentParser(description="fleet benchmark")
    parser.add_argument("--quick", action="store_true", help="N = 100 only, no daemon run")
    parser.add_argument("--n", type=int, default=1000, help="the larger fleet (default 1000)")
    parser.add_argument("--workers", type=int, default=2, help="worker processes for the full cycle")
    parser.add_argument("--daemon-only", action="store_true", help="only the daemon against in-process cycle")
    args = parser.parse_args()
    sizes = [] if args.daemon_only else [100] if args.quick else sorted({100, args.n})
    with tempfile.TemporaryDirectory(prefix="dream-fleet-") as tmp:
        workdir = Path(tmp)
        for n in sizes:
            try:
                fleet(n, workdir, args.workers, dagster_cycles=QUICK_DAGSTER_CYCLES if args.quick else DAGSTER_CYCLES)
            except WorkerDied as exc:
                sys.exit(f"fleet benchmark stopped at N = {n}: {exc}")
        if args.daemon_only or not args.quick:
            daemon_vs_inprocess(workdir)


if __name__ == "__main__":
    main()
