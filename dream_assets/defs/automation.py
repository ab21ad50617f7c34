"""Schedules and sensors: the cycle interval with its minimum-interval floors, the start-up delay, the change gate
per corpus-wide pass, the retry of a pass deferred by a busy model, and discovery of agent profiles (one dynamic
partition each).

One bad agent never stops the others: an agent whose profile folder is missing, whose dream.toml is unusable or whose
store cannot be read is skipped with a reason naming it and the file (logged on the tick, and the skip reason when
nothing else runs), and every other agent gets its run requests. Sensors take their clock from the deployment
resource (``DreamDeployment.now``, the wall clock by default); the schedule from its scheduled execution time.
"""

import json
import os
import time
from collections.abc import Callable
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any, NamedTuple

import dagster as dg

from dream_assets.defs.passes import dream_cycle
from dream_assets.defs.review import REVIEW_ASSET
from dream_assets.enrolment import left_out_note
from dream_assets.gates import (
    GATED_PASSES,
    disabled_by,
    gate_input_path,
    gate_signature,
    gate_status,
    min_interval_floor,
)
from dream_assets.model import iso, parse_ts
from dream_assets.options import DreamOptions
from dream_assets.options_loader import load_options
from dream_assets.orchestration.deployment import AgentUnavailable, DreamDeployment, describe_problem, removal_hint
from dream_assets.orchestration.partitions import AGENTS, agents_partitions
from dream_assets.passes import review
from dream_assets.passes.deferral import deferral_due, parse_deferral
from dream_assets.passes.outcome import load_deferred
from dream_assets.passes.registry import PASSES, by_name
from dream_assets.profile import AgentProfile

CYCLE_ASSETS = [*(p.name for p in PASSES), "corpus_snapshot"]


def interval_cron(interval: timedelta) -> str:
    """A cron expression for DreamOptions.Interval (whole minutes dividing an hour, hours dividing a day, or days)."""
    minutes = int(interval.total_seconds() // 60)
    if minutes <= 0 or interval.total_seconds() % 60:
        raise ValueError(f"Interval {interval} must be a positive whole number of minutes")
    if minutes < 60 and 60 % minutes == 0:
        return f"*/{minutes} * * * *"
    if minutes % 60 == 0 and minutes < 1440 and 24 % (minutes // 60) == 0:
        return f"0 */{minutes // 60} * * *"
    if minutes % 1440 == 0:
        return f"0 0 */{minutes // 1440} * *"
    raise ValueError(
        f"Interval {interval} cannot be a cron schedule: use minutes dividing 60, hours dividing 24, or days"
    )


def _agents(context) -> list[str]:
    return sorted(context.instance.get_dynamic_partitions(AGENTS))


class AgentVerdict(NamedTuple):
    """What a schedule or sensor does for one agent: a run request, or None; the note to show; and whether the agent
    is broken (then the note names the agent and the file, and is logged as a warning)."""

    request: dg.RunRequest | None
    note: str
    broken: bool = False
    #: When a skip can turn into a request by time alone (the maximum skip interval, a minimum-interval floor); None
    #: when only a change of the agent's files can (for a gate sensor: its input, the ledger, the options file).
    recheck_at: datetime | None = None
    #: A gate sensor's skip: when the pass last ran and when DreamPassMaxSkipInterval forces it next (ISO-8601, or
    #: "never"), remembered in the cursor so a tick that does not decide the agent again can still say them.
    last_run: str = ""
    next_forced: str = ""


def _log(context: Any, verdict: AgentVerdict) -> None:
    if verdict.broken:
        context.log.warning(verdict.note)
    elif verdict.note:
        context.log.info(verdict.note)


def _dreaming_agent(deployment: DreamDeployment, agent: str) -> tuple[AgentProfile, DreamOptions] | AgentVerdict:
    """The agent's profile and options, or the verdict that skips it: broken (named with its file) or not dreaming."""
    try:
        profile, options = deployment.agent(agent)
    except AgentUnavailable as exc:
        return AgentVerdict(None, str(exc), broken=True)
    if not options.Enabled:
        return AgentVerdict(None, f"{agent}: dreaming disabled (Enabled = false)")
    return profile, options


def cycle_request(deployment: DreamDeployment, agent: str, now: datetime, run_key: str | None) -> AgentVerdict:
    """The cycle for one agent, minus the passes its floors hold back; the note says what was held and why, or why
    the agent was skipped (a bad agent is skipped with the reason, naming the file, never raised)."""
    loaded = _dreaming_agent(deployment, agent)
    if isinstance(loaded, AgentVerdict):
        return loaded
    profile, options = loaded
    held: list[str] = []
    floored: set[str] = set()
    for spec in PASSES:
        if spec.min_interval is None:
            continue
        try:
            floor = min_interval_floor(spec.name, profile, options, now)
        except Exception as exc:  # noqa: BLE001 - an unreadable ledger costs this agent its tick, never the others'
            problem = describe_problem(exc, profile.ledger_path)
            return AgentVerdict(None, f"agent {agent} skipped — {problem}", broken=True)
        if floor is not None:
            floored.add(spec.name)
            held.append(f"{spec.name} held back until {iso(floor)} ({spec.min_interval} {spec.interval(options)})")
    selection = [a for a in CYCLE_ASSETS if a not in floored]
    tags = {"dream/held_back": "; ".join(held)} if held else {}
    return AgentVerdict(
        dg.RunRequest(
            run_key=run_key,
            partition_key=agent,
            asset_selection=[dg.AssetKey(a) for a in selection],
            tags=tags,
        ),
        "; ".join(f"{agent}: {h}" for h in held),
    )


def _cycle_requests(
    context: Any, deployment: DreamDeployment, agents: list[str], now: datetime, run_key: Callable[[str], str]
) -> tuple[list[dg.RunRequest], list[str]]:
    """One cycle request per agent that can run, each agent's verdict logged on the tick; the notes say what was held
    back or skipped, and why."""
    requests, notes = [], []
    for agent in agents:
        verdict = cycle_request(deployment, agent, now, run_key=run_key(agent))
        _log(context, verdict)
        if verdict.request is not None:
            requests.append(verdict.request)
        if verdict.note:
            notes.append(verdict.note)
    return requests, notes


def build_automation(dream_cycle: Any, options: DreamOptions) -> tuple[list, list]:
    @dg.schedule(
        name="dream_cycle_schedule",
        job=dream_cycle,
        cron_schedule=interval_cron(options.Interval),
        execution_timezone="UTC",
        default_status=dg.DefaultScheduleStatus.RUNNING,
        description=f"Runs the dream cycle for every agent every {options.Interval}; minimum-interval floors "
        "hold individual passes back and the tick says which and until when.",
    )
    def dream_cycle_schedule(context: dg.ScheduleEvaluationContext, deployment: DreamDeployment):
        now = context.scheduled_execution_time or deployment.clock()
        agents = _agents(context)
        if not agents:
            return dg.SkipReason(f"no agent profiles registered yet (looking under {deployment.root()})")
        requests, notes = _cycle_requests(context, deployment, agents, now, lambda agent: f"cycle:{agent}:{iso(now)}")
        if not requests:
            return dg.SkipReason("; ".join(notes) or "nothing to run")
        return requests

    @dg.sensor(
        name="dream_startup_sensor",
        job=dream_cycle,
        minimum_interval_seconds=30,
        default_status=dg.DefaultSensorStatus.RUNNING,
        description=f"Launches one cycle per agent {options.InitialDelay} (InitialDelay) after the daemon starts.",
    )
    def dream_startup_sensor(context: dg.SensorEvaluationContext, deployment: DreamDeployment):
        now = deployment.clock()
        cursor = json.loads(context.cursor) if context.cursor else {}
        boot = _daemon_id(context)
        if cursor.get("boot") != boot:
            cursor = {"boot": boot, "first_seen": iso(now), "launched": False}
        if cursor["launched"]:
            return dg.SensorResult(
                skip_reason=dg.SkipReason("start-up cycle already launched for this daemon start"),
                cursor=json.dumps(cursor),
            )
        if not deployment.base_options().Enabled:
            return dg.SensorResult(
                skip_reason=dg.SkipReason("dreaming disabled (Enabled = false)"), cursor=json.dumps(cursor)
            )
        due = (
            datetime.fromisoformat(cursor["first_seen"].replace("Z", "+00:00")) + deployment.base_options().InitialDelay
        )
        if now < due:
            return dg.SensorResult(
                skip_reason=dg.SkipReason(f"start-up cycle due at {iso(due)} (InitialDelay)"),
                cursor=json.dumps(cursor),
            )
        agents = _agents(context)
        if not agents:  # a fresh instance: the discovery sensor has not registered the agents yet
            return dg.SensorResult(
                skip_reason=dg.SkipReason(
                    f"no agent registered yet under {deployment.root()}; the start-up cycle waits for "
                    "agent_discovery_sensor"
                ),
                cursor=json.dumps(cursor),
            )
        requests, notes = _cycle_requests(context, deployment, agents, now, lambda agent: f"startup:{boot}:{agent}")
        cursor["launched"] = True
        if not requests:
            return dg.SensorResult(
                skip_reason=dg.SkipReason("no agent to run at start-up" + (f": {'; '.join(notes)}" if notes else "")),
                cursor=json.dumps(cursor),
            )
        return dg.SensorResult(run_requests=requests, cursor=json.dumps(cursor))

    gate_sensors = [_gate_sensor(name, dream_cycle) for name in GATED_PASSES]

    @dg.sensor(
        name="agent_discovery_sensor",
        minimum_interval_seconds=60,
        default_status=dg.DefaultSensorStatus.RUNNING,
        description="Registers every agent set up for dreaming under the profile root (by `dream init`, or named in "
        "DREAM_AGENTS) as a partition of 'agents'; a folder of agent data made otherwise is left alone.",
    )
    def agent_discovery_sensor(context: dg.SensorEvaluationContext, deployment: DreamDeployment):
        known = set(_agents(context))
        plan = deployment.dream_plan()
        found, problems = plan.agents, list(plan.problems)
        problems += [
            f"agent {a}: its profile folder {deployment.root() / a} is missing; its runs are skipped "
            f"({removal_hint(deployment.root() / a)})"
            for a in sorted(known)
            if a not in found and not (deployment.root() / a).is_dir()
        ]
        for problem in problems:
            context.log.warning(problem)
        new = [a for a in found if a not in known]
        if not new:
            return dg.SensorResult(
                skip_reason=dg.SkipReason(
                    f"no new agent profiles under {deployment.root()} ({len(known)} known)"
                    + (f"; {'; '.join(problems)}" if problems else "")
                    + (f"; {left_out_note(plan)}" if plan.left_out else "")
                )
            )
        return dg.SensorResult(dynamic_partitions_requests=[agents_partitions.build_add_request(new)])

    @dg.sensor(
        name="deferred_retry_sensor",
        job=dream_cycle,
        minimum_interval_seconds=60,
        default_status=dg.DefaultSensorStatus.RUNNING,
        description="Requests a pass deferred by the agent's busy model again once its retry time is due "
        "(BusyRetryInitialDelay doubling up to BusyRetryMaxDelay, at most BusyRetryMaxAttempts retries).",
    )
    def deferred_retry_sensor(context: dg.SensorEvaluationContext, deployment: DreamDeployment):
        now = deployment.clock()
        requests, waiting = [], []
        for agent in _agents(context):
            verdict = retry_requests(deployment, agent, now)
            _log(context, AgentVerdict(None, verdict.note, verdict.broken))
            requests += verdict.requests
            waiting += verdict.waiting
        if requests:
            return dg.SensorResult(run_requests=requests)
        shown = waiting[:GATE_NOTES_SHOWN]
        if len(waiting) > len(shown):
            shown.append(f"… and {len(waiting) - len(shown)} more deferred pass(es) waiting")
        return dg.SensorResult(skip_reason=dg.SkipReason("; ".join(shown) or "no deferred pass"))

    return [dream_cycle_schedule], [dream_startup_sensor, *gate_sensors, agent_discovery_sensor, deferred_retry_sensor]


def _daemon_id(context: dg.SensorEvaluationContext) -> str:
    """Identity of the running sensor daemon: it changes when the daemon restarts."""
    try:
        beats = context.instance.get_daemon_heartbeats()
        beat = beats.get("SENSOR")
        if beat is not None:
            return str(beat.daemon_id)
    except Exception:  # noqa: BLE001 - an instance without daemon storage (tests): one boot
        pass
    return "no-daemon"


def _gate_sensor(pass_name: str, dream_cycle: Any) -> dg.SensorDefinition:
    @dg.sensor(
        name=f"{pass_name}_change_gate",
        job=dream_cycle,
        minimum_interval_seconds=300,
        default_status=dg.DefaultSensorStatus.RUNNING,
        description=f"Requests {pass_name} when its input fingerprint moved or DreamPassMaxSkipInterval elapsed "
        "(the pass ledger is the source of truth); otherwise says when it will next be forced. "
        "Requests nothing for an agent whose pass is disabled, or whose change gate is off (the "
        "pass then runs with every cycle).",
    )
    def _sensor(context: dg.SensorEvaluationContext, deployment: DreamDeployment):
        now = deployment.clock()
        started = time.monotonic()
        seen = _gate_cursor(context.cursor)
        extra = [Path(deployment.options_file)] if deployment.options_file else []
        requests, reasons, unchanged, deferred = [], [], [], 0
        kept: dict[str, list] = {}
        for agent in _agents(context):
            before = _signature(pass_name, deployment, agent, extra)
            last = seen.get(agent)
            if before is not None and last is not None and last[0] == before and _not_due(last[1], now):
                kept[agent] = last
                unchanged.append(_unchanged_note(pass_name, agent, last))
                continue
            if time.monotonic() - started > GATE_TICK_BUDGET_S:
                deferred += 1  # evaluated by the next tick; what was evaluated stays in the cursor
                continue
            verdict = gate_request(deployment, pass_name, agent, now)
            if verdict.broken:
                context.log.warning(verdict.note)
            if verdict.request is not None:
                requests.append(verdict.request)
                continue
            reasons.append(verdict.note)
            # remembered only when nothing moved while it was decided, and only for a decision that is not broken
            if not verdict.broken and before is not None and before == _signature(pass_name, deployment, agent, extra):
                recheck = iso(verdict.recheck_at) if verdict.recheck_at else None
                kept[agent] = [before, recheck, verdict.last_run, verdict.next_forced]
        cursor = json.dumps({"v": 1, "agents": kept}, separators=(",", ":"))
        if requests:
            return dg.SensorResult(run_requests=requests, cursor=cursor)
        return dg.SensorResult(
            skip_reason=dg.SkipReason(
                _gate_summary(pass_name, reasons, unchanged, deferred) or "no agent profiles registered"
            ),
            cursor=cursor,
        )

    return _sensor


#: A gate sensor stops deciding agents whose files moved after this many seconds of a tick; the rest are decided by
#: the next tick (Dagster's sensor timeout is 60 s; a fleet that just started has every agent to decide once).
GATE_TICK_BUDGET_S = 8.0
#: Notes shown in a skipped tick, at most (a fleet of 1,000 agents would otherwise write 1,000).
GATE_NOTES_SHOWN = 20


def _gate_cursor(raw: str | None) -> dict[str, list]:
    """Per agent: [signature of the files its gate reads, when time alone can change the decision, when the pass
    last ran, when it is forced next], from the last tick that decided it (a cursor written before the last two were
    kept has the first two). A cursor that cannot be read is an empty one (every agent is decided again)."""
    try:
        value = json.loads(raw) if raw else {}
        agents = value.get("agents", {}) if isinstance(value, dict) and value.get("v") == 1 else {}
        return {a: v for a, v in agents.items() if isinstance(v, list) and len(v) in (2, 4)}
    except (ValueError, AttributeError):
        return {}


def _unchanged_note(pass_name: str, agent: str, remembered: list) -> str:
    """What a tick says of an agent it did not decide again: the pass, its last run and its next forced run."""
    last, forced = (remembered[2] or "never", remembered[3] or "never") if len(remembered) == 4 else ("?", "?")
    return f"{pass_name} for {agent}: unchanged since its last decision (last ran {last}; next forced run {forced})"


def _signature(pass_name: str, deployment: DreamDeployment, agent: str, extra: list[Path]) -> str | None:
    try:
        return gate_signature(pass_name, deployment.profile(agent), extra)
    except (OSError, ValueError):  # an unreadable folder or a bad id: decided (and named) by gate_request
        return None


def _not_due(recheck_at: str | None, now: datetime) -> bool:
    return recheck_at is None or now < parse_ts(recheck_at)


def _gate_summary(pass_name: str, reasons: list[str], unchanged: list[str], deferred: int) -> str:
    """The skip reason of a gate tick: each agent decided (up to GATE_NOTES_SHOWN), then those not decided again,
    each with its last and next forced run (as many as fit in the same limit), then the counts."""
    shown = reasons[:GATE_NOTES_SHOWN]
    if len(reasons) > len(shown):
        shown.append(f"… and {len(reasons) - len(shown)} more agent(s) skipped")
    if unchanged:
        listed = unchanged[: max(0, GATE_NOTES_SHOWN - len(reasons))]
        shown += listed
        more = f" ({len(unchanged) - len(listed)} not listed)" if len(unchanged) > len(listed) else ""
        shown.append(
            f"{pass_name}: {len(unchanged)} agent(s) unchanged since their last decision (inputs, ledger and "
            f"options untouched){more}"
        )
    if deferred:
        shown.append(f"{deferred} agent(s) left for the next tick (time budget {GATE_TICK_BUDGET_S:.0f} s)")
    return "; ".join(shown)


def pass_selection(pass_name: str, options: DreamOptions) -> list[dg.AssetKey]:
    """What a run of one pass alone materializes: the pass, and when its changes wait for review (ApplyMode review or
    review-risky) the review queue too, so its check shows the new pending set at once, not at the next cycle."""
    selection = [dg.AssetKey(pass_name)]
    if review.apply_mode(options, pass_name) != "auto":
        selection.append(dg.AssetKey(REVIEW_ASSET))
    return selection


def gate_request(deployment: DreamDeployment, pass_name: str, agent: str, now: datetime) -> AgentVerdict:
    """The change gate's run request for one agent and pass, or None with the reason it is not requested. A bad agent
    is skipped with a note naming it and the file; it never raises."""
    loaded = _dreaming_agent(deployment, agent)
    if isinstance(loaded, AgentVerdict):
        return loaded
    profile, options = loaded
    option = disabled_by(pass_name, options)
    if option is not None:
        return AgentVerdict(None, f"{pass_name} for {agent}: disabled ({option} = false), never requested")
    if not options.DreamPassChangeGateEnabled:
        return AgentVerdict(
            None,
            f"{agent}: change gate disabled: {pass_name} runs with every cycle (DreamPassChangeGateEnabled = false)",
        )
    try:
        status = gate_status(pass_name, profile, options, now)
    except Exception as exc:  # noqa: BLE001 - an unreadable input skips this agent, named, never the others
        problem = describe_problem(exc, gate_input_path(pass_name, profile))
        return AgentVerdict(None, f"agent {agent} skipped — {problem}", broken=True)
    if status.decision.skip:
        last = iso(status.last_run_at) if status.last_run_at else "never"
        forced = iso(status.decision.next_forced_at) if status.decision.next_forced_at else "never"
        when = "" if forced in status.decision.reason else f"; next forced {forced}"
        return AgentVerdict(
            None,
            f"{pass_name} for {agent}: skipped — {status.decision.reason} (last ran {last}{when})",
            recheck_at=status.decision.next_forced_at,
            last_run=last,
            next_forced=forced,
        )
    return AgentVerdict(
        dg.RunRequest(
            run_key=f"{pass_name}:{agent}:{status.fingerprint}:{iso(status.last_run_at) or 'never'}",
            partition_key=agent,
            asset_selection=pass_selection(pass_name, options),
            tags={"dream/trigger": f"change gate: {status.decision.reason}"},
        ),
        "",
    )


class RetryVerdict(NamedTuple):
    """What the retry sensor does for one agent: the passes it requests again, the deferred passes not due yet (each a
    note), and a note when the agent is skipped (broken: it names the agent and the file)."""

    requests: list[dg.RunRequest]
    waiting: list[str]
    note: str = ""
    broken: bool = False


def retry_requests(deployment: DreamDeployment, agent: str, now: datetime) -> RetryVerdict:
    """The retries due for one agent. An agent with no deferred pass costs one read of its small deferred-pass list
    (usually absent); its options are read only when a retry is due, and no store is opened. A disabled agent or pass
    is never requested; a bad agent is skipped with a note naming it, never raised."""
    try:
        listed = load_deferred(deployment.profile(agent))
    except (OSError, ValueError) as exc:
        return RetryVerdict([], [], f"agent {agent!r} skipped — {exc}", broken=True)
    due, waiting = [], []
    for name, data in sorted(listed.items()):
        deferral = parse_deferral(data)
        at = deferral_due(deferral, now)
        if at is not None:
            due.append((name, at))
        elif deferral is not None:
            waiting.append(f"{name} for {agent}: {data.get('summary') or 'deferred'}")
    if not due:
        return RetryVerdict([], waiting)
    loaded = _dreaming_agent(deployment, agent)
    if isinstance(loaded, AgentVerdict):
        return RetryVerdict([], waiting, loaded.note, loaded.broken)
    _, options = loaded
    requests, notes = [], []
    for name, at in due:
        try:
            spec = by_name(name)
        except KeyError:
            notes.append(f"{agent}: deferred pass {name!r} is not a pass of this deployment; not requested")
            continue
        if spec.disabled(options):
            notes.append(f"{name} for {agent}: disabled ({spec.enabled_by} = false), not retried")
            continue
        requests.append(
            dg.RunRequest(
                run_key=f"retry:{name}:{agent}:{iso(at)}",
                partition_key=agent,
                asset_selection=pass_selection(name, options),
                tags={"dream/trigger": f"retry after deferral (due {iso(at)})"},
            )
        )
    return RetryVerdict(requests, waiting, "; ".join(notes))


def automation_definitions(options: DreamOptions) -> dg.Definitions:
    """The cycle schedule and the sensors for these deployment options (the interval and the start-up delay)."""
    schedules, sensors = build_automation(dream_cycle, options)
    return dg.Definitions(schedules=schedules, sensors=sensors)


@dg.definitions
def defs() -> dg.Definitions:
    """Schedules and sensors; the options are read from the environment when the definitions are loaded."""
    return automation_definitions(load_options(env=os.environ))
