"""`make backfill`: materialize the day-partitioned assets of one agent over a range of days, on the project's
persistent instance, and say in one line what was materialized and where to see it.

The agent dimension of the partitions is dynamic: its keys live in the Dagster instance (the discovery sensor and
`dream run` add them), not in the code. A bare ``dagster asset materialize --partition-range 'demo|…'`` therefore
fails with DagsterInvalidSubsetError whenever the instance it uses (an ephemeral one without DAGSTER_HOME) has never
seen the agent. This command registers the agent in the DAGSTER_HOME instance first, then runs exactly that
``dagster asset materialize`` against it (its console logger at WARNING), so the runs show in `make dev`.

Usage: python -m dream_assets.launch.backfill --profile data/agents/demo --from 2026-11-01 --to 2026-11-05
       [--select log_warehouse,wisp_failure_history]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from collections.abc import Sequence
from datetime import date
from pathlib import Path

import dagster as dg

from dream_assets.defs.daily_partitions import history_assets
from dream_assets.orchestration.partitions import AGENTS
from dream_assets.profile import AgentProfile, ProfileError, holds_profile, validate_agent_id

#: Every day-partitioned asset: the warehouse day and the analyses over it.
DAILY_ASSETS = [a.key.to_user_string() for a in history_assets]


class BackfillError(Exception):
    """A request that cannot run; the message says which argument and what is accepted."""


def _day(name: str, value: str) -> date:
    try:
        return date.fromisoformat(value)
    except (TypeError, ValueError):
        raise BackfillError(f"{name} {value!r} is not a day: use YYYY-MM-DD, e.g. 2026-11-01") from None


def materialize_command(profile: AgentProfile, first: date, last: date, assets: Sequence[str]) -> list[str]:
    """The ``dagster asset materialize`` arguments (after ``python -m dagster``) for this agent and range."""
    agent = profile.agent_id
    return [
        "asset",
        "materialize",
        "-m",
        "dream_assets.definitions",
        "--select",
        ",".join(assets),
        "--partition-range",
        f"{agent}|{first.isoformat()}...{agent}|{last.isoformat()}",
    ]


def prepare(profile_arg: str, first_arg: str, last_arg: str, select: str) -> tuple[AgentProfile, list[str]]:
    """Check the request and return the profile and the materialize arguments; BackfillError names what is wrong."""
    if not os.environ.get("DAGSTER_HOME"):
        raise BackfillError(
            "DAGSTER_HOME is not set: the agent partition must be registered in a persistent "
            "instance (`make backfill` sets DAGSTER_HOME to .dagster_home)"
        )
    if not first_arg or not last_arg:
        raise BackfillError(
            "FROM and TO are required: make backfill FROM=2026-11-01 TO=2026-11-05 "
            "[PROFILE=data/agents/NAME] [ASSETS=log_warehouse,...]"
        )
    first, last = _day("FROM", first_arg), _day("TO", last_arg)
    if last < first:
        raise BackfillError(f"TO {last} is before FROM {first}")
    profile = AgentProfile(Path(profile_arg))
    try:
        validate_agent_id(profile.agent_id)
    except ProfileError as exc:
        raise BackfillError(f"PROFILE {profile_arg}: {exc}") from None
    if not holds_profile(profile.root):
        raise BackfillError(
            f"no agent profile at {profile.root}; create one with "
            f"`dream init --profile {profile_arg}` (add --demo for sample data)"
        )
    assets = [a.strip() for a in select.split(",") if a.strip()] or DAILY_ASSETS
    unknown = [a for a in assets if a not in DAILY_ASSETS]
    if unknown:
        raise BackfillError(f"ASSETS {','.join(unknown)}: not day-partitioned; use any of {','.join(DAILY_ASSETS)}")
    return profile, materialize_command(profile, first, last, assets)


def register_agent(agent: str) -> bool:
    """Add the agent's partition to the DAGSTER_HOME instance; True when it was not there yet."""
    Path(os.environ["DAGSTER_HOME"]).mkdir(parents=True, exist_ok=True)
    with dg.DagsterInstance.get() as instance:
        if instance.has_dynamic_partition(AGENTS, agent):
            return False
        instance.add_dynamic_partitions(AGENTS, [agent])
        return True


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], allow_abbrev=False)
    parser.add_argument("--profile", required=True, help="the agent's profile folder")
    parser.add_argument("--from", dest="first", default="", help="first day, YYYY-MM-DD")
    parser.add_argument("--to", dest="last", default="", help="last day, YYYY-MM-DD (inclusive)")
    parser.add_argument("--select", default="", help=f"comma-separated assets (default: {','.join(DAILY_ASSETS)})")
    args = parser.parse_args(argv)
    try:
        profile, command = prepare(args.profile, args.first, args.last, args.select)
    except BackfillError as exc:
        print(f"backfill: {exc}", file=sys.stderr)
        return 2
    if register_agent(profile.agent_id):
        print(
            f"backfill: registered agent {profile.agent_id!r} in {os.environ['DAGSTER_HOME']}",
            file=sys.stderr,
        )
    # The definitions find the agent's profile under the profile root.
    env = {**os.environ, "DREAM__ProfileRoot": str(profile.root.parent)}
    print(f"backfill: dagster {' '.join(command)}", file=sys.stderr)
    quiet = json.dumps({"loggers": {"console": {"config": {"log_level": "WARNING"}}}})  # no DEBUG line per event
    done = subprocess.run(
        [sys.executable, "-m", "dagster", *command, "--config-json", quiet],
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )
    home = Path(os.environ["DAGSTER_HOME"])
    if done.returncode != 0:
        log = home / "backfill.log"
        log.write_text(done.stdout + done.stderr, encoding="utf-8")
        errors = [line.strip() for line in (done.stderr or done.stdout).splitlines() if line.strip()]
        print(f"backfill FAILED: {errors[-1] if errors else 'dagster exited ' + str(done.returncode)}", file=sys.stderr)
        print(f"backfill: the whole output is in {log}", file=sys.stderr)
        return 1
    print(summary(profile, first_last(command), assets_of(command), home))
    return 0


def first_last(command: Sequence[str]) -> tuple[str, str]:
    """The first and last partition keys of a materialize command's range."""
    start, end = command[command.index("--partition-range") + 1].split("...")
    return start, end


def assets_of(command: Sequence[str]) -> list[str]:
    return command[command.index("--select") + 1].split(",")


def summary(profile: AgentProfile, keys: tuple[str, str], assets: Sequence[str], home: Path) -> str:
    """One line: what the backfill materialized, in which run, and where to see it."""
    first, last = (k.split("|", 1)[1] for k in keys)
    with dg.DagsterInstance.from_config(str(home)) as instance:
        records = instance.get_run_records(limit=1)
        run_id = records[0].dagster_run.run_id if records else "?"
        done = {
            a: sum(
                1
                for key in instance.get_materialized_partitions(dg.AssetKey(a))
                if key.startswith(f"{profile.agent_id}|") and first <= key.split("|", 1)[1] <= last
            )
            for a in assets
        }
    days = (date.fromisoformat(last) - date.fromisoformat(first)).days + 1
    counts = ", ".join(f"{a} {n}/{days} day(s)" for a, n in done.items())
    return (
        f"backfill: materialized agent {profile.agent_id} {first}..{last}: {counts}; run {run_id} in {home} "
        "(see it with `make dev`: Runs, or the assets' Partitions tab)"
    )


if __name__ == "__main__":
    sys.exit(main())
