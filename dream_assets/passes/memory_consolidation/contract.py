"""Memory consolidation's response contracts: the consolidation answer (the memory-changes shape it shares with
preference inference, passes/memory_vocabulary.py), the one-cluster check (the call shape for small models) and the
merge repair answer."""

from __future__ import annotations

from typing import Literal

from dream_assets.llm.contracts import Contract
from dream_assets.passes.memory_vocabulary import MemoryChanges


class MemoryConsolidationResponse(MemoryChanges):
    # No docstring: the JSON schema sent to the endpoint (its title and description) stays the one it always was.
    pass


class ClusterCheckResponse(Contract):
    # The fields in the order a small model should write them: what differs, then the verdict, then the merged text.
    differences: str = ""
    decision: Literal["merge", "keep"]
    content: str = ""


class MergeRepairResponse(Contract):
    content: str
