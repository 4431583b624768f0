"""What a decode of n tokens costs on this machine, measured from every step: whether a draft pays
(spec/), and what a draft model's guess costs (llama/draft.py)."""

from __future__ import annotations

COST_WEIGHT = 0.1  # of each new step in the running cost of its size


class StepCost:
    """Seconds a decode of n tokens takes on this machine: a running average per size, from every step."""

    def __init__(self):
        self._seconds: dict[int, float] = {}
        self._sizes: list[int] = []  # the measured sizes, in order

    def observe(self, n_tokens: int, seconds: float) -> None:
        old = self._seconds.get(n_tokens)
        self._seconds[n_tokens] = seconds if old is None else old + COST_WEIGHT * (seconds - old)
        if old is None:
            self._sizes = sorted(self._seconds)

    def of(self, n_tokens: int) -> float | None:
        """The measured cost of a step of this size; between measured sizes a straight line, above
        the largest the slope of the two largest; None until two sizes are measured."""
        if n_tokens in self._seconds:
            return self._seconds[n_tokens]
        sizes = self._sizes
        if len(sizes) < 2:
            return None
        upper = next((n for n in sizes if n > n_tokens), None)
        if upper is None:
            lower, upper = sizes[-2], sizes[-1]
        else:
            lower = max((n for n in sizes if n < n_tokens), default=sizes[0])
            if lower > n_tokens:  # below the smallest measured size
                lower, upper = sizes[0], sizes[1]
        low, high = self._seconds[lower], self._seconds[upper]
        return max(0.0, low + (high - low) * (n_tokens - lower) / (upper - lower))
