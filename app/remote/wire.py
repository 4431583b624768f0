"""What one reply may take (time, bytes, pieces) and how it is read off the wire: lines, bodies, checked JSON."""

from __future__ import annotations

import asyncio
import json
import re
import reprlib
import time
from collections.abc import Awaitable
from dataclasses import dataclass, field
from typing import TypeVar

import aiohttp
from aiohttp.http_exceptions import LineTooLong

from app.engine.events import FinishReason
from app.engine.stats import RequestStats

from .endpoint import Endpoint, RemoteError
from .output_format import OutputFormat

PIECES_PER_TOKEN = 4  # a server streams about one piece a token; four times max_tokens is runaway
ERROR_BODY_BYTES = 64 * 1024  # of an HTTP error's body, enough for its message

T = TypeVar("T")


@dataclass
class _Reply:
    """What one streamed reply has said so far, and how to stop it."""

    stats: RequestStats
    pieces: list[str] = field(default_factory=list)
    thoughts: list[str] = field(default_factory=list)  # a thinking model's, where the server sends them apart
    reason: FinishReason | None = None
    usage: dict | None = None
    timings: dict | None = None
    response_id: str | None = None  # the Responses API's id of this reply, to continue from
    over: bool = False  # the final event came: nothing after it is read
    response: aiohttp.ClientResponse | None = None
    cancelled: bool = False
    stopped: asyncio.Event = field(default_factory=asyncio.Event)  # set by cancel(): ends any wait at once


class _Budget:
    """What one reply may still take: time to its deadline, time without progress, bytes and pieces."""

    def __init__(self, endpoint: Endpoint, max_tokens: int, stopped: asyncio.Event):
        self.endpoint = endpoint
        self.stopped = stopped
        self.ends_at = time.monotonic() + endpoint.deadline_s
        self.bytes_left = endpoint.max_bytes
        self.max_tokens = max_tokens
        self.max_pieces = PIECES_PER_TOKEN * max_tokens + 16  # the 16: room for a very short reply
        self.pieces = 0

    async def wait(self, awaitable: Awaitable[T], stalled: str) -> T:
        """`awaitable`'s result; a RemoteError when the deadline passes, `stalled` after timeout_s, or Stop."""
        left = self.ends_at - time.monotonic()
        work = asyncio.ensure_future(awaitable)
        stop = asyncio.ensure_future(self.stopped.wait())
        try:
            done, _ = await asyncio.wait(
                (work, stop), timeout=min(left, self.endpoint.timeout_s), return_when=asyncio.FIRST_COMPLETED
            )
        finally:
            stop.cancel()
            if not work.done():
                work.cancel()  # also when this task itself is cancelled: nothing is left behind
        if work in done:
            return work.result()
        if self.stopped.is_set():
            raise RemoteError("stopped")  # the reply ends as cancelled
        if left <= self.endpoint.timeout_s:
            raise RemoteError(f"{self.endpoint.api_url} took longer than the reply deadline of {self.endpoint.deadline_s:g} s")
        raise RemoteError(f"{stalled} within {self.endpoint.timeout_s:g} s")

    def spend_bytes(self, n: int) -> None:
        self.bytes_left -= n
        if self.bytes_left < 0:
            raise RemoteError(f"the reply passed its cap of {_size(self.endpoint.max_bytes)}")

    def spend_piece(self) -> None:
        self.pieces += 1
        if self.pieces > self.max_pieces:
            raise RemoteError(
                f"the endpoint sent more than {self.max_pieces} pieces of text for a reply of at most {self.max_tokens} tokens"
            )


async def _next_line(response: aiohttp.ClientResponse, budget: _Budget) -> bytes:
    """The next line of the stream (b"" at its end), within the reply's budget."""
    limit = budget.endpoint.max_line_bytes
    where = budget.endpoint.api_url
    try:
        raw = await budget.wait(response.content.readline(max_line_length=limit), f"no complete line from {where}")
    except LineTooLong:
        raise RemoteError(f"the endpoint sent a line longer than {_size(limit)}") from None
    budget.spend_bytes(len(raw))
    return raw


async def _read_body(response: aiohttp.ClientResponse, budget: _Budget, limit: int) -> bytes:
    """The body, or its start (a little over `limit` bytes) when it is longer."""
    body = bytearray()
    while len(body) <= limit:
        data = await budget.wait(response.content.read(2**16), f"no data from {budget.endpoint.api_url}")
        if not data:
            break
        budget.spend_bytes(len(data))
        body += data
    return bytes(body)


async def _check_status(response: aiohttp.ClientResponse, budget: _Budget, output: OutputFormat | None = None) -> None:
    """A RemoteError with the server's message for an HTTP error; a 400 to a request that asked for
    an output format names it, as it is often what the endpoint refuses."""
    if response.status < 400:
        return
    text = (await _read_body(response, budget, ERROR_BODY_BYTES)).decode("utf-8", "replace")
    try:
        message = str(json.loads(text)["error"]["message"])[:200]
    except (ValueError, KeyError, TypeError, RecursionError):
        message = text.strip()[:200] or response.reason
    asked = f" (asked for {output.label} in ⚙ Output)" if output is not None and response.status == 400 else ""
    raise RemoteError(f"{response.url} answered {response.status}{asked}: {message}")


def sse_data(line: str, what: str, bad_json: str):
    """The JSON of one server-sent-events `data:` line, or None for a line that carries none (a
    comment, an event name, an id); a RemoteError names the stream (`what`) or the bad data (`bad_json`)."""
    if not line or line.startswith(":") or line.split(":", 1)[0] in ("event", "id", "retry"):
        return None
    if not line.startswith("data:"):
        raise RemoteError(f"the endpoint sent something that is not {what}: {line[:80]!r}")
    data = line[5:].strip()
    try:
        return json.loads(data)
    except (ValueError, RecursionError):
        raise RemoteError(f"the endpoint sent {bad_json}: {data[:80]!r}") from None


def _parse_json(body: bytes):
    try:
        return json.loads(body)
    except (ValueError, RecursionError) as e:
        raise RemoteError(f"the endpoint sent broken JSON: {e}") from None


def _count_tokens(reply: _Reply) -> None:
    """Exact counts from `usage`/`timings` when the server sent them (a chunk may hold several tokens),
    and the drafted tokens where it speculates."""
    st, usage, timings = reply.stats, reply.usage or {}, reply.timings or {}
    st.prompt_tokens = _count(usage, "prompt_tokens") or 0
    st.gen_tokens = _count(usage, "completion_tokens") or st.gen_tokens
    thought = usage.get("completion_tokens_details")
    st.reasoning_tokens = (_count(thought, "reasoning_tokens") if isinstance(thought, dict) else None) or 0
    drafted, accepted = _count(timings, "draft_n"), _count(timings, "draft_n_accepted")
    if drafted and accepted is not None and accepted <= drafted:  # a server that drafts ahead (llama-server's figures)
        st.drafted_tokens, st.accepted_tokens = drafted, accepted
    details = usage.get("prompt_tokens_details")
    cached = _count(details, "cached_tokens") if isinstance(details, dict) else None
    if cached is None:
        cached = _count(timings, "cache_n")
    if cached is None:
        return  # not reported: the hit rate stays unknown
    st.cached_tokens = cached
    evaluated = _count(timings, "prompt_n")
    st.evaluated_tokens = max(st.prompt_tokens - cached, 0) if evaluated is None else evaluated


def _count(obj: dict, key: str) -> int | None:
    """A token count the server reported; None when absent or not a non-negative integer."""
    value = obj.get(key)
    return value if type(value) is int and value >= 0 else None  # type(): True is an int too


_JSON_NAMES = {
    dict: "an object",
    list: "an array",
    str: "a string",
    int: "a number",
    float: "a number",
    bool: "a boolean",
    type(None): "null",
}


def _as(value, kind: type[T], what: str) -> T:
    """`value` when it is a `kind`; a RemoteError naming what it is instead."""
    if isinstance(value, kind):
        return value
    sent = _JSON_NAMES.get(type(value), type(value).__name__)
    raise RemoteError(f"the endpoint sent {what} as {sent}, not {_JSON_NAMES[kind]}: {_clip(value)}")


def _get(obj: dict, key: str, kind: type[T]) -> T | None:
    """obj[key] when it is a `kind`, None when absent or null; a RemoteError naming the field otherwise."""
    value = obj.get(key)
    return None if value is None else _as(value, kind, repr(key))


_LONE_SURROGATE = re.compile("[\ud800-\udfff]")  # JSON's "\\ud800" escape lets them in; UTF-8 cannot hold them


def _valid_text(text: str) -> str:
    """`text` with lone surrogates as U+FFFD, so the chat can be shown and saved."""
    return _LONE_SURROGATE.sub("\ufffd", text)


_SHORT = reprlib.Repr()
_SHORT.maxstring = 80


def _clip(value) -> str:
    """A short picture of what the endpoint sent, whatever its size and depth."""
    return _SHORT.repr(value)


def _size(n: int) -> str:
    return f"{n / 2**20:g} MiB" if n >= 2**20 else f"{n:,} bytes"
