"""A plain Okapi BM25 over a list of texts (k1 = 1.2, b = 0.75), for the adapters that keep text without an index
of their own."""

from __future__ import annotations

import math
import re
from collections import Counter

_TOKEN = re.compile(r"[a-z0-9]+")


def tokens(text: str) -> list[str]:
    return _TOKEN.findall(text.lower())


class BM25:
    def __init__(self, k1: float = 1.2, b: float = 0.75) -> None:
        self.k1, self.b = k1, b
        self.reset([])

    def add(self, text: str) -> None:
        counts = Counter(tokens(text))
        doc = len(self.lengths)
        self.lengths.append(sum(counts.values()))
        for term, tf in counts.items():
            self.postings.setdefault(term, []).append((doc, tf))

    def reset(self, texts: list[str]) -> None:
        self.lengths: list[int] = []
        self.postings: dict[str, list[tuple[int, int]]] = {}
        for t in texts:
            self.add(t)

    def top(self, query: str, k: int) -> list[int]:
        """Indexes of the ``k`` best texts for ``query``, best first (ties: the newer text first)."""
        n = len(self.lengths)
        if not n:
            return []
        avg = sum(self.lengths) / n or 1.0
        scores: dict[int, float] = {}
        for term in set(tokens(query)):
            posting = self.postings.get(term, ())
            if not posting:
                continue
            idf = math.log(1 + (n - len(posting) + 0.5) / (len(posting) + 0.5))
            for doc, tf in posting:
                norm = tf * (self.k1 + 1) / (tf + self.k1 * (1 - self.b + self.b * self.lengths[doc] / avg))
                scores[doc] = scores.get(doc, 0.0) + idf * norm
        return sorted(scores, key=lambda i: (-scores[i], -i))[:k]
