from __future__ import annotations

from datetime import UTC, datetime

import pytest

from dream_assets.options import DreamOptions
from dream_assets.profile import AgentProfile
from dream_assets.store import DreamStore, open_store

NOW = datetime(2026, 11, 30, 12, 0, tzinfo=UTC)


@pytest.fixture
def now() -> datetime:
    return NOW


@pytest.fixture
def options() -> DreamOptions:
    return DreamOptions()


@pytest.fixture
def profile(tmp_path) -> AgentProfile:
    return AgentProfile(tmp_path / "agents" / "test-agent").ensure()


@pytest.fixture
def store(profile, options) -> DreamStore:
    s = open_store(profile, options)
    yield s
    s.close()
