"""Rehearse before switching: every model pass's real prompt, from the agent's own data, against the configured
endpoint, with nothing applied to the agent.

The passes run as they would in a cycle (forced past their change gates, in cycle order) on a throw-away copy of the
agent's profile, so the prompts, the parsing and the host's checks are the real ones and the agent's own store,
ledger and logs are untouched. Per pass: whether the prompts fit the window, whether the answers parsed, the items
the host refused and why, the tokens, the latency and, with prices, the estimated cost.

Before the rehearsal the endpoint itself is measured (``measure_endpoint``): the window it reports (llama.cpp's
``GET /props``), whether it counts tokens (``POST /tokenize``), its prompt and answer speed (two small probe calls;
llama.cpp's own ``timings`` where it reports them), whether it accepts a ``json_schema`` response_format. That is kept
in the agent's endpoint profile (the one file check-model writes to the agent), so each real call's timeout follows the
speed, and ``recommend`` turns it and the rehearsal into settings for this endpoint.
"""

from __future__ import annotations

import math
import os
import shutil
import tempfile
import time
import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

from dream_assets.llm.budget import MESSAGE_OVERHEAD, EndpointTokenizer, estimate_prompt_tokens, server_root
from dream_assets.llm.client import build_model_client
from dream_assets.llm.endpoint_profile import (
    SPEED_RANGE,
    TIMEOUT_SAFETY,
    WINDOW_RANGE,
    EndpointFacts,
    EndpointProfile,
    call_timing,
    endpoint_key,
    plausible_number,
    rate,
)
from dream_assets.options import DreamOptions
from dream_assets.passes.context import PassContext
from dream_assets.passes.registry import PASSES
from dream_assets.passes.runner import run_pass
from dream_assets.profile import AgentProfile

#: Counts a pass keeps for what the host refused of an answer.
REFUSAL_COUNTS = (
    "rejected",
    "refused",
    "ignored",
    "invalid_ids",
    "not_shown",
    "guarded",
    "protected",
    "unusable",
    "copied",
    "shrunk",
)


@dataclass
class PassCheck:
    pass_name: str
    status: str
    model: str
    fits: bool
    parsed: bool
    calls: int
    prompt_tokens: int
    completion_tokens: int
    latency_s: float
    cost: float
    refusals: dict[str, int] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)  # the host's warnings: why items were refused
    reason: str = ""

    @property
    def ok(self) -> bool:
        return self.fits and self.parsed and self.status != "failed"


def check_model(profile: AgentProfile, options: DreamOptions, now: datetime) -> list[PassCheck]:
    """Run each enabled model pass on a copy of ``profile`` against the configured endpoint; one check per pass."""
    out: list[PassCheck] = []
    with tempfile.TemporaryDirectory(prefix="dream-check-model-") as tmp:
        copy = AgentProfile(Path(shutil.copytree(profile.root, Path(tmp) / profile.root.name)))
        for spec in PASSES:
            if not spec.uses_model or spec.disabled(options):
                continue
            opts = options.for_pass_model(spec.name)
            client = build_model_client(opts, copy)
            ctx = PassContext(
                copy,
                opts,
                now,
                cycle_id="check-model",
                client_factory=lambda client=client: client,
                force="dream check-model: a rehearsal on a copy of the profile",
            )
            report = run_pass(spec, ctx)
            usage = report.usage
            reason = report.reason if report.status in ("failed", "deferred") else ""
            out.append(
                PassCheck(
                    pass_name=spec.name,
                    status=report.status,
                    model=client.identity,
                    fits=not report.counts.get("prompts_over_window") and "does not fit" not in reason,
                    parsed="unusable" not in reason,
                    calls=int(usage.get("calls", 0)),
                    prompt_tokens=int(usage.get("prompt_tokens", 0)),
                    completion_tokens=int(usage.get("completion_tokens", 0)),
                    latency_s=float(usage.get("latency_s", 0.0)),
                    cost=float(usage.get("cost", 0.0)),
                    refusals={k: int(v) for k, v in report.counts.items() if k in REFUSAL_COUNTS and v},
                    notes=[line[len("WARNING: ") :] for line in report.lines if line.startswith("WARNING: ")][:5],
                    reason=reason,
                )
            )
    return out


# --- the endpoint measured -----------------------------------------------------------------------------------------
#: The prompt-speed probe: about this many prompt tokens, one answer token.
PROBE_PROMPT_TOKENS = 400
#: The answer-speed probe: a short prompt and up to this many answer tokens.
PROBE_ANSWER_TOKENS = 48
#: How long one probe may take at least (LlmTimeout when larger): a slow endpoint is what is being measured.
PROBE_TIMEOUT_S = 900.0
#: The schema of the answer-speed probe (a json_schema response_format the endpoint accepts or refuses).
PROBE_SCHEMA = {
    "type": "json_schema",
    "json_schema": {
        "name": "numbers",
        "schema": {
            "type": "object",
            "properties": {"n": {"type": "array", "items": {"type": "integer"}}},
            "required": ["n"],
        },
        "strict": False,
    },
}
_FILLER = (
    "The release train leaves the Dresden plant every second Tuesday; budget code FX-2291, rota in the Orion wiki, "
    "entry m0042a merged from m0042b and m0042c on 2026-11-30. "
)


@dataclass
class EndpointMeasurement:
    """What ``measure_endpoint`` found; None where it could not tell (``problems`` says why)."""

    key: str
    window: int | None = None
    tokenizer: str = ""
    prompt_tps: float | None = None
    gen_tps: float | None = None
    json_schema: bool | None = None
    timings_reported: bool = False
    problems: list[str] = field(default_factory=list)


def _post(http: Any, url: str, body: dict[str, Any]) -> tuple[int, Any, float]:
    started = time.monotonic()
    answer = http.post(url, json=body)
    elapsed = time.monotonic() - started
    try:
        data = answer.json()
    except ValueError:
        data = None
    return answer.status_code, data, elapsed


def _usage(data: Any, name: str) -> float | None:
    usage = data.get("usage") if isinstance(data, dict) else None
    return plausible_number(usage.get(name), 1, 1e9) if isinstance(usage, dict) else None


def _timing(data: Any, name: str) -> float | None:
    timings = data.get("timings") if isinstance(data, dict) else None
    return plausible_number(timings.get(name), *SPEED_RANGE) if isinstance(timings, dict) else None


def measure_endpoint(options: DreamOptions, *, env: Mapping[str, str] | None = None) -> EndpointMeasurement:
    """Measure the configured endpoint (two small probe calls); never raises: what fails is in ``problems``."""
    import httpx  # a dependency of ``openai``

    env = os.environ if env is None else env
    base = (options.LlmBaseUrl.strip() or "https://api.openai.com/v1").rstrip("/")
    out = EndpointMeasurement(endpoint_key(options.LlmBaseUrl, options.LlmModel))
    key = env.get(options.LlmApiKeyEnv, "") if options.LlmApiKeyEnv else ""
    headers = {"Authorization": f"Bearer {key or 'not-needed'}"}
    timeout = max(PROBE_TIMEOUT_S, options.LlmTimeout.total_seconds())
    with httpx.Client(headers=headers, timeout=timeout) as http:
        if options.LlmBaseUrl.strip():
            try:
                props = http.get(f"{server_root(base)}/props", timeout=10.0)
                data = props.json() if props.status_code == 200 else None
            except (httpx.HTTPError, ValueError):
                data = None
            settings = data.get("default_generation_settings") if isinstance(data, dict) else None
            n_ctx = settings.get("n_ctx") if isinstance(settings, dict) else None
            window = plausible_number(n_ctx if n_ctx is not None else (data or {}).get("n_ctx"), *WINDOW_RANGE)
            out.window = int(window) if window is not None else None
            if EndpointTokenizer(base, estimate_prompt_tokens, model=options.LlmModel.strip()).available():
                out.tokenizer = "llama.cpp /tokenize"
        url = f"{base}/chat/completions"
        nonce = uuid.uuid4().hex  # first, so no prompt cache serves the probe
        filler = _FILLER * max(1, math.ceil(PROBE_PROMPT_TOKENS * 3 / len(_FILLER)))
        try:
            status, data, elapsed = _post(
                http,
                url,
                {
                    "model": options.LlmModel,
                    "messages": [{"role": "user", "content": f"{nonce}\n{filler}\nReply with OK."}],
                    "max_tokens": 1,
                    "temperature": 0,
                },
            )
            if status != 200:
                out.problems.append(f"the prompt-speed probe got HTTP {status}")
            else:
                tokens = _usage(data, "prompt_tokens") or estimate_prompt_tokens(filler) + MESSAGE_OVERHEAD
                out.prompt_tps = _timing(data, "prompt_per_second")
                out.timings_reported = out.prompt_tps is not None
                if out.prompt_tps is None:  # the whole time counted as prompt time: a lower bound on the speed
                    out.prompt_tps = plausible_number(tokens / max(elapsed, 1e-3), *SPEED_RANGE)
            question = f'{uuid.uuid4().hex}\nList the integers from 1 to 100 as JSON: {{"n": [1, 2, ...]}}'
            body = {
                "model": options.LlmModel,
                "messages": [{"role": "user", "content": question}],
                "max_tokens": PROBE_ANSWER_TOKENS,
                "temperature": 0,
                "response_format": PROBE_SCHEMA,
            }
            status, data, elapsed = _post(http, url, body)
            if status in (400, 422):
                out.json_schema = False
                body.pop("response_format")
                status, data, elapsed = _post(http, url, body)
            elif status == 200:
                out.json_schema = True
            if status != 200:
                out.problems.append(f"the answer-speed probe got HTTP {status}")
            else:
                out.gen_tps = _timing(data, "predicted_per_second")
                if out.gen_tps is None:
                    answered = _usage(data, "completion_tokens")
                    prompt_s = (_usage(data, "prompt_tokens") or 0) / out.prompt_tps if out.prompt_tps else 0.0
                    if answered is None or answered < 4:
                        out.problems.append("the answer-speed probe came back too short to time")
                    else:
                        out.gen_tps = plausible_number(answered / max(elapsed - prompt_s, 1e-3), *SPEED_RANGE)
        except httpx.HTTPError as exc:
            out.problems.append(f"a probe failed: {type(exc).__name__}: {exc}")
    return out


def store_measurement(profile: AgentProfile, measured: EndpointMeasurement) -> EndpointFacts:
    """Keep what was measured in the agent's endpoint profile (what each later call's timeout follows)."""
    return EndpointProfile(profile.endpoint_profile_path).update(
        measured.key,
        prompt_tps=measured.prompt_tps,
        gen_tps=measured.gen_tps,
        window=measured.window,
        json_schema=measured.json_schema,
        tokenizer=measured.tokenizer or None,
    )


@dataclass(frozen=True)
class Recommendation:
    window: int  # LlmContextTokens
    reserve: int  # LlmMaxTokens
    calls_per_pass: int  # LlmMaxCallsPerPass
    worst_call_s: float | None  # a full-window call answering its whole reserve, at the measured speed
    timeout_s: float | None  # that call's timeout
    why: list[str] = field(default_factory=list)


#: The share of the cycle interval the model passes of one cycle may spend together.
PASS_TIME_SHARE = 0.5


def recommend(options: DreamOptions, facts: EndpointFacts, checks: list[PassCheck]) -> Recommendation:
    """Settings for this endpoint:

    - window: the one the endpoint reports (else LlmContextTokens);
    - answer reserve: twice the longest answer of the rehearsal, rounded up to 256, at least 512, at most a quarter of
      the window (else LlmMaxTokens);
    - calls per pass: how many worst-case calls (a full prompt and the whole reserve at the measured speed) the model
      passes fit, each in its share of ``PASS_TIME_SHARE`` of the cycle Interval, at least 1."""
    why: list[str] = []
    window = facts.window or options.LlmContextTokens
    if facts.window:
        why.append(f"the endpoint reports a {facts.window}-token window")
    answers = [
        math.ceil(c.completion_tokens / c.calls)
        for c in checks
        if c.calls and c.completion_tokens and c.status != "failed"
    ]
    reserve = options.LlmMaxTokens
    if answers:
        reserve = max(512, 256 * math.ceil(2 * max(answers) / 256))
        if window:
            reserve = min(reserve, max(512, window // 4))
        why.append(f"the longest rehearsal answer averaged {max(answers)} tokens a call")
    calls = options.LlmMaxCallsPerPass
    worst = timeout = None
    if facts.has_speed:
        prompt = max(0, (window or 8192) - reserve)
        timing = call_timing(prompt, reserve, facts, options.LlmTimeout.total_seconds())
        worst, timeout = timing.worst_s, timing.timeout_s
        passes = max(1, sum(1 for c in checks))
        share = options.Interval.total_seconds() * PASS_TIME_SHARE / passes
        calls = max(1, int(share // max(worst or 1.0, 1.0)))
        calls = min(calls, max(options.LlmMaxCallsPerPass, 64))
        why.append(
            f"a full {window}-token call answering {reserve} tokens takes up to {worst:.0f}s at "
            f"{rate(facts.prompt_tps)} prompt and {rate(facts.gen_tps)} answer tokens/s (timeout {timeout:.0f}s, "
            f"{TIMEOUT_SAFETY:g}x that and a margin); {passes} model passes share half of Interval"
        )
    return Recommendation(window, reserve, calls, worst, timeout, why)
