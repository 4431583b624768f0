"""Adaptive batch size: keep the inter-token latency under a target, with as much batching as that allows.

A generating stream gets one token a step, so its inter-token latency is the step time. The
controller watches the steps it measures and turns two knobs. How many sequences run (and so
decode) together is judged by the steps that only decode: when they get slow, it is cut in
proportion; when one more stream would still fit, it grows by one. How many prompt tokens a step
may read beside the streams comes from what a step costs (StepModel: a pass over the weights per
ubatch, each token's share, each cell a prompt chunk attends): the most that keeps the step under
the target, with the room the model says such steps overran their prediction by (a busy machine's
steps vary more). The layout decides the passes (a stream per sequence gives a prompt chunk a pass
of its own, one pool does not) and what the chunk's attention adds (in streams it spans its
stream's cells, so the deeper into its chat, the fewer tokens fit). Where no chunk fits beside the
streams, any step that reads one is slow: the target is a p95, so a small share of the gaps may
be, and those steps read large chunks (up to SLOW_CAP times the target) while the share allows,
and the others only decode. A step the model, having learnt from it, still cannot explain (over
the usual room and over the aim's margin: another process took a core) starts a burst: such
slowness lasts a few steps, so for BURST_S the plans aim as much lower (a step that much slower
lands at the aim) and spend no slow step. The feedback corrects the model: when more than
SLOW_SHARE of the recent gaps are over the target anyway, the chunk shrinks, and it grows back
while nearly none are. A step with nobody generating has no latency to protect: the scheduler
gives it its idle chunk (Scheduler.token_budget).
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable

from ..stats import StepStats, percentile
from .step_model import StepModel

AIM = 0.9  # of the target at most: the latency a stream sees also holds the gaps between steps
SLOW_SHARE = 0.03  # of the recent token gaps may be over the aim (the target is a p95, with margin)
WINDOW_GAPS = 400  # the recent token gaps the chunk is judged by
JUDGE_AFTER_S = 5.0  # or, with few streams, the gaps of this long since the chunk last changed
MIN_PREFILL = 4  # prompt tokens a mixed step may always read, so a prompt is never stuck
UPDATE_EVERY_S = 0.5
# the slow gaps that steps reading a prompt chunk no step under the target could hold may take, of
# the last SPACED_WINDOW gaps: half the feedback's share, so spending them never shrinks the chunk
SPACED_SHARE = SLOW_SHARE / 2
SPACED_WINDOW = 1000
SLOW_CAP = 4.0  # such a step costs at most this many times the target
# a step that overran its prediction by more than the usual room and the aim's margin starts a burst
# (another process took a core): the next steps' plans aim that much lower for this long, renewed
# while it lasts
BURST_S = 0.5


class AdaptiveBatch:
    def __init__(
        self,
        itl_target_s: float,
        capacity: int,
        n_batch: int,
        clock: Callable[[], float] = time.monotonic,
    ):
        self.itl_target_s = itl_target_s
        self.capacity = capacity
        self.n_batch = n_batch
        self._clock = clock
        self.max_running = capacity
        self.prefill_budget = n_batch
        self._decode_only: list[StepStats] = []  # since the last update
        self._recent: deque[StepStats] = deque()  # steps that generated, since the chunk last changed
        self._recent_gaps = 0
        self._last_update = self._last_change = clock()
        self.model = StepModel()
        self._window: deque[tuple[int, bool]] = deque()  # (gaps, over the target) of the last SPACED_WINDOW gaps
        self._gaps = self._slow_gaps = 0
        self._spending = False  # the step planned last was given a chunk that makes it slow, on purpose
        self._burst = 1.0  # how far the last step over the usual room overran, until _burst_until
        self._burst_until = 0.0

    def token_budget(
        self, decoding: int, ubatches: int = 1, prompt_ubatches: int = 0, attended: Callable[[int], int] = lambda n: 0
    ) -> int:
        """Tokens the next step may take when `decoding` sequences (one or more) generate, their tokens
        cut into `ubatches` passes, and a prompt chunk of n tokens beside them adds `prompt_ubatches`
        and attends `attended(n)` cells."""
        self._spending = False
        fit = self.within_target(decoding, ubatches, prompt_ubatches, attended)
        if fit is not None:
            return fit
        if not self.in_burst and self._may_be_slow(decoding):  # not while a burst makes every step slower
            self._spending = True
            passes, room = ubatches + prompt_ubatches, self.n_batch - decoding
            large = self.model.prompt_within(SLOW_CAP * self.itl_target_s, passes, decoding, attended, room) or 0
            return min(self.n_batch, decoding + max(MIN_PREFILL, large))
        return decoding

    def within_target(
        self, decoding: int, ubatches: int, prompt_ubatches: int, attended: Callable[[int], int] = lambda n: 0
    ) -> int | None:
        """Tokens a step of `decoding` decodes in `ubatches` passes and a prompt chunk (in
        `prompt_ubatches` passes, attending `attended(n)` cells) may take, planned under the target;
        None where fewer than MIN_PREFILL prompt tokens fit. Nothing is spent."""
        budget = min(self.n_batch, decoding + self.prefill_budget)
        # the usual room is a p95 of the overruns, a plan at the target over it holds the target; a
        # burst's steps are all that much slower, so its plans aim lower by as much
        within = min(AIM / (self._burst if self.in_burst else 1.0), 1 / self.model.overrun) * self.itl_target_s
        fit = self.model.prompt_within(within, ubatches + prompt_ubatches, decoding, attended, self.n_batch - decoding)
        if fit is None:  # nothing measured yet: the feedback alone
            return budget
        return max(decoding, min(budget, decoding + fit)) if fit >= MIN_PREFILL else None

    @property
    def in_burst(self) -> bool:
        """Whether steps run slower than the model says for a moment (another process took a core),
        and the plans aim lower for it."""
        return self._clock() < self._burst_until

    @property
    def spending(self) -> bool:
        """Whether the step planned last was given a chunk that makes it slow, on purpose."""
        return self._spending

    def _may_be_slow(self, decoding: int) -> bool:
        """Whether a step over the target may come now, its `decoding` gaps within the spaced share."""
        return self._slow_gaps + decoding <= SPACED_SHARE * max(self._gaps + decoding, SPACED_WINDOW)

    def observe(self, step: StepStats) -> None:
        room = self.model.overrun
        ratio = self.model.observe(step)
        # over the usual room, and over what the aim leaves (a step within that still held the target);
        # a chunk read slow on purpose is no sign
        if ratio is not None and ratio > max(room, 1 / AIM) and not self._spending:
            self._burst, self._burst_until = ratio, self._clock() + BURST_S
        if step.n_decode:
            slow = step.step_s > self.itl_target_s
            self._window.append((step.n_decode, slow))
            self._gaps += step.n_decode
            self._slow_gaps += step.n_decode * slow
            while self._gaps - self._window[0][0] >= SPACED_WINDOW:
                n, was_slow = self._window.popleft()
                self._gaps -= n
                self._slow_gaps -= n * was_slow
            if not step.n_prefill_tokens:
                self._decode_only.append(step)
            if not self._spending:  # the feedback judges the steps meant to be under the target
                self._recent.append(step)
                self._recent_gaps += step.n_decode
                while self._recent_gaps - self._recent[0].n_decode >= WINDOW_GAPS:
                    self._recent_gaps -= self._recent.popleft().n_decode
        self._spending = False
        now = self._clock()
        if now - self._last_update >= UPDATE_EVERY_S:
            self._update(now)

    def _update(self, now: float) -> None:
        aim = AIM * self.itl_target_s
        if self._decode_only:
            self.max_running = self._tuned_running(self._decode_only, aim)
            self._decode_only.clear()
        judge = self._recent_gaps >= WINDOW_GAPS or (self._recent_gaps and now - self._last_change >= JUDGE_AFTER_S)
        if judge:
            budget = self._tuned_prefill(aim)
            if budget != self.prefill_budget:
                self.prefill_budget = budget
                self._recent.clear()  # judge the new chunk by its own steps
                self._recent_gaps = 0
                self._last_change = now
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

    def _tuned_prefill(self, aim: float) -> int:
        slow_gaps = sum(s.n_decode for s in self._recent if s.step_s > aim)
        share = slow_gaps / self._recent_gaps
        if share > SLOW_SHARE:
            return max(MIN_PREFILL, int(self.prefill_budget * 0.6))
        if share < SLOW_SHARE / 3:
            return min(self.n_batch, int(self.prefill_budget * 1.25) + MIN_PREFILL)
        return self.prefill_budget
