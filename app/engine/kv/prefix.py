"""The common prefix of two token lists: what a new prompt can reuse of cached cells."""

from __future__ import annotations


def common_prefix_len(a: list[int], b: list[int]) -> int:
    """Length of the common prefix of two token lists (slice compares run in C)."""
    n = min(len(a), len(b))
    if a[:n] == b[:n]:
        return n
    lo, hi = 0, n  # a[:lo] == b[:lo] and a[:hi] != b[:hi]
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if a[lo:mid] == b[lo:mid]:
            lo = mid
        else:
            hi = mid
    return lo
