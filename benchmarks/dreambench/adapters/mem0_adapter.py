"""mem0 (the ``mem0ai`` package, open-source ``Memory``) with ``infer=True``: each save goes through mem0's own
extraction and update step (ADD / UPDATE / DELETE decided by the model at save time), so ``consolidate`` has
nothing to do. The model is the endpoint ``DREAM__LlmBaseUrl`` names, the embeddings come from
``DREAM__EmbeddingBaseUrl`` (else the same endpoint) with ``DREAM__EmbeddingModel`` (``DREAM__EmbeddingDimensions``
for a model whose vectors are not 1536 long); the vector store is mem0's
local Qdrant in the run's folder. mem0 keeps a history of its changes but offers no restore of a deleted memory,
so ``dump`` lists live memories only. Tokens are counted from the ``usage`` of the answers mem0's own OpenAI client
receives (embeddings not included).

Unavailable unless ``mem0ai`` imports and an endpoint is set."""

from __future__ import annotations

import inspect
import os
from datetime import datetime
from pathlib import Path
from typing import Any

from .base import Endpoint, Kept, Unavailable, workdir

USER = "dreambench"


class Mem0:
    name = "mem0"

    def __init__(self, *, root: Path, env: dict[str, str] | None = None, **_: object) -> None:
        self.endpoint = Endpoint.from_env(env)
        if self.endpoint is None:
            raise Unavailable("mem0 needs a model: set DREAM__LlmBaseUrl to an OpenAI-compatible endpoint")
        # mem0 reads these when first imported: no usage reports sent from a benchmark run, and its own files in the
        # run's folder rather than the home directory (unless the person running it set them).
        os.environ.setdefault("MEM0_TELEMETRY", "False")
        os.environ.setdefault("MEM0_DIR", str(workdir(root, "mem0") / "home"))
        try:
            from mem0 import Memory
        except ImportError as exc:
            raise Unavailable(f"mem0 needs the mem0ai package, which does not import here ({exc})") from exc
        env = dict(os.environ if env is None else env)
        embed_url = env.get("DREAM__EmbeddingBaseUrl", "").strip() or self.endpoint.base_url
        embed_model = env.get("DREAM__EmbeddingModel", "").strip()
        if not embed_model:
            raise Unavailable("mem0 needs an embeddings model: set DREAM__EmbeddingModel (and DREAM__EmbeddingBaseUrl)")
        dims = int(env.get("DREAM__EmbeddingDimensions") or 0)  # 0: the model's own (mem0 assumes 1536)
        sized = {"embedding_dims": dims} if dims else {}
        folder = workdir(root, "mem0")
        self.memory = Memory.from_config(
            {
                "llm": {
                    "provider": "openai",
                    "config": {
                        "model": self.endpoint.model,
                        "openai_base_url": self.endpoint.base_url,
                        "api_key": self.endpoint.api_key,
                        "temperature": 0.2,
                    },
                },
                "embedder": {
                    "provider": "openai",
                    "config": {
                        "model": embed_model,
                        "openai_base_url": embed_url,
                        "api_key": self.endpoint.api_key,
                        **sized,
                    },
                },
                "vector_store": {
                    "provider": "qdrant",
                    "config": {
                        "path": str(folder / "qdrant"),
                        "on_disk": True,
                        **({"embedding_model_dims": dims} if dims else {}),
                    },
                },
                "history_db_path": str(folder / "history.db"),
            }
        )

        self._prefix_inputs(embed_model)
        self.tokens = 0
        client = getattr(getattr(self.memory, "llm", None), "client", None)
        if client is not None:
            create = client.chat.completions.create

            def counted(*args: object, **kwargs: object) -> object:
                answer = create(*args, **kwargs)
                usage = getattr(answer, "usage", None)
                self.tokens += int(getattr(usage, "total_tokens", 0) or 0)
                return answer

            client.chat.completions.create = counted

    def _prefix_inputs(self, model: str) -> None:
        """Give mem0's embedder the inputs its model was trained with, as ``dream_assets`` gives its own (an e5 model
        reads "query: " before a search and "passage: " before a stored text; ``llm.embeddings.input_prefixes``).
        mem0 sends texts bare, which suits the OpenAI models it is made for and costs an e5 model recall: without
        this, the comparison would measure the missing prefix rather than mem0. mem0 says which a text is: its
        ``memory_action`` is "search" for a query (also the look-up of related memories at an add), else "add" or
        "update"."""
        from dream_assets.llm.embeddings import input_prefixes

        query, document = input_prefixes(model)
        embedder = getattr(self.memory, "embedding_model", None)
        if embedder is None or not (query or document):
            return
        embed, embed_batch = embedder.embed, embedder.embed_batch

        def prefix(action: object) -> str:
            return query if action == "search" else document

        def prefixed(text: str, memory_action: object = None) -> object:
            return embed(prefix(memory_action) + text, memory_action)

        def prefixed_batch(texts: list[str], memory_action: object = "add") -> object:
            return embed_batch([prefix(memory_action) + t for t in texts], memory_action)

        embedder.embed, embedder.embed_batch = prefixed, prefixed_batch

    def describe(self) -> str:
        return f"mem0 infer=True, openai endpoint {self.endpoint.base_url} model {self.endpoint.model}"

    def save(self, text: str, when: datetime) -> None:
        self.memory.add(
            [{"role": "user", "content": text}], user_id=USER, infer=True, metadata={"at": when.isoformat()}
        )

    def consolidate(self, when: datetime) -> None:
        pass  # mem0 consolidates at save time

    def search(self, query: str, k: int) -> list[str]:
        found = self._read(self.memory.search, k, query)
        return [r["memory"] for r in (found.get("results", []) if isinstance(found, dict) else found)]

    def dump(self) -> list[Kept]:
        found = self._read(self.memory.get_all, 100_000)
        return [Kept(r["memory"]) for r in (found.get("results", []) if isinstance(found, dict) else found)]

    @staticmethod
    def _read(method: Any, k: int, *args: object) -> Any:
        """``search`` or ``get_all`` of this user, at most ``k``: mem0 2.x takes ``filters`` and ``top_k`` (and refuses
        ``user_id`` beside them), earlier releases ``user_id`` and ``limit``."""
        if "filters" in inspect.signature(method).parameters:
            return method(*args, filters={"user_id": USER}, top_k=k)
        return method(*args, user_id=USER, limit=k)

    def tokens_used(self) -> int:
        return self.tokens

    def close(self) -> None:
        pass
