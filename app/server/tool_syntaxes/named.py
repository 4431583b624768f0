"""Tool calls as a name, then the arguments' JSON, between a family's markers (DeepSeek V3.1, DeepSeek
R1, Kimi K2, Ministral 3 / Magistral / Devstral, Mistral Small 3.2), in a section that holds them or one each:

    <｜tool▁calls▁begin｜><｜tool▁call▁begin｜>NAME<｜tool▁sep｜>{...}<｜tool▁call▁end｜><｜tool▁calls▁end｜>
    <｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>NAME\\n```json\\n{...}\\n```<｜tool▁call▁end｜><｜tool▁calls▁end｜>
    <|tool_calls_section_begin|><|tool_call_begin|>functions.NAME:0<|tool_call_argument_begin|>{...}<|tool_call_end|><|tool_calls_section_end|>
    [TOOL_CALLS]NAME[ARGS]{...}
    [TOOL_CALLS]NAME[CALL_ID]ID[ARGS]{...}

Blanks between the markers are free when read; the grammar writes them as the template does."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass

from .form import NAME, Strings, after_closer, expect_all, tags
from .json_text import CallText, State, ValueReads, read_value, skip_ws
from .lark import json_value, literal

_DIGITS = re.compile(r"[0-9]+")
_ID = re.compile(r"[A-Za-z0-9]+")


@dataclass(frozen=True)
class NamedForm:
    """The markers around a family's calls as its template writes them, blanks included."""

    call_open: str  # before the name
    args_open: str  # between the name (and its number) and the arguments
    call_close: str = ""  # after the arguments
    section_open: str = ""  # before the calls ("": each call opens with call_open alone)
    section_close: str = ""
    between: str = ""  # between two calls of a section
    numbered: bool = False  # `NAME:INDEX` (Kimi's call ids)
    id_tag: str = ""  # before a call's id of 9 letters and digits, after its name (Mistral Small 3.2's [CALL_ID])
    markers: tuple[str, ...] = ()

    @property
    def openings(self) -> tuple[str, ...]:
        return (tags(self.section_open or self.call_open)[0],)

    def read(
        self, text: str, at: int, final: bool, reads: ValueReads | None, strings: Strings
    ) -> tuple[list[CallText], int, State]:
        i, state = expect_all(text, at, tags(self.section_open))
        if state is not None:
            return [], i, state
        calls: list[CallText] = []
        while True:
            call, j, state = self._call(text, i, reads)
            if call is None:  # no call here; after a call, the section's end (or content)
                if not calls or state is State.OPEN:
                    return calls, j, state
                break
            calls.append(call)
            i = j
            if state is not State.DONE or not call.closed:  # the text ends in it, or it is malformed
                return calls, i, State.OPEN if state is State.OPEN else State.DONE
            if not self.section_open:
                return calls, i, State.DONE
        return after_closer(calls, text, i, self.section_close.strip(), final)

    def _call(self, text: str, i: int, reads: ValueReads | None) -> tuple[CallText | None, int, State]:
        """One call from its opening marker: None until its name is whole; then its arguments as far as they go."""
        i, state = expect_all(text, i, tags(self.call_open))
        if state is not None:
            return None, i, state
        name = NAME.match(text, i)
        if name is None or name.end() == len(text):  # no name, or one that may go on
            return None, i, State.OPEN if i == len(text) or (name and len(text) - i <= 64) else State.NONE
        k = name.end()
        if self.numbered:
            k, state = expect_all(text, k, (":",))
            number = _DIGITS.match(text, k) if state is None else None
            if number is None or number.end() == len(text):
                return None, k, state or (State.OPEN if k == len(text) or number else State.NONE)
            k = number.end()
        if self.id_tag:
            k, state = expect_all(text, k, (self.id_tag,))
            identity = _ID.match(text, k) if state is None else None
            if identity is None or identity.end() == len(text):
                return None, k, state or (State.OPEN if k == len(text) or identity else State.NONE)
            k = identity.end()
        a, state = expect_all(text, k, tags(self.args_open))
        if state is not None:
            return None, a, state
        call = CallText(name.group())
        a = skip_ws(text, a)
        if a == len(text):
            return call, a, State.OPEN
        end, stop = read_value(text, a, reads)
        call.raw_arguments, call.closed = text[a:stop], bool(end and end > 0)
        if end is None:
            return call, stop, State.OPEN
        if end == -1:
            return call, stop, State.DONE  # malformed arguments keep the text before the fault
        c, state = expect_all(text, end, tags(self.call_close))
        if state is State.OPEN:
            return call, end, State.OPEN  # its closing marker may be coming
        return call, end if state is State.NONE else c, State.DONE

    def write(self, calls: list[tuple[str, dict]]) -> str:
        written = [
            f"{self.call_open}{name}{f':{k}' if self.numbered else ''}{f'{self.id_tag}call{k:05d}' if self.id_tag else ''}"
            f"{self.args_open}{json.dumps(arguments)}{self.call_close}"
            for k, (name, arguments) in enumerate(calls)
        ]
        return self.section_open + self.between.join(written) + self.section_close

    def grammar(self, functions: list[dict], parallel: bool, lenient: bool) -> str:
        lines = []
        for k, function in enumerate(functions):
            head = self.call_open + function["name"]
            number = f"{literal(':')} /[0-9]{{1,3}}/ " if self.numbered else ""
            number += f"{literal(self.id_tag)} /[A-Za-z0-9]{{9}}/ " if self.id_tag else ""
            closing = f" {literal(self.call_close)}" if self.call_close else ""
            lines.append(f"tc_call_{k}: {literal(head)} {number}{literal(self.args_open)} tc_args_{k}{closing}")
            lines.append(f"tc_args_{k}: {json_value(function['parameters'], lenient)}")
        lines.append("tc_call: " + " | ".join(f"tc_call_{k}" for k in range(len(functions))))
        between = f"{literal(self.between)} " if self.between else ""
        calls = f"tc_call ({between}tc_call)*" if parallel else "tc_call"
        if self.section_open:
            calls = f"{literal(self.section_open)} {calls} {literal(self.section_close)}"
        return "\n".join([f"start: {calls}", *lines])


_DEEPSEEK_MARKERS = (
    "<｜tool▁calls▁begin｜>",
    "<｜tool▁call▁begin｜>",
    "<｜tool▁sep｜>",
    "<｜tool▁call▁end｜>",
    "<｜tool▁calls▁end｜>",
)
DEEPSEEK_V3_1_FORM = NamedForm(
    "<｜tool▁call▁begin｜>", "<｜tool▁sep｜>", "<｜tool▁call▁end｜>", "<｜tool▁calls▁begin｜>", "<｜tool▁calls▁end｜>",
    markers=_DEEPSEEK_MARKERS,
)  # fmt: skip
DEEPSEEK_R1_FORM = NamedForm(
    "<｜tool▁call▁begin｜>function<｜tool▁sep｜>", "\n```json\n", "\n```<｜tool▁call▁end｜>", "<｜tool▁calls▁begin｜>",
    "<｜tool▁calls▁end｜>", between="\n", markers=_DEEPSEEK_MARKERS,
)  # fmt: skip
KIMI_K2_FORM = NamedForm(
    "<|tool_call_begin|>functions.", "<|tool_call_argument_begin|>", "<|tool_call_end|>", "<|tool_calls_section_begin|>",
    "<|tool_calls_section_end|>", numbered=True,
    markers=("<|tool_calls_section_begin|>", "<|tool_call_begin|>", "<|tool_call_argument_begin|>", "<|tool_call_end|>",
             "<|tool_calls_section_end|>"),
)  # fmt: skip
MINISTRAL_3_FORM = NamedForm("[TOOL_CALLS]", "[ARGS]", markers=("[TOOL_CALLS]", "[ARGS]"))
MISTRAL_SMALL_3_2_FORM = NamedForm("[TOOL_CALLS]", "[ARGS]", id_tag="[CALL_ID]", markers=("[TOOL_CALLS]", "[CALL_ID]", "[ARGS]"))
