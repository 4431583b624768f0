"""Tool calls read out of a reply's text, whole or while it grows: the content the model wrote and
the calls, in the syntax of the model's family (tool_syntax.py).

One left-to-right scan decides, for as much of the text as it can, what is content and what is a
call; the rest waits for more text. What it decides never changes as the text grows, so a stream
sends the difference between two scans: content as it comes, a call's name once written, then its
arguments as the model writes them (ToolStream). Text that opens a call is never content; text
that only looked like a call's start (`<tool_call>hello`) is.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from enum import Enum, auto

from .tool_syntax import Syntax, Wrapper

# a JSON string (closed, or running to the end of the text), punctuation, whitespace, or a scalar
_TOKEN = re.compile(r'"(?:[^"\\]|\\.)*(?:"|\\?\Z)|[{}\[\],:]|\s+|[^"{}\[\],:\s]+')
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


@dataclass
class Scan:
    content: str
    calls: list[CallText] = field(default_factory=list)


def value_end(text: str, i: int) -> int | None:
    """Where the JSON value that starts at text[i] ends; None when the text ends first; -1 when it
    is malformed (a bracket closed that was not open). Scalars are not checked, only the structure."""
    return _read_value(text, i)[0]


def _read_value(text: str, i: int) -> tuple[int | None, int]:
    """value_end's answer, and where the reading stopped: the value's end, the text's end, or the
    token that made it malformed (the text before it was well formed so far)."""
    stack: list[str] = []
    for m in _TOKEN.finditer(text, i):
        token = m.group()
        c = token[0]
        if c in _WS:
            continue
        if c == '"':
            if len(token) < 2 or token[-1] != '"' or _odd_backslashes(token):
                return None, len(text)  # the string is not closed yet
        elif c in "{[":
            stack.append("}" if c == "{" else "]")
            continue
        elif c in "}]":
            if not stack or stack.pop() != c:
                return -1, m.start()
        elif c in ",:":
            if not stack:
                return -1, m.start()
            continue
        elif m.end() == len(text):  # a number or word the text may go on with
            return None, len(text)
        if not stack:
            return m.end(), m.end()
    return None, len(text)


def _odd_backslashes(token: str) -> bool:
    """Whether the quote closing `token` is escaped (the regex only ends at an unescaped one or the text's end)."""
    n = len(token) - 1 - len(token[:-1].rstrip("\\"))
    return n % 2 == 1


def _skip_ws(text: str, i: int) -> int:
    while i < len(text) and text[i] in _WS:
        i += 1
    return i


def call_object(text: str, i: int, syntax: Syntax) -> tuple[CallText, int, State]:
    """The call object `{"<name_key>": ..., "<arguments_key>": ...}` (the family's keys) that opens at
    text[i] (a "{"), any other keys skipped: the call, where its reading stopped, and DONE, OPEN or
    NONE (malformed)."""
    call, n, j = CallText(), len(text), i + 1
    has_arguments = False
    while True:
        j = _skip_ws(text, j)
        if j == n:
            return call, j, State.OPEN
        if text[j] == "}":
            call.closed = True
            return call, j + 1, State.DONE
        key_end = value_end(text, j) if text[j] == '"' else -1
        if key_end is None:
            return call, j, State.OPEN
        key = _string(text[j:key_end]) if key_end > 0 else None
        if key is None:
            return call, j, State.NONE
        j = _skip_ws(text, key_end)
        if j < n and text[j] != ":":
            return call, j, State.NONE
        j = _skip_ws(text, j + 1)
        end, stop = _read_value(text, j) if j < n else (None, n)
        # what a stream sent stays sent: the first name and arguments count, and arguments that turn
        # out malformed keep the text before the fault
        if key == syntax.arguments_key and not has_arguments:
            call.raw_arguments, has_arguments = text[j:stop], True
        if end is None:
            return call, j, State.OPEN
        if end == -1:
            return call, stop, State.NONE
        if key == syntax.name_key and call.name is None:
            call.name = _string(text[j:end])
            if call.name is None:
                return call, j, State.NONE
        j = _skip_ws(text, end)
        if j < n and text[j] == ",":
            j += 1
        elif j < n and text[j] != "}":
            return call, j, State.NONE


def _string(token: str) -> str | None:
    try:
        value = json.loads(token)
    except ValueError:
        return None
    return value if isinstance(value, str) else None


def call_block(text: str, i: int, syntax: Syntax, final: bool) -> tuple[list[CallText], int, State]:
    """The calls of one block that opens at text[i] (after the family's trigger, or at the reply's
    start): one call object (then the family's closer, if any) or a JSON array of them."""
    j = _skip_ws(text, i)
    if j == len(text):
        return [], j, State.OPEN
    if syntax.wrapper is Wrapper.ARRAY:
        return _array_block(text, j, syntax, final)
    if syntax.wrapper is Wrapper.RECIPIENT:
        return _recipient_block(text, j, final)
    if text[j] != "{":
        return [], j, State.NONE
    call, end, state = call_object(text, j, syntax)
    if call.name is None:
        return [], end, State.NONE if state is not State.OPEN else State.OPEN
    if state is not State.DONE:
        return [call], end, state if state is State.OPEN else State.DONE
    return _closed([call], text, end, syntax, final)


def _closed(calls: list[CallText], text: str, end: int, syntax: Syntax, final: bool) -> tuple[list[CallText], int, State]:
    """A whole block's calls, read on past the family's closer where it follows at `end`."""
    k = _skip_ws(text, end)
    if syntax.closer and text.startswith(syntax.closer, k):
        return calls, k + len(syntax.closer), State.DONE
    if syntax.closer and syntax.closer.startswith(text[k:]):  # its closer may be coming, or was cut short
        return calls, len(text), State.DONE if final else State.OPEN
    return calls, end, State.DONE


def _array_block(text: str, j: int, syntax: Syntax, final: bool = True) -> tuple[list[CallText], int, State]:
    if text[j] != "[":
        return [], j, State.NONE
    calls: list[CallText] = []
    j += 1
    while True:
        j = _skip_ws(text, j)
        if j == len(text):
            return calls, j, State.OPEN
        if text[j] != "{":
            break
        call, end, state = call_object(text, j, syntax)
        if call.name is not None:
            calls.append(call)
        if state is not State.DONE or call.name is None:
            return calls, end, State.OPEN if state is State.OPEN else State.DONE
        j = _skip_ws(text, end)
        if j < len(text) and text[j] == ",":
            j += 1
            continue
        if j < len(text) and text[j] == "]":
            return _closed(calls, text, j + 1, syntax, final)
        if j == len(text):
            return calls, j, State.OPEN
        break
    return calls, j, State.DONE if calls else State.NONE


_RECIPIENT = re.compile(r"[A-Za-z0-9_-]*")


def _recipient_block(text: str, j: int, final: bool) -> tuple[list[CallText], int, State]:
    """Functionary's `name\n{arguments}`: one call; the recipient `all` opens text, no call. A whole
    reply that ends before a call's arguments open is text."""
    k = _RECIPIENT.match(text, j).end()
    if k == len(text):
        return [], k, State.NONE if final else State.OPEN  # the name may go on
    if k == j or text[k] != "\n":
        return [], j, State.NONE
    if text[j:k] == "all":
        return [], k + 1, State.DONE
    a = _skip_ws(text, k + 1)
    if a == len(text):
        return [], a, State.NONE if final else State.OPEN
    if text[a] != "{":
        return [], j, State.NONE
    end, stop = _read_value(text, a)
    call = CallText(text[j:k], text[a:stop], closed=bool(end and end > 0))
    if end is None:
        return [call], stop, State.OPEN
    return [call], stop, State.DONE  # malformed arguments keep the text before the fault


def scan(text: str, syntax: Syntax, final: bool = True) -> Scan:
    """The content and calls of a reply; `final`: the reply is whole (else what may still turn
    out a call's start is held back). Never raises, whatever the text."""
    if syntax.wrapper is Wrapper.GENERIC:
        return _generic(text, syntax, final)
    parts: list[str] = []
    calls: list[CallText] = []
    pos = 0
    after_call = True  # whitespace at the reply's start and after a call is not content
    while True:
        opening, body = _next_opening(text, pos, syntax)
        segment = text[pos : len(text) if opening is None else opening]
        segment = segment.lstrip() if after_call else segment
        if opening is None:
            parts.append(_held_back(segment, syntax, pos == 0, final))
            break
        found, end, state = call_block(text, body, syntax, final)
        if state is State.NONE:  # the opening was text: go on after it
            parts.append(segment + text[opening])
            pos, after_call = opening + 1, False
            continue
        parts.append(segment.rstrip())
        calls += found
        if state is State.OPEN:
            break
        pos, after_call = end, True
    return Scan("".join(parts), calls if syntax.parallel else calls[:1])


def _next_opening(text: str, pos: int, syntax: Syntax) -> tuple[int | None, int]:
    """Where the next call block opens at or after `pos`, and where its body starts: the family's
    trigger, or at the reply's start a bare call (a model whose trigger is a control token, written
    as no text, starts its reply with the call itself)."""
    lead = _skip_ws(text, pos)
    trigger = syntax.trigger
    # the trigger (or what may still become it) opens the reply: not a bare call
    if pos == 0 and not (trigger and trigger.startswith(text[lead : lead + len(trigger)])):
        for prefix in syntax.start_prefixes:
            if text.startswith(prefix, lead):
                body = _skip_ws(text, lead + len(prefix))
                if text.startswith(syntax.start_char, body) or (prefix and body == len(text)):
                    return lead, lead + len(prefix)
    at = text.find(trigger, pos) if trigger else -1
    return (at, at + len(trigger)) if at >= 0 else (None, 0)


def _held_back(segment: str, syntax: Syntax, at_start: bool, final: bool) -> str:
    """A content segment that ends the text so far, less what is not decided yet: its trailing
    whitespace (a call may follow) and an unfinished trigger (or, at the start, a bare call's opening)."""
    if final:
        return segment.rstrip()
    openings = [syntax.trigger] if syntax.trigger else []
    if at_start and segment:
        openings += [p + syntax.start_char for p in syntax.start_prefixes]
        if any(o.startswith(segment.lstrip()) for o in openings):
            return ""
    for opening in openings:
        for k in range(min(len(opening) - 1, len(segment)), 0, -1):
            if segment.endswith(opening[:k]):
                segment = segment[:-k]
                break
    return segment.rstrip()


# -- the generic format: {"tool_calls": [{"name": ..., "arguments": {...}}, ...]} or {"response": "..."}


_GENERIC_HEAD = re.compile(r'\{\s*"(tool_calls|response)"\s*:\s*')
_GENERIC_OPENINGS = ('{"tool_calls":', '{"response":')


def _generic(text: str, syntax: Syntax, final: bool) -> Scan:
    """A reply the grammar held to the generic format; one that is not (cut before its key) is content."""
    head = _GENERIC_HEAD.match(text)
    if head is None:
        compact = re.sub(r"\s", "", text)
        if not final and any(opening.startswith(compact) for opening in _GENERIC_OPENINGS):
            return Scan("")  # it may still become one
        return Scan(text.strip())
    if head.group(1) == "response":
        return Scan(_partial_string(text, head.end(), final))
    calls, _, _ = _array_block(text, head.end(), syntax) if head.end() < len(text) else ([], 0, State.OPEN)
    return Scan("", calls if syntax.parallel else calls[:1])


_ESCAPE_OR_TEXT = re.compile(r"[^\\]+|\\u[0-9a-fA-F]{0,4}|\\.?", re.S)


def _partial_string(text: str, i: int, final: bool) -> str:
    """The JSON string that opens at text[i], decoded as far as it is written (an escape cut in two,
    or the first half of a surrogate pair, waits for the rest; a whole reply drops them)."""
    if i >= len(text) or text[i] != '"':
        return ""
    body = re.compile(r'"((?:[^"\\]|\\.)*)').match(text, i).group(1)
    pieces = [m.group() for m in _ESCAPE_OR_TEXT.finditer(body)]
    whole = 0  # characters of `body` that decode for good
    for k, piece in enumerate(pieces):
        if not _whole_piece(piece):
            break  # an escape cut short, or one JSON does not know (the string ends there)
        if _is_high_surrogate(piece) and (k + 1 == len(pieces) or not _whole_piece(pieces[k + 1])):
            break  # its other half may follow
        whole += len(piece)
    return json.loads(f'"{body[:whole]}"', strict=False)  # a raw newline in it is still text


def _whole_piece(piece: str) -> bool:
    if piece[0] != "\\":
        return True
    return len(piece) == 6 if piece[1:2] == "u" else len(piece) == 2 and piece[1] in '"\\/bfnrt'


def _is_high_surrogate(piece: str) -> bool:
    return len(piece) == 6 and piece[1] == "u" and 0xD800 <= int(piece[2:], 16) <= 0xDBFF


# -- streaming -----------------------------------------------------------------------------------


class ToolStream:
    """The deltas of a reply with tools, as its text grows: `feed(text)` with the whole text so far
    returns what to send now: {"content": ...} and {"tool_calls": [...]} deltas, in OpenAI's form."""

    def __init__(self, syntax: Syntax, new_id):
        self._syntax = syntax
        self._new_id = new_id  # a fresh call id
        self._content_sent = 0
        self._arguments_sent: list[int] = []  # per call whose head went: characters of its arguments sent
        self.ids: list[str] = []

    def feed(self, text: str, final: bool = False) -> list[dict]:
        found = scan(text, self._syntax, final)
        deltas = []
        if len(found.content) > self._content_sent:
            deltas.append({"content": found.content[self._content_sent :]})
            self._content_sent = len(found.content)
        for index, call in enumerate(found.calls):
            if call.name is None:
                break
            if index == len(self._arguments_sent):  # its name is whole: the head goes first
                self.ids.append(self._new_id())
                self._arguments_sent.append(0)
                head = {"id": self.ids[index], "type": "function", "function": {"name": call.name, "arguments": ""}}
                deltas.append({"tool_calls": [{"index": index, **head}]})
            fragment = call.arguments[self._arguments_sent[index] :]
            if fragment:
                deltas.append({"tool_calls": [{"index": index, "function": {"arguments": fragment}}]})
                self._arguments_sent[index] = len(call.arguments)
        return deltas

    @property
    def has_calls(self) -> bool:
        return bool(self._arguments_sent)
