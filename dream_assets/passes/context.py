"""What every pass receives: the profile, its options and store, a model client (built on first use), the clock, the
cycle id its changes are recorded under, and the pass ledger."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field, replace
from datetime import datetime
from functools import cached_property
from typing import TYPE_CHECKING

from dream_assets import cycle_ids
from dream_assets.changes_model import Actor, ChangeRow, SuccessorHow
from dream_assets.model import MemoryEntry, Skill, utc
from dream_assets.options import DreamOptions, PassOptions
from dream_assets.profile import AgentProfile
from dream_assets.store import DreamStore, open_store
from dream_assets.store.ledger import PassLedger

if TYPE_CHECKING:
    from dream_assets.llm.client import ModelClient


@dataclass
class PassContext:
    profile: AgentProfile
    options: DreamOptions
    now: datetime
    cycle_id: str = field(default_factory=cycle_ids.dream_cycle)
    client_factory: Callable[[], ModelClient] | None = None
    _store: DreamStore | None = None
    #: Why this pass is forced in this run (``dream run --force``, the ``dream/force`` run tag), or None. A forced pass
    #: ignores its change gate and minimum-interval floor once, and the ledger records the run as forced.
    force: str | None = None

    def __post_init__(self) -> None:
        self.now = utc(self.now)

    @cached_property
    def store(self) -> DreamStore:
        return self._store or open_store(self.profile, self.options)

    @cached_property
    def ledger(self) -> PassLedger:
        return PassLedger(self.profile, now=self.now)

    def for_pass(self, pass_name: str, section: type[PassOptions] | None = None) -> PassContext:
        """This context for one pass: its options knowing the pass's own section (``section``, which options built
        without the registry lack) and with the pass's own model options (``[passes.<name>] model`` and the like)
        when it has any, sharing the store; the same context otherwise."""
        known = self.options
        if section is not None and section not in known.declared:
            known = known.with_passes((section,), strict=False)
        options = known.for_pass_model(pass_name)
        if options == self.options:  # no override, or already applied (a Dagster step)
            return self
        if options is known:  # the same model: only the pass's section is new, the client stays
            return replace(self, options=known, _store=self.__dict__.get("store", self._store))
        return replace(self, options=options, _store=self._store or self.store, client_factory=None)

    @cached_property
    def model_identity(self) -> str:
        """The backend and model the options select ("offline", "openai:llama3.1:8b"): what the ledger stamps and the
        change gate compares, read without building the client (a gated pass builds none)."""
        from dream_assets.llm.client import configured_model_identity

        return configured_model_identity(self.options)

    @cached_property
    def client(self) -> ModelClient:
        if self.client_factory is not None:
            return self.client_factory()
        from dream_assets.llm.client import build_model_client

        return build_model_client(self.options, self.profile)

    def record(
        self,
        pass_name: str,
        kind: str,
        target: MemoryEntry | Skill,
        *,
        before: MemoryEntry | Skill | None,
        after: MemoryEntry | Skill | None,
        reason: str,
        successor_id: str | None = None,
        successor_how: SuccessorHow = SuccessorHow.NONE,
    ) -> None:
        """Write one row of the change log for this cycle (see store/changes.py). An entry archived into another
        names it: ``successor_id`` and how (``successor_how``)."""
        self.store.changes.record(
            self.row(
                pass_name,
                kind,
                target,
                before=before,
                after=after,
                reason=reason,
                successor_id=successor_id,
                successor_how=successor_how,
            ),
            now=self.now,
        )

    def row(
        self,
        pass_name: str,
        kind: str,
        target: MemoryEntry | Skill,
        *,
        before: MemoryEntry | Skill | None,
        after: MemoryEntry | Skill | None,
        reason: str,
        successor_id: str | None = None,
        successor_how: SuccessorHow = SuccessorHow.NONE,
    ) -> ChangeRow:
        """The change row of ``pass_name`` about ``target`` in this cycle (``record`` writes it)."""
        return ChangeRow(
            cycle_id=self.cycle_id,
            actor=Actor.PASS,
            pass_name=pass_name,
            kind=kind,
            target_type="memory" if isinstance(target, MemoryEntry) else "skill",
            target_id=target.id if isinstance(target, MemoryEntry) else target.name,
            before=before,
            after=after,
            reason=reason,
            successor_id=successor_id,
            successor_how=successor_how,
        )
