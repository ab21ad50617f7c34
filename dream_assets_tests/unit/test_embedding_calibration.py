"""The calibrated near-duplicate threshold measures pairs of different texts: one text saved several times (one
vector, repeated) is not a pair of different facts, and a corpus not yet consolidated holds many of them."""

from __future__ import annotations

import numpy as np
import pytest

from dream_assets.llm.embedding_threshold import calibrate


def _unit_rows(n: int, dim: int = 64, seed: int = 3) -> np.ndarray:
    rows = np.random.default_rng(seed).standard_normal((n, dim)).astype(np.float32)
    return rows / np.linalg.norm(rows, axis=1, keepdims=True)


def test_texts_saved_twice_do_not_move_the_threshold() -> None:
    distinct = _unit_rows(40)
    repeated = np.concatenate([distinct, distinct[:20], distinct[:20]])  # half of them saved three times
    alone = calibrate(distinct)
    assert calibrate(repeated) == alone
    # without the rule, 40 of the 1,770 pairs (2 %) would be identical and the 99th percentile would be 1.0
    assert alone["pair_q99"] < 0.9 and alone["threshold"] < 0.9


def test_one_text_everywhere_is_nothing_to_measure() -> None:
    same = np.repeat(_unit_rows(1), 35, axis=0)
    with pytest.raises(ValueError, match="at least 2 different"):
        calibrate(same)
