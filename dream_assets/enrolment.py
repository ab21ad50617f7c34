"""Which agents the scheduler dreams for: a folder under the profile root is dreamed for only when it was set up for
it, by `dream init` (which leaves ``dream-agent.json`` in it) or by being named in ``DREAM_AGENTS``
(comma-separated agent ids). A folder that merely holds agent data — made by hand, by an agent writing its store, or
by `dream serve --create` — is never run by `make dev`'s schedule or start-up cycle; `dream run` still runs it
when asked by name.

``dream_plan`` is the one function that decides; the discovery sensor registers what it returns, and
``startup_lines`` says it when `make dev` starts (python -m dream_assets.enrolment)."""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path

from dream_assets.file_safety import atomic_write
from dream_assets.profile import AgentProfile, holds_profile, validate_agent_id

#: The file `dream init` leaves in a profile: the agent is set up for dreaming.
MARKER = "dream-agent.json"
#: Agent ids dreamed for although `dream init` did not set them up (comma-separated).
AGENTS_ENV = "DREAM_AGENTS"


def enrol(profile: AgentProfile, now: datetime, *, by: str = "dream init") -> bool:
    """Mark the profile as set up for dreaming; False when it already was (the marker is left as it is)."""
    path = profile.root / MARKER
    if path.exists():
        return False
    profile.root.mkdir(parents=True, exist_ok=True)
    record = {"agent": profile.agent_id, "set_up_by": by, "at": now.astimezone(UTC).isoformat()}
    atomic_write(path, json.dumps(record, indent=2) + "\n")
    return True


def is_enrolled(folder: Path) -> bool:
    return (folder / MARKER).is_file()


def named_agents(env: Mapping[str, str] | None = None) -> set[str]:
    """The agent ids ``DREAM_AGENTS`` names."""
    value = (os.environ if env is None else env).get(AGENTS_ENV, "")
    return {name.strip() for name in value.split(",") if name.strip()}


@dataclass
class DreamPlan:
    """The agents dreamed for under one profile root, and the folders left out, each with why."""

    root: Path
    agents: list[str] = field(default_factory=list)  # set up by dream init, or named in DREAM_AGENTS
    left_out: list[str] = field(default_factory=list)  # ids of folders holding agent data, never set up
    problems: list[str] = field(default_factory=list)  # folders that cannot be agents (a bad name, unreadable)
    named_missing: list[str] = field(default_factory=list)  # named in DREAM_AGENTS, no folder holds its data


def dream_plan(root: Path, named: set[str] | None = None) -> DreamPlan:
    """Which folders under ``root`` are dreamed for (``named``: ``DREAM_AGENTS``'s ids unless given). One bad folder
    never hides the others."""
    named = named_agents() if named is None else named
    plan = DreamPlan(root)
    if root.is_dir():
        for child in sorted(root.iterdir()):
            try:
                if not holds_profile(child) and not is_enrolled(child):
                    continue
                validate_agent_id(child.name)
            except ValueError as exc:
                plan.problems.append(f"folder {child} skipped — {exc}")
                continue
            except OSError as exc:
                plan.problems.append(f"folder {child} skipped — it cannot be examined: {exc}")
                continue
            (plan.agents if child.name in named or is_enrolled(child) else plan.left_out).append(child.name)
    plan.named_missing = sorted(named - set(plan.agents))
    return plan


def left_out_note(plan: DreamPlan) -> str:
    """What the plan leaves out, as one sentence ('' when nothing)."""
    if not plan.left_out:
        return ""
    folders = ", ".join(str(plan.root / a) for a in plan.left_out)
    return (
        f"not dreamed for (agent data, but not set up with `dream init`): {folders}; "
        f"`dream init --profile FOLDER --if-missing` or {AGENTS_ENV}=id,id adds one"
    )


def startup_lines(
    plan: DreamPlan, *, enabled: bool, initial_delay: timedelta, interval: timedelta, now: datetime
) -> list[str]:
    """What `make dev` says before it starts the daemon: which agents it dreams for and when the first cycle fires
    (the start-up sensor: ``InitialDelay`` after the daemon starts), and which folders it leaves alone."""
    lines: list[str] = []
    if not plan.agents:
        lines.append(
            f"no agent to dream for under {plan.root}: `dream init --profile {plan.root}/NAME` sets one up "
            f"(or name it in {AGENTS_ENV})"
        )
    else:
        lines.append(f"dreaming for {len(plan.agents)} agent(s) under {plan.root}: {', '.join(plan.agents)}")
        if enabled:
            first = (now + initial_delay).astimezone(UTC)
            lines.append(
                f"first cycle at about {first:%Y-%m-%d %H:%M} UTC (InitialDelay {_duration(initial_delay)} after the "
                f"daemon starts), then every {_duration(interval)} (Interval)"
            )
        else:
            lines.append("no cycle fires: dreaming is disabled (Enabled = false)")
    if plan.left_out:
        lines.append(left_out_note(plan))
    for name in plan.named_missing:
        lines.append(f"{AGENTS_ENV} names {name!r}, but {plan.root / name} holds no agent data: not dreamed for")
    lines.extend(plan.problems)
    return lines


def _duration(value: timedelta) -> str:
    seconds = int(value.total_seconds())
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds and seconds % size == 0:
            return f"{seconds // size}{unit}"
    return f"{seconds}s"


def main() -> int:
    """`make dev`'s start-up lines for the configured profile root (DREAM__ProfileRoot) and options."""
    from dream_assets.options import OptionsError
    from dream_assets.options_loader import load_options

    try:
        options = load_options(env=os.environ)
    except OptionsError as exc:
        print(f"configuration error: {exc}", file=sys.stderr)
        return 2
    plan = dream_plan(Path(options.ProfileRoot))
    for line in startup_lines(
        plan,
        enabled=options.Enabled,
        initial_delay=options.InitialDelay,
        interval=options.Interval,
        now=datetime.now(UTC),
    ):
        print(line)
    return 0


if __name__ == "__main__":
    sys.exit(main())
