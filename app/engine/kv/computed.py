"""Which token prefixes the engine has computed before, so that computing one again is counted.

A prompt's tokens that were computed once and are evaluated again (after an eviction or a
preemption, or by a second chat sending the same text) are *recomputed*: the cost a better cache
would not pay. Prefixes are remembered by a hash chain over blocks of BLOCK tokens, the least
recently seen forgotten first, so the ledger stays small whatever the load.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Iterator

BLOCK = 16
BLOCKS_KEPT = 1 << 16  # a million tokens' prefixes, at about 100 bytes a block


class ComputedPrefixes:
    def __init__(self, capacity: int = BLOCKS_KEPT):
        self.capacity = capacity
        self._seen: OrderedDict[int, None] = OrderedDict()

    def known(self, tokens: list[int]) -> int:
        """How many leading tokens of `tokens` were computed before (whole blocks only)."""
        n = 0
        for h in _chain(tokens, len(tokens)):
            if h not in self._seen:
                break
            self._seen.move_to_end(h)
            n += BLOCK
        return n

    def add(self, tokens: list[int], n: int) -> None:
        """The first `n` of `tokens` were computed."""
        seen = self._seen
        for h in _chain(tokens, n):
            seen[h] = None
            seen.move_to_end(h)
        while len(seen) > self.capacity:
            seen.popitem(last=False)


def _chain(tokens: list[int], n: int) -> Iterator[int]:
    """A hash per whole block of the first `n` tokens, each covering every token before it too."""
    h = 0
    for start in range(0, n - BLOCK + 1, BLOCK):
        h = hash((h, *tokens[start : start + BLOCK]))
        yield h
