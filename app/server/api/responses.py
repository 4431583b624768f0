"""`/v1/responses`: a response created (whole, or streamed as its semantic events over the one SSE
tail), a stored one retrieved or deleted. The API's objects, without HTTP, are `app/server/responses/`."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import aclosing
from dataclasses import replace

from aiohttp import web

from app.engine.events import FinishEvent, TokenEvent

from .. import sse
from ..image_input import with_fetched
from ..protocol import parse_json, requested_model
from ..responses.request import parse_response
from ..responses.shape import ResponseShape, kept_of, status_of
from ..responses.store import Kept, NotFound
from ..responses.streamed import StreamedItems
from ..shaping import dumps
from .submit import SERVER, Reply, first_events, pictures_of, refusal, refusal_body, tool_syntax


async def create_response(request: web.Request) -> web.StreamResponse:
    server = request.app[SERVER]
    body = parse_json(await request.read())
    model, info = server.pick_model(requested_model(body))
    asked = parse_response(body, info.n_ctx_seq, server.responses, await tool_syntax(body, info), server.thinking)
    fetched = await pictures_of(asked.job.messages, info, model, server.allow_image_urls)
    if fetched:  # kept with the conversation as fetched: a continuation does not fetch them again
        job = replace(asked.job, messages=with_fetched(asked.job.messages, fetched))
        asked = replace(asked, job=job, turns=with_fetched(asked.turns, fetched))
    shape = ResponseShape(asked, model)
    with server.admit(1):
        async with aclosing(server.submit(asked.job, model)) as stream:
            (first,) = await first_events([stream])
            if isinstance(first, FinishEvent) and not first.ok:
                return refusal(first)
            reply = Reply(0, first, stream)
            if asked.job.stream:
                return await sse.stream(request, _events(server, shape, reply))
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


async def _events(server, shape: ResponseShape, reply: Reply) -> AsyncIterator[bytes]:
    """The stream's frames: the response begun, its items (thoughts, text, calls) as they are
    written, then the response ended, or failed."""
    for event in shape.opening_events():
        yield sse.event(event)
    items = StreamedItems(shape)
    while isinstance(final := await reply.event(), TokenEvent):
        events = items.think(final.reasoning) if final.reasoning else []
        if final.text:
            events += items.feed(final.text)
        for event in events:
            yield sse.event(event)
    for event in _closing_events(server, shape, final, items):
        yield sse.event(event)


def _closing_events(server, shape: ResponseShape, final: FinishEvent, items: StreamedItems) -> list[dict]:
    if not final.ok:
        return shape.failure_events(refusal_body(final)[1]["error"])
    closing = items.finish(status_of(final))  # the last item closed before the response is
    return closing + shape.closing_events(_finish_response(server, shape, final, items.items))


async def get_response(request: web.Request) -> web.Response:
    return web.json_response(_kept(request).response, dumps=dumps)


async def delete_response(request: web.Request) -> web.Response:
    response_id = _kept(request).response["id"]
    request.app[SERVER].responses.delete(response_id)
    return web.json_response({"id": response_id, "object": "response", "deleted": True})


def _kept(request: web.Request) -> Kept:
    response_id = request.match_info["response_id"]
    kept = request.app[SERVER].responses.get(response_id)
    if kept is None:
        raise NotFound(f"Response with id '{response_id[:80]}' not found.", "response_id")
    return kept
