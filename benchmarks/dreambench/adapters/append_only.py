"""The floor: no consolidation at all. Every save is kept as its own entry and searched with BM25; nothing is ever
merged, rewritten or lost, and no model is called. A consolidator that does worse than this on facts kept has made
memory worse than not dreaming."""

from __future__ import annotations

from datetime import datetime

from .base import Kept
from .bm25 import BM25


class AppendOnly:
    name = "append_only"

    def __init__(self, **_: object) -> None:
        self.texts: list[str] = []
        self.index = BM25()

    def save(self, text: str, when: datetime) -> None:
        self.texts.append(text)
        self.index.add(text)

    def consolidate(self, when: datetime) -> None:
        pass

    def search(self, query: str, k: int) -> list[str]:
        return [self.texts[i] for i in self.index.top(query, k)]

    def dump(self) -> list[Kept]:
        return [Kept(t) for t in self.texts]

    def tokens_used(self) -> int:
        return 0

    def close(self) -> None:
        pass
