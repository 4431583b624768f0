"""The endpoints: completions (streamed as server-sent events, or whole), responses, models, health, metrics."""

from __future__ import annotations

import asyncio
import json
import math
from contextlib import AsyncExitStack, aclosing

from aiohttp import web

from app.engine.events import Event, Fault, FinishEvent, FinishReason, TokenEvent
from app.engine.probs import TokenProbs

from .prometheus import RATE_WINDOW_S, ModelFigures, prometheus_text
from .protocol import Job, parse_chat, parse_completion, parse_json, requested_model
from .response_tools import StreamedItems
from .responses import NotFound, ResponseShape, kept_of, parse_response, status_of
from .shaping import Shape, error_body
from .tool_calls import Tools, asks_for_tools, reply_of
from .tool_parse import ToolStream
from .tool_syntax import GENERIC, model_syntax

SERVER = web.AppKey("server", object)  # the ApiServer: client, model name, request observer
# a streamed reply whose client reads nothing while this long (the socket's buffers full) is cut,
# so a stalled reader cannot hold its sequence and the events queued for it
SEND_DEADLINE_S = 30.0


async def chat_completions(request: web.Request) -> web.StreamResponse:
    server = request.app[SERVER]
    body = parse_json(await request.read())
    model, info = server.pick_model(requested_model(body))
    # the tool syntax of the model's template: its file's header is read once (off the loop), then kept
    syntax = await asyncio.to_thread(model_syntax, info.path) if asks_for_tools(body) and info.has_chat_template else GENERIC
    return await _complete(request, model, parse_chat(body, info.n_ctx_seq, syntax))


async def completions(request: web.Request) -> web.StreamResponse:
    server = request.app[SERVER]
    body = parse_json(await request.read())
    model, info = server.pick_model(requested_model(body))
    return await _complete(request, model, parse_completion(body, info.n_ctx_seq))  # a request is one sequence: its room


async def models(request: web.Request) -> web.Response:
    server = request.app[SERVER]
    data = [_model(server, name, info) for name, info in server.client.models.items()]
    return web.json_response({"object": "list", "data": data})


def _model(server, name: str, info) -> dict:
    # n_ctx: the KV pool's cells, every sequence's together; n_ctx_seq: what one request may hold
    meta = {"n_ctx": info.n_ctx, "n_ctx_seq": info.n_ctx_seq, "n_ctx_train": info.n_ctx_train}
    meta |= {"n_params": info.n_params, "size": info.size_bytes}
    # where the model went (layers offloaded, the KV pool's memory) and what the build can run on
    meta |= {**info.as_json(), "placement": info.placement(), "build": info.build.as_json() if info.build else None}
    return {"id": name, "object": "model", "created": server.created, "owned_by": "batch-playground", "meta": meta}


async def health(request: web.Request) -> web.Response:
    client = request.app[SERVER].client
    if client.is_running:
        return web.json_response({"status": "ok"})
    reason = client.failure or "the engine is not running"
    return web.json_response({"status": "error", "error": reason}, status=503)


async def metrics(request: web.Request) -> web.Response:
    server = request.app[SERVER]
    client = server.client
    figures = {}
    for name in client.models:
        snapshot = client.snapshot_of(name)
        if snapshot is not None:  # else unloaded since
            figures[name] = ModelFigures(snapshot, client.recent_steps(RATE_WINDOW_S, name))
    text = prometheus_text(figures, server.totals)
    return web.Response(text=text, content_type="text/plain", charset="utf-8", headers={"X-Format": "prometheus 0.0.4"})


# -- one completion ----------------------------------------------------------------------------


async def _complete(request: web.Request, model: str, job: Job) -> web.StreamResponse:
    server = request.app[SERVER]
    with server.admit(job.n):
        return await _serve(request, server, job, model)


async def _serve(request: web.Request, server, job: Job, model: str) -> web.StreamResponse:
    shape = Shape(job.is_chat, model, job.post_sampling_probs)
    # leaving early (a client gone, an error) closes the streams, and that cancels their requests
    async with AsyncExitStack() as stack:
        streams = [await stack.enter_async_context(aclosing(server.submit(job, model, i))) for i in range(job.n)]
        firsts = await _first_events(streams)
        for first in firsts:  # the headers wait for them: a refused prompt is still a 400
            if isinstance(first, FinishEvent) and not first.ok:
                return refusal(first)
        replies = [Reply(i, first, stream) for i, (first, stream) in enumerate(zip(firsts, streams))]
        if job.stream:
            return await _stream(request, shape, job, replies)
        finals = [await reply.final() for reply in replies]
        for final in finals:
            if not final.ok:
                return refusal(final)
        answer = shape.completion(finals, [reply.probs for reply in replies])
        if job.tools is not None:
            for choice, final in zip(answer["choices"], finals):
                _as_tool_reply(choice, final, job.tools)
        return web.json_response(answer, dumps=dumps)


def _as_tool_reply(choice: dict, final: FinishEvent, tools: Tools) -> None:
    """A whole reply that may call tools, as OpenAI's: its content and its calls."""
    content, calls = reply_of(final.text, tools)
    choice["message"]["content"] = content
    if calls:
        choice["message"]["tool_calls"] = calls
        if final.reason is FinishReason.STOP:
            choice["finish_reason"] = "tool_calls"


async def _first_events(streams) -> list[Event]:
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


async def _stream(request, shape: Shape, job: Job, replies: list[Reply]) -> web.StreamResponse:
    response = web.StreamResponse(headers={"Content-Type": "text/event-stream", "Cache-Control": "no-cache"})
    await response.prepare(request)
    try:
        await _send_events(response, shape, job, replies)
    except ConnectionResetError:
        pass  # the client left: the caller closes the streams, which cancels the requests
    except TimeoutError:  # a reader stalled past the deadline: drop the connection, as if it had left
        if request.transport is not None:
            request.transport.abort()
    return response


async def _send_events(response, shape: Shape, job: Job, replies: list[Reply]) -> None:
    nulls = {"usage": None} if job.include_usage else {}
    if shape.is_chat:
        for reply in replies:
            await _send(response, shape.chunk(None, first=True, index=reply.index, **nulls))
    if job.tools is not None:
        await _send_tool_calls(response, shape, job, replies)
        return
    finals: dict[int, FinishEvent] = {}
    # closed on any way out, so that no read of a stream is still running when the streams close
    async with aclosing(_merged(replies)) as events:
        async for reply, event in events:
            if isinstance(event, TokenEvent):
                if event.text:  # a token held back (a possible stop string) is told with the text it ends up in
                    await _send(response, shape.chunk(event.text, index=reply.index, probs=reply.take_probs(), **nulls))
            elif event.ok:
                await _send(response, shape.last_chunk(event, job.include_usage, reply.index, reply.take_probs()))
                finals[reply.index] = event
            else:
                await _send(response, _refusal_body(event)[1])  # the status line is gone: say it in the stream
                await response.write_eof()
                return
    if job.include_usage:
        await _send(response, shape.usage_chunk([finals[i] for i in sorted(finals)]))
    await response.write(b"data: [DONE]\n\n")
    await response.write_eof()


async def _send_tool_calls(response, shape: Shape, job: Job, replies: list[Reply]) -> None:
    """Replies that may call tools, streamed as they are written: content as it comes, each call's
    id, type and name once its name is whole, then its arguments' text as the model writes it."""
    nulls = {"usage": None} if job.include_usage else {}
    texts = {reply.index: "" for reply in replies}
    streams = {reply.index: ToolStream(job.tools.syntax, job.tools.new_id) for reply in replies}
    finals: dict[int, FinishEvent] = {}
    async with aclosing(_merged(replies)) as events:
        async for reply, event in events:
            reply.take_probs()  # a reply with tools tells no token probabilities
            if isinstance(event, TokenEvent):
                if event.text:
                    texts[reply.index] += event.text
                    await _send_deltas(response, shape, reply.index, streams[reply.index].feed(texts[reply.index]), nulls)
                continue
            if not event.ok:
                await _send(response, _refusal_body(event)[1])
                await response.write_eof()
                return
            stream = streams[reply.index]
            await _send_deltas(response, shape, reply.index, stream.feed(event.text, final=True), nulls)
            last = shape.last_chunk(event, job.include_usage, reply.index)
            if stream.has_calls and event.reason is FinishReason.STOP:
                last["choices"][0]["finish_reason"] = "tool_calls"
            await _send(response, last)
            finals[reply.index] = event
    if job.include_usage:
        await _send(response, shape.usage_chunk([finals[i] for i in sorted(finals)]))
    await response.write(b"data: [DONE]\n\n")
    await response.write_eof()


async def _send_deltas(response, shape: Shape, index: int, deltas: list[dict], nulls: dict) -> None:
    for delta in deltas:
        chunk = shape.chunk(None, index=index, **nulls)
        chunk["choices"][0]["delta"] = delta
        await _send(response, chunk)


async def _merged(replies: list[Reply]):
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


async def _send(response: web.StreamResponse, obj: dict) -> None:
    await asyncio.wait_for(response.write(b"data: " + dumps(obj).encode() + b"\n\n"), SEND_DEADLINE_S)


def dumps(obj) -> str:
    """Standard JSON, always: a value that is not a finite number (a NaN logprob) is written as null."""
    try:
        return json.dumps(obj, ensure_ascii=False, allow_nan=False)
    except ValueError:
        return json.dumps(_finite(obj), ensure_ascii=False, allow_nan=False)


def _finite(obj):
    if isinstance(obj, float):
        return obj if math.isfinite(obj) else None
    if isinstance(obj, dict):
        return {k: _finite(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_finite(v) for v in obj]
    return obj


def refusal(final: FinishEvent) -> web.Response:
    status, body = _refusal_body(final)
    headers = {"Retry-After": "1"} if status == 503 else None
    return web.json_response(body, status=status, headers=headers, dumps=dumps)


def _refusal_body(final: FinishEvent) -> tuple[int, dict]:
    """A request's fault (or its chat template's) is a 400; an engine that cannot serve now a 503 (retry); its failure a 500."""
    if final.reason is FinishReason.CANCELLED:
        return 503, error_body(f"the request was cut short: {final.notice or 'cancelled'}", "unavailable_error")
    if final.fault in (Fault.REQUEST, Fault.TEMPLATE):
        return 400, error_body(final.error or "the engine refused the request")
    if final.fault is Fault.UNAVAILABLE:
        return 503, error_body(final.error or "the engine cannot serve the request now", "unavailable_error")
    return 500, error_body(final.error or "the engine failed", "server_error")


# -- the Responses API -------------------------------------------------------------------------


async def create_response(request: web.Request) -> web.StreamResponse:
    server = request.app[SERVER]
    body = parse_json(await request.read())
    model, info = server.pick_model(requested_model(body))
    syntax = await asyncio.to_thread(model_syntax, info.path) if asks_for_tools(body) and info.has_chat_template else GENERIC
    asked = parse_response(body, info.n_ctx_seq, server.responses, syntax)
    shape = ResponseShape(asked, model)
    with server.admit(1):
        async with aclosing(server.submit(asked.job, model)) as stream:
            (first,) = await _first_events([stream])
            if isinstance(first, FinishEvent) and not first.ok:
                return refusal(first)
            reply = Reply(0, first, stream)
            if asked.job.stream:
                return await _stream_response(request, server, shape, reply)
            final = await reply.final()
            if not final.ok:
                return refusal(final)
            return web.json_response(_finish_response(server, shape, final), dumps=dumps)


def _finish_response(server, shape: ResponseShape, final: FinishEvent, output: list | None = None) -> dict:
    """The whole response object; kept (with its conversation) when the request says store."""
    whole = shape.finished(final, output)
    if shape.asked.store:
        server.responses.keep(kept_of(shape.asked, whole))
    return whole


async def _stream_response(request, server, shape: ResponseShape, reply: Reply) -> web.StreamResponse:
    response = web.StreamResponse(headers={"Content-Type": "text/event-stream", "Cache-Control": "no-cache"})
    await response.prepare(request)
    try:
        for event in shape.opening_events():
            await _send_event(response, event)
        if shape.asked.job.tools is None:
            while isinstance(event := await reply.event(), TokenEvent):
                if event.text:
                    await _send_event(response, shape.delta(event.text))
            output, events = None, []
        else:
            event, items, events = await _stream_items(response, shape, reply)
            output = items.items
        if event.ok:
            events += shape.closing_events(_finish_response(server, shape, event, output))
        else:
            events = shape.failure_events(_refusal_body(event)[1]["error"])
        for event in events:
            await _send_event(response, event)
        await response.write_eof()
    except ConnectionResetError:
        pass  # the client left: the caller closes the stream, which cancels the request
    except TimeoutError:
        if request.transport is not None:
            request.transport.abort()
    return response


async def _stream_items(response, shape: ResponseShape, reply: Reply) -> tuple[FinishEvent, StreamedItems, list[dict]]:
    """A reply with tools: its items' events sent as its text grows; its final event, its items and
    the events that close the last one (when the reply ended well)."""
    items, text = StreamedItems(shape), ""
    while isinstance(event := await reply.event(), TokenEvent):
        if event.text:
            text += event.text
            for item_event in items.feed(text):
                await _send_event(response, item_event)
    if not event.ok:
        return event, items, []
    return event, items, items.finish(event.text, status_of(event))


async def _send_event(response: web.StreamResponse, event: dict) -> None:
    line = f"event: {event['type']}\ndata: {dumps(event)}\n\n"
    await asyncio.wait_for(response.write(line.encode()), SEND_DEADLINE_S)


async def get_response(request: web.Request) -> web.Response:
    return web.json_response(_kept(request).response, dumps=dumps)


async def delete_response(request: web.Request) -> web.Response:
    response_id = _kept(request).response["id"]
    request.app[SERVER].responses.delete(response_id)
    return web.json_response({"id": response_id, "object": "response", "deleted": True})


def _kept(request: web.Request):
    response_id = request.match_info["response_id"]
    kept = request.app[SERVER].responses.get(response_id)
    if kept is None:
        raise NotFound(f"Response with id '{response_id[:80]}' not found.", "response_id")
    return kept
