"""The deployment resource: where agent profiles live, how options are read, and the clock of a run."""


import os
from datetime import UTC, datetime
from pathlib import Path

import dagster as dg

from dream_assets.model import parse_ts
from dream_assets.options import DreamOptions
from dream_assets.profile import AgentProfile, discover_profiles, validate_agent_id

NOW_TAG = "dream/now"


class DreamDeployment(dg.ConfigurableResource):
    """Agent profiles live under ``profile_root`` (default: ``DREAM__ProfileRoot`` or ``data/agents``), one folder per
    agent; options come from ``options_file`` (or ``DREAM_CONFIG``), then the agent's own ``dream.toml``, then
    ``DREAM__*`` environment variables."""

    profile_root: str = ""
    options_file: str = ""

    def root(self) -> Path:
        if self.profile_root:
            return Path(self.profile_root)
        return Path(self.base_options().ProfileRoot)

    def base_options(self) -> DreamOptions:
        return DreamOptions.load(env=os.environ, toml_path=self.options_file or None)

    def profile(self, agent_id: str) -> AgentProfile:
        return AgentProfile(self.root() / validate_agent_id(agent_id))

    def options(self, profile: AgentProfile) -> DreamOptions:
        return DreamOptions.load(env=os.environ, toml_path=self.options_file or None, profile_toml=profile.options_path)

    def agent_ids(self) -> list[str]:
        return [p.agent_id for p in discover_profiles(self.root())]


def run_now(context: dg.AssetExecutionContext | dg.OpExecutionContext) -> datetime:
    """The instant a run acts at: the run's ``dream/now`` tag when set (replays, tests), else the wall clock."""
    tag = context.run.tags.get(NOW_TAG) if context.run else None
    return parse_ts(tag) if tag else datetime.now(UTC)
