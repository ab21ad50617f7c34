"""The `dream` command: set up a profile, run a cycle through Dagster, undo a cycle, review, apply or reject the
changes a pass held for review, import logs, show status, rebuild a damaged store, remove an agent.

Exit codes (README "Exit codes"): 0 done; 1 the command ran and something failed (a pass, lines not imported, an
unexpected error); 2 refused, nothing done (a usage or configuration error, no such profile, cycle or pass, a store
that is damaged or busy); 3 `dream undo` undid nothing. A failure prints one line naming the file or URL; the
traceback and the logs only with --verbose.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import logging
import os
import shutil
import sys
import traceback
import warnings
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from dream_assets.model import clock_problem, parse_ts
from dream_assets.options import DreamOptions, OptionsError
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
    """The agent's options with every pass's section, each setting checked (the memory commands load theirs in the
    memory service, without the passes)."""
    from dream_assets.options_loader import load_agent_options

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
    from dream_assets.enrolment import enrol

    if profile.store_path.exists():
        if args.if_missing:
            # a profile from before dream-agent.json: set up for dreaming now, its data left as it is
            note = " (now set up for dreaming)" if enrol(profile, _now(args)) else ""
            print(f"profile {profile.root} already exists; leaving it as it is{note}")
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
        enrol(profile.ensure(), _now(args))
        print(f"created an empty profile at {profile.root}")
        return 0
    summary = build_demo_profile(profile, _now(args), options=_options(profile), n_memories=args.memories)
    print(
        f"demo agent ready at {profile.root}: {summary.memories} memories ({summary.archived} archived), "
        f"{summary.skills} skills, {summary.sessions} conversation sessions"
    )
    return 0


def cmd_run(args: argparse.Namespace) -> int:
    from dream_assets.extras import has_extra
    from dream_assets.llm.client import configured_model_identity, endpoint_problem, resolve_backend_name
    from dream_assets.passes.registry import PASSES, UnknownPass, parse_forced

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
    endpoints = {
        (o.LlmBaseUrl, o.LlmModel, o.LlmApiKeyEnv): o
        for o in [options, *(options.for_pass_model(spec.name) for spec in PASSES if spec.uses_model)]
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

    if not has_extra("dagster"):  # the base install: the same passes in this process, without a run history
        with ProgressPrinter(profile.model_progress_path):
            return _run_in_process(args, profile, options, forced, identity)
    from dream_assets.launch.cycle import run_cycle_in_dagster

    with ProgressPrinter(profile.model_progress_path):  # every model call as it runs
        run = run_cycle_in_dagster(
            profile, now=args.now, force=forced, force_reason=args.reason, log_level=_log_level(args)
        )
    width = max(len(p.name) for p in PASSES)
    for spec in PASSES:
        print(pass_line(spec.name, *run.summaries.get(spec.name, ("not run", "")), width))
    for what, said in (("read", run.folder_read), ("write-back", run.folder_written)):
        if said:
            print(f"memory folder {what}: {said}")
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
    where = (
        f"; the Dagster UI of the instance in {run.instance} shows it (make dev)"
        if run.instance
        else "; it was recorded in no Dagster instance (set DAGSTER_HOME, or run it where make dev keeps .dagster_home)"
    )
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


def pass_line(name: str, status: str, summary: str, width: int) -> str:
    """One pass's line in `dream run`'s output: its name, its status and what it did, or why not (a skip's summary is
    its cause alone; a failure's reason is said once, on the last line)."""
    return f"  {name:<{width}}  {status:<9}  {'why: see the last line' if status == 'failed' else summary}"


def _run_in_process(
    args: argparse.Namespace, profile: AgentProfile, options: DreamOptions, forced: list[str], identity: str
) -> int:
    """`dream run` on an install without Dagster: the passes in this process (cycle.run_cycle), reported as the
    Dagster path reports them; exit 1 when a pass failed."""
    from dream_assets.cycle import run_cycle

    print(
        "Dagster is not installed: the cycle runs in this process (no run history, schedules or UI; "
        "pip install 'dream-assets[dagster]' for them)"
    )
    reports = run_cycle(profile, options, _now(args), force=forced, force_reason=args.reason)
    width = max(len(r.pass_name) for r in reports)
    for r in reports:
        print(pass_line(r.pass_name, r.status, r.summary or r.reason, width))
    calls = sum(r.model_calls for r in reports)
    print(f"model calls this cycle: {calls} ({identity})")
    failed = {r.pass_name: r.reason or r.summary for r in reports if r.status == "failed"}
    if not failed:
        print("cycle succeeded")
        return 0
    problems = [f"{', '.join(names)} failed: {reason}" for reason, names in _said_once(failed).items()]
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
    from dream_assets import service

    profile = _profile(args)
    if args.list:
        return _list_changes(service.list_changes(profile, options=_options(profile)), args.profile)
    if args.change and (args.cycle or args.pass_name or args.force):
        print("dream undo: --change ID goes alone (not with --cycle, --pass or --force)", file=sys.stderr)
        return 2
    try:
        report = service.undo(
            profile,
            cycle_id=args.cycle,
            change_id=args.change,
            pass_name=args.pass_name,
            force=args.force,
            wait=args.wait,
            now=_now(args),
            options=_options(profile),
            profile_arg=args.profile,
        )
    except (service.NotFound, service.InvalidInput) as exc:
        print(f"dream undo: {exc}", file=sys.stderr)
        return 2
    except service.Refused as exc:
        _print_stale_markers(exc.stale_markers)
        print(f"undo refused: {exc}" if exc.running else str(exc), file=sys.stderr)
        return 2
    except service.StoreUnavailable as exc:  # busy: try again later (what was done is kept; a rerun finishes it)
        print(f"undo stopped: {exc}", file=sys.stderr)
        return 2
    return _print_undo(report)


#: `dream undo` exit codes by the undo's outcome: done, partly done (named above), nothing undone.
UNDO_EXIT = {"done": 0, "partial": 1, "nothing": 3}


def _print_undo(report) -> int:
    """What an undo did, target by target, from its report; the exit code of its outcome."""
    _print_stale_markers(report.stale_markers)
    decayed = report.done("importance put back")
    for p in report.put_back:
        if p.kind != "importance put back":
            target = f"{p.target} ({p.place})" if p.place else p.target  # a folder note: its file and heading
            print(f"{p.kind} {target}: {p.detail}" if p.detail else f"put back {target}")
    if decayed:  # one line: a decay touches most of the corpus
        print(
            f"importance put back on {len(decayed)} entr{'y' if len(decayed) == 1 else 'ies'} decayed by the cycle "
            "(the next cycle decays them again by the calendar): "
            + ", ".join(p.target.split(" ", 1)[1] for p in decayed)
        )
    for line in report.already_undone:
        print(f"already undone {line}")
    for line in report.left:
        print(f"left     {line}")
    for line in report.not_restored:
        print(f"NOT restored {line}", file=sys.stderr)
    for line in report.refused:
        print(f"refused  {line}", file=sys.stderr)
    if report.blocked_by:
        print(report.summary)
        return UNDO_EXIT[report.outcome]
    # the linked memory folder's files, as the change set found them
    for line in report.files:
        print(line, file=sys.stderr if line.startswith("NOT") else sys.stdout)
    print(report.summary)
    retired = report.done("retired")
    if retired:
        print(
            f"the {len(retired)} entr{'y' if len(retired) == 1 else 'ies'} the cycle created (merged entries, new "
            "notes) stay as archived rows: the undo archived them, it never deletes"
        )
    if report.put_back and report.review_marks:
        marked = report.review_marks
        print(
            f"left as the cycle wrote them: review marks on {marked} entr{'y' if marked == 1 else 'ies'} (metadata "
            f"{', '.join(report.review_mark_keys)}); they record which entries the model has "
            "seen unchanged, so those are not shown again until they change; housekeeping, not changes: an undo "
            "leaves them"
        )
    # Exit 0 when the undo did something usable (put records back, or found nothing left to do), refusals under
    # --force listed above; 1 when some entries could not be restored or a file of the linked folder could not be put
    # back (each named above: the folder and the store disagree until it is); 3 when nothing was undone.
    return UNDO_EXIT[report.outcome]


def _print_stale_markers(stale: list[str]) -> None:
    for line in stale:
        print(f"ignored the marker of a cycle that is no longer running, and removed it: {line}", file=sys.stderr)


def _list_changes(rows, profile_arg: str) -> int:
    """One line per cycle and pass, oldest cycle first, each starting with the cycle id: real changes, how many are
    still undoable, and the review stamps apart (they are not changes and undo leaves them)."""
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
        print(f"{r.cycle_id}  {parse_ts(r.started_at):%Y-%m-%d %H:%M}  {r.pass_name:<{width}}  {text}{stamps}")
    return 0


def cmd_review(args: argparse.Namespace) -> int:
    """The pending change sets, oldest first, each change with its id, pass, kind, reason and a before/after diff."""
    from dream_assets import service

    profile = _profile(args)
    listed = service.review_list(profile, options=_options(profile), now=_now(args))
    if not listed.pending:
        print(
            f"agent {listed.agent}: nothing waits for review"
            + (f" ({listed.expired} expired unreviewed, not applied)" if listed.expired else "")
        )
        return 0
    print(f"agent {listed.agent}: {listed.pending} change(s) wait for review in {len(listed.sets)} set(s)")
    for s in listed.sets:
        print(
            f"\nset {s.cycle_id} ({', '.join(s.passes)}), proposed {_when(parse_ts(s.proposed_at))}: "
            f"{len(s.changes)} change(s), expires {_when(parse_ts(s.expires_at))} unless applied"
        )
        for c in s.changes:
            for line in c.lines:
                print(f"  {line}")
    if listed.expired:
        print(f"\n{listed.expired} expired unreviewed (not applied)")
    print(
        f"\napply with `dream apply --profile {args.profile} --cycle CYCLE` (or --change ID ...), reject with "
        f"`dream reject --profile {args.profile} --cycle CYCLE` (or --change ID ...); add --reason TEXT"
    )
    return 0


#: `dream apply` / `dream reject` exit codes by the decision's outcome.
DECIDE_EXIT = {"done": 0, "partial": 1, "nothing": 2}


def cmd_decide(args: argparse.Namespace) -> int:
    """`dream apply` and `dream reject`: a whole set (--cycle) or single changes (--change), with a reason. Exit 0
    when every change named was decided, 1 when some were refused (edited meanwhile) or could not be written, 2 when
    nothing was acted on (no such set or change, or decided or expired before)."""
    from dream_assets import service

    if not args.cycle and not args.change:
        print(f"dream {args.command}: give --cycle CYCLE or --change ID ... (see `dream review`)", file=sys.stderr)
        return 2
    profile = _profile(args)
    decision = "apply" if args.command == "apply" else "reject"
    try:
        result = service.review_decide(
            profile,
            decision,
            cycle_id=args.cycle,
            change_ids=args.change or (),
            reason=args.reason or "",
            wait=args.wait,
            now=_now(args),
            options=_options(profile),
        )
    except service.Refused as exc:
        print(f"{args.command} refused: {exc}", file=sys.stderr)
        return 2
    except service.InvalidInput as exc:
        print(f"dream {args.command}: {exc}", file=sys.stderr)
        return 2
    done = "applied" if decision == "apply" else "rejected"
    for c in result.done:
        print(f"{done} {c.id}  {c.pass_name}  {c.label}: {c.summary}")
    for line in result.refused:
        print(f"refused {line}", file=sys.stderr)
    for line in result.failed:
        print(f"NOT {done} {line}", file=sys.stderr)
    for line in result.not_found:
        print(f"not {done}: {line}", file=sys.stderr)
    undo = (
        f"; undo with `dream undo --profile {args.profile} --cycle {result.undo_cycle_id}`"
        if result.undo_cycle_id
        else ""
    )
    print(
        f"dream {args.command}: {len(result.done)} {done}, {len(result.refused)} refused (edited meanwhile), "
        f"{len(result.failed)} could not be written, {len(result.not_found)} not found or decided before{undo}"
    )
    return DECIDE_EXIT[result.outcome]


def cmd_restore(args: argparse.Namespace) -> int:
    """Put one archived memory back in the live corpus, recorded in the change log under a cycle of its own so
    `dream undo` can archive it again. A live memory is left alone (exit 0); an unknown or purged id exits 2."""
    from dream_assets import service

    profile = _profile(args)
    try:
        result = service.restore(profile, args.id, now=_now(args), options=_options(profile), profile_arg=args.profile)
    except service.NotFound as exc:
        print(str(exc), file=sys.stderr)
        return 2
    except service.InvalidInput as exc:
        print(f"dream restore: {exc}", file=sys.stderr)
        return 2
    except service.StoreUnavailable as exc:
        print(f"restore stopped: {exc}", file=sys.stderr)
        return 2
    if result.status == "already_live":
        print(f"memory {result.id} is live, not archived; nothing to restore: {result.content}")
        return 0
    print(f"restored memory {result.id}: {result.content}")
    print(f"recorded as cycle {result.cycle_id}; archive it again with `{result.undo_command}`")
    return 0


def cmd_status(args: argparse.Namespace) -> int:
    """Every pass with its last run, status and reason, when it runs next, its model calls and its full ledger
    fingerprint."""
    from dream_assets import service

    profile = _profile(args)
    if args.options:
        return _print_options(profile)
    st = service.status(profile, options=_options(profile), now=_now(args), profile_arg=args.profile)
    print(f"agent {st.agent}: {st.live_memories} live memories, {st.archived_memories} archived, {st.skills} skills")
    print(f"recall index: {st.recall_index}")
    print(f"embeddings: {st.embeddings}")
    if st.review.count:
        print(f"review: {st.review.line}")
    if st.review.expired:
        print(f"review: {st.review.expired} change(s) expired unreviewed (ReviewExpiryDays), not applied")
    if st.ledger_warning:
        print(f"WARNING: {st.ledger_warning}")
    if st.running_now is not None:
        print(f"running now: {st.running_now}")
    width = max(len(p.name) for p in st.passes)
    for p in st.passes:
        if p.status == "never run":
            head = "never run (no record yet)"
        else:
            status = "deferred: budget" if p.budget_deferral else p.status
            at = parse_ts(p.last_run) if p.last_run else None
            head = f"{status:<9}  last run {_when(at)}  model calls {p.model_calls}, tokens {p.tokens}"
        print(f"  {p.name:<{width}}  {head}")
        pad = " " * (width + 4)
        if p.summary:
            print(f"{pad}{'reason' if p.reason else 'summary'}: {p.summary}")
        if p.fingerprint is not None and p.last_completed is not None:
            fp = p.fingerprint
            shown = (
                fp
                if args.full or len(fp) <= FINGERPRINT_SHOWN
                else (
                    f"{fp[:FINGERPRINT_SHOWN]}… (first {FINGERPRINT_SHOWN} of {len(fp)} characters; --full shows all)"
                )
            )
            forced = f" (forced: {p.forced})" if p.forced else ""
            print(f"{pad}last completed {_when(parse_ts(p.last_completed))}{forced}, input fingerprint {shown}")
        print(f"{pad}next run: {p.next_run}")
    return 0


def _print_options(profile: AgentProfile) -> int:
    """``dream status --options``: every option by its nested name, its resolved value, its flat alias and where the
    value came from (the default, a file and key, or an environment variable)."""
    from dream_assets.options_loader import resolve_agent_options

    rows = resolve_agent_options(profile).rows()
    print(f"options of agent {profile.agent_id} (name = value  [alias]  from):")
    width = max(len(f"{r.nested} = {r.shown}") for r in rows)
    alias = max(len(r.alias) for r in rows) + 2
    for r in rows:
        print(f"  {f'{r.nested} = {r.shown}':<{width}}  {f'[{r.alias}]' if r.alias else '':<{alias}}  {r.source}")
    return 0


def _when(at: datetime | None) -> str:
    return f"{at:%Y-%m-%d %H:%M} UTC" if at is not None else "unknown"


def cmd_report(args: argparse.Namespace) -> int:
    """What the last cycle (or --cycle) changed, what it rejected and why, its model calls and how to undo it."""
    from dream_assets import service

    profile = _profile(args)
    try:
        found = service.report(
            profile, cycle_id=args.cycle, options=_options(profile), now=_now(args), profile_arg=args.profile
        )
    except service.NotFound as exc:
        print(str(exc), file=sys.stderr)
        return 2
    if found.cycle_id is None:
        print(f"no cycle has run for agent {profile.agent_id} yet; run one with `dream run --profile {args.profile}`")
        return 0
    print(found.markdown)
    return 0


def cmd_import_logs(args: argparse.Namespace) -> int:
    """Exit 0: every line was imported (or was already there); 1: some lines were left out (not records of the kind;
    listed); 2: nothing was imported (no profile, an unknown kind, a file that is missing or unreadable)."""
    from dream_assets import service

    profile = _profile(args)
    try:
        result = service.import_logs(profile, args.kind, args.files, options=_options(profile), now=_now(args))
    except service.InvalidInput as exc:
        print(f"dream import-logs: {exc}", file=sys.stderr)
        return 2
    for r in result.files:
        others = ", ".join(f"{n} {k}" for k, n in r.other_kinds.items())
        print(
            f"{r.path}: {r.imported} new line(s) in the {args.kind} warehouse, {r.already_there} already there, "
            f"{r.malformed} malformed, {r.wrong_kind} of another kind" + (f" ({others})" if others else "")
        )
        for problem in r.problems:
            print(f"  not imported: {problem}", file=sys.stderr)
        if r.more_problems:
            print(f"  … and {r.more_problems} more line(s) not imported", file=sys.stderr)
    if result.error is not None:
        print(f"dream import-logs: {result.error}", file=sys.stderr)
        return 2
    print(
        f"{result.imported} line(s) imported, {result.already_there} already there, {result.malformed} malformed, "
        f"{result.wrong_kind} of another kind"
    )
    if result.likely_kind:
        print(
            f"most lines are {result.likely_kind} records: did you mean --kind {result.likely_kind}?", file=sys.stderr
        )
    return 1 if result.malformed or result.wrong_kind else 0


def cmd_rebuild(args: argparse.Namespace) -> int:
    """A fresh store from the newest snapshot (or --snapshot); the damaged file is moved aside, never overwritten."""
    from dream_assets import service

    profile = _profile(args, must_exist=False)
    if not profile.root.is_dir():
        raise MissingProfile(f"no agent profile at {profile.root}; nothing to rebuild")
    result = service.rebuild(
        profile, snapshot=args.snapshot, force=args.force, options=_options(profile), now=_now(args)
    )
    if result.damaged_aside is not None:
        print(f"kept the damaged store as {result.damaged_aside}")
    print(
        f"rebuilt {result.store} from the snapshot {result.snapshot}: {result.memories_live} live memories, "
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


class _NoPandas:
    """An import finder that says pandas is not installed (see ``_without_pandas``)."""

    def find_spec(self, name: str, path: Any = None, target: Any = None) -> None:
        if name == "pandas" or name.startswith("pandas."):
            raise ModuleNotFoundError(f"No module named {name!r}: a memory command runs without it", name=name)


@contextlib.contextmanager
def _without_pandas() -> Iterator[None]:
    """A memory command never uses pandas (a third of a second to import): should a library look for it when it is
    installed (pyarrow did, on its first conversion of Python values), while the command runs it finds it absent, as
    in an install without it. The finder goes when the command returns, so a process that runs the command and goes
    on (a caller of ``main``, a test) imports pandas as before."""
    finder = None
    if "pandas" not in sys.modules and not any(isinstance(f, _NoPandas) for f in sys.meta_path):
        finder = _NoPandas()
        sys.meta_path.insert(0, finder)
    try:
        yield
    finally:
        if finder is not None and finder in sys.meta_path:
            sys.meta_path.remove(finder)


def cmd_memory(args: argparse.Namespace) -> int:
    """save, search, list, get, forget and history through the same functions as the MCP tools
    (dream_assets.service). Exit 0 done, 1 nothing found, 2 refused (the message names the field), 3 store busy:
    try again."""
    with _without_pandas():
        return _memory_command(args)


def _memory_command(args: argparse.Namespace) -> int:
    from dream_assets import service as am

    profile = _profile(args)
    if args.action not in ("save", "search", "list"):
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
            if result.note:
                print(f"note: {result.note}", file=sys.stderr)
        elif args.action == "list":
            result = am.list_memories(
                profile,
                category=args.category,
                include_archived=args.archived,
                cursor=args.cursor,
                limit=args.limit,
                now=now,
            )
            text = "\n".join(
                f"{m.id}  {m.created_at}  [{m.category}]{'' if m.status == 'live' else ' (archived)'}  {m.content}"
                for m in result.items
            ) + (f"\nnext page: --cursor {result.next_cursor}" if result.next_cursor else "")
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
    if (args.action == "search" and not result.hits) or (args.action == "list" and not result.items):
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

    if not os.environ.get("DREAM_LOG_LEVEL") and not getattr(args, "verbose", False):
        # A server's standard error is its log (an MCP client keeps it): what the project warns of goes there, e.g. a
        # damaged recall index file rebuilt from the store, or the numpy index serving for want of the compiled one.
        logging.getLogger("dream_assets").setLevel(logging.WARNING)
    if args.http and args.profile is not None:
        print(
            f"dream serve --http serves every agent under --profile-root; --profile {args.profile} names one agent "
            "(stdio). Give --profile-root (the folder of the agents) with --http, or drop --http",
            file=sys.stderr,
        )
        return 2
    try:
        warm_limits = _warm_limits(args, max_agents=None if args.http else 1)
    except ValueError as exc:
        print(f"dream serve: {exc}", file=sys.stderr)
        return 2
    if not args.http:
        args.profile = args.profile or DEMO_PROFILE
        profile = _profile(args, must_exist=False)
        if not args.create and not holds_profile(profile.root):
            raise MissingProfile(
                f"no agent profile at {profile.root}; create one with `dream init --profile {args.profile}` "
                "(or start an empty one with --create)"
            )
        mcp_server.serve_stdio(profile, warm_limits)
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
    try:
        sock = mcp_server.listen(gate.host, gate.port)  # before the banner: a taken port is said, and exits 2
    except mcp_server.ServeConfigError as exc:
        print(f"dream serve: {exc}", file=sys.stderr)
        return 2
    root.mkdir(parents=True, exist_ok=True)  # only with --create does it not exist yet
    print(
        mcp_server.start_line(
            f"agents under {gate.profile_root} at http://{args.http}/agents/<agent id>/mcp"
            + (" (bearer token required)" if gate.token or gate.agent_tokens else "")
        ),
        file=sys.stderr,
        flush=True,
    )
    mcp_server.serve_http(gate, mcp_server.connection_limits(options), sock, warm_limits)
    return 0


def _warm_limits(args: argparse.Namespace, *, max_agents: int | None = None) -> Any:
    """What ``dream serve`` keeps warm (service/warm.py), from its flags; a bad value is a ValueError naming it."""
    from dream_assets.service.warm import WarmLimits

    return WarmLimits(
        max_agents=args.max_agents if max_agents is None else max_agents,
        max_memory_mb=args.max_warm_mb,
        idle_s=args.idle_evict,
        store_linger_s=args.store_linger,
    )


_terminal_width: list[int] = []


def _help_width() -> int:
    """What argparse's help is laid out to: the terminal's width less 2 (its own default), read once."""
    if not _terminal_width:
        _terminal_width.append(shutil.get_terminal_size().columns - 2)
    return _terminal_width[0]


class _Parser(argparse.ArgumentParser):
    """No abbreviated flags (``--profil`` is not ``--profile``: a typo never runs a whole cycle), and a flag no
    command knows is refused with the usage of the command it was given to and the closest flag it has."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs["allow_abbrev"] = False
        super().__init__(*args, **kwargs)
        self.chosen: _Parser = self  # the deepest command parsed (set on the top-level parser while parsing)
        self.top: _Parser = self

    def _get_formatter(self) -> argparse.HelpFormatter:
        # The width argparse would take, read once: building the parser asks for a formatter per argument (about 170),
        # each asking the terminal its size again.
        return self.formatter_class(prog=self.prog, width=_help_width())

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
        import difflib  # only for a mistyped flag's hint

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
        help="undo one cycle's changes, or one change (or list cycles with --list); exits 0 when records "
        "were put back or nothing was left to undo, 1 when some could not be, 3 when nothing could be undone",
    )
    common(sp)
    sp.add_argument("--cycle", help="cycle (Dagster run) id")
    sp.add_argument("--pass", dest="pass_name", help="only this pass's changes, e.g. memory_consolidation")
    sp.add_argument(
        "--change",
        metavar="ID",
        help="only this one change (ids from `dream memory history --json`); refused while a later change builds on it",
    )
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
    sp.add_argument(
        "--options", action="store_true", help="every option's resolved value and where it came from, instead"
    )
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
        help="save, search, list, get, forget or show the history of a memory (as the MCP tools do); exit 0 done, "
        "1 nothing found, 2 refused (the message names the field), 3 store busy",
    )
    actions = sp.add_subparsers(dest="action", required=True)
    for name, text in (
        ("save", "save a fact (CONTENT '-' reads standard input): created, reinforced or extended"),
        ("search", "live memories matching QUERY, best first"),
        ("list", "the memories a page at a time, oldest first (--cursor gives the next page)"),
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
        elif name == "list":
            ap.add_argument("--category", help="only this category and its '/' children")
            ap.add_argument("--archived", action="store_true", help="archived memories too")
            ap.add_argument("--cursor", help="the next page's cursor, as the previous page printed it")
            ap.add_argument("--limit", type=int, default=50, help="most memories on the page")
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
    sp.set_defaults(profile=None)  # stdio: the demo agent unless given; with --http, --profile is refused
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
    sp.add_argument(
        "--max-agents", type=int, default=128, help="agents kept warm between calls, least recently used let go (128)"
    )
    sp.add_argument(
        "--max-warm-mb",
        type=float,
        default=2048.0,
        help="memory the warm agents may hold together: recall indexes (about 2 kB an entry) and open store files "
        "(about 8 MB each) (2048 MB)",
    )
    sp.add_argument(
        "--idle-evict", type=float, default=900.0, metavar="SECONDS", help="let go of an agent idle this long (900)"
    )
    sp.add_argument(
        "--store-linger",
        type=float,
        default=30.0,
        metavar="SECONDS",
        help="keep an agent's store file open this long after a call, unless another process asks for it (30)",
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
    from dream_assets.extras import MissingExtra
    from dream_assets.launch.agents import InstanceMissing
    from dream_assets.service import AgentMemoryError, StoreError

    # a service error says why and names the field or id, and nothing was changed; a missing extra names it
    return (MissingProfile, StoreError, AgentMemoryError, InstanceMissing, MissingExtra)


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
    """The ``dream`` command on ``argv`` (default: the process's arguments); its exit code. Run as the process itself
    (no ``argv``), a ``dream memory`` call ends the process when it is done (``_end_process``)."""
    # Dagster's beta/deprecation notices are for developers of this project, not for people running it.
    warnings.filterwarnings("ignore", module=r"dagster(\.|$)")
    warnings.filterwarnings("ignore", category=DeprecationWarning)
    args = build_parser().parse_args(argv)
    logging.basicConfig(level=_log_level(args), format="%(levelname)s %(name)s: %(message)s")
    if args.command == "undo" and not args.list and not args.cycle and not args.change:
        print("dream undo: give --cycle ID or --change ID (see --list)", file=sys.stderr)
        return 2
    code = _run(args)
    if argv is None and args.command == "memory":
        _end_process(code)
    return code


def _end_process(code: int) -> None:
    """End the process the way it would end, without the interpreter's teardown: the exit handlers run (the store
    closed, a recall index due for its file written, the logs flushed) and the output is flushed, but the loaded
    recall index and the store's engine are not freed object by object before the memory goes back to the system
    anyway (about a tenth of a second of a shell's `dream memory search`, as much as the search). Not when a thread
    of the process other than a daemon is still running: the teardown waits for it."""
    import atexit
    import threading

    if any(t.is_alive() and not t.daemon for t in threading.enumerate() if t is not threading.main_thread()):
        return
    atexit._run_exitfuncs()
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):  # a reader that went away (`| head`): what it missed stays missed
            pass
    os._exit(code)


def _run(args: argparse.Namespace) -> int:
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
