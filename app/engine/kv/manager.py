"""KV cells: which slot (llama.cpp sequence id) holds which tokens, prefix reuse, sharing, eviction.

A slot keeps its conversation's cells between turns. A new request gets the longest cached prefix of
its tokens: from its own slot (trim the divergent tail with seq_rm) or from any other slot (seq_cp,
which shares cells on a unified KV cache). Cells are counted with reference counts mirroring
llama.cpp's sharing, so eviction knows what it frees. When the pool is full, idle slots go first,
least recently used first.

The slots and the cells' reference counts are cells.py's; the layout is a strategy (layout.py:
`OnePool`, `StreamPerSlot`) that works through this manager's public side (`memory`, `slots`,
`cells`, `free_cells`, `evict`, `truncate`).

It alone sets a sequence's `slot_id` and `num_computed`: `acquire`, `preempt` and `release` when
the scheduler admits, preempts or ends it, `commit` when the engine's decode wrote its cells. It
never changes a sequence's status.

It counts tokens; llama.cpp's memory calls take positions, which differ from the tokens' indices
after a picture placed in 2D (M-RoPE): `cut` (positions.py) turns the one into the other, and keeps
such a picture's cells whole.
"""

from __future__ import annotations

from enum import Enum, auto

from ..positions import Positions
from ..sequence import Sequence
from .cells import CellLedger, Memory, Slot
from .computed import ComputedPrefixes
from .host_cache import MIN_SAVED_TOKENS, HostCache, SavedCells
from .layout import Layout, OnePool, StreamPerSlot
from .prefix import MIN_SHARED_PREFIX, common_prefix_len

# a saved state is restored only when it holds this many more tokens than the pool can give
MIN_RESTORE_GAIN = 16


class Acquire(Enum):
    """Outcome of asking for a slot."""

    GRANTED = auto()
    NO_SLOT = auto()  # every slot is busy: wait
    DEFER = auto()  # a prompt sharing this one's prefix is being read: wait, then copy it


class KVCacheManager:
    def __init__(
        self,
        memory: Memory,
        n_slots: int,
        n_cells: int,
        reuse: bool = True,
        host: HostCache | None = None,
        streams: bool = False,
        positions: Positions | None = None,
    ):
        self.memory = memory
        self.positions = positions if positions is not None else Positions()
        self.layout: Layout = StreamPerSlot() if streams else OnePool()
        self.slots = [Slot(i) for i in range(n_slots)]
        self.n_cells = n_cells  # the pool's, every slot's together (llama_n_ctx)
        self.reuse = reuse
        self.host = host if reuse else None  # evicted cells saved to RAM
        self.recompute_s_per_token: float | None = None  # the engine's latest measure of prompt reading
        self.cells = CellLedger()
        self._clock = 0
        self.evictions = 0
        self.computed = ComputedPrefixes()  # to count prompt tokens computed again
        self.recomputed_tokens = 0
        self.check_cells = False  # after each commit, ask llama.cpp whether the slot holds what is counted

    # -- figures ---------------------------------------------------------------------------

    @property
    def cells_used(self) -> int:
        return len(self.cells)

    @property
    def free_cells(self) -> int:
        return self.n_cells - len(self.cells)

    @property
    def slots_used(self) -> int:
        return sum(1 for s in self.slots if s.sequence is not None or s.tokens)

    # -- admission -------------------------------------------------------------------------

    def acquire(self, seq: Sequence, reading: list[Sequence], reserved: int = 0) -> Acquire:
        """Give `seq` a slot that already holds the longest cached prefix of its tokens.

        `reading` are the running sequences still reading their prompt: if one of them is about to
        compute a longer prefix of this prompt than any slot holds, wait for it instead. `reserved`
        cells are promised to this step's other tokens.
        """
        target = seq.tokens
        dst = self._pick_slot(target)
        if dst is None:
            return Acquire.NO_SLOT
        src, n = self._longest_prefix(target) if self.reuse else (dst, 0)
        if self.reuse and self._should_wait(target, n, reading):
            return Acquire.DEFER
        # _fill looks it up again: giving way below saves dst's history, which may replace this entry
        found = self._restorable(target, min(n, len(target) - 1))
        if found is not None and not self._room_to_restore(dst, found[2], reserved) and not all(s.is_idle for s in self.slots):
            return Acquire.DEFER  # its cells are in RAM: wait for the room running replies will free, not compute them
        lost = len(dst.tokens) - common_prefix_len(dst.tokens, target)
        # another chat's history, or a long tail of one of this name (a twin's reply) goes to RAM; a
        # short tail of its own (a regenerated reply) is cheaper to compute again than to keep
        if lost >= MIN_SAVED_TOKENS or (lost and dst.owner != seq.request.conversation_id):
            self._give_way(dst)
        n, restored = self._fill(dst, target, src, min(n, len(target) - 1), reserved)
        dst.owner = seq.request.conversation_id
        dst.sequence = seq
        dst.last_used = self._tick()
        seq.slot_id = dst.seq_id
        seq.num_computed = n
        seq.stats.cached_tokens += n
        seq.stats.restored_tokens += restored
        seq.stats.evaluated_tokens += len(target) - n
        # the last token is read again by design (its logits are wanted): not a recomputation
        recomputed = max(min(self.computed.known(target), len(target) - 1) - n, 0)
        seq.stats.recomputed_tokens += recomputed
        self.recomputed_tokens += recomputed
        return Acquire.GRANTED

    def _fill(self, dst: Slot, target: list[int], src: Slot | None, n: int, reserved: int) -> tuple[int, int]:
        """Give `dst` the longest reusable prefix of `target` (restored from RAM, kept, or copied
        from `src`, which holds `n` tokens of it); return (tokens it holds, tokens restored)."""
        restored = self._restore(dst, target, n, reserved)
        if restored:
            return restored, restored
        if restored == 0:  # tried and failed: making room may have evicted `src`
            src, n = self._longest_prefix(target)
            n = min(n, len(target) - 1)
        if src is not dst:
            own = min(common_prefix_len(dst.tokens, target), n)
            if not self.layout.copy_pays(n - own):
                src, n = dst, own
        if src is dst or n == 0:
            return self.truncate(dst, n), 0
        self.truncate(dst, 0)
        return self._copy(src, dst, n), 0

    def _restorable(self, target: list[int], n_pool: int) -> tuple[str, int, SavedCells] | None:
        """The saved cells sharing the most of `target`, when they beat the pool's `n_pool` tokens
        and copying them back is cheaper than computing them: (owner, tokens kept, cells)."""
        if self.host is None:
            return None
        owner, n = self.host.best(target)
        n = min(n, len(target) - 1)
        if owner is None or n < n_pool + MIN_RESTORE_GAIN:
            return None
        saved = self.host.get(owner)
        if saved.start > n_pool:  # its shared prefix is no longer in the pool
            return None
        if not self.host.cheaper_than(saved.size, (n - n_pool) * (self.recompute_s_per_token or 0.0)):
            return None
        return owner, n, saved

    def _restore(self, dst: Slot, target: list[int], n_pool: int, reserved: int) -> int | None:
        """Restore into `dst` what `_restorable` finds: the tokens kept, 0 if that failed, None if
        not tried (nothing worth it, or no room for all its cells now)."""
        found = self._restorable(target, n_pool)
        if found is None:
            return None
        owner, n, saved = found
        if not self._room_to_restore(dst, saved, reserved):
            return None
        keep = self._holder(dst, saved)  # it must stay while room is made: the cells go on from it
        self.truncate(dst, 0)
        if not self.make_room(reserved + saved.n_cells, keep) or not self.host.restore(self.memory, dst.seq_id, saved):
            self.memory.seq_rm(dst.seq_id, -1, -1)  # a failed restore may have left part behind
            return 0
        if keep is not None:  # only in one pool: streams share no cells
            self._copy(keep, dst, saved.start)  # the shared prefix, as llama.cpp holds it: cells shared
        del dst.cells[saved.start :]
        self.cells.add(dst, saved.n_cells)
        dst.tokens = list(saved.tokens)
        self.host.taken(owner, n)
        return self.truncate(dst, n)

    def _holder(self, dst: Slot, saved: SavedCells) -> Slot | None:
        """Another slot holding the prefix the saved cells left out (None when none was left out)."""
        if not saved.start:
            return None
        held = [s for s in self.slots if s is not dst and common_prefix_len(s.tokens, saved.tokens) >= saved.start]
        return held[0] if held else None

    def _room_to_restore(self, dst: Slot, saved: SavedCells, reserved: int) -> bool:
        """Whether the saved cells can come back now: their shared prefix is held by another slot,
        and idle slots but that one give room for the cells they bring back."""
        keep = self._holder(dst, saved)
        if saved.start and keep is None:
            return False
        freeable = sum(len(s.cells) for s in self.slots if s.is_idle and s is not keep)
        return self.layout.has_room(self, saved.n_cells, reserved, freeable)

    def _pick_slot(self, target: list[int]) -> Slot | None:
        """An idle slot for `target`: the one whose whole history it goes on (the longest), else an
        empty one, else the one holding the most of it (a regenerated reply's own slot), the least
        recently used among equals. By the tokens held, not the conversation's name: two chats
        opening alike (so named alike) are two histories."""
        idle = [s for s in self.slots if s.is_idle]
        if not idle:
            return None
        held = {s.seq_id: common_prefix_len(s.tokens, target) for s in idle}
        continued = [s for s in idle if s.tokens and held[s.seq_id] == len(s.tokens)]
        if continued:
            return max(continued, key=lambda s: len(s.tokens))
        empty = [s for s in idle if not s.tokens]
        if empty:
            return empty[0]
        return max(idle, key=lambda s: (held[s.seq_id], -s.last_used))

    def _longest_prefix(self, target: list[int]) -> tuple[Slot | None, int]:
        """The slot holding the longest prefix of `target` (the shortest such slot: copying it
        across streams costs its length), and how long that prefix is."""
        best, best_n = None, 0
        for s in self.slots:
            n = common_prefix_len(s.tokens, target)
            if n > best_n or (n == best_n and n and len(s.tokens) < len(best.tokens)):
                best, best_n = s, n
        return best, best_n

    @staticmethod
    def _should_wait(target: list[int], cached: int, reading: list[Sequence]) -> bool:
        for other in reading:
            shared = common_prefix_len(other.tokens, target)
            if shared >= cached + MIN_SHARED_PREFIX and other.num_computed < shared:
                return True
        return False

    # -- bookkeeping after a decode ----------------------------------------------------------

    def commit(self, seq: Sequence, n: int) -> None:
        """The last decode wrote cells for the next `n` tokens of `seq`."""
        slot = self.slots[seq.slot_id]
        start = seq.num_computed
        slot.tokens.extend(seq.tokens[start : start + n])
        self.cells.add(slot, n)
        seq.num_computed += n
        if n > 1 and seq.num_pending == 0:  # a prompt read to its end: known from now on
            self.computed.add(seq.tokens, seq.num_computed)
        if self.check_cells:
            self._check(slot)

    def commit_drafted(self, seq: Sequence, accepted: list[int], drafted: int) -> None:
        """The last decode wrote cells for the sequence's next token and `drafted` guesses after it,
        of which the first ones, `accepted`, were right: count those, remove the others' cells. Until
        the engine appends the accepted tokens to the sequence, it counts more cells than tokens."""
        slot = self.slots[seq.slot_id]
        start = seq.num_computed
        kept = start + 1 + len(accepted)
        if len(accepted) < drafted and not self.memory.seq_rm(slot.seq_id, seq.position(kept), -1):
            # this memory cannot drop the wrong guesses alone (a recurrent state): the sequence
            # gives up its cells and reads its tokens again, rather than go on from wrong ones
            self.truncate(slot, 0)
            seq.num_computed = 0
            seq.stats.recomputed_tokens += kept
            self.recomputed_tokens += kept
            return
        slot.tokens.append(seq.tokens[start])
        slot.tokens.extend(accepted)
        self.cells.add(slot, 1 + len(accepted))
        seq.num_computed = kept
        if self.check_cells:
            self._check(slot)

    def _check(self, slot: Slot) -> None:
        """The slot's count of cells against llama.cpp's (a debug check, on in the tests)."""
        held, counted = self.memory.seq_pos_max(slot.seq_id), self.positions.last(slot.tokens)
        if held != counted or len(slot.cells) != len(slot.tokens):
            raise AssertionError(
                f"slot {slot.seq_id}: llama.cpp's last position is {held}, the manager's {counted} ({len(slot.tokens)} tokens)"
            )

    def drop_uncounted(self, seq: Sequence) -> None:
        """A decode failed after the step's pictures went through: the cells they wrote past the
        sequence's count go, and a picture kept whole that they finished goes whole (counted again)."""
        slot = self.slots[seq.slot_id]
        kept, position = self.cut(slot.tokens, len(slot.tokens))
        self.memory.seq_rm(slot.seq_id, position, -1)
        if kept < len(slot.tokens):
            self.cells.drop(slot, kept)
            del slot.tokens[kept:]
            seq.num_computed = kept

    def release(self, seq: Sequence) -> None:
        """The request is over; its cells stay for the conversation's next turn (if reuse is on)."""
        if seq.slot_id is None:
            return
        slot = self.slots[seq.slot_id]
        if seq.num_computed > len(seq.tokens):  # the reply ended inside an accepted draft
            seq.num_computed = self.truncate(slot, len(seq.tokens))
        self.computed.add(seq.tokens, seq.num_computed)
        seq.slot_id = None
        slot.sequence = None
        slot.last_used = self._tick()
        if not self.reuse:
            self.truncate(slot, 0)

    def preempt(self, seq: Sequence) -> None:
        """Take a running request's cells back; it restores or recomputes them when it resumes."""
        slot = self.slots[seq.slot_id]
        self.computed.add(seq.tokens, seq.num_computed)
        self._save(slot)
        self.truncate(slot, 0)
        slot.sequence = None
        seq.slot_id = None
        seq.num_computed = 0

    # -- room ------------------------------------------------------------------------------

    def could_fit(self, tokens: list[int], reserved: int) -> bool:
        """Whether a prompt's uncached part fits beside `reserved` cells, counting idle slots as
        freeable. Evicts nothing: the idle slot it would evict may hold this very prefix. Cells
        saved in RAM come back whole (none shared), so a prompt that would restore them waits for
        room for all of them rather than compute them again."""
        return self.layout.has_room(self, self._cost(tokens)[1], reserved, self._freeable())

    def is_cheap(self, tokens: list[int], reserved: int, cached_share: float = 0.5) -> bool:
        """Whether a prompt has at least `cached_share` of its tokens in the pool (or in RAM) and
        the rest fits in the cells free beside `reserved`: admitting it evicts no one's cells."""
        if not self.reuse:
            return False
        cached, needed = self._cost(tokens)
        return cached >= cached_share * len(tokens) and self.layout.has_room(self, needed, reserved)

    def cached_prefix(self, tokens: list[int]) -> int:
        """The leading tokens of a prompt that a slot's cells hold now."""
        return self._longest_prefix(tokens)[1] if self.reuse else 0

    def _cost(self, tokens: list[int]) -> tuple[int, int]:
        """(tokens it would find cached, in the pool or in RAM; new cells it would take)."""
        cached = self.cached_prefix(tokens)
        found = self._restorable(tokens, cached)
        if found is None:
            return cached, len(tokens) - cached
        _, kept, saved = found
        return kept, saved.n_cells + len(tokens) - kept

    def _freeable(self) -> int:
        return sum(len(s.cells) for s in self.slots if s.is_idle)

    def make_room(self, n: int, keep: Slot | None = None) -> bool:
        """Make `n` cells free for a slot's next tokens, keeping `keep`'s cells (the layout's way)."""
        return self.layout.make_room(self, n, keep)

    def evict(self, slot: Slot) -> None:
        self._give_way(slot)
        self.truncate(slot, 0)

    def _give_way(self, slot: Slot) -> None:
        """The slot's conversation loses its cells: they go to RAM first, when worth keeping."""
        self.evictions += 1
        self._save(slot)

    def _save(self, slot: Slot) -> None:
        """Copy the slot's cells to RAM, under a key of their own: two chats may share a name (the
        server names a chat by its opening) and not their histories. A prefix it shares with another
        slot (a system prompt) is left out: restoring shares it again instead of holding a copy."""
        if self.host is None:
            return
        holder, start = self._sharing(slot)
        start, position = self.cut(slot.tokens, start)
        if start < MIN_SHARED_PREFIX or not self.memory.seq_rm(slot.seq_id, 0, position):
            holder, start = None, 0
        if self.host.worth_saving(len(slot.tokens) - start):
            self.host.save(self.memory, slot.seq_id, f"history {self._tick()}", slot.tokens, start, slot.owner)
        if holder is not None:
            self.memory.seq_cp(holder.seq_id, slot.seq_id, 0, position)  # the slot holds its prefix again

    def _sharing(self, slot: Slot) -> tuple[Slot | None, int]:
        """A slot sharing leading cells with `slot`, and how many: the longest prefix that at least
        two other slots share (a system prompt, a story several replies read). A prefix only one
        other slot shares (a chat that opened alike) may be gone when these cells come back, and
        with it any use of them: such cells are saved with the rest."""
        shares = sorted(((common_prefix_len(o.cells, slot.cells), o) for o in self.slots if o is not slot), key=lambda t: -t[0])
        n = shares[1][0] if len(shares) > 1 else 0
        return (shares[0][1], n) if n else (None, 0)

    def relayout(self, streams: bool, n_cells: int) -> None:
        """The context was built again in the other layout, every slot's cells carried over: each
        slot holds a copy of its own now (cells one pool shared were saved with each slot)."""
        self.layout = StreamPerSlot() if streams else OnePool()
        self.n_cells = n_cells
        self.cells.clear()
        for slot in self.slots:
            n, slot.cells = len(slot.cells), []
            self.cells.add(slot, n)

    def clear(self) -> None:
        for s in self.slots:
            self.truncate(s, 0)
        if self.host is not None:
            self.host.clear()

    # -- cells -----------------------------------------------------------------------------

    def cut(self, tokens: list[int], n: int) -> tuple[int, int]:
        """Keeping the first `n` of a slot's `tokens`: how many it can keep (fewer where n falls inside
        a picture whose tokens share a position), and the position from which llama.cpp drops cells."""
        return self.positions.cut(tokens, n)

    def truncate(self, slot: Slot, n: int) -> int:
        """Keep the first `n` tokens of a slot; return how many it really keeps."""
        if n >= len(slot.tokens):
            return len(slot.tokens)
        n, position = self.cut(slot.tokens, n)
        if not self.memory.seq_rm(slot.seq_id, position, -1):
            # this memory cannot cut a sequence in the middle (e.g. recurrent state): drop it whole
            self.memory.seq_rm(slot.seq_id, -1, -1)
            n = 0
        self.cells.drop(slot, n)
        del slot.tokens[n:]
        return n

    def _copy(self, src: Slot, dst: Slot, n: int) -> int:
        """Give the empty `dst` the first `n` cells of `src`; return how many it holds."""
        return self.layout.copy(self, src, dst, n)

    def _tick(self) -> int:
        self._clock += 1
        return self._clock
