"""A `POST /v1/responses` checked and turned into one engine job, with what its response echoes."""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field

from app.engine.sampling.params import SAMPLING_FIELDS

from ..output_format import text_format_grammar
from ..protocol import (
    DEFAULT_THINKING,
    MAX_MESSAGES,
    BadRequest,
    Job,
    Thinking,
    chat_messages,
    check_size,
    check_text,
    get_field,
    honoured,
    message_of,
    parse_thinking,
    prompt_chars,
    sampling,
    shown,
    with_tools,
)
from ..tool_calls import parse_tools
from ..tool_syntax import GENERIC, Syntax
from .items import call_output, call_turn, chat_tools, reasoning_text, tool_echo
from .store import KeptResponses, NotFound

# OpenAI's rules for `metadata`
MAX_METADATA_PAIRS = 16
MAX_METADATA_KEY_CHARS = 64
MAX_METADATA_VALUE_CHARS = 512
# what a response echoes of its `text.format`: the API's fields of each type, no other
FORMAT_FIELDS = ("type", "name", "description", "schema", "strict")
# the request fields that set a sampling knob (sampling/params.py), and the seed; the length is
# `max_output_tokens`, not the knob's own names
SAMPLING_KEYS = (*(name for f in SAMPLING_FIELDS if f.name != "max_tokens" for name in f.api), "seed")
HONOURED = {"model", "input", "instructions", "max_output_tokens", "stream", "store", "previous_response_id"}
HONOURED |= {"metadata", "user", "text", "tools", "tool_choice", "parallel_tool_calls", *SAMPLING_KEYS}
# a thinking model's: OpenAI's `reasoning` (its effort), and llama-server's chat fields
HONOURED |= {"reasoning", "chat_template_kwargs", "reasoning_format", "reasoning_budget_tokens", "thinking_budget_tokens"}
REASONING_FIELDS = ("effort", "summary", "generate_summary", "context")
# fields a client may send with the value that asks for nothing this server lacks (their defaults)
NO_OPS = {
    "include": lambda v: v == [],
    "truncation": lambda v: v == "disabled",
    "background": lambda v: v is False,
}
TEXT = {"format": {"type": "text"}}
NO_TOOLS = {"tools": [], "tool_choice": "none", "parallel_tool_calls": False}


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
    reasoning: dict = field(default_factory=lambda: {"effort": None, "summary": None})  # echoed


def parse_response(
    body: dict, n_ctx_seq: int, kept: KeptResponses, syntax: Syntax = GENERIC, thinking: Thinking = DEFAULT_THINKING
) -> ResponseRequest:
    """`syntax`: the tool-call syntax the model's template writes (tool_syntax.py); `thinking`: the
    server's defaults for a thinking model."""
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
    reasoning = _reasoning(body)
    thinks = parse_thinking(body, thinking, reasoning["effort"])
    job = Job(params, messages=messages, conversation_id=conversation_id, stream=stream, tools=tools, thinking=thinks)
    metadata = _metadata(body)
    user = get_field(body, "user", str, None)
    store = get_field(body, "store", bool, True)
    tooling = tool_echo(body) if tools is not None else NO_TOOLS
    echoed = TEXT if text is None else {"format": {k: v for k, v in text["format"].items() if k in FORMAT_FIELDS}}
    user = None if user is None else check_text(user, "user")
    return ResponseRequest(job, turns, store, instructions, previous_id, limit, metadata, user, echoed, tooling, reasoning)


def _reasoning(body: dict) -> dict:
    """OpenAI's `reasoning`: its `effort` goes to the template (as `reasoning_effort`; "none" switches
    thinking off); a summary is not made (the thoughts come whole)."""
    reasoning = get_field(body, "reasoning", dict, {})
    unknown = [k for k in reasoning if k not in REASONING_FIELDS]
    if unknown:
        raise BadRequest(f"'reasoning' takes {', '.join(REASONING_FIELDS)}; got {shown(unknown[0])}", "reasoning")
    effort = reasoning.get("effort")
    if effort is not None and not isinstance(effort, str):
        raise BadRequest(f"'reasoning.effort' must be a string such as low, medium or high; got {shown(effort)}", "reasoning")
    return {"effort": effort, "summary": None}


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
    parts), a thinking model's reasoning, function calls and their outputs; in the chat API's form,
    a call joining the assistant turn before it, a reasoning item's text the `reasoning_content` of
    the assistant turn it comes with."""
    if isinstance(raw, str):
        if not raw:
            raise BadRequest("'input' must not be empty", "input")
        return ({"role": "user", "content": check_text(raw, "input")},)
    if not isinstance(raw, list) or not raw:
        raise BadRequest("'input' must be a non-empty string or a non-empty list of message items", "input")
    if len(raw) > MAX_MESSAGES:
        raise BadRequest(f"at most {MAX_MESSAGES} input items in one request; got {len(raw)}", "input")
    turns: list[dict] = []
    thoughts = ""  # reasoning items' text, for the assistant turn they come with
    for i, item in enumerate(raw):
        kind = item.get("type", "message") if isinstance(item, dict) else None
        if kind == "reasoning":
            thoughts += reasoning_text(item, f"input[{i}]")
            continue
        if kind == "function_call":
            call = call_turn(item, f"input[{i}]")
            if turns and turns[-1]["role"] == "assistant":
                turns[-1] = {**turns[-1], "tool_calls": [*turns[-1].get("tool_calls", ()), call]}
            else:
                turns.append({"role": "assistant", "content": "", "tool_calls": [call]})
        elif kind == "function_call_output":
            turns.append(call_output(item, f"input[{i}]"))
        elif kind == "message":
            content = item.get("content")
            if not isinstance(content, (str, list)):
                raise BadRequest(f"input[{i}].content must be a string or a list of input_text parts", f"input[{i}].content")
            turns.append(message_of({"role": item.get("role"), "content": content}, i))
        else:
            what = shown(kind) if isinstance(item, dict) else "not an object"
            raise BadRequest(
                f"input[{i}]: only message, reasoning, function_call and function_call_output items are supported; got {what}",
                f"input[{i}]",
            )
        if thoughts and turns[-1]["role"] == "assistant" and "reasoning_content" not in turns[-1]:
            turns[-1] = {**turns[-1], "reasoning_content": thoughts}
        thoughts = ""
    return tuple(turns)
