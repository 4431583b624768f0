"""The move from one KV layout to the other while chats run: when the chats at hand want the other
one (layout.next_layout), every slot's cells move through their saved states (the backend builds its
context again) and the manager counts them anew. A move that failed is not tried again until the
requests or the slots' chats change."""

from __future__ import annotations

import time
from collections.abc import Iterable
from dataclasses import dataclass

from ..sequence import Sequence
from .layout import next_layout
from .manager import KVCacheManager


@dataclass(frozen=True)
class FailedMove:
    unified: bool  # the move was to one pool
    why: str


class LayoutMove:
    def __init__(self, backend, kv: KVCacheManager):
        self.backend = backend
        self.kv = kv
        self.changes = 0
        self.change_s = 0.0  # spent building the context again and moving the cells
        self._failed: tuple | None = None  # a change of layout that failed, and the chats it failed for

    def fit(self, at_hand: Iterable[Sequence]) -> FailedMove | None:
        """Change the layout when the chats `at_hand` (running and waiting) want the other one; the
        step then schedules in the new layout. Says why when a move was tried and failed."""
        backend = self.backend
        if not backend.movable:
            return None
        at_hand = tuple(at_hand)
        longest = max((len(s.tokens) for s in at_hand), default=0)
        if not backend.streams:  # a conversation kept for its next turn must fit a stream too
            longest = max(longest, max(len(s.tokens) for s in self.kv.slots))
        change = next_layout(backend.streams, backend.stream_cells, longest)
        if change is None:
            return None
        attempt = (change.unified, frozenset(s.request_id for s in at_hand), tuple(s.owner for s in self.kv.slots))
        if attempt == self._failed:
            return None
        t0 = time.perf_counter()
        why = backend.relayout(change, [s.seq_id for s in self.kv.slots if s.tokens])
        if why is None:
            self.kv.relayout(backend.streams, backend.n_ctx)
            self.changes += 1
            self.change_s += time.perf_counter() - t0
            self._failed = None
            return None
        self._failed = attempt
        return FailedMove(change.unified, why)
