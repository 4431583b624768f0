"""The Responses API's items at its edge with the chat path's (tool_calls.py): flat function tools
in the chat form, input items (messages, function calls and their outputs) as chat turns, and the
output items a reply's calls become."""

from __future__ import annotations

import uuid

from ..protocol import BadRequest, check_text, shown

INPUT_PART_TYPES = ("input_text", "output_text", "text")
TOOL_FIELDS = ("type", "name", "description", "parameters", "strict")  # a Responses function tool's


def chat_tools(body: dict) -> dict:
    """The request's tools and tool_choice in the chat API's form, which parse_tools reads: a
    Responses function is flat ({"type": "function", "name", ...}), a chat one nested under "function"."""
    tools, choice = body.get("tools"), body.get("tool_choice") or "auto"
    if isinstance(tools, list):
        tools = [_chat_tool(t, i) for i, t in enumerate(tools)]
    if isinstance(choice, dict) and choice.get("type") == "function":
        choice = {"type": "function", "function": {"name": choice.get("name")}}
    parallel = body.get("parallel_tool_calls")
    return {"tools": tools, "tool_choice": choice, "parallel_tool_calls": False if parallel is None else parallel}


def _chat_tool(tool: object, index: int) -> object:
    if not isinstance(tool, dict):
        return tool  # parse_tools says what is wrong with it
    if tool.get("type") != "function":
        raise BadRequest(
            f"tools[{index}]: this server's Responses API supports function tools only; got {shown(tool.get('type'))}",
            f"tools[{index}]",
        )
    return {"type": "function", "function": {k: v for k, v in tool.items() if k != "type"}}


def tool_echo(body: dict) -> dict:
    """What a response echoes of its tools (checked by parse_tools), as OpenAI's does: the API's fields
    only, so that nothing else a client sends is kept with a stored response."""
    choice = body.get("tool_choice") or "auto"
    if isinstance(choice, dict):
        choice = {"type": "function", "name": choice["name"]}
    return {
        "tools": [{k: t[k] for k in TOOL_FIELDS if k in t} for t in body["tools"]],
        "tool_choice": choice,
        "parallel_tool_calls": body.get("parallel_tool_calls") is True,
    }


# -- input items -------------------------------------------------------------------------------


def input_text(content, where: str) -> str:
    """A message's or an output's text: a string, or text parts."""
    if isinstance(content, list):
        for part in content:
            if not isinstance(part, dict) or part.get("type") not in INPUT_PART_TYPES or not isinstance(part.get("text"), str):
                raise BadRequest(f"{where}: only input_text parts are supported", where)
        return "".join(p["text"] for p in content)
    if not isinstance(content, str):
        raise BadRequest(f"{where} must be a string or a list of input_text parts", where)
    return content


def reasoning_text(item: dict, where: str) -> str:
    """A reasoning item given back: its thoughts' text (its content's reasoning_text parts; a summary,
    where it has no content, stands for them)."""
    parts = item.get("content") or item.get("summary") or []
    if not isinstance(parts, list) or not all(isinstance(p, dict) and isinstance(p.get("text"), str) for p in parts):
        raise BadRequest(f"{where}: a reasoning item's content must be a list of reasoning_text parts", where)
    return check_text("".join(p["text"] for p in parts), where)


def call_turn(item: dict, where: str) -> dict:
    """A function_call item given back, as a chat turn's call."""
    fields = [item.get(k) for k in ("call_id", "name", "arguments")]
    if not all(isinstance(f, str) for f in fields):
        raise BadRequest(f"{where}: a function_call item needs call_id, name and arguments, as strings", where)
    call_id, name, arguments = (check_text(f, where) for f in fields)
    return {"id": call_id, "type": "function", "function": {"name": name, "arguments": arguments}}


def call_output(item: dict, where: str) -> dict:
    """A function_call_output item: the result of the call it names, as a chat `role: "tool"` message."""
    call_id = item.get("call_id")
    if not isinstance(call_id, str):
        raise BadRequest(f"{where}: a function_call_output item needs its call_id, as a string", where)
    output = input_text(item.get("output"), f"{where}.output")
    return {"role": "tool", "tool_call_id": check_text(call_id, where), "content": check_text(output, where)}


# -- output items ------------------------------------------------------------------------------


def function_call(item_id: str, call_id: str, name: str, arguments: str, status: str) -> dict:
    return {"id": item_id, "type": "function_call", "call_id": call_id, "name": name, "arguments": arguments, "status": status}


def new_item_id(prefix: str) -> str:
    return f"{prefix}_{uuid.uuid4().hex}"
