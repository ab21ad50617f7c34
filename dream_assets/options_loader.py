"""Options as an entry point that knows the passes loads them: the global sections (dream_assets/options.py) and
every pass's own section, declared next to the pass (its ``SPEC.options``), each setting checked at once.

Loading is two steps. ``DreamOptions.resolve`` reads the sources (defaults, the deployment file, the agent's
``dream.toml``, the ``DREAM__*`` environment, overrides) and types the global options; what names no global option
(``passes.<pass>.<key>`` and the flat aliases of the passes' options, ``ConsolidationMaxClusterSize``) it keeps as
pending. The functions here take the registry's pass sections and do the second step: each pending setting is typed
by the section that has it, and one that no section has is an ``OptionsError`` with a did-you-mean, as an unknown
global name is. The cycle, ``dream run``, ``dream status``, the Dagster definitions and the other commands load
through here. The memory commands (``dream memory``, the agent interfaces) load with ``options.load_agent_options``
alone, importing no pass: a pass's settings are then typed when the pass reads its section (``options.section``).

This module sits above both options.py and the registry, so neither imports the other. Code and tests that build
options by hand from flat names of today use ``dream_options(ConsolidationMaxClusterSize=2, Interval=...)``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from dream_assets.options import DreamOptions, PassOptions, ResolvedOptions
from dream_assets.options import resolve_agent_options as _resolve_agent_options
from dream_assets.passes import registry
from dream_assets.profile import AgentProfile


def pass_sections() -> tuple[type[PassOptions], ...]:
    """Every registered pass's options section, in the cycle's order (a pass without options has none)."""
    return tuple(spec.options for spec in registry.PASSES if spec.options is not None)


def with_passes(options: DreamOptions) -> DreamOptions:
    """``options`` knowing every registered pass's section: its pending settings typed, an unknown one refused."""
    return options.with_passes(pass_sections())


def resolve_options(
    *,
    env: Mapping[str, str] | None = None,
    toml_path: str | Path | None = None,
    overrides: Mapping[str, Any] | None = None,
    profile_toml: str | Path | None = None,
) -> ResolvedOptions:
    """``DreamOptions.resolve`` with every registered pass's section: each value and where it came from."""
    return DreamOptions.resolve(
        env=env, toml_path=toml_path, overrides=overrides, profile_toml=profile_toml, passes=pass_sections()
    )


def load_options(
    *,
    env: Mapping[str, str] | None = None,
    toml_path: str | Path | None = None,
    overrides: Mapping[str, Any] | None = None,
    profile_toml: str | Path | None = None,
) -> DreamOptions:
    """``DreamOptions.load`` with every registered pass's section."""
    return resolve_options(env=env, toml_path=toml_path, overrides=overrides, profile_toml=profile_toml).options


def resolve_agent_options(profile: AgentProfile, env: Mapping[str, str] | None = None) -> ResolvedOptions:
    """One agent's options as every ``dream`` command but the memory commands loads them, and where each value came
    from (``dream status --options``)."""
    return _resolve_agent_options(profile, env, passes=pass_sections())


def load_agent_options(profile: AgentProfile, env: Mapping[str, str] | None = None) -> DreamOptions:
    """One agent's options (``resolve_agent_options``)."""
    return resolve_agent_options(profile, env).options


def dream_options(sections: Sequence[type[PassOptions]] | None = None, **flat: Any) -> DreamOptions:
    """Options from the defaults and ``flat``: global options by name, pass options by their flat alias of today
    (``ConsolidationMaxClusterSize=2``) or nested name, knowing every registered pass's section (or ``sections``)."""
    known = DreamOptions().with_passes(pass_sections() if sections is None else sections)
    return known.replace(**flat) if flat else known
