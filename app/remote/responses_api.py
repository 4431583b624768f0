"""OpenAI's Responses API (`/responses`) as RemoteClient asks it: a conversation goes on from its last
response by `previous_response_id` (only the new turn is sent), and the semantic events are read."""

from __future__ import annotations

import time
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass

from app.engine.events import FinishReason
from app.engine.sampling.params import SamplingParams

from .chat_api import knob_fields
from .endpoint import Endpoint, RemoteError
from .output_format import output_of
from .pictures import responses_turn
from .wire import _as, _clip, _get, _Reply, _valid_text, sse_data

PATH = "/responses"
CONVERSATIONS_CONTINUED = 256  # the last response of the most recent conversations, to go on from


@dataclass(frozen=True)
class LastResponse:
    """A conversation's last response: its id and the chat it saw, its reply included."""

    response_id: str
    instructions: str | None
    turns: tuple[dict[str, str], ...]


class ResponsesApi:
    """The bodies a reply is asked with and its events read; per conversation, the response to go on from."""

    path = PATH
    unfinished = "the stream ended without response.completed"

    def __init__(self, limit: int = CONVERSATIONS_CONTINUED):
        self.limit = limit
        self.last: OrderedDict[str, LastResponse] = OrderedDict()

    def bodies(self, endpoint: Endpoint, messages, params: SamplingParams, conversation_id: str | None) -> list[dict]:
        """The whole chat; first, when this conversation's last response saw all of it but the new user
        turn, that turn alone after its id (the whole chat then follows if the server no longer keeps it)."""
        instructions, turns = _split(messages)
        whole = _body(endpoint, params, instructions, turns)
        last = self.last.get(conversation_id) if conversation_id else None
        if last is None or last.instructions != instructions or turns[:-1] != last.turns or turns[-1]["role"] != "user":
            return [whole]
        self.last.move_to_end(conversation_id)
        return [_body(endpoint, params, instructions, turns[-1:], last.response_id), whole]

    def read_line(self, line: str, reply: _Reply) -> list[str]:
        """The text pieces of one server-sent-events line; the response's id, usage and end noted."""
        event = sse_data(line, "a Responses stream", "an event that is not JSON")
        return [] if event is None else _read_event(event, reply)

    def read_whole(self, whole, reply: _Reply) -> None:
        """A response object (the server ignored "stream")."""
        whole = _as(whole, dict, "a reply")
        if whole.get("error") or whole.get("status") == "failed":
            raise RemoteError(f"the endpoint failed: {_message(whole.get('error'))}")
        output = _get(whole, "output", list)
        if output is None:
            raise RemoteError(f"the endpoint sent JSON that is not a response: {_clip(whole)}")
        reply.pieces.append(_valid_text("".join(_texts(output))))
        reply.thoughts.append(_valid_text("".join(_texts(output, "reasoning", "reasoning_text"))))
        reply.stats.on_token(time.monotonic())
        _end("response.incomplete" if whole.get("status") == "incomplete" else "response.completed", whole, reply)

    def remember(self, reply: _Reply, messages) -> None:
        """Keep the response a conversation goes on from (only a reply that ended well has one)."""
        conversation_id = reply.stats.conversation_id
        if conversation_id is None:
            return
        self.last.pop(conversation_id, None)
        if reply.response_id is None or reply.reason not in (FinishReason.STOP, FinishReason.LENGTH):
            return
        instructions, turns = _split(messages)
        reply_turn = {"role": "assistant", "content": "".join(reply.pieces)}
        self.last[conversation_id] = LastResponse(reply.response_id, instructions, (*turns, reply_turn))
        while len(self.last) > self.limit:
            self.last.popitem(last=False)

    def forget(self, conversation_id: str | None) -> None:
        """The server no longer keeps this conversation's last response."""
        self.last.pop(conversation_id, None)


def _split(messages: Sequence[dict[str, str]]) -> tuple[str | None, tuple[dict[str, str], ...]]:
    """A leading system message as `instructions`, and the turns after it (role and content only)."""
    turns = tuple(responses_turn(m) for m in messages)  # a message's pictures as input_image parts
    if turns and turns[0]["role"] == "system":
        return turns[0]["content"], turns[1:]
    return None, turns


def _body(endpoint: Endpoint, params: SamplingParams, instructions: str | None, turns, previous_id: str | None = None) -> dict:
    body = {
        "input": [{"type": "message", **turn} for turn in turns],
        "stream": True,
        "store": True,
        "max_output_tokens": params.max_tokens,
    }
    # the Responses API's own knobs always; the others (llama-server's and serve's extensions) only where
    # the pane moved them: a pane at its defaults suits OpenAI, and a moved knob is never dropped unsaid
    body.update(knob_fields(params, {"temperature", "top_p"}, skip=("max_tokens",)))
    optional = {"model": endpoint.model, "instructions": instructions, "previous_response_id": previous_id, "seed": params.seed}
    body.update({k: v for k, v in optional.items() if v is not None and v != ""})
    output = output_of(params)
    if output is not None:
        body.update(output.responses_fields())
    return body


def _read_event(event, reply: _Reply) -> list[str]:
    event = _as(event, dict, "an event")
    kind = _get(event, "type", str)
    if kind is None:
        raise RemoteError(f"the endpoint sent an event without a type: {_clip(event)}")
    if kind == "response.output_text.delta":
        delta = _get(event, "delta", str)
        return [_valid_text(delta)] if delta else []
    if kind == "response.reasoning_text.delta":  # a thinking model's thoughts
        delta = _get(event, "delta", str)
        if delta:
            reply.thoughts.append(_valid_text(delta))
        return []
    if kind in ("response.created", "response.in_progress"):
        reply.response_id = _get(_get(event, "response", dict) or {}, "id", str) or reply.response_id
    elif kind in ("response.completed", "response.incomplete"):
        response = _get(event, "response", dict)
        if response is None:
            raise RemoteError(f"the endpoint sent {kind} without its response")
        _end(kind, response, reply)
    elif kind == "error":
        raise RemoteError(f"the endpoint failed: {_message(event)}")
    elif kind == "response.failed":
        raise RemoteError(f"the endpoint failed: {_message((_get(event, 'response', dict) or {}).get('error'))}")
    return []  # the events that add nothing here (output_item.added, output_text.done...) and any unknown


def _end(kind: str, response: dict, reply: _Reply) -> None:
    """The final event's response: the reason, the usage (in the chat API's names) and the id."""
    if kind == "response.incomplete":
        why = _get(_get(response, "incomplete_details", dict) or {}, "reason", str)
        if why != "max_output_tokens":
            raise RemoteError(f"the response is incomplete: {why or 'no reason given'}")
        reply.reason = FinishReason.LENGTH
    else:
        reply.reason = FinishReason.STOP
    reply.response_id = _get(response, "id", str) or reply.response_id
    usage = _get(response, "usage", dict)
    if usage is not None:
        reply.usage = {
            "prompt_tokens": usage.get("input_tokens"),
            "completion_tokens": usage.get("output_tokens"),
            "prompt_tokens_details": usage.get("input_tokens_details"),
            "completion_tokens_details": usage.get("output_tokens_details"),
        }
    reply.over = True


def _texts(output: list, kind: str = "message", part_kind: str = "output_text") -> list[str]:
    """The texts of a response's items of a kind: its messages' output_text, its reasoning's reasoning_text."""
    texts = []
    for item in output:
        item = _as(item, dict, "an output item")
        if item.get("type") != kind:
            continue
        for part in _get(item, "content", list) or []:
            part = _as(part, dict, "a content part")
            if part.get("type") == part_kind:
                texts.append(_get(part, "text", str) or "")
    return texts


def _message(error) -> str:
    message = error.get("message") if isinstance(error, dict) else error
    return message[:200] if isinstance(message, str) else _clip(error)
