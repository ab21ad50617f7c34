"""The `dream` command: set up a profile, run a cycle through Dagster, undo a cycle, import logs, show status."""

from __future__ import annotations

import argparse
import logging
import os
import shutil
import sys
import warnings
from datetime import UTC, datetime
from pathlib import Path

from dream_assets.model import parse_ts
from dream_assets.options import DreamOptions, OptionsError
from dream_assets.profile import AgentProfile

DEMO_PROFILE = "data/agents/demo"


def _now(args: argparse.Namespace) -> datetime:
    return parse_ts(args.now) if getattr(args, "now", None) else datetime.now(UTC)


def _profile(args: argparse.Namespace) -> AgentProfile:
    return AgentProfile(Path(args.profile))


def _options(profile: AgentProfile) -> DreamOptions:
    return DreamOptions.load(env=os.environ, profile_toml=profile.options_path)


def cmd_init(args: argparse.Namespace) -> int:
    from dream_assets.demo import build_demo_profile

    profile = _profile(args)
    if profile.store_path.exists():
        if args.if_missing:
            print(f"profile {profile.root} already exists; leaving it as it is")
            return 0
        if not args.force:
            print(f"profile {profile.root} already exists; pass --force to rebuild it (the old one is moved aside)",
                  file=sys.stderr)
            return 2
        aside = profile.root.with_name(f"{profile.root.name}.old-{datetime.now(UTC):%Y%m%d%H%M%S}")
        shutil.move(str(profile.root), aside)
        print(f"moved the old profile to {aside}")
    if not args.demo:
        profile.ensure()
        print(f"created an empty profile at {profile.root}")
        return 0
    summary = build_demo_profile(profile, _now(args), options=_options(profile), n_memories=args.memories)
    print(f"demo agent ready at {profile.root}: {summary.memories} memories ({summary.archived} archived), "
          f"{summary.skills} skills, {summary.sessions} conversation sessions")
    return 0


def cmd_run(args: argparse.Namespace) -> int:
    from dream_assets.defs.runner import run_cycle_in_dagster
    from dream_assets.llm.client import resolve_backend_name
    from dream_assets.passes.registry import PASSES

    profile = _profile(args)
    if args.demo and not profile.store_path.exists():
        args.if_missing, args.force = True, False
        cmd_init(args)
    if not profile.root.exists():
        print(f"no agent profile at {profile.root}; create one with `dream init --profile {args.profile} --demo`",
              file=sys.stderr)
        return 2
    backend = resolve_backend_name(_options(profile))
    print(f"dream cycle for agent {profile.agent_id!r} at {profile.root} (model backend: {backend})")
    run = run_cycle_in_dagster(profile, now=args.now)
    width = max(len(p.name) for p in PASSES)
    for spec in PASSES:
        status, summary = run.summaries.get(spec.name, ("not run", ""))
        print(f"  {spec.name:<{width}}  {status:<9}  {summary}")
    failed_calls = f", {run.failed_calls} failed" if run.failed_calls else ""
    print(f"model calls this cycle: {run.answered_calls} answered{failed_calls} ({backend})")
    where = "; open the Dagster UI (make dev) to see it" if run.persistent else ""
    if run.ok:
        print(f"run {run.run_id} succeeded{where}")
        return 0
    print(f"run {run.run_id} FAILED{where}")
    problems = [f"{name} failed: {reason}" for name, reason in run.failed.items()] + run.step_errors
    if not problems:
        problems = ["the Dagster run failed without a pass failure; see the run's logs"]
    print("cycle FAILED — " + "; ".join(problems))
    return 1


def cmd_undo(args: argparse.Namespace) -> int:
    from dream_assets.store import open_store
    from dream_assets.store.changes import UndoRefused
    from dream_assets.store.connection import StoreError

    profile = _profile(args)
    store = open_store(profile, _options(profile))
    try:
        if args.list:
            for cycle_id, when, n in store.changes.cycles():
                print(f"{cycle_id}  {when:%Y-%m-%d %H:%M}  {n} change(s)")
            return 0
        result = store.changes.undo_cycle(args.cycle, now=_now(args), pass_name=args.pass_name, force=args.force)
    except UndoRefused as exc:
        print(str(exc), file=sys.stderr)
        return 2
    except StoreError as exc:   # busy: try again later (what was done is kept; a rerun finishes it); corrupt: recover
        print(f"undo stopped: {exc}", file=sys.stderr)
        return 2
    for line in result.restored:
        print(f"restored {line}")
    for line in result.already_undone:
        print(f"already undone {line}")
    for line in result.not_restored:
        print(f"NOT restored {line}", file=sys.stderr)
    for line in result.refused:
        print(f"refused  {line}", file=sys.stderr)
    nothing_done = result.refused and not args.force
    print(f"undo of cycle {args.cycle}: {len(result.restored)} put back, {len(result.already_undone)} already undone, "
          f"{len(result.not_restored)} could not be restored, {len(result.refused)} refused"
          + ("; nothing was changed (pass --force to undo the rest)" if nothing_done else "")
          + (f"; recorded as cycle {result.undo_cycle_id}" if result.restored else ""))
    # Exit 0 when the undo did something usable (put records back, or found nothing left to do), even if some entries
    # could not be restored or were refused under --force (those are listed above); 3 when nothing was undone.
    return 0 if result.applied else 3


def cmd_restore(args: argparse.Namespace) -> int:
    from dream_assets.store import open_store

    profile = _profile(args)
    store = open_store(profile, _options(profile))
    entry = store.memories.get(args.id)
    if entry is None:
        print(f"no memory with id {args.id!r} (it may have been purged)", file=sys.stderr)
        return 2
    store.memories.restore(args.id, now=_now(args))
    print(f"restored memory {args.id}: {entry.content}")
    return 0


def cmd_status(args: argparse.Namespace) -> int:
    from dream_assets.store import open_store
    from dream_assets.store.ledger import PassLedger

    profile = _profile(args)
    store = open_store(profile, _options(profile))
    counts = store.memories.counts()
    print(f"agent {profile.agent_id}: {counts['live']} live memories, {counts['archived']} archived, "
          f"{len(store.skills.list())} skills")
    for name, rec in sorted(PassLedger(profile).records().items()):
        print(f"  {name:<24} last run {rec.last_run_at:%Y-%m-%d %H:%M} UTC  fingerprint {rec.fingerprint[:16]}")
    return 0


def cmd_import_logs(args: argparse.Namespace) -> int:
    from dream_assets.store.warehouse import import_jsonl

    profile = _profile(args)
    total = 0
    for path in args.files:
        added = import_jsonl(profile, args.kind, Path(path), _now(args))
        print(f"{path}: {added} new line(s) in the {args.kind} warehouse")
        total += added
    print(f"{total} line(s) imported")
    return 0


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="dream", description="Keep an agent's memory and skills healthy while it is idle.")
    sub = p.add_subparsers(dest="command", required=True)

    def common(sp: argparse.ArgumentParser) -> None:
        sp.add_argument("--profile", default=DEMO_PROFILE, help=f"agent profile folder (default {DEMO_PROFILE})")
        sp.add_argument("--now", help="act as if it were this ISO-8601 instant (replays, demos)")

    sp = sub.add_parser("init", help="create an agent profile (with --demo: the bundled demo agent)")
    common(sp)
    sp.add_argument("--demo", action="store_true")
    sp.add_argument("--memories", type=int, default=320, help="demo corpus size (default 320)")
    sp.add_argument("--if-missing", action="store_true", help="do nothing when the profile exists")
    sp.add_argument("--force", action="store_true", help="rebuild an existing profile (the old one is moved aside)")
    sp.set_defaults(func=cmd_init)

    sp = sub.add_parser("run", help="run one full dream cycle through Dagster and print each pass's summary")
    common(sp)
    sp.add_argument("--demo", action="store_true", help="create the demo agent first when the profile is missing")
    sp.add_argument("--memories", type=int, default=320)
    sp.set_defaults(func=cmd_run)

    sp = sub.add_parser("undo", help="undo one cycle's changes (or list cycles with --list); exits 0 when records "
                                     "were put back or nothing was left to undo, 3 when nothing could be undone")
    common(sp)
    sp.add_argument("--cycle", help="cycle (Dagster run) id")
    sp.add_argument("--pass", dest="pass_name", help="only this pass's changes, e.g. memory_consolidation")
    sp.add_argument("--list", action="store_true")
    sp.add_argument("--force", action="store_true", help="undo what can be undone even if some entries were edited since")
    sp.set_defaults(func=cmd_undo)

    sp = sub.add_parser("restore", help="restore one archived memory by id")
    common(sp)
    sp.add_argument("--id", required=True)
    sp.set_defaults(func=cmd_restore)

    sp = sub.add_parser("status", help="counts and the pass ledger of a profile")
    common(sp)
    sp.set_defaults(func=cmd_status)

    sp = sub.add_parser("import-logs", help="load historical JSONL logs into the warehouse for backfills")
    common(sp)
    sp.add_argument("--kind", required=True, help="skill-usage, tool-call, feedback, skill-resource-usage, "
                                                  "wisp-executions, tier-routing or conversation")
    sp.add_argument("files", nargs="+")
    sp.set_defaults(func=cmd_import_logs)
    return p


def main(argv: list[str] | None = None) -> int:
    # Dagster's beta/deprecation notices are for developers of this project, not for people running it.
    warnings.filterwarnings("ignore", module=r"dagster(\.|$)")
    warnings.filterwarnings("ignore", category=DeprecationWarning)
    logging.basicConfig(level=os.environ.get("DREAM_LOG_LEVEL", "WARNING"), format="%(levelname)s %(name)s: %(message)s")
    args = build_parser().parse_args(argv)
    if args.command == "undo" and not args.list and not args.cycle:
        print("dream undo: give --cycle ID (see --list)", file=sys.stderr)
        return 2
    try:
        return int(args.func(args))
    except OptionsError as exc:
        print(f"configuration error: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
