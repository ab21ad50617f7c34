"""The embeddings benchmark's two recall figures on a hand-made case: a question counts for ``recall10`` only when
every evidence turn has a live home in the top 10, and for the evidence recall by the share of its turns that do."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from types import SimpleNamespace

ROOT = Path(__file__).resolve().parents[2]


def _benchmark():
    spec = importlib.util.spec_from_file_location("embeddings_benchmark", ROOT / "benchmarks" / "embeddings.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_a_question_with_one_of_two_evidence_turns_found_is_a_miss_and_half_an_evidence_hit():
    bench = _benchmark()
    corpus = SimpleNamespace(
        qa=[
            ("where does Gina dance?", [["f1"]]),  # found
            ("what did Jon and Gina open?", [["f2"], ["f3", "f4"]]),  # f2 found, neither f3 nor f4
            ("when did Jon travel?", [["f5"]]),  # its home is not in the top 10
        ]
    )
    homes = {"f1": "e1", "f2": "e2", "f3": "e3", "f4": None, "f5": "e5"}
    top = [SimpleNamespace(id=i) for i in ("e1", "e2", "e9")]
    hits, share = bench.recall10(lambda q: [(e, 1.0) for e in top], corpus, homes)
    assert hits == 1
    assert share == 1.0 + 0.5 + 0.0
