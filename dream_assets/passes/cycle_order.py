"""The passes of a dream cycle by name, in the spec's order.

The registry (registry.py) lists the passes in this order, and a test holds the two together. Review mode applies one
cycle's held changes pass by pass in this order (passes/review.py); it cannot ask the registry, which imports every
pass, while every pass runs through review mode. A pass not named here (one a test adds) is applied last.
"""

from __future__ import annotations

CYCLE_ORDER: tuple[str, ...] = (
    "log_retention",
    "archive_purge",
    "importance_decay",
    "memory_consolidation",
    "skill_gap_detection",
    "wisp_failure_analysis",
    "skill_consolidation",
    "skill_optimization",
    "preference_inference",
    "tier_routing_review",
    "contradiction_sweep",
)
