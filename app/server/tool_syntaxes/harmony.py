"""gpt-oss's tool calls (OpenAI's Harmony format): a message to a function, its recipient in the
channel's header or in the role's, its arguments as JSON:

    <|start|>assistant<|channel|>commentary to=functions.NAME <|constrain|>json<|message|>{...}<|call|>
    <|start|>assistant to=functions.NAME<|channel|>commentary json<|message|>{...}<|call|>

The split of a reply (app/engine/thoughts.py) gives the analysis channel to the thoughts and a
call's message to the answer as written, less `<|start|>assistant` and its `<|call|>` (with
`reasoning_format: none` the text comes as the model wrote it, and is read the same)."""

from __future__ import annotations

import json
from dataclasses import dataclass

from .form import NAME, Strings, after_closer, expect
from .json_text import CallText, State, ValueReads, read_value, skip_ws
from .lark import json_value, literal, text_until

MAX_HEADER = 256  # characters between a recipient and its <|message|>: past them, no call
_HEADER_ENDS = ("<|end|>", "<|start|>", "<|call|>", "<|return|>")  # a header that holds one is none


@dataclass(frozen=True)
class HarmonyForm:
    openings: tuple[str, ...] = ("<|channel|>", "to=functions.", "<|start|>assistant")
    markers: tuple[str, ...] = ("<|start|>", "<|channel|>", "<|message|>", "<|constrain|>", "<|end|>", "<|call|>")

    def read(
        self, text: str, at: int, final: bool, reads: ValueReads | None, strings: Strings
    ) -> tuple[list[CallText], int, State]:
        i = at
        if text.startswith("<|start|>", i):
            i, state = expect(text, i, "<|start|>assistant")
            if state is not None:
                return [], i, state
        j = skip_ws(text, i)
        if j < len(text) and len(text) - j < len("<|channel|>") and "<|channel|>".startswith(text[j:]):
            return [], j, State.OPEN
        if text.startswith("<|channel|>", j):
            i = j + len("<|channel|>")
            word = NAME.match(text, i)
            i = word.end() if word else i
            if i == len(text):
                return [], i, State.OPEN
        i, state = expect(text, i, "to=functions.")
        if state is not None:
            return [], i, state
        name = NAME.match(text, i)
        if name is None:
            return [], i, State.OPEN if i == len(text) else State.NONE
        header_end = text.find("<|message|>", name.end(), name.end() + MAX_HEADER + len("<|message|>"))
        rest = text[name.end() : header_end if header_end >= 0 else name.end() + MAX_HEADER]
        if any(end in rest for end in _HEADER_ENDS):
            return [], i, State.NONE
        if header_end < 0:  # the header goes on, or never closes
            return [], i, State.OPEN if len(text) - name.end() <= MAX_HEADER else State.NONE
        call = CallText(name.group())
        a = skip_ws(text, header_end + len("<|message|>"))
        if a == len(text):
            return [call], a, State.OPEN
        end, stop = read_value(text, a, reads)
        call.raw_arguments, call.closed = text[a:stop], bool(end and end > 0)
        if end is None:
            return [call], stop, State.OPEN
        if end == -1:
            return [call], stop, State.DONE  # malformed arguments keep the text before the fault
        return after_closer([call], text, end, "<|call|>", final)

    def grammar(self, functions: list[dict], parallel: bool, lenient: bool) -> str:
        """One call (gpt-oss's template renders one a message, and `<|call|>` ends its turn), in
        either header, after an analysis message if the model thinks first. A reasoning budget
        that runs out closes the analysis with the final channel's header (ThinkingFormat.close):
        the call may follow it, and the split gives it to the answer, where it is read the same."""
        lines = [
            "start: tc_analysis? (tc_in_role | tc_in_channel)",
            f"tc_analysis: {literal('<|channel|>analysis<|message|>')} tc_thought {literal('<|start|>assistant')} tc_final?",
            f"tc_final: {literal('<|channel|>final<|message|>')}",
            f"tc_thought[lazy]: {text_until('<|end|>')}",
        ]
        in_role, in_channel = [], []
        for k, function in enumerate(functions):
            lines.append(f"tc_args_{k}: {json_value(function['parameters'], lenient)}")
            in_role.append(f"{literal(function['name'] + '<|channel|>commentary json<|message|>')} tc_args_{k}")
            in_channel.append(f"{literal(function['name'] + ' <|constrain|>json<|message|>')} tc_args_{k}")
        lines.append(f"tc_in_role: {literal(' to=functions.')} ({' | '.join(in_role)})")
        lines.append(f"tc_in_channel: {literal('<|channel|>commentary to=functions.')} ({' | '.join(in_channel)})")
        return "\n".join(lines)

    def write(self, calls: list[tuple[str, dict]]) -> str:
        return "".join(
            f"<|channel|>commentary to=functions.{name} <|constrain|>json<|message|>{json.dumps(arguments)}<|call|>"
            for name, arguments in calls
        )


# a lazy grammar's triggers: a recipient in the role's header (at the reply's start, where the
# generation prompt wrote `<|start|>assistant`, or after a message) or in the channel's
HARMONY_TRIGGERS = (
    r"(?:^|<\|start\|>assistant)( to=functions\.)",
    r"(<\|channel\|>commentary to=functions\.)",
)
