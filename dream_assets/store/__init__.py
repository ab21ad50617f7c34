"""Persistence of one agent profile: the DuckDB store (memories, skills, change log), logs, ledger, warehouse."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from dream_assets.options import DreamOptions, load_agent_options
from dream_assets.profile import AgentProfile, as_profile


@dataclass
class DreamStore:
    """The memory store, skill catalog and change log of one profile, sharing one connection helper."""

    profile: AgentProfile
    options: DreamOptions

    def __post_init__(self) -> None:
        from dream_assets.store.changes import ChangeLog
        from dream_assets.store.connection import store_connection
        from dream_assets.store.memory import MemoryStore
        from dream_assets.store.skills import SkillStore

        self.profile.root.mkdir(parents=True, exist_ok=True)
        self.connection = store_connection(
            self.profile.store_path,
            self.profile.store_lock_path,
            timeout_s=self.options.StoreLockTimeout.total_seconds(),
            snapshots_dir=self.profile.snapshots_dir,
        )
        embeddings = self._save_embedding_provider if self.options.EmbeddingModel.strip() else None
        self.memories = MemoryStore(self.connection, self.options, embeddings=embeddings)
        self.skills = SkillStore(self.connection)
        self.changes = ChangeLog(
            self.connection,
            self.memories,
            self.skills,
            profile=self.profile,
            cycle_stale_after_s=self.options.RunTimeout.total_seconds(),
            archive_retention=self.options.MemoryArchiveRetention,
        )

    def _save_embedding_provider(self):
        """The embedding provider of save-time dedup, from the options and the environment (built on the first save
        that needs it). No retries: a failing endpoint costs a save at most one ``LlmTimeout`` before it falls back
        to the lexical measure."""
        from dream_assets.llm.embeddings import build_embedding_provider

        provider = build_embedding_provider(self.options)
        if provider is not None:
            provider.max_retries = 0
        return provider

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
