"""What a step will cost, from the steps measured: seconds ≈ fixed + per ubatch × ubatches + per
token × tokens + per cell × the cells its prompt chunks attend.

A ubatch is one pass over the model's weights (llama.cpp runs a step as one or several); each token
adds its share of the matrix work. In one pool a step is one ubatch, so its cost follows its
tokens; with a stream per sequence a step is cut by runs of sequences (kv/layout.py), and a prompt
chunk beside the decodes costs a pass of its own whatever its size, its attention over its stream's
cells growing with how far into its chat it reads (a chunk deep in a long document costs several
times one near its start). The adaptive batch asks the model how many prompt tokens fit a step
under its target (AdaptiveBatch.token_budget).

The fit says what a step costs on average; the same step can take half as long again when another
thread takes a core for a moment. So the model also keeps how far over its word the steps that
read a prompt beside decodes came (`overrun`: a high percentile of measured ÷ predicted), and a
plan leaves that much room."""

from __future__ import annotations

from collections import deque
from collections.abc import Callable

import numpy as np

from ..stats import StepStats, percentile

STEPS_FITTED = 256  # the most recent steps the fit reads
MIN_STEPS = 16  # before this many, a step's cost is a fixed part and its tokens' share (passes not yet told apart)
CELLS = 1000.0  # the attended cells' unit in the fit, so its coefficients are of like size
OVERRUN_PERCENTILE = 95  # of the mixed steps' measured ÷ predicted: the room a plan leaves (the target is a p95)
# before this many mixed steps were predicted by a fit with a fixed part, none is left: a run of a
# few seconds has a few dozen, and its slow gaps come from the first dozen, so the room is learnt
# from the first (the first fit's too); from so few, one hiccup would say every step needs twice its
# cost, and no prompt would fit beside the replies again: the room is for the machine's usual spread
# (the adaptive batch meets a hiccup as a burst), up to MAX_ROOM
MIN_OVERRUNS = 4
MAX_ROOM = 1.5


class StepModel:
    def __init__(self):
        self._rows: deque[tuple[float, float, float, float]] = deque(maxlen=STEPS_FITTED)  # ubatches, tokens, cells, s
        self._fit: tuple[float, float, float, float] | None = None  # fixed, per ubatch, per token, per cell (s)
        self._overruns: deque[float] = deque(maxlen=STEPS_FITTED)  # measured ÷ predicted, of mixed steps

    def observe(self, step: StepStats) -> float | None:
        """Learn from a step; for one reading a prompt beside decodes, return how many times its cost
        the model, having learnt from it, still says it took (a step it could not have foreseen: more
        than the room, another process took a core); None for another step."""
        mixed = step.n_decode and step.n_prefill_tokens  # the plans the room is for
        shape = step.n_ubatches, step.n_tokens, step.n_attended
        fit = self.coefficients if mixed else None
        # not the tokens' share alone (before steps of two sizes): its miss on the first small step,
        # which pays a pass it does not know, is its own
        priced = fit is not None and (len(self._rows) >= MIN_STEPS or fit[0] > 0)
        predicted = self.predict(*shape) if priced else None
        if predicted:
            self._overruns.append(step.step_s / predicted)
        self._rows.append((step.n_ubatches, step.n_tokens, step.n_attended / CELLS, step.step_s))
        self._fit = None
        explained = self.predict(*shape) if mixed else None
        return step.step_s / explained if explained else None

    @property
    def coefficients(self) -> tuple[float, float, float, float] | None:
        """(fixed, per ubatch, per token, per attended cell) seconds, none negative; None before any
        step was seen. The first steps (a window's first prompts, read before anyone decodes) are
        too few to tell passes and cells apart: until MIN_STEPS, a step costs a fixed part and its
        tokens' share (`_first_fit`)."""
        if self._fit is None and self._rows:
            rows = np.array(self._rows, dtype=np.float64)
            fixed, ubatch, token, cells = _fit(rows) if len(rows) >= MIN_STEPS else _first_fit(rows)
            self._fit = fixed, ubatch, token, cells / CELLS
        return self._fit

    @property
    def overrun(self) -> float:
        """How many times its predicted cost a step reading a prompt beside decodes may take (the
        OVERRUN_PERCENTILE of those a fit with a fixed part predicted, at most MAX_ROOM; 1 until
        enough were)."""
        if len(self._overruns) < MIN_OVERRUNS:
            return 1.0
        return min(MAX_ROOM, max(1.0, percentile(self._overruns, OVERRUN_PERCENTILE)))

    @property
    def prices_passes(self) -> bool:
        """Whether the fit tells a pass over the weights apart (the first fit does not)."""
        fit = self.coefficients
        return fit is not None and fit[1] > 0

    def predict(self, ubatches: int, tokens: int, attended: int = 0) -> float | None:
        fit = self.coefficients
        return None if fit is None else fit[0] + fit[1] * ubatches + fit[2] * tokens + fit[3] * attended

    def prompt_within(
        self, seconds: float, ubatches: int, decoding: int, attended: Callable[[int], int], most: int
    ) -> int | None:
        """The most prompt tokens (up to `most`) a step of `ubatches` passes and `decoding` decodes may
        read and still cost at most `seconds`, a chunk of n attending `attended(n)` cells (0 where
        even none fit); None before any step was seen, or where a token costs nothing measurable."""
        fit = self.coefficients
        if fit is None or fit[2] <= 0:
            return None

        def fits(n: int) -> bool:
            return self.predict(ubatches, decoding + n, attended(n)) <= seconds

        if fits(most):
            return most
        low, high = 0, most  # the cost grows with n: the largest n that fits, by halving
        while high - low > 1:
            mid = (low + high) // 2
            low, high = (mid, high) if fits(mid) else (low, mid)
        return low


def _fit(rows: np.ndarray) -> tuple[float, float, float, float]:
    """Least squares with no negative cost: a coefficient the noise drives below zero is dropped
    and the others fitted again. A column that never varied (the ubatches in one pool, the cells
    where chunks attend nothing extra) is part of the fixed cost."""
    x = np.column_stack([np.ones(len(rows)), rows[:, :3]])
    y = rows[:, 3]
    keep = [0] + [i + 1 for i in range(3) if np.ptp(rows[:, i]) > 0]
    while True:
        coef, *_ = np.linalg.lstsq(x[:, keep], y, rcond=None)
        if (coef >= 0).all() or len(keep) == 1:
            break
        keep.pop(int(np.argmin(coef)))
    fit = [0.0, 0.0, 0.0, 0.0]
    for i, c in zip(keep, coef, strict=True):
        fit[i] = max(0.0, float(c))
    return fit[0], fit[1], fit[2], fit[3]


def _first_fit(rows: np.ndarray) -> tuple[float, float, float, float]:
    """A fixed part and a token's share once steps of two sizes were seen: the first small step
    beside the first replies costs far more than its tokens' share of a large prompt step (the pass
    over the weights), and the steps after it are planned knowing that. Before, or where the noise
    leaves a token costing nothing, the tokens' share alone."""
    if np.ptp(rows[:, 1]) > 0:
        fixed, _, token, _ = _fit(rows * np.array([0.0, 1.0, 0.0, 1.0]))  # passes and cells: in the fixed part
        if token > 0:
            return fixed, 0.0, token, 0.0
    return _per_token(rows)


def _per_token(rows: np.ndarray) -> tuple[float, float, float, float]:
    """A cost in proportion to the tokens, fitted through zero."""
    tokens, seconds = rows[:, 1], rows[:, 3]
    square = float(tokens @ tokens)
    return 0.0, 0.0, float(tokens @ seconds) / square if square else 0.0, 0.0
