"""A person's decision that memories stay apart, and the stamps it shares with memory consolidation: the members of a
cluster shown together and left apart (by the model, by a person rejecting a merge in review or undoing one) carry
the cluster's set id, when it was left apart and how often, and their review stamp, so the consolidation does not
offer them together again before its cooldown. Memory consolidation reads and writes these stamps
(``memory_consolidation/select.py``); review and undo write a person's (``leave_apart``)."""

from __future__ import annotations

import hashlib
from collections.abc import Mapping, Sequence
from datetime import datetime

from dream_assets.changes_model import Actor, ChangeRow
from dream_assets.model import MemoryEntry, iso
from dream_assets.store import DreamStore
from dream_assets.store.changes import STAMP_KIND
from dream_assets.text.content_hash import stable_hash

#: Metadata key of the review stamp (spec: "consolidationReviewedHash in entry metadata").
REVIEWED_KEY = "consolidationReviewedHash"
#: Metadata of the members of a cluster shown together and left apart.
CLUSTER_SET_KEY = "consolidationClusterSet"
CLUSTER_LEFT_AT_KEY = "consolidationClusterLeftAt"
CLUSTER_DECLINED_KEY = "consolidationClusterDeclined"
#: Metadata of every entry a model call showed or wrote: the stamp of the rules it was judged by (``rules_stamp``).
RULES_KEY = "consolidationRules"
#: The rules stamp of a cluster a person left apart (a merge rejected in review): no change of rules re-offers it.
PERSON_RULES = "person"


def cluster_set_id(ids: Sequence[str]) -> str:
    """A stable id of a member set, order-free."""
    return stable_hash("consolidation-cluster-set", sorted(set(ids)))[:16]


def declined_count(metadata: Mapping[str, str]) -> int:
    try:
        return max(0, int(metadata.get(CLUSTER_DECLINED_KEY, "0")))
    except ValueError:
        return 0


def left_apart_stamps(members: Sequence[MemoryEntry], now: datetime) -> dict[str, dict[str, str]]:
    """The stamps of a cluster shown together and left apart (by the model, or by a person rejecting its merge):
    each member carries the cluster's set id, when it was left apart, and one more decline than before."""
    set_id = cluster_set_id([m.id for m in members])
    before = max((declined_count(m.metadata) for m in members if m.metadata.get(CLUSTER_SET_KEY) == set_id), default=0)
    stamp = {CLUSTER_SET_KEY: set_id, CLUSTER_LEFT_AT_KEY: iso(now) or "", CLUSTER_DECLINED_KEY: str(before + 1)}
    return {m.id: dict(stamp) for m in members}


def review_hash(entry: MemoryEntry) -> str:
    """The review fingerprint of an entry as it is now: content, category, tags, reinforcement and last-seen time.

    ``review_fingerprint(entry.content, entry.category, entry.tags, entry.reinforcement_count,
    iso(entry.last_seen_at))``, byte for byte (text/content_hash.py's encoding: a type tag, an 8-byte length and the
    payload per field), written out for these five fields: a selection hashes every live entry, and the generic
    encoder costs several times more per entry."""
    tags = b"".join(_text_field(t) for t in sorted({t for t in entry.tags if t}))
    count = str(int(entry.reinforcement_count)).encode("ascii")
    seen = iso(entry.last_seen_at)
    digest = hashlib.sha256(_REVIEW_PREFIX)
    digest.update(_text_field(entry.content))
    digest.update(_text_field(entry.category))
    digest.update(b"l" + len(tags).to_bytes(8, "big") + tags)
    digest.update(b"i" + len(count).to_bytes(8, "big") + count)
    digest.update(b"N" + bytes(8) if seen is None else _text_field(seen))
    return digest.hexdigest()


def _text_field(text: str) -> bytes:
    data = text.encode("utf-8")
    return b"s" + len(data).to_bytes(8, "big") + data


_REVIEW_PREFIX = b"dream-assets:v1" + _text_field("memory-review")


def leave_apart(
    store: DreamStore, ids: Sequence[str], *, cycle_id: str, actor: Actor, reason: str, now: datetime
) -> list[str]:
    """A person's decision that these memories stay apart (a merge rejected in review, or undone): the live ones
    carry the set's left-apart stamps with the person's rules stamp, so no change of rules re-offers them before the
    cooldown, each stamp recorded as a review-stamp row of ``cycle_id``. Returns the ids stamped (none when fewer
    than two are live)."""
    sources = [e for e in store.memories.get_many(ids).values() if not e.is_archived]
    if len(sources) < 2:
        return []
    updates = left_apart_stamps(sources, now)
    for e in sources:  # shown and left as they are: reviewed, as the pass stamps what it leaves
        updates[e.id][REVIEWED_KEY] = review_hash(e)
        updates[e.id][RULES_KEY] = PERSON_RULES  # a person's decision: no change of rules re-offers it
    with store.transaction():
        store.memories.set_metadata(updates)
        store.changes.record_many(
            [
                ChangeRow(
                    cycle_id=cycle_id,
                    actor=actor,
                    kind=STAMP_KIND,
                    target_type="memory",
                    target_id=e.id,
                    before=e,
                    after=e.with_(metadata={**e.metadata, **updates[e.id]}),
                    reason=reason,
                )
                for e in sources
            ],
            now=now,
        )
    return [e.id for e in sources]
