"""Tool calls read out of a reply's text, whole or while it grows: the content the model wrote and
the calls, in the syntax of the model's family (tool_syntax.py).

One left-to-right scan decides, for as much of the text as it can, what is content and what is a
call; the rest waits for more text. What it decides never changes as the text grows, so a stream
sends the difference between two scans: content as it comes, a call's name once written, then its
arguments as the model writes them (ToolStream, which reads on from where the last scan decided
rather than from the start). Text that opens a call is never content; text
that only looked like a call's start (`<tool_call>hello`) is.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from itertools import islice

from .tool_syntax import Syntax, Wrapper
from .tool_syntaxes.form import partial_len
from .tool_syntaxes.json_text import CallText, State, ValueReads, json_string, read_value, skip_ws, value_end


@dataclass
class Scan:
    content: str
    calls: list[CallText] = field(default_factory=list)


def call_object(text: str, i: int, syntax: Syntax, reads: ValueReads | None = None) -> tuple[CallText, int, State]:
    """The call object `{"<name_key>": ..., "<arguments_key>": ...}` (the family's keys; with no
    name key, `{"<name>": {arguments}}`) that opens at text[i] (a "{"), any other keys skipped: the
    call, where its reading stopped, and DONE, OPEN or NONE (malformed)."""
    call, n, j = CallText(), len(text), i + 1
    has_arguments = False
    while True:
        j = skip_ws(text, j)
        if j == n:
            return call, j, State.OPEN
        if text[j] == "}":
            call.closed = True
            return call, j + 1, State.DONE
        key_end = value_end(text, j, reads) if text[j] == '"' else -1
        if key_end is None:
            return call, j, State.OPEN
        key = json_string(text[j:key_end]) if key_end > 0 else None
        if key is None:
            return call, j, State.NONE
        j = skip_ws(text, key_end)
        if j < n and text[j] != ":":
            return call, j, State.NONE
        named_here = not syntax.name_key and call.name is None  # the name is the first key, its value the arguments
        if named_here:
            if not key:
                return call, j, State.NONE
            call.name = key
        j = skip_ws(text, j + 1)
        end, stop = read_value(text, j, reads) if j < n else (None, n)
        # what a stream sent stays sent: the first name and arguments count, and arguments that turn
        # out malformed keep the text before the fault
        if (named_here if not syntax.name_key else key == syntax.arguments_key) and not has_arguments:
            call.raw_arguments, has_arguments = text[j:stop], True
        if end is None:
            return call, j, State.OPEN
        if end == -1:
            return call, stop, State.NONE
        if key == syntax.name_key and call.name is None:
            call.name = json_string(text[j:end])
            if call.name is None:
                return call, j, State.NONE
        j = skip_ws(text, end)
        if j < n and text[j] == ",":
            j += 1
        elif j < n and text[j] != "}":
            return call, j, State.NONE


def call_block(
    text: str, i: int, syntax: Syntax, final: bool, reads: ValueReads | None = None
) -> tuple[list[CallText], int, State]:
    """The calls of one block that opens at text[i] (after the family's trigger, or at the reply's
    start): one call object (then the family's closer, if any) or a JSON array of them; a syntax of
    its own (a `form`) reads its block from its opening, at text[i]."""
    if syntax.form is not None:
        return syntax.form.read(text, i, final, reads, syntax.string_args)
    j = skip_ws(text, i)
    if j == len(text):
        return [], j, State.OPEN
    if syntax.wrapper is Wrapper.ARRAY:
        return _array_block(text, j, syntax, final, reads)
    if syntax.wrapper is Wrapper.RECIPIENT:
        return _recipient_block(text, j, final, reads)
    if text[j] != "{":
        return [], j, State.NONE
    call, end, state = call_object(text, j, syntax, reads)
    if call.name is None:
        return [], end, State.NONE if state is not State.OPEN else State.OPEN
    if state is not State.DONE:
        return [call], end, state if state is State.OPEN else State.DONE
    return _closed([call], text, end, syntax, final)


def _closed(calls: list[CallText], text: str, end: int, syntax: Syntax, final: bool) -> tuple[list[CallText], int, State]:
    """A whole block's calls, read on past the family's closer where it follows at `end`."""
    k = skip_ws(text, end)
    if syntax.closer and text.startswith(syntax.closer, k):
        return calls, k + len(syntax.closer), State.DONE
    if syntax.closer and syntax.closer.startswith(text[k:]):  # its closer may be coming, or was cut short
        return calls, len(text), State.DONE if final else State.OPEN
    return calls, end, State.DONE


def _array_block(
    text: str, j: int, syntax: Syntax, final: bool = True, reads: ValueReads | None = None
) -> tuple[list[CallText], int, State]:
    if text[j] != "[":
        return [], j, State.NONE
    calls: list[CallText] = []
    j += 1
    while True:
        j = skip_ws(text, j)
        if j == len(text):
            return calls, j, State.OPEN
        if text[j] != "{":
            break
        call, end, state = call_object(text, j, syntax, reads)
        if call.name is not None:
            calls.append(call)
        if state is not State.DONE or call.name is None:
            return calls, end, State.OPEN if state is State.OPEN else State.DONE
        j = skip_ws(text, end)
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


def _recipient_block(text: str, j: int, final: bool, reads: ValueReads | None = None) -> tuple[list[CallText], int, State]:
    """Functionary's `name\n{arguments}`: one call; the recipient `all` opens text, no call. A whole
    reply that ends before a call's arguments open is text."""
    k = _RECIPIENT.match(text, j).end()
    if k == len(text):
        return [], k, State.NONE if final else State.OPEN  # the name may go on
    if k == j or text[k] != "\n":
        return [], j, State.NONE
    if text[j:k] == "all":
        return [], k + 1, State.DONE
    a = skip_ws(text, k + 1)
    if a == len(text):
        return [], a, State.NONE if final else State.OPEN
    if text[a] != "{":
        return [], j, State.NONE
    end, stop = read_value(text, a, reads)
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


def _next_opening(text: str, pos: int, syntax: Syntax, searched: int = 0) -> tuple[int | None, int]:
    """Where the next call block opens at or after `pos`, and where its body starts: the family's
    trigger, or at the reply's start a bare call (a model whose trigger is a control token, written
    as no text, starts its reply with the call itself). No trigger starts before `searched`."""
    lead = skip_ws(text, pos)
    trigger = syntax.trigger
    # the trigger (or what may still become it) opens the reply: not a bare call
    if pos == 0 and not (trigger and trigger.startswith(text[lead : lead + len(trigger)])):
        for prefix in syntax.start_prefixes:
            if text.startswith(prefix, lead):
                body = skip_ws(text, lead + len(prefix))
                if text.startswith(syntax.start_char, body) or (prefix and body == len(text)):
                    return lead, lead + len(prefix)
    if syntax.form is not None:  # it reads its opening itself
        found = [at for opening in syntax.openings if (at := text.find(opening, max(pos, searched))) >= 0]
        return (min(found), min(found)) if found else (None, 0)
    at = text.find(trigger, max(pos, searched)) if trigger else -1
    return (at, at + len(trigger)) if at >= 0 else (None, 0)


def _held_back(segment: str, syntax: Syntax, at_start: bool, final: bool) -> str:
    """A content segment that ends the text so far, less what is not decided yet: its trailing
    whitespace (a call may follow) and an unfinished trigger (or, at the start, a bare call's opening)."""
    if final:
        return segment.rstrip()
    openings = list(syntax.openings)
    if at_start and segment:
        openings += [p + syntax.start_char for p in syntax.start_prefixes]
        if any(o.startswith(segment.lstrip()) for o in openings):
            return ""
    held = max((partial_len(segment, opening) for opening in openings), default=0)
    return segment[: len(segment) - held].rstrip()


# -- the generic format: {"tool_calls": [{"name": ..., "arguments": {...}}, ...]} or {"response": "..."}


_GENERIC_HEAD = re.compile(r'\{\s*"(tool_calls|response)"\s*:\s*')
_GENERIC_OPENINGS = ('{"tool_calls":', '{"response":')


def _generic(text: str, syntax: Syntax, final: bool) -> Scan:
    """A reply the grammar held to the generic format; one that is not (cut before its key) is content."""
    head = _GENERIC_HEAD.match(text)
    if head is None:
        if not final and _may_open_generic(text):
            return Scan("")  # it may still become one
        return Scan(text.strip())
    if head.group(1) == "response":
        if text[head.end() : head.end() + 1] not in ('"', ""):
            return Scan(_answer_json(text, head.end(), final))
        return Scan(_partial_string(text, head.end(), final))
    calls, _, _ = _array_block(text, head.end(), syntax) if head.end() < len(text) else ([], 0, State.OPEN)
    return Scan("", calls if syntax.parallel else calls[:1])


def _answer_json(text: str, i: int, final: bool) -> str:
    """The generic response that is JSON (under a response format: `{"response": {...}}`) as the
    text written, less the wrapper's closing `}`: while the reply grows, its last character waits
    (it may be that brace); a whole reply drops the brace where the wrapper closed."""
    end = len(text.rstrip())
    if not final:
        return text[i : end - 1]
    try:
        json.loads(text)
    except ValueError:  # cut short (max_tokens): no wrapper closed
        return text[i:end]
    return text[i:end].removesuffix("}")


def _may_open_generic(text: str) -> bool:
    # the text less its whitespace, only as far as an opening is long
    compact = "".join(m.group() for m in islice(_NOT_SPACE.finditer(text), max(map(len, _GENERIC_OPENINGS)) + 1))
    return any(opening.startswith(compact) for opening in _GENERIC_OPENINGS)


_NOT_SPACE = re.compile(r"\S")
_STRING_BODY = re.compile(r'(?:[^"\\]|\\.)*')
_ESCAPE_OR_TEXT = re.compile(r"[^\\]+|\\u[0-9a-fA-F]{0,4}|\\.?", re.S)


def _partial_string(text: str, i: int, final: bool) -> str:
    """The JSON string that opens at text[i], decoded as far as it is written (an escape cut in two,
    or the first half of a surrogate pair, waits for the rest; a whole reply drops them)."""
    if i >= len(text) or text[i] != '"':
        return ""
    body = _STRING_BODY.match(text, i + 1).group()
    return json.loads(f'"{body[: _whole_length(body)[0]]}"', strict=False)  # a raw newline in it is still text


def _whole_length(body: str) -> tuple[int, bool]:
    """How many characters of a string's body (or of its rest, from a piece's start) decode for good,
    and whether the piece that stops them is followed by more of the body (so never decodes)."""
    pieces = [m.group() for m in _ESCAPE_OR_TEXT.finditer(body)]
    whole = 0
    for k, piece in enumerate(pieces):
        if not _whole_piece(piece):
            return whole, k + 1 < len(pieces)  # an escape cut short, or one JSON does not know (the string ends there)
        if _is_high_surrogate(piece) and (k + 1 == len(pieces) or not _whole_piece(pieces[k + 1])):
            return whole, k + 2 < len(pieces)  # its other half may follow
        whole += len(piece)
    return whole, False


def _whole_piece(piece: str) -> bool:
    if piece[0] != "\\":
        return True
    return len(piece) == 6 if piece[1:2] == "u" else len(piece) == 2 and piece[1] in '"\\/bfnrt'


def _is_high_surrogate(piece: str) -> bool:
    return len(piece) == 6 and piece[1] == "u" and 0xD800 <= int(piece[2:], 16) <= 0xDBFF


# -- streaming -----------------------------------------------------------------------------------


class ToolStream:
    """The deltas of a reply with tools, as its text grows: `feed(text)` with the whole text so far
    returns what to send now: {"content": ...} and {"tool_calls": [...]} deltas, in OpenAI's form.

    It reads on from where the last feed's scan decided for good (a block read, a trigger that was
    text), and the values of an open block go on from where their reading stopped: a token costs its
    own text, not the reply's. The last feed (`final`) scans the whole reply once."""

    def __init__(self, syntax: Syntax, new_id):
        self._syntax = syntax
        self._new_id = new_id  # a fresh call id
        self._content_sent = 0
        self._arguments_sent: list[int] = []  # per call whose head went: characters of its arguments sent
        self._calls_sent = 0  # calls whose every delta went (their block is read)
        self.ids: list[str] = []
        # the scan as far as it decided: where it goes on, the content and calls before that
        self._pos, self._after_call = 0, True
        self._content_decided = 0
        self._calls: list[CallText] = []
        self._searched = 0  # no trigger starts before this
        self._reads = ValueReads()
        self._string_to = -1  # the generic response: how far its string decoded (-1: not open yet)
        self._string_ended = False

    def feed(self, text: str, final: bool = False) -> list[dict]:
        if final:
            found = scan(text, self._syntax, True)
            return self._deltas(found.content[self._content_sent :], found.calls)
        if self._syntax.wrapper is Wrapper.GENERIC:
            return self._deltas(*self._generic_on(text))
        return self._deltas(*self._scan_on(text))

    @property
    def has_calls(self) -> bool:
        return bool(self._arguments_sent)

    def _deltas(self, content: str, calls: list[CallText], read_calls: int = 0) -> list[dict]:
        """The deltas of `content` not sent yet and of `calls` (the first `read_calls` of them are read whole)."""
        deltas = []
        if content:
            deltas.append({"content": content})
            self._content_sent += len(content)
        calls = calls if self._syntax.parallel else calls[:1]
        for index in range(self._calls_sent, len(calls)):
            call = calls[index]
            if call.name is None:
                break
            if index == len(self._arguments_sent):  # its name is whole: the head goes first
                self.ids.append(self._syntax.id_of(call.name, index, self._new_id))
                self._arguments_sent.append(0)
                head = {"id": self.ids[index], "type": "function", "function": {"name": call.name, "arguments": ""}}
                deltas.append({"tool_calls": [{"index": index, **head}]})
            fragment = call.arguments[self._arguments_sent[index] :]
            if fragment:
                deltas.append({"tool_calls": [{"index": index, "function": {"arguments": fragment}}]})
                self._arguments_sent[index] = len(call.arguments)
        self._calls_sent = max(self._calls_sent, min(read_calls, len(self._arguments_sent)))
        return deltas

    def _scan_on(self, text: str) -> tuple[str, list[CallText], int]:
        """scan(text, final=False) from where the last feed decided: the content not sent yet, the calls."""
        syntax, decided = self._syntax, []
        while True:
            pos = self._pos
            opening, body = _next_opening(text, pos, syntax, self._searched)
            start = _lstrip_at(text, pos, len(text) if opening is None else opening) if self._after_call else pos
            if opening is None:
                if syntax.openings:
                    self._searched = max(pos, len(text) - max(map(len, syntax.openings)) + 1)
                live, open_calls = (start, _held_back_end(text, start, syntax, pos == 0)), []
                break
            found, end, state = call_block(text, body, syntax, False, self._reads)
            if state is State.NONE:  # the opening was text: go on after it
                decided.append(text[start : opening + 1])
                self._pos, self._after_call = opening + 1, False
                continue
            live, open_calls = (start, _rstrip_at(text, start, opening)), found
            if state is State.OPEN:
                break
            decided.append(text[slice(*live)])
            self._calls += found
            self._pos, self._after_call, self._searched = end, True, end
        return self._unsent(decided, text, *live), self._calls + open_calls, len(self._calls)

    def _unsent(self, decided: list[str], text: str, start: int, end: int) -> str:
        """The content not sent yet: of the parts decided by this feed, then of text[start:end]."""
        new = "".join(decided)
        sent = self._content_sent - self._content_decided  # of new + text[start:end]
        self._content_decided += len(new)
        return new[sent:] + text[start + max(0, sent - len(new)) : end]

    def _generic_on(self, text: str) -> tuple[str, list[CallText], int]:
        """_generic(text, final=False), its response's string decoded from where the last feed stopped."""
        head = _GENERIC_HEAD.match(text)
        if head is None:
            if _may_open_generic(text):
                return "", [], 0
            start = _lstrip_at(text, 0, len(text))
            return text[start + self._content_sent : _rstrip_at(text, start, len(text))], [], 0
        if head.group(1) == "tool_calls":
            calls = _array_block(text, head.end(), self._syntax, True, self._reads)[0] if head.end() < len(text) else []
            return "", calls, 0
        if text[head.end() : head.end() + 1] not in ('"', ""):
            return _answer_json(text, head.end(), False)[self._content_sent :], [], 0
        return self._response_on(text, head.end()), [], 0

    def _response_on(self, text: str, i: int) -> str:
        """What of the generic response's string (it opens at text[i]) decodes now and did not before."""
        if self._string_to < 0:
            if i >= len(text) or text[i] != '"':
                return ""
            self._string_to = i + 1
        if self._string_ended:
            return ""
        body = _STRING_BODY.match(text, self._string_to).group()
        whole, stuck = _whole_length(body)
        at = self._string_to + len(body)
        # the string ends for good at its closing quote, or where no escape can go on
        self._string_ended = stuck or (at < len(text) and not (at == len(text) - 1 and text[at] == "\\"))
        self._string_to += whole
        return json.loads(f'"{body[:whole]}"', strict=False)


def _lstrip_at(text: str, i: int, end: int) -> int:
    """Where text[i:end].lstrip() starts."""
    while i < end and text[i].isspace():
        i += 1
    return i


def _rstrip_at(text: str, start: int, end: int) -> int:
    """Where text[start:end].rstrip() ends."""
    while end > start and text[end - 1].isspace():
        end -= 1
    return end


def _held_back_end(text: str, start: int, syntax: Syntax, at_start: bool) -> int:
    """Where _held_back(text[start:], syntax, at_start, final=False) ends, reading only the text's end."""
    end = len(text)
    openings = list(syntax.openings)
    if at_start and start < end:
        openings += [p + syntax.start_char for p in syntax.start_prefixes]
        lead = _lstrip_at(text, start, end)
        if end - lead <= max(map(len, openings)) and any(o.startswith(text[lead:]) for o in openings):
            return start
    tail = text[max(start, end - max(map(len, openings), default=0)) : end]
    held = max((partial_len(tail, opening) for opening in openings), default=0)
    return _rstrip_at(text, start, end - held)
