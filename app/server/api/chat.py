"""`POST /v1/chat/completions`: a chat checked (`protocol.py`), its choices served (`choices.py`); a
reply that may call tools sends its content and its calls as OpenAI's."""

from __future__ import annotations

from dataclasses import replace

from aiohttp import web

from app.engine.events import FinishEvent, FinishReason, TokenEvent

from ..image_input import with_fetched
from ..protocol import parse_chat, parse_json, requested_model
from ..tool_calls import reply_of
from ..tool_parse import ToolStream
from .choices import Choice, serve_choices
from .submit import SERVER, pictures_of, tool_syntax


async def chat_completions(request: web.Request) -> web.StreamResponse:
    server = request.app[SERVER]
    body = parse_json(await request.read())
    model, info = server.pick_model(requested_model(body))
    job = parse_chat(body, info.n_ctx_seq, await tool_syntax(body, info), server.thinking)
    fetched = await pictures_of(job.messages, info, model, server.allow_image_urls)
    if fetched:
        job = replace(job, messages=with_fetched(job.messages, fetched))
    return await serve_choices(request, model, job, Choice if job.tools is None else ToolChoice)


class ToolChoice(Choice):
    """A choice that may call tools. Streamed: content as it comes, each call's id, type and name once
    its name is whole, then its arguments' text as the model writes it; no token probabilities."""

    def __init__(self, shape, job, reply):
        super().__init__(shape, job, reply)
        self.text = ""
        self.stream = ToolStream(job.tools.syntax, job.tools.new_id)

    def chunks(self, event: TokenEvent) -> list[dict]:
        self.reply.take_probs()
        thought = [{"reasoning_content": event.reasoning}] if event.reasoning else []
        if not event.text:
            return self._deltas(thought)
        self.text += event.text
        return self._deltas(thought + self.stream.feed(self.text))

    def last(self, final: FinishEvent) -> list[dict]:
        self.reply.take_probs()
        chunks = self._deltas(self.stream.feed(final.text, final=True))
        last = self.shape.last_chunk(final, self.job.include_usage, self.reply.index)
        if self.stream.has_calls and final.reason is FinishReason.STOP:
            last["choices"][0]["finish_reason"] = "tool_calls"
        return chunks + [last]

    def whole(self, choice: dict, final: FinishEvent) -> None:
        content, calls = reply_of(final.text, self.job.tools)
        choice["message"]["content"] = content  # its thoughts stay as Shape put them
        if calls:
            choice["message"]["tool_calls"] = calls
            if final.reason is FinishReason.STOP:
                choice["finish_reason"] = "tool_calls"

    def _deltas(self, deltas: list[dict]) -> list[dict]:
        chunks = []
        for delta in deltas:
            chunk = self.shape.chunk(None, index=self.reply.index, **self.nulls)
            chunk["choices"][0]["delta"] = delta
            chunks.append(chunk)
        return chunks
