"""What every backend takes and returns. ``client.py`` re-exports these; passes import from there."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

from dream_assets.llm.contracts import ModelCall
from dream_assets.llm.endpoint_profile import CallTiming


@dataclass
class ModelRequest:
    #: The kind of call, handed in by the pass that makes it: its contract validates the answer, its directive is
    #: the system prompt, its offline answer is what the offline backend says. The model layer looks nothing up.
    call: ModelCall
    system: str  # the directive text
    prompt: str  # the rendered inputs (rendered by the pass)
    # Structured inputs the prompt was rendered from; the offline backend computes its answer from these (with the
    # call's ``offline`` function; each pass documents their shape).
    inputs: dict[str, Any] = field(default_factory=dict)
    directive_source: str = "built-in"
    #: The call's timeout, set by the client from the endpoint's measured speed (None: the backend's LlmTimeout).
    timing: CallTiming | None = None
    #: Which call of how many of its pass this is (None: the client counts the pass's calls, total unknown).
    part: tuple[int, int] | None = None
    #: The short names the prompt and the schema show for long ids (id -> name; ``contracts.id_aliases``), mapped back
    #: in the answer before the pass reads it.
    aliases: dict[str, str] = field(default_factory=dict)

    @property
    def pass_name(self) -> str:
        """The call's name: the key of its usage records, logs and messages."""
        return self.call.name


@dataclass
class RawCompletion:
    """A backend's answer before extraction. Token counts are None when the endpoint reported none."""

    text: str
    prompt_tokens: int | None = None
    completion_tokens: int | None = None
    model: str = ""
    attempts: int = 1
    finish_reason: str = ""
    note: str = ""
    #: The speeds the endpoint reported for this call (llama.cpp's ``timings``), tokens a second; None when it did not.
    prompt_tps: float | None = None
    gen_tps: float | None = None


class ModelCallError(Exception):
    """The backend could not get an answer (network, HTTP status, timeout, malformed body).

    ``unreachable`` is True when the endpoint could not be reached at all (connection refused or reset, DNS, or no
    answer within the timeout), as opposed to an endpoint that answered with an error or an unusable body: the rest
    of the cycle then stops calling it (see ``dream_assets.passes.common.call_model``)."""

    def __init__(
        self,
        message: str,
        *,
        attempts: int = 1,
        retryable: bool = False,
        unreachable: bool = False,
        context_exceeded: bool = False,
    ) -> None:
        super().__init__(message)
        self.attempts = attempts
        self.retryable = retryable
        self.unreachable = unreachable
        #: The endpoint said the prompt does not fit its context window: a smaller batch can succeed.
        self.context_exceeded = context_exceeded


@runtime_checkable
class ModelBackend(Protocol):
    name: str  # "openai" | "offline" | "scripted"
    model: str
    uses_model: bool  # False when no model is involved (offline): then no busy wait is needed

    def complete(self, request: ModelRequest) -> RawCompletion:
        """The answer text, or raise (ModelCallError preferred)."""
        ...
