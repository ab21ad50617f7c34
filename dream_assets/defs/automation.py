"""Schedules and sensors: the cycle interval with its minimum-interval floors, the start-up delay, the change gate
per corpus-wide pass, and discovery of agent profiles (one dynamic partition each).

One bad agent never stops the others: an agent whose profile folder is missing, whose dream.toml is unusable or whose
store cannot be read is skipped with a reason naming it and the file (logged on the tick, and the skip reason when
nothing else runs), and every other agent gets its run requests. Sensors take their clock from the deployment
resource (``DreamDeployment.now``, the wall clock by default); the schedule from its scheduled execution time.
"""

import json
from collections.abc import Callable
from datetime import datetime, timedelta
from typing import Any, NamedTuple

import dagster as dg

from dream_assets.defs.deployment import AgentUnavailable, DreamDeployment, describe_problem
from dream_assets.defs.partitions import AGENTS, agents_partitions
from dream_assets.gates import GATED_INPUTS, GATED_PASSES, consolidation_floor, disabled_by, gate_status
from dream_assets.model import iso
from dream_assets.options import DreamOptions
from dream_assets.pass_status import load_outcome
from dream_assets.passes.deferral import retry_due
from dream_assets.passes.registry import PASSES
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
    try:
        floor = consolidation_floor(profile, options, now)
    except Exception as exc:  # noqa: BLE001 - an unreadable ledger costs this agent its tick, never the others'
        return AgentVerdict(None, f"agent {agent} skipped — {describe_problem(exc, profile.ledger_path)}", broken=True)
    if floor is not None:
        held.append(
            f"memory_consolidation held back until {iso(floor)} (ConsolidationMinInterval "
            f"{options.ConsolidationMinInterval})"
        )
    selection = [a for a in CYCLE_ASSETS if not (floor is not None and a == "memory_consolidation")]
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
        requests, notes = _cycle_requests(
            context, deployment, _agents(context), now, lambda agent: f"startup:{boot}:{agent}"
        )
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
        description="Registers every agent profile folder under the profile root as a partition of 'agents'.",
    )
    def agent_discovery_sensor(context: dg.SensorEvaluationContext, deployment: DreamDeployment):
        known = set(_agents(context))
        found, problems = deployment.discover_agents()
        problems += [
            f"agent {a}: its profile folder {deployment.root() / a} is missing; its runs are skipped"
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
            loaded = _dreaming_agent(deployment, agent)
            if isinstance(loaded, AgentVerdict):
                continue
            profile, _ = loaded
            for spec in PASSES:
                record = load_outcome(profile, spec.name)
                due = retry_due(record, now)
                if due is not None:
                    requests.append(
                        dg.RunRequest(
                            run_key=f"retry:{spec.name}:{agent}:{iso(due)}",
                            partition_key=agent,
                            asset_selection=[dg.AssetKey(spec.name)],
                            tags={"dream/trigger": f"retry after deferral (due {iso(due)})"},
                        )
                    )
                elif (record or {}).get("status") == "deferred":
                    waiting.append(f"{spec.name} for {agent}: {record.get('summary') or 'deferred'}")
        if requests:
            return dg.SensorResult(run_requests=requests)
        return dg.SensorResult(skip_reason=dg.SkipReason("; ".join(waiting) or "no deferred pass"))

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
        requests, reasons = [], []
        for agent in _agents(context):
            verdict = gate_request(deployment, pass_name, agent, now)
            if verdict.broken:
                context.log.warning(verdict.note)
            if verdict.request is not None:
                requests.append(verdict.request)
            else:
                reasons.append(verdict.note)
        if requests:
            return dg.SensorResult(run_requests=requests)
        return dg.SensorResult(skip_reason=dg.SkipReason("; ".join(reasons) or "no agent profiles registered"))

    return _sensor


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
        problem = describe_problem(exc, GATED_INPUTS[pass_name](profile))
        return AgentVerdict(None, f"agent {agent} skipped — {problem}", broken=True)
    if status.decision.skip:
        last = iso(status.last_run_at) if status.last_run_at else "never"
        forced = iso(status.decision.next_forced_at) if status.decision.next_forced_at else "never"
        when = "" if forced in status.decision.reason else f"; next forced {forced}"
        return AgentVerdict(
            None, f"{pass_name} for {agent}: skipped — {status.decision.reason} (last ran {last}{when})"
        )
    return AgentVerdict(
        dg.RunRequest(
            run_key=f"{pass_name}:{agent}:{status.fingerprint}:{iso(status.last_run_at) or 'never'}",
            partition_key=agent,
            asset_selection=[dg.AssetKey(pass_name)],
            tags={"dream/trigger": f"change gate: {status.decision.reason}"},
        ),
        "",
    )
