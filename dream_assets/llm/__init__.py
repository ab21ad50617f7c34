"""The model layer: one client interface over three backends (openai, offline, scripted).

Passes hold a ``ModelClient`` (``build_model_client(options, profile)``), render their inputs with
``prompts``, and ``call`` it with a ``ModelRequest`` built for their own ``ModelCall`` (``client.request(call, prompt,
inputs)``); the answer comes back validated against the call's contract (``contracts``) or as a failed / deferred
result, with usage recorded per pass. The model layer never looks a call up by name: the passes hand it in.
"""

from dream_assets.llm.base import ModelCallError, ModelRequest, RawCompletion
from dream_assets.llm.client import ModelClient, ModelConfigError, ModelResult, build_model_client

__all__ = [
    "ModelCallError",
    "ModelClient",
    "ModelConfigError",
    "ModelRequest",
    "ModelResult",
    "RawCompletion",
    "build_model_client",
]
