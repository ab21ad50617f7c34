"""A whole dream cycle without Dagster: every pass in order over one profile (the library-first entry point)."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import replace
from datetime import datetime
from pathlib import Path

from dream_assets import cycle_ids
from dream_assets.model import utc_or_now
from dream_assets.options import DreamOptions
from dream_assets.options_loader import load_agent_options, with_passes
from dream_assets.passes import registry
from dream_assets.passes.context import PassContext
from dream_assets.passes.report import PassReport
from dream_assets.passes.runner import run_pass
from dream_assets.profile import AgentProfile, as_profile
from dream_assets.recall_index import persist_recall_indexes
from dream_assets.service.folders import linked, read_folder, write_back
from dream_assets.store.cycle_marker import CycleHold


def run_cycle(
    profile: AgentProfile | str | Path,
    options: DreamOptions | None = None,
    now: datetime | None = None,
    *,
    client_factory: Callable | None = None,
    only: Iterable[str] | None = None,
    cycle_id: str | None = None,
    force: Iterable[str] = (),
    force_reason: str | None = None,
) -> list[PassReport]:
    """Run the passes in the spec's order, in this process and without Dagster (``dream run`` runs the same passes
    through Dagster). ``profile``: the agent's folder or profile; ``options``: the agent's own options unless given
    (``load_agent_options``); ``now``: the current UTC time unless given. Returns one report per pass (``status``,
    ``summary``, ``reason``). While it runs the cycle is marked in progress (``store.cycle_marker``), so `dream undo`
    refuses even between two passes. A pass that raises is reported as failed and the cycle goes on (spec: retention is
    best-effort; a model error means "retry next cycle", never "done"); see passes/runner.py. With a memory folder
    linked (``dream link``) and every pass run, the folder is read first and written back last (two more reports,
    ``memory_folder_read`` and ``memory_folder_write``). ``force``: passes that ignore their change gate and
    minimum-interval floor once (`dream run --force`), ``force_reason`` saying why."""
    profile = as_profile(profile)
    options = load_agent_options(profile) if options is None else with_passes(options)
    now = utc_or_now(now)
    wanted = set(only) if only is not None else None
    forced, reason = set(force), (force_reason or "").strip() or "dream run --force"
    ctx = PassContext(
        profile,
        options,
        now,
        cycle_id=cycle_id or cycle_ids.dream_cycle(),
        client_factory=client_factory,
    )
    reports: list[PassReport] = []
    folder = wanted is None and linked(profile)
    # Marked in progress from the first pass to the close: `dream undo` refuses meanwhile, between passes too.
    with CycleHold(profile, ctx.cycle_id, stale_after_s=options.RunTimeout.total_seconds()):
        if folder:
            reports.append(read_folder(profile, options, now))
        for spec in registry.PASSES:  # read when the cycle runs: a pass registered since is run too
            if wanted is not None and spec.name not in wanted:
                continue
            reports.append(run_pass(spec, replace(ctx, force=reason, _store=ctx.store) if spec.name in forced else ctx))
        if folder:
            reports.append(write_back(profile, options, now, cycle_id=ctx.cycle_id))
    # The next process (a search from the shell, the next cycle) loads the recall index instead of rebuilding it.
    persist_recall_indexes(db_path=profile.store_path)
    return reports
