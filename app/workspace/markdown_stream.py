"""A streaming reply's Markdown split as it comes: whole blocks that what follows cannot change, and the
open tail after them; the code of fenced code blocks as written; a finished JSON reply formatted and marked
valid or not. No Qt: the transcript draws the parts."""

from __future__ import annotations

import json
import re

_FENCE = re.compile(r"( *)(`{3,}|~{3,})(.*)")


class MarkdownStream:
    """A reply's Markdown fed piece by piece: `feed` hands back the blocks each piece finished, `tail` is
    the rest, the block in progress (with the blank lines before it)."""

    def __init__(self) -> None:
        self.tail = ""
        # the last piece ended a line or began one: only then can a block end or a code block begin
        self.line_ended = False

    def feed(self, text: str) -> str:
        """Add `text`; the Markdown of the blocks it finished, taken off the tail ("" when none)."""
        self.line_ended = "\n" in text or self.tail.endswith("\n")
        self.tail += text
        finished = finished_length(self.tail) if self.line_ended else 0
        if not finished:
            return ""
        done, self.tail = self.tail[:finished], self.tail[finished:]
        return done

    @property
    def open_code(self) -> str | None:
        """The code so far when the tail is a code block not yet closed; None otherwise."""
        return _open_code(self.tail)


def finished_length(tail: str) -> int:
    """How much of `tail`, Markdown from a block's start, is whole blocks that what follows cannot change:
    up to a blank line that an unindented line follows (an indented one may go on with a list item), up
    to a fence that opens a code block, and past the fence that closes it. Not before a table: rendered
    alone, Qt would put an empty line above it that the whole reply has not."""
    finished, position, fence, top_level, after_blank = 0, 0, "", False, False
    lines = tail.split("\n")
    for number, line in enumerate(lines):
        whole = number < len(lines) - 1
        if fence:  # in a code block, only its closing fence counts
            found = _FENCE.fullmatch(line)
            if whole and found and found[2].startswith(fence) and not found[3].strip():
                fence = ""
                if top_level:
                    finished = position + len(line) + 1
        elif not line.strip():
            after_blank = after_blank or whole
        else:
            if after_blank and not line[0].isspace() and line[0] != "|":
                finished = position
            after_blank = False
            fence = _opening_fence(line) if whole else ""
            top_level = not line[0].isspace()
            if fence and top_level:
                finished = position
        position += len(line) + 1
    return finished


def _open_code(tail: str) -> str | None:
    """The code so far when `tail` starts with a fence that opens a code block; None otherwise."""
    first, newline, code = tail.partition("\n")
    return code if newline and not first[:1].isspace() and _opening_fence(first) else None


def fenced_code(markdown: str) -> list[str]:
    """The code of each fenced code block, as written (those in a quote aside)."""
    blocks, fence, indent, lines = [], "", 0, []
    for line in markdown.split("\n"):
        if fence:
            found = _FENCE.fullmatch(line)
            if found and found[2].startswith(fence) and not found[3].strip():
                blocks.append("\n".join(lines))
                fence = ""
            else:  # the fence's indentation is not the code's
                lines.append(line[min(indent, len(line) - len(line.lstrip(" "))) :])
        elif fence := _opening_fence(line):
            indent, lines = len(line) - len(line.lstrip(" ")), []
    if fence:  # one left open runs to the end
        blocks.append("\n".join(lines))
    return blocks


def _opening_fence(line: str) -> str:
    """The fence (``` or ~~~, or longer) that `line` opens a code block with; "" when it opens none."""
    found = _FENCE.fullmatch(line)
    if found is None or (found[2][0] == "`" and "`" in found[3]):  # ```x``` is inline code
        return ""
    return found[2]


VALID_JSON = "✓ valid JSON"
CUT_JSON = "✗ cut at max tokens: not complete"


def json_reply(text: str, cut_at_max_tokens: bool = False) -> str:
    """A reply asked for as JSON, as Markdown: pretty-printed in a code block when it is valid JSON (as
    written when not), then a mark: valid, not valid and why, or cut at max tokens."""
    try:
        shown, mark = json.dumps(json.loads(text), indent=2, ensure_ascii=False), VALID_JSON
    except ValueError as e:  # JSONDecodeError, or a number too long to read
        shown = text.strip()
        mark = CUT_JSON if cut_at_max_tokens else f"✗ not valid JSON: {e}"
    fence = "`" * max(3, 1 + max((len(run) for run in re.findall(r"`+", shown)), default=0))
    return f"{fence}json\n{shown}\n{fence}\n\n{_escaped(mark)}\n"


def _escaped(text: str) -> str:
    """Plain text as Markdown that shows it as it is."""
    return re.sub(r"([\\`*_{}\[\]<>()#+\-.!|~])", r"\\\1", text)
