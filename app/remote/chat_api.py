"""The chat completions API (`/chat/completions`): the body a reply is asked with, and its stream read."""

from __future__ import annotations

import time
from collections.abc import Sequence

from app.engine.events import FinishReason
from app.engine.sampling.params import SAMPLING_FIELDS, SamplingParams

from .endpoint import Endpoint, RemoteError
from .output_format import output_of
from .pictures import chat_turn
from .wire import _as, _clip, _get, _Reply, _valid_text, sse_data

PATH = "/chat/completions"
REASONS = {"stop": FinishReason.STOP, "length": FinishReason.LENGTH}
DEFAULTS = SamplingParams()


class ChatApi:
    """The chat API as RemoteClient asks it: one body a reply, nothing kept between replies."""

    path = PATH
    unfinished = "the stream ended without a final chunk"

    def bodies(self, endpoint: Endpoint, messages, params: SamplingParams, conversation_id: str | None) -> list[dict]:
        return [body(endpoint, messages, params)]

    def read_line(self, line: str, reply: _Reply) -> list[str]:
        return _read_line(line, reply)

    def read_whole(self, whole, reply: _Reply) -> None:
        _read_whole(whole, reply)

    def remember(self, reply: _Reply, messages) -> None:
        pass

    def forget(self, conversation_id: str | None) -> None:
        pass


def body(endpoint: Endpoint, messages: Sequence[dict[str, str]], params: SamplingParams) -> dict:
    # role and content only: an earlier reply's thoughts are a local model's, which OpenAI's API would refuse
    turns = [chat_turn(m) for m in messages]  # a message's pictures as image_url parts
    body = {"messages": turns, "stream": True, "stream_options": {"include_usage": True}}
    # a pane's sliders always (the endpoint's defaults may differ); the other knobs where they are not ours
    body.update(knob_fields(params, {f.name for f in SAMPLING_FIELDS if f.slider is not None and not f.advanced}))
    optional = {"model": endpoint.model, "seed": params.seed, "stop": list(params.stop), "ignore_eos": params.ignore_eos}
    body.update({k: v for k, v in optional.items() if v not in (None, "", [], False)})
    output = output_of(params)
    if output is not None:
        body.update(output.chat_fields())
    return body


def knob_fields(params: SamplingParams, always: set[str], skip: tuple[str, ...] = ()) -> dict:
    """The sampling knobs as a body's fields: those named in `always`, and the others but `skip` where
    `params` moved them from our defaults."""
    fields = {}
    for f in SAMPLING_FIELDS:
        value = getattr(params, f.name)
        if f.name not in skip and (f.name in always or value != getattr(DEFAULTS, f.name)):
            fields.update(dict.fromkeys(f.sent_as, f.to_json(value)))
    return fields


def _read_line(line: str, reply: _Reply) -> list[str]:
    """The text pieces of one server-sent-events line; the usage, timings and finish reason noted."""
    chunk = sse_data(line, "an OpenAI stream", "a chunk that is not OpenAI JSON")
    return [] if chunk is None else _read_chunk(chunk, reply)


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
        delta = _get(choice, "delta", dict) or {}
        content = _get(delta, "content", str)
        _note_thoughts(delta, reply)
        if content:
            pieces.append(_valid_text(content))
        _note_reason(choice, reply)
    return pieces


def _note_thoughts(part: dict, reply: _Reply) -> None:
    """A thinking model's thoughts, apart from the content: llama-server's and vLLM's `reasoning_content`,
    or `reasoning` (vLLM's newer name, OpenRouter's)."""
    thought = _get(part, "reasoning_content", str) or _get(part, "reasoning", str)
    if thought:
        reply.thoughts.append(_valid_text(thought))


def _read_whole(body, reply: _Reply) -> None:
    body = _as(body, dict, "a reply")
    _check_error(body)
    choices = _get(body, "choices", list)
    message = _get(_as(choices[0], dict, "a choice"), "message", dict) if choices else None
    if message is None:
        raise RemoteError(f"the endpoint sent JSON that is not a chat completion: {_clip(body)}")
    reply.pieces.append(_valid_text(_get(message, "content", str) or ""))
    _note_thoughts(message, reply)
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
