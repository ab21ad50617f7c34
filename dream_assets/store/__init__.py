"""Persistence of one agent profile: the DuckDB store (memories, skills, change log), logs, ledger, warehouse."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path

from dream_assets.options import DreamOptions, load_agent_options
from dream_assets.profile import AgentProfile, as_profile


@dataclass
class DreamStore:
    """The memory store, skill catalog and change log of one profile, sharing one connection helper."""

    profile: AgentProfile
    options: DreamOptions
    #: Another database file than the profile's store (a review run's private copy, passes/review.py): opened with
    #: a connection of its own, outside the process's shared connections, and locked beside that file.
    path: Path | None = None

    def __post_init__(self) -> None:
        from dream_assets.store.changes import ChangeLog
        from dream_assets.store.connection import StoreConnection, store_connection
        from dream_assets.store.memory import MemoryStore
        from dream_assets.store.skills import SkillStore

        self.profile.root.mkdir(parents=True, exist_ok=True)
        timeout_s = self.options.StoreLockTimeout.total_seconds()
        if self.path is not None:
            self.connection = StoreConnection(
                self.path, self.path.with_name(self.path.name + ".lock"), timeout_s=timeout_s, linger_s=60.0
            )
        else:
            self.connection = store_connection(
                self.profile.store_path,
                self.profile.store_lock_path,
                timeout_s=timeout_s,
                snapshots_dir=self.profile.snapshots_dir,
            )
        self.memories = MemoryStore(self.connection, self.options)
        self.skills = SkillStore(self.connection)
        self.changes = ChangeLog(
            self.connection,
            self.memories,
            self.skills,
            profile=self.profile,
            cycle_stale_after_s=self.options.RunTimeout.total_seconds(),
            archive_retention=_archive_retention(self.options),
        )

    def transaction(self):
        """One all-or-nothing unit across the memories, skills and change log (nested store writes join it): a change
        and its change-log row are written together or not at all."""
        return self.connection.transaction()

    def close(self) -> None:
        self.connection.close()


def open_store(profile: AgentProfile | str | Path, options: DreamOptions | None = None) -> DreamStore:
    """The store of one agent: ``profile`` is its folder (a path) or its ``AgentProfile``. Without ``options`` the
    agent's own options apply, as every ``dream`` command loads them: the defaults, the deployment file
    (``DREAM_CONFIG``), the agent's ``dream.toml`` and the ``DREAM__*`` environment (``load_agent_options``)."""
    profile = as_profile(profile)
    return DreamStore(profile, options if options is not None else load_agent_options(profile))


def _archive_retention(options: DreamOptions) -> timedelta | None:
    """How long an undone purge keeps the entry from the next purge: archive purge's ``retention`` (alias
    ``MemoryArchiveRetention``), where these options know its section (every entry point that can undo a cycle,
    ``dream undo`` and ``service.undo``, loads them with the passes' sections: dream_assets/options_loader.py). None:
    not known here, and undoing a purge is refused rather than done without the mark."""
    own = options.passes.get("archive_purge")
    return None if own is None else getattr(own, "retention", None)
