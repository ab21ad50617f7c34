"""Context budgeting: how many tokens a prompt costs and whether directive + items + answer fit the model's window.

``LlmContextTokens`` is the model's window, ``LlmMaxTokens`` the reserve for the answer. A model pass sizes what it
shows so that the directive, the rendered items and the reserve fit; a prompt that cannot fit is never sent (an
endpoint would truncate it: Ollama drops its start, the directive included).

Counting: with the optional ``tiktoken`` package and its encoding available locally (``TIKTOKEN_CACHE_DIR``;
tiktoken downloads its encodings on first use, which an offline machine cannot do) and a model it knows, the count
is exact for OpenAI models. Everywhere else it is a conservative estimate: one token per three UTF-8 bytes, which
over-counts English (about four characters a token) and is about right for text outside ASCII. Each message adds a
few tokens of chat framing (``MESSAGE_OVERHEAD``).

An endpoint's own "context length exceeded" answer (``is_context_exceeded``: the OpenAI, vLLM and llama.cpp shapes)
makes a batching pass shrink its batch and try again.
"""

from __future__ import annotations

import functools
import math
import re
from collections.abc import Callable
from dataclasses import dataclass

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


def estimate_prompt_tokens(text: str) -> int:
    """The conservative estimate: one token per three UTF-8 bytes."""
    return math.ceil(len(text.encode("utf-8", "surrogatepass")) / 3) if text else 0


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
    except Exception:  # noqa: BLE001 - an unknown model or an encoding that would need a download
        return None
    return lambda text: len(encoding.encode(text, disallowed_special=()))


def token_counter(model: str = "") -> tuple[Callable[[str], int], str]:
    """How to count tokens for ``model`` and what the count is ("tiktoken" exact, or "estimate")."""
    exact = _tiktoken_counter(model.strip())
    if exact is not None:
        return exact, "tiktoken"
    return estimate_prompt_tokens, "estimate (3 bytes a token)"


@dataclass(frozen=True)
class ContextBudget:
    """The window, the answer reserve and the counter: what one call may hold."""

    window: int  # LlmContextTokens; 0 = unbounded
    reserve: int  # LlmMaxTokens
    count: Callable[[str], int] = estimate_prompt_tokens
    method: str = "estimate (3 bytes a token)"

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


def budget_for(window: int, reserve: int, model: str = "") -> ContextBudget:
    count, method = token_counter(model)
    return ContextBudget(int(window), int(reserve), count, method)
