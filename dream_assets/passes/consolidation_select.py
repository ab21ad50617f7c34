"""Candidate gating for memory consolidation: which entries the model is allowed to see this cycle.

Spec "Pass 1 — Memory consolidation", "Candidate gating": an entry is eligible only if it is (a) new or changed since
its last review, or (b) a member of a near-duplicate cluster that is not settled. Everything else is withheld, and
therefore cannot be archived this cycle — exposure compounds, so each entry should face roughly one decision per
content change, not one per cycle.

Review state is a content fingerprint stamped in the entry's metadata (``consolidationReviewedHash``): any write path
(reinforcement, a tool edit, a prior merge) changes it and re-opens the entry, importance decay does not. A cluster
whose members are all reviewed and unchanged was shown to the model together on the cycle that stamped it, so it is
not re-offered; one new or edited member re-opens the whole cluster. When the near-duplicate scan fails the gate
degrades to unreviewed-only, never to the whole corpus.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from dream_assets.model import MemoryEntry, iso
from dream_assets.store.connection import StoreError
from dream_assets.text.fingerprint import review_fingerprint
from dream_assets.text.similarity import DuplicateClusters

#: Metadata key of the review stamp (spec: "consolidationReviewedHash in entry metadata").
REVIEWED_KEY = "consolidationReviewedHash"


def review_hash(entry: MemoryEntry) -> str:
    """The review fingerprint of an entry as it is now: content, category, tags, reinforcement and last-seen time."""
    return review_fingerprint(entry.content, entry.category, entry.tags, entry.reinforcement_count,
                              iso(entry.last_seen_at))


def is_reviewed(entry: MemoryEntry, current_hash: str | None = None) -> bool:
    """Reviewed and unchanged since: the stamp equals the fingerprint of the entry as it is now."""
    stamp = entry.metadata.get(REVIEWED_KEY)
    return bool(stamp) and stamp == (current_hash if current_hash is not None else review_hash(entry))


@dataclass
class Selection:
    """What the model may see this cycle, and the review fingerprint of each shown entry as it was shown."""

    live: int
    eligible: dict[str, MemoryEntry]            # id -> the entry as shown (the only ids a response can resolve to)
    shown_hash: dict[str, str]                  # id -> review fingerprint when shown (compared again at apply time)
    clusters: list[list[str]]                   # open near-duplicate clusters offered to the model
    unreviewed: int                             # entries new or changed since their last review
    settled_clusters: int                       # clusters withheld because every member is reviewed and unchanged
    scan_method: str = ""
    warnings: list[str] = field(default_factory=list)
    backlog: int = 0                            # eligible but over the per-call cap: not shown, not stamped, next cycle

    @property
    def withheld(self) -> int:
        return self.live - len(self.eligible)

    def entries(self) -> list[MemoryEntry]:
        return list(self.eligible.values())


def select_candidates(live: Sequence[MemoryEntry], scan: Callable[[], DuplicateClusters],
                      max_entries: int | None = None, *, review_all: bool = False) -> Selection:
    """Gate the live corpus. ``scan`` returns the near-duplicate clusters of the live corpus (the store's
    duplicate-candidate scan); when it raises, the selection is the unreviewed entries alone, with a warning.

    ``max_entries`` caps what one call shows (whole open clusters first, then single new or changed entries, in
    corpus order); the rest is not shown and not stamped, so it stays eligible for the next cycle.
    ``review_all`` (a forced run, asked for by a person) treats every entry as unreviewed, once."""
    hashes = {e.id: review_hash(e) for e in live}
    by_id = {e.id: e for e in live}
    really_unreviewed = {e.id for e in live if not is_reviewed(e, hashes[e.id])}
    unreviewed = set(by_id) if review_all else really_unreviewed
    warnings: list[str] = []
    clusters: list[list[str]] = []
    settled = 0
    method = ""
    try:
        found = scan()
    except StoreError:
        raise  # the store itself is busy or damaged: the pass fails (and says so), it does not carry on around it
    except Exception as exc:  # noqa: BLE001 - any scan failure degrades the same way (spec: never the whole corpus)
        warnings.append(f"near-duplicate scan failed ({type(exc).__name__}: {exc}); only new or changed entries are "
                        "eligible this cycle")
    else:
        method = found.method
        if found.warning:
            warnings.append(found.warning)
        for cluster in found.clusters:
            members = [i for i in cluster if i in by_id]
            if len(members) < 2:
                continue
            if any(i in unreviewed for i in members):
                clusters.append(members)
            else:
                settled += 1  # shown together on the cycle that stamped them: re-offering re-asks an answered question
    eligible_ids: set[str] = set()
    shown_clusters: list[list[str]] = []
    cap = max_entries if max_entries and max_entries > 0 else None
    for cluster in clusters:
        if cap is not None and len(eligible_ids | set(cluster)) > cap:
            continue
        eligible_ids.update(cluster)
        shown_clusters.append(cluster)
    for e in live:
        if e.id in unreviewed and (cap is None or len(eligible_ids) < cap):
            eligible_ids.add(e.id)
    # Only what is really new or changed waits for a later cycle: what a forced run leaves unshown stays reviewed.
    waiting = [c for c in clusters if not review_all or any(i in really_unreviewed for i in c)]
    backlog = len((really_unreviewed | {i for c in waiting for i in c}) - eligible_ids)
    # Keep corpus order (created_at, id) so everything downstream is deterministic.
    eligible = {e.id: e for e in live if e.id in eligible_ids}
    return Selection(live=len(live), eligible=eligible, shown_hash={i: hashes[i] for i in eligible},
                     clusters=shown_clusters, unreviewed=len(really_unreviewed), settled_clusters=settled,
                     scan_method=method, warnings=warnings, backlog=backlog)
