"""The adapter interface: five calls, so a peer's memory system is a file of about a hundred lines.

    save(text, when)      the agent is told a fact at ``when`` (a timezone-aware datetime of the simulated year)
    consolidate(when)     one consolidation ("dream") at ``when``
    search(query, k)      the texts of the ``k`` best entries for ``query``, best first (what the agent would read)
    dump()                every entry the system keeps: live ones, and archived ones a person can still restore
                          (``live=False``); what is gone for good is not in it
    tokens_used()         model tokens spent so far (prompt + completion), 0 for a system that calls no model

An adapter that cannot run here (no endpoint, a package missing) raises ``Unavailable`` from its constructor with
a message a person can act on; the benchmark prints it and reports the adapter as unavailable."""

from __future__ import annotations

import os
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Protocol


class Unavailable(RuntimeError):
    """The adapter cannot run on this machine; the message says why and what would make it run."""


@dataclass(frozen=True)
class Kept:
    text: str
    live: bool = True  # False: archived, but a person can still restore it


class Adapter(Protocol):
    name: str

    def save(self, text: str, when: datetime) -> None: ...

    def consolidate(self, when: datetime) -> None: ...

    def search(self, query: str, k: int) -> list[str]: ...

    def dump(self) -> list[Kept]: ...

    def tokens_used(self) -> int: ...

    def close(self) -> None: ...


@dataclass(frozen=True)
class Endpoint:
    """The OpenAI-compatible endpoint the model-based adapters share: the project's own options, read from the
    environment (``DREAM__LlmBaseUrl``, ``DREAM__LlmModel``, ``DREAM__LlmApiKeyEnv``)."""

    base_url: str
    model: str
    api_key: str

    @classmethod
    def from_env(cls, env: dict[str, str] | None = None) -> Endpoint | None:
        env = dict(os.environ if env is None else env)
        base_url = env.get("DREAM__LlmBaseUrl", "").strip()
        if not base_url:
            return None
        key_env = env.get("DREAM__LlmApiKeyEnv", "").strip() or "OPENAI_API_KEY"
        return cls(base_url, env.get("DREAM__LlmModel", "").strip() or "default", env.get(key_env, "") or "none")


def workdir(root: Path, name: str) -> Path:
    path = root / name
    path.mkdir(parents=True, exist_ok=True)
    return path
