"""The passes of a dream cycle by name, in the spec's order: the options' list of passes (``options.PASS_NAMES``,
which gives each its options section).

The registry (registry.py) lists the passes in this order, and a test holds the two together. Review mode applies one
cycle's held changes pass by pass in this order (passes/review.py); it cannot ask the registry, which imports every
pass, while every pass runs through review mode. A pass not named here (one a test adds) is applied last.
"""

from __future__ import annotations

from dream_assets.options import PASS_NAMES

CYCLE_ORDER: tuple[str, ...] = PASS_NAMES
