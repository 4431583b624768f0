"""The chat and completions APIs' common path: a job's choices submitted together, then answered
whole, or streamed as chunks over the one SSE tail (`sse.py`)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import AsyncExitStack, aclosing

from aiohttp import web

from app.engine.events import FinishEvent, TokenEvent

from .. import sse
from ..protocol import Job
from ..shaping import Shape, dumps
from .submit import SERVER, Reply, first_events, merged, refusal, refusal_body


class Choice:
    """One choice of a reply as the API sends it: its text as it comes, with its tokens' probabilities."""

    def __init__(self, shape: Shape, job: Job, reply: Reply):
        self.shape = shape
        self.job = job
        self.reply = reply
        self.nulls = {"usage": None} if job.include_usage else {}  # with include_usage every chunk but the last says null

    def chunks(self, event: TokenEvent) -> list[dict]:
        """The chunks a token makes (its answer's text, its thoughts' as `reasoning_content`); a token
        held back (a possible stop string) is told with the text it ends up in."""
        if not event.text and not event.reasoning:
            return []
        probs = self.reply.take_probs()
        return [self.shape.chunk(event.text, index=self.reply.index, probs=probs, reasoning=event.reasoning, **self.nulls)]

    def last(self, final: FinishEvent) -> list[dict]:
        """The chunks that end the choice: its finish reason, timings and any probabilities not yet sent."""
        return [self.shape.last_chunk(final, self.job.include_usage, self.reply.index, self.reply.take_probs())]

    def whole(self, choice: dict, final: FinishEvent) -> None:
        """A whole answer's choice, once shaped: a plain one adds nothing to it."""


async def serve_choices(request: web.Request, model: str, job: Job, kind: type[Choice] = Choice) -> web.StreamResponse:
    """Submit the job's `n` choices and answer them; `kind`: what a choice sends."""
    server = request.app[SERVER]
    shape = Shape(job.is_chat, model, job.post_sampling_probs)
    with server.admit(job.n):
        # leaving early (a client gone, an error) closes the streams, and that cancels their requests
        async with AsyncExitStack() as stack:
            streams = [await stack.enter_async_context(aclosing(server.submit(job, model, i))) for i in range(job.n)]
            firsts = await first_events(streams)
            for first in firsts:  # the headers wait for them: a refused prompt is still a 400
                if isinstance(first, FinishEvent) and not first.ok:
                    return refusal(first)
            choices = [kind(shape, job, Reply(i, first, stream)) for i, (first, stream) in enumerate(zip(firsts, streams))]
            if job.stream:
                return await sse.stream(request, _chunks(shape, job, choices))
            return await _whole(shape, choices)


async def _whole(shape: Shape, choices: list[Choice]) -> web.Response:
    finals = [await choice.reply.final() for choice in choices]
    for final in finals:
        if not final.ok:
            return refusal(final)
    answer = shape.completion(finals, [choice.reply.probs for choice in choices])
    for choice, shaped, final in zip(choices, answer["choices"], finals):
        choice.whole(shaped, final)
    return web.json_response(answer, dumps=dumps)


async def _chunks(shape: Shape, job: Job, choices: list[Choice]) -> AsyncIterator[bytes]:
    """The stream's frames: each choice's chunks as its events come, a usage chunk when asked, then [DONE]."""
    if shape.is_chat:
        for choice in choices:
            yield sse.data(shape.chunk(None, first=True, index=choice.reply.index, **choice.nulls))
    finals: dict[int, FinishEvent] = {}
    # closed on any way out, so that no read of a stream is still running when the streams close
    async with aclosing(merged([choice.reply for choice in choices])) as events:
        async for reply, event in events:
            if isinstance(event, TokenEvent):
                chunks = choices[reply.index].chunks(event)
            elif event.ok:
                chunks = choices[reply.index].last(event)
                finals[reply.index] = event
            else:
                yield sse.data(refusal_body(event)[1])  # the status line is gone: say it in the stream
                return
            for chunk in chunks:
                yield sse.data(chunk)
    if job.include_usage:
        yield sse.data(shape.usage_chunk([finals[i] for i in sorted(finals)]))
    yield sse.DONE
