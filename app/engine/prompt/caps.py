"""What a chat template can render, found by rendering it, and a conversation made fit for it.

As llama.cpp's minja finds a template's capabilities (`chat_template_caps`): a few renders of made-up
conversations, each looking for its own marker text in what the template wrote (a system message;
`tools`; an assistant turn's `tool_calls`, their arguments as a mapping and as JSON text; two calls;
a tool's result; content as a string and as typed parts). Where a template cannot render a part of
a conversation, the conversation is changed as llama.cpp changes it (its polyfills): a system
message folded into the first user turn, tool-call arguments given in the form the template reads,
calls and results written as JSON text, `tools` described in the system message, content given as
typed parts, and the tools as `functions` for a template that reads that (Firefunction v2).

The renders run in the template's own process (worker.py), once per template; this module imports
nothing of the app, so that process starts in the time Jinja takes to import.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import asdict, dataclass, fields

Message = dict[str, object]
# (messages, tools or None) -> the text written, "" where the template raised
Render = Callable[[list[Message], list | None], str]

USER_NEEDLE = "<User Needle>"
SYSTEM_NEEDLE = "<System Needle>"
TOOL_NEEDLE = "probe_tool_needle"
RESULT_NEEDLE = "Some response!"
ARGUMENT_NEEDLE = "argument_needle"
ARGUMENTS = {ARGUMENT_NEEDLE: "print('Hello, World!')"}
_ESCAPED = '\\"argument_needle\\"'  # JSON text written as a JSON string: not read as arguments
# what llama.cpp's polyfill writes before the tools' list, for a template that does not render `tools`
TOOLS_PREAMBLE = "You can call any of the following tools to satisfy the user's requests: "


@dataclass(frozen=True)
class TemplateCaps:
    """What a chat template renders (llama.cpp's names); the defaults: a template that renders all."""

    supports_system_role: bool = True
    supports_tools: bool = True
    supports_tool_calls: bool = True
    supports_tool_responses: bool = True
    supports_parallel_tool_calls: bool = True
    requires_object_arguments: bool = False  # the arguments read as a mapping: JSON text is parsed for it
    requires_string_arguments: bool = False  # the arguments added to its text: a mapping is written as JSON
    requires_typed_content: bool = False  # content read as [{"type": "text", "text": ...}]
    requires_functions: bool = False  # the tools read as `functions` (JSON text), not as `tools`

    def as_json(self) -> dict[str, bool]:
        return asdict(self)

    @classmethod
    def from_json(cls, value: object) -> TemplateCaps:
        given = value if isinstance(value, dict) else {}
        return cls(**{f.name: bool(given[f.name]) for f in fields(cls) if f.name in given})

    @property
    def polyfilled(self) -> tuple[str, ...]:
        """What is changed for this template, in words (/props says it)."""
        said = {
            "system messages folded into the first user turn": not self.supports_system_role,
            "tools described in the system message": not self.supports_tools,
            "tool calls written as JSON text": not self.supports_tool_calls,
            "tool results given as user turns": not self.supports_tool_responses,
            "tool-call arguments given as a mapping": self.requires_object_arguments,
            "tool-call arguments given as JSON text": self.requires_string_arguments,
            "content given as typed parts": self.requires_typed_content,
            "tools given as `functions`": self.requires_functions,
        }
        return tuple(words for words, applies in said.items() if applies)


ALL = TemplateCaps()


def detect_caps(render: Render, variables_read: set[str]) -> TemplateCaps:
    """The template's capabilities from a few renders (`render` answers "" where it raised);
    `variables_read`: the names its source reads and does not set itself (Jinja's meta)."""
    user_text = {"role": "user", "content": USER_NEEDLE}
    user_typed = {"role": "user", "content": [{"type": "text", "text": USER_NEEDLE}]}
    typed = USER_NEEDLE not in render([user_text], None) and USER_NEEDLE in render([user_typed], None)
    user = user_typed if typed else user_text
    system = {"role": "system", "content": [{"type": "text", "text": SYSTEM_NEEDLE}] if typed else SYSTEM_NEEDLE}
    tool = _tool(TOOL_NEEDLE)
    as_text, as_mapping = (_renders_arguments(render, user, tool, arguments) for arguments in (json.dumps(ARGUMENTS), ARGUMENTS))
    calls = as_text or as_mapping
    arguments = json.dumps(ARGUMENTS) if as_text else ARGUMENTS
    two = [_call("call00001", "test_tool1", arguments), _call("call00002", "test_tool2", arguments)]
    parallel = _renders_all(render, [user, _calling(two)], [tool], ("test_tool1", "test_tool2"))
    result = {"role": "tool", "name": "test_tool1", "content": RESULT_NEEDLE, "tool_call_id": "call00001"}
    responses = _renders_all(render, [user, _calling(two[:1]), result], [tool], (RESULT_NEEDLE,))
    return TemplateCaps(
        supports_system_role=SYSTEM_NEEDLE in render([system, user], None),
        supports_tools=TOOL_NEEDLE in render([user], [tool]),
        supports_tool_calls=calls,
        supports_tool_responses=responses,
        supports_parallel_tool_calls=calls and parallel,
        requires_object_arguments=as_mapping and not as_text,
        requires_string_arguments=as_text and not as_mapping,
        requires_typed_content=typed,
        requires_functions="functions" in variables_read and "tools" not in variables_read,
    )


def _tool(name: str) -> dict:
    parameters = {"type": "object", "properties": {"arg": {"type": "string", "description": "Some argument."}}}
    return {"type": "function", "function": {"name": name, "description": "Some tool.", "parameters": parameters}}


def _call(call_id: str, name: str, arguments: object) -> dict:
    return {"id": call_id, "type": "function", "function": {"name": name, "arguments": arguments}}


def _calling(calls: list[dict]) -> Message:
    return {"role": "assistant", "content": "", "tool_calls": calls}


def _renders_arguments(render: Render, user: Message, tool: dict, arguments: object) -> bool:
    """Whether an assistant turn's call shows its arguments (JSON text written again as a string
    does not: its quotes come out escaped), without the tools listed or, failing that, with them."""
    messages = [user, _calling([_call("call00001", "probe_call", arguments)])]
    for tools in (None, [tool]):
        text = render(messages, tools)
        if ARGUMENT_NEEDLE in text and _ESCAPED not in text:
            return True
    return False


def _renders_all(render: Render, messages: list[Message], tools: list, needles: tuple[str, ...]) -> bool:
    for given in (None, tools):
        text = render(messages, given)
        if all(needle in text for needle in needles):
            return True
    return False


# -- the polyfills ------------------------------------------------------------------------------


def polyfill(caps: TemplateCaps, messages: list[Message], tools: list | None) -> tuple[list[Message], dict]:
    """The messages as the template can read them, and the variables it needs beside them
    (`functions`); as they were where it reads them all."""
    extra = {"functions": json.dumps(tools, indent=2) if tools else ""} if caps.requires_functions else {}
    if caps == ALL:
        return messages, extra
    if tools and not caps.supports_tools and not caps.requires_functions:
        messages = _with_system(messages, TOOLS_PREAMBLE + json.dumps(tools, indent=2))
    out: list[Message] = []
    pending: list[str] = []  # system texts waiting for the next user turn
    for message in messages:
        message = _fit(caps, dict(message))
        if not caps.supports_system_role and isinstance(message.get("content"), str):
            if message.get("role") == "system":
                pending.append(message["content"])
                continue
            if message.get("role") == "user" and pending:
                message["content"] = "\n".join([*pending, message["content"]] if message["content"] else pending)
                pending = []
            elif pending:  # a turn of another role first: the system text goes before it, as a user turn
                out.append(_typed(caps, {"role": "user", "content": "\n".join(pending)}))
                pending = []
        out.append(_typed(caps, message))
    if pending:
        out.append(_typed(caps, {"role": "user", "content": "\n".join(pending)}))
    return out, extra


def _fit(caps: TemplateCaps, message: Message) -> Message:
    """One message's calls and result in the form the template reads."""
    calls = message.get("tool_calls")
    if isinstance(calls, list) and calls:
        calls = [_with_arguments(caps, call) for call in calls]
        if caps.supports_tool_calls:
            message["tool_calls"] = calls
        else:  # written out as JSON text, as llama.cpp's polyfill writes them
            written = {"tool_calls": [_written(call) for call in calls]}
            if message.get("content"):
                written["content"] = message["content"]
            message["content"] = json.dumps(written, indent=2, ensure_ascii=False)
            del message["tool_calls"]
    if message.get("role") == "tool" and not caps.supports_tool_responses:
        response = {"tool": message["name"]} if message.get("name") else {}
        response["content"] = message.get("content")
        if message.get("tool_call_id"):
            response["tool_call_id"] = message["tool_call_id"]
        message = {"role": "user", "content": json.dumps({"tool_response": response}, indent=2, ensure_ascii=False)}
    return message


def _with_arguments(caps: TemplateCaps, call: object) -> object:
    function = call.get("function") if isinstance(call, dict) else None
    if not isinstance(function, dict) or "arguments" not in function:
        return call
    arguments = function["arguments"]
    if isinstance(arguments, str) and (caps.requires_object_arguments or not caps.supports_tool_calls):
        try:
            arguments = json.loads(arguments)
        except ValueError:
            pass  # not JSON: given as it came
    elif not isinstance(arguments, str) and caps.requires_string_arguments:
        arguments = json.dumps(arguments, ensure_ascii=False)
    return {**call, "function": {**function, "arguments": arguments}}


def _written(call: object) -> dict:
    function = call.get("function", {}) if isinstance(call, dict) else {}
    written = {"name": function.get("name"), "arguments": function.get("arguments")}
    if isinstance(call, dict) and call.get("id"):
        written["id"] = call["id"]
    return written


def _with_system(messages: list[Message], text: str) -> list[Message]:
    if messages and messages[0].get("role") == "system" and isinstance(messages[0].get("content"), str):
        return [{**messages[0], "content": f"{messages[0]['content']}\n\n{text}"}, *messages[1:]]
    return [{"role": "system", "content": text}, *messages]


def _typed(caps: TemplateCaps, message: Message) -> Message:
    if caps.requires_typed_content and isinstance(message.get("content"), str):
        return {**message, "content": [{"type": "text", "text": message["content"]}]}
    return message
