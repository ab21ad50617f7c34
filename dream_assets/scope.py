"""Memory scopes: walls a user declared, which no merge, supersession or save-time dedup crosses.

An entry's scope is a string; two entries may be joined (merged into one, one superseding the other, a save absorbed
by a live entry) only when their scopes are equal, and a merge may file its result only under a category of that same
scope. The empty scope is the shared pool of every entry no wall holds: a scoped entry never joins it either way.

- **LangGraph namespaces are always walls.** An entry the LangGraph store wrote (it carries ``langgraphNamespace``)
  is in the scope of its category, the namespace it encodes (``namespace:memories/alice``), and so is every entry of
  a category such an entry lives in (an entry saved another way into that namespace).
- **Categories a user declared** with the option ``MemoryScopeCategories``: comma-separated category patterns, labels
  split on ``/``, ``*`` matching any one label. A category whose labels begin with a pattern's is in that pattern's
  scope, the matched labels with the wildcards bound: with ``users/*``, ``users/alice/facts`` and ``users/alice`` are
  the scope ``category:users/alice`` and ``users/bob/prefs`` is ``category:users/bob``; with ``clients``, every
  category under ``clients/`` is one scope apart from the rest. The first pattern that matches decides. Default:
  none, so categories other than LangGraph namespaces share one pool and the dream may move a fact between them.
- **A merged entry keeps its sources' namespace** in its metadata (``memoryScope``), so the wall stands after every
  item that declared it was merged away. A declared scope is not carried: the option is the truth, and removing a
  pattern takes its wall down.

The host enforces the walls; a model only proposes: clustering and candidate selection group only entries of one
scope, an answer that joins entries of different scopes is refused per item with its reason, and save-time dedup
only ever compares entries of one category (store/dedup.py), hence of one scope.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from dream_assets.model import MemoryEntry

#: Metadata of a merged entry: the LangGraph namespace its sources shared (a wall outlives the items that declared it).
SCOPE_KEY = "memoryScope"
#: Metadata the LangGraph store writes on each item's entry: the item's namespace (JSON list of labels).
LANGGRAPH_NAMESPACE_KEY = "langgraphNamespace"
NAMESPACE_PREFIX = "namespace:"
CATEGORY_PREFIX = "category:"


def labels_of(category: str) -> tuple[str, ...]:
    """A category as its labels: split on ``/``, empty parts dropped (the LangGraph store's namespace)."""
    return tuple(label for label in category.split("/") if label)


def parse_patterns(text: str) -> tuple[tuple[str, ...], ...]:
    """The patterns of ``MemoryScopeCategories`` (comma-separated; blank ones skipped)."""
    return tuple(labels for part in (text or "").split(",") if (labels := labels_of(part.strip())))


@dataclass(frozen=True)
class ScopeRules:
    """Which scope each entry and category is in. Build it with :meth:`of` from the options and the entries at hand
    (their LangGraph namespaces are walls)."""

    patterns: tuple[tuple[str, ...], ...] = ()
    namespaces: frozenset[str] = frozenset()  # categories that are LangGraph namespaces

    @classmethod
    def of(cls, patterns: str, entries: Iterable[MemoryEntry] = ()) -> ScopeRules:
        """``patterns``: the option ``MemoryScopeCategories``; ``entries``: the corpus (its LangGraph namespaces, and
        the namespaces merged entries carry, are walls)."""
        namespaces = set()
        for e in entries:
            carried = e.metadata.get(SCOPE_KEY, "")
            if LANGGRAPH_NAMESPACE_KEY in e.metadata:
                namespaces.add(e.category)
            elif carried.startswith(NAMESPACE_PREFIX):
                namespaces.add(carried[len(NAMESPACE_PREFIX) :])
        return cls(parse_patterns(patterns), frozenset(namespaces))

    @property
    def walls(self) -> bool:
        """Whether any wall stands (a declared pattern or a LangGraph namespace): without one every entry is in the
        shared pool."""
        return bool(self.patterns or self.namespaces)

    def of_category(self, category: str) -> str:
        """The scope of a category ("" when no wall holds it)."""
        if category in self.namespaces:
            return NAMESPACE_PREFIX + category
        labels = labels_of(category)
        for pattern in self.patterns:
            if len(labels) >= len(pattern) and all(p == "*" or p == n for p, n in zip(pattern, labels, strict=False)):
                return CATEGORY_PREFIX + "/".join(labels[: len(pattern)])
        return ""

    def of_entry(self, entry: MemoryEntry) -> str:
        """The scope of an entry: the one its metadata carries (a LangGraph item, a merged entry), else its
        category's."""
        if LANGGRAPH_NAMESPACE_KEY in entry.metadata:
            return NAMESPACE_PREFIX + entry.category
        carried = entry.metadata.get(SCOPE_KEY, "")
        if carried.startswith(NAMESPACE_PREFIX):
            return carried
        return self.of_category(entry.category)

    def spans(self, entries: Iterable[MemoryEntry]) -> list[str]:
        """The distinct scopes of ``entries``, in order of first appearance."""
        return list(dict.fromkeys(self.of_entry(e) for e in entries))


def describe(scope: str) -> str:
    """A scope as a person reads it."""
    if scope.startswith(NAMESPACE_PREFIX):
        return f"LangGraph namespace {scope[len(NAMESPACE_PREFIX) :]!r}"
    if scope.startswith(CATEGORY_PREFIX):
        return f"scope {scope[len(CATEGORY_PREFIX) :]!r} (MemoryScopeCategories)"
    return "the shared pool (no scope)"
