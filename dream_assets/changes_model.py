"""One change-log row as a typed record: who made the change (``Actor``), what it did, and where an archived entry
went (``successor_id`` + ``SuccessorHow``), written by the code that makes the change.

The store writes and reads these (``store/change_rows.py``, ``store/changes.py``); the passes, the agent's calls,
``dream restore``, review decisions and undo build them. Where an entry went is never read back out of the reason
text: the reason is for a person, the successor fields are for code (``agent_memory.successor``, undo, history).
The one exception is data written before the fields existed — a store upgraded from schema version 4, a pending
review set held then, an export or a corpus snapshot without them — which ``legacy_successor`` reads as that data
comes in.

``pass_name`` stays beside ``actor`` for compatibility: a dream pass's rows carry the pass's name, every other actor
has one fixed name (``ACTOR_PASS_NAMES``), the one stored by versions that knew only pass names, so either one
gives the other.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from dream_assets.model import MemoryEntry, Skill


class Actor(StrEnum):
    """Who made a change."""

    #: The agent's own writes (save, save many, put, reinforce), under its day's cycle ``agent-YYYY-MM-DD``.
    AGENT_SAVE = "agent_save"
    #: The agent forgot an entry (archived it), under a cycle of that one forget.
    AGENT_FORGET = "agent_forget"
    #: A save extended a live entry by save-time dedup, recorded by the store under ``save-<id>``.
    SAVE_DEDUP = "save_dedup"
    #: ``dream restore``: a person put an archived entry back live.
    RESTORE = "restore"
    #: A dream pass (``pass_name`` says which), applied at once or from a review set.
    PASS = "pass"
    #: A review decision's own rows (the left-apart stamps of a rejected merge).
    REVIEW = "review"
    #: An undo, under ``undo-<cycle it undid>``.
    UNDO = "undo"


#: The pass name each actor but ``PASS`` is recorded under (the names of the change log before actors).
ACTOR_PASS_NAMES: dict[Actor, str] = {
    Actor.AGENT_SAVE: "agent",
    Actor.AGENT_FORGET: "forget",
    Actor.SAVE_DEDUP: "save",
    Actor.RESTORE: "restore",
    Actor.REVIEW: "review",
    Actor.UNDO: "undo",
}
_ACTOR_OF_PASS = {name: actor for actor, name in ACTOR_PASS_NAMES.items()}


def actor_of_pass(pass_name: str) -> Actor:
    """The actor of a row recorded under ``pass_name`` (a name not reserved by another actor is a dream pass's)."""
    return _ACTOR_OF_PASS.get(pass_name, Actor.PASS)


class SuccessorHow(StrEnum):
    """How an archived entry's fact went into its successor."""

    #: a merge wrote a new entry from it (and others)
    MERGED_INTO = "merged_into"
    #: a contradiction (or a hand supersession): a later fact replaces it
    SUPERSEDED_BY = "superseded_by"
    #: a merge found its text already said by a live entry, which took it in
    FOLDED_INTO = "folded_into"
    #: the same text (after normalising) as an older entry, folded into that one
    DUPLICATE_OF = "duplicate_of"
    #: no successor: archived on its own (forgotten, removed as noise) or not an archive at all
    NONE = "none"

    @property
    def merged(self) -> bool:
        """Its fact lives on in the successor's text (``merged_into`` of ``memory_get``), not replaced by it."""
        return self in (SuccessorHow.MERGED_INTO, SuccessorHow.FOLDED_INTO, SuccessorHow.DUPLICATE_OF)


TARGET_TYPES = ("memory", "skill")


@dataclass(frozen=True)
class ChangeRow:
    """One change as it is written: give ``actor`` or ``pass_name`` (or both); the other follows. A successor is
    given as ``successor_id`` and ``successor_how`` together, or neither."""

    cycle_id: str
    kind: str
    target_type: str
    target_id: str
    before: MemoryEntry | Skill | dict | None
    after: MemoryEntry | Skill | dict | None
    reason: str
    actor: Actor | None = None
    pass_name: str = ""
    successor_id: str | None = None
    successor_how: SuccessorHow = SuccessorHow.NONE

    def __post_init__(self) -> None:
        if (
            type(self.actor) is Actor
            and type(self.successor_how) is SuccessorHow
            and self.cycle_id
            and self.target_type in TARGET_TYPES
            and (self.pass_name or self.actor is not Actor.PASS)
            and (self.successor_how is SuccessorHow.NONE) == (self.successor_id is None)
            and (self.actor is Actor.PASS or self.pass_name in ("", ACTOR_PASS_NAMES[self.actor]))
            and not (self.actor is Actor.PASS and self.pass_name in _ACTOR_OF_PASS)
        ):  # the common case, checked without conversions (a pass writes a row per entry of a large corpus)
            if not self.pass_name:
                object.__setattr__(self, "pass_name", ACTOR_PASS_NAMES[self.actor])
            return
        if not self.cycle_id:
            raise ValueError("ChangeRow: field cycle_id is empty")
        if self.target_type not in TARGET_TYPES:
            raise ValueError(f"ChangeRow: field target_type {self.target_type!r} is not memory or skill")
        if self.actor is None and not self.pass_name:
            raise ValueError("ChangeRow: give actor or pass_name")
        actor = Actor(self.actor) if self.actor is not None else actor_of_pass(self.pass_name)
        pass_name = self.pass_name or ACTOR_PASS_NAMES.get(actor, "")
        if actor is Actor.PASS:
            if not pass_name or pass_name in _ACTOR_OF_PASS:
                raise ValueError(f"ChangeRow: a pass's row needs the pass's name as pass_name, not {pass_name!r}")
        elif pass_name != ACTOR_PASS_NAMES[actor]:
            raise ValueError(
                f"ChangeRow: actor {actor.value} is recorded under pass_name {ACTOR_PASS_NAMES[actor]!r}, "
                f"not {pass_name!r}"
            )
        how = SuccessorHow(self.successor_how)
        if (how is SuccessorHow.NONE) != (not self.successor_id):
            raise ValueError(
                f"ChangeRow: field successor_id {self.successor_id!r} and successor_how {how.value} go together"
            )
        object.__setattr__(self, "actor", actor)
        object.__setattr__(self, "pass_name", pass_name)
        object.__setattr__(self, "successor_how", how)
        object.__setattr__(self, "successor_id", self.successor_id or None)

    def to_json(self) -> dict[str, Any]:
        """The row as JSON-ready values (records as dicts): what a pending review set keeps."""
        return {
            "cycle_id": self.cycle_id,
            "actor": str(self.actor),
            "pass_name": self.pass_name,
            "kind": self.kind,
            "target_type": self.target_type,
            "target_id": self.target_id,
            "before": _as_dict(self.before),
            "after": _as_dict(self.after),
            "reason": self.reason,
            "successor_id": self.successor_id,
            "successor_how": str(self.successor_how),
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> ChangeRow:
        """A row of ``to_json``. One written before actors and successors (no such keys) gets its actor from its pass
        name and no successor: the store's upgrade gave pending rows theirs (``legacy_successor``)."""
        return cls(
            cycle_id=data["cycle_id"],
            actor=Actor(data["actor"]) if data.get("actor") else None,
            pass_name=data.get("pass_name") or "",
            kind=data["kind"],
            target_type=data["target_type"],
            target_id=data["target_id"],
            before=data.get("before"),
            after=data.get("after"),
            reason=data.get("reason") or "",
            successor_id=data.get("successor_id") or None,
            successor_how=SuccessorHow(data.get("successor_how") or SuccessorHow.NONE),
        )


def _as_dict(obj: MemoryEntry | Skill | dict | None) -> dict | None:
    if obj is None or isinstance(obj, dict):
        return obj
    return obj.to_dict()


# --- rows written before the successor fields ------------------------------------------------------------------------

#: The reasons the archiving code wrote before the fields existed, each the whole reason (up to a supersession's
#: ": why"), the successor's id where the writer put it.
_LEGACY_REASONS = (
    (re.compile(r"superseded by (.+?)(?:: .*)?", re.IGNORECASE | re.DOTALL), SuccessorHow.SUPERSEDED_BY),
    (re.compile(r"merged into existing entry (.+)", re.IGNORECASE | re.DOTALL), SuccessorHow.FOLDED_INTO),
    (re.compile(r"exact duplicate of (.+?), folded into it", re.IGNORECASE | re.DOTALL), SuccessorHow.DUPLICATE_OF),
    (re.compile(r"merged into (.+)", re.IGNORECASE | re.DOTALL), SuccessorHow.MERGED_INTO),
)


def legacy_successor(kind: str, reason: str | None) -> tuple[str | None, SuccessorHow]:
    """Where an entry (or a skill) archived by a version without the successor fields went, read from the reason that
    version wrote: "merged into <id>", "merged into existing entry <id>", "superseded by <id>: <why>", "exact
    duplicate of <id>, folded into it", a skill's "merged into <name>". Only for data written before the fields: a
    store's upgrade, an old pending review set, an export or a snapshot without them. A reason that is not one of
    those (a forget's reason, the agent's own words, may say anything) has no successor."""
    if kind != "archived" or not reason:
        return None, SuccessorHow.NONE
    for pattern, how in _LEGACY_REASONS:
        m = pattern.fullmatch(reason.strip())
        if m and m.group(1).strip():
            return m.group(1).strip(), how
    return None, SuccessorHow.NONE
