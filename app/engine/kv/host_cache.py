"""The KV cache's second tier: cells the pool evicts are saved to host RAM and restored when wanted again.

Restoring copies bytes (measured here: 401 tokens of SmolLM2-135M, 9.2 MB, in 2 ms) where
recomputing runs the model (seconds on a CPU). So a conversation pushed out of a full pool, or a
request preempted mid-reply, comes back without computing its history again, as llama-server's
`--cache-ram` does. Entries are kept within one byte budget for all the loaded models (HostBudget),
each model's least recently saved dropped first.
"""

from __future__ import annotations

import threading
import time
import weakref
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

from .prefix import common_prefix_len

MIN_SAVED_TOKENS = 32  # fewer are as cheap to recompute as to keep


class StateMemory(Protocol):
    def seq_state_size(self, seq_id: int) -> int: ...
    def seq_save(self, seq_id: int, size: int) -> object | None: ...  # a copy of `size` bytes, None on failure
    def seq_restore(self, seq_id: int, state: object, size: int) -> bool: ...


@dataclass(frozen=True)
class SavedCells:
    tokens: list[int]  # the sequence's tokens (their positions: positions.py)
    state: object  # llama.cpp's sequence state (an opaque buffer) of the cells from `start` on
    size: int  # its bytes
    start: int = 0  # cells before it were shared with another sequence: the pool gives them back
    conversation_id: str | None = None  # the chat whose history it is (shown in the KV cell map)

    @property
    def n_cells(self) -> int:
        return len(self.tokens) - self.start


class HostBudget:
    """One byte budget for the RAM tiers of all the models a process holds, so that N models take
    no more RAM than one.

    Its size is the largest `cache_ram_mib` of the models loaded now: the setting is the process's
    unless models are given different ones, and each model also keeps within its own. A reload with
    another figure changes it (the excess over a smaller one goes at the next save). It holds the
    caches weakly and counts the bytes of those alive: an unloaded model gives its bytes back as its
    engine is freed, with nothing to forget to call. Caches join on the loader thread while the
    engine thread saves: joining replaces the tuple whole, under a lock; saving and dropping happen
    on the engine thread.
    """

    def __init__(self):
        self._caches: tuple[weakref.ref[HostCache], ...] = ()
        self._lock = threading.Lock()

    def join(self, cache: HostCache) -> None:
        with self._lock:
            self._caches = (*(r for r in self._caches if r() is not None), weakref.ref(cache))

    @property
    def caches(self) -> list[HostCache]:
        return [c for c in (r() for r in self._caches) if c is not None]

    @property
    def limit_bytes(self) -> int:
        return max((c.limit_bytes for c in self.caches), default=0)

    @property
    def bytes_used(self) -> int:
        return sum(c.bytes_used for c in self.caches)

    def make_room(self, saver: HostCache, size: int) -> None:
        """Drop entries until `saver` can add `size` bytes (at most the limit): the least recently
        saved of the model that would hold the most (the saver counted with them) goes first. Largest
        first is fair without a clock: a model alone may fill the budget, and models that all want
        room end with equal shares, however much more often one of them saves; an idle model's old
        entries are not kept at a busy one's expense. Those whose entries went are told, to show it."""
        caches, limit = self.caches, self.limit_bytes
        shrunk: set[HostCache] = set()
        while sum(c.bytes_used for c in caches) + size > limit:
            largest = max((c for c in caches if len(c)), key=lambda c: c.bytes_used + (size if c is saver else 0))
            largest.drop_oldest()
            shrunk.add(largest)
        for cache in shrunk - {saver}:
            cache.on_dropped()


class HostCache:
    def __init__(self, limit_bytes: int, budget: HostBudget | None = None, on_dropped: Callable[[], object] = lambda: None):
        """`limit_bytes`: what this model may keep; `budget`: what all models together may (None: a
        budget of its own); `on_dropped` is called when another model's saves push entries out."""
        self.limit_bytes = limit_bytes
        self.budget = budget or HostBudget()
        self.on_dropped = on_dropped
        self._entries: OrderedDict[str, SavedCells] = OrderedDict()
        self.bytes_used = 0
        self.saves = 0
        self.restores = 0
        self.restored_tokens = 0
        self.dropped = 0  # saved, then pushed out by newer saves before they were wanted
        self._restore_s_per_byte: float | None = None  # measured on each restore
        self.budget.join(self)

    def __len__(self) -> int:
        return len(self._entries)

    def worth_saving(self, n_tokens: int) -> bool:
        return n_tokens >= MIN_SAVED_TOKENS and self.limit_bytes > 0

    def save(
        self, memory: StateMemory, seq_id: int, owner: str, tokens: list[int], start: int = 0, conversation_id: str | None = None
    ) -> None:
        """Copy a sequence's cells (those it holds from position `start` on) to RAM under `owner` (a
        key of this history's own), replacing what it saved before and any earlier state of the same
        history. Its size is asked first: a state that could never fit is not copied at all, and
        room is made before the copy, so the budget holds at its peak too."""
        size = memory.seq_state_size(seq_id)
        if size > self.limit_bytes:  # the budget is at least as large: it is the largest limit
            return
        self._remove(owner)
        for other in [o for o, saved in self._entries.items() if _is_prefix(saved.tokens, tokens)]:
            self._remove(other)  # an earlier state of this history: the new one holds all it held
        while self.bytes_used + size > self.limit_bytes:
            self.drop_oldest()
        self.budget.make_room(self, size)
        state = memory.seq_save(seq_id, size)
        if state is not None:
            self._entries[owner] = SavedCells(list(tokens), state, size, start, conversation_id)
            self.bytes_used += size
            self.saves += 1

    def restore(self, memory: StateMemory, seq_id: int, saved: SavedCells) -> bool:
        t0 = time.perf_counter()
        if not memory.seq_restore(seq_id, saved.state, saved.size):
            return False
        per_byte = (time.perf_counter() - t0) / max(saved.size, 1)
        last = self._restore_s_per_byte
        self._restore_s_per_byte = per_byte if last is None else 0.8 * last + 0.2 * per_byte
        return True

    def cheaper_than(self, size: int, recompute_s: float) -> bool:
        """Whether restoring `size` bytes should take less than `recompute_s` (yes until measured)."""
        return self._restore_s_per_byte is None or recompute_s <= 0 or size * self._restore_s_per_byte < recompute_s

    def best(self, target: list[int]) -> tuple[str | None, int]:
        """The entry sharing the longest prefix with `target`, and how long that prefix is."""
        best, best_n = None, 0
        for owner, saved in self._entries.items():
            n = common_prefix_len(saved.tokens, target)
            if n > best_n:
                best, best_n = owner, n
        return best, best_n

    def entries(self) -> tuple[SavedCells, ...]:
        """The saved cells, the least recently saved first."""
        return tuple(self._entries.values())

    def get(self, owner: str) -> SavedCells | None:
        return self._entries.get(owner)

    def taken(self, owner: str, n_tokens: int) -> None:
        """An entry went back into the pool: its cells live there now, so RAM lets it go."""
        self._remove(owner)
        self.restores += 1
        self.restored_tokens += n_tokens

    def drop_oldest(self) -> None:
        self._remove(next(iter(self._entries)))
        self.dropped += 1

    def clear(self) -> None:
        self._entries.clear()
        self.bytes_used = 0

    def _remove(self, owner: str) -> None:
        saved = self._entries.pop(owner, None)
        if saved is not None:
            self.bytes_used -= saved.size


def _is_prefix(a: list[int], b: list[int]) -> bool:
    return len(a) <= len(b) and common_prefix_len(a, b) == len(a)
