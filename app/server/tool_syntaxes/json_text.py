"""JSON values read out of a growing text: where a value ends (or that the text ends first), read
on from where the last reading stopped, and a call as far as it is written (its name, its
arguments' text). The tool-call readers of every syntax share them."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from enum import Enum, auto

# a JSON string (closed, or running to the end of the text), punctuation, whitespace, or a scalar
_TOKEN = re.compile(r'"(?:[^"\\]|\\.)*(?:"|\\?\Z)|[{}\[\],:]|\s+|[^"{}\[\],:\s]+')
_STRING_REST = re.compile(r'(?:[^"\\]|\\.)*(?:"|\\?\Z)')  # a string of _TOKEN read on from a piece's start
_WS = " \t\r\n"


class State(Enum):
    DONE = auto()  # the block is read: its calls, and where the text goes on
    OPEN = auto()  # the text ends inside it: what follows is not decided yet
    NONE = auto()  # not a call after all: its text is content


@dataclass
class CallText:
    """One call as written so far: its name once whole, its arguments' JSON text as far as it goes."""

    name: str | None = None
    raw_arguments: str = ""
    closed: bool = False  # its object is whole

    @property
    def arguments(self) -> str:
        # a call written without arguments takes none; known only once its object closed
        return self.raw_arguments or ("{}" if self.closed else "")


def value_end(text: str, i: int, reads: ValueReads | None = None) -> int | None:
    """Where the JSON value that starts at text[i] ends; None when the text ends first; -1 when it
    is malformed (a bracket closed that was not open). Scalars are not checked, only the structure."""
    return read_value(text, i, reads)[0]


def read_value(text: str, i: int, reads: ValueReads | None = None) -> tuple[int | None, int]:
    """value_end's answer, and where the reading stopped: the value's end, the text's end, or the
    token that made it malformed (the text before it was well formed so far)."""
    if reads is not None:
        return reads.read(text, i)
    return _read_on(text, _Reading([], i)) or (None, len(text))


@dataclass
class _Reading:
    """A value's reading that the text's end stopped: what to go on from when the text grows."""

    stack: list[str]
    at: int  # a token's start, or inside the string at string_at, a piece's start
    string_at: int = -1


class ValueReads:
    """The values read in one growing text (a stream's), each reading going on where it stopped:
    what a token decided stays, only the token that the text's end cut is read again."""

    def __init__(self):
        self._readings: dict[int, _Reading | tuple[int | None, int]] = {}
        # what a syntax of its own read of a value written as text, by where the value starts
        # (tool_syntaxes/xml.py: how far its closing tag was looked for, its text escaped so far)
        self.texts: dict[int, tuple[int, int, str]] = {}

    def read(self, text: str, i: int) -> tuple[int | None, int]:
        reading = self._readings.get(i) or _Reading([], i)
        if isinstance(reading, tuple):
            return reading
        answer = _read_on(text, reading)
        self._readings[i] = answer or reading
        return answer or (None, len(text))


def _read_on(text: str, r: _Reading) -> tuple[int | None, int] | None:
    """Reads on from `r`: the answer once decided, else None with `r` moved to where to go on."""
    stack, at, n = r.stack, r.at, len(text)
    if r.string_at >= 0:
        m = _STRING_REST.match(text, at)
        if m is None:  # a backslash before a line break: _TOKEN matches no string at that quote
            at, r.string_at = r.string_at + 1, -1
        elif m.end() == n and not (text[-1] == '"' and n - 1 >= at and _backslashes_before(text, n - 1, at) % 2 == 0):
            r.at = n - _backslashes_before(text, n, at) % 2  # a lone backslash at the end: its escape is to come
            return None
        else:
            at, r.string_at = m.end(), -1
            if not stack:
                return at, at
    r.at = at
    for m in _TOKEN.finditer(text, at):
        token = m.group()
        c = token[0]
        if c in _WS:
            r.at = m.start()  # whitespace at the end may go on (with more whitespace, read as one token)
            continue
        if c == '"':
            if len(token) < 2 or token[-1] != '"' or _backslashes_before(text, m.end() - 1, m.start() + 1) % 2:
                r.string_at = m.start()  # the string is not closed yet
                r.at = n - _backslashes_before(text, n, m.start() + 1) % 2
                return None
        elif c in "{[":
            stack.append("}" if c == "{" else "]")
            r.at = m.end()
            continue
        elif c in "}]":
            if not stack or stack.pop() != c:
                return -1, m.start()
        elif c in ",:":
            if not stack:
                return -1, m.start()
            r.at = m.end()
            continue
        elif m.end() == n:  # a number or word the text may go on with
            r.at = m.start()
            return None
        if not stack:
            return m.end(), m.end()
        r.at = m.end()
    return None


def _backslashes_before(text: str, end: int, start: int) -> int:
    """How many backslashes run back from text[end - 1], not before `start`."""
    i = end
    while i > start and text[i - 1] == "\\":
        i -= 1
    return end - i


def skip_ws(text: str, i: int) -> int:
    while i < len(text) and text[i] in _WS:
        i += 1
    return i


def json_string(token: str) -> str | None:
    """A whole JSON string token's value; None if it is not one."""
    try:
        value = json.loads(token)
    except ValueError:
        return None
    return value if isinstance(value, str) else None
