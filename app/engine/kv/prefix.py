"""The common prefix of two token lists: what a new prompt can reuse of cached cells."""

from __future__ import annotations

# a waiting request that shares at least this many more tokens with a prompt being read right now
# waits for that prompt, then copies it, instead of computing the same prefix twice; a shorter prefix
# is not worth keeping apart from a slot's saved cells, nor copying across streams
MIN_SHARED_PREFIX = 32


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
