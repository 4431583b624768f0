"""What a step will cost, from the steps measured: seconds ≈ fixed + per ubatch × ubatches + per token × tokens.

A ubatch is one pass over the model's weights (llama.cpp runs a step as one or several); each token
adds its share of the matrix work. In one pool a step is one ubatch, so its cost follows its
tokens; with a stream per sequence a step is cut by runs of sequences (kv/layout.py), and a prompt
chunk beside the decodes costs a pass of its own whatever its size. The adaptive batch asks the
model how many prompt tokens fit a step under its target (AdaptiveBatch.token_budget)."""

from __future__ import annotations

from collections import deque

import numpy as np

from ..stats import StepStats

STEPS_FITTED = 256  # the most recent steps the fit reads
MIN_STEPS = 16  # before this many, no prediction: the adaptive batch goes by its feedback alone


class StepModel:
    def __init__(self):
        self._rows: deque[tuple[float, float, float]] = deque(maxlen=STEPS_FITTED)  # ubatches, tokens, seconds
        self._fit: tuple[float, float, float] | None = None  # fixed, per ubatch, per token (s)

    def observe(self, step: StepStats) -> None:
        self._rows.append((step.n_ubatches, step.n_tokens, step.step_s))
        self._fit = None

    @property
    def coefficients(self) -> tuple[float, float, float] | None:
        """(fixed, per ubatch, per token) seconds, none negative; None until enough steps were seen."""
        if self._fit is None and len(self._rows) >= MIN_STEPS:
            self._fit = _fit(np.array(self._rows, dtype=np.float64))
        return self._fit

    def predict(self, ubatches: int, tokens: int) -> float | None:
        fit = self.coefficients
        return None if fit is None else fit[0] + fit[1] * ubatches + fit[2] * tokens

    def tokens_within(self, seconds: float, ubatches: int) -> int | None:
        """The most tokens a step of `ubatches` passes may take and still cost at most `seconds`
        (0 where even none fit); None until enough steps were seen, or where a token costs nothing measurable."""
        fit = self.coefficients
        if fit is None or fit[2] <= 0:
            return None
        return max(0, int((seconds - fit[0] - fit[1] * ubatches) / fit[2]))


def _fit(rows: np.ndarray) -> tuple[float, float, float]:
    """Least squares with no negative cost: a coefficient the noise drives below zero is dropped
    and the others fitted again. Where the ubatches never varied (one pool) their cost is part of
    the fixed one."""
    x = np.column_stack([np.ones(len(rows)), rows[:, 0], rows[:, 1]])
    y = rows[:, 2]
    keep = [0, 1, 2] if np.ptp(rows[:, 0]) > 0 else [0, 2]
    while True:
        coef, *_ = np.linalg.lstsq(x[:, keep], y, rcond=None)
        if (coef >= 0).all() or len(keep) == 1:
            break
        keep.pop(int(np.argmin(coef)))
    fit = [0.0, 0.0, 0.0]
    for i, c in zip(keep, coef, strict=True):
        fit[i] = max(0.0, float(c))
    return fit[0], fit[1], fit[2]
