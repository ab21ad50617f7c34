"""Memory consolidation: does the prompt scale with what the agent did, not with the corpus? (spec "The change gate",
"Candidate gating").

For each corpus size n: build the demo agent with n memories, run the pass once with the offline backend (which
stamps every entry it was shown as reviewed), add 10 new entries, run the pass again and measure the second run.
Prints one JSON object per line:

* consolidation.prompt_chars — characters of the second run's prompt (target: equal within 10 % across n);
* consolidation.eligible — entries shown on the second run;
* consolidation.select_s — seconds spent selecting candidates on the second run (list the live corpus, review
  fingerprints, near-duplicate scan); target <= 30 s at n = 100,000;
* consolidation.first_run_s — seconds of the whole first run (the one-off cost of reviewing an unreviewed corpus).

Usage: .venv/bin/python benchmarks/consolidation.py [--quick | --n N]   (--quick: n = 1,000 and 10,000 only;
--n: n = 1,000 and N instead of 100,000). At --n 1000000 consolidation.select_s targets <= 60 s; the first run there
shows the whole unreviewed corpus in one call and takes minutes and several GB of memory.
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

from dream_assets.demo import build_demo_profile
from dream_assets.model import MemoryEntry
from dream_assets.options_loader import dream_options
from dream_assets.passes.context import PassContext
from dream_assets.passes.memory_consolidation import run_memory_consolidation
from dream_assets.profile import AgentProfile
from dream_assets.store import open_store

NOW = datetime(2026, 11, 30, 12, 0, tzinfo=UTC)
NEW_FACTS = [
    "The user's new dentist is Dr. Okafor in Accra.",
    "Project Nimbus moved its standup to 10:15 on Tuesdays.",
    "The Orinoco grant report is due on March 3, 2027.",
    "The user switched from Jira to Linear for personal tasks.",
    "Rafael Costa joined the Pioneer team as SRE.",
    "The Uppsala office closes early on Fridays in July.",
    "The user's car is booked for service at Auto Brandt on 2027-01-12.",
    "Quartz uses ClickHouse for event analytics since December.",
    "Mei Lin prefers Signal over Slack for urgent messages.",
    "The user's gym membership renews every 14 months.",
]


def emit(name: str, n: int, value: float, unit: str) -> None:
    print(json.dumps({"name": name, "n": n, "value": round(value, 4), "unit": unit}), flush=True)


def measure(n: int, root: Path) -> None:
    profile = AgentProfile(root / f"agent-{n}").ensure()
    options = dream_options(ConsolidationMinInterval=timedelta(0), LlmBackend="offline")
    build_demo_profile(profile, NOW, options=options, n_memories=n, with_logs=False)

    started = time.perf_counter()
    # The one-off first review is shown in one call here (no per-call cap), so the measured second run starts from a
    # fully reviewed corpus; the measured run uses the default cap.
    uncapped = options.replace(ConsolidationMaxEntriesPerCall=n + 10)
    first = run_memory_consolidation(PassContext(profile, uncapped, NOW, cycle_id=f"bench-{n}-1"))
    emit("consolidation.first_run_s", n, time.perf_counter() - started, "s")
    if first.status != "completed":
        raise SystemExit(f"first run at n={n} did not complete: {first.reason}")

    later = NOW + timedelta(hours=7)
    open_store(profile, options).memories.put_many(
        [
            MemoryEntry(
                id=f"bench-new-{i}",
                content=text,
                category="facts",
                tags=("bench",),
                importance=0.5,
                created_at=later,
                updated_at=later,
                last_seen_at=later,
            )
            for i, text in enumerate(NEW_FACTS)
        ]
    )
    second = run_memory_consolidation(
        PassContext(profile, options, later + timedelta(minutes=1), cycle_id=f"bench-{n}-2")
    )
    if second.status != "completed":
        raise SystemExit(f"second run at n={n} did not complete: {second.reason}")
    emit("consolidation.prompt_chars", n, float(second.extra.get("prompt_chars", 0)), "chars")
    emit("consolidation.eligible", n, float(second.counts.get("eligible", 0)), "entries")
    emit("consolidation.select_s", n, float(second.extra.get("select_s", 0.0)), "s")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="n = 1,000 and 10,000 only")
    parser.add_argument("--n", type=int, default=100_000, help="the larger corpus size (the smaller is 1,000)")
    args = parser.parse_args()
    sizes = (1_000, 10_000) if args.quick else (1_000, args.n)
    with tempfile.TemporaryDirectory(prefix="dream-bench-consolidation-") as tmp:
        for n in sizes:
            measure(n, Path(tmp))


if __name__ == "__main__":
    main()
