"""A reply's text split into its thoughts and its answer as it streams, by its family's markers
(prompt/thinking.py): a marker cut across tokens is held until it is whole, so the pieces a stream
tells add up to what the whole reply splits into.

Tags (`<think>…</think>`, `[THINK]…[/THINK]`, `<seed:think>…`): one thought at the reply's start
(or from its first token, where the prompt opened it), then the answer. Blanks around the thoughts
go, as llama.cpp trims them. Harmony (gpt-oss): messages of a channel each, `<|channel|>analysis
<|message|>…<|end|>` a thought, `final` (and a `commentary` preamble) the answer; a call
(`commentary to=functions.X`) stays in the answer as written, header and all, for the tool parser."""

from __future__ import annotations

import re
from enum import Enum, auto

from .thinking import ThinkingFormat

_ENDS = ("<|end|>", "<|return|>", "<|call|>", "<|start|>")  # a Harmony message ends at these (the last: a new one)
MAX_HEADER = 256  # characters of a Harmony header at most: past them the text is taken as answer


class Part(Enum):
    LEAD = auto()  # the reply's start: thoughts may open here
    THOUGHT = auto()
    AFTER = auto()  # thoughts just closed: blanks before the answer go
    ANSWER = auto()
    HEADER = auto()  # Harmony: a message's header, up to <|message|>
    CALL = auto()  # Harmony: a tool call's message, kept as written


class Thoughts:
    """Split one reply; `feed` each piece of text as it comes, `finish` once. With no format (a
    family that does not think) everything is answer; `separate=False` (llama-server's
    `--reasoning-format none`) keeps the thoughts in the answer as written but still knows where
    they are (`in_thought`), for the reasoning budget and the counts."""

    def __init__(self, fmt: ThinkingFormat | None, opened: bool = False, separate: bool = True, closed: bool = False):
        """`opened`: the prompt left the reply inside its thoughts; `closed`: it closed them (the
        answer comes, after any blanks)."""
        self.fmt = fmt
        self.separate = separate
        self._held = ""
        self._reasoning: list[str] = []
        self._answer: list[str] = []
        if fmt is None:
            self._part = Part.ANSWER
        elif opened:
            self._part = Part.THOUGHT
        elif closed:
            self._part = Part.ANSWER if fmt.harmony else Part.AFTER
        else:
            self._part = Part.HEADER if fmt.harmony else Part.LEAD
        self._trim = self._part is Part.THOUGHT  # blanks opening a thought go

    def prime(self, text: str) -> None:
        """The reply's start, given (a prefill): read as if the model had written it, then not told,
        so that the split goes on from where it leaves the reply (inside its thoughts or after
        them) and the pieces and the whole tell only what follows it."""
        if text:
            self.feed(text)
            self._reasoning, self._answer = [], []

    @property
    def in_thought(self) -> bool:
        """Whether the text so far ends inside a thought."""
        return self._part is Part.THOUGHT

    @property
    def reasoning(self) -> str:
        return "".join(self._reasoning)

    @property
    def answer(self) -> str:
        return "".join(self._answer)

    def feed(self, text: str) -> tuple[str, str]:
        """(thought, answer): what `text` adds to each, as far as it can be told now."""
        if self.fmt is None:
            return self._out("", text)
        if not self.separate:
            self._held += text
            self._run(False)  # the state only: the text goes out as it came
            return self._out("", text)
        self._held += text
        return self._out(*self._run(False))

    def finish(self) -> tuple[str, str]:
        """The reply ended: what was held back, where it belongs."""
        if self.fmt is None or not self.separate:
            return "", ""
        return self._out(*self._run(True))

    def _out(self, thought: str, answer: str) -> tuple[str, str]:
        if thought:
            self._reasoning.append(thought)
        if answer:
            self._answer.append(answer)
        return thought, answer

    def _run(self, final: bool) -> tuple[str, str]:
        thought, answer = [], []
        while True:
            moved = self._step(final, thought, answer)
            if not moved:
                return "".join(thought), "".join(answer)

    def _step(self, final: bool, thought: list[str], answer: list[str]) -> bool:
        """One move of the split over the held text; False when it must wait for more."""
        part, fmt = self._part, self.fmt
        if part is Part.LEAD:
            lead = self._held.lstrip()
            if lead.startswith(fmt.start):
                self._held, self._part, self._trim = lead[len(fmt.start) :], Part.THOUGHT, True
                return True
            if not final and fmt.start.startswith(lead):
                return False  # blanks, or the start of the opening marker
            self._part = Part.ANSWER
            return True
        if part is Part.THOUGHT:
            return self._thought(final, thought)
        if part is Part.AFTER:
            self._held = self._held.lstrip()
            if not self._held and not final:
                return False
            if fmt.answer_start and (self._held or final):
                if not final and fmt.answer_start.startswith(self._held):
                    return False
                if self._held.startswith(fmt.answer_start):
                    self._held = self._held[len(fmt.answer_start) :]
            self._part = Part.ANSWER
            return True
        if part is Part.HEADER:
            return self._header(final, answer)
        return self._body(final, thought if part is Part.THOUGHT else answer)

    def _thought(self, final: bool, thought: list[str]) -> bool:
        held = self._held.lstrip() if self._trim else self._held
        if self._trim and held:
            self._trim = False
        self._held = held
        at = held.find(self.fmt.end)
        if at >= 0:
            thought.append(held[:at].rstrip())
            self._held = held[at + len(self.fmt.end) :]
            self._part = Part.HEADER if self.fmt.harmony else Part.AFTER
            return True
        # a marker's start is held, and the blanks before it: they go if the marker comes
        cut = 0 if final else len(held[: len(held) - _partial_len(held, self.fmt.end)].rstrip())
        taken = held.rstrip() if final else held[:cut]
        thought.append(taken)
        self._held = "" if final else held[cut:]
        return False

    def _header(self, final: bool, answer: list[str]) -> bool:
        """Harmony: a message's header, read once whole (up to <|message|>); text that is no header is answer."""
        held = self._held
        lead = held.lstrip()
        if not lead:  # blanks between messages
            self._held = "" if final else held
            return False
        looks = any(lead.startswith(h) or h.startswith(lead) for h in ("<|", "to="))
        at = held.find("<|message|>") if looks else -1
        if at < 0:
            if looks and len(held) <= MAX_HEADER:
                self._held = "" if final else held  # a header the reply's end cut: no message of it
                return False
            # not a header after all: answer, as written, up to where a message may end or begin
            tail = 0 if final else max(_partial_len(held, m) for m in _ENDS)
            cut = min([i for m in _ENDS if (i := held.find(m, 1)) >= 0], default=len(held) - tail)
            answer.append(held[:cut])
            self._held, self._part = held[cut:], Part.ANSWER
            return bool(self._held)
        header, self._held = held[:at], held[at + len("<|message|>") :]
        channel = (header.split("<|channel|>")[-1].split() or [""])[0].split("<|")[0] if "<|channel|>" in header else ""
        recipients = [r.split("<|")[0] for r in re.findall(r"to=(\S+)", header)]
        if any(r != "assistant" for r in recipients):  # a call of a tool (a stray `to=assistant` is none)
            self._part = Part.CALL
            answer.append(header.strip().removeprefix("<|start|>assistant") + "<|message|>")
        elif channel == "analysis":
            self._part, self._trim = Part.THOUGHT, True
        else:
            self._part = Part.ANSWER
        return True

    def _body(self, final: bool, out: list[str]) -> bool:
        """The answer (Harmony: a message's, up to its end marker; tags: all the rest)."""
        held, fmt = self._held, self.fmt
        if not fmt.harmony:
            return self._tag_answer(final, out)
        ends = [(i, m) for m in _ENDS if (i := held.find(m)) >= 0]
        if ends:
            at, marker = min(ends)
            out.append(held[:at])
            self._held = held[at + (0 if marker == "<|start|>" else len(marker)) :]
            self._part = Part.HEADER
            return True
        keep = 0 if final else max(_partial_len(held, m) for m in _ENDS)
        out.append(held[: len(held) - keep])
        self._held = held[len(held) - keep :]
        return False

    def _tag_answer(self, final: bool, out: list[str]) -> bool:
        held, end = self._held, self.fmt.answer_end
        if not end:
            out.append(held)
            self._held = ""
            return False
        at = held.find(end)
        if at >= 0:
            out.append(held[:at])
            self._held = held[at + len(end) :]
            return bool(self._held)
        keep = 0 if final else _partial_len(held, end)
        out.append(held[: len(held) - keep])
        self._held = held[len(held) - keep :]
        return False


def _partial_len(text: str, marker: str) -> int:
    """The length of the longest end of `text` that begins `marker` (and may become it)."""
    for n in range(min(len(marker) - 1, len(text)), 0, -1):
        if text.endswith(marker[:n]):
            return n
    return 0
