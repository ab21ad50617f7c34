"""The dream pass ledger: per pass, the fingerprint of the input it last ran on and when.

Spec "The change gate": a corpus-wide pass hashes the corpus it is about to describe and skips the model call when the
hash matches what it last ran on; ``DreamPassMaxSkipInterval`` forces a run regardless; the stamp is written only
after the model returned usable JSON; a missing or corrupt ledger degrades to "run everything once", never to
"skip something forever". The file lives on the profile (``dream-pass-ledger.json``) so the gate survives restarts.
"""

from __future__ import annotations

import json
import logging
import os
import tempfile
from dataclasses import dataclass
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

from dream_assets.model import iso, parse_ts, utc
from dream_assets.profile import AgentProfile
from dream_assets.store.locks import path_lock

log = logging.getLogger("dream_assets.ledger")
LEDGER_VERSION = 1


@dataclass(frozen=True)
class LedgerRecord:
    fingerprint: str
    last_run_at: datetime

    def to_json(self) -> dict[str, Any]:
        return {"fingerprint": self.fingerprint, "lastRunAt": iso(self.last_run_at)}

    @classmethod
    def from_json(cls, data: Any) -> LedgerRecord:
        if not isinstance(data, dict) or not isinstance(data.get("fingerprint"), str):
            raise ValueError("record needs a string 'fingerprint'")
        return cls(fingerprint=data["fingerprint"], last_run_at=parse_ts(data.get("lastRunAt")))


@dataclass(frozen=True)
class GateDecision:
    skip: bool
    reason: str
    next_forced_at: datetime | None = None


def gate(record: LedgerRecord | None, fingerprint: str, now: datetime, max_skip: timedelta) -> GateDecision:
    """The change gate, with the reason a person needs."""
    now = utc(now)
    if record is None:
        return GateDecision(False, "never run (or the ledger was missing or corrupt)")
    if record.fingerprint != fingerprint:
        return GateDecision(False, "input changed since the last run")
    last = record.last_run_at
    if last > now:
        # A clock step back or a copied ledger: "not yet due", never "overdue forever".
        return GateDecision(True, f"input unchanged; last run {iso(last)} is in the future, treated as not yet due",
                            last + max_skip if max_skip > timedelta(0) else None)
    if max_skip <= timedelta(0):
        return GateDecision(True, f"input unchanged since {iso(last)}; no forced re-run (DreamPassMaxSkipInterval is not positive)")
    forced_at = last + max_skip
    if now >= forced_at:
        return GateDecision(False, f"input unchanged but DreamPassMaxSkipInterval elapsed (last run {iso(last)})")
    return GateDecision(True, f"input unchanged since {iso(last)}; next forced run at {iso(forced_at)}", forced_at)


def should_skip(record: LedgerRecord | None, fingerprint: str, now: datetime, max_skip: timedelta) -> bool:
    return gate(record, fingerprint, now, max_skip).skip


class PassLedger:
    """Read-modify-write under a lock, atomic replace, written only when something changed."""

    def __init__(self, profile: AgentProfile) -> None:
        self.path: Path = profile.ledger_path
        self._lock_path = profile.ledger_lock_path
        self.warning: str | None = None
        self._records = self._read()

    def _read(self) -> dict[str, LedgerRecord]:
        if not self.path.exists():
            return {}
        try:
            data = json.loads(self.path.read_text(encoding="utf-8"))
            if not isinstance(data, dict) or not isinstance(data.get("passes"), dict):
                raise ValueError("top level must be an object with a 'passes' object")
            return {name: LedgerRecord.from_json(rec) for name, rec in data["passes"].items()}
        except (OSError, ValueError) as exc:
            self.warning = (f"dream pass ledger {self.path} is unreadable ({exc}); running every gated pass once "
                            "and rewriting it")
            log.warning(self.warning)
            return {}

    def reload(self) -> None:
        self.warning = None
        self._records = self._read()

    def get(self, pass_name: str) -> LedgerRecord | None:
        return self._records.get(pass_name)

    def records(self) -> dict[str, LedgerRecord]:
        return dict(self._records)

    def gate(self, pass_name: str, fingerprint: str, now: datetime, max_skip: timedelta) -> GateDecision:
        return gate(self.get(pass_name), fingerprint, now, max_skip)

    def stamp(self, pass_name: str, fingerprint: str, now: datetime) -> None:
        """Record a completed run. Call only after the pass applied a usable answer."""
        record = LedgerRecord(fingerprint, utc(now))
        with path_lock(self._lock_path):
            self.reload()  # another process may have stamped a different pass meanwhile
            if self._records.get(pass_name) == record:
                return
            self._records[pass_name] = record
            self._write()

    def _write(self) -> None:
        payload = {"version": LEDGER_VERSION,
                   "passes": {k: v.to_json() for k, v in sorted(self._records.items())}}
        self.path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=".ledger-", suffix=".tmp", dir=self.path.parent)
        try:
            with os.fdopen(fd, "w", encoding="utf-8") as fh:
                json.dump(payload, fh, indent=2, sort_keys=True)
                fh.flush()
                os.fsync(fh.fileno())
            os.replace(tmp, self.path)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise
