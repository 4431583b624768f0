"""The stored responses of the Responses API: each one's object (for GET) and its conversation,
kept for `previous_response_id` within a memory budget."""

from __future__ import annotations

import sys
from collections import OrderedDict
from dataclasses import dataclass

from app.engine.images import Image

# memory for the stored responses, whose conversations are kept for `previous_response_id` (and GET):
# beyond it the least recently used is dropped; a chain's responses share their common turns, counted once
STORE_BYTES = 256 * 2**20


@dataclass(frozen=True)
class Kept:
    """A stored response: its object (for GET) and its conversation (without instructions) for a continuation."""

    response: dict
    conversation_id: str
    messages: tuple[dict, ...]  # in the chat API's form: an assistant turn's calls as `tool_calls`, results as `role: "tool"`


class KeptResponses:
    """The stored responses within `budget_bytes` of memory, the least recently used (created,
    retrieved or continued) dropped first. A turn that several responses of a chain hold is one
    object among them, so it is counted once, while any of them holds it."""

    def __init__(self, budget_bytes: int = STORE_BYTES):
        self.budget_bytes = budget_bytes
        self.bytes = 0  # held now: every kept response's object, and each turn they hold once
        self.dropped = 0  # responses dropped for room (or too large to keep at all)
        self._kept: OrderedDict[str, tuple[Kept, int]] = OrderedDict()  # by id: the response, its object's bytes
        self._turns: dict[int, list] = {}  # id(turn) -> [the turn, its bytes, how many responses hold it]

    def __len__(self) -> int:
        return len(self._kept)

    def get(self, response_id: str) -> Kept | None:
        entry = self._kept.get(response_id)
        if entry is None:
            return None
        self._kept.move_to_end(response_id)
        return entry[0]

    def keep(self, kept: Kept) -> None:
        """Keep `kept`, dropping the least recently used for room; one larger than the whole budget is not kept."""
        self.delete(kept.response["id"])
        own = footprint(kept.response)
        new_turns = {id(turn): turn for turn in kept.messages if id(turn) not in self._turns}
        sizes = {key: footprint(turn) for key, turn in new_turns.items()}
        if own + sum(sizes.values()) > self.budget_bytes:
            self.dropped += 1
            return
        for turn in kept.messages:
            key = id(turn)
            if key in self._turns:
                self._turns[key][2] += 1
            else:
                self._turns[key] = [turn, sizes[key], 1]
                self.bytes += sizes[key]
        self._kept[kept.response["id"]] = (kept, own)
        self.bytes += own
        while self.bytes > self.budget_bytes:
            self._forget(*self._kept.popitem(last=False)[1])
            self.dropped += 1

    def delete(self, response_id: str) -> bool:
        entry = self._kept.pop(response_id, None)
        if entry is not None:
            self._forget(*entry)
        return entry is not None

    def _forget(self, kept: Kept, own: int) -> None:
        self.bytes -= own
        for turn in kept.messages:
            held = self._turns[id(turn)]
            held[2] -= 1
            if held[2] == 0:
                del self._turns[id(turn)]
                self.bytes -= held[1]


def footprint(value) -> int:
    """The bytes a JSON-like value takes in memory: sys.getsizeof of it and of everything in it."""
    total, pending = 0, [value]
    while pending:  # not recursive: a schema may nest as deep as the JSON reader allows
        item = pending.pop()
        total += sys.getsizeof(item)
        if isinstance(item, dict):
            pending += item.keys()
            pending += item.values()
        elif isinstance(item, (list, tuple)):
            pending += item
        elif isinstance(item, Image):  # a picture a conversation showed: its file's bytes
            total += len(item.data)
    return total


class NotFound(Exception):
    """A response id this server does not keep: HTTP 404 with this message."""

    def __init__(self, message: str, param: str | None = None):
        super().__init__(message)
        self.param = param
