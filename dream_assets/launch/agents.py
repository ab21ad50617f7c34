"""The agents a Dagster instance knows: each is a dynamic partition of ``agents``, kept in the instance (not the
code). `dream remove` takes one out, so its schedule runs, gate requests and discovery warnings stop; its run
history stays in the instance."""

import os
from pathlib import Path

#: The instance the make targets use when DAGSTER_HOME is not set (relative to the working directory).
DEFAULT_HOME = ".dagster_home"


class InstanceMissing(Exception):
    """No Dagster instance to act on; the message names the folder looked at."""


def instance_home(env: dict[str, str] | None = None) -> Path:
    """DAGSTER_HOME, or the make targets' ``.dagster_home`` in the working directory when it holds an instance."""
    env = dict(os.environ) if env is None else env
    if env.get("DAGSTER_HOME"):
        return Path(env["DAGSTER_HOME"])
    home = Path(DEFAULT_HOME).resolve()
    if not (home / "dagster.yaml").is_file():
        raise InstanceMissing(
            f"DAGSTER_HOME is not set and {home} holds no instance (dagster.yaml): set DAGSTER_HOME to the instance "
            "the agent is registered in"
        )
    return home


def project_instance(env: dict[str, str] | None = None) -> Path | None:
    """The persistent instance a run started in a shell records into: DAGSTER_HOME, else the make targets'
    ``.dagster_home`` in the working directory when it holds an instance (so `make dev`'s UI shows the run); None
    when there is neither."""
    try:
        return instance_home(env)
    except InstanceMissing:
        return None


def remove_agent_partition(agent_id: str, home: Path) -> bool:
    """Delete the agent's partition from the instance in ``home``; False when the instance did not have it."""
    # imported here: this module's InstanceMissing is one of the CLI's refusals, which a base install without
    # Dagster must still be able to name
    from dream_assets.extras import require

    dg = require("dagster", "dagster", "removing an agent from a Dagster instance")
    from dream_assets.orchestration.partitions import AGENTS

    with dg.DagsterInstance.from_config(str(home)) as instance:
        if not instance.has_dynamic_partition(AGENTS, agent_id):
            return False
        instance.delete_dynamic_partition(AGENTS, agent_id)
        return True
