"""The KV cells as the manager counts them: the slots (llama.cpp sequence ids) and which cells each
holds, and the reference ledger: how many slots hold each cell (a seq_cp shares them in one pool),
so that eviction knows what it frees."""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol

from .host_cache import StateMemory

if TYPE_CHECKING:
    from ..sequence import Sequence


class Memory(StateMemory, Protocol):
    def seq_rm(self, seq_id: int, p0: int, p1: int = -1) -> bool: ...
    def seq_cp(self, src: int, dst: int, p0: int, p1: int) -> None: ...
    def seq_pos_max(self, seq_id: int) -> int: ...


class Slot:
    def __init__(self, seq_id: int):
        self.seq_id = seq_id
        self.tokens: list[int] = []  # tokens whose cells this slot holds, in order (their positions: positions.py)
        self.cells: list[int] = []  # the ids of those cells (shared ids after a seq_cp)
        self.owner: str | None = None  # the name of the chat it last served (two chats may share one)
        self.sequence: Sequence | None = None  # the request using it now
        self.last_used = 0

    @property
    def is_idle(self) -> bool:
        return self.sequence is None


class CellLedger:
    """The reference count of every cell some slot holds; a cell is free once none does."""

    def __init__(self):
        self._refs: dict[int, int] = {}
        self._next_cell = 0

    def __len__(self) -> int:
        return len(self._refs)

    def add(self, slot: Slot, n: int) -> None:
        """Count `n` new cells at the end of `slot` (written by a decode, a restore or a copy)."""
        first = self._next_cell
        self._next_cell += n
        new_cells = range(first, self._next_cell)
        slot.cells.extend(new_cells)
        self._refs.update(dict.fromkeys(new_cells, 1))

    def share(self, src: Slot, dst: Slot, n: int) -> None:
        """The empty `dst` holds the first `n` cells of `src` too (a seq_cp in one pool)."""
        dst.cells = src.cells[:n]
        refs = self._refs
        for c in dst.cells:
            refs[c] += 1

    def drop(self, slot: Slot, n: int) -> None:
        """The slot keeps its first `n` cells; those no other slot holds are free."""
        refs = self._refs
        for c in slot.cells[n:]:
            left = refs[c] - 1
            if left:
                refs[c] = left
            else:
                del refs[c]
        del slot.cells[n:]

    def clear(self) -> None:
        self._refs.clear()
