"""The KV cells as a picture: a compact, immutable map of which slot holds how many cells for whom.

In one pool llama.cpp places the cells itself, so their positions are not known here; what is known
is each slot's count, which of its leading cells it shares with other slots (a prefix copied with
seq_cp), which of its cells hold pictures' embeddings (runs in token order) and whose conversation
it serves. `CellMap` says that, a small tuple per slot and per entry of the RAM tier, never an
object per cell. The engine builds one at most ten times a second and replaces its `cell_map`
whole, so the GUI thread reads it without a lock.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum

from .images import image_key, picture_runs
from .kv.cells import Slot
from .kv.layout import StreamPerSlot
from .kv.manager import KVCacheManager
from .kv.prefix import common_prefix_len
from .sched.scheduler import Scheduler


class SlotState(Enum):
    RUNNING = "running"  # its request takes part in the steps
    PAUSED = "paused"  # its request runs beyond the batch limit: it keeps its cells and waits its turn
    KEPT = "kept"  # idle: the cells stay for the conversation's next turn (or a prefix another copies)
    EMPTY = "empty"


@dataclass(frozen=True, slots=True)
class SlotCells:
    """One slot (llama.cpp sequence id) and the cells it holds."""

    slot: int
    conversation_id: str | None  # the chat it serves or last served (a pane's key), None for a bare prompt
    request_id: str | None  # the request using it now
    cells: int  # cells its tokens hold, shared ones included
    shared: int  # of those, leading cells that other slots hold too (a copied prefix, one pool only)
    shared_with: tuple[int, ...]  # the slots sharing some of its leading cells
    shared_counts: tuple[int, ...]  # how many with each of them
    own: int  # cells no lower slot holds: the pool's count of cells is the sum of these
    state: SlotState
    prompt_cells: int = 0  # a request using it: its prompt's tokens; the reply it writes comes after
    # its cells that hold pictures' embeddings: a [first, end) run of tokens a picture, in token order
    pictures: tuple[tuple[int, int], ...] = ()

    @property
    def picture_cells(self) -> int:
        return sum(end - first for first, end in self.pictures)


@dataclass(frozen=True, slots=True)
class SavedChat:
    """One entry of the RAM tier: an evicted or preempted history's cells in host memory."""

    conversation_id: str | None
    tokens: int
    bytes: int


@dataclass(frozen=True, slots=True)
class Preempted:
    """A request whose cells were taken back: it waits for its turn, its cells in RAM (or to compute)."""

    request_id: str
    conversation_id: str | None


@dataclass(frozen=True)
class CellMap:
    """The pool's cells by slot at one moment; safe to read from any thread."""

    n_cells: int  # the pool's cells, every stream's together
    streams: bool  # a stream of n_cells / len(slots) cells per slot; else one pool
    slots: tuple[SlotCells, ...] = ()
    saved: tuple[SavedChat, ...] = ()  # the RAM tier, the least recently saved first
    preempted: tuple[Preempted, ...] = ()
    evictions: int = 0
    preemptions: int = 0
    saves: int = 0
    restores: int = 0
    dropped: int = 0  # RAM entries pushed out by newer saves
    steps: int = 0  # the engine's step count when it was built

    @property
    def cells_used(self) -> int:
        return sum(s.own for s in self.slots)

    @property
    def stream_cells(self) -> int:
        """Cells one slot may hold: its stream's, or the whole pool."""
        return self.n_cells // max(len(self.slots), 1) if self.streams else self.n_cells


class PictureCells:
    """Each slot's runs of picture cells, kept from one map to the next so that a map reads only the
    tokens written since. A cell id is never given twice (a slot cut back gets new ids for what it
    writes next), so while a slot's cell at the length seen last is the same cell, its tokens up to
    there are the same tokens."""

    def __init__(self):
        self._seen: dict[int, tuple[int, int, tuple[tuple[int, int], ...]]] = {}  # slot -> (tokens, last cell, runs)

    def of(self, slot: Slot) -> tuple[tuple[int, int], ...]:
        tokens, cells = slot.tokens, slot.cells
        n = min(len(tokens), len(cells))
        seen, runs = 0, ()
        known = self._seen.get(slot.seq_id)
        if known and 0 < known[0] <= n and cells[known[0] - 1] == known[1]:
            seen, runs = known[0], known[2]
        if n > seen:
            new = picture_runs(tokens, seen, n)
            if new and runs and runs[-1][1] == seen == new[0][0] and image_key(tokens[seen])[1]:
                runs, new[0] = runs[:-1], (runs[-1][0], new[0][1])  # the same picture, read over two steps
            runs = (*runs, *new)
        self._seen[slot.seq_id] = (n, cells[n - 1] if n else -1, runs)
        return runs


def build_cell_map(kv: KVCacheManager, scheduler: Scheduler, steps: int, pictures: PictureCells | None = None) -> CellMap:
    """The map of `kv`'s cells now (on the engine thread: a few comparisons per pair of slots, and
    the tokens each slot wrote since the `pictures` kept last)."""
    pictures = PictureCells() if pictures is None else pictures
    stepping = {id(seq) for seq in scheduler.stepping()}
    slots = kv.slots
    rows = []
    for i, slot in enumerate(slots):
        # a shared prefix is the same cell ids at the head of both lists: one list compare per pair
        common = [
            common_prefix_len(slot.cells, o.cells)
            if o is not slot and o.cells and slot.cells and o.cells[0] == slot.cells[0]
            else 0
            for o in slots
        ]
        n = len(slot.cells)
        rows.append(
            SlotCells(
                slot=slot.seq_id,
                conversation_id=slot.owner if slot.tokens or slot.sequence else None,  # an evicted one's name stays
                request_id=slot.sequence.request_id if slot.sequence is not None else None,
                cells=n,
                shared=max(common, default=0),
                shared_with=tuple(o.seq_id for o, c in zip(slots, common) if c),
                shared_counts=tuple(c for c in common if c),
                own=n - max(common[:i], default=0),
                state=_state(slot, stepping),
                prompt_cells=slot.sequence.num_prompt_tokens if slot.sequence is not None else 0,
                pictures=pictures.of(slot),
            )
        )
    host = kv.host
    saved = () if host is None else tuple(SavedChat(s.conversation_id, len(s.tokens), s.size) for s in host.entries())
    preempted = tuple(
        Preempted(seq.request_id, seq.request.conversation_id) for seq in scheduler.waiting if seq.stats.preemptions
    )
    return CellMap(
        n_cells=kv.n_cells,
        streams=isinstance(kv.layout, StreamPerSlot),
        slots=tuple(rows),
        saved=saved,
        preempted=preempted,
        evictions=kv.evictions,
        preemptions=scheduler.preemptions,
        saves=host.saves if host else 0,
        restores=host.restores if host else 0,
        dropped=host.dropped if host else 0,
        steps=steps,
    )


def _state(slot, stepping: set[int]) -> SlotState:
    if slot.sequence is not None:
        return SlotState.RUNNING if id(slot.sequence) in stepping else SlotState.PAUSED
    return SlotState.KEPT if slot.tokens else SlotState.EMPTY
