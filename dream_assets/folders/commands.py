"""The ``dream link`` and ``dream sync`` commands (attach a markdown memory folder to an agent; read it, and show
with ``--plan`` or write what the write-back would change) and ``dream export`` / ``dream import`` (JSONL, mem0)."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from datetime import datetime
from pathlib import Path

from dream_assets.file_safety import atomic_write
from dream_assets.folders.formats import FORMATS
from dream_assets.options import load_agent_options
from dream_assets.profile import AgentProfile


def add_commands(
    sub: argparse._SubParsersAction,
    common: Callable[[argparse.ArgumentParser], None],
    profile_of: Callable[[argparse.Namespace], AgentProfile],
    now_of: Callable[[argparse.Namespace], datetime],
) -> None:
    """Add ``link``, ``sync``, ``export`` and ``import`` to the ``dream`` parser (``common`` adds --profile and
    --now)."""

    def cmd_link(args: argparse.Namespace) -> int:
        from dream_assets.service.folders import FolderError, link_folder  # what the other commands need not load

        profile = profile_of(args)
        try:
            link = link_folder(profile, args.folder, args.format, now_of(args))
        except FolderError as exc:
            print(f"dream link: {exc}", file=sys.stderr)
            return 2
        print(
            f"linked {link.folder} ({link.format}) to agent {profile.agent_id}: every cycle reads it first and writes "
            f"the result back last; `dream sync --plan --profile {args.profile}` shows what a write-back would change"
        )
        return 0

    def cmd_sync(args: argparse.Namespace) -> int:
        from dream_assets.service.folders import FolderError, apply_write_back, plan_write_back, read_folder

        profile = profile_of(args)
        options = load_agent_options(profile)
        now = now_of(args)
        if not args.plan:
            read = read_folder(profile, options, now)
            print(f"read: {read.status}: {read.summary or read.reason}")
            if read.status == "failed":
                return 1
        try:
            plan = plan_write_back(profile, options, now)
        except (FolderError, OSError) as exc:
            print(f"dream sync: {exc}", file=sys.stderr)
            return 1
        if plan is None:
            print(f"dream sync: no memory folder linked to agent {profile.agent_id} (dream link)", file=sys.stderr)
            return 2
        for line in plan.left:
            print(f"left: {line}")
        if args.plan:
            diff = plan.diff()
            sys.stdout.write(diff if diff else "nothing to write\n")
            return 0
        report = apply_write_back(profile, plan, now=now)
        print(f"write: {report.status}: {report.summary or report.reason}")
        return 1 if report.status == "failed" else 0

    def cmd_export(args: argparse.Namespace) -> int:
        from dream_assets.service import transfer  # only these two commands need it

        profile = profile_of(args)
        export = transfer.export_jsonl if args.format == "jsonl" else transfer.export_mem0
        text = export(profile, archived=args.archived)
        if args.output:
            atomic_write(Path(args.output), text)
            print(f"exported agent {profile.agent_id} to {args.output} ({args.format})")
        else:
            sys.stdout.write(text)
        return 0

    def cmd_import(args: argparse.Namespace) -> int:
        from dream_assets.service import transfer

        profile = profile_of(args)
        load = transfer.import_jsonl if args.format == "jsonl" else transfer.import_mem0
        try:
            counts = load(profile, Path(args.file), now_of(args))
        except transfer.ImportRefused as exc:
            print(f"dream import: {exc.args[0].split(': ', 1)[0]} from {args.file}:", file=sys.stderr)
            for line in exc.problems:
                print(f"  {line}", file=sys.stderr)
            return 1
        print(f"imported into agent {profile.agent_id}: " + ", ".join(f"{v} {k}" for k, v in counts.items()))
        return 0

    sp = sub.add_parser("export", help="write the agent's memories (and skills, change log) as JSONL or for mem0")
    common(sp)
    sp.add_argument("--format", required=True, choices=("jsonl", "mem0"))
    sp.add_argument("--archived", action="store_true", help="archived memories and skills too (and the whole log)")
    sp.add_argument("--output", help="file to write (default: standard output)")
    sp.set_defaults(func=cmd_export)

    sp = sub.add_parser("import", help="read a JSONL export or a mem0 export into the agent, all of it or nothing")
    common(sp)
    sp.add_argument("--format", required=True, choices=("jsonl", "mem0"))
    sp.add_argument("file")
    sp.set_defaults(func=cmd_import)

    sp = sub.add_parser("link", help="attach a markdown memory folder to the agent: each cycle reads and writes it")
    common(sp)
    sp.add_argument("--folder", required=True, help="the folder (Claude Code memory, OpenClaw workspace, notes)")
    sp.add_argument("--format", required=True, choices=FORMATS)
    sp.set_defaults(func=cmd_link)

    sp = sub.add_parser(
        "sync", help="read the linked folder and write back what the dream changed; --plan prints the diff only"
    )
    common(sp)
    sp.add_argument("--plan", action="store_true", help="print the diff a write-back would make, write nothing")
    sp.set_defaults(func=cmd_sync)
