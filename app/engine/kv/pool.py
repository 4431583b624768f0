"""How big the KV pool is by default: from the model (bytes per cell, its training context), the
panes and the machine (a share of the memory that is free); how it is laid out (one pool, or a
stream per sequence); and the memory a pool takes."""

from __future__ import annotations

import os
from dataclasses import dataclass

from ..params import CacheType

MEMORY_SHARE = 0.25  # of the free RAM (or VRAM, with layers offloaded) the default pool may take
POOL_STEP = 256  # llama.cpp pads the pool to 256 cells
MIN_POOL = 256  # smaller than this and no chat fits: give up rather than halve again
# automatic layout: streams where each holds at least this many cells (smaller, chats outgrow
# them at once); and, where the layout cannot change while chats run, where each holds a long chat
MIN_STREAM = 1024
LONG_CHAT = 8192
# back to streams only when every chat fits in this share of a stream: one growing past it at once
# would move everyone again
BACK_TO_STREAMS = 0.75


@dataclass(frozen=True)
class KVShape:
    """What one KV cell holds: per layer a K row and a V row (n_embd_k_gqa and n_embd_v_gqa values)."""

    n_layer: int
    n_embd_k_gqa: int
    n_embd_v_gqa: int

    def bytes_per_cell(self, type_k: CacheType, type_v: CacheType) -> int:
        per_layer = self.n_embd_k_gqa * type_k.bytes_per_value + self.n_embd_v_gqa * type_v.bytes_per_value
        return round(self.n_layer * per_layer)


@dataclass(frozen=True)
class PoolChoice:
    n_ctx: int  # the pool's cells
    reason: str  # how it was chosen, in words


def default_pool(
    bytes_per_cell: int, n_ctx_train: int, panes: int, free_bytes: int | None, share: float = MEMORY_SHARE
) -> PoolChoice:
    """The default pool: every pane may reach the training context, within a share of the free memory."""
    full = max(POOL_STEP, n_ctx_train) * max(1, panes)
    if not free_bytes:
        return PoolChoice(_round(min(full, 8192)), "free memory unknown: 8192 cells at most")
    budget = int(free_bytes * share)
    by_memory = budget // max(1, bytes_per_cell)
    if full <= by_memory:
        return PoolChoice(_round(full), f"{panes} × the training context {n_ctx_train}")
    reason = f"{share:.0%} of {format_bytes(free_bytes)} free"
    return PoolChoice(max(MIN_POOL, _round(by_memory)), reason)


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


def halvings(n_ctx: int, fits=lambda n: True):
    """The smaller pools to try after `n_ctx` failed: halved down to MIN_POOL, those that cannot fit skipped."""
    n = n_ctx
    while n // 2 >= MIN_POOL:
        n = _round(n // 2)
        if fits(n):
            yield n


def _round(n: int) -> int:
    return max(POOL_STEP, n // POOL_STEP * POOL_STEP)


def free_memory_bytes() -> int | None:
    """RAM this process may still take: MemAvailable, within the cgroup's limit (containers); None if unknown."""
    free = _meminfo_available()
    if free is None:
        try:
            free = os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
        except (ValueError, OSError, AttributeError):
            free = None
    limit = _cgroup_room()
    if limit is not None:
        free = limit if free is None else min(free, limit)
    return free


def _meminfo_available() -> int | None:
    try:
        with open("/proc/meminfo", encoding="ascii") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return None


def _cgroup_room() -> int | None:
    try:
        with open("/sys/fs/cgroup/memory.max", encoding="ascii") as f:
            limit = f.read().strip()
        if limit == "max":
            return None
        with open("/sys/fs/cgroup/memory.current", encoding="ascii") as f:
            return max(0, int(limit) - int(f.read().strip()))
    except (OSError, ValueError):
        return None


def format_bytes(n: float) -> str:
    for unit, size in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= size:
            return f"{n / size:.1f} {unit}"
    return f"{n:.0f} B"
