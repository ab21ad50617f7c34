from __future__ import annotations

import shutil
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path

import pytest

from dream_assets.options import DreamOptions
from dream_assets.options_loader import dream_options
from dream_assets.profile import AgentProfile
from dream_assets.store import DreamStore, open_store

NOW = datetime(2026, 11, 30, 12, 0, tzinfo=UTC)


@pytest.fixture
def now() -> datetime:
    return NOW


@pytest.fixture
def options() -> DreamOptions:
    return dream_options()


@pytest.fixture
def profile(tmp_path) -> AgentProfile:
    return AgentProfile(tmp_path / "agents" / "test-agent").ensure()


@pytest.fixture
def root(tmp_path):
    """A profile root for tests with several agents (Dagster partitions)."""
    return tmp_path / "agents"


#: Memories of the small demo: 0 keeps only the demo's hand-written entries (42: near-duplicate clusters,
#: re-observations, look-alike moments, high-value and long-archived entries), enough for every pass to act on.
SMALL_DEMO_MEMORIES = 0


@pytest.fixture(scope="session")
def small_demo_template(tmp_path_factory) -> Path:
    """The small demo's folder, built once per test session (its store closed); ``demo`` copies it."""
    from dream_assets.demo import build_demo_profile
    from dream_assets.store.connection import close_all

    profile = AgentProfile(tmp_path_factory.mktemp("small-demo") / "demo")
    build_demo_profile(profile, NOW, n_memories=SMALL_DEMO_MEMORIES)
    close_all()
    return profile.root


@pytest.fixture
def demo(root, small_demo_template) -> AgentProfile:
    """The small demo agent under ``root``, built at NOW: every kind of entry, skill and log line the passes act on,
    without the demo's bulk (for tests whose point is the wiring, not the volume). Each test gets its own copy."""
    shutil.copytree(small_demo_template, root / "demo")
    return AgentProfile(root / "demo")


@pytest.fixture
def full_demo(root) -> AgentProfile:
    """The demo agent at its full size (320 memories, as `make run` builds it) under ``root``, built at NOW."""
    from dream_assets.demo import build_demo_profile

    profile = AgentProfile(root / "demo")
    build_demo_profile(profile, NOW)
    return profile


@pytest.fixture(scope="session")
def instance_template(tmp_path_factory) -> Path:
    """The folder of a temporary Dagster instance whose SQLite storage is created once per test session."""
    import dagster as dg

    path = tmp_path_factory.mktemp("dagster-instance")
    with dg.instance_for_test(temp_dir=str(path)):
        pass
    return path


@pytest.fixture
def instance(tmp_path, instance_template):
    """A real, temporary Dagster instance of its own (SQLite storage under tmp_path), copied from the session's
    template: creating the storage schema is most of what a fresh instance costs."""
    import dagster as dg

    home = tmp_path / ".dagster-instance"
    shutil.copytree(instance_template, home)
    with dg.instance_for_test(temp_dir=str(home)) as inst:
        yield inst


@pytest.fixture
def store(profile, options) -> DreamStore:
    s = open_store(profile, options)
    yield s
    s.close()


def run_scripted(pass_fn, profile, store, answers, *, options=None, now=NOW, cycle_id="c1"):
    """Run one pass with scripted model answers; returns (report, backend) so a test can see what was sent."""
    from dream_assets.llm.client import ModelClient
    from dream_assets.llm.scripted import ScriptedBackend
    from dream_assets.passes.context import PassContext

    options = options or dream_options()
    backend = ScriptedBackend(answers)
    client = ModelClient(backend, profile=profile, options=options)
    ctx = PassContext(profile, options, now, cycle_id=cycle_id, client_factory=lambda: client, _store=store)
    return pass_fn(ctx), backend


def run_without_model(pass_fn, profile, store, *, options=None, now=NOW):
    """Run one pass where building a model client at all fails the test (an idle agent costs zero model calls)."""
    from dream_assets.passes.context import PassContext

    def no_client():
        pytest.fail("the model client was built although no call was due")

    ctx = PassContext(
        profile,
        options or dream_options(),
        now,
        cycle_id="c1",
        client_factory=no_client,
        _store=store,
    )
    return pass_fn(ctx)


@contextmanager
def held_by_another_process(hold: str) -> Iterator[subprocess.Popen]:
    """A Python process that runs ``hold`` (statements that take a lock, a marker...), says so, and keeps it until
    the block ends (its standard input closes) or the block kills it."""
    code = textwrap.dedent(hold) + '\nprint("held", flush=True)\nimport sys\nsys.stdin.read()\n'
    holder = subprocess.Popen([sys.executable, "-c", code], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "held"
        yield holder
    finally:
        holder.stdin.close()
        holder.wait(timeout=30)
