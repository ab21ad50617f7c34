"""The one status of an agent (``DreamStatus``): what ``dream status`` prints, what the MCP tool ``dream_status`` and
``agent_memory.status`` answer. Counts, the recall index, what waits for review, a model call running now, and every
pass with its last run, status, reason, model calls, input fingerprint and next run."""

from __future__ import annotations

from datetime import datetime, timedelta
from pathlib import Path

from dream_assets.calls import DreamStatus, PassState, StoreUnavailable
from dream_assets.model import iso
from dream_assets.options import DreamOptions
from dream_assets.profile import AgentProfile
from dream_assets.service._common import begin
from dream_assets.service.review import waits_of
from dream_assets.store.connection import StoreError


def status(
    profile: AgentProfile | str | Path,
    *,
    options: DreamOptions | None = None,
    now: datetime | None = None,
    profile_arg: str | None = None,
) -> DreamStatus:
    """The agent's status at ``now``. Changes waiting for review past ``ReviewExpiryDays`` are closed as expired (never
    applied) first. ``profile_arg``: how the profile is written in the commands it suggests."""
    from dream_assets.cycle_report import latest_cycle_id
    from dream_assets.llm.busy import active_leases
    from dream_assets.llm.progress import ProgressFile
    from dream_assets.passes.outcome import load_outcomes, recorded_at
    from dream_assets.passes.registry import PASSES
    from dream_assets.store.ledger import PassLedger

    op = begin(profile, options, now)
    store = op.store()
    try:
        counts = store.memories.counts()
        skills = len(store.skills.list())
        waits = waits_of(store, op.now, profile_arg or str(op.profile.root))
        embeddings = embeddings_line(op.options, store, op.now)
    except StoreError as exc:
        raise StoreUnavailable(str(exc)) from exc
    names = [p.name for p in PASSES]
    ledger = PassLedger(op.profile)
    outcomes = load_outcomes(op.profile, names)
    passes = []
    for name in names:
        out, rec = outcomes.get(name), ledger.get(name)
        state = PassState(name=name, status="never run", last_run=None, summary=None)
        if out is not None:
            reason = str(out.get("reason") or "") or None
            state = PassState(
                name=name,
                status=str(out.get("status")),
                last_run=iso(recorded_at(out)),
                summary=reason or (str(out.get("summary") or "") or None),
                reason=reason,
                budget_deferral=bool(out.get("budget_deferral")),
                model_calls=int(out.get("model_calls") or 0),
                tokens=int(float((out.get("usage") or {}).get("total_tokens", 0))),
            )
        if rec is not None:
            state.last_completed = iso(rec.last_run_at)
            state.forced = rec.forced or None
            state.fingerprint = rec.fingerprint
        state.next_run = next_run(name, op.profile, op.options, rec, op.now)
        passes.append(state)
    waiting, _ = ProgressFile(op.profile.model_progress_path).read()
    until = [lease.expires_at for lease in active_leases(op.profile, op.now, op.options.BusyLeaseStaleAfter)]
    latest = max((u for u in until if u is not None), default=None)
    return DreamStatus(
        agent=op.profile.agent_id,
        live_memories=counts["live"],
        archived_memories=counts["archived"],
        skills=skills,
        agent_active_until=iso(latest),
        last_cycle_id=latest_cycle_id(op.profile, names),
        passes=passes,
        recall_index=recall_index_line(op.profile),
        embeddings=embeddings,
        review=waits,
        ledger_warning=ledger.warning or None,
        running_now=waiting.line(op.now.timestamp()) if waiting is not None else None,
    )


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


def embeddings_line(options: DreamOptions, store, now: datetime) -> str:
    """The embedding model and the near-duplicate threshold in use (llm/embedding_threshold.py), or that there is
    none. Reads what is kept: a threshold due for calibration is shown as it would be, and not written."""
    from dream_assets.llm.embedding_threshold import similarity_threshold

    threshold = similarity_threshold(options, store, now=now, keep=False)
    if threshold is None:
        return "none (EmbeddingModel is empty): near duplicates by the lexical measure, search by BM25 alone"
    return f"model {threshold.model}; near-duplicate threshold {threshold.describe()}; search fuses BM25 and embeddings"


def duration(value: timedelta) -> str:
    """A duration as the options take it (ISO-8601: P7D, PT6H, PT1H30M)."""
    seconds = int(value.total_seconds())
    sign, seconds = ("-", -seconds) if seconds < 0 else ("", seconds)
    days, rest = divmod(seconds, 86400)
    hours, rest = divmod(rest, 3600)
    minutes, secs = divmod(rest, 60)
    time_part = "".join(f"{n}{u}" for n, u in ((hours, "H"), (minutes, "M"), (secs, "S")) if n)
    return f"{sign}P{f'{days}D' if days else ''}{f'T{time_part}' if time_part else ''}" if seconds else "PT0S"


def when(at: datetime | None) -> str:
    return f"{at:%Y-%m-%d %H:%M} UTC" if at is not None else "unknown"


def next_run(pass_name: str, profile: AgentProfile, options: DreamOptions, rec, now: datetime) -> str:
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
            f"next cycle (forced: DreamPassMaxSkipInterval {duration(options.DreamPassMaxSkipInterval)} elapsed)"
            if forced <= now
            else f"when its input changes; next forced run {when(forced)} (last completed + DreamPassMaxSkipInterval "
            f"{duration(options.DreamPassMaxSkipInterval)})"
        )
    floor = min_interval_floor(pass_name, profile, options, now)
    if floor is not None:
        spec = by_name(pass_name)
        text += f"; held back until {when(floor)} ({spec.min_interval} {duration(spec.interval(options))})"
    return text
