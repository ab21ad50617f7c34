"""Context budgeting: how many tokens a prompt costs and whether directive + items + answer fit the model's window.

``LlmContextTokens`` is the model's window, ``LlmMaxTokens`` the reserve for the answer. A model pass sizes what it
shows so that the directive, the rendered items and the reserve fit; a prompt that cannot fit is never sent (an
endpoint would truncate it: Ollama drops its start, the directive included).

Counting, best first (``token_counter``):

1. the endpoint's own tokenizer: a llama.cpp server's ``POST /tokenize`` (at the server root, beside ``/v1``), asked
   once per endpoint whether it has one; the count is exact;
2. with the optional ``tiktoken`` package and its encoding available locally (``TIKTOKEN_CACHE_DIR``; tiktoken
   downloads its encodings on first use, which an offline machine cannot do) and a model it knows, exact for OpenAI
   models; an encoding it cannot load is said once, and the estimate below is used;
3. an estimate calibrated for this endpoint and model from the ``usage`` its answers reported (prompt bytes per
   reported prompt token, the densest recent observation less a margin: ``endpoint_profile``);
4. before any calibration, one token per three UTF-8 bytes, which over-counts English (about four characters a
   token) but under-counts text full of ids for some tokenizers (Qwen: about 2.1 bytes a token): the first answer
   with ``usage`` calibrates it, and an endpoint's "too long" answer makes a batching pass shrink its batch.

Each message adds a few tokens of chat framing (``MESSAGE_OVERHEAD``).

An endpoint's own "context length exceeded" answer (``is_context_exceeded``: the OpenAI, vLLM and llama.cpp shapes)
makes a batching pass shrink its batch and try again.
"""

from __future__ import annotations

import functools
import logging
import math
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

log = logging.getLogger("dream_assets.llm.budget")

#: Chat framing per message (role, separators), as OpenAI documents it for its chat models, rounded up.
MESSAGE_OVERHEAD = 8

_CONTEXT_EXCEEDED = re.compile(
    r"context_length_exceeded|maximum context length|exceeds the available context size|context window|"
    r"too many tokens|prompt is too long|input is too long",
    re.IGNORECASE,
)


def is_context_exceeded(message: str) -> bool:
    """An endpoint's answer says the prompt did not fit its window (OpenAI ``context_length_exceeded``, vLLM's 400
    "maximum context length", llama.cpp's "exceeds the available context size")."""
    return bool(_CONTEXT_EXCEEDED.search(message or ""))


#: Where an endpoint's "too long" answer says how many tokens the prompt had: llama.cpp "(5543 tokens > 4096)", vLLM
#: "(8000 in the messages, ...)" or "requested 9000 tokens in the messages", OpenAI "your messages resulted in 9000".
_REFUSAL_COUNTS = (
    re.compile(r"\((\d+) tokens > \d+\)"),
    re.compile(r"\((\d+) in the messages"),
    re.compile(r"requested (\d+) tokens in the messages"),
    re.compile(r"messages resulted in (\d+) tokens"),
)


def prompt_tokens_in_refusal(message: str) -> int | None:
    """The prompt tokens an endpoint's "context length exceeded" answer names, or None."""
    for pattern in _REFUSAL_COUNTS:
        found = pattern.search(message or "")
        if found:
            return int(found.group(1)[:12])
    return None


def estimate_prompt_tokens(text: str) -> int:
    """The uncalibrated estimate: one token per three UTF-8 bytes."""
    return math.ceil(len(text.encode("utf-8", "surrogatepass")) / 3) if text else 0


def estimate_counter(bytes_per_token: float) -> Callable[[str], int]:
    """The estimate at ``bytes_per_token`` (a calibrated ratio)."""
    ratio = max(1.0, float(bytes_per_token))
    return lambda text: math.ceil(len(text.encode("utf-8", "surrogatepass")) / ratio) if text else 0


_TIKTOKEN_SAID: set[str] = set()


@functools.lru_cache(maxsize=16)
def _tiktoken_counter(model: str) -> Callable[[str], int] | None:
    """tiktoken's exact counter for ``model`` when the package and the model's encoding are available locally."""
    if not model:
        return None
    try:
        import tiktoken
    except ImportError:
        return None
    try:
        encoding = tiktoken.encoding_for_model(model)
    except KeyError:  # a model tiktoken does not know (a local model): the estimate is the count
        return None
    except Exception as exc:  # noqa: BLE001 - an encoding that would need a download on an offline machine
        if model not in _TIKTOKEN_SAID:
            _TIKTOKEN_SAID.add(model)
            log.warning(
                "tiktoken cannot load the encoding of %s (%s: %s; set TIKTOKEN_CACHE_DIR to a folder holding it); "
                "tokens are estimated instead",
                model,
                type(exc).__name__,
                exc,
            )
        return None
    return lambda text: len(encoding.encode(text, disallowed_special=()))


#: No tokenizer packs more bytes than this into a token on average; a count that says so is not believed.
MAX_BYTES_PER_TOKEN = 8
#: Counts one tokenizer keeps (a batch plan counts the same directive and items many times).
TOKEN_COUNTS_KEEP = 20_000
#: How long one ``/tokenize`` request may take (the server tokenizes outside its generation queue).
TOKENIZE_TIMEOUT_S = 10.0


def server_root(base_url: str) -> str:
    """The server root of an OpenAI-compatible base URL: ``http://host:8091/v1`` -> ``http://host:8091``."""
    base = base_url.strip().rstrip("/")
    return base[: -len("/v1")] if base.endswith("/v1") else base


class EndpointTokenizer:
    """The endpoint's own token count: llama.cpp's ``POST <root>/tokenize {"content": text}`` -> ``{"tokens": [...]}``.
    Counts are cached per text (a batch plan counts the same directive many times). A request that fails after the
    endpoint had answered falls back to ``fallback`` for that text, with a warning once."""

    def __init__(
        self, base_url: str, fallback: Callable[[str], int], *, model: str = "", timeout_s: float = TOKENIZE_TIMEOUT_S
    ):
        self.root = server_root(base_url)
        self.model = model
        self.fallback = fallback
        self.timeout_s = timeout_s
        self._cache: dict[str, int] = {}
        self._available: bool | None = None
        self._warned = False
        self._http: Any = None

    def _ask(self, text: str) -> int | None:
        import httpx  # a dependency of ``openai``

        if self._http is None:  # one connection for all of a plan's counts
            self._http = httpx.Client(timeout=self.timeout_s)
        try:
            answer = self._http.post(f"{self.root}/tokenize", json={"content": text})
            tokens = answer.json().get("tokens") if answer.status_code == 200 else None
        except (httpx.HTTPError, ValueError, AttributeError):
            return None
        return len(tokens) if isinstance(tokens, list) else None

    def available(self) -> bool:
        """Whether the endpoint counts tokens (asked once: a model client keeps its tokenizer for its pass's run, so a
        server restarted with another model or without ``/tokenize`` is asked again next run)."""
        if self._available is None:
            self._available = self._ask("dream") is not None
        return self._available

    def __call__(self, text: str) -> int:
        if not text:
            return 0
        cached = self._cache.get(text)
        if cached is not None:
            return cached
        count = self._ask(text)
        if count is not None and count * MAX_BYTES_PER_TOKEN < len(text.encode("utf-8", "surrogatepass")):
            count = None  # fewer tokens than any tokenizer makes of this text: not believed, the estimate counts
        if count is None:
            if not self._warned:
                self._warned = True
                log.warning("%s/tokenize stopped answering or answered implausibly; tokens are estimated", self.root)
            return self.fallback(text)
        if len(self._cache) >= TOKEN_COUNTS_KEEP:
            for old in list(self._cache)[: TOKEN_COUNTS_KEEP // 2]:
                del self._cache[old]
        self._cache[text] = count
        return count


def token_counter(
    model: str = "", *, bytes_per_token: float | None = None, endpoint: EndpointTokenizer | None = None
) -> tuple[Callable[[str], int], str]:
    """How to count tokens for ``model`` at ``base_url`` and what the count is: the endpoint's own tokenizer (when
    ``ask_endpoint`` and it has one), tiktoken, the estimate calibrated at ``bytes_per_token``, or the default
    estimate."""
    if bytes_per_token is not None:
        estimate: Callable[[str], int] = estimate_counter(bytes_per_token)
        estimate_method = f"estimate calibrated from the endpoint's usage ({bytes_per_token:.2f} bytes a token)"
    else:
        estimate, estimate_method = estimate_prompt_tokens, "estimate (3 bytes a token, not calibrated yet)"
    if endpoint is not None and endpoint.available():
        endpoint.fallback = estimate
        return endpoint, f"the endpoint's tokenizer ({endpoint.root}/tokenize)"
    exact = _tiktoken_counter(model.strip())
    if exact is not None:
        return exact, "tiktoken"
    return estimate, estimate_method


@dataclass(frozen=True)
class ContextBudget:
    """The window, the answer reserve and the counter: what one call may hold."""

    window: int  # LlmContextTokens; 0 = unbounded
    reserve: int  # LlmMaxTokens
    count: Callable[[str], int] = estimate_prompt_tokens
    method: str = "estimate (3 bytes a token, not calibrated yet)"

    @property
    def bounded(self) -> bool:
        return self.window > 0

    @property
    def prompt_limit(self) -> int:
        """Tokens the system and user messages may take together (0 when unbounded)."""
        return max(0, self.window - self.reserve - 2 * MESSAGE_OVERHEAD) if self.bounded else 0

    def tokens(self, system: str, prompt: str) -> int:
        return self.count(system) + self.count(prompt) + 2 * MESSAGE_OVERHEAD

    def fits(self, system: str, prompt: str) -> bool:
        return not self.bounded or self.tokens(system, prompt) + self.reserve <= self.window

    def shrunk(self, factor: float = 0.5) -> ContextBudget:
        """The budget after an endpoint said the prompt did not fit: a smaller window, same reserve."""
        return ContextBudget(max(self.reserve + 1, int(self.window * factor)), self.reserve, self.count, self.method)

    def describe(self) -> str:
        if not self.bounded:
            return "unbounded window (LlmContextTokens = 0)"
        return f"LlmContextTokens {self.window}, answer reserve LlmMaxTokens {self.reserve}, counted by {self.method}"


def budget_for(
    window: int, reserve: int, model: str = "", *, counter: tuple[Callable[[str], int], str] | None = None
) -> ContextBudget:
    count, method = counter if counter is not None else token_counter(model)
    return ContextBudget(int(window), int(reserve), count, method)
