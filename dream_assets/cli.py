"""The `dream` command: set up a profile, run a cycle through Dagster, undo a cycle, review, apply or reject the
changes a pass held for review, import logs, show status, rebuild a damaged store, remove an agent.

Exit codes (README "Exit codes"): 0 done; 1 the command ran and something failed (a pass, lines not imported, an
unexpected error); 2 refused, nothing done (a usage or configuration error, no such profile, cycle or pass, a store
that is damaged or busy); 3 `dream undo` undid nothing. A failure prints one line naming the file or URL; the
traceback and the logs only with --verbose.
"""

from __future__ import annotations

import argparse
import difflib
import json
import logging
import os
import shutil
import sys
import traceback
import warnings
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from dream_assets import cycle_ids
from dream_assets.changes_model import ACTOR_PASS_NAMES, Actor, ChangeRow
from dream_assets.model import clock_problem, parse_ts
from dream_assets.options import DreamOptions, OptionsError, load_agent_options
from dream_assets.profile import AgentProfile, holds_profile

DEMO_PROFILE = "data/agents/demo"
#: `--demo` creates the demo agent only in a folder of this name (data/agents/demo): a mistyped profile is refused.
DEMO_AGENT = "demo"
#: `dream status` shows this many characters of a longer fingerprint unless --full.
FINGERPRINT_SHOWN = 80


def _now(args: argparse.Namespace) -> datetime:
    return parse_ts(args.now) if getattr(args, "now", None) else datetime.now(UTC)


def _now_arg(text: str) -> str:
    """``--now``: an ISO-8601 instant a clock may take (``model.clock_problem``), kept as given."""
    try:
        at = parse_ts(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not an ISO-8601 time such as 2026-12-01T09:00:00Z") from None
    bad = clock_problem(at, "--now")
    if bad:
        raise argparse.ArgumentTypeError(bad)
    return text


class MissingProfile(Exception):
    """The command reads an agent, and ``--profile`` names no agent profile (a store or logs): nothing is created."""


def _profile(args: argparse.Namespace, *, must_exist: bool = True) -> AgentProfile:
    """The agent profile ``--profile`` names. A command that reads an agent refuses a folder that holds none (a typo
    would otherwise create a new agent, which the discovery sensor then registers); ``dream init`` passes
    ``must_exist=False``."""
    profile = AgentProfile(Path(args.profile))
    if must_exist and not holds_profile(profile.root):
        raise MissingProfile(
            f"no agent profile at {profile.root}; create one with "
            f"`dream init --profile {args.profile}` (add --demo for the demo agent)"
        )
    return profile


def _options(profile: AgentProfile) -> DreamOptions:
    return load_agent_options(profile)


def _refuse_demo_elsewhere(args: argparse.Namespace) -> None:
    """``--demo`` on a missing profile makes the demo agent only in a folder named ``demo``: anything else is taken
    for a mistyped profile (a fake agent would otherwise be made there and dreamed over)."""
    profile = _profile(args, must_exist=False)
    if profile.agent_id != DEMO_AGENT:
        raise MissingProfile(
            f"no agent profile at {profile.root}; the demo agent is only made at {DEMO_PROFILE} (a folder named "
            f"{DEMO_AGENT}): check the path, or create this agent with `dream init --profile {args.profile}`"
        )


def cmd_init(args: argparse.Namespace) -> int:
    from dream_assets.demo import build_demo_profile

    profile = _profile(args, must_exist=False)
    if args.if_missing and args.demo and not holds_profile(profile.root):
        _refuse_demo_elsewhere(args)
    if profile.store_path.exists():
        if args.if_missing:
            print(f"profile {profile.root} already exists; leaving it as it is")
            return 0
        if not args.force:
            print(
                f"profile {profile.root} already exists; pass --force to rebuild it (the old one is moved aside)",
                file=sys.stderr,
            )
            return 2
        aside = profile.root.with_name(f"{profile.root.name}.old-{datetime.now(UTC):%Y%m%d%H%M%S}")
        shutil.move(str(profile.root), aside)
        print(f"moved the old profile to {aside}")
    if not args.demo:
        profile.ensure()
        print(f"created an empty profile at {profile.root}")
        return 0
    summary = build_demo_profile(profile, _now(args), options=_options(profile), n_memories=args.memories)
    print(
        f"demo agent ready at {profile.root}: {summary.memories} memories ({summary.archived} archived), "
        f"{summary.skills} skills, {summary.sessions} conversation sessions"
    )
    return 0


def cmd_run(args: argparse.Namespace) -> int:
    from dream_assets.launch.cycle import run_cycle_in_dagster
    from dream_assets.llm.client import configured_model_identity, endpoint_problem, resolve_backend_name
    from dream_assets.orchestration.run_tags import UnknownPass, parse_forced
    from dream_assets.passes.registry import PASSES

    try:
        forced = parse_forced(",".join(args.force_passes or ()))
    except UnknownPass as exc:
        print(f"dream run --force: {exc}", file=sys.stderr)
        return 2
    if args.demo and not holds_profile(_profile(args, must_exist=False).root):
        _refuse_demo_elsewhere(args)
        args.if_missing, args.force = True, False
        cmd_init(args)
    profile = _profile(args)
    options = _options(profile)
    from dream_assets.options import pass_model_options

    endpoints = {
        (o.LlmBaseUrl, o.LlmModel, o.LlmApiKeyEnv): o
        for o in [options, *(pass_model_options(options, spec.name) for spec in PASSES if spec.uses_model)]
    }
    problem = next((p for p in map(endpoint_problem, endpoints.values()) if p is not None), None)
    if problem is not None:  # the endpoint is checked before the cycle: nothing runs against a dead one
        print(
            f"dream run: {problem}; no cycle was run (start the endpoint, fix LlmBaseUrl, or set "
            "DREAM__LlmBackend=offline)",
            file=sys.stderr,
        )
        return 2
    backend = resolve_backend_name(options)
    identity = configured_model_identity(options)
    print(f"dream cycle for agent {profile.agent_id!r} at {args.profile} (model backend: {identity})")
    if backend == "openai":
        from dream_assets.llm.endpoint_profile import EndpointProfile, endpoint_key

        facts = EndpointProfile(profile.endpoint_profile_path).get(endpoint_key(options.LlmBaseUrl, options.LlmModel))
        if not facts.has_speed:
            print(
                f"the endpoint's speed is not measured: each model call waits at most LlmTimeout "
                f"({options.LlmTimeout.total_seconds():g}s); `dream check-model` measures it and sizes each call's "
                "timeout to it"
            )
    if forced:
        print(f"forced this run (change gate and minimum interval ignored once): {', '.join(forced)}")
    from dream_assets.llm.progress import ProgressPrinter

    with ProgressPrinter(profile.model_progress_path):  # every model call as it runs
        run = run_cycle_in_dagster(
            profile, now=args.now, force=forced, force_reason=args.reason, log_level=_log_level(args)
        )
    width = max(len(p.name) for p in PASSES)
    for spec in PASSES:
        status, summary = run.summaries.get(spec.name, ("not run", ""))
        # a failure's reason is said once, on the last line
        print(f"  {spec.name:<{width}}  {status:<9}  {'why: see the last line' if status == 'failed' else summary}")
    passed = [name for name, found in run.checks.items() if found is None]
    if passed:
        print(f"memory audit: {len(passed)} of {len(run.checks)} checks passed ({', '.join(passed)})")
    for name, found in run.checks.items():
        if found is not None:
            print(f"memory audit: check {name} FAILED ({found})")
    failed_calls = f", {run.failed_calls} failed" if run.failed_calls else ""
    print(f"model calls this cycle: {run.answered_calls} answered{failed_calls} ({identity})")
    switched = [name for name, (_, summary) in run.summaries.items() if "(model switch:" in summary]
    if switched:
        print(f"model switch: ran once with {identity}: {', '.join(switched)}")
    elif backend != "offline" and run.model_calls == 0:
        print("no model pass had new input; `dream run --force PASS` runs one anyway")
    if run.from_pass_records:
        print(
            f"Dagster's event log did not record {', '.join(run.from_pass_records)} (is its database reachable?); "
            "their status above is from the pass records the passes wrote with their ledger stamps"
        )
    for freed in run.freed_runs:
        print(f"freed the pool slots of a dead run — {freed}")
    where = "; open the Dagster UI (make dev) to see it" if run.persistent else ""
    if run.ok:
        print(f"run {run.run_id} succeeded{where}")
        return 0
    if run.interrupted:
        print(f"run {run.run_id} STOPPED by a signal (SIGTERM or SIGINT){where}; the next cycle runs what it did not")
        return 1
    print(f"run {run.run_id} FAILED{where}")
    problems = [f"{', '.join(names)} failed: {reason}" for reason, names in _said_once(run.failed).items()]
    problems += run.step_errors
    if not problems:
        problems = ["the Dagster run failed without a pass failure; see the run's logs (--verbose shows them)"]
    print("cycle FAILED — " + "; ".join(problems))
    return 1


def cmd_check_model(args: argparse.Namespace) -> int:
    """Each model pass's real prompt from this agent's data against the configured endpoint, nothing applied."""
    from dream_assets.llm.client import endpoint_problem, resolve_backend_name
    from dream_assets.llm.endpoint_profile import rate
    from dream_assets.model_check import check_model, measure_endpoint, recommend, store_measurement

    profile = _profile(args)
    options = _options(profile)
    if resolve_backend_name(options) == "offline":
        print(
            "dream check-model: no model is configured (LlmBackend is offline); set DREAM__LlmBaseUrl and "
            "DREAM__LlmModel",
            file=sys.stderr,
        )
        return 2
    problem = endpoint_problem(options)
    if problem is not None:
        print(f"dream check-model: {problem}", file=sys.stderr)
        return 2
    print(f"measuring the endpoint {options.LlmBaseUrl or 'https://api.openai.com/v1'} (model {options.LlmModel})")
    measured = measure_endpoint(options)
    facts = store_measurement(profile, measured)

    def shown(value, unit: str = "") -> str:
        return "unknown" if value is None else f"{rate(value) if isinstance(value, float) else value}{unit}"

    schema = {True: "yes", False: "NO (json_object or prose is used)", None: "unknown"}[measured.json_schema]
    print(
        f"  speed: prompt {shown(measured.prompt_tps, ' tokens/s')}, answer {shown(measured.gen_tps, ' tokens/s')}"
        f"{' (reported by the endpoint)' if measured.timings_reported else ' (timed)'}; window: "
        f"{shown(measured.window, ' tokens')}; json_schema: {schema}; tokens counted by: "
        f"{measured.tokenizer or 'an estimate calibrated from the usage the answers report'}"
    )
    for problem in measured.problems:
        print(f"      problem: {problem}")
    print(f"  kept in {profile.endpoint_profile_path}: each call's timeout now follows this speed")
    print(f"rehearsing every model pass of agent {profile.agent_id!r} on a copy of its profile (nothing applied)")
    checks = check_model(profile, options, _now(args))
    for c in checks:
        refused = ", ".join(f"{k} {v}" for k, v in c.refusals.items()) or "none"
        print(
            f"  {c.pass_name:<22} {c.status:<9} model {c.model}; fits window: {'yes' if c.fits else 'NO'}; "
            f"parsed: {'yes' if c.parsed else 'NO'}; refused by the host: {refused}; calls {c.calls}; "
            f"tokens {c.prompt_tokens}+{c.completion_tokens}; latency {c.latency_s:.2f}s; cost {c.cost:.4f}"
        )
        for note in c.notes:
            print(f"      why: {note}")
        if c.reason:
            print(f"      reason: {c.reason}")
    advice = recommend(options, facts, checks)
    print(
        f"recommended for this endpoint: DREAM__LlmContextTokens={advice.window} DREAM__LlmMaxTokens={advice.reserve} "
        f"DREAM__LlmMaxCallsPerPass={advice.calls_per_pass}"
        + (
            f" (a full call: up to {advice.worst_call_s:.0f}s, timeout {advice.timeout_s:.0f}s)"
            if advice.worst_call_s
            else ""
        )
    )
    for why in advice.why:
        print(f"      because {why}")
    bad = [c.pass_name for c in checks if not c.ok]
    print("the model is fit for every pass" if not bad else f"NOT fit for: {', '.join(bad)}")
    return 0 if not bad else 1


def _said_once(reasons: dict[str, str]) -> dict[str, list[str]]:
    """The failed passes grouped by reason, each reason without the text of another pass's reason quoted in it
    (``could not reach it earlier in this cycle (...)``): a cause shared by many passes is printed once, with the pass
    that met it."""
    grouped: dict[str, list[str]] = {}
    for name, reason in reasons.items():
        for other, theirs in reasons.items():
            for quoted in {theirs, theirs.split("; ")[0]} if other != name and theirs else ():
                reason = reason.replace(f" ({quoted})", "")
        grouped.setdefault(reason, []).append(name)
    return grouped


def cmd_undo(args: argparse.Namespace) -> int:
    from dream_assets.passes.registry import PassRunning, no_pass_running
    from dream_assets.store import open_store
    from dream_assets.store.changes import CycleRunning, UndoRefused
    from dream_assets.store.connection import StoreError

    profile = _profile(args)
    store = open_store(profile, _options(profile))
    stale: list[str] = []
    try:
        if args.list:
            return _list_changes(store, args.profile)
        unknown = _unknown_undo_target(profile, store, args)
        if unknown:
            print(f"dream undo: {unknown}", file=sys.stderr)
            return 2
        # Never inside a running cycle (between two of its passes as well) nor beside a running pass: an undo between
        # a pass's read and its write, or under the passes that build on what it puts back, would leave half of each.
        stale = _wait_for_cycles(store, args.wait)
        with no_pass_running(profile, wait=args.wait):
            result = store.changes.undo_cycle(args.cycle, now=_now(args), pass_name=args.pass_name, force=args.force)
    except (UndoRefused, PassRunning) as exc:
        _print_stale_markers(stale)
        running = isinstance(exc, PassRunning | CycleRunning)
        print(f"undo refused: {exc}" if running else str(exc), file=sys.stderr)
        return 2
    except StoreError as exc:  # busy: try again later (what was done is kept; a rerun finishes it); corrupt: recover
        print(f"undo stopped: {exc}", file=sys.stderr)
        return 2
    _print_stale_markers(stale + result.stale_markers)
    decayed = result.done("importance put back")
    for line in result.restored:
        action = result.actions.get(line)
        if line not in decayed:
            print(f"{action.kind} {line}: {action.detail}" if action else f"put back {line}")
    if decayed:  # one line: a decay touches most of the corpus
        print(
            f"importance put back on {len(decayed)} entr{'y' if len(decayed) == 1 else 'ies'} decayed by the cycle "
            "(the next cycle decays them again by the calendar): " + ", ".join(t.split(" ", 1)[1] for t in decayed)
        )
    for line in result.already_undone:
        print(f"already undone {line}")
    for line in result.left:
        print(f"left     {line}")
    for line in result.not_restored:
        print(f"NOT restored {line}", file=sys.stderr)
    for line in result.refused:
        print(f"refused  {line}", file=sys.stderr)
    if result.blocked_by:
        later = [c for c in result.blocked_by if c != args.cycle]
        if later:
            print(
                f"undo of cycle {args.cycle} refused: later cycle(s) {', '.join(later)} built on its results; nothing "
                f"was changed. Undo them first, newest first (`dream undo --profile {args.profile} --cycle "
                f"{later[-1]}`), then this cycle",
            )
        else:
            print(
                f"undo of pass {args.pass_name} of cycle {args.cycle} refused: a later pass of the cycle built on its "
                "results; nothing was changed. Undo that pass first, or the whole cycle",
            )
        return 3
    files_refused: list[str] = []
    if result.applied and not args.pass_name:
        from dream_assets.folders import undo_files

        # the linked memory folder's files, as the change set found them: its cycle's write-back and any later one
        # (a dream sync, the next cycle) that wrote its changes out
        folder = undo_files(profile, args.cycle)
        for line in folder.lines:
            print(line, file=sys.stderr if line.startswith("NOT") else sys.stdout)
        files_refused = folder.refused
    nothing_done = result.refused and not args.force
    refused = len(result.refused) + len(files_refused)
    print(
        f"undo of cycle {args.cycle}: {len(result.restored)} put back{_undo_kinds(result)}, "
        f"{len(result.already_undone)} already undone, "
        f"{len(result.not_restored)} could not be restored, {refused} refused"
        + (f" ({len(files_refused)} file(s) of the linked folder, named above)" if files_refused else "")
        + (f", {len(result.left)} left as a later cycle decayed them again" if result.left else "")
        + ("; nothing was changed (pass --force to undo the rest)" if nothing_done else "")
        + (f"; recorded as cycle {result.undo_cycle_id}" if result.restored else "")
    )
    retired = result.done("retired")
    if retired:
        print(
            f"the {len(retired)} entr{'y' if len(retired) == 1 else 'ies'} the cycle created (merged entries, new "
            "notes) stay as archived rows: the undo archived them, it never deletes"
        )
    marked, keys = store.changes.review_marks(args.cycle)
    if result.restored and marked:
        from dream_assets.passes.contradiction_sweep import REVIEWED_KEY

        print(
            f"left as the cycle wrote them: review marks on {marked} entr{'y' if marked == 1 else 'ies'} (metadata "
            f"{', '.join(sorted({*keys, REVIEWED_KEY}))}); they record which entries the model has seen unchanged, "
            "so those are not shown again until they change; housekeeping, not changes: an undo leaves them"
        )
    # Exit 0 when the undo did something usable (put records back, or found nothing left to do), refusals under
    # --force listed above; 1 when some entries could not be restored or a file of the linked folder could not be put
    # back (each named above: the folder and the store disagree until it is); 3 when nothing was undone.
    if result.not_restored and not result.restored:
        return 3
    if not result.applied:
        return 3
    return 1 if result.not_restored or files_refused else 0


def _undo_kinds(result) -> str:
    """ " (3 unmerged, 1 retired)": what the put-backs were, by kind."""
    counts: dict[str, int] = {}
    for line in result.restored:
        action = result.actions.get(line)
        if action is not None:
            counts[action.kind] = counts.get(action.kind, 0) + 1
    return f" ({', '.join(f'{n} {k}' for k, n in counts.items())})" if counts else ""


def _wait_for_cycles(store, wait: float) -> list[str]:
    """Wait up to ``wait`` seconds while a cycle of the agent is in progress (the undo itself refuses if one still
    is). Returns the stale markers of crashed cycles found meanwhile (removed), with why."""
    import time

    deadline = time.monotonic() + max(0.0, wait)
    stale: list[str] = []
    while True:
        running, found = store.changes.cycle_markers()
        stale += found
        if not running or time.monotonic() >= deadline:
            return stale
        time.sleep(min(1.0, max(0.0, deadline - time.monotonic())))


def _print_stale_markers(stale: list[str]) -> None:
    for line in stale:
        print(f"ignored the marker of a cycle that is no longer running, and removed it: {line}", file=sys.stderr)


def _unknown_undo_target(profile: AgentProfile, store, args: argparse.Namespace) -> str | None:
    """Why ``--cycle``/``--pass`` name nothing that exists (a mistyped pass, a cycle this agent never ran), or None.
    A cycle that ran but changed nothing is not unknown: the undo then says it has nothing to undo."""
    from dream_assets.cycle_report import saved_report
    from dream_assets.passes.outcome import load_outcomes
    from dream_assets.passes.registry import PASSES

    names = [p.name for p in PASSES]
    if args.pass_name is not None and args.pass_name not in [*names, RESTORE_PASS]:
        return f"no pass named {args.pass_name!r}; the passes are {', '.join([*names, RESTORE_PASS])}"
    cycles = {cycle for cycle, _, _ in store.changes.cycles()}
    ran = any(o.get("cycle_id") == args.cycle for o in load_outcomes(profile, names).values())
    if args.cycle not in cycles and not ran and saved_report(profile, args.cycle) is None:
        return (
            f"no such cycle {args.cycle!r} for agent {profile.agent_id}; nothing was changed "
            f"(the cycles are listed by `dream undo --profile {args.profile} --list`)"
        )
    return None


def _list_changes(store, profile_arg: str) -> int:
    """One line per cycle and pass, oldest cycle first, each starting with the cycle id: real changes, how many are
    still undoable, and the review stamps apart (they are not changes and undo leaves them)."""
    rows = store.changes.by_pass()
    if not rows:
        print("no changes recorded yet")
        return 0
    width = max(len(r.pass_name) for r in rows)
    print(
        f"cycle, started (UTC), pass: changes and what is still undoable — undo with "
        f"`dream undo --profile {profile_arg} --cycle CYCLE [--pass PASS]`"
    )
    for r in rows:
        kinds = ", ".join(f"{n} {k}" for k, n in r.kinds.items())
        text = f"{r.changes} change(s) ({kinds}), {r.undoable} still undoable" if r.changes else "no changes"
        stamps = f"; {r.stamps} review stamp(s), not changes" if r.stamps else ""
        print(f"{r.cycle_id}  {r.cycle_started_at:%Y-%m-%d %H:%M}  {r.pass_name:<{width}}  {text}{stamps}")
    return 0


def cmd_review(args: argparse.Namespace) -> int:
    """The pending change sets, oldest first, each change with its id, pass, kind, reason and a before/after diff."""
    from dream_assets.passes import review
    from dream_assets.store import open_store

    profile = _profile(args)
    now = _now(args)
    store = open_store(profile, _options(profile))
    review.expire(store, now)
    pending = review.list_changes(store)
    expired = review.list_changes(store, status=review.EXPIRED)
    if not pending:
        print(
            f"agent {profile.agent_id}: nothing waits for review"
            + (f" ({len(expired)} expired unreviewed, not applied)" if expired else "")
        )
        return 0
    sets = list(dict.fromkeys(c.cycle_id for c in pending))
    print(f"agent {profile.agent_id}: {len(pending)} change(s) wait for review in {len(sets)} set(s)")
    for cycle in sets:
        mine = [c for c in pending if c.cycle_id == cycle]
        passes = ", ".join(dict.fromkeys(c.pass_name for c in mine))
        first = min(c.expires_at for c in mine)
        print(
            f"\nset {cycle} ({passes}), proposed {_when(mine[0].created_at)}: {len(mine)} change(s), expires "
            f"{_when(first)} unless applied"
        )
        for c in mine:
            for line in review.describe(c):
                print(f"  {line}")
    if expired:
        print(f"\n{len(expired)} expired unreviewed (not applied)")
    print(
        f"\napply with `dream apply --profile {args.profile} --cycle CYCLE` (or --change ID ...), reject with "
        f"`dream reject --profile {args.profile} --cycle CYCLE` (or --change ID ...); add --reason TEXT"
    )
    return 0


def cmd_decide(args: argparse.Namespace) -> int:
    """`dream apply` and `dream reject`: a whole set (--cycle) or single changes (--change), with a reason. Exit 0
    when every change named was decided, 1 when some were refused (edited meanwhile) or could not be written, 2 when
    nothing was acted on (no such set or change, or decided or expired before)."""
    from dream_assets.passes import review
    from dream_assets.passes.registry import PassRunning, no_pass_running
    from dream_assets.store import open_store

    if not args.cycle and not args.change:
        print(f"dream {args.command}: give --cycle CYCLE or --change ID ... (see `dream review`)", file=sys.stderr)
        return 2
    profile = _profile(args)
    options = _options(profile)
    store = open_store(profile, options)
    decision = "apply" if args.command == "apply" else "reject"
    try:
        # Never beside a running pass: an apply between a pass's read and its write would leave half of each.
        with no_pass_running(profile, wait=args.wait):
            result = review.decide(
                store,
                decision,
                cycle_id=args.cycle,
                change_ids=args.change or (),
                reason=args.reason or "",
                now=_now(args),
                options=options,
            )
    except PassRunning as exc:
        print(f"{args.command} refused: {exc}", file=sys.stderr)
        return 2
    done = "applied" if decision == "apply" else "rejected"
    every = {c.change_id: c for c in review.list_changes(store, status=None)}
    for i in result.done:
        c = every[i]
        print(f"{done} {i}  {c.pass_name}  {c.label}: {c.summary}")
    for line in result.refused:
        print(f"refused {line}", file=sys.stderr)
    for line in result.failed:
        print(f"NOT {done} {line}", file=sys.stderr)
    for line in result.not_found:
        print(f"not {done}: {line}", file=sys.stderr)
    cycles = sorted({every[i].cycle_id for i in result.done})
    undo = (
        f"; undo with `dream undo --profile {args.profile} --cycle {cycles[0]}`"
        if decision == "apply" and len(cycles) == 1
        else ""
    )
    print(
        f"dream {args.command}: {len(result.done)} {done}, {len(result.refused)} refused (edited meanwhile), "
        f"{len(result.failed)} could not be written, {len(result.not_found)} not found or decided before{undo}"
    )
    if result.refused or result.failed:
        return 1
    return 0 if result.done else 2


#: The pass name the change log records a hand restore under (``dream restore``); undo treats it like any cycle.
RESTORE_PASS = ACTOR_PASS_NAMES[Actor.RESTORE]


def cmd_restore(args: argparse.Namespace) -> int:
    """Put one archived memory back in the live corpus, recorded in the change log under a cycle of its own so
    `dream undo` can archive it again. A live memory is left alone (exit 0); an unknown or purged id exits 2."""
    from dream_assets.store import open_store
    from dream_assets.store.connection import StoreError

    profile = _profile(args)
    now = _now(args)
    cycle = cycle_ids.restore(now, args.id)
    store = open_store(profile, _options(profile))
    try:
        with store.transaction():
            entry = store.memories.get(args.id)
            if entry is None:
                gone = "it was purged" if args.id in store.memories.purged_ids() else "no such id"
                print(
                    f"no memory with id {args.id!r} in agent {profile.agent_id} ({gone}); nothing restored",
                    file=sys.stderr,
                )
                return 2
            if not entry.is_archived:
                print(f"memory {args.id} is live, not archived; nothing to restore: {entry.content}")
                return 0
            restored = store.memories.restore(args.id, now=now)
            store.changes.record(
                ChangeRow(
                    cycle_id=cycle,
                    actor=Actor.RESTORE,
                    kind="restored",
                    target_type="memory",
                    target_id=args.id,
                    before=entry,
                    after=restored,
                    reason="restored by hand with dream restore",
                ),
                now=now,
            )
    except StoreError as exc:
        print(f"restore stopped: {exc}", file=sys.stderr)
        return 2
    finally:
        store.close()
    print(f"restored memory {args.id}: {restored.content}")
    print(f"recorded as cycle {cycle}; archive it again with `dream undo --profile {args.profile} --cycle {cycle}`")
    return 0


def cmd_status(args: argparse.Namespace) -> int:
    """Every pass with its last run, status and reason, when it runs next, its model calls and its full ledger
    fingerprint."""
    from dream_assets.passes import review
    from dream_assets.passes.outcome import load_outcomes, recorded_at
    from dream_assets.passes.registry import PASSES
    from dream_assets.store import open_store
    from dream_assets.store.ledger import PassLedger

    profile = _profile(args)
    options = _options(profile)
    now = _now(args)
    store = open_store(profile, options)
    counts = store.memories.counts()
    print(
        f"agent {profile.agent_id}: {counts['live']} live memories, {counts['archived']} archived, "
        f"{len(store.skills.list())} skills"
    )
    print(f"recall index: {recall_index_line(profile)}")
    waits = review.waiting(store, now)
    if waits.count:
        print(f"review: {review.waiting_line(waits, args.profile)}")
    if waits.expired:
        print(f"review: {waits.expired} change(s) expired unreviewed (ReviewExpiryDays), not applied")
    ledger = PassLedger(profile)
    if ledger.warning:
        print(f"WARNING: {ledger.warning}")
    from dream_assets.llm.progress import ProgressFile

    waiting, _ = ProgressFile(profile.model_progress_path).read()
    if waiting is not None:
        print(f"running now: {waiting.line(now.timestamp())}")
    outcomes = load_outcomes(profile, [p.name for p in PASSES])
    width = max(len(p.name) for p in PASSES)
    for spec in PASSES:
        out, rec = outcomes.get(spec.name), ledger.get(spec.name)
        if out is None:
            head = "never run (no record yet)"
        else:
            at = recorded_at(out)
            tokens = int(float((out.get("usage") or {}).get("total_tokens", 0)))
            status = "deferred: budget" if out.get("budget_deferral") else out["status"]
            head = f"{status:<9}  last run {_when(at)}  model calls {int(out.get('model_calls') or 0)}, tokens {tokens}"
        print(f"  {spec.name:<{width}}  {head}")
        pad = " " * (width + 4)
        if out is not None and (out.get("reason") or out.get("summary")):
            print(f"{pad}{'reason' if out.get('reason') else 'summary'}: {out.get('reason') or out.get('summary')}")
        if rec is not None:
            fp = rec.fingerprint
            shown = (
                fp
                if args.full or len(fp) <= FINGERPRINT_SHOWN
                else (
                    f"{fp[:FINGERPRINT_SHOWN]}… (first {FINGERPRINT_SHOWN} of {len(fp)} characters; --full shows all)"
                )
            )
            forced = f" (forced: {rec.forced})" if rec.forced else ""
            print(f"{pad}last completed {_when(rec.last_run_at)}{forced}, input fingerprint {shown}")
        print(f"{pad}next run: {_next_run(spec.name, profile, options, rec, now)}")
    return 0


def recall_index_line(profile: AgentProfile) -> str:
    """Which BM25 index recall uses in this installation and what the index file beside the store holds."""
    from dream_assets.store import index_file
    from dream_assets.text.bm25 import kernel_description

    path = index_file.index_path(profile.store_path)
    try:
        stamp = index_file.peek_stamp(path)
    except FileNotFoundError:
        kept = "no index file yet (the first search builds it)"
    except index_file.IndexFileError as exc:
        kept = f"index file {path} is not usable and will be rebuilt: {exc}"
    else:
        kept = f"index file of {stamp['entries']} entries at row sequence {stamp['synced_seq']}"
    return f"{kernel_description()}; {kept}"


def _duration(value) -> str:
    """A duration as the options take it (ISO-8601: P7D, PT6H, PT1H30M)."""
    seconds = int(value.total_seconds())
    sign, seconds = ("-", -seconds) if seconds < 0 else ("", seconds)
    days, rest = divmod(seconds, 86400)
    hours, rest = divmod(rest, 3600)
    minutes, secs = divmod(rest, 60)
    time_part = "".join(f"{n}{u}" for n, u in ((hours, "H"), (minutes, "M"), (secs, "S")) if n)
    return f"{sign}P{f'{days}D' if days else ''}{f'T{time_part}' if time_part else ''}" if seconds else "PT0S"


def _when(at: datetime | None) -> str:
    return f"{at:%Y-%m-%d %H:%M} UTC" if at is not None else "unknown"


def _next_run(pass_name: str, profile: AgentProfile, options: DreamOptions, rec, now: datetime) -> str:
    """When the pass runs next, as the change gate and the floors decide it."""
    from dream_assets.gates import GATED_PASSES, disabled_by, min_interval_floor
    from dream_assets.passes.registry import by_name

    off = disabled_by(pass_name, options)
    if off is not None:
        return f"never: disabled ({off} = false)"
    if pass_name not in GATED_PASSES:
        text = "every cycle"
    elif not options.DreamPassChangeGateEnabled:
        text = "every cycle (change gate off: DreamPassChangeGateEnabled = false)"
    elif rec is None:
        text = "next cycle (never completed)"
    elif options.DreamPassMaxSkipInterval.total_seconds() <= 0:
        text = "when its input changes; no forced run (DreamPassMaxSkipInterval is not positive)"
    else:
        forced = rec.last_run_at + options.DreamPassMaxSkipInterval
        text = (
            f"next cycle (forced: DreamPassMaxSkipInterval {_duration(options.DreamPassMaxSkipInterval)} elapsed)"
            if forced <= now
            else f"when its input changes; next forced run {_when(forced)} (last completed + DreamPassMaxSkipInterval "
            f"{_duration(options.DreamPassMaxSkipInterval)})"
        )
    floor = min_interval_floor(pass_name, profile, options, now)
    if floor is not None:
        option = by_name(pass_name).min_interval
        text += f"; held back until {_when(floor)} ({option} {_duration(getattr(options, option))})"
    return text


def cmd_report(args: argparse.Namespace) -> int:
    """What the last cycle (or --cycle) changed, what it rejected and why, its model calls and how to undo it."""
    from dream_assets.cycle_report import build_cycle_report, latest_cycle_id, saved_report
    from dream_assets.passes.registry import PASSES
    from dream_assets.passes.review import expire
    from dream_assets.store import open_store

    profile = _profile(args)
    store = open_store(profile, _options(profile))
    expire(store, _now(args))  # a change set past ReviewExpiryDays shows as expired
    names = [p.name for p in PASSES]
    cycle = args.cycle or latest_cycle_id(profile, names)
    if cycle is None:
        print(f"no cycle has run for agent {profile.agent_id} yet; run one with `dream run --profile {args.profile}`")
        return 0
    report = build_cycle_report(profile, store, cycle, names, profile_arg=args.profile)
    if not report.passes:
        saved = saved_report(profile, cycle)
        if saved is not None:
            print(saved.read_text(encoding="utf-8"))
            return 0
        if not report.undoable:
            print(
                f"no cycle {cycle!r} for agent {profile.agent_id}: no pass record, saved report or change of it "
                f"(see `dream undo --profile {args.profile} --list`)",
                file=sys.stderr,
            )
            return 2
    print(report.markdown())
    return 0


def cmd_import_logs(args: argparse.Namespace) -> int:
    """Exit 0: every line was imported (or was already there); 1: some lines were left out (not records of the kind;
    listed); 2: nothing was imported (no profile, an unknown kind, a file that is missing or unreadable)."""
    from dream_assets.store.warehouse import ImportResult, WarehouseError, check_import_kind, import_jsonl

    profile = _profile(args)
    try:
        check_import_kind(args.kind)
        for path in map(Path, args.files):
            if not path.is_file():
                raise WarehouseError(f"cannot import {path}: {'not a file' if path.exists() else 'no such file'}")
    except WarehouseError as exc:
        print(f"dream import-logs: {exc}", file=sys.stderr)
        return 2
    now = _now(args)
    total = ImportResult()
    for path in args.files:
        try:
            r = import_jsonl(profile, args.kind, Path(path), now)
        except WarehouseError as exc:
            print(f"dream import-logs: {exc}", file=sys.stderr)
            return 2
        others = ", ".join(f"{n} {k}" for k, n in sorted(r.other_kinds.items()))
        print(
            f"{path}: {r.imported} new line(s) in the {args.kind} warehouse, {r.already_there} already there, "
            f"{r.malformed} malformed, {r.wrong_kind} of another kind" + (f" ({others})" if others else "")
        )
        for problem in r.problems:
            print(f"  not imported: {problem}", file=sys.stderr)
        if r.malformed + r.wrong_kind > len(r.problems):
            print(
                f"  … and {r.malformed + r.wrong_kind - len(r.problems)} more line(s) not imported",
                file=sys.stderr,
            )
        total.imported += r.imported
        total.valid += r.valid
        total.malformed += r.malformed
        total.wrong_kind += r.wrong_kind
        for kind, n in r.other_kinds.items():
            total.other_kinds[kind] = total.other_kinds.get(kind, 0) + n
    print(
        f"{total.imported} line(s) imported, {total.already_there} already there, {total.malformed} malformed, "
        f"{total.wrong_kind} of another kind"
    )
    if total.other_kinds and total.wrong_kind > total.valid:
        likely = max(total.other_kinds, key=lambda k: total.other_kinds[k])
        print(f"most lines are {likely} records: did you mean --kind {likely}?", file=sys.stderr)
    return 1 if total.malformed or total.wrong_kind else 0


def cmd_rebuild(args: argparse.Namespace) -> int:
    """A fresh store from the newest snapshot (or --snapshot); the damaged file is moved aside, never overwritten."""
    from dream_assets.store.rebuild import rebuild_store

    profile = _profile(args, must_exist=False)
    if not profile.root.is_dir():
        raise MissingProfile(f"no agent profile at {profile.root}; nothing to rebuild")
    snapshot = Path(args.snapshot) if args.snapshot else None
    result = rebuild_store(profile, _now(args), snapshot=snapshot, options=_options(profile), force=args.force)
    if result.damaged_aside is not None:
        print(f"kept the damaged store as {result.damaged_aside}")
    print(
        f"rebuilt {profile.store_path} from the snapshot {result.snapshot}: {result.memories_live} live memories, "
        f"{result.memories_archived} archived, {result.skills} skills, {result.purges} purge record(s); changes "
        "after the snapshot are lost and the change log starts empty (older cycles cannot be undone)"
    )
    return 0


def cmd_remove(args: argparse.Namespace) -> int:
    """Take the agent out of the Dagster instance (its partition); keep its data aside, or delete it."""
    from dream_assets.launch.agents import instance_home, remove_agent_partition

    profile = _profile(args, must_exist=False)
    home = instance_home()
    removed = remove_agent_partition(profile.agent_id, home)
    print(
        f"removed agent {profile.agent_id!r} from the Dagster instance in {home}"
        if removed
        else f"agent {profile.agent_id!r} was not registered in the Dagster instance in {home}"
    )
    if not profile.root.exists():
        print(f"no data at {profile.root}")
    elif args.delete_data:
        shutil.rmtree(profile.root)
        print(f"deleted its data at {profile.root}")
    else:
        # Out of the profile root's top level, or the discovery sensor would register the agent again.
        aside = profile.root.parent / REMOVED_FOLDER / f"{profile.agent_id}-{_now(args):%Y%m%dT%H%M%SZ}"
        aside.parent.mkdir(parents=True, exist_ok=True)
        shutil.move(str(profile.root), aside)
        print(f"kept its data at {aside} (the discovery sensor does not look there; --delete-data deletes it)")
    return 0


#: Where `dream remove` keeps a removed agent's data, under the profile root.
REMOVED_FOLDER = ".removed"


#: `dream memory` exit codes: done; nothing found (no hit, no such id); refused (a value breaks a rule, no profile);
#: the store could not be reached in time (try again).
MEMORY_OK, MEMORY_NOT_FOUND, MEMORY_INVALID, MEMORY_BUSY = 0, 1, 2, 3


def cmd_memory(args: argparse.Namespace) -> int:
    """save, search, get, forget and history through the same functions as the MCP tools (dream_assets.agent_memory).
    Exit 0 done, 1 nothing found, 2 refused (the message names the field), 3 store busy: try again."""
    from dream_assets import agent_memory as am

    profile = _profile(args)
    if args.action not in ("save", "search"):
        args.id = args.id or args.id_option
        if not args.id:
            print(f"dream memory {args.action}: give the memory's id (ID or --id ID)", file=sys.stderr)
            return MEMORY_INVALID
    try:
        now = am.parse_time(args.now)
        if args.action == "save":
            content = sys.stdin.read() if args.content == "-" else args.content
            result: Any = am.save(
                profile, content, category=args.category, tags=args.tag or (), importance=args.importance, now=now
            )
            text = f"{result.outcome} {result.id}" + (f" ({result.reason})" if result.reason else "")
        elif args.action == "search":
            result = am.search(
                profile, args.query, limit=args.limit, category=args.category, tags=args.tag or (), now=now
            )
            text = "\n".join(f"{h.id}  {h.score:.3f}  [{h.category}]  {h.content}" for h in result.hits)
        elif args.action == "get":
            result = am.get(profile, args.id, now=now)
            gone = "" if result.status == "live" else f" ({result.archived_reason or result.status})"
            lead = f"; now held by {result.current_id}" if result.current_id not in (None, result.id) else ""
            text = f"{result.id}  {result.status}{gone}{lead}\n[{result.category}] {result.content}"
        elif args.action == "forget":
            result = am.forget(profile, args.id, reason=args.reason, profile_arg=args.profile, now=now)
            text = (
                f"archived {result.id}; undo with `{result.undo_command}`"
                if result.archived
                else f"{result.id} was archived already; nothing changed"
            )
        else:
            result = am.history(profile, args.id, now=now)
            text = "\n".join(
                f"{e.at}  {e.event:<12}  {e.cycle_id} / {e.pass_name}: {e.reason}"
                + (f"\n    {e.content}" if e.content and e.event not in ("decayed", "decay undone") else "")
                for e in result.events
            )
    except am.NotFound as exc:
        return _failed(args, MEMORY_NOT_FOUND, f"dream memory {args.action}: {exc}")
    except am.StoreUnavailable as exc:
        return _failed(args, MEMORY_BUSY, f"dream memory {args.action}: {exc}")
    except am.AgentMemoryError as exc:
        return _failed(args, MEMORY_INVALID, f"dream memory {args.action}: {exc}")
    if args.json or text:
        print(result.model_dump_json(indent=2) if args.json else text)
    if args.action == "search" and not result.hits:
        if not args.json:
            print("no memory matches", file=sys.stderr)
        return MEMORY_NOT_FOUND
    return MEMORY_OK


def cmd_serve(args: argparse.Namespace) -> int:
    """The MCP server: stdio for the one agent of --profile, or Streamable HTTP for every agent under the profile root
    (--http HOST:PORT). Exit 2 when it cannot start as configured, also when the profile (stdio) or the profile root
    (HTTP) does not exist: an MCP client starts the server in a working directory of its own, where a missing or
    mistyped profile would otherwise become a new, empty agent that saves there. --create makes it instead."""
    from dream_assets import mcp_server

    if not args.http:
        profile = _profile(args, must_exist=False)
        if not args.create and not holds_profile(profile.root):
            raise MissingProfile(
                f"no agent profile at {profile.root}; create one with `dream init --profile {args.profile}` "
                "(or start an empty one with --create)"
            )
        mcp_server.serve_stdio(profile)
        return 0
    host, sep, port = args.http.rpartition(":")
    if not sep or not port.isdigit() or not host:
        print(f"dream serve --http {args.http!r}: give HOST:PORT, e.g. 127.0.0.1:8765", file=sys.stderr)
        return 2
    options = DreamOptions.load(env=os.environ)
    root = Path(args.profile_root or options.ProfileRoot).expanduser()
    if not root.is_dir() and not args.create:
        raise MissingProfile(
            f"no profile root at {root.resolve()}; create an agent under it with "
            f"`dream init --profile {root / '<agent id>'}` (or pass --create to start with an empty root)"
        )
    try:
        gate = mcp_server.gate_from_environment(
            root,
            host.strip("[]"),
            int(port),
            allowed_origins=args.allow_origin or (),
            allowed_hosts=args.allow_host or (),
            max_request_bytes=args.max_request_bytes,
        )
    except mcp_server.ServeConfigError as exc:
        print(f"dream serve: {exc}", file=sys.stderr)
        return 2
    root.mkdir(parents=True, exist_ok=True)  # only with --create does it not exist yet
    print(
        f"dream serve: agents under {gate.profile_root} at http://{args.http}/agents/<agent id>/mcp"
        + (" (bearer token required)" if gate.token or gate.agent_tokens else ""),
        file=sys.stderr,
        flush=True,
    )
    mcp_server.serve_http(gate, mcp_server.connection_limits(options))
    return 0


class _Parser(argparse.ArgumentParser):
    """No abbreviated flags (``--profil`` is not ``--profile``: a typo never runs a whole cycle), and a flag no
    command knows is refused with the usage of the command it was given to and the closest flag it has."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs["allow_abbrev"] = False
        super().__init__(*args, **kwargs)
        self.chosen: _Parser = self  # the deepest command parsed (set on the top-level parser while parsing)
        self.top: _Parser = self

    def parse_known_args(self, args: Any = None, namespace: Any = None) -> Any:
        self.top.chosen = self
        return super().parse_known_args(args, namespace)

    def parse_args(self, args: Any = None, namespace: Any = None) -> Any:  # type: ignore[override]
        parsed, extras = self.parse_known_args(args, namespace)
        if extras:
            self.chosen.unrecognized(extras)
        return parsed

    def add_subparsers(self, **kwargs: Any) -> Any:
        action = super().add_subparsers(**kwargs)
        top = self.top
        original = action.add_parser

        def add_parser(name: str, **kw: Any) -> _Parser:
            parser = original(name, **kw)
            parser.top = top
            return parser

        action.add_parser = add_parser  # type: ignore[method-assign]
        return action

    def unrecognized(self, extras: list[str]) -> None:
        flags = [o for action in self._actions for o in action.option_strings if o.startswith("--")]
        hints = []
        for extra in extras:
            if extra.startswith("-"):
                close = difflib.get_close_matches(extra.split("=", 1)[0], flags, n=1, cutoff=0.6)
                if close:
                    hints.append(f"did you mean {close[0]}?")
        self.error(f"unrecognized arguments: {' '.join(extras)}" + (f" ({'; '.join(hints)})" if hints else ""))


def build_parser() -> argparse.ArgumentParser:
    p = _Parser(prog="dream", description="Keep an agent's memory and skills healthy while it is idle.")
    sub = p.add_subparsers(dest="command", required=True)

    def common(sp: argparse.ArgumentParser) -> None:
        sp.add_argument("--profile", default=DEMO_PROFILE, help=f"agent profile folder (default {DEMO_PROFILE})")
        sp.add_argument("--now", type=_now_arg, help="act as if it were this ISO-8601 instant (replays, demos)")
        sp.add_argument(
            "--verbose", action="store_true", help="on a failure, print the traceback; `dream run`: the run's logs"
        )

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
    sp.add_argument(
        "--force",
        dest="force_passes",
        nargs="+",
        metavar="PASS",
        help="run these passes even if their input has not changed and their minimum interval has not "
        "passed (this run only; recorded in the pass ledger), e.g. memory_consolidation",
    )
    sp.add_argument("--reason", help="why the passes are forced (recorded in the pass ledger)")
    sp.set_defaults(func=cmd_run)

    sp = sub.add_parser(
        "undo",
        help="undo one cycle's changes (or list cycles with --list); exits 0 when records "
        "were put back or nothing was left to undo, 3 when nothing could be undone",
    )
    common(sp)
    sp.add_argument("--cycle", help="cycle (Dagster run) id")
    sp.add_argument("--pass", dest="pass_name", help="only this pass's changes, e.g. memory_consolidation")
    sp.add_argument(
        "--list",
        action="store_true",
        help="per cycle and pass: changes, what is still undoable, review stamps apart",
    )
    sp.add_argument(
        "--force", action="store_true", help="undo what can be undone even if some entries were edited since"
    )
    sp.add_argument(
        "--wait",
        type=float,
        default=0.0,
        metavar="SECONDS",
        help="while a cycle or a pass of the agent is running, wait up to this long for it before refusing (default 0)",
    )
    sp.set_defaults(func=cmd_undo)

    sp = sub.add_parser("review", help="list the change sets waiting for review, with before/after of each change")
    common(sp)
    sp.set_defaults(func=cmd_review)

    for name, text in (
        ("apply", "apply a pending change set (--cycle) or single changes (--change), each re-checked first"),
        (
            "reject",
            "reject a pending change set (--cycle) or single changes (--change); a rejected merge is not "
            "proposed again before the cooldown",
        ),
    ):
        sp = sub.add_parser(name, help=text)
        common(sp)
        sp.add_argument("--cycle", help="the whole pending set of this cycle")
        sp.add_argument("--change", nargs="+", metavar="ID", help="these changes (ids from `dream review`)")
        sp.add_argument("--reason", help="why (recorded with the decision)")
        sp.add_argument(
            "--wait",
            type=float,
            default=0.0,
            metavar="SECONDS",
            help="while a pass of the agent is running, wait up to this long before refusing",
        )
        sp.set_defaults(func=cmd_decide)

    sp = sub.add_parser(
        "check-model",
        help="rehearse every model pass's real prompt against the configured endpoint, nothing applied",
    )
    common(sp)
    sp.set_defaults(func=cmd_check_model)

    sp = sub.add_parser("restore", help="restore one archived memory by id")
    common(sp)
    sp.add_argument("--id", required=True)
    sp.set_defaults(func=cmd_restore)

    sp = sub.add_parser(
        "status",
        help="counts, and every pass with its last run, status, reason, next run, model calls and input fingerprint",
    )
    common(sp)
    sp.add_argument("--full", action="store_true", help="show input fingerprints in full, however long")
    sp.set_defaults(func=cmd_status)

    sp = sub.add_parser(
        "report",
        help="what the last cycle changed (merged, archived, protected, superseded, "
        "rejected and why), its model calls and tokens, and how to undo it",
    )
    common(sp)
    sp.add_argument("--cycle", help="this cycle (Dagster run) id instead of the last one")
    sp.set_defaults(func=cmd_report)

    sp = sub.add_parser(
        "import-logs",
        help="load historical JSONL logs into the warehouse for backfills; only "
        "valid records of --kind are imported, other lines are counted and listed "
        "(exit 1), a missing file or unknown kind imports nothing (exit 2)",
    )
    common(sp)
    sp.add_argument(
        "--kind",
        required=True,
        help="skill-usage, tool-call, feedback, skill-resource-usage, wisp-executions, tier-routing or conversation",
    )
    sp.add_argument("files", nargs="+")
    sp.set_defaults(func=cmd_import_logs)

    sp = sub.add_parser(
        "rebuild",
        help="rebuild a damaged store from the newest Parquet snapshot (the damaged file is kept aside, never "
        "overwritten)",
    )
    common(sp)
    sp.add_argument("--snapshot", help="this snapshot folder (snapshots/<time>) instead of the newest")
    sp.add_argument("--force", action="store_true", help="rebuild even a store that is readable")
    sp.set_defaults(func=cmd_rebuild)

    sp = sub.add_parser(
        "remove",
        help="remove the agent from the Dagster instance (DAGSTER_HOME, else .dagster_home); its data is moved to "
        f"{REMOVED_FOLDER}/ under the profile root, or deleted with --delete-data",
    )
    common(sp)
    sp.add_argument("--delete-data", action="store_true", help="delete the agent's profile folder")
    sp.set_defaults(func=cmd_remove)

    sp = sub.add_parser(
        "memory",
        help="save, search, get, forget or show the history of a memory (as the MCP tools do); exit 0 done, "
        "1 nothing found, 2 refused (the message names the field), 3 store busy",
    )
    actions = sp.add_subparsers(dest="action", required=True)
    for name, text in (
        ("save", "save a fact (CONTENT '-' reads standard input): created, reinforced or extended"),
        ("search", "live memories matching QUERY, best first"),
        ("get", "one memory by id, archived too, with where it went"),
        ("forget", "archive a memory with a reason (dream undo puts it back)"),
        ("history", "a memory's versions from the change log"),
    ):
        ap = actions.add_parser(name, help=text)
        common(ap)
        ap.add_argument("--json", action="store_true", help="print the result as JSON")
        if name == "save":
            ap.add_argument("content")
            ap.add_argument("--category", default="general")
            ap.add_argument("--importance", type=float, default=0.5)
        elif name == "search":
            ap.add_argument("query")
            ap.add_argument("--limit", type=int, default=10)
            ap.add_argument("--category")
        else:
            ap.add_argument("id", nargs="?", help="the memory's id (or --id)")
            ap.add_argument("--id", dest="id_option", metavar="ID", help="the memory's id (or as the argument)")
        if name in ("save", "search"):
            ap.add_argument("--tag", action="append", help="a tag (repeat for more)")
        if name == "forget":
            ap.add_argument("--reason", required=True)
        ap.set_defaults(func=cmd_memory)

    sp = sub.add_parser(
        "serve",
        help="the agent's memory as an MCP server: stdio for --profile, or Streamable HTTP with --http HOST:PORT "
        "(one endpoint per agent, /agents/<id>/mcp); exit 2 when it cannot start as configured",
    )
    common(sp)
    sp.add_argument("--http", metavar="HOST:PORT", help="serve every agent under --profile-root over HTTP")
    sp.add_argument("--profile-root", help="folder of the agent profiles (default: option ProfileRoot)")
    sp.add_argument(
        "--create",
        action="store_true",
        help="create the profile (stdio) or the profile root (HTTP) when it does not exist; without it a missing "
        "one is refused (exit 2)",
    )
    sp.add_argument(
        "--allow-origin", action="append", metavar="URL", help="a browser Origin allowed besides the server's own"
    )
    sp.add_argument(
        "--allow-host", action="append", metavar="HOST:PORT", help="a Host header allowed besides the loopback names"
    )
    sp.add_argument(
        "--max-request-bytes",
        type=int,
        default=1024 * 1024,
        help="largest request body accepted (default 1 MiB)",
    )
    sp.set_defaults(func=cmd_serve)

    from dream_assets.folders.commands import add_commands

    add_commands(sub, common, _profile, _now)
    return p


def _log_level(args: argparse.Namespace) -> str:
    """What the logs print: ``DREAM_LOG_LEVEL`` when set; else INFO with --verbose, and only what the command
    itself prints without it (each failure is one line of the command's own)."""
    return os.environ.get("DREAM_LOG_LEVEL") or ("INFO" if getattr(args, "verbose", False) else "CRITICAL")


def _refusals() -> tuple[type[BaseException], ...]:
    """Errors that leave everything as it was and say so in their message (exit 2)."""
    from dream_assets.launch.agents import InstanceMissing
    from dream_assets.store.connection import StoreError
    from dream_assets.store.rebuild import RebuildError

    return (MissingProfile, StoreError, RebuildError, InstanceMissing)


def _one_line(exc: BaseException) -> str:
    return " ".join(str(exc).split()) or type(exc).__name__


def _failed(args: argparse.Namespace, code: int, message: str) -> int:
    """Report a failure: one line on standard error, or with ``--json`` one JSON object on standard output (where a
    script reads the result) ``{"error": ..., "exit": code}``. Returns ``code``."""
    if getattr(args, "json", False):
        print(json.dumps({"error": message, "exit": code}), flush=True)
    else:
        print(message, file=sys.stderr)
    return code


def main(argv: list[str] | None = None) -> int:
    # Dagster's beta/deprecation notices are for developers of this project, not for people running it.
    warnings.filterwarnings("ignore", module=r"dagster(\.|$)")
    warnings.filterwarnings("ignore", category=DeprecationWarning)
    args = build_parser().parse_args(argv)
    logging.basicConfig(level=_log_level(args), format="%(levelname)s %(name)s: %(message)s")
    if args.command == "undo" and not args.list and not args.cycle:
        print("dream undo: give --cycle ID (see --list)", file=sys.stderr)
        return 2
    try:
        return int(args.func(args))
    except OptionsError as exc:
        _traceback(args)
        return _failed(args, 2, f"configuration error: {_one_line(exc)}")
    except Exception as exc:  # noqa: BLE001 - every failure is one line naming the file or URL; --verbose: the rest
        _traceback(args)
        if isinstance(exc, _refusals()):
            return _failed(args, 2, f"dream {args.command}: {_one_line(exc)}")
        return _failed(
            args,
            1,
            f"dream {args.command} failed: {type(exc).__name__}: {_one_line(exc)}"
            + ("" if args.verbose else " (--verbose shows the traceback)"),
        )


def _traceback(args: argparse.Namespace) -> None:
    if getattr(args, "verbose", False):
        traceback.print_exc()


if __name__ == "__main__":
    sys.exit(main())
