"""How the slots hold their cells, and when to change that.

The layout is a strategy: in one pool (`OnePool`) the slots compete for cells, room is made by
evicting idle slots and seq_cp shares a prefix's cells; with a stream per sequence (llama.cpp's
kv_unified off, `StreamPerSlot`) a slot never takes another's room, and a prefix crosses streams as
a copy of its cells, worth it only for a long one. A strategy works through the KV manager's public
side (`Manager`). The rule (`choose_layout`, `next_layout`) says which layout the chats want;
layout_move.py moves them."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from .cells import CellLedger, Memory, Slot
from .pool import POOL_STEP
from .prefix import MIN_SHARED_PREFIX

# automatic layout: streams where each holds at least this many cells (smaller, chats outgrow
# them at once); and, where the layout cannot change while chats run, where each holds a long chat
MIN_STREAM = 1024
LONG_CHAT = 8192
# back to streams only when every chat fits in this share of a stream: one growing past it at once
# would move everyone again
BACK_TO_STREAMS = 0.75


class Manager(Protocol):
    """What a layout reads and changes of the KV manager."""

    memory: Memory
    slots: list[Slot]
    cells: CellLedger

    @property
    def free_cells(self) -> int: ...

    def evict(self, slot: Slot) -> None: ...

    def truncate(self, slot: Slot, n: int) -> int:
        """Keep the first `n` tokens of a slot; return how many it really keeps."""

    def cut(self, tokens: list[int], n: int) -> tuple[int, int]:
        """Keeping the first `n` of `tokens`: how many can be kept, and the position where the rest begins."""


class Layout(Protocol):
    """How the slots hold their cells: what room means, and how a prefix moves between slots."""

    def has_room(self, kv: Manager, needed: int, reserved: int, freeable: int = 0) -> bool:
        """Whether `needed` new cells fit beside `reserved` ones, counting `freeable` cells of idle slots."""

    def make_room(self, kv: Manager, n: int, keep: Slot | None) -> bool: ...

    def copy(self, kv: Manager, src: Slot, dst: Slot, n: int) -> int:
        """Give the empty `dst` the first `n` cells of `src`; return how many it holds."""

    def copy_pays(self, n: int) -> bool:
        """Whether copying `n` more tokens from another slot beats computing them."""

    # the ubatches a prompt chunk adds beside decodes (its tokens after the first, where the
    # decodes' run holds it, or all of them)
    prompt_passes: int

    def chunk_attention(self, start: int, n: int) -> int:
        """The cells a prompt chunk of `n` tokens after its sequence's first `start` attends that the
        step's other tokens do not: what reading it deep in a long chat adds."""

    def ubatches(self, parts: list[tuple[int, int]]) -> int:
        """How many ubatches llama.cpp cuts a step into: `parts` are (sequence id, tokens), by id."""


class OnePool:
    """One pool of cells for every slot (llama.cpp's kv_unified): slots compete for its room, idle ones
    are evicted for it, least recently used first; seq_cp shares a prefix's cells, so copying is free."""

    prompt_passes = 0

    def has_room(self, kv: Manager, needed: int, reserved: int, freeable: int = 0) -> bool:
        return kv.free_cells + freeable >= reserved + needed

    def make_room(self, kv: Manager, n: int, keep: Slot | None) -> bool:
        while kv.free_cells < n:
            victims = [s for s in kv.slots if s.is_idle and s.tokens and s is not keep]
            if not victims:
                return False
            kv.evict(min(victims, key=lambda s: s.last_used))
        return True

    def copy(self, kv: Manager, src: Slot, dst: Slot, n: int) -> int:
        n, position = kv.cut(src.tokens, n)
        kv.memory.seq_cp(src.seq_id, dst.seq_id, 0, position)
        dst.tokens = src.tokens[:n]
        kv.cells.share(src, dst, n)
        return n

    def copy_pays(self, n: int) -> bool:
        return True

    def ubatches(self, parts: list[tuple[int, int]]) -> int:
        return 1 if parts else 0  # the context's ubatch is a whole step

    def chunk_attention(self, start: int, n: int) -> int:
        return 0  # every token of a step attends the pool's whole extent: a token's share holds it


class StreamPerSlot:
    """A stream of n_cells / n_slots cells for each slot: a sequence writes into its own stream only,
    so there is always room (the prompt builder keeps a chat within it) and none to make; a prefix
    crosses streams as a copy of every cell of its slot."""

    prompt_passes = 1

    def has_room(self, kv: Manager, needed: int, reserved: int, freeable: int = 0) -> bool:
        return True

    def make_room(self, kv: Manager, n: int, keep: Slot | None) -> bool:
        return True

    def copy(self, kv: Manager, src: Slot, dst: Slot, n: int) -> int:
        """Through the sequence state, at once: llama.cpp's own cross-stream seq_cp copies the whole
        stream buffer at the next decode, by which time a restore into `src` may have overwritten it."""
        mem = kv.memory
        size = mem.seq_state_size(src.seq_id)
        state = mem.seq_save(src.seq_id, size)
        if state is None or not mem.seq_restore(dst.seq_id, state, size):
            mem.seq_rm(dst.seq_id, -1, -1)  # a failed restore may have left part behind
            return 0
        kv.cells.add(dst, len(src.tokens))
        dst.tokens = list(src.tokens)
        return kv.truncate(dst, n)

    def copy_pays(self, n: int) -> bool:
        return n >= MIN_SHARED_PREFIX  # a copy moves every cell of its slot: for a few tokens, computing is cheaper

    def ubatches(self, parts: list[tuple[int, int]]) -> int:
        return equal_splits(parts)

    def chunk_attention(self, start: int, n: int) -> int:
        return n * (start + n)  # a ubatch of its own over its stream: each token attends all its cells


def equal_splits(parts: list[tuple[int, int]]) -> int:
    """The ubatches of llama.cpp's sequential equal split (`split_equal`, how a batch is cut when each
    sequence has a stream of its own), for a batch whose sequences' tokens follow each other by id: a
    ubatch takes a run of consecutive sequence ids, starting at the lowest with tokens left, and as
    many tokens of each as the one with the fewest has left. So a step of decodes costs one ubatch
    per run of consecutive ids, and a prompt chunk beside them one more for its remaining tokens."""
    left = {seq_id: n for seq_id, n in parts if n > 0}
    count = 0
    while left:
        run = [min(left)]
        while run[-1] + 1 in left:
            run.append(run[-1] + 1)
        take = min(left[s] for s in run)
        for s in run:
            left[s] -= take
            if not left[s]:
                del left[s]
        count += 1
    return count


@dataclass(frozen=True)
class LayoutChoice:
    unified: bool  # llama.cpp's kv_unified (-kvu)
    reason: str


def choose_layout(n_ctx: int, capacity: int, n_ctx_train: int, asked: bool | None, movable: bool) -> LayoutChoice:
    """One pool shared by all sequences, or a stream of n_ctx / capacity cells each. Streams decode
    faster (a token attends to its own sequence's cells, not to the span of everyone's; measured
    1.16x at 8 x 512 tokens, 1.38x at 8 x 1,000) but cap each chat at its stream. Where the layout
    can change while chats run (`movable`), streams are the default and a chat outgrowing its stream
    moves every chat to one pool (`next_layout`); else only where a stream holds a long chat."""
    per_stream = n_ctx // max(1, capacity)
    if asked is not None:
        return LayoutChoice(asked, "as set")
    if capacity <= 1:
        return LayoutChoice(True, "one sequence")
    if movable and per_stream >= MIN_STREAM:
        return LayoutChoice(False, "automatic: one pool when a chat outgrows its stream")
    if not movable and per_stream >= min(max(n_ctx_train, POOL_STEP), LONG_CHAT):
        return LayoutChoice(False, "automatic: each holds a long chat")
    return LayoutChoice(True, f"automatic: a stream of {per_stream} cells would cut chats short")


def next_layout(streams: bool, stream_cells: int, longest: int) -> LayoutChoice | None:
    """The layout to change to now, or None: `longest` is the most cells a chat holds or needs for
    its next step (a prompt waiting, a reply growing, a conversation kept for its next turn)."""
    if streams and longest > stream_cells:
        return LayoutChoice(True, f"automatic: a chat of {longest} tokens outgrew its stream of {stream_cells} cells")
    if not streams and stream_cells >= MIN_STREAM and longest <= BACK_TO_STREAMS * stream_cells:
        return LayoutChoice(False, f"automatic: every chat fits its stream of {stream_cells} cells again")
    return None
