"""The model layer: one client interface over three backends (openai, offline, scripted).

Passes hold a ``ModelClient`` (``build_model_client(options, profile)``), render their inputs themselves (with the
shared pieces of ``prompts``), and ``call`` it with a ``ModelRequest`` built for their own ``ModelCall``
(``client.request(call, prompt, inputs)``); the answer comes back validated against the call's contract (a
``contracts.Contract`` the pass defines) or as a failed / deferred result, with usage recorded per pass. The model
layer names no pass and never looks a call up by name: the passes hand it in.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from dream_assets.llm.base import ModelCallError, ModelRequest, RawCompletion
    from dream_assets.llm.client import ModelClient, ModelConfigError, ModelResult, build_model_client

# Imported on first use: a module of this package that needs none of them (llm.busy, read by every memory call from
# the shell) does not pay for the client, its contracts and its HTTP stack.
_HOME = {
    "ModelCallError": "base",
    "ModelRequest": "base",
    "RawCompletion": "base",
    "ModelClient": "client",
    "ModelConfigError": "client",
    "ModelResult": "client",
    "build_model_client": "client",
}


def __getattr__(name: str) -> Any:
    home = _HOME.get(name)
    if home is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f"{__name__}.{home}"), name)
    globals()[name] = value
    return value


__all__ = [
    "ModelCallError",
    "ModelClient",
    "ModelConfigError",
    "ModelRequest",
    "ModelResult",
    "RawCompletion",
    "build_model_client",
]
