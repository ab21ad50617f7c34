"""Memory scopes (dream_assets/scope.py): which wall each entry and category is behind."""

from __future__ import annotations

from dream_assets.model import MemoryEntry
from dream_assets.scope import ScopeRules

from ..conftest import NOW


def _entry(category: str, **metadata: str) -> MemoryEntry:
    return MemoryEntry(
        id=f"e-{category}",
        content="x",
        category=category,
        tags=(),
        importance=0.5,
        created_at=NOW,
        updated_at=NOW,
        last_seen_at=NOW,
        metadata=dict(metadata),
    )


def test_declared_patterns_bind_their_wildcards_and_the_first_match_decides():
    rules = ScopeRules.of(" users/* , clients,, ")
    assert rules.of_category("users/alice/work") == rules.of_category("users/alice") == "category:users/alice"
    assert rules.of_category("users/bob") == "category:users/bob"
    assert rules.of_category("users") == "" and rules.of_category("general") == ""
    assert rules.of_category("clients/acme/x") == rules.of_category("clients/beta") == "category:clients"
    assert rules.of_category("/users//alice/") == "category:users/alice"  # labels as the LangGraph store reads them
    assert ScopeRules.of("").walls is False and ScopeRules.of("").of_category("users/alice") == ""


def test_langgraph_namespaces_are_walls_and_a_merged_entry_keeps_its_namespace_only():
    item = _entry("memories/alice", langgraphNamespace='["memories", "alice"]')
    plain = _entry("memories/alice")
    merged = _entry("memories/carol", memoryScope="namespace:memories/carol")
    declared = _entry("users/dan", memoryScope="category:users/dan")
    rules = ScopeRules.of("", [item, plain, merged, declared])
    assert rules.walls
    assert rules.of_entry(item) == rules.of_entry(plain) == "namespace:memories/alice"
    assert rules.of_entry(merged) == rules.of_category("memories/carol") == "namespace:memories/carol"
    assert rules.of_entry(declared) == ""  # a declared scope follows the option, which no longer names it
    assert rules.of_category("memories/bob") == ""
