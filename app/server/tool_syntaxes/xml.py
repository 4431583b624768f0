"""Tool calls as tags, an argument a tag (Qwen3-Coder, Nemotron 3 Nano, Seed-OSS, GLM 4.5-4.7,
MiniMax M2, DeepSeek V3.2 and V4's DSML): a string value written raw, any other as JSON, as the
family's template writes them:

    <tool_call>\\n<function=NAME>\\n<parameter=KEY>\\nVALUE\\n</parameter>\\n</function>\\n</tool_call>
    <tool_call>NAME\\n<arg_key>KEY</arg_key>\\n<arg_value>VALUE</arg_value>\\n</tool_call>
    <minimax:tool_call>\\n<invoke name="NAME">\\n<parameter name="KEY">VALUE</parameter>\\n</invoke>\\n</minimax:tool_call>
    <｜DSML｜function_calls>\\n<｜DSML｜invoke name="NAME">\\n<｜DSML｜parameter name="KEY" string="true">VALUE</｜DSML｜parameter>\\n...

A call's arguments come back as JSON: `{"KEY": VALUE, ...}`, a string value (by the function's
parameters) streamed as it is written, any other once whole (JSON where it reads as JSON, else a
string). Blanks between the tags are free when read; the grammar writes them as the template does."""

from __future__ import annotations

import json
from dataclasses import dataclass

from .form import NAME, Strings, after_closer, expect_all, json_of, partial_len, tags
from .json_text import CallText, State, ValueReads, skip_ws
from .lark import is_string, json_value, literal, properties, raw_strings, text_until

MAX_KEY = 128  # characters of an argument's name: past them, no argument


@dataclass(frozen=True)
class XmlForm:
    """The pieces of a family's calls as its template writes them, blanks included."""

    block_open: str  # "<tool_call>\n"
    call_open: str  # "<function=" ("" where the name follows the block's opening)
    name_close: str  # ">\n"
    key_open: str  # "<parameter="
    key_close: str  # ">\n" (GLM: "</arg_key>\n<arg_value>")
    value_close: str  # "\n</parameter>\n"
    call_close: str  # "</function>\n" ("" where the block's closing ends the call)
    block_close: str  # "</tool_call>"
    markers: tuple[str, ...] = ()
    calls_a_block: bool = False  # several calls in one block (MiniMax), else a block a call
    # DSML's: the argument's tag says whether its value is a string, (key_close) or this one (JSON)
    key_close_json: str = ""
    between: str = "\n"  # between two blocks

    @property
    def openings(self) -> tuple[str, ...]:
        return (self.block_open.strip(),)

    # -- reading

    def read(
        self, text: str, at: int, final: bool, reads: ValueReads | None, strings: Strings
    ) -> tuple[list[CallText], int, State]:
        i, state = expect_all(text, at, tags(self.block_open))
        if state is not None:
            return [], i, state
        calls: list[CallText] = []
        while True:
            call, i, state = self._call(text, i, final, strings, reads)
            if call is None:  # no call here; after a call, a malformed one ends the block
                return calls, i, State.DONE if calls and state is State.NONE else state
            calls.append(call)
            if state is not State.DONE or not call.closed:  # the text ends in it, or it is malformed
                return calls, i, State.OPEN if state is State.OPEN else State.DONE
            if not self.calls_a_block:
                break
            _, more = expect_all(text, i, tags(self.call_open))
            if more is State.OPEN:
                return calls, i, State.OPEN
            if more is not None:
                break
        return after_closer(calls, text, i, self.block_close.strip(), final)

    def _call(
        self, text: str, i: int, final: bool, strings: Strings, reads: ValueReads | None
    ) -> tuple[CallText | None, int, State]:
        """One call from its opening: None until its name is whole; then its arguments as far as they go."""
        i, state = expect_all(text, i, tags(self.call_open))
        if state is not None:
            return None, i, state
        name = NAME.match(text, i)
        if name is None or name.end() == len(text):  # no name, or one that may go on
            return None, i, State.OPEN if i == len(text) or (name and len(text) - i <= 64) else State.NONE
        i, state = expect_all(text, name.end(), tags(self.name_close))
        if state is not None:
            return None, i, state
        call, values = CallText(name.group()), _Values(name.group(), strings)
        ends = tags(self.call_close) or tags(self.block_close)  # GLM: the block's closing ends the call
        while True:
            j = skip_ws(text, i)
            p, state = expect_all(text, j, tags(self.key_open))
            if state is None:
                i, state = self._argument(text, p, final, values, reads)
                call.raw_arguments = values.text()
                if state is not None:
                    return call, i, State.OPEN if state is State.OPEN else State.DONE
                continue
            if state is State.OPEN:
                return call, j, State.OPEN
            end, state = expect_all(text, j, ends)
            if state is None:
                call.raw_arguments, call.closed = values.text() + "}", True
                return call, end if self.call_close else j, State.DONE
            call.raw_arguments = values.text()
            return call, j, state if state is State.OPEN else State.DONE  # malformed: the rest is content

    def _argument(self, text: str, p: int, final: bool, values: _Values, reads: ValueReads | None) -> tuple[int, State | None]:
        """An argument from after its opening tag: its name, then its value as far as it goes (a
        stream's `reads` keeps how far its closing tag was looked for and its text escaped so far)."""
        closing = tags(self.key_close)  # a typed syntax's two closings begin alike
        e = text.find(closing[0], p, p + MAX_KEY + len(closing[0]))
        if e < 0:  # the name goes on (less a closing tag that may be coming), or is none
            rest = text[p:]
            rest = rest[: len(rest) - partial_len(rest, closing[0])]
            return p, State.OPEN if len(rest) <= MAX_KEY and "<" not in rest and "\n" not in rest else State.NONE
        key = text[p:e]
        if not key.strip() or "<" in key or "\n" in key:
            return p, State.NONE
        v, state, is_string = self._key_closed(text, e)
        if state is not None:
            return v, state
        values.start(key, is_string)
        if self.key_close.endswith("\n") and text.startswith("\n", v):
            v += 1  # the template's line break before the value
        close = tags(self.value_close)[0]
        looked, escaped_to, escaped = reads.texts.get(v, (v, v, "")) if reads is not None else (v, v, "")
        c = text.find(close, max(v, looked - len(close)))
        if c < 0:  # the value goes on: what of it is decided (a closing tag, and a line break before it, may come)
            end = len(text)
            if not final:
                end -= partial_len(text[v:], close)
                end -= self.value_close.startswith("\n") and text.endswith("\n", v, end)
            if values.is_string:  # escaped on from where the last reading stopped
                escaped += _escaped(text[escaped_to:end])
                if reads is not None and not final:
                    reads.texts[v] = (len(text), end, escaped)
            values.grow(escaped, text[v:end], final)
            return len(text), State.OPEN
        raw = text[v:c]
        values.close(raw[:-1] if self.value_close.startswith("\n") and raw.endswith("\n") else raw)
        return expect_all(text, c, tags(self.value_close))

    def _key_closed(self, text: str, e: int) -> tuple[int, State | None, bool | None]:
        """After an argument's name, its closing tag: (where it ends, None, whether the tag says the
        value is a string: None where the syntax does not say), else (where, OPEN or NONE, None)."""
        v, state = expect_all(text, e, tags(self.key_close))
        if not self.key_close_json or state is None:
            return v, state, True if self.key_close_json and state is None else None
        w, other = expect_all(text, e, tags(self.key_close_json))
        if other is None:
            return w, None, False
        return v, State.OPEN if State.OPEN in (state, other) else State.NONE, None

    def _key_close(self, string: bool) -> str:
        return self.key_close if string or not self.key_close_json else self.key_close_json

    # -- writing

    def write(self, calls: list[tuple[str, dict]]) -> str:
        def one(name: str, arguments: dict) -> str:
            written = [self._head(name)]
            for key, value in arguments.items():
                raw = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)
                written.append(f"{self.key_open}{key}{self._key_close(isinstance(value, str))}{raw}{self.value_close}")
            return "".join(written) + self.call_close

        if self.calls_a_block:
            return self.block_open + "".join(one(n, a) for n, a in calls) + self.block_close
        return self.between.join(self.block_open + one(n, a) + self.block_close for n, a in calls)

    def _head(self, name: str) -> str:
        return f"{self.call_open}{name}{self.name_close}"

    # -- the grammar

    def grammar(self, functions: list[dict], parallel: bool, lenient: bool) -> str:
        lines = [f"tc_text[lazy]: {text_until(self.value_close)}"]
        for k, function in enumerate(functions):
            lines += self._call_rules(k, function, lenient)
        lines.append("tc_call: " + " | ".join(f"tc_call_{k}" for k in range(len(functions))))
        if self.calls_a_block:
            lines.insert(0, f"start: {literal(self.block_open)} tc_call{'+' if parallel else ''} {literal(self.block_close)}")
        else:
            more = f" ({_seq(literal(self.between) if self.between else '', 'tc_block')})*" if parallel else ""
            lines.insert(0, f"start: tc_block{more}")
            lines.append(f"tc_block: {literal(self.block_open)} tc_call {literal(self.block_close)}")
        return "\n".join(lines)

    def _call_rules(self, k: int, function: dict, lenient: bool) -> list[str]:
        """A function's call: its arguments in its parameters' order, the required ones always, each
        string one raw (one of its listed strings, or any text), any other as JSON."""
        parameters, lines, pieces = function["parameters"], [], []
        for m, (key, schema, required) in enumerate(properties(parameters)):
            strings = raw_strings(schema) if is_string(schema) else None
            if strings:
                value = "(" + " | ".join(literal(s + self.value_close) for s in strings) + ")"
            elif is_string(schema):
                value = "tc_text"
            else:
                lines.append(f"tc_value_{k}_{m}: {json_value(schema, lenient)}")
                value = f"tc_value_{k}_{m} {literal(self.value_close)}"
            piece = f"{literal(self.key_open + key + self._key_close(is_string(schema)))} {value}"
            pieces.append(piece if required else f"({piece})?")
        if not isinstance(parameters.get("properties"), dict) and parameters.get("additionalProperties") is not False:
            pieces.append(f"({literal(self.key_open)} /[A-Za-z0-9_.-]+/ {literal(self.key_close)} tc_text)*")  # any names
        closing = literal(self.call_close) if self.call_close else ""
        lines.append(f"tc_call_{k}: {_seq(literal(self._head(function['name'])), *pieces, closing)}")
        return lines


def _seq(*parts: str) -> str:
    return " ".join(p for p in parts if p)


class _Values:
    """A call's arguments as JSON text, as far as they are decided: `{"KEY": VALUE, ...` (the
    closing brace once the call is whole)."""

    def __init__(self, function: str, strings: Strings):
        self._function, self._strings = function, strings
        self._keys: list[str] = []  # each argument's `"KEY": `
        self._values: list[str] = []  # and its value's text so far
        self._is_string = False

    def start(self, key: str, is_string: bool | None = None) -> None:
        """An argument begins; a string value by its tag where the syntax says (`is_string`), else by the function's parameters."""
        self._is_string = (self._function, key) in self._strings if is_string is None else is_string
        self._keys.append(json.dumps(key, ensure_ascii=False) + ": ")
        self._values.append('"' if self._is_string else "")

    @property
    def is_string(self) -> bool:
        return self._is_string

    def grow(self, escaped: str, raw: str, final: bool) -> None:
        """The value as far as it is decided: a string streams (`escaped`, its text as JSON's
        string body); any other waits to be whole (or, cut short by the reply's end, is taken as written)."""
        if self._is_string:
            self._values[-1] = '"' + escaped
        elif final:
            self._values[-1] = raw.strip()

    def close(self, raw: str) -> None:
        self._values[-1] = json.dumps(raw, ensure_ascii=False) if self._is_string else json_of(raw)

    def text(self) -> str:
        return "{" + ", ".join(k + v for k, v in zip(self._keys, self._values, strict=True))


def _escaped(raw: str) -> str:
    return json.dumps(raw, ensure_ascii=False)[1:-1]


# the families' pieces, as their templates write them
QWEN3_CODER_FORM = XmlForm(
    "<tool_call>\n", "<function=", ">\n", "<parameter=", ">\n", "\n</parameter>\n", "</function>\n", "</tool_call>",
    markers=("<tool_call>", "</tool_call>"),
)  # fmt: skip
SEED_OSS_FORM = XmlForm(
    "<seed:tool_call>\n", "<function=", ">\n", "<parameter=", ">", "</parameter>\n", "</function>\n", "</seed:tool_call>",
    markers=("<seed:tool_call>", "</seed:tool_call>"),
)  # fmt: skip
_GLM_MARKERS = ("<tool_call>", "</tool_call>", "<arg_key>", "</arg_key>", "<arg_value>", "</arg_value>")
GLM_4_5_FORM = XmlForm(
    "<tool_call>", "", "\n", "<arg_key>", "</arg_key>\n<arg_value>", "</arg_value>\n", "", "</tool_call>",
    markers=_GLM_MARKERS,
)  # fmt: skip
GLM_4_7_FORM = XmlForm(
    "<tool_call>", "", "", "<arg_key>", "</arg_key><arg_value>", "</arg_value>", "", "</tool_call>",
    markers=_GLM_MARKERS, between="",
)  # fmt: skip
MINIMAX_M2_FORM = XmlForm(
    "<minimax:tool_call>\n", '<invoke name="', '">\n', '<parameter name="', '">', "</parameter>\n", "</invoke>\n",
    "</minimax:tool_call>", markers=("<minimax:tool_call>", "</minimax:tool_call>"), calls_a_block=True,
)  # fmt: skip
_DSML_MARKERS = ("<｜DSML｜", "</｜DSML｜")


def _dsml(block: str) -> XmlForm:
    """DeepSeek's DSML (V3.2: `function_calls`, V4: `tool_calls`): MiniMax's shape, each argument's tag
    saying whether its value is a string."""
    return XmlForm(
        f"<｜DSML｜{block}>\n", '<｜DSML｜invoke name="', '">\n', '<｜DSML｜parameter name="', '" string="true">',
        "</｜DSML｜parameter>\n", "</｜DSML｜invoke>\n", f"</｜DSML｜{block}>", markers=_DSML_MARKERS, calls_a_block=True,
        key_close_json='" string="false">',
    )  # fmt: skip


DEEPSEEK_V3_2_FORM = _dsml("function_calls")
DEEPSEEK_V4_FORM = _dsml("tool_calls")
