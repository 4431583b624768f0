"""Tool calls written as Python calls (LFM2, LFM2.5): `<|tool_call_start|>[name(key="value", n=1),
other()]<|tool_call_end|>`. A value is a Python literal or JSON (a string in either quotes, a
number, True / False / None or JSON's true / false / null, a list, a dict); a call's arguments come
back as JSON, each argument once its value is whole. The grammar writes the values as JSON."""

from __future__ import annotations

import ast
import json
import re
from dataclasses import dataclass

from .form import NAME, Strings, after_closer, expect
from .json_text import CallText, State, ValueReads, skip_ws
from .lark import json_value, literal, properties

_KEY = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_NUMBER = re.compile(r"-?(?:0|[1-9][0-9]*)(?:\.[0-9]+)?(?:[eE][+-]?[0-9]+)?")
_NUMBER_SO_FAR = re.compile(r"-?(?:[0-9]+(?:\.[0-9]*)?(?:[eE][+-]?[0-9]*)?)?")
_WORDS = {"True": "true", "False": "false", "None": "null", "true": "true", "false": "false", "null": "null"}
MAX_STRING = 1 << 16  # characters of a string literal read at once

_OPEN = object()  # a value the text's end cut: it may go on


@dataclass(frozen=True)
class PythonicForm:
    start: str = "<|tool_call_start|>"
    end: str = "<|tool_call_end|>"
    markers: tuple[str, ...] = ("<|tool_call_start|>", "<|tool_call_end|>")

    @property
    def openings(self) -> tuple[str, ...]:
        return (self.start,)

    def read(
        self, text: str, at: int, final: bool, reads: ValueReads | None, strings: Strings
    ) -> tuple[list[CallText], int, State]:
        i, state = expect(text, at, self.start)
        if state is None:
            i, state = expect(text, i, "[")
        if state is not None:
            return [], i, state
        calls: list[CallText] = []
        while True:
            call, j, state = _call(text, i, reads)
            if call is None:
                return calls, j, State.DONE if calls and state is State.NONE else state
            calls.append(call)
            if state is not State.DONE or not call.closed:
                return calls, j, State.OPEN if state is State.OPEN else State.DONE
            k = skip_ws(text, j)
            if k == len(text):
                return calls, k, State.OPEN
            if text[k] == "]":
                return after_closer(calls, text, k + 1, self.end, final)
            if text[k] != ",":
                return calls, j, State.DONE
            i = k + 1

    def write(self, calls: list[tuple[str, dict]]) -> str:
        written = [
            f"{name}({', '.join(f'{k}={json.dumps(v, ensure_ascii=False)}' for k, v in arguments.items())})"
            for name, arguments in calls
        ]
        return f"{self.start}[{', '.join(written)}]{self.end}"

    def grammar(self, functions: list[dict], parallel: bool, lenient: bool) -> str:
        """Calls whose arguments come in their parameters' order, the required ones always, each
        value as JSON (which a Python call's reader takes)."""
        lines = []
        for k, function in enumerate(functions):
            pieces = []
            for m, (key, schema, required) in enumerate(properties(function["parameters"])):
                lines.append(f"tc_value_{k}_{m}: {json_value(schema, lenient)}")
                pieces.append((f"{literal(key + '=')} tc_value_{k}_{m}", required))
            arguments = _in_order(pieces)
            lines.append(f"tc_call_{k}: {literal(function['name'] + '(')} {arguments + ' ' if arguments else ''}{literal(')')}")
        lines.append("tc_call: " + " | ".join(f"tc_call_{k}" for k in range(len(functions))))
        calls = f"tc_call ({literal(', ')} tc_call)*" if parallel else "tc_call"
        return "\n".join([f"start: {literal(self.start + '[')} {calls} {literal(']' + self.end)}", *lines])


def _in_order(pieces: list[tuple[str, bool]]) -> str:
    """Arguments in their order, `, ` between them: the required ones always, the others or not."""
    if not pieces:
        return ""
    first_required = next((m for m, (_, required) in enumerate(pieces) if required), len(pieces))
    alternatives = []
    for first in range(min(first_required, len(pieces) - 1) + 1):
        rest = [f"{literal(', ')} {p}" if required else f"({literal(', ')} {p})?" for p, required in pieces[first + 1 :]]
        alternatives.append(" ".join([pieces[first][0], *rest]))
    group = "(" + " | ".join(alternatives) + ")"
    return group if first_required < len(pieces) else group + "?"


def _call(text: str, i: int, reads: ValueReads | None) -> tuple[CallText | None, int, State]:
    """`name(key=value, ...)` from text[i]: None until its `(`; then its arguments, each once whole."""
    i = skip_ws(text, i)
    name = NAME.match(text, i)
    if name is None or name.end() == len(text):
        return None, i, State.OPEN if i == len(text) or (name and len(text) - i <= 64) else State.NONE
    k, state = expect(text, name.end(), "(")
    if state is not None:
        return None, k, state
    call, written = CallText(name.group()), []
    while True:
        k = skip_ws(text, k)
        if k == len(text):
            break
        if text[k] == ")":
            call.raw_arguments, call.closed = "{" + ", ".join(written) + "}", True
            return call, k + 1, State.DONE
        if written:
            if text[k] != ",":
                break
            k = skip_ws(text, k + 1)
        key = _KEY.match(text, k)
        if key is None or key.end() == len(text):
            call.raw_arguments = "{" + ", ".join(written)
            return call, k, State.OPEN if k == len(text) or key else State.DONE
        v, state = expect(text, key.end(), "=")
        if state is not None:
            call.raw_arguments = "{" + ", ".join(written)
            return call, v, State.OPEN if state is State.OPEN else State.DONE
        end, value = _value(text, skip_ws(text, v), reads)
        if value is _OPEN or value is None:
            call.raw_arguments = "{" + ", ".join(written)
            return call, v, State.OPEN if value is _OPEN else State.DONE
        written.append(f"{json.dumps(key.group())}: {value}")
        k = end
    call.raw_arguments = "{" + ", ".join(written)
    return call, k, State.OPEN if k == len(text) else State.DONE


def _value(text: str, i: int, reads: ValueReads | None = None) -> tuple[int, object]:
    """The Python or JSON literal at text[i] as JSON text: (its end, the text), (i, _OPEN) where the
    text ends inside it, (i, None) where it is none."""
    if i == len(text):
        return i, _OPEN
    c = text[i]
    if c in "'\"":
        return _string(text, i, reads)
    if c in "[{":
        return _container(text, i, reads)
    word = _KEY.match(text, i)
    if word is not None:
        if word.end() == len(text):
            return i, _OPEN if any(w.startswith(word.group()) for w in _WORDS) else None
        return (word.end(), _WORDS[word.group()]) if word.group() in _WORDS else (i, None)
    if _NUMBER_SO_FAR.match(text, i).end() == len(text):  # a number the text may go on with
        return i, _OPEN
    number = _NUMBER.match(text, i)
    return (number.end(), json.dumps(json.loads(number.group()))) if number else (i, None)


def _string(text: str, i: int, reads: ValueReads | None) -> tuple[int, object]:
    """A string literal; a stream's `reads` keeps where the search for its end stopped."""
    quote = text[i]
    k = reads.texts.get(i, (i + 1,))[0] if reads is not None else i + 1
    while k < len(text) and k - i < MAX_STRING:
        if text[k] == "\\":
            if k + 1 == len(text):
                break  # its escape is to come
            k += 2
            continue
        if text[k] == quote:
            try:  # JSON's escapes first (a surrogate pair is one character to JSON, two to Python)
                value = json.loads(text[i : k + 1]) if quote == '"' else ast.literal_eval(text[i : k + 1])
            except ValueError:
                try:
                    value = ast.literal_eval(text[i : k + 1])
                except (ValueError, SyntaxError):
                    return i, None
            return k + 1, json.dumps(value, ensure_ascii=False)
        if text[k] == "\n":
            return i, None
        k += 1
    if k - i >= MAX_STRING:
        return i, None
    if reads is not None:  # the text ends in it: the next reading goes on from here
        reads.texts[i] = (k, 0, "")
    return i, _OPEN


def _container(text: str, i: int, reads: ValueReads | None) -> tuple[int, object]:
    """A list or dict of literals, as JSON."""
    closing, is_dict = ("]", False) if text[i] == "[" else ("}", True)
    items, k = [], skip_ws(text, i + 1)
    while True:
        if k == len(text):
            return i, _OPEN
        if text[k] == closing:
            body = ", ".join(items)
            return k + 1, ("{" + body + "}") if is_dict else ("[" + body + "]")
        if items:
            if text[k] != ",":
                return i, None
            k = skip_ws(text, k + 1)
        if is_dict:
            k, key = _value(text, k, reads)
            if key is _OPEN or key is None or not key.startswith('"'):
                return i, key if key is _OPEN else None
            k = skip_ws(text, k)
            if k == len(text):
                return i, _OPEN
            if text[k] != ":":
                return i, None
            k, value = _value(text, skip_ws(text, k + 1), reads)
            if value is _OPEN or value is None:
                return i, value
            items.append(f"{key}: {value}")
        else:
            k, value = _value(text, k, reads)
            if value is _OPEN or value is None:
                return i, value
            items.append(value)
        k = skip_ws(text, k)
