"""The deployment resource: where agent profiles live, how options are read, and the clock of a run."""

import os
import socket
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import dagster as dg
from pydantic import PrivateAttr

from dream_assets.enrolment import DreamPlan, dream_plan
from dream_assets.model import parse_ts
from dream_assets.options import DreamOptions
from dream_assets.options_loader import load_options
from dream_assets.profile import AgentProfile, discover_profiles, holds_profile, validate_agent_id

NOW_TAG = "dream/now"
PARTITION_TAG = "dagster/partition"
#: The job of one dream cycle (defs/passes.py): its runs mark the agent's cycle in progress.
CYCLE_JOB = "dream_cycle"


class AgentUnavailable(Exception):
    """One agent cannot be evaluated (bad id, missing profile folder, unusable dream.toml, unreadable store).

    The message names the agent and the file; schedules and sensors skip that agent with it and go on."""


class DreamDeployment(dg.ConfigurableResource):
    """Agent profiles live under ``profile_root`` (default: ``DREAM__ProfileRoot`` or ``data/agents``), one folder per
    agent; options come from ``options_file`` (or ``DREAM_CONFIG``), then the agent's own ``dream.toml``, then
    ``DREAM__*`` environment variables. ``now`` (ISO-8601) fixes the clock of sensors and schedules that have no
    scheduled time (tests, replays); empty means the wall clock."""

    profile_root: str = ""
    options_file: str = ""
    now: str = ""
    _heartbeat: Any = PrivateAttr(default=None)
    _cycle_hold: Any = PrivateAttr(default=None)

    def setup_for_execution(self, context: dg.InitResourceContext) -> None:
        """In a run of the dream cycle: mark the agent's cycle in progress until the run's last step is done
        (``store.cycle_marker``: `dream undo` refuses meanwhile, between passes too). In a run on a persistent
        instance: keep the run's liveness tags fresh while it runs (run_liveness.py), so the pool slots of a run whose
        process dies come back."""
        run, instance = context.dagster_run, context.instance
        if run is None:
            return
        self._cycle_hold = self._hold_cycle(run)
        if instance is None or instance.is_ephemeral:
            return
        from dream_assets.orchestration.run_liveness import RunHeartbeat, ensure_pool_rows, heartbeat_interval

        ensure_pool_rows(instance)
        self._heartbeat = RunHeartbeat(instance, run.run_id, heartbeat_interval(self.run_timeout_s())).start()

    def _hold_cycle(self, run: dg.DagsterRun) -> Any:
        agent = run.tags.get(PARTITION_TAG)
        if run.job_name != CYCLE_JOB or not agent:
            return None
        try:
            profile = self.run_profile(agent)
            stale_after_s = self.options(profile).RunTimeout.total_seconds()
        except Exception:  # noqa: BLE001 - an unusable agent fails the run's first step, naming why
            return None
        from dream_assets.store.cycle_marker import CycleHold

        return CycleHold(profile, run.run_id, stale_after_s=stale_after_s).start()

    def teardown_after_execution(self, context: dg.InitResourceContext) -> None:
        if self._heartbeat is not None:
            self._heartbeat.stop()
            self._heartbeat = None
        if self._cycle_hold is not None:
            # The end of the cycle's steps in this process: the next process loads the recall index it kept current
            # instead of rebuilding it from every row (store/index_file.py).
            from dream_assets.recall_index import persist_recall_indexes

            persist_recall_indexes()
            self._cycle_hold.stop()
            self._cycle_hold = None

    def run_timeout_s(self) -> float:
        """``RunTimeout`` in seconds (its default when the deployment's options cannot be read)."""
        try:
            return self.base_options().RunTimeout.total_seconds()
        except Exception:  # noqa: BLE001 - a bad option is reported where options are used; liveness keeps going
            return DreamOptions().RunTimeout.total_seconds()

    def root(self) -> Path:
        if self.profile_root:
            return Path(self.profile_root)
        return Path(self.base_options().ProfileRoot)

    def clock(self) -> datetime:
        return parse_ts(self.now) if self.now else datetime.now(UTC)

    def base_options(self) -> DreamOptions:
        return load_options(env=os.environ, toml_path=self.options_file or None)

    def profile(self, agent_id: str) -> AgentProfile:
        return AgentProfile(self.root() / validate_agent_id(agent_id))

    def run_profile(self, agent_id: str) -> AgentProfile:
        """The profile a run acts on, which must exist on the machine running it: a run that cannot see it fails at
        once, naming the path and the machine, instead of creating an empty profile there (runs on other machines
        need the profile root at the same path: docs/deployment.md)."""
        profile = self.profile(agent_id)
        if not holds_profile(profile.root):
            raise dg.Failure(
                description=(
                    f"agent {agent_id}: no profile at {profile.root} on {socket.gethostname()}; every machine that "
                    f"runs passes must see the profile root {self.root()} at the same path (a shared filesystem "
                    "with working POSIX locks, or one profile root per worker pool — docs/deployment.md); set it "
                    "with DREAM__ProfileRoot or the deployment resource's profile_root"
                ),
                allow_retries=False,
            )
        return profile

    def options(self, profile: AgentProfile) -> DreamOptions:
        return load_options(env=os.environ, toml_path=self.options_file or None, profile_toml=profile.options_path)

    def agent(self, agent_id: str) -> tuple[AgentProfile, DreamOptions]:
        """The profile and options of one agent, or AgentUnavailable naming the agent and the file at fault.

        Options that fail for every agent (the deployment's options file, a ``DREAM__*`` variable) are a deployment
        configuration error, not one bad agent: that error is raised as it is."""
        try:
            profile = self.profile(agent_id)
        except ValueError as exc:
            raise AgentUnavailable(f"agent {agent_id!r} skipped — {exc}") from exc
        if not profile.root.is_dir():
            raise AgentUnavailable(
                f"agent {agent_id} skipped — its profile folder {profile.root} is missing; {removal_hint(profile.root)}"
            )
        try:
            return profile, self.options(profile)
        except Exception as exc:  # noqa: BLE001 - any unusable dream.toml skips this agent, named, never the others
            self.base_options()  # raises when the problem is not this agent's own file
            raise AgentUnavailable(f"agent {agent_id} skipped — {describe_problem(exc, profile.options_path)}") from exc

    def agent_ids(self) -> list[str]:
        return [p.agent_id for p in discover_profiles(self.root())]

    def discover_agents(self) -> tuple[list[str], list[str]]:
        """The agent ids dreamed for under the root (set up by `dream init` or named in DREAM_AGENTS:
        dream_assets/enrolment.py), and the folders skipped, each with the reason: a name that is not a valid agent
        id, or a folder that cannot be examined. One bad folder never hides the others."""
        plan = self.dream_plan()
        return plan.agents, plan.problems

    def dream_plan(self) -> DreamPlan:
        return dream_plan(self.root())


def removal_hint(folder: Path) -> str:
    """How an operator stops the warnings about an agent whose folder is gone: remove its partition."""
    return f"restore the folder, or stop dreaming for it with `dream remove --profile {folder}`"


def describe_problem(exc: BaseException, path: Path) -> str:
    """The exception's message, naming ``path`` when the message does not already."""
    text = str(exc) if isinstance(exc, ValueError) and str(exc) else f"{type(exc).__name__}: {exc}"
    return text if str(path) in text else f"{path}: {text}"


def run_now(context: dg.AssetExecutionContext | dg.OpExecutionContext) -> datetime:
    """The instant a run acts at: the run's ``dream/now`` tag when set (replays, tests), else the wall clock."""
    tag = context.run.tags.get(NOW_TAG) if context.run else None
    return parse_ts(tag) if tag else datetime.now(UTC)
