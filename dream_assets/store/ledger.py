"""The dream pass ledger: per pass, the fingerprint of the input it last ran on and when.

Spec "The change gate": a corpus-wide pass hashes the corpus it is about to describe and skips the model call when the
hash matches what it last ran on; ``DreamPassMaxSkipInterval`` forces a run regardless; the stamp is written only
after the model returned usable JSON; a missing or corrupt ledger degrades to "run everything once", never to
"skip something forever". The file lives on the profile (``dream-pass-ledger.json``) so the gate survives restarts.

A last-run time in the future (a clock that was ahead, a profile copied from another machine) would otherwise hold a
pass back until that time: the change gate would count the forced re-run from it and the consolidation floor
(``ConsolidationMinInterval``) would wait for it. A ledger opened with ``now`` treats such a time as now, says so in
``warning`` (naming the pass and the time), and writes the corrected time back, so the pass is due again one interval
after today rather than one interval after the future time.

The ledger also keeps, per conversation pass, the turns it has not processed yet (``PendingTurns``): preference
inference and skill gap detection read the conversation log, which is cleared every cycle whether or not their model
call succeeded; the turns are in the log warehouse, and the pending span tells the next cycle which to read back.
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

from dream_assets.file_safety import atomic_write, read_json_file
from dream_assets.model import iso, parse_ts, utc
from dream_assets.profile import AgentProfile
from dream_assets.store.locks import path_lock

log = logging.getLogger("dream_assets.ledger")
LEDGER_VERSION = 1


@dataclass(frozen=True)
class LedgerRecord:
    fingerprint: str
    last_run_at: datetime
    #: Why the last completed run was forced past the change gate and the floor (``dream run --force``), or None.
    forced: str | None = None
    #: Which backend and model answered the run (``model_identity``: "offline", "openai:llama3.1:8b"), or None for a
    #: record written before the ledger kept it (read as the offline backend, the only one such a profile could
    #: have run without configuring a model).
    model: str | None = None

    def to_json(self) -> dict[str, Any]:
        data = {"fingerprint": self.fingerprint, "lastRunAt": iso(self.last_run_at)}
        if self.forced:
            data["forced"] = self.forced
        if self.model:
            data["model"] = self.model
        return data

    @classmethod
    def from_json(cls, data: Any) -> LedgerRecord:
        if not isinstance(data, dict) or not isinstance(data.get("fingerprint"), str):
            raise ValueError("record needs a string 'fingerprint'")
        forced, model = data.get("forced"), data.get("model")
        return cls(
            fingerprint=data["fingerprint"],
            last_run_at=parse_ts(data.get("lastRunAt")),
            forced=forced if isinstance(forced, str) and forced else None,
            model=model if isinstance(model, str) and model else None,
        )

    @property
    def answered_by(self) -> str:
        """The backend and model of the stamp ("offline" for a record that predates the field)."""
        return self.model or UNRECORDED_MODEL


#: What a ledger record without a ``model`` field was answered by.
UNRECORDED_MODEL = "offline"


def model_switch(record: LedgerRecord | None, model: str | None) -> str | None:
    """Why ``record`` does not count for ``model`` (a stamp made by another backend or model), or None: no record,
    no model to compare (a pass without a model call), or the same one."""
    if record is None or not model or record.answered_by == model:
        return None
    return f"the last run was answered by {record.answered_by}, this one by {model}: running once with the new model"


@dataclass(frozen=True)
class PendingTurns:
    """Conversation turns a pass read but did not process (its model call failed or was deferred): those with
    ``since <= timestamp <= until``. The warehouse holds them once the conversation log was cleared."""

    since: datetime
    until: datetime

    def to_json(self) -> dict[str, Any]:
        return {"since": iso(self.since), "until": iso(self.until)}

    @classmethod
    def from_json(cls, data: Any) -> PendingTurns:
        if not isinstance(data, dict):
            raise ValueError("a pending span must be an object with 'since' and 'until'")
        since, until = parse_ts(data.get("since")), parse_ts(data.get("until"))
        if until < since:
            raise ValueError(f"'until' {iso(until)} is before 'since' {iso(since)}")
        return cls(since, until)

    def union(self, other: PendingTurns | None) -> PendingTurns:
        if other is None:
            return self
        return PendingTurns(min(self.since, other.since), max(self.until, other.until))


@dataclass(frozen=True)
class GateDecision:
    skip: bool
    reason: str
    next_forced_at: datetime | None = None


def gate(
    record: LedgerRecord | None, fingerprint: str, now: datetime, max_skip: timedelta, model: str | None = None
) -> GateDecision:
    """The change gate, with the reason a person needs. A last run in the future counts as a run now. With
    ``model`` (the backend and model that would answer now), a stamp made by another one does not count."""
    now = utc(now)
    if record is None:
        return GateDecision(False, "never run (or the ledger was missing or corrupt)")
    if record.fingerprint != fingerprint:
        return GateDecision(False, "input changed since the last run")
    switched = model_switch(record, model)
    if switched is not None:
        return GateDecision(False, switched)
    last, note = record.last_run_at, ""
    if last > now:
        note = f" (the recorded last run {iso(last)} is in the future, treated as now)"
        last = now
    if max_skip <= timedelta(0):
        return GateDecision(
            True,
            f"input unchanged since {iso(last)}{note}; no forced re-run (DreamPassMaxSkipInterval is not positive)",
        )
    forced_at = last + max_skip
    if now >= forced_at:
        return GateDecision(False, f"input unchanged but DreamPassMaxSkipInterval elapsed (last run {iso(last)})")
    return GateDecision(
        True, f"input unchanged since {iso(last)}{note}; next forced run at {iso(forced_at)}", forced_at
    )


def should_skip(
    record: LedgerRecord | None, fingerprint: str, now: datetime, max_skip: timedelta, model: str | None = None
) -> bool:
    return gate(record, fingerprint, now, max_skip, model).skip


class PassLedger:
    """Read-modify-write under a lock, atomic replace, written only when something changed.

    With ``now``, a last-run time later than ``now`` is read as ``now`` (with a warning) and written back so."""

    def __init__(self, profile: AgentProfile, now: datetime | None = None) -> None:
        self.path: Path = profile.ledger_path
        self._lock_path = profile.ledger_lock_path
        self.now = utc(now) if now is not None else None
        self.warning: str | None = None
        self._records: dict[str, LedgerRecord] = {}
        self._pending: dict[str, PendingTurns] = {}
        if self._read():
            self._write_back_corrections()

    def _read(self) -> bool:
        """Load the file; returns whether a future time was corrected (the file then differs from what was read)."""
        self._records, self._pending = {}, {}
        warnings: list[str] = []
        if not self.path.exists():
            self.warning = None
            return False
        try:
            data = read_json_file(self.path)
            if not isinstance(data, dict) or not isinstance(data.get("passes"), dict):
                raise ValueError("top level must be an object with a 'passes' object")
            records = {name: LedgerRecord.from_json(rec) for name, rec in data["passes"].items()}
        except FileNotFoundError:
            self.warning = None
            return False
        except (OSError, ValueError, TypeError, OverflowError) as exc:
            self.warning = (
                f"dream pass ledger {self.path} is unreadable ({exc}); running every gated pass once and rewriting it"
            )
            log.warning(self.warning)
            return False
        corrected = False
        if self.now is not None:
            for name, rec in records.items():
                if rec.last_run_at > self.now:
                    warnings.append(
                        f"dream pass ledger {self.path}: {name} last ran at {iso(rec.last_run_at)}, "
                        f"which is in the future (a clock that was ahead, or a copied profile); treated "
                        f"as now ({iso(self.now)})"
                    )
                    records[name] = LedgerRecord(rec.fingerprint, self.now, rec.forced, rec.model)
                    corrected = True
        self._records = records
        pending = data.get("pending", {})
        for name, span in pending.items() if isinstance(pending, dict) else ():
            try:
                self._pending[name] = PendingTurns.from_json(span)
            except (ValueError, TypeError) as exc:
                warnings.append(
                    f"dream pass ledger {self.path}: the unprocessed turns of {name} are unreadable "
                    f"({exc}); they are not retried"
                )
        for warning in warnings:
            log.warning(warning)
        self.warning = "; ".join(warnings) or None
        return corrected

    def _write_back_corrections(self) -> None:
        """Persist future times read as now, so the next run counts from today (best effort: a read-only profile only
        loses the correction, the warning stays)."""
        try:
            with path_lock(self._lock_path):
                warning = self.warning
                self._read()
                self._write()
                self.warning = warning
        except OSError as exc:
            log.warning("could not write the corrected dream pass ledger %s: %s", self.path, exc)

    def reload(self) -> None:
        self._read()

    def get(self, pass_name: str) -> LedgerRecord | None:
        return self._records.get(pass_name)

    def records(self) -> dict[str, LedgerRecord]:
        return dict(self._records)

    def gate(
        self, pass_name: str, fingerprint: str, now: datetime, max_skip: timedelta, model: str | None = None
    ) -> GateDecision:
        return gate(self.get(pass_name), fingerprint, now, max_skip, model)

    def stamp(
        self, pass_name: str, fingerprint: str, now: datetime, *, forced: str | None = None, model: str | None = None
    ) -> None:
        """Record a completed run (``forced``: why it ran past the gate and the floor; ``model``: the backend and
        model that answered). Call only after the pass applied a usable answer."""
        record = LedgerRecord(fingerprint, utc(now), forced or None, model or None)
        with path_lock(self._lock_path):
            corrected = self._read()  # another process may have stamped a different pass meanwhile
            if self._records.get(pass_name) == record and not corrected:
                return
            self._records[pass_name] = record
            self._write()

    # --- conversation turns a pass has not processed yet ------------------------------------------------------

    def pending(self, pass_name: str) -> PendingTurns | None:
        return self._pending.get(pass_name)

    def set_pending(self, pass_name: str, span: PendingTurns | None) -> None:
        """Replace (``None``: clear) the span of turns ``pass_name`` still has to process."""
        with path_lock(self._lock_path):
            corrected = self._read()
            if self._pending.get(pass_name) == span and not corrected:
                return
            if span is None:
                self._pending.pop(pass_name, None)
            else:
                self._pending[pass_name] = span
            self._write()

    def _write(self) -> None:
        payload: dict[str, Any] = {
            "version": LEDGER_VERSION,
            "passes": {k: v.to_json() for k, v in sorted(self._records.items())},
        }
        if self._pending:
            payload["pending"] = {k: v.to_json() for k, v in sorted(self._pending.items())}
        self.path.parent.mkdir(parents=True, exist_ok=True)
        atomic_write(self.path, json.dumps(payload, indent=2, sort_keys=True))
