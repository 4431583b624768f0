"""How a model family marks its thoughts, told from its chat template as llama.cpp's common/chat.cpp
does: a few families by their template's source (gpt-oss's Harmony channels, Magistral's [THINK],
Granite 3.3, Apriel), the others by rendering the template twice and reading the difference (an
assistant turn with and without `reasoning_content`; a generation prompt with thinking off and on).

A format also says how earlier turns' thoughts go back to the template (`reasoning_content` on an
assistant message; gpt-oss's `thinking`; Magistral's content blocks) and whether a rendered prompt
leaves the reply inside its thoughts (DeepSeek R1's `<think>\\n` at the generation prompt's end)."""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from enum import Enum

Message = dict[str, object]  # a chat message as a template reads it


class History(Enum):
    """How an assistant turn's thoughts reach the template."""

    REASONING_CONTENT = "reasoning_content"  # as llama.cpp passes them: most templates read this
    THINKING = "thinking"  # gpt-oss's template reads `thinking`
    BLOCKS = "blocks"  # Magistral's: content as [{"type": "thinking", ...}, {"type": "text", ...}]


@dataclass(frozen=True)
class ThinkingFormat:
    """The markers of a family's thoughts. `start` opens them ("" where the reply opens in them
    unmarked); `end` closes them; `close` is what a reasoning budget puts in when it runs out (the
    end, and for Harmony the header of the final answer); `answer_start` / `answer_end` wrap the
    answer after thoughts (Granite 3.3's <response>); `harmony`: gpt-oss's channels."""

    name: str
    start: str
    end: str
    close: str = ""
    answer_start: str = ""
    answer_end: str = ""
    harmony: bool = False
    history: History = History.REASONING_CONTENT

    @property
    def closing(self) -> str:
        return self.close or self.end

    @property
    def markers(self) -> tuple[str, ...]:
        """The texts a reply's split reads: a control token among them must reach it written out."""
        texts = HARMONY_MARKERS if self.harmony else (self.start, self.end, self.answer_start, self.answer_end)
        return tuple(t for t in texts if t)

    def closed_by(self, prompt: str) -> bool:
        """Whether a rendered prompt ends its reply's thoughts before they begin (Qwen3 with thinking
        off writes an empty one), or a budget of 0 put the closing marker after it: the answer comes."""
        if self.harmony:
            return prompt.rstrip().endswith("<|channel|>final<|message|>")
        return prompt.rstrip().endswith(self.closing.strip())

    def opened_by(self, prompt: str) -> bool:
        """Whether a rendered prompt leaves the reply inside its thoughts: its generation prompt ends
        with the opening marker (DeepSeek R1, Qwen3 continued), or the family opens them unmarked."""
        if self.harmony:
            return prompt.rstrip().endswith("<|channel|>analysis<|message|>")
        return not self.start or prompt.rstrip().endswith(self.start)

    def for_template(self, message: Message) -> Message:
        """An assistant turn as the template wants its thoughts (a `reasoning` key on the way in)."""
        reasoning = message.get("reasoning_content")
        if message.get("role") != "assistant" or not reasoning or self.history is History.REASONING_CONTENT:
            return message
        if self.history is History.THINKING:
            return {**message, "thinking": reasoning}
        rest = {k: v for k, v in message.items() if k != "reasoning_content"}
        blocks = [{"type": "thinking", "thinking": reasoning}]
        if message.get("content"):
            blocks.append({"type": "text", "text": message["content"]})
        return {**rest, "content": blocks}


HARMONY_MARKERS = ("<|start|>", "<|channel|>", "<|message|>", "<|end|>", "<|return|>", "<|call|>", "<|constrain|>")
HARMONY = ThinkingFormat(
    "Harmony channels (gpt-oss)",
    "<|channel|>analysis<|message|>",
    "<|end|>",
    close="<|end|><|start|>assistant<|channel|>final<|message|>",
    harmony=True,
    history=History.THINKING,
)
# a budget's close as the templates write a closed thought (`<think>\n…\n</think>\n\n`): the answer follows
THINK_TAGS = ThinkingFormat("<think> tags", "<think>", "</think>", close="\n</think>\n\n")
MAGISTRAL = ThinkingFormat("[THINK] tags (Magistral)", "[THINK]", "[/THINK]", history=History.BLOCKS)
SEED = ThinkingFormat("<seed:think> tags (Seed-OSS)", "<seed:think>", "</seed:think>", close="\n</seed:think>\n\n")
GRANITE_3_3 = ThinkingFormat(
    "<think> and <response> (Granite 3.3)",
    "<think>",
    "</think>",
    close="</think><response>",
    answer_start="<response>",
    answer_end="</response>",
)
APRIEL = ThinkingFormat(
    "[BEGIN FINAL RESPONSE] (Apriel)",
    "",
    "[BEGIN FINAL RESPONSE]",
    close="\n[BEGIN FINAL RESPONSE]",
    answer_end="[END FINAL RESPONSE]",
)

# the source tells these apart, before any render (llama.cpp's specialized templates and workarounds)
_BY_SOURCE: tuple[tuple[Callable[[str], bool], ThinkingFormat], ...] = (
    (lambda s: "<|channel|>" in s, HARMONY),
    (lambda s: "[THINK]" in s and "[/THINK]" in s, MAGISTRAL),
    (lambda s: "write your response between <response></response>" in s, GRANITE_3_3),
    (lambda s: "[BEGIN FINAL RESPONSE]" in s, APRIEL),
)


class ProbeFailed(Exception):
    """A probe's render was stopped (it ran over its time, its process crashed): no more probes."""


# the probes' texts: nothing a template would write of itself
USER_TEXT = "U_USER_MSG Hello END_U"
ANSWER_TEXT = "A_ASST_MSG I can help END_A"
THOUGHT_TEXT = "REASON_PART I am thinking END_R"
_MARKER = re.compile(r"<[^<>\s]{1,40}>|\[[^\[\]\s]{1,40}\]")
_OPENING = re.compile(r"(?:<[^<>\s]{1,40}>|\[[^\[\]\s]{1,40}\])\w{0,20}$")  # a marker, maybe a channel's name after it
_TAIL = 64  # characters of one render's end looked for in the other (llama.cpp's anchor)

# (messages, add_generation_prompt, variables, tools) -> text
Render = Callable[[list[Message], bool, dict, list | None], str]
_PROBE_TOOL = {"type": "function", "function": {"name": "probe_tool", "parameters": {"type": "object", "properties": {}}}}
_PROBE_CALL = {"id": "call00001", "type": "function", "function": {"name": "probe_tool", "arguments": {}}}


def detect_thinking(source: str | None, render: Render) -> ThinkingFormat | None:
    """The thinking format a chat template teaches, or None. `render` runs the template (in its
    sandbox) and raises ProbeFailed where the render was stopped; a template that refuses the
    probes is judged by its source alone."""
    if not source:
        return None
    for matches, known in _BY_SOURCE:
        if matches(source):
            return known
    try:
        found = _probe(render)
    except ProbeFailed:  # a template that loops costs its time once, not at every probe
        found = None
    if found is None and ("content.split('</think>')" in source or ("<think>" in source and "</think>" in source)):
        return THINK_TAGS  # old Qwen and DeepSeek R1 templates drop thoughts rather than render them
    return found


def _probe(render: Render) -> ThinkingFormat | None:
    start, end = _markers_around_thoughts(render)
    if not end:
        start2, end2 = _markers_of_the_switch(render)
        start, end = start or start2, end2
    if not start or not end:  # thoughts that open unmarked are told by the source only (Apriel)
        return None
    known = {f.end: f for f in (THINK_TAGS, SEED, MAGISTRAL)}.get(end)
    if known is not None and known.start == start:
        return known
    close = f"\n{end}\n\n" if end.startswith("</") else end
    return ThinkingFormat(f"{start or '(unmarked)'} … {end}", start, end, close=close)


def _markers_around_thoughts(render: Render) -> tuple[str, str]:
    """An assistant turn rendered with thoughts: the markers just before and after them; where a
    template shows thoughts only beside tool calls (Command R7B), such a turn's."""
    user = {"role": "user", "content": USER_TEXT}
    turn = {"role": "assistant", "content": ANSWER_TEXT, "reasoning_content": THOUGHT_TEXT}
    calling = {"role": "assistant", "content": "", "reasoning_content": THOUGHT_TEXT, "tool_calls": [_PROBE_CALL]}
    for messages, tools in (([user, turn], None), ([user, calling], [_PROBE_TOOL])):
        try:
            text = render(messages, False, {"enable_thinking": True}, tools)
        except ProbeFailed:
            raise
        except Exception:  # a template that refuses this conversation
            continue
        if THOUGHT_TEXT in text:
            return _around(text)
    return "", ""


def _around(text: str) -> tuple[str, str]:
    at = text.find(THOUGHT_TEXT)
    if at < 0:
        return "", ""
    before, after = text[:at].rstrip(), text[at + len(THOUGHT_TEXT) :].lstrip()
    start = m.group() if (m := _OPENING.search(before)) else ""
    end = m.group() if (m := _MARKER.match(after)) else ""
    return start, end


def _markers_of_the_switch(render: Render) -> tuple[str, str]:
    """A generation prompt with thinking off and on: the markers one adds at its end (Qwen3 and
    SmolLM3 close an empty thought when it is off), anchored on the other's last characters."""
    user = {"role": "user", "content": USER_TEXT}
    try:
        off = render([user], True, {"enable_thinking": False}, None)
        on = render([user], True, {"enable_thinking": True}, None)
    except ProbeFailed:
        raise
    except Exception:  # a template that refuses this conversation
        return "", ""
    for base, longer in ((on, off), (off, on)):
        anchor = base[-_TAIL:]
        at = longer.rfind(anchor) if anchor else -1
        if at < 0 or at + len(anchor) >= len(longer):
            continue
        extra = longer[at + len(anchor) :].strip()
        markers = _MARKER.findall(extra)
        if len(markers) == 2 and "".join(markers) == re.sub(r"\s+", "", extra):
            return markers[0], markers[1]
        if len(markers) == 1 and markers[0] == extra and longer is on:
            return markers[0], "</" + markers[0][1:] if markers[0].startswith("<") else ""
    return "", ""
