"""Reciprocal rank fusion of BM25's and the embeddings' lists (dream_assets/recall_fusion.py)."""

from __future__ import annotations

import pytest

from dream_assets.recall_fusion import fuse_ranks


def test_an_entry_both_lists_find_comes_before_one_only_a_single_list_ranks_first():
    fused = [doc for doc, _ in fuse_ranks(["a", "b", "c"], ["x", "c", "y"], k=60)]
    assert fused[0] == "c"  # third and second beats first and absent
    assert set(fused) == {"a", "b", "c", "x", "y"}


def test_a_heavier_list_wins_a_tie_of_places_and_scores_never_rise_down_the_list():
    even = fuse_ranks(["a"], ["x"], k=5)
    assert [d for d, _ in even] == ["a", "x"]  # a tie of places: by id
    heavy = fuse_ranks(["a"], ["x"], k=5, weights=(1.0, 2.0))
    assert [d for d, _ in heavy] == ["x", "a"]
    scores = [s for _, s in fuse_ranks(["a", "b", "c", "d"], ["d", "c", "e"], k=1, weights=(1.0, 2.0))]
    assert scores == sorted(scores, reverse=True)


def test_a_weight_per_list_is_required():
    with pytest.raises(ValueError, match="1 weight"):
        fuse_ranks(["a"], ["b"], weights=(1.0,))
