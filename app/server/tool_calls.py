"""Tool calls in one generic format any model can follow: the tools are described to the model in
a system message, and its reply is constrained by a grammar to a JSON object, either
{"tool_call": {"name": ..., "arguments": {...}}} or (with `tool_choice: "auto"`) {"response": "..."}.
`required` and a named function allow calls only, so they always yield a call; the arguments
follow each function's `parameters` schema. The reply is returned as OpenAI's `tool_calls` with
`finish_reason: "tool_calls"`; a `role: "tool"` result and an assistant turn holding calls are
given back to the model in the same format. (Models' own tool syntaxes, through their chat
templates, are not used: the generic format works with every template, and the grammar holds the
model to it.)"""

from __future__ import annotations

import json
import uuid
from dataclasses import dataclass

from app.engine.llama.grammar import ConstraintError, schema_grammar

from .output_format import FieldError

MAX_TOOLS = 128  # tools described in one request: each one's description goes into the prompt
NAME_CHARS = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_-")


@dataclass(frozen=True)
class Tools:
    functions: tuple[dict, ...]  # each {"name", "description", "parameters"}
    choice: str  # "auto", "required", or the one function's name that must be called

    def instructions(self) -> str:
        """The system message that describes the tools and the reply's format to the model."""
        listed = "\n".join(json.dumps(f) for f in self.functions)
        call = '{"tool_call": {"name": "<function name>", "arguments": {<the arguments>}}}'
        if self.choice == "auto":
            how = f'Reply with one JSON object: either {call} to call a function, or {{"response": "<your answer>"}}.'
        elif self.choice == "required":
            how = f"Reply with one JSON object calling one of them: {call}."
        else:
            how = f"Reply with one JSON object calling {self.choice}: {call}."
        return f"You can call these functions:\n{listed}\n{how}"

    def grammar(self) -> str:
        calls = [
            {
                "type": "object",
                "properties": {"name": {"const": f["name"]}, "arguments": f.get("parameters") or {"type": "object"}},
                "required": ["name", "arguments"],
            }
            for f in self.functions
            if self.choice in ("auto", "required") or f["name"] == self.choice
        ]
        call = {"type": "object", "properties": {"tool_call": {"anyOf": calls}}, "required": ["tool_call"]}
        answer = {"type": "object", "properties": {"response": {"type": "string"}}, "required": ["response"]}
        schema = {"anyOf": [call, answer]} if self.choice == "auto" else call
        try:
            return schema_grammar(schema)
        except ConstraintError as e:
            raise FieldError(f"the tools' parameters cannot constrain a reply: {e}", "tools") from None


def parse_tools(body: dict) -> Tools | None:
    """The request's `tools` and `tool_choice`; None when no tool may be called."""
    tools, choice = body.get("tools"), body.get("tool_choice", "auto")
    if tools in (None, []) or choice == "none":
        return None
    if not isinstance(tools, list):
        raise FieldError("'tools' must be a list of functions", "tools")
    if len(tools) > MAX_TOOLS:
        raise FieldError(f"at most {MAX_TOOLS} tools in one request; got {len(tools)}", "tools")
    functions = tuple(_function(t, i) for i, t in enumerate(tools))
    names = [f["name"] for f in functions]
    if len(set(names)) != len(names):
        raise FieldError("two tools have the same name", "tools")
    if isinstance(choice, dict):
        name = (choice.get("function") or {}).get("name") if choice.get("type") == "function" else None
        if name not in names:
            raise FieldError(f"'tool_choice' names a function that is not in 'tools': {name!r}", "tool_choice")
        return Tools(functions, name)
    if choice not in ("auto", "required"):
        raise FieldError(f"'tool_choice' must be none, auto, required or a function; got {choice!r}", "tool_choice")
    return Tools(functions, choice)


def _function(tool: object, index: int) -> dict:
    where = f"tools[{index}]"
    if not isinstance(tool, dict) or tool.get("type") != "function" or not isinstance(tool.get("function"), dict):
        raise FieldError(f'{where} must be {{"type": "function", "function": {{...}}}}', where)
    spec = tool["function"]
    name = spec.get("name")
    if not isinstance(name, str) or not name or len(name) > 64 or not set(name) <= NAME_CHARS:
        raise FieldError(f"{where}.function.name must be 1 to 64 letters, digits, _ or -; got {name!r}", where)
    parameters = spec.get("parameters")
    if parameters is not None and not isinstance(parameters, dict):
        raise FieldError(f"{where}.function.parameters must be a JSON schema object", where)
    description = spec.get("description")
    out = {"name": name, "parameters": parameters or {"type": "object", "properties": {}}}
    if isinstance(description, str):
        out["description"] = description
    return out


def with_instructions(messages: tuple[dict[str, str], ...], tools: Tools) -> tuple[dict[str, str], ...]:
    """The chat with the tools described: in its system message, or in one put first."""
    text = tools.instructions()
    if messages and messages[0]["role"] == "system":
        return ({"role": "system", "content": f"{messages[0]['content']}\n\n{text}"}, *messages[1:])
    return ({"role": "system", "content": text}, *messages)


def plain_message(item: object) -> object:
    """A tool result (`role: "tool"`) or an assistant turn holding calls, as the model reads them in
    the generic format; any other item as it is."""
    if not isinstance(item, dict):
        return item
    if item.get("role") == "tool":
        return {"role": "user", "content": f"Result of tool call {item.get('tool_call_id', '')}: {item.get('content') or ''}"}
    calls = item.get("tool_calls")
    if item.get("role") == "assistant" and isinstance(calls, list) and calls:
        function = calls[0].get("function", {}) if isinstance(calls[0], dict) else {}
        try:
            arguments = json.loads(function.get("arguments") or "{}")
        except (TypeError, ValueError):
            arguments = function.get("arguments")
        return {"role": "assistant", "content": json.dumps({"tool_call": {"name": function.get("name"), "arguments": arguments}})}
    return item


def reply_of(text: str) -> tuple[str | None, list[dict]]:
    """(content, tool_calls) of a reply in the generic format; a reply that is not (cut short) is content."""
    try:
        value = json.loads(text)
    except ValueError:
        return text, []
    if isinstance(value, dict) and isinstance(value.get("tool_call"), dict):
        call = value["tool_call"]
        arguments = json.dumps(call.get("arguments", {}))
        return None, [
            {
                "id": f"call_{uuid.uuid4().hex[:24]}",
                "type": "function",
                "function": {"name": call.get("name"), "arguments": arguments},
            }
        ]
    if isinstance(value, dict) and isinstance(value.get("response"), str):
        return value["response"], []
    return text, []
