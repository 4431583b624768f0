"""The server's open connections: how many at once, and which one makes room for a new one.

`Connections` is the protocol factory given to `loop.create_server`: each accepted socket gets
aiohttp's request handler behind a thin `Connection`, which the factory can close to make room.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable
from contextlib import contextmanager

from .shaping import error_body

# open connections at once: below the 1,024 open files a process gets by default (ulimit -n), so
# accept() never fails for want of one. At the cap the connection idle longest is closed to make
# room; when every one is serving a request, a new one is answered 503 and closed.
MAX_CONNECTIONS = 512
# connections the kernel queues until they are accepted: a burst of clients (hundreds of idle
# sockets, say) waits there instead of having its SYN dropped and retried a second later
BACKLOG = 1024
# aiohttp closes a connection serving no request after this (a new one that has not sent a whole
# request head, or one kept alive between requests); longer than clients keep an idle connection
# in their pools (httpx 5 s, aiohttp 15 s), so that the client, not the server, closes it first
KEEPALIVE_S = 30.0
REFUSAL_LINGER_S = 1.0  # a refused client has this long to read its 503 before the socket closes


class Connection(asyncio.Protocol):
    """One client's connection: aiohttp's request handler behind it, closed by the registry to make room."""

    def __init__(self, handler: asyncio.Protocol, registry: Connections):
        self.handler = handler
        self._registry = registry
        self.transport: asyncio.Transport | None = None
        self.requests = 0  # being served (aiohttp serves a connection's requests one at a time)
        self._closed = False

    def close(self) -> None:
        self._closed = True
        self._registry.forget(self)
        if self.transport is not None:
            self.transport.close()

    # asyncio's protocol calls, passed on to aiohttp
    def connection_made(self, transport) -> None:
        self.transport = transport
        self.handler.connection_made(transport)
        if self._closed:  # made room for another between its accept and now
            transport.close()

    def data_received(self, data: bytes) -> None:
        self.handler.data_received(data)

    def eof_received(self):
        return self.handler.eof_received()

    def pause_writing(self) -> None:
        self.handler.pause_writing()

    def resume_writing(self) -> None:
        self.handler.resume_writing()

    def connection_lost(self, exc) -> None:
        self._registry.forget(self)
        self.transport = None
        self.handler.connection_lost(exc)


class Connections:
    """The protocol factory: a connection for each accepted socket, at most `cap` open."""

    def __init__(self, handlers: Callable[[], asyncio.Protocol], cap: int = MAX_CONNECTIONS):
        self._make_handler = handlers  # aiohttp's web.Server: one request handler per connection
        self.cap = cap
        self._open: dict[asyncio.Protocol, Connection] = {}  # by request handler: what a request knows as `protocol`
        self._idle: dict[Connection, None] = {}  # those serving no request, the idle longest first
        self.evicted = 0  # idle connections closed to make room for a new one
        self.refused = 0  # new connections answered 503: every open one was serving a request

    def __len__(self) -> int:
        return len(self._open)

    def __call__(self) -> asyncio.Protocol:
        if len(self._open) >= self.cap:
            if not self._idle:
                self.refused += 1
                return _Refusal(self.cap)
            next(iter(self._idle)).close()
            self.evicted += 1
        connection = Connection(self._make_handler(), self)
        self._open[connection.handler] = connection
        self._idle[connection] = None
        return connection

    @contextmanager
    def serving(self, handler):
        """Around a request on the connection of `handler` (`request.protocol`): not idle meanwhile."""
        connection = self._open.get(handler)
        if connection is None:  # closed already
            yield
            return
        self._idle.pop(connection, None)
        connection.requests += 1
        try:
            yield
        finally:
            connection.requests -= 1
            if connection.requests == 0 and handler in self._open:
                self._idle[connection] = None  # now the idle shortest

    def forget(self, connection: Connection) -> None:
        self._open.pop(connection.handler, None)
        self._idle.pop(connection, None)


class _Refusal(asyncio.Protocol):
    """A connection beyond the cap: a 503 written at once, then closed (at EOF, or after REFUSAL_LINGER_S)."""

    def __init__(self, cap: int):
        self._cap = cap

    def connection_made(self, transport) -> None:
        message = f"the server has {self._cap} connections open, each serving a request; try again shortly"
        body = json.dumps(error_body(message, "unavailable_error")).encode()
        head = (
            "HTTP/1.1 503 Service Unavailable\r\nContent-Type: application/json; charset=utf-8\r\n"
            f"Content-Length: {len(body)}\r\nRetry-After: 1\r\nConnection: close\r\n\r\n"
        )
        transport.write(head.encode() + body)
        # closing while the request still comes in would reset the connection before the 503 is read
        self._closer = asyncio.get_running_loop().call_later(REFUSAL_LINGER_S, transport.close)

    def data_received(self, data: bytes) -> None:
        pass  # the request is not read

    def eof_received(self):
        return False  # close now: the client has sent all it will

    def connection_lost(self, exc) -> None:
        self._closer.cancel()
