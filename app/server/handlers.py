"""The endpoints: completions (streamed as server-sent events, or whole), models, health, metrics."""

from __future__ import annotations

import json
from contextlib import aclosing

from aiohttp import web

from app.engine.events import FinishEvent, FinishReason, TokenEvent

from .prometheus import RATE_WINDOW_S, prometheus_text
from .protocol import Job, parse_chat, parse_completion, parse_json
from .shaping import Shape, error_body

SERVER = web.AppKey("server", object)  # the ApiServer: client, model name, request observer


async def chat_completions(request: web.Request) -> web.StreamResponse:
    return await _complete(request, parse_chat)


async def completions(request: web.Request) -> web.StreamResponse:
    return await _complete(request, parse_completion)


async def models(request: web.Request) -> web.Response:
    server = request.app[SERVER]
    info = server.client.model_info
    meta = {"n_ctx": info.n_ctx, "n_ctx_train": info.n_ctx_train, "n_params": info.n_params, "size": info.size_bytes}
    # where the model went (layers offloaded, the KV pool's memory) and what the build can run on
    meta |= {**info.as_json(), "placement": info.placement(), "build": info.build.as_json() if info.build else None}
    model = {"id": server.model_name, "object": "model", "created": server.created, "owned_by": "batch-playground", "meta": meta}
    return web.json_response({"object": "list", "data": [model]})


async def health(request: web.Request) -> web.Response:
    client = request.app[SERVER].client
    if client.is_running:
        return web.json_response({"status": "ok"})
    reason = client.failure or "the engine is not running"
    return web.json_response({"status": "error", "error": reason}, status=503)


async def metrics(request: web.Request) -> web.Response:
    server = request.app[SERVER]
    client = server.client
    text = prometheus_text(client.snapshot, client.recent_steps(RATE_WINDOW_S), server.totals)
    return web.Response(text=text, content_type="text/plain", charset="utf-8", headers={"X-Format": "prometheus 0.0.4"})


# -- one completion ----------------------------------------------------------------------------


async def _complete(request: web.Request, parse) -> web.StreamResponse:
    server = request.app[SERVER]
    job: Job = parse(parse_json(await request.read()), server.client.model_info.n_ctx)
    with server.admit():
        return await _serve(request, server, job)


async def _serve(request: web.Request, server, job: Job) -> web.StreamResponse:
    shape = Shape(job.is_chat, server.model_name)
    # leaving early (a client gone, an error) closes the stream, and that cancels the request
    async with aclosing(server.submit(job)) as stream:
        first = await anext(stream)  # the headers wait for it: a refused prompt is still a 400
        if isinstance(first, FinishEvent) and not first.ok:
            return refusal(first)
        if job.stream:
            return await _stream(request, shape, job, first, stream)
        final = first if isinstance(first, FinishEvent) else await _last(stream)
        if not final.ok:
            return refusal(final)
        return web.json_response(shape.completion(final))


async def _last(stream) -> FinishEvent:
    async for event in stream:
        if isinstance(event, FinishEvent):
            return event
    raise RuntimeError("the stream ended without a final event")


async def _stream(request, shape: Shape, job: Job, first, stream) -> web.StreamResponse:
    response = web.StreamResponse(headers={"Content-Type": "text/event-stream", "Cache-Control": "no-cache"})
    await response.prepare(request)
    try:
        await _send_events(response, shape, job, first, stream)
    except ConnectionResetError:
        pass  # the client left: the caller closes the stream, which cancels the request
    return response


async def _send_events(response, shape: Shape, job: Job, first, stream) -> None:
    nulls = {"usage": None} if job.include_usage else {}
    if shape.is_chat:
        await _send(response, shape.chunk(None, first=True, **nulls))
    event = first
    while True:
        if isinstance(event, TokenEvent):
            if event.text:
                await _send(response, shape.chunk(event.text, **nulls))
        elif event.ok:
            await _send(response, shape.last_chunk(event, job.include_usage))
            if job.include_usage:
                await _send(response, shape.usage_chunk(event))
            await response.write(b"data: [DONE]\n\n")
            break
        else:
            await _send(response, _refusal_body(event)[1])  # the status line is gone: say it in the stream
            break
        event = await anext(stream)
    await response.write_eof()


async def _send(response: web.StreamResponse, obj: dict) -> None:
    await response.write(b"data: " + json.dumps(obj, ensure_ascii=False).encode() + b"\n\n")


def refusal(final: FinishEvent) -> web.Response:
    status, body = _refusal_body(final)
    return web.json_response(body, status=status)


def _refusal_body(final: FinishEvent) -> tuple[int, dict]:
    if final.reason is FinishReason.CANCELLED:
        return 503, error_body(f"the request was cut short: {final.notice or 'cancelled'}", "unavailable_error")
    if final.stats.prompt_tokens == 0:  # refused before reading it (e.g. longer than the context)
        return 400, error_body(final.error or "the engine refused the request")
    return 500, error_body(final.error or "the engine failed", "server_error")
