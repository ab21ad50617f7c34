"""The scripted backend: answers from a list or a function, for tests.

An answer may be a string (the raw model text, returned verbatim), a dict or pydantic model (sent as JSON),
a ``RawCompletion`` (to script token usage), or an exception instance (raised: a failed call). A function
receives the ``ModelRequest`` and returns any of these. Every request is kept in ``requests``.
"""

from __future__ import annotations

import json
from collections import deque
from collections.abc import Callable, Iterable
from typing import Any

from pydantic import BaseModel

from dream_assets.llm.base import ModelCallError, ModelRequest, RawCompletion

Answer = str | dict | BaseModel | RawCompletion | BaseException


class ScriptedBackend:
    name = "scripted"
    uses_model = True  # behaves like a real model, so busy waits apply (and can be tested)

    def __init__(
        self, answers: Iterable[Answer] | Callable[[ModelRequest], Answer], *, model: str = "scripted-model"
    ) -> None:
        self.model = model
        self.requests: list[ModelRequest] = []
        if callable(answers):
            self._fn: Callable[[ModelRequest], Answer] | None = answers
            self._queue: deque[Answer] = deque()
        else:
            self._fn = None
            self._queue = deque(answers)

    @property
    def remaining(self) -> int:
        return len(self._queue)

    def push(self, *answers: Answer) -> None:
        self._queue.extend(answers)

    def complete(self, request: ModelRequest) -> RawCompletion:
        self.requests.append(request)
        if self._fn is not None:
            answer: Any = self._fn(request)
        elif self._queue:
            answer = self._queue.popleft()
        else:
            raise ModelCallError(
                f"scripted backend has no answer left for call {len(self.requests)} (pass {request.pass_name}); "
                "add one to the test's answer list"
            )
        if isinstance(answer, BaseException):
            raise answer
        if isinstance(answer, RawCompletion):
            return answer
        if isinstance(answer, BaseModel):
            answer = answer.model_dump(by_alias=True)
        if isinstance(answer, dict):
            answer = json.dumps(answer)
        return RawCompletion(text=str(answer), model=self.model)
