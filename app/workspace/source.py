"""Where a pane's replies come from: one protocol for the local engine and a remote endpoint.

Both take one `Request` and stream `TokenEvent`s, then exactly one `FinishEvent`. What a source
cannot honour (a remote endpoint and completion mode, priorities or a branch's tokens) ends the
reply at once with an ERROR that says so; nothing is dropped quietly.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from typing import Protocol

from app.engine.events import Event
from app.engine.sequence import Request
from app.remote import Endpoint, RemoteClient

Listener = Callable[[list[Event]], None]


class ReplySource(Protocol):
    def reply(self, request: Request) -> AsyncIterator[Event]:
        """Stream the request's reply; leaving the loop early cancels it."""
        ...

    def cancel(self, request_id: str) -> None: ...

    def model_label(self, model: str | None) -> str:
        """What a chat saved from this source names as its model."""
        ...

    def add_listener(self, listener: Listener) -> None:
        """`listener(events)` gets every event this source streams (the metrics store listens)."""
        ...

    def remove_listener(self, listener: Listener) -> None: ...


class Sources:
    """The local source, and a client per remote endpoint that a pane names (shared by its panes);
    `listener` hears them all."""

    def __init__(self, local: ReplySource, listener: Listener, remote: Callable[[Endpoint], RemoteClient] = RemoteClient):
        self.local = local
        self._listener = listener
        self._make_remote = remote
        self._remotes: dict[Endpoint, RemoteClient] = {}
        local.add_listener(listener)

    def for_endpoint(self, endpoint: Endpoint | None) -> ReplySource:
        if endpoint is None:
            return self.local
        if endpoint not in self._remotes:
            remote = self._remotes[endpoint] = self._make_remote(endpoint)
            remote.add_listener(self._listener)
        return self._remotes[endpoint]

    async def close(self) -> None:
        """Stop listening, and close the remote clients' connections (the local source's owner closes it)."""
        self.local.remove_listener(self._listener)
        remotes, self._remotes = list(self._remotes.values()), {}
        for remote in remotes:
            await remote.close()
