"""ModelClient: what a pass holds — a backend, the busy wait, extraction/validation and usage accounting.

``call`` never raises for model, network or format failures: it returns ``ModelResult(ok=False, ...)``
with the reason (and the first 200 characters of what came back), so the pass reports the failure and
stamps nothing — spec, "The change gate": the stamp is recorded only after the model returns usable
JSON. ``deferred=True`` means the agent's own model stayed busy past ``BusyMaxWait``: the pass reports
"deferred" and stamps nothing either.

Backend selection (``LlmBackend``): "openai" talks to an OpenAI-compatible endpoint, "offline" needs no
model, "auto" (the default) is openai when ``LlmBaseUrl`` or ``LlmModel`` is set and offline otherwise.
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from pydantic import BaseModel

from dream_assets.llm.base import ModelBackend, ModelCallError, ModelRequest, RawCompletion
from dream_assets.llm.budget import (
    MESSAGE_OVERHEAD,
    ContextBudget,
    EndpointTokenizer,
    budget_for,
    estimate_prompt_tokens,
    prompt_tokens_in_refusal,
    token_counter,
)
from dream_assets.llm.busy import wait_until_idle
from dream_assets.llm.contracts import ModelCall, id_aliases, restore_ids, with_aliases
from dream_assets.llm.directives import load_directive
from dream_assets.llm.endpoint_profile import (
    CallTiming,
    EndpointFacts,
    EndpointProfile,
    bytes_per_token_observation,
    call_timing,
    endpoint_key,
)
from dream_assets.llm.extract import ResponseFormatError, parse_response
from dream_assets.llm.progress import CallProgress, CallReporter, ProgressFile
from dream_assets.llm.usage import UsageLedger, UsageRecord, estimate_tokens
from dream_assets.options import DreamOptions
from dream_assets.profile import AgentProfile

__all__ = [
    "ModelBackend",
    "ModelCallError",
    "ModelClient",
    "ModelConfigError",
    "ModelRequest",
    "ModelResult",
    "RawCompletion",
    "build_backend",
    "build_model_client",
    "configured_model_identity",
    "endpoint_problem",
    "model_identity",
    "resolve_backend_name",
]

log = logging.getLogger("dream_assets.llm")


#: How far (as a factor) one call's reported speed may move the measured one.
SPEED_STEP = 4.0


class ModelConfigError(ValueError):
    """The model options cannot work together. The message names the option and the fix."""


@dataclass
class ModelResult:
    ok: bool
    response: BaseModel | None  # the validated contract instance when ok
    raw: str  # raw model text ("" if none)
    error: str  # when not ok: what failed, with the first 200 characters of the raw text
    deferred: bool  # the busy wait exceeded BusyMaxWait: report "deferred", stamp nothing
    backend: str
    model: str
    note: str = ""  # e.g. the offline backend saying it cannot judge this pass
    usage: UsageRecord | None = None
    unreachable: bool = False  # the endpoint gave no answer at all (connection failure or timeout)
    context_exceeded: bool = False  # the endpoint said the prompt does not fit its window: shrink and retry


class ModelClient:
    def __init__(
        self,
        backend: ModelBackend,
        *,
        profile: AgentProfile | None,
        options: DreamOptions,
        sleep: Callable[[float], None] = time.sleep,
        monotonic: Callable[[], float] = time.monotonic,
        wallclock: Callable[[], datetime] = lambda: datetime.now(UTC),
    ) -> None:
        self.backend = backend
        self.profile = profile
        self.options = options
        self.usage = UsageLedger()
        self._sleep, self._monotonic, self._wallclock = sleep, monotonic, wallclock
        #: Called with each call's progress (start, waiting every progress.TICK_S, done / failed): the Dagster log.
        self.progress_listeners: list[Callable[[CallProgress], None]] = []
        self._calls_per_pass: dict[str, int] = {}
        self._tokenizer: EndpointTokenizer | None = None  # the endpoint's /tokenize, asked once per client
        if backend.name == "offline":
            from dream_assets.llm.offline import OFFLINE_LABEL

            log.info(OFFLINE_LABEL)

    @property
    def backend_name(self) -> str:
        return self.backend.name

    @property
    def model_name(self) -> str:
        return self.backend.model

    @property
    def endpoint_key(self) -> str:
        """This client's endpoint and model, as the endpoint profile keys them."""
        return endpoint_key(str(getattr(self.backend, "base_url", "") or ""), self.backend.model)

    def endpoint_profile(self) -> EndpointProfile | None:
        """The agent's endpoint profile file (None without a profile, or for a backend without an endpoint)."""
        if self.profile is None or self.backend.name != "openai":
            return None
        return EndpointProfile(self.profile.endpoint_profile_path)

    def endpoint_facts(self) -> EndpointFacts:
        """What was measured of this client's endpoint (nothing for the offline and scripted backends)."""
        store = self.endpoint_profile()
        return store.get(self.endpoint_key) if store is not None else EndpointFacts()

    @property
    def budget(self) -> ContextBudget:
        """What one call may hold: LlmContextTokens (or the window the endpoint measured, when smaller) and the
        LlmMaxTokens reserve for a real endpoint, counted as the endpoint counts (``token_counter``); unbounded for the
        offline and scripted backends, which have no window."""
        if self.backend.name != "openai":
            return budget_for(0, self.options.LlmMaxTokens, self.backend.model)
        facts = self.endpoint_facts()
        window = self.options.LlmContextTokens
        if window and facts.window:
            window = min(window, facts.window)
        base_url = str(getattr(self.backend, "base_url", "") or "").strip()
        if self._tokenizer is None and base_url:
            self._tokenizer = EndpointTokenizer(base_url, estimate_prompt_tokens, model=self.backend.model)
        counter = token_counter(
            self.backend.model, bytes_per_token=facts.calibrated_bytes_per_token, endpoint=self._tokenizer
        )
        return budget_for(window, self.options.LlmMaxTokens, self.backend.model, counter=counter)

    def timing(self, request: ModelRequest) -> CallTiming | None:
        """The timeout of ``request``, from its prompt, the LlmMaxTokens reserve and the endpoint's measured speed
        (``endpoint_profile.call_timing``); None for a backend without an endpoint."""
        if self.backend.name != "openai":
            return None
        return call_timing(
            self._prompt_tokens(request),
            self.options.LlmMaxTokens,
            self.endpoint_facts(),
            self.options.LlmTimeout.total_seconds(),
        )

    def _prompt_tokens(self, request: ModelRequest) -> int:
        return self.budget.tokens(request.system, request.prompt)

    def _report_start(self, request: ModelRequest) -> CallReporter | None:
        """Progress of this call, for a backend with a model (the offline one answers at once)."""
        if self.backend.name == "offline":
            return None
        name = request.pass_name
        self._calls_per_pass[name] = self._calls_per_pass.get(name, 0) + 1
        index, total = request.part or (self._calls_per_pass[name], 0)
        timing = request.timing
        first = CallProgress(
            pass_name=name,
            index=index,
            total=total,
            prompt_tokens=self._prompt_tokens(request),
            reserve=self.options.LlmMaxTokens,
            started_at=self._wallclock().timestamp(),
            elapsed_s=0.0,
            estimate_s=timing.worst_s if timing is not None else None,
            timeout_s=timing.timeout_s if timing is not None else 0.0,
            phase="start",
            pid=os.getpid(),
        )
        file = ProgressFile(self.profile.model_progress_path) if self.profile is not None else None
        return CallReporter(first, self.progress_listeners, file, wallclock=lambda: self._wallclock().timestamp())

    def _observe_speed(self, raw: RawCompletion) -> None:
        """The speeds the endpoint reported for a call (llama.cpp's ``timings``) move the measured ones halfway, so the
        next calls' timeouts follow a machine that got busier or idler."""
        store = self.endpoint_profile()
        if store is None or (raw.prompt_tps is None and raw.gen_tps is None):
            return
        facts = store.get(self.endpoint_key)

        def blend(old: float | None, new: float | None) -> float | None:
            if new is None or old is None:
                return new
            # one answer moves the speed at most fourfold: a hostile or freak figure cannot shrink every timeout
            return (old + min(max(new, old / SPEED_STEP), old * SPEED_STEP)) / 2

        store.update(
            self.endpoint_key,
            prompt_tps=blend(facts.prompt_tps, raw.prompt_tps),
            gen_tps=blend(facts.gen_tps, raw.gen_tps),
        )

    def _calibrate(self, request: ModelRequest, raw: RawCompletion | int) -> None:
        """One running-calibration observation from the prompt tokens the endpoint reported (plausible ones only): in
        its ``usage``, or (an int) in its "too long" answer, so the prompt planned next is counted closer."""
        store = self.endpoint_profile()
        reported = raw if isinstance(raw, int) else raw.prompt_tokens
        if store is None or reported is None:
            return
        size = sum(len(text.encode("utf-8", "surrogatepass")) for text in (request.system, request.prompt))
        store.observe_bytes_per_token(
            self.endpoint_key, bytes_per_token_observation(size, reported, 2 * MESSAGE_OVERHEAD)
        )

    @property
    def identity(self) -> str:
        """Which backend and model answer this client's calls, as the ledger stamps it."""
        return model_identity(self.backend.name, self.backend.model)

    def describe(self) -> dict[str, str]:
        """Labels for logs and materialization metadata."""
        label = self.backend.name if self.backend.name != "offline" else "offline (no model: deterministic answers)"
        return {"llm_backend": self.backend.name, "llm_model": self.backend.model, "llm_label": label}

    def request(self, call: ModelCall, prompt: str, inputs: Mapping[str, Any] | None = None) -> ModelRequest:
        """A request for ``call`` (the pass's own model call) with its directive (the agent's override, else the
        built-in) as system prompt. The long ids the call shows are shown by short names (``contracts.id_aliases``):
        the prompt as sent, its size and its schema are the short ones; ``call`` maps the answer back."""
        system, source = load_directive(call, self.profile, self.options)
        given = dict(inputs or {})
        aliases = id_aliases(call.contract, given)
        return ModelRequest(
            call=call,
            system=system,
            prompt=with_aliases(prompt, aliases),
            inputs=given,
            directive_source=source,
            aliases=aliases,
        )

    # -----------------------------------------------------------------------------------------------
    def call(self, request: ModelRequest) -> ModelResult:
        contract = request.call.contract
        name, model = self.backend.name, self.backend.model
        waited = 0.0
        if self.profile is not None and getattr(self.backend, "uses_model", True):
            outcome = wait_until_idle(
                self.profile,
                self.options,
                sleep=self._sleep,
                monotonic=self._monotonic,
                wallclock=self._wallclock,
            )
            waited = outcome.waited_s
            if outcome.deferred:
                error = (
                    f"the agent's model was still busy after {outcome.waited_s:.0f}s "
                    f"(BusyMaxWait {self.options.BusyMaxWait}); deferred to the next cycle"
                )
                record = self.usage.add(
                    UsageRecord(
                        request.pass_name,
                        name,
                        model,
                        0,
                        0,
                        False,
                        0.0,
                        "deferred",
                        attempts=0,
                        waited_s=waited,
                        error=error,
                    )
                )
                return ModelResult(False, None, "", error, True, name, model, usage=record)

        try:
            request.timing = self.timing(request)
        except Exception:  # noqa: BLE001 - the call is made with LlmTimeout rather than not at all
            log.warning("the timeout of %s could not be sized to the endpoint; LlmTimeout applies", request.pass_name)
            request.timing = None
        timeout_s = request.timing.timeout_s if request.timing is not None else 0.0
        try:
            reporter = self._report_start(request)
        except Exception:  # noqa: BLE001 - progress is reported, never relied on
            log.debug("progress of %s not reported", request.pass_name, exc_info=True)
            reporter = None
        started = self._monotonic()
        try:
            raw = self.backend.complete(request)
        except Exception as exc:  # the boundary: a failed call is reported, never raised into the pass
            if reporter is not None:
                reporter.finish(False, None)
            latency = self._monotonic() - started
            attempts = getattr(exc, "attempts", 1)
            if getattr(exc, "context_exceeded", False):
                counted = prompt_tokens_in_refusal(str(exc))
                if counted is not None:
                    self._calibrate(request, counted)
            error = (
                f"{name} call for {request.pass_name} failed: {exc}"
                if isinstance(exc, ModelCallError)
                else f"{name} call for {request.pass_name} failed: {type(exc).__name__}: {exc}"
            )
            log.warning("%s", error, exc_info=not isinstance(exc, ModelCallError))
            record = self.usage.add(
                UsageRecord(
                    request.pass_name,
                    name,
                    model,
                    0,
                    0,
                    False,
                    latency,
                    "error",
                    attempts=attempts,
                    waited_s=waited,
                    error=error,
                    timeout_s=timeout_s,
                )
            )
            return ModelResult(
                False,
                None,
                "",
                error,
                False,
                name,
                model,
                usage=record,
                unreachable=bool(getattr(exc, "unreachable", False)),
                context_exceeded=bool(getattr(exc, "context_exceeded", False)),
            )
        latency = self._monotonic() - started
        if reporter is not None:
            reporter.finish(True, raw.completion_tokens)
        model = raw.model or model
        try:
            self._calibrate(request, raw)
            self._observe_speed(raw)
        except Exception:  # noqa: BLE001 - what the answer teaches is kept when it can be, never fails the call
            log.warning("what the %s answer reported could not be kept", request.pass_name, exc_info=True)

        estimated = raw.prompt_tokens is None or raw.completion_tokens is None
        prompt_tokens = (
            raw.prompt_tokens
            if raw.prompt_tokens is not None
            else estimate_tokens(request.system) + estimate_tokens(request.prompt)
        )
        completion_tokens = raw.completion_tokens if raw.completion_tokens is not None else estimate_tokens(raw.text)

        try:
            response = restore_ids(parse_response(raw.text, contract), request.aliases)
        except ResponseFormatError as exc:
            error = f"{name} answer for {request.pass_name} is unusable: {exc}"
            if raw.finish_reason == "length":
                error += " (the answer hit the token limit: raise LlmMaxTokens)"
            log.warning("%s", error)
            record = self.usage.add(
                UsageRecord(
                    request.pass_name,
                    name,
                    model,
                    prompt_tokens,
                    completion_tokens,
                    estimated,
                    latency,
                    "invalid-response",
                    attempts=raw.attempts,
                    waited_s=waited,
                    timeout_s=timeout_s,
                    error=error,
                )
            )
            return ModelResult(False, None, raw.text, error, False, name, model, note=raw.note, usage=record)

        record = self.usage.add(
            UsageRecord(
                request.pass_name,
                name,
                model,
                prompt_tokens,
                completion_tokens,
                estimated,
                latency,
                "ok",
                attempts=raw.attempts,
                waited_s=waited,
                timeout_s=timeout_s,
            )
        )
        log.info(
            "model call %s: backend=%s model=%s tokens=%d+%d%s latency=%.2fs attempts=%d",
            request.pass_name,
            name,
            model,
            prompt_tokens,
            completion_tokens,
            " (estimated)" if estimated else "",
            latency,
            raw.attempts,
        )
        return ModelResult(True, response, raw.text, "", False, name, model, note=raw.note, usage=record)


# --- construction ---------------------------------------------------------------------------------------
def model_identity(backend: str, model: str) -> str:
    """The backend and model as the ledger stamps them: "offline", "openai:llama3.1:8b". A stamp of another identity
    does not satisfy the change gate, so switching the model runs each gated pass once with the new one."""
    backend = backend.strip() or "offline"
    return backend if backend == "offline" or not model.strip() else f"{backend}:{model.strip()}"


def configured_model_identity(options: DreamOptions) -> str:
    """The identity the options select (what the sensors compare; the passes stamp their client's own)."""
    try:
        backend = resolve_backend_name(options)
    except ModelConfigError:
        return "unconfigured"
    return model_identity(backend, options.LlmModel if backend != "offline" else "")


def resolve_backend_name(options: DreamOptions) -> str:
    choice = (options.LlmBackend or "auto").strip().lower()
    if choice == "auto":
        return "openai" if (options.LlmBaseUrl.strip() or options.LlmModel.strip()) else "offline"
    if choice not in ("offline", "openai"):
        raise ModelConfigError(f"LlmBackend={options.LlmBackend!r}: expected auto, offline or openai")
    return choice


def build_backend(
    options: DreamOptions, *, env: Mapping[str, str] | None = None, profile: AgentProfile | None = None
) -> ModelBackend:
    """The backend the options select; with ``profile`` an OpenAI-compatible one remembers the structured-output
    formats its endpoint rejected in the profile (``AgentProfile.model_formats_path``)."""
    if resolve_backend_name(options) == "offline":
        from dream_assets.llm.offline import OfflineBackend

        return OfflineBackend()
    from dream_assets.llm.openai_backend import PLACEHOLDER_API_KEY, FormatMemory, OpenAIBackend

    env = os.environ if env is None else env
    if not options.LlmModel.strip():
        raise ModelConfigError(
            "LlmBackend is openai but LlmModel is empty: set DREAM__Llm__Model (e.g. gpt-4o-mini or llama3.1:8b), "
            "or set DREAM__Llm__Backend=offline"
        )
    key = env.get(options.LlmApiKeyEnv, "") if options.LlmApiKeyEnv else ""
    if not key and not options.LlmBaseUrl.strip():
        raise ModelConfigError(
            f"LlmBackend is openai with the default OpenAI endpoint, but the environment variable "
            f"{options.LlmApiKeyEnv or '(LlmApiKeyEnv is empty)'} holds no API key: export it, point "
            "DREAM__Llm__BaseUrl at a local endpoint, or set DREAM__Llm__Backend=offline"
        )
    return OpenAIBackend(
        model=options.LlmModel.strip(),
        base_url=options.LlmBaseUrl.strip(),
        api_key=key or PLACEHOLDER_API_KEY,
        timeout_s=options.LlmTimeout.total_seconds(),
        max_retries=options.LlmMaxRetries,
        temperature=options.LlmTemperature,
        json_mode=options.LlmJsonMode,
        max_tokens=options.LlmMaxTokens,
        structured_output=structured_output(options),
        format_memory=FormatMemory(profile.model_formats_path) if profile is not None else None,
    )


def structured_output(options: DreamOptions) -> str:
    """The response_format policy: LlmStructuredOutput, where ``auto`` follows an explicit LlmJsonMode (off: none;
    on: json_object) so a setting made for JSON mode keeps its meaning."""
    choice = options.LlmStructuredOutput
    if choice == "auto" and options.LlmJsonMode != "auto":
        return "off" if options.LlmJsonMode == "off" else "json_object"
    return choice


def endpoint_problem(
    options: DreamOptions, *, env: Mapping[str, str] | None = None, timeout_s: float = 5.0
) -> str | None:
    """Before a cycle: why the configured endpoint cannot serve it (one line naming the URL and the cause), or None
    (the offline backend, or an endpoint that answers). Options that cannot work are a problem too."""
    try:
        if resolve_backend_name(options) == "offline":
            return None
        build_backend(options, env=env)
    except ModelConfigError as exc:
        return str(exc)
    from dream_assets.llm.openai_backend import PLACEHOLDER_API_KEY, probe_endpoint

    env = os.environ if env is None else env
    key = env.get(options.LlmApiKeyEnv, "") if options.LlmApiKeyEnv else ""
    return probe_endpoint(options.LlmBaseUrl, key or PLACEHOLDER_API_KEY, timeout_s=timeout_s)


def build_model_client(
    options: DreamOptions, profile: AgentProfile | None, *, env: Mapping[str, str] | None = None
) -> ModelClient:
    """The client the options select. Raises ModelConfigError for options that cannot work."""
    return ModelClient(build_backend(options, env=env, profile=profile), profile=profile, options=options)
