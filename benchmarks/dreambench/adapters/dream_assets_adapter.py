"""This project, through its public Python API: ``dream_assets.agent_memory.save`` and ``.search`` (what the MCP
server and ``dream memory`` call), and a whole dream cycle in this process with ``dream_assets.cycle.run_cycle``
(the passes ``dream run`` runs through Dagster, without Dagster). The model is the agent's configured one: the
offline backend unless ``DREAM__LlmBaseUrl`` names an OpenAI-compatible endpoint (``DREAM__LlmModel``, and the other
``DREAM__*`` options, as for ``dream run``). ``dump`` lists live entries and archived ones (``dream restore`` brings
them back); an entry purged by retention is gone and not listed. Every prompt the cycle sends is sized as it goes
(``prompts``: the call and its estimated tokens, directive and items, at three bytes a token), with the offline
backend too: what a model would be sent, measured without one."""

from __future__ import annotations

from datetime import datetime
from pathlib import Path

from dream_assets import agent_memory
from dream_assets.cycle import run_cycle
from dream_assets.llm.budget import estimate_prompt_tokens
from dream_assets.llm.client import ModelClient, build_model_client
from dream_assets.options import load_agent_options
from dream_assets.profile import AgentProfile
from dream_assets.store import open_store
from dream_assets.store.connection import close_all

from .base import Kept, workdir


def cycle_failures(when: datetime, reports: list, failed_calls: list[tuple[str, str]]) -> list[str]:
    """The failures of one cycle: each failed pass, and each failed model call (an unusable answer, a timeout) that did
    not fail a pass (a failed pass gives the call's error as its reason). A pass can go on past a failed call: a merge
    repair that fails leaves its merge rejected and the pass succeeds, and that call still failed."""
    failed = [r for r in reports if r.status == "failed"]
    out = [f"{when:%Y-%m-%d} {r.pass_name}: {r.reason}" for r in failed]
    out += [
        f"{when:%Y-%m-%d} {call} call: {error}"[:300]
        for call, error in failed_calls
        if not any(error and error in (r.reason or "") for r in failed)
    ]
    return out


class DreamAssets:
    name = "dream_assets"

    def __init__(self, *, root: Path, env: dict[str, str] | None = None, **_: object) -> None:
        self.profile = AgentProfile(workdir(root, "dream_assets")).ensure()
        self.options = load_agent_options(self.profile, env)
        self.backend = self.options.LlmBackend
        self.tokens = 0
        self.failed_passes: list[str] = []  # failed passes and failed model calls (``cycle_failures``)
        self._failed_calls: list[tuple[str, str]] = []  # (call, error) of this cycle's calls that failed
        self.now: datetime | None = None
        self.prompts: list[tuple[str, int]] = []  # (call, estimated prompt tokens) of every model call

    def describe(self) -> str:
        o = self.options
        if o.LlmBaseUrl:
            return f"openai endpoint {o.LlmBaseUrl} model {o.LlmModel or '(default)'}"
        return "offline backend (the project's rule-based answers, no model)"

    def save(self, text: str, when: datetime) -> None:
        # Not the agent speaking live (no busy lease): a scripted save, as a folder read is.
        agent_memory.save(self.profile, text, options=self.options, now=when, active=False)
        self.now = when

    def consolidate(self, when: datetime) -> None:
        cycle = run_cycle(
            self.profile, self.options, when, cycle_id=f"bench-{when:%Y%m%d}", client_factory=self._client
        )
        for report in cycle:
            self.tokens += int(report.usage.get("total_tokens", 0))
        self.failed_passes += cycle_failures(when, cycle, self._failed_calls)
        self._failed_calls = []
        self.now = when

    def _client(self) -> ModelClient:
        """The client a pass builds (as the cycle would), its prompts sized as they are sent."""
        client = build_model_client(self.options, self.profile)
        send = client.backend.complete

        def complete(request):  # type: ignore[no-untyped-def]
            size = estimate_prompt_tokens(request.system) + estimate_prompt_tokens(request.prompt)
            self.prompts.append((request.pass_name, size))
            return send(request)

        client.backend.complete = complete  # type: ignore[method-assign]
        call = client.call

        def noted(request):  # type: ignore[no-untyped-def]
            result = call(request)
            if not result.ok and not result.deferred:
                self._failed_calls.append((request.pass_name, result.error))
            return result

        client.call = noted  # type: ignore[method-assign]
        return client

    def prompt_tokens_estimate(self) -> int:
        """The estimated prompt tokens of every call so far (what an endpoint would count, give or take its
        tokenizer)."""
        return sum(size for _, size in self.prompts)

    def search(self, query: str, k: int) -> list[str]:
        return [
            h.content
            for h in agent_memory.search(self.profile, query, limit=k, options=self.options, now=self.now).hits
        ]

    def dump(self) -> list[Kept]:
        store = open_store(self.profile, self.options)
        try:
            return [Kept(e.content, not e.is_archived) for e in store.memories.list_all()]
        finally:
            store.close()

    def tokens_used(self) -> int:
        return self.tokens

    def close(self) -> None:
        close_all()
