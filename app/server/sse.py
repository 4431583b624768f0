"""Server-sent events: the frames of a stream, a deadline on every write, and the one way a stream ends."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import aclosing

from aiohttp import web

from .shaping import dumps

# a streamed reply whose client reads nothing while this long (the socket's buffers full) is cut,
# so a stalled reader cannot hold its sequence and the events queued for it
SEND_DEADLINE_S = 30.0
DONE = b"data: [DONE]\n\n"  # the chat and completions APIs' last frame, after a reply that ended well


def data(obj: dict) -> bytes:
    """A chunk of the chat and completions APIs: one `data:` line."""
    return b"data: " + dumps(obj).encode() + b"\n\n"


def event(obj: dict) -> bytes:
    """An event of the Responses API: named by its type."""
    return f"event: {obj['type']}\ndata: {dumps(obj)}\n\n".encode()


async def stream(request: web.Request, frames: AsyncIterator[bytes]) -> web.StreamResponse:
    """`frames` sent as they come, then the stream ended. A client that leaves or stalls past the
    deadline ends it too: `frames` is closed either way, which closes the replies it reads, and
    the caller closing their streams cancels the requests."""
    response = web.StreamResponse(headers={"Content-Type": "text/event-stream", "Cache-Control": "no-cache"})
    await response.prepare(request)
    try:
        async with aclosing(frames):
            async for frame in frames:
                await asyncio.wait_for(response.write(frame), SEND_DEADLINE_S)
        await response.write_eof()
    except ConnectionResetError:
        pass  # the client left
    except TimeoutError:  # a reader stalled past the deadline: drop the connection, as if it had left
        if request.transport is not None:
            request.transport.abort()
    return response
