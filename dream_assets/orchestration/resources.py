"""Dagster resources."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, ClassVar

import dagster as dg

from dream_assets.llm.base import ModelBackend
from dream_assets.llm.client import ModelClient, ModelConfigError, build_backend
from dream_assets.options import DreamOptions
from dream_assets.profile import AgentProfile


class ModelResource(dg.ConfigurableResource):
    """The model the passes call. Empty / None fields take their value from DreamOptions (``DREAM__Llm...``).

    ``backend``: "auto" (openai when a base URL or model is configured, else offline), "openai" or "offline".
    The API key is read from the environment variable named by ``api_key_env`` when the client is built;
    ``api_key_env`` left at its default defers to ``LlmApiKeyEnv`` (whose default is the same name).
    """

    backend: str = "auto"
    base_url: str = ""
    model: str = ""
    api_key_env: str = "OPENAI_API_KEY"
    timeout_s: float | None = None
    temperature: float | None = None

    # Set on the subclass ``with_backend`` makes: Dagster rebuilds resources from their config, which
    # would drop an instance attribute, but keeps the class.
    fixed_backend: ClassVar[ModelBackend | None] = None

    @classmethod
    def with_backend(cls, backend: ModelBackend) -> ModelResource:
        """A resource whose clients all use ``backend`` (for tests: ``ScriptedBackend([...])``)."""
        fixed = type(f"{cls.__name__}WithBackend", (cls,), {"__module__": cls.__module__, "fixed_backend": backend})
        return fixed()

    def effective_options(self, options: DreamOptions) -> DreamOptions:
        changes: dict[str, Any] = {}
        if self.backend.strip().lower() != "auto":
            choice = self.backend.strip().lower()
            if choice not in ("offline", "openai"):
                raise ModelConfigError(f"ModelResource.backend={self.backend!r}: expected auto, offline or openai")
            changes["LlmBackend"] = choice
        if self.base_url:
            changes["LlmBaseUrl"] = self.base_url
        if self.model:
            changes["LlmModel"] = self.model
        if self.api_key_env and self.api_key_env != "OPENAI_API_KEY":
            changes["LlmApiKeyEnv"] = self.api_key_env
        if self.timeout_s is not None:
            from datetime import timedelta

            changes["LlmTimeout"] = timedelta(seconds=self.timeout_s)
        if self.temperature is not None:
            changes["LlmTemperature"] = self.temperature
        return options.replace(**changes) if changes else options

    def client(
        self, profile: AgentProfile | None, options: DreamOptions, *, env: Mapping[str, str] | None = None
    ) -> ModelClient:
        """A fresh client (own usage ledger) for one agent profile."""
        return self.resolved_client(profile, self.effective_options(options), env=env)

    def resolved_client(
        self, profile: AgentProfile | None, options: DreamOptions, *, env: Mapping[str, str] | None = None
    ) -> ModelClient:
        """A fresh client for options that already hold this resource's settings (``effective_options``, then a
        pass's own model): they are not derived again, so a pass's own model is the one called."""
        backend = self.fixed_backend or build_backend(options, env=env, profile=profile)
        return ModelClient(backend, profile=profile, options=options)
