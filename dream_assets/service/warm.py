"""Warm per-agent state for a long-lived server (``dream serve``): the agent's open store handle, its resolved
options, its recall index and its save-time embeddings stay in memory between calls, so a call pays for its work and
not for opening the agent again.

What a call saves, measured at 10,000 entries: loading the options and building the handle (about 1 ms), and above
all opening the DuckDB file again (about 25 ms of CPU and 70 ms of wall time, then a first read of the rows changed
since). So:

- The handle (``agent_memory.connect``) is kept per agent; the options are loaded again only when the agent's
  ``dream.toml`` or the deployment file (``DREAM_CONFIG``) changed since (their modification times).
- The store connection lingers ``store_linger_s`` after a call (a process's default is a quarter of a second) but is
  never held against another process: the connection helper's fair turns (store/connection.py) close it within a
  tick (10 ms) when a dream cycle, a pass or a shell command waits for the file. So a cycle gets its turn as before,
  and the server holds the file only while nobody else asks for it.
- The recall index is this process's, kept in step with the rows (recall_index.py): when the file was let go and
  opened again, the rows another process wrote meanwhile are applied by their ``seq`` (and the purge records), a
  catch-up of what changed, never a rebuild. The save-time embeddings (save_pipeline.py) are kept with the handle.
  An index loaded from its file answers saves from the file's arrays until its save-time tables are made
  (``RecallIndex._lookups``), so the agent's first save does not pay for them (seconds at a million entries); they
  are made in the background once the changes since the load pile up (``RecallIndex.due_for_tables``), or when
  the index is written to its file.
- An LRU of agents (an HTTP server serves many): at most ``max_agents`` warm, together about ``max_memory_mb`` (their
  recall indexes, ``recall_index.footprint``, the vectors a fused search keeps, ``dense_index.footprint``, and each
  store file open, ``OPEN_STORE_BYTES``), and an agent idle for ``idle_s`` is let go. Letting an agent go
  releases its indexes and closes its store, writing the index to its file first when many entries changed since it
  was written (``index_file.REWRITE_AFTER_CHANGES``: a few are cheaper for the next load to catch up on than to
  write, which matters when more agents call in turn than are kept warm); the next call loads the file again.

``close`` (a server shutting down) lets every agent go with every changed recall index written to its file.
"""

from __future__ import annotations

import gc
import logging
import os
import threading
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from dream_assets import agent_memory, dense_index, recall_index
from dream_assets.profile import AgentProfile
from dream_assets.store import index_file
from dream_assets.store.connection import FREE_WAIT_S

log = logging.getLogger("dream_assets.service.warm")

#: What one open store file holds in memory, about (DuckDB's instance, its caches and threads): 8.3 MB measured with
#: 100 agents of 1,000 entries each lingering open (benchmarks/serve.py, the many-agents figure).
OPEN_STORE_BYTES = 8_000_000


@dataclass(frozen=True)
class WarmLimits:
    """How much a server keeps warm (``dream serve --max-agents --max-warm-mb --idle-evict --store-linger``)."""

    max_agents: int = 128
    max_memory_mb: float = 2048.0
    idle_s: float = 900.0
    store_linger_s: float = 30.0

    def __post_init__(self) -> None:
        if self.max_agents < 1:
            raise ValueError(f"max_agents must be at least 1, got {self.max_agents}")
        for name in ("max_memory_mb", "idle_s", "store_linger_s"):
            if not getattr(self, name) >= 0:
                raise ValueError(f"{name} must be a number of at least 0, got {getattr(self, name)!r}")


def _indexes(agent: _Agent) -> int:
    conn = agent.handle.connection
    return recall_index.footprint(conn) + dense_index.footprint(conn)


def _footprint(agent: _Agent) -> int:
    return _indexes(agent) + (OPEN_STORE_BYTES if agent.handle.connection.is_open else 0)


def _stamp(path: Path | None) -> float | None:
    if path is None:
        return None
    try:
        return path.stat().st_mtime_ns
    except OSError:
        return None


def _options_stamp(profile: AgentProfile) -> tuple[float | None, ...]:
    """What the agent's options are read from, by modification time: its ``dream.toml`` and ``DREAM_CONFIG``."""
    config = os.environ.get("DREAM_CONFIG")
    return _stamp(profile.options_path), _stamp(Path(config) if config else None)


@dataclass
class _Agent:
    handle: agent_memory.MemoryHandle
    stamp: tuple[float | None, ...]
    last_used: float
    linger_s: float  # the connection's own linger, put back when the agent is let go
    frozen: object | None = None  # the recall index last moved out of the collector's generations
    calls: int = 0
    users: int = 0  # calls in progress: an agent in use is never let go
    held: int = 0  # what its indexes held when its last call ended (``_indexes``)


class WarmAgents:
    """The warm agents of one server process (see the module docstring). Thread-safe: the MCP SDK runs tool calls in
    worker threads."""

    def __init__(self, limits: WarmLimits | None = None, *, clock: Callable[[], float] = time.monotonic) -> None:
        self.limits = limits or WarmLimits()
        self._clock = clock
        self._agents: OrderedDict[Path, _Agent] = OrderedDict()  # least recently used first
        self._held = 0  # the sum of the agents' ``held``
        self._lock = threading.Lock()
        self.evictions = 0

    def __len__(self) -> int:
        return len(self._agents)

    def __contains__(self, profile: AgentProfile) -> bool:
        return profile.root in self._agents

    def acquire(self, profile: AgentProfile) -> agent_memory.MemoryHandle:
        """The agent's warm handle (opened now when it is not warm, again when its options changed), marked in use
        until ``release``. A store error is ``StoreUnavailable``."""
        now = self._clock()
        stamp = _options_stamp(profile)
        gone: list[_Agent] = []
        with self._lock:
            agent = self._agents.get(profile.root)
            if agent is not None and agent.stamp != stamp and agent.users == 0:
                gone.append(self._pop(profile.root))
                agent = None
            if agent is None:
                handle = agent_memory.connect(profile)
                linger_s = handle.connection.linger_s
                handle.connection.linger_s = max(linger_s, self.limits.store_linger_s)
                agent = self._agents[profile.root] = _Agent(handle, stamp, now, linger_s)
            self._begin(profile, agent, now)
            gone += self._over_limits(now)
        for old in gone:
            self._let_go(old)
        return agent.handle

    def acquire_ready(self, profile: AgentProfile) -> agent_memory.MemoryHandle | None:
        """The agent's warm handle, marked in use until ``release``, when a call can be answered with it at once: the
        agent is warm with the same options, its store file open in this process and its recall index built, and it
        has no embedding model (a search or save would ask the endpoint) nor linked folder (a call reads the folder
        first). None otherwise, and when another thread holds the warm agents' lock for longer than it takes to
        start or end a call (``FREE_WAIT_S``), without waiting for anything else and without letting any agent go
        (``release(let_go=False)``)."""
        if not self._lock.acquire(timeout=FREE_WAIT_S):
            return None
        try:
            agent = self._agents.get(profile.root)
            if agent is None:
                return None
            handle = agent.handle
            if (
                not handle.connection.is_open
                or recall_index.current(handle.connection) is None
                or handle.options.EmbeddingModel.strip()
                or agent.stamp != _options_stamp(profile)
                or profile.memory_folder_link_path.exists()
            ):
                return None
            self._begin(profile, agent, self._clock())
            return handle
        finally:
            self._lock.release()

    def release(self, profile: AgentProfile, *, let_go: bool = True) -> None:
        """The call that ``acquire`` began is over. An index built or loaded by it (hundreds of thousands of
        long-lived objects for a large store) is moved out of the garbage collector's generations (``gc.freeze``),
        so later calls do not pay for full collections that scan it; once let go, refcounting still frees it.
        ``let_go=False``: the agents over the limits are let go by the next call or sweep instead (letting one go may
        write its recall index to its file, which a call answered on the server's event loop must not wait for)."""
        gone: list[_Agent] = []
        with self._lock:
            agent = self._agents.get(profile.root)
            if agent is not None:
                agent.users = max(0, agent.users - 1)
                agent.last_used = self._clock()
                self._agents.move_to_end(profile.root)
                self._note_held(agent)
                index = recall_index.current(agent.handle.connection)
                if index is not None and index is not agent.frozen:
                    agent.frozen = index
                    gc.freeze()
                if index is not None and index.due_for_tables():
                    threading.Thread(
                        target=self._make_ahead, args=(agent, index), name="warm-tables", daemon=True
                    ).start()
            if let_go:
                gone += self._over_limits(self._clock())
        for old in gone:
            self._let_go(old)

    def sweep(self) -> int:
        """Let go of the agents idle for longer than ``idle_s`` or over the limits; how many."""
        with self._lock:
            gone = self._over_limits(self._clock())
        for old in gone:
            self._let_go(old)
        return len(gone)

    def preload(self, profile: AgentProfile) -> threading.Thread:
        """Open the agent and load (or build) its recall index in a background thread, so the first call does not
        wait for it from the start (a call meanwhile waits for the build it needs, no longer)."""

        def run() -> None:
            try:
                handle = self.acquire(profile)
                try:
                    recall_index.prepare(handle.memories)
                finally:
                    self.release(profile)
            except Exception as exc:  # noqa: BLE001 - the first call builds it and reports what fails
                log.warning("could not load the recall index of %s ahead of the first call: %s", profile.root, exc)

        thread = threading.Thread(target=run, name=f"warm:{profile.root.name}", daemon=True)
        thread.start()
        return thread

    def memory_mb(self) -> float:
        """About how much the warm agents hold (recall indexes and open store files), in MB."""
        return sum(map(_footprint, self._agents.values())) / 1e6

    def close(self) -> None:
        """Let every agent go (its recall index written to its file when it changed): a server shutting down."""
        with self._lock:
            gone = list(self._agents.values())
            self._agents.clear()
            self._held = 0
        for old in gone:
            self._let_go(old, min_changes=1)

    # ------------------------------------------------------------------
    def _begin(self, profile: AgentProfile, agent: _Agent, now: float) -> None:
        """A call of ``agent`` begins (under the lock): the most recently used, in use until ``release``."""
        self._agents.move_to_end(profile.root)
        agent.last_used = now
        agent.calls += 1
        agent.users += 1

    def _pop(self, root: Path) -> _Agent:
        agent = self._agents.pop(root)
        self._held -= agent.held
        return agent

    def _note_held(self, agent: _Agent) -> None:
        """What the agent's indexes hold now (under the lock), in its ``held`` and the sum of them all."""
        held = _indexes(agent)
        self._held += held - agent.held
        agent.held = held

    def _over_limits(self, now: float) -> list[_Agent]:
        """Pop (under the lock) the agents to let go: idle too long, then the least recently used beyond the count
        and the memory cap. An agent with a call in progress stays. Every call comes here twice, so neither walks
        every agent: the agents are in the order of their last use (a call's start and end), so the idle ones are
        the first and the walk ends at the first that is not; and while the count and what the indexes held at the
        end of their last call, with every store file counted open, are within the limits, nobody is over them."""
        limits, idle = self.limits, []
        for root, agent in self._agents.items():
            if agent.users:
                continue
            if now - agent.last_used <= limits.idle_s:
                break
            idle.append(root)
        gone = [self._pop(root) for root in idle]
        cap = limits.max_memory_mb * 1e6
        if len(self._agents) <= limits.max_agents and self._held + len(self._agents) * OPEN_STORE_BYTES <= cap:
            return gone
        sizes = {root: _footprint(a) for root, a in self._agents.items()}
        total = sum(sizes.values())
        for root in list(self._agents):  # least recently used first
            if len(self._agents) <= limits.max_agents and total <= cap:
                break
            if len(self._agents) == 1 or self._agents[root].users:
                continue
            gone.append(self._pop(root))
            total -= sizes[root]
        return gone

    def _make_ahead(self, agent: _Agent, index: recall_index.RecallIndex) -> None:
        """Make a loaded recall index's save-time tables in the background once its changes since the load piled up
        (seconds at a million entries), and move them out of the collector's generations like the index."""
        conn = agent.handle.connection
        try:
            if recall_index.current(conn) is index and index.make_ahead(conn):
                gc.freeze()
                with self._lock:
                    if self._agents.get(agent.handle.profile.root) is agent:
                        self._note_held(agent)
        except Exception as exc:  # noqa: BLE001 - the first save makes them instead, as without this
            log.info("save-time tables of %s not made ahead: %s", agent.handle.profile.root, exc)

    def _let_go(self, agent: _Agent, *, min_changes: int = index_file.REWRITE_AFTER_CHANGES) -> None:
        self.evictions += 1
        conn = agent.handle.connection
        try:
            dense_index.release(conn)
            recall_index.release(conn, min_changes=min_changes)
        finally:
            with self._lock:
                if agent.handle.profile.root not in self._agents:  # not warm again meanwhile
                    conn.linger_s = agent.linger_s
            conn.close()
        log.info("let go of the warm agent %s after %d calls", agent.handle.profile.root, agent.calls)
