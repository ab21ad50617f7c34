"""The ``openai`` backend: any OpenAI-compatible chat-completions endpoint through the ``openai`` package.

Works with OpenAI, Azure OpenAI (its ``/openai/v1/`` base URL), Ollama (``http://127.0.0.1:11434/v1``),
vLLM, LM Studio and a llama.cpp server. Retries are done here rather than by the ``openai`` client (which
is built with ``max_retries=0``), so every attempt is logged and counted, the wait honours the server's
``Retry-After`` (``retry-after-ms`` too), and a body that is cut off or not JSON is retried like a 5xx.

JSON mode: "on" always sends ``response_format={"type": "json_object"}``; "off" never does; "auto" sends it
until the endpoint rejects a request with 400/422, then repeats that request without it and remembers that the
endpoint has no JSON mode: in the process, and (``FormatMemory``) in the agent profile for seven days. The
directives ask for JSON either way and the extractor tolerates prose around it, so losing JSON mode costs nothing
but robustness. In the same way, a 400 that names ``max_tokens`` (newer OpenAI models want
``max_completion_tokens``) or ``temperature`` (models with a fixed temperature) is answered once by adapting that
parameter.
"""

from __future__ import annotations

import email.utils
import json
import logging
import random
import time
from collections.abc import Callable, Sequence
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from dream_assets.file_safety import UnreadableFile, atomic_write, read_json_file
from dream_assets.llm.base import ModelCallError, ModelRequest, RawCompletion
from dream_assets.llm.budget import is_context_exceeded
from dream_assets.llm.contracts import call_schema
from dream_assets.llm.extract import head
from dream_assets.model import iso, parse_ts

log = logging.getLogger("dream_assets.llm.openai")

#: Sent when the endpoint needs no key (a local server); the openai client refuses an empty one.
PLACEHOLDER_API_KEY = "not-needed"


#: LlmStructuredOutput -> the response_format kinds tried, best first ("" = none).
STRUCTURED_LEVELS: dict[str, list[str]] = {
    "auto": ["json_schema", "json_object", ""],
    "json_schema": ["json_schema"],
    "json_object": ["json_object"],
    "off": [""],
}

#: Per endpoint and model, the response_format kinds it rejected in this process: every backend built for it later
#: (one per pass) starts below them.
_REJECTED_FORMATS: dict[str, set[str]] = {}
#: How long a rejection remembered on disk holds: after that the endpoint (perhaps upgraded) is asked again.
FORMAT_MEMORY_TTL = timedelta(days=7)


class FormatMemory:
    """The response_format kinds each endpoint and model rejected, kept in a small JSON file of the agent profile
    (``{"version": 1, "endpoints": {"<base url>|<model>": {"<kind>": "<when rejected>"}}}``) so a rejected format is
    not tried again every run; a rejection older than ``ttl`` is forgotten. The file is read defensively (an
    unreadable one is as good as none, with a warning) and rewritten atomically."""

    def __init__(
        self,
        path: Path,
        *,
        ttl: timedelta = FORMAT_MEMORY_TTL,
        clock: Callable[[], datetime] = lambda: datetime.now(UTC),
    ) -> None:
        self.path = path
        self.ttl = ttl
        self._clock = clock

    def _read(self) -> dict[str, dict[str, str]]:
        try:
            data = read_json_file(self.path)
        except FileNotFoundError:
            return {}
        except UnreadableFile as exc:
            log.warning("openai: %s; the structured-output formats are asked for again", exc)
            return {}
        endpoints = data.get("endpoints") if isinstance(data, dict) else None
        if not isinstance(endpoints, dict):
            log.warning("openai: %s: field 'endpoints' is not an object; ignored", self.path)
            return {}
        return {
            key: {k: v for k, v in kinds.items() if isinstance(k, str) and isinstance(v, str)}
            for key, kinds in endpoints.items()
            if isinstance(key, str) and isinstance(kinds, dict)
        }

    def rejected(self, key: str) -> set[str]:
        """The kinds ``key`` rejected less than ``ttl`` ago."""
        now = self._clock()
        out = set()
        for kind, when in self._read().get(key, {}).items():
            try:
                at = parse_ts(when)
            except (TypeError, ValueError):
                continue
            if at is not None and now - at < self.ttl:
                out.add(kind)
        return out

    def update(self, key: str, *, add: str | None = None, drop: Sequence[str] = ()) -> None:
        endpoints = self._read()
        kinds = endpoints.setdefault(key, {})
        if add:
            kinds[add] = iso(self._clock()) or ""
        for kind in drop:
            kinds.pop(kind, None)
        if not kinds:
            endpoints.pop(key, None)
        try:
            atomic_write(self.path, json.dumps({"version": 1, "endpoints": endpoints}, indent=2, sort_keys=True))
        except OSError as exc:
            log.warning(
                "openai: could not write %s (%s); the rejection is remembered for this process only", self.path, exc
            )


def response_format_schema(request: ModelRequest) -> dict[str, Any]:
    """The ``json_schema`` response_format of a call: its contract's JSON schema (the one source of truth the answer
    is validated against), by alias, not strict (a strict schema needs every field required), with every id field
    narrowed to the ids this call shows (``contracts.call_schema``: an ``enum``), so a model that decodes under the
    schema (llama.cpp's grammar) cannot name an entry it was not shown."""
    return {
        "type": "json_schema",
        "json_schema": {
            "name": request.call.name,
            "schema": call_schema(request.call.contract, request.inputs, request.aliases),
            "strict": False,
        },
    }


class OpenAIBackend:
    name = "openai"
    uses_model = True

    def __init__(
        self,
        *,
        model: str,
        base_url: str = "",
        api_key: str = PLACEHOLDER_API_KEY,
        timeout_s: float = 120.0,
        max_retries: int = 3,
        temperature: float = 0.2,
        json_mode: str = "auto",
        max_tokens: int = 4096,
        structured_output: str | None = None,
        sleep: Callable[[float], None] = time.sleep,
        backoff_base_s: float = 0.5,
        backoff_max_s: float = 8.0,
        retry_after_max_s: float = 120.0,
        jitter: Callable[[], float] = random.random,
        format_memory: FormatMemory | None = None,
    ) -> None:
        import openai  # imported here: the offline default never pays for it

        if json_mode not in ("auto", "on", "off"):
            raise ValueError(f"LlmJsonMode {json_mode!r}: expected auto, on or off")
        self.model = model
        self.base_url = base_url
        self.timeout_s = timeout_s
        self.max_retries = max(0, int(max_retries))
        self.temperature = temperature
        self.json_mode = json_mode
        self.max_tokens = max_tokens
        self._sleep = sleep
        self._backoff_base_s = backoff_base_s
        self._backoff_max_s = backoff_max_s
        self._retry_after_max_s = retry_after_max_s
        self._jitter = jitter
        # The response_format kinds to try, best first ("" = none): LlmStructuredOutput, or LlmJsonMode alone.
        if structured_output is None:
            levels = {"auto": ["json_object", ""], "on": ["json_object"], "off": [""]}[json_mode]
        elif structured_output in STRUCTURED_LEVELS:
            levels = STRUCTURED_LEVELS[structured_output]
        else:
            raise ValueError(
                f"LlmStructuredOutput {structured_output!r}: expected auto, json_schema, json_object or off"
            )
        self._levels = list(levels)
        self._level_key = f"{base_url or 'openai'}|{model}"
        # what an earlier backend of this process learned about the endpoint (the passes of a cycle each have one)
        self._format_memory = format_memory
        remembered = _REJECTED_FORMATS.get(self._level_key, set())
        if format_memory is not None:  # and what an earlier run learned (FormatMemory: on disk, expiring)
            remembered = remembered | format_memory.rejected(self._level_key)
        self._level = next((i for i, k in enumerate(self._levels) if k not in remembered), len(self._levels) - 1)
        self._token_param = "max_tokens"
        self._send_temperature = True
        self._openai = openai
        self._client = openai.OpenAI(
            base_url=base_url or None,
            api_key=api_key or PLACEHOLDER_API_KEY,
            timeout=timeout_s,
            max_retries=0,
        )
        self.endpoint = str(self._client.base_url).rstrip("/")

    # -----------------------------------------------------------------------------------------------
    def complete(self, request: ModelRequest) -> RawCompletion:
        messages = [
            {"role": "system", "content": request.system},
            {"role": "user", "content": request.prompt},
        ]
        attempts = 0
        retries = 0
        started_level = self._level
        while True:
            attempts += 1
            kind = self._levels[self._level]
            try:
                return self._attempt(messages, kind, request, attempts)
            except _Rejected as exc:
                if is_context_exceeded(exc.message):  # no parameter to adapt: the batch must shrink
                    raise ModelCallError(
                        f"HTTP {exc.status} from {self.endpoint}: the prompt does not fit the model's context "
                        f"window ({exc.message}); check LlmContextTokens",
                        attempts=attempts,
                        context_exceeded=True,
                    ) from None
                fallback = self._fallback(exc, kind)
                if fallback is None:
                    if self._level != started_level:  # the format was not the cause after all: keep it
                        dropped_kinds = self._levels[started_level : self._level]
                        for dropped in dropped_kinds:
                            _REJECTED_FORMATS.get(self._level_key, set()).discard(dropped)
                        if self._format_memory is not None:
                            self._format_memory.update(self._level_key, drop=dropped_kinds)
                        self._level = started_level
                    raise ModelCallError(
                        f"HTTP {exc.status} from {self.endpoint}: {exc.message}", attempts=attempts
                    ) from None
                log.info(
                    "openai: %s rejected the request (HTTP %s: %s); repeating it %s",
                    self.endpoint,
                    exc.status,
                    exc.message,
                    fallback,
                )
                continue  # a compatibility fallback, not a retry
            except _Transient as exc:
                timing = request.timing
                if exc.timed_out and timing is not None and timing.explains_timeout:
                    raise ModelCallError(
                        f"no answer from {self.endpoint} within {timing.describe()}: the endpoint's measured speed "
                        "explains it, so the call is not retried — raise LlmTimeout, lower LlmMaxTokens or the "
                        "pass's per-call limit (dream check-model recommends settings)",
                        attempts=attempts,
                        retryable=False,
                    ) from None
                if retries >= self.max_retries:
                    unmeasured = exc.timed_out and (timing is None or timing.worst_s is None)
                    hint = (
                        "; the endpoint's speed is not measured: dream check-model measures it, and each call's "
                        "timeout then follows it"
                        if unmeasured
                        else ""
                    )
                    raise ModelCallError(
                        f"{exc.message} (gave up after {attempts} attempt(s), LlmMaxRetries={self.max_retries}){hint}",
                        attempts=attempts,
                        retryable=True,
                        unreachable=exc.unreachable,
                    ) from None
                if exc.retry_after is not None and exc.retry_after > self._retry_after_max_s:
                    raise ModelCallError(
                        f"{exc.message}; the endpoint asked to wait {exc.retry_after:.0f}s, more "
                        f"than {self._retry_after_max_s:.0f}s — the pass will try again next cycle",
                        attempts=attempts,
                        retryable=True,
                    ) from None
                delay, why = self._delay(retries, exc.retry_after)
                retries += 1
                log.warning(
                    "openai: %s (attempt %d of %d); retrying in %.2fs (%s)",
                    exc.message,
                    attempts,
                    self.max_retries + 1,
                    delay,
                    why,
                )
                self._sleep(delay)

    def _fallback(self, exc: _Rejected, kind: str) -> str | None:
        """Adapt once to an endpoint that refuses a parameter; None when there is nothing left to adapt."""
        text = exc.message.lower()
        if "max_tokens" in text and "max_completion_tokens" in text and self._token_param == "max_tokens":
            self._token_param = "max_completion_tokens"  # newer OpenAI models
            return "with max_completion_tokens instead of max_tokens"
        if "temperature" in text and self._send_temperature:
            self._send_temperature = False  # models that only allow their default temperature
            return "without temperature"
        if kind and self._level + 1 < len(self._levels):
            _REJECTED_FORMATS.setdefault(self._level_key, set()).add(kind)
            if self._format_memory is not None:
                self._format_memory.update(self._level_key, add=kind)
            self._level += 1
            then = self._levels[self._level]
            return (
                f"with {then} instead of {kind} (remembered for this endpoint)"
                if then
                else ("without JSON mode (remembered for this endpoint)")
            )
        return None

    def _delay(self, retry_index: int, retry_after: float | None) -> tuple[float, str]:
        return backoff_delay(
            retry_index,
            retry_after,
            base_s=self._backoff_base_s,
            max_s=self._backoff_max_s,
            jitter=self._jitter,
        )

    def _attempt(
        self, messages: list[dict[str, str]], kind: str, request: ModelRequest, attempts: int
    ) -> RawCompletion:
        openai = self._openai
        kwargs: dict[str, Any] = {
            "model": self.model,
            "messages": messages,
            self._token_param: self.max_tokens,
        }
        if self._send_temperature:
            kwargs["temperature"] = self.temperature
        if kind == "json_schema":
            kwargs["response_format"] = response_format_schema(request)
        elif kind == "json_object":
            kwargs["response_format"] = {"type": "json_object"}
        timing = request.timing
        timeout_s = timing.timeout_s if timing is not None else self.timeout_s
        kwargs["timeout"] = timeout_s
        label = "LlmTimeout" if timing is None or timing.worst_s is None or timing.capped else "measured speed"
        data, body = json_response(
            openai,
            lambda: self._client.chat.completions.with_raw_response.create(**kwargs),
            endpoint=self.endpoint,
            timeout_s=timeout_s,
            attempts=attempts,
            url_option="LlmBaseUrl",
            timeout_label=label,
        )
        return _completion(data, body, self.model, attempts)


def classify_failure(
    openai: Any, exc: Exception, endpoint: str, timeout_s: float, attempts: int, timeout_label: str = "LlmTimeout"
) -> Exception:
    """What a failed ``openai`` request means: ``_Transient`` (worth a retry: no answer, 408/409/429/5xx, a body cut
    off mid-read), ``_Rejected`` (400/422: the request itself was refused) or ``ModelCallError`` (any other status)."""
    if isinstance(exc, openai.APITimeoutError):
        return _Transient(
            f"no answer from {endpoint} within {timeout_s:.0f}s ({timeout_label})"
            if timeout_s >= 10 or timeout_label != "LlmTimeout"
            else f"no answer from {endpoint} within {timeout_s:g}s ({timeout_label})",
            unreachable=True,
            timed_out=True,
        )
    if isinstance(exc, openai.APIConnectionError):
        return _Transient(f"connection to {endpoint} failed: {_cause(exc)}", unreachable=True)
    if isinstance(exc, openai.APIStatusError):
        status = exc.status_code
        message = _error_message(exc)
        if status in (400, 422):
            return _Rejected(status, message)
        if status in (408, 409, 429) or status >= 500:
            return _Transient(
                f"HTTP {status} from {endpoint}: {message}", retry_after=_retry_after(exc.response.headers)
            )
        return ModelCallError(f"HTTP {status} from {endpoint}: {message}{_hint(status)}", attempts=attempts)
    # a body cut off mid-read surfaces from the HTTP layer
    return _Transient(f"reading the answer from {endpoint} failed: {type(exc).__name__}: {exc}")


def json_response(
    openai: Any,
    create: Callable[[], Any],
    *,
    endpoint: str,
    timeout_s: float,
    attempts: int,
    url_option: str,
    timeout_label: str = "LlmTimeout",
) -> tuple[Any, str]:
    """One request through the ``openai`` client's raw-response API: the parsed JSON body and the body text. A failed
    request is classified (``classify_failure``); a body that is not JSON is a transient failure naming the status,
    the content type and ``url_option`` (a wrong base URL usually answers with an HTML page)."""
    try:
        http = create().http_response
        body = http.text
    except Exception as exc:
        raise classify_failure(openai, exc, endpoint, timeout_s, attempts, timeout_label) from None
    try:
        return json.loads(body), body
    except RecursionError:
        raise _Transient(
            f"{endpoint} returned a JSON body nested too deeply to read (HTTP {http.status_code}): {head(body)!r}"
        ) from None
    except json.JSONDecodeError:
        raise _Transient(
            f"{endpoint} returned a body that is not JSON (HTTP {http.status_code}, content-type "
            f"{http.headers.get('content-type', '?')}; check {url_option}, which usually ends in /v1): "
            f"{head(body)!r}"
        ) from None


def backoff_delay(
    retry_index: int, retry_after: float | None, *, base_s: float, max_s: float, jitter: Callable[[], float]
) -> tuple[float, str]:
    """Seconds to wait before retry number ``retry_index`` (0-based) and why: the server's Retry-After when it sent
    one, else exponential back-off from ``base_s`` capped at ``max_s``."""
    if retry_after is not None and retry_after > 0:
        return retry_after, "Retry-After"
    base = min(base_s * (2**retry_index), max_s)
    # up to 25% jitter, so agents sharing one endpoint do not retry in lock-step
    return base * (1 - 0.25 * jitter()), "exponential back-off"


class _Transient(Exception):
    """A failure worth retrying. ``unreachable``: no answer at all (connection failure or timeout)."""

    def __init__(
        self, message: str, retry_after: float | None = None, *, unreachable: bool = False, timed_out: bool = False
    ) -> None:
        super().__init__(message)
        self.message = message
        self.retry_after = retry_after
        self.unreachable = unreachable
        self.timed_out = timed_out


class _Rejected(Exception):
    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message


def _completion(data: Any, body: str, model: str, attempts: int) -> RawCompletion:
    try:
        choice = data["choices"][0]
        message = choice.get("message") or {}
    except (KeyError, IndexError, TypeError, AttributeError):
        raise ModelCallError(f"the answer has no choices[0].message: {head(body)!r}", attempts=attempts) from None
    text = message.get("content")
    if not isinstance(text, str):
        text = str(message.get("refusal") or "")
    usage = data.get("usage") if isinstance(data.get("usage"), dict) else {}
    timings = data.get("timings") if isinstance(data.get("timings"), dict) else {}
    return RawCompletion(
        text=text,
        prompt_tokens=_int(usage.get("prompt_tokens")),
        completion_tokens=_int(usage.get("completion_tokens")),
        model=str(data.get("model") or model),
        attempts=attempts,
        finish_reason=str(choice.get("finish_reason") or ""),
        prompt_tps=_speed(timings, "prompt_n", "prompt_per_second", MIN_PROMPT_SAMPLE),
        gen_tps=_speed(timings, "predicted_n", "predicted_per_second", MIN_ANSWER_SAMPLE),
    )


#: A llama.cpp ``timings`` speed counts only over this many tokens (a prompt served from its cache says nothing).
MIN_PROMPT_SAMPLE = 64
MIN_ANSWER_SAMPLE = 16


def _speed(timings: dict, count_field: str, speed_field: str, minimum: int) -> float | None:
    """A speed from llama.cpp's ``timings`` when measured over enough tokens and plausible, else None."""
    from dream_assets.llm.endpoint_profile import SPEED_RANGE, plausible_number

    count = plausible_number(timings.get(count_field), minimum, 1e9)
    speed = plausible_number(timings.get(speed_field), *SPEED_RANGE)
    return speed if count is not None else None


def _int(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else None


def _retry_after(headers: Any) -> float | None:
    """Seconds the server asked us to wait: ``retry-after-ms``, ``retry-after`` seconds or an HTTP date."""
    for name, divisor in (("retry-after-ms", 1000.0), ("retry-after", 1.0)):
        value = headers.get(name)
        if value is None:
            continue
        try:
            return max(0.0, float(value) / divisor)
        except ValueError:
            pass
        try:
            when = email.utils.parsedate_to_datetime(value)
        except (TypeError, ValueError):
            continue
        return max(0.0, when.timestamp() - time.time())
    return None


def _error_message(exc: Any) -> str:
    body = getattr(exc, "body", None)
    if isinstance(body, dict):
        err = body.get("error", body)
        if isinstance(err, dict) and err.get("message"):
            code = err.get("code")
            prefix = f"{code}: " if isinstance(code, str) and code and code not in str(err["message"]) else ""
            return (prefix + str(err["message"]))[:300]
        if isinstance(err, str):
            return err[:300]
    try:
        return head(exc.response.text, 300) or str(exc)
    except Exception:
        return str(exc)[:300]


def _cause(exc: BaseException) -> str:
    cause = exc.__cause__ or exc.__context__
    return f"{type(cause).__name__}: {cause}" if cause else str(exc)


def _hint(status: int) -> str:
    if status in (401, 403):
        return " — check the API key (the variable named by LlmApiKeyEnv)"
    if status == 404:
        return " — check LlmBaseUrl (it usually ends in /v1) and LlmModel"
    return ""


def probe_endpoint(base_url: str, api_key: str = PLACEHOLDER_API_KEY, *, timeout_s: float = 5.0) -> str | None:
    """One cheap request (``GET <base>/models``) before a cycle: None when the endpoint answers, else one line naming
    the URL and the cause. Any answer but 401/403 counts as reachable (some servers do not list their models)."""
    import httpx  # a dependency of ``openai``

    base = (base_url.strip() or "https://api.openai.com/v1").rstrip("/")
    url = f"{base}/models"
    try:
        answer = httpx.get(
            url, headers={"Authorization": f"Bearer {api_key or PLACEHOLDER_API_KEY}"}, timeout=timeout_s
        )
    except httpx.TimeoutException:
        return f"the model endpoint {base} did not answer GET /models within {timeout_s:g}s"
    except httpx.HTTPError as exc:
        return f"the model endpoint {base} is not reachable (GET /models: {_cause(exc) if exc.__cause__ else exc})"
    if answer.status_code in (401, 403):
        return f"the model endpoint {base} refused the API key (GET /models: HTTP {answer.status_code}){_hint(401)}"
    return None
