"""User-correction standing: whether a memory is the user's own correction, which no agent claim may supersede.

Standing is decided by the host, never by the model. An entry saved from feedback of kind Correction (metadata
``feedbackKind`` = ``Correction``) or stated by the user (metadata ``source`` = ``user``, ``user-stated``,
``user-correction`` or ``correction``), tagged ``user-correction``, or filed under ``feedback/from-user`` with the tag
``correction`` is a user correction (the signs are read in one place: ``model.user_correction_signs``). An entry a
consolidation merge or fold writes carries the host's decision in its metadata (``userCorrection`` = ``true`` /
``false``): it is a user correction exactly when one of the entries it combines was, whatever tags the model gave it,
so a merge can neither forge the standing nor lose it. Tags the model proposes lose the ones that would grant it
(:func:`without_standing_tags`). Recall (store/recall.py) ranks a user correction above the claims it corrects by the
same decision, which is why it lives with the store.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence

from dream_assets.model import (
    CORRECTION_METADATA_KEYS,
    USER_CORRECTION_TAG,
    USER_SOURCES,
    MemoryEntry,
    user_correction_signs,
)

#: Tags that confer standing (alone or with a category): the model may not hand them out.
STANDING_TAGS = frozenset({USER_CORRECTION_TAG, "correction"})
#: Metadata of an entry consolidation wrote: the host's decision, which overrides every other sign.
STANDING_KEY = "userCorrection"
#: Every metadata key standing is read from.
STANDING_METADATA_KEYS = frozenset({STANDING_KEY, *CORRECTION_METADATA_KEYS})

__all__ = [
    "STANDING_KEY",
    "STANDING_METADATA_KEYS",
    "STANDING_TAGS",
    "USER_CORRECTION_TAG",
    "USER_SOURCES",
    "correction_standing",
    "is_user_correction",
    "merged_standing",
    "with_standing",
    "without_standing_tags",
]


def is_user_correction(entry: MemoryEntry) -> bool:
    """The one decision of standing: the host's recorded decision when the entry carries one, else the signs of a
    user correction the agent saved."""
    return correction_standing(entry.category, entry.tags, entry.metadata)


def correction_standing(category: str, tags: Iterable[str], metadata: Mapping[str, str]) -> bool:
    """``is_user_correction`` of a row's fields (what the recall index keeps of an entry it does not hold)."""
    decided = metadata.get(STANDING_KEY)
    if decided is not None:
        return str(decided).strip().casefold() == "true"
    return user_correction_signs(category, tags, metadata)


def merged_standing(sources: Iterable[MemoryEntry]) -> bool:
    """An entry combining ``sources`` is a user correction exactly when one of them was."""
    return any(is_user_correction(s) for s in sources)


def without_standing_tags(tags: Iterable[str]) -> list[str]:
    """The model's tags less those that would grant standing."""
    return [t for t in tags if str(t).strip().casefold() not in STANDING_TAGS]


def with_standing(entry: MemoryEntry, sources: Sequence[MemoryEntry]) -> MemoryEntry:
    """``entry`` (written from ``sources``) with the host's standing decision: recorded in its metadata, and the
    ``user-correction`` tag present exactly when it holds."""
    standing = merged_standing(sources)
    tags = set(without_standing_tags(entry.tags)) | ({USER_CORRECTION_TAG} if standing else set())
    return entry.with_(
        tags=tuple(sorted(tags)), metadata={**entry.metadata, STANDING_KEY: "true" if standing else "false"}
    )
