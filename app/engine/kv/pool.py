"""How big the KV pool is by default: from the model (bytes per cell, its training context), the
panes and the machine (a share of the memory that is free); and the memory a pool takes. How it is
laid out (one pool, or a stream per sequence): layout.py."""

from __future__ import annotations

import os
from dataclasses import dataclass

from ..params import CacheType

MEMORY_SHARE = 0.25  # of the free RAM (or VRAM, with layers offloaded) the default pool may take
POOL_STEP = 256  # llama.cpp pads the pool to 256 cells
MIN_POOL = 256  # smaller than this and no chat fits: give up rather than halve again


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
