"""A client of a remote OpenAI-compatible endpoint that streams the same events as EngineClient.generate.

A pane pointed at llama-server, vLLM or another `serve` works unchanged: tokens/s and time to first
token come from the stream, the KV hit rate from `cached_tokens` or `timings` when the server reports
them. Whatever goes wrong (down, slow, garbage, an HTTP error) ends the reply with the reason.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import AsyncIterator, Sequence
from contextlib import aclosing
from dataclasses import dataclass
from urllib.parse import urlsplit

import aiohttp

from .client import new_request_id
from .engine.events import Event, FinishEvent, FinishReason, TokenEvent
from .engine.params import SamplingParams
from .engine.stats import RequestStats

REASONS = {"stop": FinishReason.STOP, "length": FinishReason.LENGTH}


class RemoteError(Exception):
    """The endpoint could not give a reply; the message says why."""


@dataclass(frozen=True)
class Endpoint:
    base_url: str  # e.g. http://host:8080/v1 (a bare http://host:8080 means its /v1)
    model: str = ""
    api_key: str = ""
    timeout_s: float = 60.0  # for connecting, and between two pieces of the stream

    @property
    def api_url(self) -> str:
        url = self.base_url.strip().rstrip("/")
        return url + "/v1" if urlsplit(url).path in ("", "/") else url


@dataclass
class _Reply:
    """What one streamed reply has said so far."""

    stats: RequestStats
    pieces: list[str]
    reason: FinishReason | None = None
    usage: dict | None = None
    timings: dict | None = None


class RemoteClient:
    def __init__(self, endpoint: Endpoint):
        self.endpoint = endpoint
        self._session: aiohttp.ClientSession | None = None
        self._responses: dict[str, aiohttp.ClientResponse] = {}
        self._cancelled: set[str] = set()
        self._conversations: dict[str, list[int]] = {}  # id -> [cached, evaluated] tokens so far

    async def generate(
        self,
        messages: Sequence[dict[str, str]],
        params: SamplingParams,
        *,
        conversation_id: str | None = None,
        request_id: str | None = None,
    ) -> AsyncIterator[Event]:
        """Stream one reply: TokenEvents, then exactly one FinishEvent (ERROR with the reason on a fault)."""
        request_id = request_id or new_request_id()
        reply = _Reply(RequestStats(request_id, conversation_id, t_submit=time.monotonic()), [])
        error = None
        try:
            async with aclosing(self._stream(request_id, messages, params, reply)) as pieces:
                async for piece in pieces:
                    yield TokenEvent(request_id, piece, 1, reply.stats.t_last_token)
        except (RemoteError, aiohttp.ClientError, asyncio.TimeoutError) as e:
            error = None if request_id in self._cancelled else self._reason(e)
        finally:
            self._responses.pop(request_id, None)
        yield self._final(request_id, reply, error)

    def cancel(self, request_id: str) -> None:
        """Stop a reply: closing its connection tells the server to free the sequence."""
        self._cancelled.add(request_id)
        response = self._responses.get(request_id)
        if response is not None:
            response.close()

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()
            self._session = None

    # -- the request ---------------------------------------------------------------------------

    async def _stream(self, request_id, messages, params, reply: _Reply) -> AsyncIterator[str]:
        async with await self._post(self._body(messages, params)) as response:
            self._responses[request_id] = response
            if request_id in self._cancelled:
                return
            await _check_status(response)
            if response.content_type == "application/json":  # the server ignored "stream": one whole reply
                _read_whole(await _json(response), reply)
                yield "".join(reply.pieces)
                return
            async for raw in response.content:
                line = raw.decode("utf-8", "replace").strip()
                if line.startswith("data:") and line[5:].strip() == "[DONE]":
                    return
                for piece in _read_line(line, reply):
                    reply.stats.on_token(time.monotonic())
                    reply.pieces.append(piece)
                    yield piece
        if reply.reason is None and request_id not in self._cancelled:
            raise RemoteError("the stream ended without a final chunk")

    async def _post(self, body: dict) -> aiohttp.ClientResponse:
        url = self.endpoint.api_url + "/chat/completions"
        return await self._open_session().post(url, json=body, headers=self._headers())

    def _open_session(self) -> aiohttp.ClientSession:
        if self._session is None:
            t = self.endpoint.timeout_s
            # a connection per reply: a kept-alive one the server closed meanwhile fails mid-request
            self._session = aiohttp.ClientSession(
                connector=aiohttp.TCPConnector(force_close=True),
                timeout=aiohttp.ClientTimeout(total=None, sock_connect=t, sock_read=t),
            )
        return self._session

    def _headers(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.endpoint.api_key}"} if self.endpoint.api_key else {}

    def _body(self, messages, params: SamplingParams) -> dict:
        body = {
            "messages": list(messages),
            "stream": True,
            "stream_options": {"include_usage": True},
            "max_tokens": params.max_tokens,
            "temperature": params.temperature,
            "top_p": params.top_p,
            # llama-server's and vLLM's names for the rest of the sliders
            "top_k": params.top_k,
            "min_p": params.min_p,
            "repeat_penalty": params.repeat_penalty,
            "repetition_penalty": params.repeat_penalty,
        }
        optional = {"model": self.endpoint.model, "seed": params.seed, "stop": list(params.stop), "ignore_eos": params.ignore_eos}
        body.update({k: v for k, v in optional.items() if v not in (None, "", [], False)})
        return body

    # -- the end -------------------------------------------------------------------------------

    def _reason(self, e: Exception) -> str:
        where = self.endpoint.api_url
        if isinstance(e, asyncio.TimeoutError):
            return f"no answer from {where} within {self.endpoint.timeout_s:g} s"
        if isinstance(e, aiohttp.ClientConnectorError):
            return f"cannot reach {where}: {e.os_error.strerror or e.os_error}"
        return str(e) if isinstance(e, RemoteError) else f"{where}: {e}"

    def _final(self, request_id: str, reply: _Reply, error: str | None) -> FinishEvent:
        st = reply.stats
        st.t_finish = time.monotonic()
        _count_tokens(reply)
        totals = self._conversations.setdefault(st.conversation_id, [0, 0]) if st.conversation_id else [0, 0]
        totals[0] += st.cached_tokens
        totals[1] += st.evaluated_tokens
        st.conversation_cached_tokens, st.conversation_evaluated_tokens = totals
        text = "".join(reply.pieces)
        if request_id in self._cancelled:
            self._cancelled.discard(request_id)
            return FinishEvent(request_id, FinishReason.CANCELLED, text, st)
        if error is not None:
            return FinishEvent(request_id, FinishReason.ERROR, text, st, error)
        return FinishEvent(request_id, reply.reason or FinishReason.STOP, text, st)


async def _check_status(response: aiohttp.ClientResponse) -> None:
    if response.status < 400:
        return
    text = await response.text(errors="replace")
    try:
        message = json.loads(text)["error"]["message"]
    except (ValueError, KeyError, TypeError):
        message = text.strip()[:200] or response.reason
    raise RemoteError(f"{response.url} answered {response.status}: {message}")


async def _json(response: aiohttp.ClientResponse) -> dict:
    try:
        return await response.json()
    except ValueError as e:
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
        return _read_chunk(chunk, reply)
    except (ValueError, TypeError, AttributeError, KeyError):
        raise RemoteError(f"the endpoint sent a chunk that is not OpenAI JSON: {data[:80]!r}") from None


def _read_chunk(chunk: dict, reply: _Reply) -> list[str]:
    if chunk.get("error"):
        error = chunk["error"]
        raise RemoteError(f"the endpoint failed: {error.get('message', error) if isinstance(error, dict) else error}")
    reply.usage = chunk.get("usage") or reply.usage
    reply.timings = chunk.get("timings") or reply.timings
    pieces = []
    for choice in chunk["choices"]:
        content = (choice.get("delta") or {}).get("content")
        if content:
            pieces.append(content)
        if choice.get("finish_reason"):
            reply.reason = REASONS.get(choice["finish_reason"], FinishReason.STOP)
    return pieces


def _read_whole(body: dict, reply: _Reply) -> None:
    try:
        choice = body["choices"][0]
        reply.pieces.append(choice["message"]["content"] or "")
    except (KeyError, IndexError, TypeError):
        raise RemoteError(f"the endpoint sent JSON that is not a chat completion: {str(body)[:80]}") from None
    reply.stats.on_token(time.monotonic())
    reply.reason = REASONS.get(choice.get("finish_reason"), FinishReason.STOP)
    reply.usage, reply.timings = body.get("usage"), body.get("timings")


def _count_tokens(reply: _Reply) -> None:
    """Exact counts from `usage`/`timings` when the server sent them (a chunk may hold several tokens)."""
    st, usage, timings = reply.stats, reply.usage or {}, reply.timings or {}
    st.prompt_tokens = usage.get("prompt_tokens") or 0
    st.gen_tokens = usage.get("completion_tokens") or st.gen_tokens
    cached = (usage.get("prompt_tokens_details") or {}).get("cached_tokens")
    if cached is None:
        cached = timings.get("cache_n")
    if cached is None:
        return  # not reported: the hit rate stays unknown
    st.cached_tokens = cached
    st.evaluated_tokens = timings.get("prompt_n", max(st.prompt_tokens - cached, 0))
