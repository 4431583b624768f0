"""A client of a remote OpenAI-compatible endpoint that streams the same events as EngineClient.generate.

A pane pointed at llama-server, vLLM or another `serve` works unchanged: tokens/s and time to first
token come from the stream, the KV hit rate from `cached_tokens` or `timings` when the server reports
them. Whatever goes wrong (down, slow, garbage, too much, an HTTP error) ends the reply with the
reason, and the client goes on serving the next one.
"""

from __future__ import annotations

import asyncio
import json
import re
import reprlib
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from contextlib import aclosing
from dataclasses import dataclass, field, replace
from typing import TypeVar
from urllib.parse import urlsplit
from uuid import uuid4

import aiohttp
from aiohttp.http_exceptions import LineTooLong

from .engine.events import Event, Fault, FinishEvent, FinishReason, TokenEvent, refused
from .engine.params import Priority, SamplingParams
from .engine.sampling_fields import SAMPLING_FIELDS
from .engine.sequence import Request
from .engine.stats import ConversationTotals, RequestStats
from .loopback import is_loopback

REASONS = {"stop": FinishReason.STOP, "length": FinishReason.LENGTH}
PIECES_PER_TOKEN = 4  # a server streams about one piece a token; four times max_tokens is runaway
CONVERSATIONS_KEPT = 1024  # the running KV totals of the most recent conversations
ERROR_BODY_BYTES = 64 * 1024  # of an HTTP error's body, enough for its message

T = TypeVar("T")
DEFAULTS = SamplingParams()
Listener = Callable[[list[Event]], None]


class RemoteError(Exception):
    """The endpoint could not give a reply; the message says why."""


@dataclass(frozen=True)
class Endpoint:
    base_url: str  # e.g. http://host:8080/v1 (a bare http://host:8080 means its /v1)
    model: str = ""
    api_key: str = ""
    timeout_s: float = 60.0  # to connect and get an answer, and between two complete lines of the stream
    deadline_s: float = 600.0  # for a whole reply, however steadily it trickles in
    max_bytes: int = 64 * 2**20  # of one reply
    max_line_bytes: int = 2**20  # of one line of the stream

    @property
    def api_url(self) -> str:
        url = self.base_url.strip().rstrip("/")
        try:
            bare = urlsplit(url).path in ("", "/")
        except ValueError:  # e.g. "http://[" half typed: its request fails and says why
            return url
        return url + "/v1" if bare else url

    @property
    def cleartext_host(self) -> str | None:
        """The host that would get the API key unencrypted (plain http, not loopback); None if none would."""
        try:
            parts = urlsplit(self.base_url.strip())
            host = parts.hostname
        except ValueError:  # not a URL yet: nothing is sent
            return None
        if not self.api_key or parts.scheme.lower() != "http" or not host or is_loopback(host):
            return None
        return host


@dataclass
class _Reply:
    """What one streamed reply has said so far, and how to stop it."""

    stats: RequestStats
    pieces: list[str] = field(default_factory=list)
    reason: FinishReason | None = None
    usage: dict | None = None
    timings: dict | None = None
    response: aiohttp.ClientResponse | None = None
    cancelled: bool = False
    stopped: asyncio.Event = field(default_factory=asyncio.Event)  # set by cancel(): ends any wait at once


class RemoteClient:
    def __init__(self, endpoint: Endpoint):
        self.endpoint = endpoint
        self._session: aiohttp.ClientSession | None = None
        self._open: dict[str, _Reply] = {}  # the replies streaming now, by request id
        self.conversations = ConversationTotals(CONVERSATIONS_KEPT)
        self._listeners: list[Listener] = []

    @property
    def host(self) -> str:
        return urlsplit(self.endpoint.api_url).netloc or self.endpoint.api_url

    def model_label(self, model: str | None) -> str:
        """The endpoint's model, or its host (a remote is not asked for a local model)."""
        return self.endpoint.model or self.host

    def add_listener(self, listener: Listener) -> None:
        """Call `listener([event])` with every event any reply of this client streams."""
        self._listeners.append(listener)

    def remove_listener(self, listener: Listener) -> None:
        if listener in self._listeners:
            self._listeners.remove(listener)

    async def reply(self, request: Request) -> AsyncIterator[Event]:
        """A pane's reply (the workspace's ReplySource). What a chat endpoint cannot do ends it at once
        with an ERROR that says so; token probabilities it does not give are said in a notice."""
        why = self._cannot(request)
        if why is not None:
            event = refused(request.request_id, why, request.conversation_id, fault=Fault.REQUEST)
            self._tell(event)
            yield event
            return
        stream = self.generate(
            request.messages or (), request.params, conversation_id=request.conversation_id, request_id=request.request_id
        )
        async with aclosing(stream) as events:
            async for event in events:
                if isinstance(event, FinishEvent) and request.params.n_probs is not None and event.ok:
                    event = replace(event, notice=f"{self.host} gives no token probabilities over its chat API")
                self._tell(event)
                yield event

    def _cannot(self, request: Request) -> str | None:
        if request.prompt is not None:
            return f"completion mode needs the local engine; {self.host} is asked through its chat API (turn ⚙ Completion off)"
        if request.priority is not Priority.NORMAL:
            return f"{self.host} takes no priorities (turn ⚙ High priority off for this pane)"
        if request.reply_prefix:
            return f"a branch goes on from the local engine's tokens, which {self.host} does not take"
        return None

    def _tell(self, event: Event) -> None:
        for listener in tuple(self._listeners):
            listener([event])

    async def generate(
        self,
        messages: Sequence[dict[str, str]],
        params: SamplingParams,
        *,
        conversation_id: str | None = None,
        request_id: str | None = None,
    ) -> AsyncIterator[Event]:
        """Stream one reply: TokenEvents, then exactly one FinishEvent (ERROR with the reason on a fault)."""
        request_id = request_id or f"remote-{uuid4().hex[:12]}"
        reply = self._open[request_id] = _Reply(RequestStats(request_id, conversation_id, t_submit=time.monotonic()))
        error = None
        try:
            async with aclosing(self._stream(reply, messages, params)) as pieces:
                async for piece in pieces:
                    yield TokenEvent(request_id, piece, 1, reply.stats.t_last_token)
        except Exception as e:  # whatever the endpoint does ends this reply, never the pane
            error = None if reply.cancelled else self._reason(e)
        finally:
            self._open.pop(request_id, None)
        yield self._final(reply, error)

    def cancel(self, request_id: str) -> None:
        """Stop a reply: closing its connection tells the server to free the sequence."""
        reply = self._open.get(request_id)
        if reply is None:
            return  # already over
        reply.cancelled = True
        reply.stopped.set()  # Stop before the server answers ends the reply now, not at a timeout
        if reply.response is not None:
            reply.response.close()

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()
            self._session = None

    # -- the request ---------------------------------------------------------------------------

    async def _stream(self, reply: _Reply, messages, params: SamplingParams) -> AsyncIterator[str]:
        budget = _Budget(self.endpoint, params.max_tokens, reply.stopped)
        where = self.endpoint.api_url
        async with await budget.wait(self._post(self._body(messages, params)), f"no answer from {where}") as response:
            reply.response = response
            if reply.cancelled:
                return
            await _check_status(response, budget)
            if response.content_type == "application/json":  # the server ignored "stream": one whole reply
                _read_whole(_parse_json(await _read_body(response, budget, self.endpoint.max_bytes)), reply)
                yield "".join(reply.pieces)
                return
            while raw := await _next_line(response, budget):
                line = raw.decode("utf-8", "replace").strip()
                if line.startswith("data:") and line[5:].strip() == "[DONE]":
                    return
                for piece in _read_line(line, reply):
                    budget.spend_piece()
                    reply.stats.on_token(time.monotonic())
                    reply.pieces.append(piece)
                    yield piece
        if reply.reason is None and not reply.cancelled:
            raise RemoteError("the stream ended without a final chunk")

    async def _post(self, body: dict) -> aiohttp.ClientResponse:
        url = self.endpoint.api_url + "/chat/completions"
        return await self._open_session().post(url, json=body, headers=self._headers())

    def _open_session(self) -> aiohttp.ClientSession:
        if self._session is None:
            # a connection per reply: a kept-alive one the server closed meanwhile fails mid-request;
            # no timeouts of aiohttp's own: each reply's _Budget keeps time
            self._session = aiohttp.ClientSession(
                connector=aiohttp.TCPConnector(force_close=True), timeout=aiohttp.ClientTimeout(total=None)
            )
        return self._session

    def _headers(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.endpoint.api_key}"} if self.endpoint.api_key else {}

    def _body(self, messages, params: SamplingParams) -> dict:
        body = {"messages": list(messages), "stream": True, "stream_options": {"include_usage": True}}
        # a pane's sliders always (the endpoint's defaults may differ); the other knobs where they are not ours
        for f in SAMPLING_FIELDS:
            value = getattr(params, f.name)
            if f.slider is not None or value != getattr(DEFAULTS, f.name):
                body.update(dict.fromkeys(f.sent_as, value))
        optional = {"model": self.endpoint.model, "seed": params.seed, "stop": list(params.stop), "ignore_eos": params.ignore_eos}
        body.update({k: v for k, v in optional.items() if v not in (None, "", [], False)})
        return body

    # -- the end -------------------------------------------------------------------------------

    def _reason(self, e: Exception) -> str:
        where = self.endpoint.api_url
        if isinstance(e, RemoteError):
            return str(e)
        if isinstance(e, aiohttp.ClientConnectorError):
            return f"cannot reach {where}: {e.os_error.strerror or e.os_error}"
        if isinstance(e, (aiohttp.InvalidURL, aiohttp.NonHttpUrlClientError)):
            return f"the endpoint is not a valid http(s) URL: {where}"
        return f"{where}: {str(e) or type(e).__name__}"

    def _final(self, reply: _Reply, error: str | None) -> FinishEvent:
        st = reply.stats
        st.t_finish = time.monotonic()
        _count_tokens(reply)
        self.conversations.add(st)
        text = "".join(reply.pieces)
        if reply.cancelled:
            return FinishEvent(st.request_id, FinishReason.CANCELLED, text, st)
        if error is not None:
            return FinishEvent(st.request_id, FinishReason.ERROR, text, st, _valid_text(error))
        return FinishEvent(st.request_id, reply.reason or FinishReason.STOP, text, st)


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


async def _check_status(response: aiohttp.ClientResponse, budget: _Budget) -> None:
    if response.status < 400:
        return
    text = (await _read_body(response, budget, ERROR_BODY_BYTES)).decode("utf-8", "replace")
    try:
        message = str(json.loads(text)["error"]["message"])[:200]
    except (ValueError, KeyError, TypeError, RecursionError):
        message = text.strip()[:200] or response.reason
    raise RemoteError(f"{response.url} answered {response.status}: {message}")


def _parse_json(body: bytes):
    try:
        return json.loads(body)
    except (ValueError, RecursionError) as e:
        raise RemoteError(f"the endpoint sent broken JSON: {e}") from None


def _read_line(line: str, reply: _Reply) -> list[str]:
    """The text pieces of one server-sent-events line; the usage, timings and finish reason noted."""
    if not line or line.startswith(":") or line.split(":", 1)[0] in ("event", "id", "retry"):
        return []
    if not line.startswith("data:"):
        raise RemoteError(f"the endpoint sent something that is not an OpenAI stream: {line[:80]!r}")
    data = line[5:].strip()
    try:
        chunk = json.loads(data)
    except (ValueError, RecursionError):
        raise RemoteError(f"the endpoint sent a chunk that is not OpenAI JSON: {data[:80]!r}") from None
    return _read_chunk(chunk, reply)


def _read_chunk(chunk, reply: _Reply) -> list[str]:
    chunk = _as(chunk, dict, "a chunk")
    _check_error(chunk)
    reply.usage = _get(chunk, "usage", dict) or reply.usage
    reply.timings = _get(chunk, "timings", dict) or reply.timings
    choices = _get(chunk, "choices", list)
    if choices is None:
        raise RemoteError(f"the endpoint sent a chunk without choices: {_clip(chunk)}")
    pieces = []
    for choice in choices:
        choice = _as(choice, dict, "a choice")
        content = _get(_get(choice, "delta", dict) or {}, "content", str)
        if content:
            pieces.append(_valid_text(content))
        _note_reason(choice, reply)
    return pieces


def _read_whole(body, reply: _Reply) -> None:
    body = _as(body, dict, "a reply")
    _check_error(body)
    choices = _get(body, "choices", list)
    message = _get(_as(choices[0], dict, "a choice"), "message", dict) if choices else None
    if message is None:
        raise RemoteError(f"the endpoint sent JSON that is not a chat completion: {_clip(body)}")
    reply.pieces.append(_valid_text(_get(message, "content", str) or ""))
    reply.stats.on_token(time.monotonic())
    _note_reason(choices[0], reply)
    reply.reason = reply.reason or FinishReason.STOP
    reply.usage, reply.timings = _get(body, "usage", dict), _get(body, "timings", dict)


def _check_error(obj: dict) -> None:
    error = obj.get("error")
    if error:
        message = error.get("message", error) if isinstance(error, dict) else error
        raise RemoteError(f"the endpoint failed: {message[:200] if isinstance(message, str) else _clip(message)}")


def _note_reason(choice: dict, reply: _Reply) -> None:
    reason = _get(choice, "finish_reason", str)
    if reason:
        reply.reason = REASONS.get(reason, FinishReason.STOP)


def _count_tokens(reply: _Reply) -> None:
    """Exact counts from `usage`/`timings` when the server sent them (a chunk may hold several tokens)."""
    st, usage, timings = reply.stats, reply.usage or {}, reply.timings or {}
    st.prompt_tokens = _count(usage, "prompt_tokens") or 0
    st.gen_tokens = _count(usage, "completion_tokens") or st.gen_tokens
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
