"""What a tool-call syntax beyond one JSON object a call is (`Form`: its reader, its grammar, how it
writes calls), and reading the tags it is made of out of a growing text: a tag matched, cut by the
text's end (it may still come), or not there."""

from __future__ import annotations

import json
import re
from typing import Protocol

from .json_text import CallText, State, ValueReads, skip_ws

NAME = re.compile(r"[A-Za-z0-9_-]+")  # a function's name (tool_calls.py's NAME_CHARS)
Strings = frozenset[tuple[str, str]]  # (function, argument): the arguments whose values are strings


class Form(Protocol):
    """A wrapper kind's reader and grammar; `openings` are the texts a block of calls opens with
    (the first is the lazy grammar's trigger), `markers` the texts its replies must read written
    out (where a model's vocabulary holds them as control tokens)."""

    openings: tuple[str, ...]
    markers: tuple[str, ...]

    def read(
        self, text: str, at: int, final: bool, reads: ValueReads | None, strings: Strings
    ) -> tuple[list[CallText], int, State]:
        """The calls of the block that opens at text[at] (one of `openings`), where the reading
        stopped, and DONE (read, or malformed past a call's name: the rest is content), OPEN (the
        text ends inside it) or NONE (no call after all: its text is content)."""
        ...

    def grammar(self, functions: list[dict], parallel: bool, lenient: bool) -> str:
        """The Lark grammar of a reply's calls (one unless `parallel`), from the block's opening on."""
        ...

    def write(self, calls: list[tuple[str, dict]]) -> str:
        """Calls (name, arguments) as the family writes them."""
        ...


def tags(written: str) -> tuple[str, ...]:
    """The tags of a piece of a syntax as its template writes it; blanks between them are free."""
    return tuple(written.split())


def expect(text: str, i: int, tag: str) -> tuple[int, State | None]:
    """After blanks at text[i], `tag`: (where it ends, None), or (where it was looked for, OPEN)
    when the text ends inside what may still become it, or NONE when it is not there."""
    j = skip_ws(text, i)
    if text.startswith(tag, j):
        return j + len(tag), None
    if len(text) - j < len(tag) and tag.startswith(text[j:]):
        return j, State.OPEN
    return j, State.NONE


def expect_all(text: str, i: int, written: tuple[str, ...]) -> tuple[int, State | None]:
    """`expect` each of `written` in turn."""
    for tag in written:
        i, state = expect(text, i, tag)
        if state is not None:
            return i, state
    return i, None


def partial_len(text: str, marker: str) -> int:
    """The length of the longest end of `text` that begins `marker` (and may become it)."""
    for n in range(min(len(marker) - 1, len(text)), 0, -1):
        if text.endswith(marker[:n]):
            return n
    return 0


def after_closer(calls: list[CallText], text: str, end: int, closer: str, final: bool) -> tuple[list[CallText], int, State]:
    """A whole block's calls, read on past its `closer` where it follows at `end` (blanks before it)."""
    k = skip_ws(text, end)
    if closer and text.startswith(closer, k):
        return calls, k + len(closer), State.DONE
    if closer and closer.startswith(text[k : k + len(closer)]):  # its closer may be coming, or was cut short
        return calls, len(text), State.DONE if final else State.OPEN
    return calls, end, State.DONE


def json_of(raw: str) -> str:
    """A value written as text, as JSON: itself where it is JSON (Python's True, False and None
    too), else a string of it."""
    text = raw.strip()
    text = {"True": "true", "False": "false", "None": "null"}.get(text, text)
    try:
        return json.dumps(json.loads(text, parse_constant=_no_constant), ensure_ascii=False)
    except ValueError:
        return json.dumps(raw, ensure_ascii=False)


def _no_constant(name: str):
    raise ValueError(f"{name} is not JSON")  # NaN and Infinity: Python's json reads them, JSON has none
