"""What every API does between parsing a request and answering it: the tool syntax of the model it
names, its choices submitted together, their events as they come, and a failed reply as its HTTP error."""

from __future__ import annotations

import asyncio
import functools
import os
from pathlib import Path

from aiohttp import web

from app.engine.events import Event, Fault, FinishEvent, FinishReason, TokenEvent
from app.engine.model_info import ModelInfo
from app.engine.probs import TokenProbs

from ..image_input import ImageInputError, fetch_pictures
from ..protocol import BadRequest
from ..shaping import dumps, error_body
from ..tool_calls import asks_for_tools
from ..tool_syntax import GENERIC, Syntax, detect, model_syntax

SERVER = web.AppKey("server", object)  # the ApiServer: client, model name, request observer


async def tool_syntax(body: dict, info: ModelInfo) -> Syntax:
    """The tool-call syntax of the model's template (a template file's, where one is used instead):
    its file is read once (off the loop), then kept."""
    if not asks_for_tools(body) or not info.has_chat_template:
        return GENERIC
    if info.chat_template_file:
        return await asyncio.to_thread(_template_file_syntax, info.chat_template_file)
    return await asyncio.to_thread(model_syntax, info.path)


def _template_file_syntax(path: str) -> Syntax:
    try:
        status = os.stat(path)
    except OSError:  # gone since the model loaded: the template in use is still its text, read then
        return GENERIC
    return _read_file_syntax(path, status.st_mtime_ns, status.st_size)


@functools.lru_cache(maxsize=32)
def _read_file_syntax(path: str, _mtime_ns: int, _size: int) -> Syntax:
    try:
        return detect(Path(path).read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError):
        return GENERIC


async def pictures_of(messages, info: ModelInfo, model: str, allow_urls: bool) -> dict:
    """The pictures a chat shows by URL, fetched; a 400 when the model sees none, or one cannot be had."""
    if not messages or not any(m.get("images") for m in messages):
        return {}
    if not info.sees_images:
        raise BadRequest(
            f"the model {model} does not see images: it was loaded without a vision projector "
            "(serve it with --mmproj FILE, or with its mmproj-*.gguf beside it)",
            "messages",
            "model_not_multimodal",
        )
    try:
        return await fetch_pictures(messages, allow_urls)
    except ImageInputError as e:
        raise BadRequest(str(e), e.param) from None


async def first_events(streams) -> list[Event]:
    """Each stream's first event; all submitted at once, so that the choices share one reading of the prompt."""
    reads = [asyncio.ensure_future(anext(stream)) for stream in streams]
    try:
        return await asyncio.gather(*reads)
    finally:  # a client gone meanwhile: the reads must have ended before their streams are closed
        for read in reads:
            read.cancel()
        await asyncio.gather(*reads, return_exceptions=True)


class Reply:
    """One choice's events as they come, and its tokens' probabilities not yet sent."""

    def __init__(self, index: int, first, stream):
        self.index = index
        self._next = first
        self._stream = stream
        self.probs: list[TokenProbs] = []

    async def event(self) -> Event:
        event = self._next if self._next is not None else await anext(self._stream)
        self._next = None
        if isinstance(event, TokenEvent) and event.probs is not None:
            self.probs.append(event.probs)
        return event

    def take_probs(self) -> list[TokenProbs]:
        taken, self.probs = self.probs, []
        return taken

    async def final(self) -> FinishEvent:
        while not isinstance(event := await self.event(), FinishEvent):
            pass
        return event


async def merged(replies: list[Reply]):
    """(reply, event) in the order events come, until every reply has its final event."""
    if len(replies) == 1:  # the common case, without a task
        reply = replies[0]
        while True:
            event = await reply.event()
            yield reply, event
            if isinstance(event, FinishEvent):
                return
    pending = {asyncio.ensure_future(r.event()): r for r in replies}
    try:
        while pending:
            done, _ = await asyncio.wait(pending, return_when=asyncio.FIRST_COMPLETED)
            for task in sorted(done, key=lambda t: pending[t].index):
                reply = pending.pop(task)
                event = task.result()
                yield reply, event
                if not isinstance(event, FinishEvent):
                    pending[asyncio.ensure_future(reply.event())] = reply
    finally:
        for task in pending:
            task.cancel()
        # until they have ended, each still runs a read of its stream, which could not be closed
        await asyncio.gather(*pending, return_exceptions=True)


def refusal(final: FinishEvent) -> web.Response:
    status, body = refusal_body(final)
    headers = {"Retry-After": "1"} if status == 503 else None
    return web.json_response(body, status=status, headers=headers, dumps=dumps)


def refusal_body(final: FinishEvent) -> tuple[int, dict]:
    """A request's fault (or its chat template's) is a 400; an engine that cannot serve now a 503 (retry); its failure a 500."""
    if final.reason is FinishReason.CANCELLED:
        return 503, error_body(f"the request was cut short: {final.notice or 'cancelled'}", "unavailable_error")
    if final.fault in (Fault.REQUEST, Fault.TEMPLATE):
        return 400, error_body(final.error or "the engine refused the request")
    if final.fault is Fault.UNAVAILABLE:
        return 503, error_body(final.error or "the engine cannot serve the request now", "unavailable_error")
    return 500, error_body(final.error or "the engine failed", "server_error")
