"""OpenAI's Responses API (`/v1/responses`): its requests checked and turned into one engine job, its
response objects and stream events, and the conversations kept for `previous_response_id`."""

from __future__ import annotations

import sys
import time
import uuid
from collections import OrderedDict
from dataclasses import dataclass, field

from app.engine.events import FinishEvent, FinishReason

from .output_format import text_format_grammar
from .protocol import (
    MAX_MESSAGES,
    BadRequest,
    Job,
    chat_messages,
    check_size,
    check_text,
    get_field,
    honoured,
    message_of,
    prompt_chars,
    sampling,
    shown,
    with_tools,
)
from .response_tools import call_output, call_turn, chat_tools, function_call, input_text, new_item_id, tool_echo
from .tool_calls import parse_tools, reply_of
from .tool_syntax import GENERIC, Syntax

# memory for the stored responses, whose conversations are kept for `previous_response_id` (and GET):
# beyond it the least recently used is dropped; a chain's responses share their common turns, counted once
STORE_BYTES = 256 * 2**20
# OpenAI's rules for `metadata`
MAX_METADATA_PAIRS = 16
MAX_METADATA_KEY_CHARS = 64
MAX_METADATA_VALUE_CHARS = 512
# what a response echoes of its `text.format`: the API's fields of each type, no other
FORMAT_FIELDS = ("type", "name", "description", "schema", "strict")
# the request fields that set a sampling knob of sampling/fields.py; the length is `max_output_tokens`
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
HONOURED |= {"metadata", "user", "text", "tools", "tool_choice", "parallel_tool_calls", *SAMPLING_KEYS}
# fields a client may send with the value that asks for nothing this server lacks (their defaults)
NO_OPS = {
    "include": lambda v: v == [],
    "truncation": lambda v: v == "disabled",
    "background": lambda v: v is False,
}
TEXT = {"format": {"type": "text"}}
NO_TOOLS = {"tools": [], "tool_choice": "none", "parallel_tool_calls": False}


@dataclass(frozen=True)
class Kept:
    """A stored response: its object (for GET) and its conversation (without instructions) for a continuation."""

    response: dict
    conversation_id: str
    messages: tuple[dict, ...]  # in the chat API's form: an assistant turn's calls as `tool_calls`, results as `role: "tool"`


@dataclass(frozen=True)
class ResponseRequest:
    """One `POST /v1/responses`: the engine job and what its response object echoes."""

    job: Job
    turns: tuple[dict, ...]  # the conversation so far and the new input (chat form), without instructions
    store: bool
    instructions: str | None
    previous_response_id: str | None
    max_output_tokens: int | None
    metadata: dict = field(default_factory=dict)
    user: str | None = None  # echoed
    text: dict = field(default_factory=lambda: TEXT)  # the format asked, echoed
    tooling: dict = field(default_factory=lambda: NO_TOOLS)  # tools, tool_choice and parallel_tool_calls, echoed


class KeptResponses:
    """The stored responses within `budget_bytes` of memory, the least recently used (created,
    retrieved or continued) dropped first. A turn that several responses of a chain hold is one
    object among them, so it is counted once, while any of them holds it."""

    def __init__(self, budget_bytes: int = STORE_BYTES):
        self.budget_bytes = budget_bytes
        self.bytes = 0  # held now: every kept response's object, and each turn they hold once
        self.dropped = 0  # responses dropped for room (or too large to keep at all)
        self._kept: OrderedDict[str, tuple[Kept, int]] = OrderedDict()  # by id: the response, its object's bytes
        self._turns: dict[int, list] = {}  # id(turn) -> [the turn, its bytes, how many responses hold it]

    def __len__(self) -> int:
        return len(self._kept)

    def get(self, response_id: str) -> Kept | None:
        entry = self._kept.get(response_id)
        if entry is None:
            return None
        self._kept.move_to_end(response_id)
        return entry[0]

    def keep(self, kept: Kept) -> None:
        """Keep `kept`, dropping the least recently used for room; one larger than the whole budget is not kept."""
        self.delete(kept.response["id"])
        own = footprint(kept.response)
        new_turns = {id(turn): turn for turn in kept.messages if id(turn) not in self._turns}
        sizes = {key: footprint(turn) for key, turn in new_turns.items()}
        if own + sum(sizes.values()) > self.budget_bytes:
            self.dropped += 1
            return
        for turn in kept.messages:
            key = id(turn)
            if key in self._turns:
                self._turns[key][2] += 1
            else:
                self._turns[key] = [turn, sizes[key], 1]
                self.bytes += sizes[key]
        self._kept[kept.response["id"]] = (kept, own)
        self.bytes += own
        while self.bytes > self.budget_bytes:
            self._forget(*self._kept.popitem(last=False)[1])
            self.dropped += 1

    def delete(self, response_id: str) -> bool:
        entry = self._kept.pop(response_id, None)
        if entry is not None:
            self._forget(*entry)
        return entry is not None

    def _forget(self, kept: Kept, own: int) -> None:
        self.bytes -= own
        for turn in kept.messages:
            held = self._turns[id(turn)]
            held[2] -= 1
            if held[2] == 0:
                del self._turns[id(turn)]
                self.bytes -= held[1]


def footprint(value) -> int:
    """The bytes a JSON-like value takes in memory: sys.getsizeof of it and of everything in it."""
    total, pending = 0, [value]
    while pending:  # not recursive: a schema may nest as deep as the JSON reader allows
        item = pending.pop()
        total += sys.getsizeof(item)
        if isinstance(item, dict):
            pending += item.keys()
            pending += item.values()
        elif isinstance(item, (list, tuple)):
            pending += item
    return total


class NotFound(Exception):
    """A response id this server does not keep: HTTP 404 with this message."""

    def __init__(self, message: str, param: str | None = None):
        super().__init__(message)
        self.param = param


def parse_response(body: dict, n_ctx_seq: int, kept: KeptResponses, syntax: Syntax = GENERIC) -> ResponseRequest:
    """`syntax`: the tool-call syntax the model's template writes (tool_syntax.py)."""
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
    if len(system + turns) > MAX_MESSAGES:
        raise BadRequest(f"at most {MAX_MESSAGES} messages in one conversation; this one has {len(system + turns)}", "input")
    tools = honoured(parse_tools, chat_tools(body), syntax)
    limit = get_field(body, "max_output_tokens", int, None)
    text = body.get("text")
    grammar = None if text is None else honoured(text_format_grammar, text)
    held, messages = with_tools(tools, grammar, chat_messages(list(system + turns), tools))
    check_size(prompt_chars(messages, held), n_ctx_seq, "input")
    params = sampling(_sampling_body(body, limit)).with_(**held)
    conversation_id = previous.conversation_id if previous else f"resp-{uuid.uuid4().hex[:16]}"
    stream = get_field(body, "stream", bool, False)
    job = Job(params, messages=messages, conversation_id=conversation_id, stream=stream, tools=tools)
    metadata = _metadata(body)
    user = get_field(body, "user", str, None)
    store = get_field(body, "store", bool, True)
    tooling = tool_echo(body) if tools is not None else NO_TOOLS
    echoed = TEXT if text is None else {"format": {k: v for k, v in text["format"].items() if k in FORMAT_FIELDS}}
    user = None if user is None else check_text(user, "user")
    return ResponseRequest(job, turns, store, instructions, previous_id, limit, metadata, user, echoed, tooling)


def _metadata(body: dict) -> dict[str, str]:
    """`metadata` as OpenAI takes it: at most 16 pairs, keys of at most 64 characters, string values of at most 512."""
    metadata = get_field(body, "metadata", dict, {})
    if len(metadata) > MAX_METADATA_PAIRS:
        raise BadRequest(
            f"Invalid 'metadata': too many properties. Expected an object with at most {MAX_METADATA_PAIRS} properties, "
            f"but got an object with {len(metadata)} properties instead.",
            "metadata",
            "object_above_max_properties",
        )
    for key, value in metadata.items():
        check_text(key, "metadata")
        if len(key) > MAX_METADATA_KEY_CHARS:
            raise BadRequest(
                f"Invalid 'metadata': a key is too long. Expected keys of at most {MAX_METADATA_KEY_CHARS} characters, "
                f"but got {shown(key)}, of {len(key)} characters.",
                "metadata",
                "string_above_max_length",
            )
        if not isinstance(value, str):
            raise BadRequest(
                f"Invalid type for 'metadata.{key}': expected a string, but got {shown(value)} instead.",
                "metadata",
                "invalid_type",
            )
        if len(value) > MAX_METADATA_VALUE_CHARS:
            raise BadRequest(
                f"Invalid 'metadata.{key}': string too long. Expected a string with maximum length "
                f"{MAX_METADATA_VALUE_CHARS}, but got a string with length {len(value)} instead.",
                "metadata",
                "string_above_max_length",
            )
        check_text(value, "metadata")
    return metadata


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


def _input(raw) -> tuple[dict, ...]:
    """A string (one user message) or a list of items: messages (role + content: a string or text
    parts), function calls and their outputs; in the chat API's form, a call joining the assistant
    turn before it."""
    if isinstance(raw, str):
        if not raw:
            raise BadRequest("'input' must not be empty", "input")
        return ({"role": "user", "content": check_text(raw, "input")},)
    if not isinstance(raw, list) or not raw:
        raise BadRequest("'input' must be a non-empty string or a non-empty list of message items", "input")
    if len(raw) > MAX_MESSAGES:
        raise BadRequest(f"at most {MAX_MESSAGES} input items in one request; got {len(raw)}", "input")
    turns: list[dict] = []
    for i, item in enumerate(raw):
        kind = item.get("type", "message") if isinstance(item, dict) else None
        if kind == "function_call":
            call = call_turn(item, f"input[{i}]")
            if turns and turns[-1]["role"] == "assistant":
                turns[-1] = {**turns[-1], "tool_calls": [*turns[-1].get("tool_calls", ()), call]}
            else:
                turns.append({"role": "assistant", "content": "", "tool_calls": [call]})
        elif kind == "function_call_output":
            turns.append(call_output(item, f"input[{i}]"))
        elif kind == "message":
            turns.append(
                message_of({"role": item.get("role"), "content": input_text(item.get("content"), f"input[{i}].content")}, i)
            )
        else:
            what = shown(kind) if isinstance(item, dict) else "not an object"
            raise BadRequest(
                f"input[{i}]: only message, function_call and function_call_output items are supported; got {what}",
                f"input[{i}]",
            )
    return tuple(turns)


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

    def response(
        self, status: str = "in_progress", final: FinishEvent | None = None, error: dict | None = None, output: list | None = None
    ) -> dict:
        params = self.asked.job.params
        cut = final is not None and status_of(final) == "incomplete"
        if output is None:
            output = self.output_of(final.text, status_of(final)) if final is not None else []
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
            "output": output,
            "parallel_tool_calls": self.asked.tooling["parallel_tool_calls"],
            "previous_response_id": self.asked.previous_response_id,
            "store": self.asked.store,
            "temperature": params.temperature,
            "top_p": params.top_p,
            "text": self.asked.text,
            "tool_choice": self.asked.tooling["tool_choice"],
            "tools": self.asked.tooling["tools"],
            "truncation": "disabled",
            "metadata": self.asked.metadata,
            "user": self.asked.user,
            "usage": usage(final) if final is not None else None,
        }

    def finished(self, final: FinishEvent, output: list | None = None) -> dict:
        return self.response(status_of(final), final, output=output)

    def output_of(self, text: str, status: str) -> list[dict]:
        """A whole reply's output items: its message, or (with tools) its text if any and a function_call per call."""
        tools = self.asked.job.tools
        if tools is None:
            return [self.item(text, status)]
        content, calls = reply_of(text, tools)
        message = [self.item(content, status)] if content is not None else []
        return message + [
            function_call(new_item_id("fc"), c["id"], c["function"]["name"], c["function"]["arguments"], status) for c in calls
        ]

    def item(self, text: str | None, status: str, item_id: str | None = None) -> dict:
        content = [] if text is None else [part(text)]
        return {"id": item_id or self.item_id, "type": "message", "status": status, "role": "assistant", "content": content}

    def event(self, kind: str, **fields) -> dict:
        event = {"type": kind, "sequence_number": self.sequence_number, **fields}
        self.sequence_number += 1
        return event

    def opening_events(self) -> list[dict]:
        """The response begun and, without tools, its one message item opened (with tools, the reply's
        items open as its text shows what they are)."""
        begun = [
            self.event("response.created", response=self.response()),
            self.event("response.in_progress", response=self.response()),
        ]
        return begun if self.asked.job.tools is not None else begun + self.message_opened(self.item_id, 0)

    def message_opened(self, item_id: str, index: int) -> list[dict]:
        where = {"item_id": item_id, "output_index": index, "content_index": 0}
        return [
            self.event("response.output_item.added", output_index=index, item=self.item(None, "in_progress", item_id)),
            self.event("response.content_part.added", **where, part=part("")),
        ]

    def delta(self, text: str, item_id: str | None = None, index: int = 0) -> dict:
        where = {"item_id": item_id or self.item_id, "output_index": index, "content_index": 0}
        return self.event("response.output_text.delta", **where, delta=text, logprobs=[])

    def closing_events(self, whole: dict) -> list[dict]:
        """The message item closed (without tools: they close as they come), then the response."""
        items = self.message_closed(whole["output"][0], 0) if self.asked.job.tools is None else []
        return items + [self.ended(whole)]

    def message_closed(self, item: dict, index: int) -> list[dict]:
        where = {"item_id": item["id"], "output_index": index, "content_index": 0}
        text = item["content"][0]["text"]
        return [
            self.event("response.output_text.done", **where, text=text, logprobs=[]),
            self.event("response.content_part.done", **where, part=part(text)),
            self.event("response.output_item.done", output_index=index, item=item),
        ]

    def ended(self, whole: dict) -> dict:
        return self.event("response.completed" if whole["status"] == "completed" else "response.incomplete", response=whole)

    def failure_events(self, error: dict) -> list[dict]:
        """A fault after the status line: an `error` event, then the response failed."""
        code = error.get("code") or error.get("type")
        failed = self.response("failed", error={"code": code, "message": error["message"]})
        return [
            self.event("error", code=code, message=error["message"], param=error.get("param")),
            self.event("response.failed", response=failed),
        ]


def status_of(final: FinishEvent) -> str:
    return "incomplete" if final.reason in (FinishReason.LENGTH, FinishReason.CONTEXT) else "completed"


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


def kept_of(asked: ResponseRequest, whole: dict) -> Kept:
    """What a stored response keeps: its object, and its conversation with the reply (its text and
    calls, in the chat API's form) for the next turn."""
    output = whole["output"]
    text = "".join(p["text"] for item in output if item["type"] == "message" for p in item["content"])
    calls = [
        {"id": c["call_id"], "type": "function", "function": {"name": c["name"], "arguments": c["arguments"]}}
        for c in output
        if c["type"] == "function_call"
    ]
    reply = {"role": "assistant", "content": text} | ({"tool_calls": calls} if calls else {})
    return Kept(whole, asked.job.conversation_id, asked.turns + (reply,))
