"""Embedding provider: any OpenAI-compatible ``/v1/embeddings`` endpoint through the ``openai`` package.

Works with OpenAI, Azure OpenAI (its ``/openai/v1/`` base URL), Ollama (``http://127.0.0.1:11434/v1``), vLLM and
LM Studio. Configured like the chat model:

- ``EmbeddingModel`` (``DREAM__EmbeddingModel``) names the model; empty (the default) means no provider at all:
  ``build_embedding_provider`` returns None and near-duplicates are found with the lexical measure, so an offline
  install makes zero embedding calls.
- ``EmbeddingBaseUrl`` / ``EmbeddingApiKeyEnv`` default to ``LlmBaseUrl`` / ``LlmApiKeyEnv`` (one endpoint and key
  for both), or name a separate endpoint and key. ``LlmTimeout`` and ``LlmMaxRetries`` apply.
- ``EmbeddingBatchSize`` texts go in one request: N texts cost ceil(N / EmbeddingBatchSize) requests.
- ``EmbeddingDimensions`` (0: not fixed) is the size every answered vector must have; an answer of another size is
  refused like any unusable batch (``EmbeddingError``), before anything uses or caches it.

Retries follow the chat backend (``openai_backend.classify_failure`` and ``backoff_delay``): 408/409/429/5xx, a
timeout, a refused connection or a body that is not JSON are retried with exponential back-off or after the
server's ``Retry-After``. Every request is one ``UsageRecord`` (pass name ``embeddings`` unless the caller names
one) in the provider's ``UsageLedger``, which may be a chat client's (``ModelClient.usage``) so a pass reports both.

Models trained with an instruction on each input get it (``INPUT_PREFIXES``): the e5 family reads ``query: `` before
a search and ``passage: `` before a memory; without them its cosines crowd into a narrow band and search finds less.
Vectors made with a prefix are cached under ``vector_key`` (the model name and its document prefix), so a store never
compares them with vectors the same model made without one.

A call that cannot be completed raises ``EmbeddingError`` (a ``ModelCallError``): never an empty or partial
result. Callers degrade on it the way the spec asks of a failed near-duplicate scan.

The cache is ``dream_assets.store.embeddings``; the index over a store and the clustering are in
``dream_assets.llm.embedding_index``.
"""

from __future__ import annotations

import logging
import os
import random
import re
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np

from dream_assets.llm.base import ModelCallError
from dream_assets.llm.extract import head
from dream_assets.llm.openai_backend import (
    PLACEHOLDER_API_KEY,
    _Rejected,
    _Transient,
    backoff_delay,
    json_response,
)
from dream_assets.llm.usage import UsageLedger, UsageRecord, estimate_tokens
from dream_assets.options import DreamOptions
from dream_assets.text.tokens import content_tokens

__all__ = [
    "EMBEDDINGS_PASS",
    "INPUT_PREFIXES",
    "DegenerateEmbeddings",
    "EmbeddingError",
    "EmbeddingProvider",
    "build_embedding_provider",
    "check_vectors",
    "input_prefixes",
    "normalise_rows",
    "vector_key",
]

log = logging.getLogger("dream_assets.llm.embeddings")

#: The pass name embedding calls are accounted under unless the caller names another.
EMBEDDINGS_PASS = "embeddings"

#: Models trained with an instruction before each input: (a pattern of the model name, the prefix of a search query,
#: the prefix of a stored text). The e5 models (``intfloat/e5-*``, ``multilingual-e5-*``, quantised copies of them)
#: were trained with "query: " and "passage: " and their model cards ask for them.
INPUT_PREFIXES: tuple[tuple[re.Pattern[str], str, str], ...] = (
    # an e5 "instruct" model reads "Instruct: <task>\nQuery: " instead, and its passages bare: not this entry
    (re.compile(r"(?:^|[/_.-])e5(?:[_.-]|$)(?!.*instruct)", re.IGNORECASE), "query: ", "passage: "),
)
#: What an embedded text is: a search ``query`` or a stored ``document`` (a memory).
KINDS = ("document", "query")


def input_prefixes(model: str) -> tuple[str, str]:
    """(query prefix, document prefix) of ``model``; ("", "") for a model that takes its inputs as they are."""
    for pattern, query, document in INPUT_PREFIXES:
        if pattern.search(model.strip()):
            return query, document
    return "", ""


def vector_key(model: str) -> str:
    """The name the store caches ``model``'s vectors of memories under: the model name, with its document prefix when
    it has one (``multilingual-e5-small-q4 [passage: ]``), so vectors made with and without it never meet."""
    model = model.strip()
    document = input_prefixes(model)[1]
    return f"{model} [{document}]" if document else model


_WHERE = (
    "EmbeddingModel, with the endpoint from EmbeddingBaseUrl (else LlmBaseUrl) and the key from "
    "EmbeddingApiKeyEnv (else LlmApiKeyEnv)"
)


class EmbeddingError(ModelCallError):
    """An embeddings call failed after its retries (or the endpoint answered something unusable).

    The message names the endpoint, the model and the options that configure them. ``retryable`` and
    ``unreachable`` mean what they mean on ``ModelCallError``."""


class DegenerateEmbeddings(EmbeddingError):
    """The endpoint answered vectors that cannot measure anything: all zero, or one vector for obviously different
    texts. Nothing of such a batch is used or cached; callers fall back to the lexical measure."""


#: Two vectors this close are the same vector: obviously different texts must never be this close.
SAME_VECTOR_COSINE = 0.999
#: Texts sharing less than this share of their content words are obviously different.
DIFFERENT_TEXTS_SHARE = 0.5
#: Rows compared pairwise for degeneracy (a sample beyond this: a degenerate endpoint is degenerate throughout).
_DEGENERACY_SAMPLE = 256


def _obviously_different(a: str, b: str) -> bool:
    wa, wb = content_tokens(a), content_tokens(b)
    if not wa or not wb:
        return False  # a text without content words may embed like anything
    return len(wa & wb) < DIFFERENT_TEXTS_SHARE * len(wa | wb)


def check_vectors(texts: Sequence[str], matrix: np.ndarray, *, where: str, fresh: int | None = None) -> None:
    """Raise ``DegenerateEmbeddings`` (or ``EmbeddingError`` for a malformed batch) unless ``matrix`` holds one
    finite, non-zero row per text, all of one size, and no two obviously different texts (sharing less than half of
    their content words) got the same vector. ``fresh``: only pairs involving the first ``fresh`` rows (the vectors
    just fetched) are judged. ``where`` names the endpoint and model in the message."""
    m = np.asarray(matrix, dtype=np.float32)
    if m.ndim != 2 or m.shape[0] != len(texts):
        raise EmbeddingError(f"{where}: {m.shape[0] if m.ndim else 0} vector(s) for {len(texts)} text(s)")
    if not len(texts):
        return
    if not np.isfinite(m).all():
        raise EmbeddingError(f"{where}: embeddings holding NaN or infinity")
    norms = np.linalg.norm(m, axis=1)
    if (norms <= 0).any():
        zero = int((norms <= 0).sum())
        raise DegenerateEmbeddings(f"{where}: {zero} all-zero embedding(s), which are close to nothing")
    fresh = len(texts) if fresh is None else fresh
    rows = list(range(min(fresh, _DEGENERACY_SAMPLE)))
    others = list(range(fresh, min(len(texts), fresh + _DEGENERACY_SAMPLE)))
    sample = rows + others
    if len(sample) < 2 or not rows:
        return
    unit = m[sample] / norms[sample, None]
    sims = unit[: len(rows)] @ unit.T
    for i, j in zip(*np.nonzero(sims >= SAME_VECTOR_COSINE), strict=True):
        a, b = sample[i], sample[j]
        if a != b and texts[a] != texts[b] and _obviously_different(texts[a], texts[b]):
            raise DegenerateEmbeddings(
                f"{where}: the same vector (cosine {float(sims[i, j]):.4f}) for obviously different texts "
                f"{head(texts[a], 60)!r} and {head(texts[b], 60)!r}: the endpoint is not embedding"
            )


def normalise_rows(matrix: np.ndarray) -> np.ndarray:
    """Rows scaled to unit L2 norm (float32); an all-zero row stays zero and is close to nothing."""
    m = np.asarray(matrix, dtype=np.float32)
    norms = np.linalg.norm(m, axis=1, keepdims=True)
    return np.divide(m, norms, out=np.zeros_like(m), where=norms > 0)


class EmbeddingProvider:
    """Embeds texts through an OpenAI-compatible endpoint: ``embed(texts) -> (n, dim) float32``, rows normalised."""

    backend = "openai"

    def __init__(
        self,
        *,
        model: str,
        base_url: str = "",
        api_key: str = PLACEHOLDER_API_KEY,
        timeout_s: float = 120.0,
        max_retries: int = 3,
        batch_size: int = 64,
        dimensions: int = 0,
        usage: UsageLedger | None = None,
        sleep: Callable[[float], None] = time.sleep,
        monotonic: Callable[[], float] = time.monotonic,
        backoff_base_s: float = 0.5,
        backoff_max_s: float = 8.0,
        retry_after_max_s: float = 120.0,
        jitter: Callable[[], float] = random.random,
    ) -> None:
        import openai  # imported here: an install without embeddings never pays for it

        if not model.strip():
            raise ValueError("EmbeddingModel is empty: no embedding provider can be built without a model name")
        if batch_size < 1:
            raise ValueError(f"EmbeddingBatchSize {batch_size!r}: expected at least 1")
        self.model = model.strip()
        self.base_url = base_url
        self.timeout_s = timeout_s
        self.max_retries = max(0, int(max_retries))
        self.batch_size = int(batch_size)
        self.dimensions = max(0, int(dimensions))  # the size every vector must have; 0: not fixed
        self.usage = usage if usage is not None else UsageLedger()
        self._sleep, self._monotonic = sleep, monotonic
        self._backoff_base_s = backoff_base_s
        self._backoff_max_s = backoff_max_s
        self._retry_after_max_s = retry_after_max_s
        self._jitter = jitter
        self._openai = openai
        self._client = openai.OpenAI(
            base_url=base_url or None,
            api_key=api_key or PLACEHOLDER_API_KEY,
            timeout=timeout_s,
            max_retries=0,
        )
        self.endpoint = str(self._client.base_url).rstrip("/")
        self.prefixes = dict(zip(("query", "document"), input_prefixes(self.model), strict=True))
        #: What the store caches this provider's vectors of memories under (``vector_key``).
        self.key = vector_key(self.model)

    def describe(self) -> dict[str, str]:
        return {
            "embedding_backend": self.backend,
            "embedding_model": self.model,
            "embedding_endpoint": self.endpoint,
        }

    # -----------------------------------------------------------------------------------------------
    def embed(self, texts: Sequence[str], *, pass_name: str = EMBEDDINGS_PASS, kind: str = "document") -> np.ndarray:
        """One L2-normalised float32 row per text, in order, in ceil(len(texts) / batch_size) requests. ``kind``:
        ``document`` (a memory) or ``query`` (a search), which decides the model's input prefix.

        Raises ``EmbeddingError`` when any request fails after its retries; nothing partial comes back."""
        if kind not in KINDS:
            raise ValueError(f"embed(kind={kind!r}): use one of {', '.join(KINDS)}")
        texts = [str(t) for t in texts]
        if not texts:
            return np.zeros((0, 0), dtype=np.float32)
        prefix = self.prefixes[kind]
        sent = [prefix + t for t in texts] if prefix else texts
        parts = [self._request(sent[i : i + self.batch_size], pass_name) for i in range(0, len(sent), self.batch_size)]
        dims = {p.shape[1] for p in parts}
        if len(dims) > 1:
            raise EmbeddingError(
                f"embeddings from {self.endpoint} (EmbeddingModel={self.model!r}) changed size "
                f"between requests: dimensions {sorted(dims)}"
            )
        matrix = np.vstack(parts)
        try:
            where = f"embeddings from {self.endpoint} (EmbeddingModel={self.model!r})"
            if self.dimensions and matrix.shape[1] != self.dimensions:
                raise EmbeddingError(
                    f"{where}: vectors of size {matrix.shape[1]}, not the {self.dimensions} of EmbeddingDimensions"
                )
            check_vectors(texts, matrix, where=where)
        except EmbeddingError as exc:
            log.warning("%s [configured by %s]", exc, _WHERE)
            raise
        return matrix

    def _request(self, batch: list[str], pass_name: str) -> np.ndarray:
        attempts = 0
        retries = 0
        started = self._monotonic()
        while True:
            attempts += 1
            try:
                matrix, prompt_tokens = self._attempt(batch, attempts)
                break
            except _Rejected as exc:
                self._fail(
                    batch,
                    pass_name,
                    started,
                    attempts,
                    EmbeddingError(f"HTTP {exc.status} from {self.endpoint}: {exc.message}", attempts=attempts),
                )
            except _Transient as exc:
                if retries >= self.max_retries:
                    self._fail(
                        batch,
                        pass_name,
                        started,
                        attempts,
                        EmbeddingError(
                            f"{exc.message} (gave up after {attempts} attempt(s), LlmMaxRetries={self.max_retries})",
                            attempts=attempts,
                            retryable=True,
                            unreachable=exc.unreachable,
                        ),
                    )
                if exc.retry_after is not None and exc.retry_after > self._retry_after_max_s:
                    self._fail(
                        batch,
                        pass_name,
                        started,
                        attempts,
                        EmbeddingError(
                            f"{exc.message}; the endpoint asked to wait {exc.retry_after:.0f}s, more than "
                            f"{self._retry_after_max_s:.0f}s",
                            attempts=attempts,
                            retryable=True,
                        ),
                    )
                delay, why = backoff_delay(
                    retries,
                    exc.retry_after,
                    base_s=self._backoff_base_s,
                    max_s=self._backoff_max_s,
                    jitter=self._jitter,
                )
                retries += 1
                log.warning(
                    "embeddings: %s (attempt %d of %d); retrying in %.2fs (%s)",
                    exc.message,
                    attempts,
                    self.max_retries + 1,
                    delay,
                    why,
                )
                self._sleep(delay)
            except EmbeddingError as exc:
                self._fail(batch, pass_name, started, exc.attempts, exc)
            except ModelCallError as exc:
                self._fail(batch, pass_name, started, attempts, EmbeddingError(str(exc), attempts=attempts))
        latency = self._monotonic() - started
        estimated = prompt_tokens is None
        tokens = prompt_tokens if prompt_tokens is not None else sum(estimate_tokens(t) for t in batch)
        self.usage.add(
            UsageRecord(pass_name, self.backend, self.model, tokens, 0, estimated, latency, "ok", attempts=attempts)
        )
        log.info(
            "embeddings %s: model=%s texts=%d tokens=%d%s latency=%.2fs attempts=%d",
            pass_name,
            self.model,
            len(batch),
            tokens,
            " (estimated)" if estimated else "",
            latency,
            attempts,
        )
        return matrix

    def _fail(self, batch: list[str], pass_name: str, started: float, attempts: int, exc: EmbeddingError) -> None:
        message = (
            f"embeddings call for {pass_name} ({len(batch)} text(s), model {self.model!r}) failed: {exc} "
            f"[configured by {_WHERE}]"
        )
        self.usage.add(
            UsageRecord(
                pass_name,
                self.backend,
                self.model,
                0,
                0,
                False,
                self._monotonic() - started,
                "error",
                attempts=attempts,
                error=message,
            )
        )
        log.warning("%s", message)
        raise EmbeddingError(message, attempts=attempts, retryable=exc.retryable, unreachable=exc.unreachable) from None

    def _attempt(self, batch: list[str], attempts: int) -> tuple[np.ndarray, int | None]:
        # Endpoints refuse an empty input string; a single space embeds "nothing" just as well.
        inputs = [t if t.strip() else " " for t in batch]
        data, body = json_response(
            self._openai,
            lambda: self._client.embeddings.with_raw_response.create(
                model=self.model, input=inputs, encoding_format="float"
            ),
            endpoint=self.endpoint,
            timeout_s=self.timeout_s,
            attempts=attempts,
            url_option="EmbeddingBaseUrl (or LlmBaseUrl)",
        )
        return _vectors(data, body, len(batch), self.endpoint, attempts), _prompt_tokens(data)


def _vectors(data: Any, body: str, expected: int, endpoint: str, attempts: int) -> np.ndarray:
    """The ``data[*].embedding`` rows in ``index`` order, checked and normalised."""
    items = data.get("data") if isinstance(data, dict) else None
    if not isinstance(items, list) or len(items) != expected:
        got = len(items) if isinstance(items, list) else "no data list"
        raise EmbeddingError(
            f"{endpoint} answered {got} embedding(s) for {expected} input(s): {head(body)!r}",
            attempts=attempts,
        )
    rows: list[tuple[int, list[Any]]] = []
    for position, item in enumerate(items):
        vector = item.get("embedding") if isinstance(item, dict) else None
        index = item.get("index", position) if isinstance(item, dict) else position
        if not isinstance(vector, list) or not vector or not isinstance(index, int):
            raise EmbeddingError(
                f"{endpoint} answered data[{position}] without a float embedding: {head(body)!r}",
                attempts=attempts,
            )
        rows.append((index, vector))
    rows.sort(key=lambda r: r[0])
    if [r[0] for r in rows] != list(range(expected)):
        raise EmbeddingError(
            f"{endpoint} answered embedding indexes {[r[0] for r in rows]} for {expected} input(s)",
            attempts=attempts,
        )
    if len({len(v) for _, v in rows}) != 1:
        raise EmbeddingError(f"{endpoint} answered embeddings of different sizes in one response", attempts=attempts)
    try:
        matrix = np.asarray([v for _, v in rows], dtype=np.float32)
    except (TypeError, ValueError):
        raise EmbeddingError(
            f"{endpoint} answered embeddings that are not lists of numbers: {head(body)!r}", attempts=attempts
        ) from None
    if not np.isfinite(matrix).all():
        raise EmbeddingError(f"{endpoint} answered embeddings holding NaN or infinity", attempts=attempts)
    return normalise_rows(matrix)


def _prompt_tokens(data: Any) -> int | None:
    usage = data.get("usage") if isinstance(data, dict) else None
    value = usage.get("prompt_tokens", usage.get("total_tokens")) if isinstance(usage, dict) else None
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else None


# --- construction ---------------------------------------------------------------------------------------
def build_embedding_provider(
    options: DreamOptions,
    *,
    env: Mapping[str, str] | None = None,
    usage: UsageLedger | None = None,
    **overrides: Any,
) -> EmbeddingProvider | None:
    """The provider the options configure, or None when ``EmbeddingModel`` is empty (use the lexical measure).

    ``usage``: the ledger to record calls in (e.g. the pass's ``ModelClient.usage``). ``overrides`` go to
    ``EmbeddingProvider`` (sleep, jitter, back-off). Raises ``ModelConfigError`` when the default OpenAI endpoint
    would be called without an API key."""
    from dream_assets.llm.client import ModelConfigError

    model = options.EmbeddingModel.strip()
    if not model:
        return None
    env = os.environ if env is None else env
    base_url = options.EmbeddingBaseUrl.strip() or options.LlmBaseUrl.strip()
    key_env = options.EmbeddingApiKeyEnv.strip() or options.LlmApiKeyEnv.strip()
    key = env.get(key_env, "") if key_env else ""
    if not key and not base_url:
        raise ModelConfigError(
            f"EmbeddingModel is {model!r} with the default OpenAI endpoint, but the environment variable "
            f"{key_env or '(EmbeddingApiKeyEnv and LlmApiKeyEnv are empty)'} holds no API key: export it, point "
            "DREAM__EmbeddingBaseUrl (or DREAM__Llm__BaseUrl) at a local endpoint, or clear DREAM__EmbeddingModel"
        )
    return EmbeddingProvider(
        model=model,
        base_url=base_url,
        api_key=key or PLACEHOLDER_API_KEY,
        timeout_s=options.LlmTimeout.total_seconds(),
        max_retries=options.LlmMaxRetries,
        batch_size=options.EmbeddingBatchSize,
        dimensions=options.EmbeddingDimensions,
        usage=usage,
        **overrides,
    )
