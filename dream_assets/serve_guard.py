"""Connection limits of ``dream serve --http``: header and body timeouts, connections per client and in all.

Without them a client that opens connections and sends its request slowly (or never finishes it) holds a socket and
a descriptor each for ever: with 1,100 such connections under the common 1,024-descriptor limit every authorised call
failed. The guard sits at two levels, each where it can see what it needs:

- the connection (an ``asyncio.Protocol`` wrapped around uvicorn's own HTTP protocol): each connection is counted
  for its client address and in all; a connection whose request headers are not complete ``header_timeout_s`` after
  it opened (or after its previous response) is closed, and so is one whose body is not complete ``body_timeout_s``
  after its headers; one whose request line and headers pass ``MAX_HEADER_BYTES`` is answered 431 and closed. When
  a client has ``max_per_client`` connections, or the server ``max_total`` (never more than half the process's
  descriptor limit, so files and the store always have descriptors left), a new connection takes the place of the
  one that has waited longest for its headers, else of the one that has waited longest for its body: a flood of
  half-sent requests closes its own connections, never a request being answered. Only when every connection is
  being answered is a new one refused (503, Retry-After).
- the application (an ASGI wrapper): it is called when a request's headers are complete, its ``receive`` returns the
  last piece of the body, and it returns when the response is done; each of these moves the connection on.

A connection is found from the application by its client address and port (``scope["client"]``), which uvicorn takes
from the same socket.
"""

from __future__ import annotations

import asyncio
import json
import resource
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

#: Largest request head (request line and headers) accepted: uvicorn's httptools parser keeps any amount, so within
#: the header timeout one connection could fill a gigabyte of memory. The tools need a few hundred bytes.
MAX_HEADER_BYTES = 64 * 1024

#: What a connection is doing: waiting for the headers of a request (also between requests), for the rest of its
#: body, or being answered (the body is read; the application works or sends the response).
HEADERS, BODY, ANSWERING = "headers", "body", "answering"


@dataclass(frozen=True)
class ConnectionLimits:
    header_timeout_s: float = 10.0
    body_timeout_s: float = 30.0
    max_per_client: int = 64
    max_total: int = 512

    def __post_init__(self) -> None:
        for name in ("header_timeout_s", "body_timeout_s"):
            if not getattr(self, name) > 0:
                raise ValueError(f"{name} must be more than zero, not {getattr(self, name)!r}")
        for name in ("max_per_client", "max_total"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be at least 1, not {getattr(self, name)!r}")

    def total_cap(self, descriptor_limit: int | None = None) -> int:
        """``max_total``, but never more than half the descriptor limit (the rest is for the store, logs, imports)."""
        if descriptor_limit is None:
            descriptor_limit = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
        if descriptor_limit == resource.RLIM_INFINITY or descriptor_limit <= 0:
            return self.max_total
        return max(1, min(self.max_total, descriptor_limit // 2))


class _Connection:
    __slots__ = ("client", "head_bytes", "head_done", "head_tail", "host", "phase", "since", "timer", "transport")

    def __init__(self, client: tuple[str, int], transport: asyncio.BaseTransport, now: float) -> None:
        self.client = client
        self.host = client[0]
        self.transport = transport
        self.phase = HEADERS
        self.since = now
        self.timer: asyncio.TimerHandle | None = None
        self.head_bytes = 0  # of the request head being received
        self.head_done = False  # its blank line was seen: what follows is its body
        self.head_tail = b""

    def head_over(self, data: bytes) -> bool:
        """Count ``data`` into the request head being received; True when the head is over ``MAX_HEADER_BYTES``."""
        if self.head_done or self.phase != HEADERS:
            return False
        seen = self.head_tail + data
        end = min((i for i in (seen.find(b"\r\n\r\n"), seen.find(b"\n\n")) if i >= 0), default=-1)
        if end >= 0:
            self.head_done = True
            return self.head_bytes + end - len(self.head_tail) > MAX_HEADER_BYTES
        self.head_bytes += len(data)
        self.head_tail = seen[-3:]
        return self.head_bytes > MAX_HEADER_BYTES


class ConnectionGuard:
    """The connections of one server, by client address: who waits for what since when. Every method runs on the
    server's event loop."""

    def __init__(self, limits: ConnectionLimits, descriptor_limit: int | None = None) -> None:
        self.limits = limits
        self.max_total = limits.total_cap(descriptor_limit)
        self.connections: dict[tuple[str, int], _Connection] = {}
        self.by_host: dict[str, dict[tuple[str, int], _Connection]] = {}
        self.closed_by_timeout = 0
        self.closed_to_make_room = 0
        self.refused = 0

    # --- the connection level ------------------------------------------------------------------------------------
    def admit(self, client: tuple[str, int], transport: asyncio.BaseTransport) -> _Connection | None:
        """Count a new connection in, making room where needed; None when it must be refused."""
        loop = asyncio.get_running_loop()
        mine = self.by_host.get(client[0], {})
        if len(mine) >= self.limits.max_per_client and not self._make_room(mine.values()):
            self.refused += 1
            return None
        if len(self.connections) >= self.max_total and not self._make_room(self.connections.values()):
            self.refused += 1
            return None
        conn = _Connection(client, transport, loop.time())
        self.connections[client] = conn
        self.by_host.setdefault(client[0], {})[client] = conn
        self._arm(conn, self.limits.header_timeout_s)
        return conn

    def forget(self, client: tuple[str, int], transport: asyncio.BaseTransport) -> None:
        """The connection is closed (a later connection from the same address and port is another one)."""
        conn = self.connections.get(client)
        if conn is None or conn.transport is not transport:
            return
        del self.connections[client]
        self._disarm(conn)
        mine = self.by_host.get(conn.host)
        if mine is not None:
            mine.pop(conn.client, None)
            if not mine:
                del self.by_host[conn.host]

    def _make_room(self, candidates: Any) -> bool:
        """Close the connection that has waited longest for its headers, else for its body; False when every one is
        being answered."""
        waiting = [c for c in candidates if c.phase != ANSWERING]
        if not waiting:
            return False
        victim = min(waiting, key=lambda c: (c.phase != HEADERS, c.since))
        self.closed_to_make_room += 1
        self._close(victim)
        return True

    def _close(self, conn: _Connection) -> None:
        self.forget(conn.client, conn.transport)
        conn.transport.abort()  # nothing of ours is waiting to be sent: a slow reader must not hold it either

    def _arm(self, conn: _Connection, delay: float) -> None:
        self._disarm(conn)
        phase = conn.phase
        conn.timer = asyncio.get_running_loop().call_later(delay, self._expire, conn, phase)

    @staticmethod
    def _disarm(conn: _Connection) -> None:
        if conn.timer is not None:
            conn.timer.cancel()
            conn.timer = None

    def _expire(self, conn: _Connection, phase: str) -> None:
        conn.timer = None
        if self.connections.get(conn.client) is conn and conn.phase == phase:
            self.closed_by_timeout += 1
            self._close(conn)

    def _move(self, client: Any, phase: str) -> None:
        conn = self.connections.get(tuple(client)) if client else None
        if conn is None or conn.phase == phase:
            return
        conn.phase = phase
        conn.since = asyncio.get_running_loop().time()
        if phase == HEADERS:
            conn.head_bytes, conn.head_done, conn.head_tail = 0, False, b""
            self._arm(conn, self.limits.header_timeout_s)
        elif phase == BODY:
            self._arm(conn, self.limits.body_timeout_s)
        else:
            self._disarm(conn)

    # --- the application level -----------------------------------------------------------------------------------
    def asgi(self, app: Callable) -> Callable:
        """``app`` with each request moving its connection on: headers complete, body complete, response done."""

        async def guarded(scope: dict, receive: Callable, send: Callable) -> None:
            if scope["type"] != "http":
                await app(scope, receive, send)
                return
            client = scope.get("client")
            self._move(client, BODY)

            async def receive_() -> dict:
                message = await receive()
                if message["type"] == "http.request" and not message.get("more_body", False):
                    self._move(client, ANSWERING)
                return message

            try:
                await app(scope, receive_, send)
            finally:
                self._move(client, HEADERS)  # the next request on this connection, if any, has its own time

        return guarded

    def protocol(self, inner: type[asyncio.Protocol]) -> type[asyncio.Protocol]:
        """A uvicorn HTTP protocol class (``Config(http=...)``) that counts each connection in before ``inner``
        (uvicorn's own protocol) sees it."""
        return type("GuardedHTTPProtocol", (_GuardedProtocol,), {"guard": self, "inner_class": inner})


def _response(status: bytes, message: str, extra: bytes = b"") -> bytes:
    body = json.dumps({"jsonrpc": "2.0", "id": None, "error": {"code": -32000, "message": message}}).encode()
    head = b"HTTP/1.1 " + status + b"\r\nContent-Type: application/json\r\nConnection: close\r\n" + extra
    return head + f"Content-Length: {len(body)}\r\n\r\n".encode() + body


_BUSY_RESPONSE = _response(b"503 Service Unavailable", "the server is at its connection limit", b"Retry-After: 1\r\n")
_HEAD_TOO_LARGE = _response(
    b"431 Request Header Fields Too Large", f"the request line and headers are over {MAX_HEADER_BYTES} bytes"
)


class _GuardedProtocol(asyncio.Protocol):
    guard: ConnectionGuard
    inner_class: type[asyncio.Protocol]

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        self.inner = self.inner_class(*args, **kwargs)
        self.client: tuple[str, int] = ("", 0)
        self.transport: asyncio.BaseTransport | None = None
        self.conn: _Connection | None = None
        self.admitted = False
        self.closing = False

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        from uvicorn.protocols.utils import get_remote_addr

        # Not a TCP peer (never so for a TCP bind): a bucket of its own.
        self.client = get_remote_addr(transport) or ("", id(transport))  # type: ignore[arg-type]
        self.transport = transport
        self.conn = self.guard.admit(self.client, transport)
        if self.conn is None:
            transport.write(_BUSY_RESPONSE)  # type: ignore[attr-defined]
            transport.close()
            return
        self.admitted = True
        self.inner.connection_made(transport)

    def data_received(self, data: bytes) -> None:
        if not self.admitted:
            return
        if self.closing:
            return
        if self.conn is not None and self.conn.head_over(data):
            self.closing = True  # nothing more reaches the parser; uvicorn's protocol sees the connection end as usual
            self.guard.forget(self.client, self.transport)  # type: ignore[arg-type]
            self.transport.write(_HEAD_TOO_LARGE)  # type: ignore[union-attr]
            self.transport.close()  # type: ignore[union-attr]
            return
        self.inner.data_received(data)

    def eof_received(self) -> bool | None:
        return self.inner.eof_received() if self.admitted else None

    def connection_lost(self, exc: Exception | None) -> None:
        if self.admitted:
            self.guard.forget(self.client, self.transport)
            self.inner.connection_lost(exc)

    def pause_writing(self) -> None:
        if self.admitted:
            self.inner.pause_writing()

    def resume_writing(self) -> None:
        if self.admitted:
            self.inner.resume_writing()
