"""A real OpenAI-compatible HTTP server on 127.0.0.1 whose answers and failures are scripted per test.

    with OpenAITestServer() as server:
        server.script(reply(content='{"toSave": []}'), rate_limited(retry_after=0.2), server_error())
        backend = OpenAIBackend(base_url=server.base_url, model="m", ...)

Each POST to ``/v1/chat/completions`` takes the next scripted reply; every request is recorded (path,
headers, JSON body, arrival time on the monotonic clock) so tests can assert retries, their spacing, JSON
mode, model name and temperature. With nothing scripted the server answers 418, which the client does not
retry, so a missing script fails fast.

``/v1/embeddings`` takes the next scripted reply too (a 500 or a 429 to test retries); with nothing scripted it
answers deterministic vectors (``embedding_vector``; ``OpenAITestServer(embeddings=hostile_embeddings(kind))`` answers
broken ones instead): feature-hashed bags of normalised words, so texts sharing most
of their words are close and texts sharing none are nearly orthogonal. ``embedding_requests`` lists those calls.
"""

from __future__ import annotations

import base64
import hashlib
import json
import math
import re
import socket
import struct
import threading
import time
from collections import deque
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


@dataclass
class RecordedRequest:
    path: str
    headers: dict[str, str]  # names lower-cased
    body: Any
    at: float  # time.monotonic() on arrival


@dataclass
class Reply:
    """What the server does for one request."""

    status: int = 200
    body: bytes = b""
    headers: dict[str, str] = field(default_factory=dict)
    delay_s: float = 0.0  # sleep before answering (past the client's timeout = a timeout)
    declared_length: int | None = None  # Content-Length larger than the body sent: a truncated body
    # When set, decides per request from its JSON body: the Reply to use, or None for "the next scripted one".
    decide: Callable[[Any], Reply | None] | None = None


def completion_body(
    content: str,
    *,
    model: str = "test-model",
    usage: bool = True,
    prompt_tokens: int = 11,
    completion_tokens: int = 7,
    finish_reason: str = "stop",
) -> dict:
    body: dict[str, Any] = {
        "id": "chatcmpl-test",
        "object": "chat.completion",
        "created": 1_700_000_000,
        "model": model,
        "choices": [{"index": 0, "message": {"role": "assistant", "content": content}, "finish_reason": finish_reason}],
    }
    if usage:
        body["usage"] = {
            "prompt_tokens": prompt_tokens,
            "completion_tokens": completion_tokens,
            "total_tokens": prompt_tokens + completion_tokens,
        }
    return body


def _json(status: int, payload: Any, headers: dict[str, str] | None = None, delay_s: float = 0.0) -> Reply:
    return Reply(
        status=status,
        body=json.dumps(payload).encode(),
        headers={"Content-Type": "application/json", **(headers or {})},
        delay_s=delay_s,
    )


#: One answer every pass's contract reads as "nothing to change" (each pass ignores the keys of the others).
NOTHING_TO_CHANGE = json.dumps(
    {
        "toSave": [],
        "toDelete": [],
        "findings": [],
        "failurePatterns": [],
        "promotionNotes": {},
        "skillAnnotations": [],
        "supersessions": [],
    }
)


def reply(content: str, **kw: Any) -> Reply:
    """A normal answer. ``usage=False`` omits the usage field; ``delay_s`` answers slowly."""
    delay = kw.pop("delay_s", 0.0)
    return _json(200, completion_body(content, **kw), delay_s=delay)


def server_error(status: int = 500, message: str = "internal error") -> Reply:
    return _json(status, {"error": {"message": message, "type": "server_error"}})


def rate_limited(retry_after: float | None = 0.2, *, header: str = "Retry-After") -> Reply:
    headers = {header: f"{retry_after:g}"} if retry_after is not None else {}
    return _json(429, {"error": {"message": "rate limited", "type": "rate_limit_error"}}, headers)


def client_error(status: int = 400, message: str = "bad request") -> Reply:
    return _json(status, {"error": {"message": message, "type": "invalid_request_error"}})


def slow(delay_s: float, content: str = "{}") -> Reply:
    return reply(content, delay_s=delay_s)


def truncated() -> Reply:
    """Headers promise more bytes than are sent before the connection closes."""
    body = json.dumps(completion_body('{"toSave": []}')).encode()
    return Reply(
        status=200,
        body=body[: len(body) // 3],
        headers={"Content-Type": "application/json"},
        declared_length=len(body),
    )


def cut_json() -> Reply:
    """A complete HTTP response whose JSON body is cut off."""
    body = json.dumps(completion_body('{"toSave": []}')).encode()
    return Reply(status=200, body=body[: len(body) // 2], headers={"Content-Type": "application/json"})


def non_json(text: str = "<html><body>Bad Gateway</body></html>", status: int = 200) -> Reply:
    return Reply(status=status, body=text.encode(), headers={"Content-Type": "text/html"})


def rejects_json_mode(status: int = 400) -> Reply:
    """``status`` when the request carries ``response_format``; otherwise the next scripted reply."""

    def decide(body: Any) -> Reply | None:
        if isinstance(body, dict) and "response_format" in body:
            return client_error(status, "response_format is not supported by this server")
        return None

    return Reply(decide=decide)


#: Tokens of chat framing a message costs on the test server with a ``bytes_per_token`` tokenizer (Qwen's template:
#: ``<|im_start|>role\n`` ... ``<|im_end|>\n``).
CHAT_FRAMING = 5

#: The "prompt too long" answers of real endpoints (status, body), by server kind.
CONTEXT_ERRORS: dict[str, Callable[[int, int], tuple[int, dict]]] = {
    "openai": lambda limit, n: (
        400,
        {
            "error": {
                "message": f"This model's maximum context length is {limit} tokens. However, your messages "
                f"resulted in {n} tokens. Please reduce the length of the messages.",
                "type": "invalid_request_error",
                "param": "messages",
                "code": "context_length_exceeded",
            }
        },
    ),
    "vllm": lambda limit, n: (
        400,
        {
            "object": "error",
            "message": f"This model's maximum context length is {limit} tokens. However, you requested {n} tokens "
            f"in the messages. Please reduce the length of the messages.",
            "type": "BadRequestError",
            "code": 400,
        },
    ),
    "llamacpp": lambda limit, n: (
        400,
        {
            "error": {
                "code": 400,
                "message": f"the request exceeds the available context size ({n} tokens > {limit}), try increasing it",
                "type": "exceed_context_size_error",
            }
        },
    ),
}


def prompt_tokens_of(body: Any) -> int:
    """The test server's token count of a request: four characters a token over the messages (what a real
    tokenizer gives English text, roughly), plus the answer reserve it asks for."""
    if not isinstance(body, dict):
        return 0
    chars = sum(len(str(m.get("content") or "")) for m in body.get("messages") or [] if isinstance(m, dict))
    reserve = body.get("max_tokens") or body.get("max_completion_tokens") or 0
    return math.ceil(chars / 4) + (reserve if isinstance(reserve, int) else 0)


def small_model(answer: Callable[[Any], str], corrupt_share: float, *, seed: int = 7) -> Reply:
    """A simulated small model: ``answer(body)`` is the right JSON text; a ``corrupt_share`` of free-form answers
    (no ``json_schema`` response_format) come back broken, schema-constrained ones never do."""
    import random

    rng = random.Random(seed)

    def decide(body: Any) -> Reply:
        text = answer(body)
        constrained = isinstance(body, dict) and (body.get("response_format") or {}).get("type") == "json_schema"
        if not constrained and rng.random() < corrupt_share:
            text = "Sure! Here is the result: " + text[: max(1, len(text) // 2)]  # prose and a cut-off object
        return reply(text)

    return Reply(decide=decide)


def hang(delay_s: float) -> Reply:
    """No answer for ``delay_s`` seconds (past the client's LlmTimeout: a hanging endpoint)."""
    return slow(delay_s)


#: Size of the test server's embedding vectors (a request's ``dimensions`` overrides it).
EMBEDDING_DIM = 256
_WORD = re.compile(r"[a-z0-9]+")
_EMBEDDING_STOPWORDS = frozenset(
    "a an and are as at be by did do for from had has have he her his i in is it its me my of on or our she so that "
    "the their them they this to was we were what when which who will with you your".split()
)


def _embedding_words(text: str) -> list[str]:
    words = [w for w in _WORD.findall(text.lower()) if w not in _EMBEDDING_STOPWORDS]
    # a crude stemmer, enough for "moved"/"moves"/"moving" to share a feature
    return [re.sub(r"(ing|ed|es|s)$", "", w) if len(w) > 4 else w for w in words]


def embedding_vector(text: str, dim: int = EMBEDDING_DIM) -> list[float]:
    """A deterministic unit vector for ``text``: each normalised word adds +-1 at two hashed positions."""
    vec = [0.0] * dim
    words = _embedding_words(text) or [text]
    for word in words:
        digest = hashlib.sha256(word.encode("utf-8")).digest()
        for k in range(2):
            position = int.from_bytes(digest[4 * k : 4 * k + 4], "big") % dim
            vec[position] += 1.0 if digest[16 + k] & 1 else -1.0
    norm = math.sqrt(sum(v * v for v in vec)) or 1.0
    return [v / norm for v in vec]


def embeddings_body(
    inputs: list[str],
    *,
    model: str = "test-embedding",
    dim: int = EMBEDDING_DIM,
    encoding_format: str = "float",
    usage: bool = True,
) -> dict:
    data = []
    for i, text in enumerate(inputs):
        vector = embedding_vector(text, dim)
        embedding: Any = vector
        if encoding_format == "base64":
            embedding = base64.b64encode(struct.pack(f"<{dim}f", *vector)).decode()
        data.append({"object": "embedding", "index": i, "embedding": embedding})
    body: dict[str, Any] = {"object": "list", "data": data, "model": model}
    if usage:
        tokens = sum(len(_WORD.findall(t.lower())) for t in inputs)
        body["usage"] = {"prompt_tokens": tokens, "total_tokens": tokens}
    return body


def _embeddings_reply(request: Any) -> Reply:
    if not isinstance(request, dict) or "input" not in request:
        return client_error(400, "embeddings request without input")
    raw = request["input"]
    inputs = [raw] if isinstance(raw, str) else raw
    if not isinstance(inputs, list) or not all(isinstance(t, str) and t for t in inputs):
        return client_error(400, "input must be a non-empty string or a list of non-empty strings")
    dim = request.get("dimensions") if isinstance(request.get("dimensions"), int) else EMBEDDING_DIM
    return _json(
        200,
        embeddings_body(
            inputs,
            model=str(request.get("model") or "test-embedding"),
            dim=dim,
            encoding_format=str(request.get("encoding_format") or "float"),
        ),
    )


def embeddings_ok() -> Reply:
    """A scripted success on ``/v1/embeddings`` (deterministic vectors), e.g. before a scripted failure."""
    return Reply(decide=_embeddings_reply)


#: Ways a broken embeddings endpoint answers (``hostile_embeddings``).
HOSTILE_EMBEDDINGS = ("identical", "zero", "wrong-dimension", "short", "non-finite")


def hostile_embeddings(kind: str) -> Reply:
    """A broken ``/v1/embeddings`` answer per request: ``identical`` (one vector for every text), ``zero``
    (all-zero vectors), ``wrong-dimension`` (vectors of another size than the server's usual ones), ``short`` (one
    vector fewer than texts) or ``non-finite`` (a NaN and an infinity in each vector)."""
    if kind not in HOSTILE_EMBEDDINGS:
        raise ValueError(f"hostile embeddings {kind!r}: use one of {', '.join(HOSTILE_EMBEDDINGS)}")

    def decide(request: Any) -> Reply:
        raw = request.get("input") if isinstance(request, dict) else None
        inputs = [raw] if isinstance(raw, str) else list(raw or [])
        body = embeddings_body(inputs or [" "])
        for item in body["data"]:
            if kind == "identical":
                item["embedding"] = embedding_vector("the same vector for every text")
            elif kind == "zero":
                item["embedding"] = [0.0] * EMBEDDING_DIM
            elif kind == "wrong-dimension":
                item["embedding"] = item["embedding"][: EMBEDDING_DIM // 4]
            elif kind == "non-finite":
                item["embedding"] = [float("nan"), float("inf"), *item["embedding"][2:]]
        if kind == "short":
            body["data"] = body["data"][:-1]
        return _json(200, body)

    return Reply(decide=decide)


@contextmanager
def refusing_base_url() -> Iterator[str]:
    """A base URL on 127.0.0.1 whose port refuses connections: bound (so nothing else takes it) but not listening."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    try:
        sock.bind(("127.0.0.1", 0))
        yield f"http://127.0.0.1:{sock.getsockname()[1]}/v1"
    finally:
        sock.close()


class OpenAITestServer:
    """``default``: the reply when nothing scripted is left (e.g. ``hang(5)`` for an endpoint that always hangs,
    or a ``Reply(decide=...)`` answering from the request); without it, 418."""

    def __init__(
        self,
        default: Reply | None = None,
        *,
        embeddings: Reply | None = None,
        context_limit: int | None = None,
        context_error: str = "openai",
        response_formats: tuple[str, ...] = ("json_object", "json_schema"),
        bytes_per_token: float | None = None,
        tokenize: bool | Callable[[str], Any] = False,
        speed: tuple[float, float] | None = None,
    ) -> None:
        """``context_limit``: a chat request whose tokens (``prompt_tokens_of``) exceed it gets the ``context_error``
        shape of a real endpoint ("openai", "vllm", "llamacpp"), as a real one does, before any script.
        ``response_formats``: the ``response_format`` types this endpoint accepts; another one gets a 400.
        ``bytes_per_token``: the server's tokenizer packs this many UTF-8 bytes into a token (a real one: Qwen on
        text full of ids, about 2.1); its window check and the ``usage`` of its answers count that way (each message
        adds ``CHAT_FRAMING`` tokens) instead of four characters a token. ``tokenize``: it serves llama.cpp's
        ``POST /tokenize`` at its root with that count (else that path answers 404, as OpenAI's and Ollama's do),
        and ``GET /props`` with ``context_limit`` as its ``n_ctx``; a callable instead answers
        ``{"tokens": f(text)}``. ``speed``: (prompt, answer) tokens a second: each answer takes the time a model of
        that speed would (prompt tokens / prompt speed + answer tokens / answer speed) and reports it as llama.cpp's
        ``timings``."""
        self.bytes_per_token = bytes_per_token
        self.tokenize = tokenize
        self.speed = speed
        self.tokenize_requests = 0
        self.context_limit = context_limit
        self.context_error = context_error
        self.response_formats = response_formats
        self.largest_prompt_tokens = 0
        self.context_refusals = 0
        self.requests: list[RecordedRequest] = []
        self.model_list_requests = 0
        self._queue: deque[Reply] = deque()
        self._lock = threading.Lock()
        self.default = default
        #: The ``/v1/embeddings`` reply when nothing scripted is left (None: the deterministic vectors), e.g.
        #: ``hostile_embeddings("identical")``; assignable while the server runs (an endpoint fixed later).
        self.embeddings = embeddings
        server = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"
            # headers and body go out as two writes: with Nagle's algorithm each answer waits for a delayed ACK
            disable_nagle_algorithm = True

            def log_message(self, *args: Any) -> None:  # keep test output quiet
                pass

            def do_GET(self) -> None:  # noqa: N802 — http.server naming
                """``/v1/models``: the model list (what ``dream run`` probes before a cycle); counted apart from the
                scripted POSTs so the chat-completion counts stay what they were."""
                if self.path.rstrip("/").endswith("/models"):
                    with server._lock:
                        server.model_list_requests += 1
                if self.path.rstrip("/") == "/props" and server.tokenize:  # llama.cpp's, at the server root
                    self._send(_json(200, {"default_generation_settings": {"n_ctx": server.context_limit or 4096}}))
                elif self.path.rstrip("/").endswith("/models"):
                    self._send(_json(200, {"object": "list", "data": [{"id": "test-model", "object": "model"}]}))
                else:
                    self._send(client_error(404, f"no route {self.path}"))

            def do_POST(self) -> None:  # noqa: N802 — http.server naming
                length = int(self.headers.get("Content-Length") or 0)
                raw = self.rfile.read(length) if length else b""
                try:
                    body: Any = json.loads(raw) if raw else None
                except json.JSONDecodeError:
                    body = raw.decode(errors="replace")
                if self.path.rstrip("/") == "/tokenize":  # llama.cpp's, at the server root; kept out of the script
                    with server._lock:
                        server.tokenize_requests += 1
                    self._send(server._tokenize(body))
                    return
                embeddings = self.path.rstrip("/").endswith("/embeddings")
                with server._lock:
                    server.requests.append(
                        RecordedRequest(
                            self.path, {k.lower(): v for k, v in self.headers.items()}, body, time.monotonic()
                        )
                    )
                    refused = None if embeddings else server._refusal(body)
                    if refused is not None:
                        self._send(refused)
                        return
                    fallback = server.embeddings if embeddings else server.default
                    scripted = server._queue.popleft() if server._queue else fallback
                    if scripted is not None and scripted.decide is not None:
                        scripted = scripted.decide(body) or (server._queue.popleft() if server._queue else None)
                if embeddings:
                    scripted = scripted or _embeddings_reply(body)
                elif not self.path.rstrip("/").endswith("/chat/completions"):
                    scripted = client_error(404, f"no route {self.path}")
                if scripted is None:
                    scripted = client_error(418, "test server: no scripted reply left")
                if not embeddings and (server.bytes_per_token is not None or server.speed is not None):
                    scripted = server._with_usage(scripted, body)
                self._send(scripted)

            def _send(self, r: Reply) -> None:
                if r.delay_s:
                    time.sleep(r.delay_s)
                try:
                    self.send_response(r.status)
                    for k, v in r.headers.items():
                        self.send_header(k, v)
                    self.send_header("Content-Length", str(r.declared_length or len(r.body)))
                    if r.declared_length:
                        self.send_header("Connection", "close")
                    self.end_headers()
                    self.wfile.write(r.body)
                    self.wfile.flush()
                    if r.declared_length:
                        self.close_connection = True
                except (BrokenPipeError, ConnectionResetError):
                    self.close_connection = True  # the client gave up (timeout): nothing to do

        self._httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._httpd.daemon_threads = True
        self._httpd.block_on_close = False
        self._thread = threading.Thread(
            target=self._httpd.serve_forever,
            kwargs={"poll_interval": 0.05},
            name="openai-test-server",
            daemon=True,
        )

    def count_tokens(self, text: str) -> int:
        """The server tokenizer's count of ``text`` (``bytes_per_token``; four characters a token without it)."""
        if self.bytes_per_token is None:
            return math.ceil(len(text) / 4)
        return math.ceil(len(text.encode("utf-8")) / self.bytes_per_token)

    def message_tokens(self, body: Any) -> int:
        """The prompt tokens of a chat request as this server's tokenizer counts them, chat framing included."""
        messages = [m for m in (body.get("messages") or []) if isinstance(m, dict)] if isinstance(body, dict) else []
        return sum(self.count_tokens(str(m.get("content") or "")) + CHAT_FRAMING for m in messages)

    def _with_usage(self, r: Reply, body: Any) -> Reply:
        """An answer whose ``usage.prompt_tokens`` is this server's count of the request (as a real server reports)."""
        try:
            payload = json.loads(r.body)
        except ValueError:
            return r
        if r.status != 200 or not isinstance(payload, dict) or not isinstance(payload.get("usage"), dict):
            return r
        usage = payload["usage"]
        usage["prompt_tokens"] = self.message_tokens(body)
        usage["total_tokens"] = usage["prompt_tokens"] + int(usage.get("completion_tokens") or 0)
        delay = r.delay_s
        if self.speed is not None:
            prompt_tps, gen_tps = self.speed
            answered = int(usage.get("completion_tokens") or 0)
            payload["timings"] = {
                "prompt_n": usage["prompt_tokens"],
                "prompt_ms": 1000 * usage["prompt_tokens"] / prompt_tps,
                "prompt_per_second": prompt_tps,
                "predicted_n": answered,
                "predicted_ms": 1000 * answered / gen_tps,
                "predicted_per_second": gen_tps,
            }
            delay = max(delay, usage["prompt_tokens"] / prompt_tps + answered / gen_tps)
        return Reply(r.status, json.dumps(payload).encode(), r.headers, delay, r.declared_length)

    def _tokenize(self, body: Any) -> Reply:
        if not self.tokenize:
            return client_error(404, "File Not Found")
        content = body.get("content") if isinstance(body, dict) else None
        if not isinstance(content, str):
            return client_error(400, '"content" must be provided')
        if callable(self.tokenize):  # a broken tokenizer: its answer for the text
            return _json(200, {"tokens": self.tokenize(content)})
        return _json(200, {"tokens": list(range(self.count_tokens(content)))})

    def _refusal(self, body: Any) -> Reply | None:
        """What a real endpoint refuses before answering: a prompt over its window, a response_format it lacks."""
        if self.bytes_per_token is None:
            tokens = prompt_tokens_of(body)
        else:
            reserve = body.get("max_tokens") or body.get("max_completion_tokens") or 0 if isinstance(body, dict) else 0
            tokens = self.message_tokens(body) + (reserve if isinstance(reserve, int) else 0)
        self.largest_prompt_tokens = max(self.largest_prompt_tokens, tokens)
        if self.context_limit is not None and tokens > self.context_limit:
            self.context_refusals += 1
            status, payload = CONTEXT_ERRORS[self.context_error](self.context_limit, tokens)
            return _json(status, payload)
        kind = (body.get("response_format") or {}).get("type") if isinstance(body, dict) else None
        if kind and kind not in self.response_formats:
            return client_error(400, f"response_format type {kind!r} is not supported by this server")
        return None

    @property
    def base_url(self) -> str:
        host, port = self._httpd.server_address[:2]
        return f"http://{host}:{port}/v1"

    @property
    def embedding_requests(self) -> list[RecordedRequest]:
        with self._lock:
            return [r for r in self.requests if r.path.rstrip("/").endswith("/embeddings")]

    def script(self, *replies: Reply) -> OpenAITestServer:
        with self._lock:
            self._queue.extend(replies)
        return self

    @property
    def pending(self) -> int:
        with self._lock:
            return len(self._queue)

    def start(self) -> OpenAITestServer:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._httpd.shutdown()
        self._httpd.server_close()

    def __enter__(self) -> OpenAITestServer:
        return self.start()

    def __exit__(self, *exc: Any) -> None:
        self.stop()
