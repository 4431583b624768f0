"""OpenAI's Responses API (`/v1/responses`): its requests checked and turned into one engine job, its
response objects and stream events, and the conversations kept for `previous_response_id`."""

from __future__ import annotations

import time
import uuid
from collections import OrderedDict
from dataclasses import dataclass, field

from app.engine.events import FinishEvent, FinishReason

from .output_format import text_format_grammar
from .protocol import MAX_MESSAGES, BadRequest, Job, check_size, check_text, get_field, honoured, message_of, sampling, shown

# stored responses whose conversations are kept for `previous_response_id` (and GET): beyond this,
# the least recently used is dropped; their messages share their common turns, so a chain costs its text once
MAX_KEPT_RESPONSES = 512
# the request fields that set a sampling knob of sampling_fields.py; the length is `max_output_tokens`
SAMPLING_KEYS = (
    "temperature",
    "top_p",
    "top_k",
    "min_p",
    "repeat_penalty",
    "repetition_penalty",
    "repeat_last_n",
    "frequency_penalty",
    "presence_penalty",
    "seed",
)
HONOURED = {"model", "input", "instructions", "max_output_tokens", "stream", "store", "previous_response_id"}
HONOURED |= {"metadata", "user", "text", *SAMPLING_KEYS}
# fields a client may send with the value that asks for nothing this server lacks (their defaults)
NO_OPS = {
    "tools": lambda v: v == [],
    "tool_choice": lambda v: v in ("none", "auto"),
    "parallel_tool_calls": lambda v: isinstance(v, bool),
    "include": lambda v: v == [],
    "truncation": lambda v: v == "disabled",
    "background": lambda v: v is False,
}
INPUT_PART_TYPES = ("input_text", "output_text", "text")
TEXT = {"format": {"type": "text"}}


@dataclass(frozen=True)
class Kept:
    """A stored response: its object (for GET) and its conversation (without instructions) for a continuation."""

    response: dict
    conversation_id: str
    messages: tuple[dict[str, str], ...]


@dataclass(frozen=True)
class ResponseRequest:
    """One `POST /v1/responses`: the engine job and what its response object echoes."""

    job: Job
    turns: tuple[dict[str, str], ...]  # the conversation so far and the new input, without instructions
    store: bool
    instructions: str | None
    previous_response_id: str | None
    max_output_tokens: int | None
    metadata: dict = field(default_factory=dict)
    text: dict = field(default_factory=lambda: TEXT)  # the format asked, echoed


class KeptResponses:
    """The stored responses, least recently used dropped first beyond `limit`."""

    def __init__(self, limit: int = MAX_KEPT_RESPONSES):
        self.limit = limit
        self._kept: OrderedDict[str, Kept] = OrderedDict()

    def __len__(self) -> int:
        return len(self._kept)

    def get(self, response_id: str) -> Kept | None:
        kept = self._kept.get(response_id)
        if kept is not None:
            self._kept.move_to_end(response_id)
        return kept

    def keep(self, kept: Kept) -> None:
        self._kept[kept.response["id"]] = kept
        self._kept.move_to_end(kept.response["id"])
        while len(self._kept) > self.limit:
            self._kept.popitem(last=False)

    def delete(self, response_id: str) -> bool:
        return self._kept.pop(response_id, None) is not None


class NotFound(Exception):
    """A response id this server does not keep: HTTP 404 with this message."""

    def __init__(self, message: str, param: str | None = None):
        super().__init__(message)
        self.param = param


def parse_response(body: dict, n_ctx_seq: int, kept: KeptResponses) -> ResponseRequest:
    _refuse_unsupported(body)
    previous_id = get_field(body, "previous_response_id", str, None)
    previous = None
    if previous_id is not None:
        previous = kept.get(previous_id)
        if previous is None:
            raise NotFound(f"Previous response with id '{shown(previous_id)[1:-1]}' not found.", "previous_response_id")
    instructions = get_field(body, "instructions", str, None)
    turns = (previous.messages if previous else ()) + _input(body.get("input"))
    system = ({"role": "system", "content": check_text(instructions, "instructions")},) if instructions else ()
    messages = system + turns
    if len(messages) > MAX_MESSAGES:
        raise BadRequest(f"at most {MAX_MESSAGES} messages in one conversation; this one has {len(messages)}", "input")
    check_size(sum(len(m["content"]) for m in messages), n_ctx_seq, "input")
    limit = get_field(body, "max_output_tokens", int, None)
    text = body.get("text")
    grammar = None if text is None else honoured(text_format_grammar, text)
    params = sampling(_sampling_body(body, limit)).with_(grammar=grammar)
    conversation_id = previous.conversation_id if previous else f"resp-{uuid.uuid4().hex[:16]}"
    job = Job(params, messages=messages, conversation_id=conversation_id, stream=get_field(body, "stream", bool, False))
    metadata = get_field(body, "metadata", dict, {})
    get_field(body, "user", str, None)
    store = get_field(body, "store", bool, True)
    return ResponseRequest(job, turns, store, instructions, previous_id, limit, metadata, text or TEXT)


def _refuse_unsupported(body: dict) -> None:
    """Every field is honoured, a no-op at its default, or refused by name: none is silently dropped."""
    refused = [k for k, v in body.items() if v is not None and k not in HONOURED and not NO_OPS.get(k, _never)(v)]
    if refused:
        names = ", ".join(shown(k) for k in sorted(refused)[:8])
        raise BadRequest(
            f"this server's Responses API does not support {names}; it supports {', '.join(sorted(HONOURED))}",
            refused[0] if len(refused[0]) <= 64 else None,
        )


def _never(_value) -> bool:
    return False


def _sampling_body(body: dict, limit: int | None) -> dict:
    """The fields sampling() reads, under the chat API's names (max_output_tokens is its max_tokens)."""
    fields = {k: body[k] for k in SAMPLING_KEYS if body.get(k) is not None}
    if limit is not None:
        if limit < 1:
            raise BadRequest(f"'max_output_tokens' must be at least 1; got {limit}", "max_output_tokens")
        fields["max_tokens"] = limit
    return fields


def _input(raw) -> tuple[dict[str, str], ...]:
    """A string (one user message) or a list of message items (role + content: a string or text parts)."""
    if isinstance(raw, str):
        if not raw:
            raise BadRequest("'input' must not be empty", "input")
        return ({"role": "user", "content": check_text(raw, "input")},)
    if not isinstance(raw, list) or not raw:
        raise BadRequest("'input' must be a non-empty string or a non-empty list of message items", "input")
    if len(raw) > MAX_MESSAGES:
        raise BadRequest(f"at most {MAX_MESSAGES} input items in one request; got {len(raw)}", "input")
    return tuple(_item(item, i) for i, item in enumerate(raw))


def _item(item, index: int) -> dict[str, str]:
    where = f"input[{index}]"
    if not isinstance(item, dict) or item.get("type", "message") != "message":
        kind = shown(item.get("type")) if isinstance(item, dict) else "not an object"
        raise BadRequest(f"{where}: only message items (role and content) are supported; got {kind}", where)
    content = item.get("content")
    if isinstance(content, list):
        for part in content:
            if not isinstance(part, dict) or part.get("type") not in INPUT_PART_TYPES or not isinstance(part.get("text"), str):
                raise BadRequest(f"{where}.content: only input_text parts are supported", f"{where}.content")
        content = "".join(p["text"] for p in content)
    elif not isinstance(content, str):
        raise BadRequest(f"{where}.content must be a string or a list of input_text parts", f"{where}.content")
    return message_of({"role": item.get("role"), "content": content}, index)


# -- what the server answers -------------------------------------------------------------------


class ResponseShape:
    """One response's identity, its object at each stage and its stream events, numbered in order."""

    def __init__(self, asked: ResponseRequest, model: str):
        self.asked = asked
        self.model = model
        self.id = f"resp_{uuid.uuid4().hex}"
        self.item_id = f"msg_{uuid.uuid4().hex}"
        self.created_at = int(time.time())
        self.sequence_number = 0

    def response(self, status: str = "in_progress", final: FinishEvent | None = None, error: dict | None = None) -> dict:
        params = self.asked.job.params
        cut = final is not None and final.reason in (FinishReason.LENGTH, FinishReason.CONTEXT)
        return {
            "id": self.id,
            "object": "response",
            "created_at": self.created_at,
            "status": status,
            "error": error,
            "incomplete_details": {"reason": "max_output_tokens"} if cut else None,
            "instructions": self.asked.instructions,
            "max_output_tokens": self.asked.max_output_tokens,
            "model": self.model,
            "output": [self.item(final.text, "incomplete" if cut else "completed")] if final is not None else [],
            "parallel_tool_calls": False,
            "previous_response_id": self.asked.previous_response_id,
            "store": self.asked.store,
            "temperature": params.temperature,
            "top_p": params.top_p,
            "text": self.asked.text,
            "tool_choice": "none",
            "tools": [],
            "truncation": "disabled",
            "metadata": self.asked.metadata,
            "usage": usage(final) if final is not None else None,
        }

    def finished(self, final: FinishEvent) -> dict:
        cut = final.reason in (FinishReason.LENGTH, FinishReason.CONTEXT)
        return self.response("incomplete" if cut else "completed", final)

    def item(self, text: str | None, status: str) -> dict:
        content = [] if text is None else [part(text)]
        return {"id": self.item_id, "type": "message", "status": status, "role": "assistant", "content": content}

    def event(self, kind: str, **fields) -> dict:
        event = {"type": kind, "sequence_number": self.sequence_number, **fields}
        self.sequence_number += 1
        return event

    def opening_events(self) -> list[dict]:
        where = {"item_id": self.item_id, "output_index": 0, "content_index": 0}
        return [
            self.event("response.created", response=self.response()),
            self.event("response.in_progress", response=self.response()),
            self.event("response.output_item.added", output_index=0, item=self.item(None, "in_progress")),
            self.event("response.content_part.added", **where, part=part("")),
        ]

    def delta(self, text: str) -> dict:
        return self.event(
            "response.output_text.delta", item_id=self.item_id, output_index=0, content_index=0, delta=text, logprobs=[]
        )

    def closing_events(self, final: FinishEvent, whole: dict) -> list[dict]:
        where = {"item_id": self.item_id, "output_index": 0, "content_index": 0}
        kind = "response.completed" if whole["status"] == "completed" else "response.incomplete"
        return [
            self.event("response.output_text.done", **where, text=final.text, logprobs=[]),
            self.event("response.content_part.done", **where, part=part(final.text)),
            self.event("response.output_item.done", output_index=0, item=whole["output"][0]),
            self.event(kind, response=whole),
        ]

    def failure_events(self, error: dict) -> list[dict]:
        """A fault after the status line: an `error` event, then the response failed."""
        code = error.get("code") or error.get("type")
        failed = self.response("failed", error={"code": code, "message": error["message"]})
        return [
            self.event("error", code=code, message=error["message"], param=error.get("param")),
            self.event("response.failed", response=failed),
        ]


def part(text: str) -> dict:
    return {"type": "output_text", "text": text, "annotations": [], "logprobs": []}


def usage(final: FinishEvent) -> dict:
    st = final.stats
    return {
        "input_tokens": st.prompt_tokens,
        "input_tokens_details": {"cached_tokens": st.cached_tokens},
        "output_tokens": st.gen_tokens,
        "output_tokens_details": {"reasoning_tokens": 0},
        "total_tokens": st.prompt_tokens + st.gen_tokens,
    }


def kept_of(asked: ResponseRequest, whole: dict, final: FinishEvent) -> Kept:
    """What a stored response keeps: its object, and its conversation with the reply for the next turn."""
    turns = asked.turns + ({"role": "assistant", "content": final.text},)
    return Kept(whole, asked.job.conversation_id, turns)
