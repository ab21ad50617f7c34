"""The offline backend: no model at all, conservative deterministic answers to every call.

It is the default when no endpoint is configured, so a fresh machine can run a whole cycle. It knows no pass: each
answer is the ``offline`` function of the ``ModelCall`` the pass hands in with its request, computed from the
structured ``ModelRequest.inputs`` the pass builds next to the rendered prompt (the pass module documents their shape
and the answer). A call that needs judgement the backend cannot make answers with its empty response and
:data:`JUDGEMENT_NOTE` (``needs_judgement``), a note the pass puts in its report.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from typing import Any

from dream_assets.llm.base import ModelRequest, RawCompletion
from dream_assets.llm.contracts import ModelCall

OFFLINE_BACKEND = "offline"
OFFLINE_MODEL = "offline-deterministic"
OFFLINE_LABEL = "model backend: offline (no endpoint configured) — deterministic conservative answers"
JUDGEMENT_NOTE = "offline backend: this pass needs model judgement; no changes proposed"


def needs_judgement(empty: Mapping[str, Any]) -> Callable[[Mapping[str, Any]], tuple[dict[str, Any], str]]:
    """The answer of a pass that needs judgement the backend cannot make: ``empty`` (a fresh copy each time) and
    :data:`JUDGEMENT_NOTE`."""
    text = json.dumps(dict(empty))

    def answer(inputs: Mapping[str, Any]) -> tuple[dict[str, Any], str]:
        return json.loads(text), JUDGEMENT_NOTE

    return answer


class OfflineBackend:
    """Answers every contract without a model (see the module docstring for what each answer is)."""

    name = OFFLINE_BACKEND
    model = OFFLINE_MODEL
    uses_model = False  # nothing competes with the agent's own model, so no busy wait

    def complete(self, request: ModelRequest) -> RawCompletion:
        answer, note = self.answer(request.call, request.inputs)
        return RawCompletion(
            text=json.dumps(answer, ensure_ascii=False),
            prompt_tokens=0,
            completion_tokens=0,
            model=OFFLINE_MODEL,
            note=note,
        )

    def answer(self, call: ModelCall, inputs: Mapping[str, Any] | None) -> tuple[dict[str, Any], str]:
        """The offline answer of ``call`` (``ModelCall.offline``, defined next to the pass that makes the call)."""
        return call.offline(inputs or {})
