"""Adaptive batch size: keep the inter-token latency under a target, with as much batching as that allows.

A generating stream gets one token a step, so its inter-token latency is the step time. The
controller watches the steps it measures and turns two knobs: how many sequences run (and so
decode) together, judged by the steps that only decode; and how many prompt tokens a step may
read beside them, judged by the steps that mix both. Slow steps shrink a knob at once (the user
feels them); fast steps grow it a little at a time. A step with nobody generating has no
latency to protect and reads prompts at full width.
"""

from __future__ import annotations

import time
from collections.abc import Callable

from .stats import StepStats, percentile

AIM = 0.85  # of the target: the latency a stream sees also holds the gaps between steps
GROW_BELOW = 0.7  # grow a knob only while its steps stay under this share of the aim
MIN_PREFILL = 4  # prompt tokens a mixed step may always read, so a prompt is never stuck
UPDATE_EVERY_S = 0.5


class AdaptiveBatch:
    def __init__(
        self,
        itl_target_s: float,
        capacity: int,
        n_batch: int,
        clock: Callable[[], float] = time.monotonic,
        update_every_s: float = UPDATE_EVERY_S,
    ):
        self.itl_target_s = itl_target_s
        self.capacity = capacity
        self.n_batch = n_batch
        self._clock = clock
        self._update_every_s = update_every_s
        self.max_running = capacity
        self.prefill_budget = max(MIN_PREFILL, n_batch // 8)
        self._decode_only: list[StepStats] = []
        self._mixed: list[StepStats] = []
        self._last_update = clock()

    def token_budget(self, decoding: int) -> int:
        """Tokens the next step may take when `decoding` sequences generate."""
        if decoding == 0:
            return self.n_batch
        return min(self.n_batch, decoding + self.prefill_budget)

    def observe(self, step: StepStats) -> None:
        if step.n_decode and step.n_prefill_tokens:
            self._mixed.append(step)
        elif step.n_decode:
            self._decode_only.append(step)
        now = self._clock()
        if now - self._last_update >= self._update_every_s:
            self._update(now)

    def _update(self, now: float) -> None:
        aim = AIM * self.itl_target_s
        if self._decode_only:
            self.max_running = self._tuned_running(self._decode_only, aim)
        if self._mixed:
            self.prefill_budget = self._tuned_prefill(self._mixed, aim)
        self._decode_only.clear()
        self._mixed.clear()
        self._last_update = now

    def _tuned_running(self, steps: list[StepStats], aim: float) -> int:
        slow = percentile([s.step_s for s in steps], 90)
        widest = max(s.n_decode for s in steps)
        if slow > aim:  # cut in proportion, as if each stream cost the same: at least by one
            return max(1, min(self.max_running - 1, widest - 1, int(widest * aim / slow)))
        # one more stream costs about what each of the others does: grow if that still fits
        if widest >= self.max_running and slow * (widest + 1) / widest < aim:
            return min(self.capacity, self.max_running + 1)
        return self.max_running

    def _tuned_prefill(self, steps: list[StepStats], aim: float) -> int:
        slow = percentile([s.step_s for s in steps], 90)
        if slow > aim:
            return max(MIN_PREFILL, int(self.prefill_budget * 0.6))
        if slow < GROW_BELOW * aim:
            return min(self.n_batch, int(self.prefill_budget * 1.25) + MIN_PREFILL)
        return self.prefill_budget
