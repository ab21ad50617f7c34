"""Memory consolidation's response contracts: the consolidation answer (the memory-changes shape it shares with
preference inference, passes/memory_vocabulary.py) and the merge repair answer."""

from __future__ import annotations

from dream_assets.llm.contracts import Contract
from dream_assets.passes.memory_vocabulary import MemoryChanges


class MemoryConsolidationResponse(MemoryChanges):
    # No docstring: the JSON schema sent to the endpoint (its title and description) stays the one it always was.
    pass


class MergeRepairResponse(Contract):
    content: str
