"""Tool calls on chat completions: a request's `tools`, `tool_choice` and `parallel_tool_calls`, the
conversation as the model reads it, and the reply as OpenAI's `tool_calls`.

Two ways, by the model's chat template (tool_syntax.py tells which):
- native: a template that knows a tool syntax (Hermes / Qwen, Llama 3.x, Mistral Nemo, IBM Granite,
  Command R7B, Functionary v3.2) renders the tools, the assistant turns that called them and the
  `role: "tool"` results itself; the model writes calls in its own syntax. `required` and a named
  function hold the reply to that syntax with a grammar from its first token; with `auto` the model
  writes freely until the family's trigger (`<tool_call>`, `[TOOL_CALLS]`, `<|tool_call|>`,
  `<|START_ACTION|>`, a tool's name after `>>>`, a reply opening with `{"name":`), and a lazy grammar
  holds it from there; its calls are read out of the text.
- generic, for any other template: the tools are described in a system message, and a grammar holds
  every reply to one JSON object, `{"tool_calls": [...]}` or (with `auto`) `{"response": "..."}`.
Either way a call's arguments follow the function's `parameters` (a keyword llguidance cannot hold
a reply to: refused in a function sent `strict`, else left unchecked), and `required` and a named
function always yield a call: one, unless `parallel_tool_calls` is true (off unless asked, as
llama-server; a named function is called once whatever it says). The grammar ends after the last
call allowed, so the reply ends there."""

from __future__ import annotations

import dataclasses
import json
import secrets
import string
import uuid
from dataclasses import dataclass

from app.engine.sampling.constraints import ConstraintError, check_grammar, schema_grammar

from .output_format import FieldError
from .tool_parse import Scan, scan
from .tool_syntax import GENERIC, MISTRAL_NEMO, MISTRAL_SMALL_3_2, Syntax, call_grammar

_ANSWER = {"type": "object", "required": ["response"], "additionalProperties": False}
_JSON_FORMAT = "start: %json "  # how output_format.py's JSON formats open
MAX_TOOLS = 128  # tools described in one request: each one's description goes into the prompt
MAX_CALLS_IN_TURN = 128  # calls one assistant turn of the conversation may hold
NAME_CHARS = frozenset(string.ascii_letters + string.digits + "_-")
_ALNUM = string.ascii_letters + string.digits


@dataclass(frozen=True)
class Tools:
    functions: tuple[dict, ...]  # each {"name", "description"?, "parameters"}
    choice: str  # "auto", "required", or the one function's name that must be called
    syntax: Syntax = GENERIC  # how the model is told of them and writes its calls
    strict: frozenset[str] = frozenset()  # the names of the functions sent with `"strict": true`
    # with `auto` and a JSON response format: the schema (with llguidance's options) of the answer
    # of a reply that calls nothing, so the reply is calls or that answer, held from its first token
    answer: dict | None = None

    def grammar(self) -> str:
        """The grammar the reply must follow (from a trigger on, when `triggers` says so). A strict
        function's parameters with a keyword llguidance cannot hold a reply to are refused, naming
        it; another function's such keywords are left unchecked (OpenAI's `strict` false promises
        nothing of them)."""
        for i, f in enumerate(self.functions):
            if f["name"] in self.strict:
                try:
                    schema_grammar(f["parameters"], strict=True)
                except ConstraintError as e:
                    raise FieldError(
                        f"tools[{i}] ({f['name']}) is strict and its parameters cannot constrain a reply: {e}; "
                        'with "strict": false such keywords are left unchecked',
                        f"tools[{i}]",
                    ) from None
        lenient = any(f["name"] not in self.strict for f in self.functions)
        functions = tuple({**f, "parameters": own_references(f["parameters"], f["name"])} for f in self.functions)
        try:
            if self.answer is None:
                return call_grammar(self.syntax, functions, self.choice, lenient)
            return self._calls_or_answer(call_grammar(self.syntax, functions, "required", lenient))
        except ConstraintError as e:
            raise FieldError(f"the tools' parameters cannot constrain a reply: {e}", "tools") from None

    def _calls_or_answer(self, calls: str) -> str:
        """The grammar of calls (`calls`, whose first rule is `start`) or the answer: as llama.cpp,
        in the generic format `{"response": <the answer>}`, in a family's own syntax the answer alone.
        (One JSON each: llguidance's lexer would commit to a literal `{"response": ` before a JSON
        that opens with `{` too.)"""
        answer = self.answer
        if not self.syntax.is_native:  # the answer's own references still point into it, nested
            schema = {"$id": "urn:response-format", **{k: v for k, v in answer.items() if k != "x-guidance"}}
            answer = {**_ANSWER, "properties": {"response": schema}, "x-guidance": answer["x-guidance"]}
        return check_grammar(
            f"start: tc_calls | tc_answer\ntc_answer: %json {json.dumps(answer)}\ntc_calls:{calls.removeprefix('start:')}"
        )

    def triggers(self) -> tuple[str, ...]:
        """The patterns the grammar waits for (none: it holds the reply from its first token)."""
        if self.choice != "auto" or self.answer is not None:
            return ()
        return self.syntax.triggers_for(tuple(f["name"] for f in self.functions))

    def answering(self, format_grammar: str) -> Tools:
        """These tools beside a response format (`format_grammar`, output_format.py's): as OpenAI,
        the format holds the reply's text, so with `auto` a reply calls or answers in the format;
        with `required` or a named function it calls, and the format has nothing to hold. Only a
        JSON format (json_object, json_schema) is taken with tools, as llama-server."""
        if not format_grammar.startswith(_JSON_FORMAT):
            raise FieldError("tools cannot be sent with a grammar; a json_object or json_schema response format can", "tools")
        if self.choice != "auto":
            return self
        return dataclasses.replace(self, answer=json.loads(format_grammar.removeprefix(_JSON_FORMAT)))

    def template_tools(self) -> str | None:
        """The tools as the model's own template reads them (OpenAI's list, as JSON); None in the
        generic format, where a system message describes them."""
        if not self.syntax.is_native:
            return None
        return json.dumps([{"type": "function", "function": f} for f in self.functions])

    def instructions(self) -> str:
        """The system message that describes the tools where the template does not: the generic
        format's, or a syntax's own (shown by a call written in it)."""
        listed = "\n".join(json.dumps(f) for f in self.functions)
        if self.syntax.form is not None:
            example = self.syntax.form.write([("function_name", {"argument_name": "value"})])
            when = {"auto": "when one helps", "required": "now"}.get(self.choice, f"now: call {self.choice}")
            return f"You can call these functions:\n{listed}\nCall them {when}, in this format:\n{example}"
        # the one function a reply must call is named in: a small model copies a placeholder into an
        # argument called `name`
        only = self.choice if self.choice not in ("auto", "required") else None
        if self.choice == "required" and len(self.functions) == 1:
            only = self.functions[0]["name"]
        call = f'{{"tool_calls": [{{"name": "{only or "<function name>"}", "arguments": {{<the arguments>}}}}]}}'
        many = " (one or more calls)" if self.syntax.parallel else " (one call)"
        if self.choice == "auto":
            answer = '"<your answer>"' if self.answer is None else "<your answer, as JSON>"
            how = f'Reply with one JSON object: either {call}{many} to call functions, or {{"response": {answer}}}.'
        elif self.choice == "required":
            how = f"Reply with one JSON object calling them: {call}{many}."
        else:
            how = f"Reply with one JSON object calling {self.choice}: {call}."
        return f"You can call these functions:\n{listed}\n{how}"

    def new_id(self) -> str:
        """A call's id; Mistral's templates take back only ids of 9 letters and digits."""
        if self.syntax.family in (MISTRAL_NEMO.family, MISTRAL_SMALL_3_2.family):
            return "".join(secrets.choice(_ALNUM) for _ in range(9))
        return f"call_{uuid.uuid4().hex[:24]}"


def own_references(parameters: dict, name: str) -> dict:
    """A function's `parameters` whose `$ref`s (`#/$defs/Address`, as pydantic writes a nested
    model, an enum or a recursive one) still point into them once the call's grammar nests them
    in a larger schema: the parameters get a base URI of their own (`$id`), which JSON Schema
    resolves a `#...` reference against. One that names its own `$id` keeps it."""
    if "$id" in parameters or '"$ref"' not in json.dumps(parameters):
        return parameters
    return {"$id": f"urn:tool:{name}", **parameters}


def asks_for_tools(body: dict) -> bool:
    return body.get("tools") not in (None, []) and body.get("tool_choice") != "none"


def parse_tools(body: dict, syntax: Syntax = GENERIC) -> Tools | None:
    """The request's `tools`, `tool_choice` and `parallel_tool_calls` for a model whose template
    writes `syntax`; None when no tool may be called."""
    tools, choice = body.get("tools"), body.get("tool_choice", "auto")
    if not asks_for_tools(body):
        return None
    if not isinstance(tools, list):
        raise FieldError("'tools' must be a list of functions", "tools")
    if len(tools) > MAX_TOOLS:
        raise FieldError(f"at most {MAX_TOOLS} tools in one request; got {len(tools)}", "tools")
    # off unless asked, as llama-server: a reply of several calls is what a client asks for, and a
    # named function is called once whatever is asked (OpenAI's rule)
    parallel = body.get("parallel_tool_calls", False)
    if not isinstance(parallel, bool):
        raise FieldError("'parallel_tool_calls' must be a boolean", "parallel_tool_calls")
    functions = tuple(_function(t, i) for i, t in enumerate(tools))
    names = [f["name"] for f in functions]
    if len(set(names)) != len(names):
        raise FieldError("two tools have the same name", "tools")
    if isinstance(choice, dict):
        name = (choice.get("function") or {}).get("name") if choice.get("type") == "function" else None
        if name not in names:
            raise FieldError(f"'tool_choice' names a function that is not in 'tools': {name!r}", "tool_choice")
        choice = name
    elif choice not in ("auto", "required"):
        raise FieldError(f"'tool_choice' must be none, auto, required or a function; got {choice!r}", "tool_choice")
    strict = frozenset(f["name"] for f in functions if f["strict"])
    functions = tuple({k: v for k, v in f.items() if k != "strict"} for f in functions)
    syntax = syntax.with_parallel(parallel and choice in ("auto", "required")).with_functions(functions)
    return Tools(functions, choice, syntax, strict)


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
    strict = spec.get("strict", False)
    if not isinstance(strict, (bool, type(None))):
        raise FieldError(f"{where}.function.strict must be a boolean", where)
    description = spec.get("description")
    if description is not None and not isinstance(description, str):
        raise FieldError(f"{where}.function.description must be a string", where)
    out = {"name": name, "parameters": parameters or {"type": "object", "properties": {}}, "strict": bool(strict)}
    if description:
        out["description"] = description
    return out


# -- the conversation ---------------------------------------------------------------------------


def calls_in(item: dict, where: str, arguments_as_text: bool = False) -> list[dict]:
    """An assistant turn's `tool_calls`, checked: each {"id", "type": "function", "function":
    {"name", "arguments"}} with its arguments as an object (as most templates read them), or as
    JSON text for a template that adds them to its text (`Syntax.arguments_as_text`)."""
    calls = item.get("tool_calls")
    if not isinstance(calls, list) or len(calls) > MAX_CALLS_IN_TURN:
        raise FieldError(f"{where}.tool_calls must be a list of at most {MAX_CALLS_IN_TURN} calls", where)
    out = []
    for i, call in enumerate(calls):
        function = call.get("function") if isinstance(call, dict) else None
        if (
            not isinstance(function, dict)
            or not isinstance(function.get("name"), str)
            or call.get("type", "function") != "function"
        ):
            raise FieldError(f'{where}.tool_calls[{i}] must be {{"type": "function", "function": {{"name": ...}}}}', where)
        arguments = function.get("arguments") or "{}"
        if isinstance(arguments, str):
            try:
                arguments = json.loads(arguments)
            except ValueError:
                raise FieldError(f"{where}.tool_calls[{i}].function.arguments is not JSON", where) from None
        identity = call.get("id")
        out.append(
            {
                "id": identity if isinstance(identity, str) else "",
                "type": "function",
                "function": {
                    "name": function["name"],
                    "arguments": json.dumps(arguments, ensure_ascii=False) if arguments_as_text else arguments,
                },
            }
        )
    return out


def calls_written(message: dict, syntax: Syntax) -> dict:
    """An assistant turn with its calls written at the end of its content in the family's syntax,
    for a template that shows no `tool_calls` (`Syntax.calls_in_content`); any other as it is."""
    calls = message.get("tool_calls")
    if not calls or not syntax.calls_in_content or syntax.form is None:
        return message
    made = [(c["function"]["name"], _arguments_object(c["function"]["arguments"])) for c in calls]
    # the calls are now the content's, in the model's own syntax: left as `tool_calls` too, the chat
    # template's polyfill for a template that shows none would write them again over it, as JSON
    written = {k: v for k, v in message.items() if k != "tool_calls"}
    return {**written, "content": (message["content"] or "") + syntax.form.write(made)}


def _arguments_object(arguments: object) -> dict:
    value = json.loads(arguments) if isinstance(arguments, str) else arguments
    return value if isinstance(value, dict) else {}


def generic_message(item: object, index: int) -> object:
    """A tool result (`role: "tool"`) or an assistant turn holding calls, as the model reads them in
    the generic format; any other item as it is."""
    if not isinstance(item, dict):
        return item
    if item.get("role") == "tool":
        return {"role": "user", "content": f"Result of tool call {item.get('tool_call_id', '')}: {_text(item.get('content'))}"}
    if item.get("role") == "assistant" and item.get("tool_calls"):
        calls = calls_in(item, f"messages[{index}]")
        written = [{"name": c["function"]["name"], "arguments": c["function"]["arguments"]} for c in calls]
        return {"role": "assistant", "content": json.dumps({"tool_calls": written})}
    return item


def _text(content: object) -> str:
    if isinstance(content, list):  # text parts
        return "".join(p.get("text", "") for p in content if isinstance(p, dict))
    return content if isinstance(content, str) else ""


def with_instructions(messages: tuple[dict, ...], tools: Tools) -> tuple[dict, ...]:
    """The chat with the tools described (generic format): in its system message, or in one put first."""
    text = tools.instructions()
    if messages and messages[0]["role"] == "system":
        return ({"role": "system", "content": f"{messages[0]['content']}\n\n{text}"}, *messages[1:])
    return ({"role": "system", "content": text}, *messages)


# -- the reply ----------------------------------------------------------------------------------


def reply_of(text: str, tools: Tools) -> tuple[str | None, list[dict]]:
    """(content, tool_calls) of a whole reply, as OpenAI's message has them."""
    found: Scan = scan(text, tools.syntax)
    named = [c for c in found.calls if c.name is not None]
    calls = [
        {
            "id": tools.syntax.id_of(c.name, k, tools.new_id),
            "type": "function",
            "function": {"name": c.name, "arguments": c.arguments},
        }
        for k, c in enumerate(named)
    ]
    return found.content or (None if calls else ""), calls
