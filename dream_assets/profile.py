"""AgentProfile: the one object that knows every path of one agent's data directory.

Nothing else in the project builds these paths. One profile = one agent; a deployment that dreams for many
agents holds many profiles (see ``discover_profiles``).
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

#: Per-session telemetry logs: a directory of ``{sessionId}.jsonl`` files each.
SESSION_LOGS = ("skill-usage", "tool-call", "feedback")
#: Single append-only telemetry files.
SINGLE_FILE_LOGS = ("skill-resource-usage", "wisp-executions", "tier-routing")

_AGENT_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,127}$")


class ProfileError(ValueError):
    pass


def validate_agent_id(agent_id: str) -> str:
    if not _AGENT_ID.fullmatch(agent_id or ""):
        raise ProfileError(
            f"invalid agent id {agent_id!r}: use 1-128 letters, digits, '.', '_' or '-', starting with a letter or "
            f"digit"
        )
    return agent_id


@dataclass(frozen=True)
class AgentProfile:
    root: Path

    def __post_init__(self) -> None:
        object.__setattr__(self, "root", Path(self.root).expanduser().resolve())

    @property
    def agent_id(self) -> str:
        return self.root.name

    # --- stores -------------------------------------------------------
    @property
    def store_path(self) -> Path:
        return self.root / "store.duckdb"

    @property
    def store_lock_path(self) -> Path:
        return self.root / ".locks" / "store.lock"

    @property
    def options_path(self) -> Path:
        """Optional per-agent options file (TOML), layered over the deployment's options."""
        return self.root / "dream.toml"

    # --- logs ----------------------------------------------------------
    @property
    def logs_dir(self) -> Path:
        return self.root / "logs"

    def session_log_dir(self, kind: str) -> Path:
        if kind not in SESSION_LOGS:
            raise ProfileError(f"unknown per-session log {kind!r}; expected one of {', '.join(SESSION_LOGS)}")
        return self.logs_dir / kind

    def session_log_path(self, kind: str, session_id: str) -> Path:
        from dream_assets.names import validate_session_id

        return self.session_log_dir(kind) / f"{validate_session_id(session_id)}.jsonl"

    def single_log_path(self, kind: str) -> Path:
        if kind not in SINGLE_FILE_LOGS:
            raise ProfileError(f"unknown single-file log {kind!r}; expected one of {', '.join(SINGLE_FILE_LOGS)}")
        return self.logs_dir / f"{kind}.jsonl"

    @property
    def conversation_log_path(self) -> Path:
        return self.root / "conversation-log.jsonl"

    def log_lock_path(self, kind: str, session_id: str | None = None) -> Path:
        """The lock writers and log retention share for one session file (or one single-file log)."""
        name = f"{kind}--{session_id}.lock" if session_id else f"{kind}.lock"
        return self.root / ".locks" / "logs" / name

    @property
    def warehouse_dir(self) -> Path:
        """Day-partitioned Parquet copies of log lines, kept after retention trims the JSONL."""
        return self.root / "warehouse"

    # --- dream state -------------------------------------------------------
    @property
    def ledger_path(self) -> Path:
        return self.root / "dream-pass-ledger.json"

    @property
    def ledger_lock_path(self) -> Path:
        return self.root / ".locks" / "ledger.lock"

    @property
    def endpoint_state_path(self) -> Path:
        """Per cycle: the model endpoint could not be reached, so the cycle's remaining model passes fail fast."""
        return self.root / "model-endpoint-state.json"

    @property
    def model_formats_path(self) -> Path:
        """The structured-output formats each model endpoint rejected, and when (expires after seven days)."""
        return self.root / "model-formats.json"

    @property
    def endpoint_profile_path(self) -> Path:
        """Per model endpoint: its measured speed, window, json_schema support and token calibration."""
        return self.root / "model-endpoint-profile.json"

    @property
    def model_progress_path(self) -> Path:
        """The model call a pass is waiting on right now (``dream status``, ``dream run``'s progress)."""
        return self.root / "model-progress.json"

    @property
    def coverage_vocabulary_path(self) -> Path:
        return self.root / "merge-coverage-vocabulary.json"

    @property
    def audit_dir(self) -> Path:
        return self.root / "memory-audit"

    @property
    def consolidation_pause_path(self) -> Path:
        return self.audit_dir / "consolidation-paused.json"

    @property
    def audit_trend_path(self) -> Path:
        return self.audit_dir / "trend.jsonl"

    def directive_override_path(self, file_name: str) -> Path:
        """A directive file here replaces the built-in one entirely."""
        if "/" in file_name or "\\" in file_name or file_name.startswith("."):
            raise ProfileError(f"directive file name {file_name!r} must be a plain file name such as dream.md")
        return self.root / file_name

    @property
    def busy_lease_path(self) -> Path:
        """Present (and fresh) while the agent's own model is serving a user turn."""
        return self.root / "model-busy.lease"

    @property
    def memory_folder_link_path(self) -> Path:
        """The markdown memory folder linked to this agent (``dream link``): its path and format, JSON."""
        return self.root / "memory-folder.json"

    @property
    def memory_folder_state_path(self) -> Path:
        """What the last read of the linked folder saw: each file's hash and each note's memory id."""
        return self.root / "memory-folder-state.json"

    @property
    def memory_folder_lock_path(self) -> Path:
        """Held while the linked folder is read into the store or written back (a cycle, ``dream sync``, the read a
        search or save makes when a file changed), so one never reads what another is half-way through writing."""
        return self.root / "memory-folder.lock"

    @property
    def memory_folder_undo_dir(self) -> Path:
        """Per cycle: the linked folder's files as they were before the cycle's write-back (for dream undo)."""
        return self.root / "memory-folder-undo"

    @property
    def snapshots_dir(self) -> Path:
        return self.root / "snapshots"

    def pass_lock_path(self, pass_name: str) -> Path:
        """Held while one pass runs for this agent, so a schedule and a sensor never run the same pass at once."""
        if not re.fullmatch(r"[a-z_]+", pass_name):
            raise ProfileError(f"invalid pass name {pass_name!r}")
        return self.root / ".locks" / f"pass-{pass_name}.lock"

    def pass_report_path(self, pass_name: str) -> Path:
        """The last outcome of one pass (status, reason, counts, model usage, changes), written at each run."""
        if not re.fullmatch(r"[a-z_]+", pass_name):
            raise ProfileError(f"invalid pass name {pass_name!r}")
        return self.root / "pass-reports" / f"{pass_name}.json"

    @property
    def cycle_markers_dir(self) -> Path:
        """One file per cycle in progress, from its first pass to its close (``store.cycle_marker``)."""
        return self.root / "cycles-running"

    @property
    def cycle_reports_dir(self) -> Path:
        """One Markdown report per cycle: what changed, what was rejected and why, and how to undo it."""
        return self.root / "reports"

    @property
    def analyses_dir(self) -> Path:
        """Day-partitioned Parquet results of backfilled (historical) analyses."""
        return self.root / "analyses"

    def ensure(self) -> AgentProfile:
        """Create the directory skeleton (idempotent)."""
        for d in (
            self.root,
            self.logs_dir,
            self.root / ".locks" / "logs",
            self.warehouse_dir,
            self.audit_dir,
            self.snapshots_dir,
            *(self.session_log_dir(k) for k in SESSION_LOGS),
        ):
            d.mkdir(parents=True, exist_ok=True)
        return self


def as_profile(profile: AgentProfile | str | Path) -> AgentProfile:
    """An agent's profile, given as the profile or as its folder."""
    if isinstance(profile, AgentProfile):
        return profile
    if isinstance(profile, str | Path):
        return AgentProfile(Path(profile))
    raise TypeError(f"an agent profile is an AgentProfile or the path of its folder, got {type(profile).__name__}")


def holds_profile(path: Path) -> bool:
    """Whether the folder holds an agent's data (a store or logs), whatever its name."""
    return path.is_dir() and (
        (path / "store.duckdb").exists() or (path / "logs").is_dir() or (path / "conversation-log.jsonl").exists()
    )


def discover_profiles(root: str | Path) -> Iterator[AgentProfile]:
    """Every sub-directory of ``root`` whose name is a valid agent id and that holds a store or logs."""
    base = Path(root)
    if not base.is_dir():
        return
    for child in sorted(base.iterdir()):
        if _AGENT_ID.fullmatch(child.name) and holds_profile(child):
            yield AgentProfile(child)
