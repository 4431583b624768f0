"""The KV cache's second tier: cells the pool evicts are saved to host RAM and restored when wanted again.

Restoring copies bytes (measured here: 401 tokens of SmolLM2-135M, 9.2 MB, in 2 ms) where
recomputing runs the model (seconds on a CPU). So a conversation pushed out of a full pool, or a
request preempted mid-reply, comes back without computing its history again, as llama-server's
`--cache-ram` does. Entries are kept within a byte budget, the least recently saved dropped first.
"""

from __future__ import annotations

import time
from collections import OrderedDict
from dataclasses import dataclass
from typing import Protocol

from .prefix import common_prefix_len

MIN_SAVED_TOKENS = 32  # fewer are as cheap to recompute as to keep


class StateMemory(Protocol):
    def seq_save(self, seq_id: int) -> tuple[object, int]: ...
    def seq_restore(self, seq_id: int, state: object, size: int) -> bool: ...


@dataclass(frozen=True)
class SavedCells:
    tokens: list[int]  # the sequence's tokens, position = index
    state: object  # llama.cpp's sequence state (an opaque buffer) of the cells from `start` on
    size: int  # its bytes
    start: int = 0  # cells before it were shared with another sequence: the pool gives them back

    @property
    def n_cells(self) -> int:
        return len(self.tokens) - self.start


class HostCache:
    def __init__(self, budget_bytes: int):
        self.budget_bytes = budget_bytes
        self._entries: OrderedDict[str, SavedCells] = OrderedDict()
        self.bytes_used = 0
        self.saves = 0
        self.restores = 0
        self.restored_tokens = 0
        self.dropped = 0  # saved, then pushed out by newer saves before they were wanted
        self._restore_s_per_byte: float | None = None  # measured on each restore

    def __len__(self) -> int:
        return len(self._entries)

    def worth_saving(self, n_tokens: int) -> bool:
        return n_tokens >= MIN_SAVED_TOKENS and self.budget_bytes > 0

    def save(self, memory: StateMemory, seq_id: int, owner: str, tokens: list[int], start: int = 0) -> None:
        """Copy a sequence's cells (those it holds from position `start` on) to RAM under `owner`,
        replacing what it saved before."""
        state, size = memory.seq_save(seq_id)
        if state is not None and size <= self.budget_bytes:
            self.put(owner, SavedCells(list(tokens), state, size, start))

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

    def put(self, owner: str, saved: SavedCells) -> None:
        self._remove(owner)
        self._entries[owner] = saved
        self.bytes_used += saved.size
        self.saves += 1
        while self.bytes_used > self.budget_bytes:
            self._remove(next(iter(self._entries)))
            self.dropped += 1

    def best(self, target: list[int]) -> tuple[str | None, int]:
        """The entry sharing the longest prefix with `target`, and how long that prefix is."""
        best, best_n = None, 0
        for owner, saved in self._entries.items():
            n = common_prefix_len(saved.tokens, target)
            if n > best_n:
                best, best_n = owner, n
        return best, best_n

    def get(self, owner: str) -> SavedCells | None:
        return self._entries.get(owner)

    def taken(self, owner: str, n_tokens: int) -> None:
        """An entry went back into the pool: its cells live there now, so RAM lets it go."""
        self._remove(owner)
        self.restores += 1
        self.restored_tokens += n_tokens

    def clear(self) -> None:
        self._entries.clear()
        self.bytes_used = 0

    def _remove(self, owner: str) -> None:
        saved = self._entries.pop(owner, None)
        if saved is not None:
            self.bytes_used -= saved.size
