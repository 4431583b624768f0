"""Per-pane and engine-wide figures in numpy ring buffers, fed by engine events (no Qt here).

The client's listener hands every step's events to `on_events`; the plot timer calls `sample`
about ten times a second to turn token counts into rates and to read the engine's step history.
"""

from __future__ import annotations

import math
from collections import deque
from dataclasses import dataclass, field

import numpy as np

from app.engine.events import FinishEvent, TokenEvent
from app.engine.stats import hit_rate

RING_SIZE = 4096
# a rate is a count over the last second: the tokens (or steps) whose time falls after now - 1 s
RATE_WINDOW_S = 1.0


class Ring:
    """A fixed-size buffer of (t, value) points; `view` returns them oldest first."""

    def __init__(self, size: int = RING_SIZE):
        self._t = np.zeros(size)
        self._v = np.zeros(size)
        self._next = 0
        self._count = 0
        self.pushes = 0  # grows with every point: a curve is redrawn only when this moved

    def push(self, t: float, value: float) -> None:
        self._t[self._next] = t
        self._v[self._next] = value
        self._next = (self._next + 1) % len(self._t)
        self._count = min(self._count + 1, len(self._t))
        self.pushes += 1

    def __len__(self) -> int:
        return self._count

    def view(self) -> tuple[np.ndarray, np.ndarray]:
        return self.last(self._count)

    def last(self, n: int) -> tuple[np.ndarray, np.ndarray]:
        """The newest n points (at most all of them), oldest first."""
        n = min(n, self._count)
        if n <= self._next:
            return self._t[self._next - n : self._next], self._v[self._next - n : self._next]
        wrap = n - self._next  # this many come from the end of the buffer
        return np.r_[self._t[-wrap:], self._t[: self._next]], np.r_[self._v[-wrap:], self._v[: self._next]]


@dataclass
class PaneMetrics:
    """One pane's history and its latest readout (the API's entry: every request served over HTTP)."""

    tok_rate: Ring = field(default_factory=Ring)  # tok_s at each sample
    ttft: Ring = field(default_factory=Ring)
    answer: Ring = field(default_factory=Ring)  # a thinking reply's first answer token after its thoughts, from its submit
    itl: Ring = field(default_factory=Ring)
    kv_hit: Ring = field(default_factory=Ring)
    # a point per reply that drafted (speculative decoding): its accepted share of the drafted tokens,
    # and the tokens each of its decode steps gave; a reply that drafted nothing adds none
    draft_accepted: Ring = field(default_factory=Ring)
    step_tokens: Ring = field(default_factory=Ring)
    recent_tokens: deque = field(default_factory=deque)  # (t, n) inside the rate window
    last_token_t: dict = field(default_factory=dict)  # request_id -> time of its last token
    # the readout's "tok/s": the pane's tokens whose time (when the engine drew them; a remote
    # pane's, when a chunk came) fell in the RATE_WINDOW_S before the last `sample`, per second.
    # Every token counts, a reply's first and its end-of-generation one too: not a decode speed
    # from the first token on, but what the pane got lately, so it ramps up over a reply's first
    # second, and falls to 0 a second after it ends
    tok_s: float = 0.0
    ttft_s: float = math.nan  # the last reply's first token less the time `track` got (prompt and queue included)
    # the last prompt's tokens found in the KV cache, of all its tokens: known at its reply's first
    # token, when its point joins `kv_hit`, so the readout is the plot's newest point
    kv_hit_rate: float = math.nan
    context_tokens: int = 0
    gen_tokens: int = 0  # in the reply being generated
    thought_tokens: int = 0  # of those, a thinking model's thoughts (the rest is its answer)
    answer_s: float = math.nan  # the last reply's first answer token after its thoughts, less its submit (NaN: no thoughts)
    # speculative decoding, the last reply's (from its final event; 0 while a reply streams): tokens
    # guessed ahead and verified, and of those the right ones
    drafted_tokens: int = 0
    accepted_tokens: int = 0
    tokens_per_step: float = math.nan  # the last reply's, where it drafted

    @property
    def draft_acceptance(self) -> float:
        """The last reply's accepted share of its drafted tokens; NaN when none were drafted."""
        return self.accepted_tokens / self.drafted_tokens if self.drafted_tokens else math.nan


def tokens_per_step(gen_tokens: int, accepted_tokens: int) -> float:
    """The tokens a reply got per decode step of its sequence: each step gives one token of its own
    and the guesses accepted with it, so the steps are the tokens less the accepted ones."""
    return gen_tokens / max(gen_tokens - accepted_tokens, 1)


@dataclass
class _Tracked:
    pane: str
    t_submit: float
    base_context: int  # tokens in context before this reply (for the live readout)
    hit_known: bool = False  # its prompt's KV hit came with its first token


TRACKED_KEPT = 4096  # far more requests than can be in flight at once
FINISHED_KEPT = 1024  # finished requests' stats kept for a trace (File > Save trace)


class MetricsStore:
    def __init__(self):
        self.panes: dict[str, PaneMetrics] = {}
        # decode tokens a second of the steps `sample` gets (the window gives the default model's):
        # StepStats.n_decode, so a reply's first token, drawn after its prompt's last chunk, is not counted
        self.engine_rate = Ring()
        self.seqs_per_step = Ring()
        self.batch_limit = Ring()  # sequences allowed to run: the capacity, or the adaptive batch's choice
        self._requests: dict[str, _Tracked] = {}
        self._last_step_t = 0.0
        self.finished: deque = deque(maxlen=FINISHED_KEPT)  # (pane, RequestStats) of the latest requests that ended

    def add_pane(self, key: str) -> PaneMetrics:
        return self.panes.setdefault(key, PaneMetrics())

    def remove_pane(self, key: str) -> None:
        self.panes.pop(key, None)
        self._requests = {rid: tr for rid, tr in self._requests.items() if tr.pane != key}

    def track(self, request_id: str, pane: str, t_submit: float) -> None:
        """Attribute a request's events to a pane (until its final event; the oldest go beyond a bound)."""
        metrics = self.add_pane(pane)
        metrics.gen_tokens = metrics.thought_tokens = 0
        metrics.answer_s = math.nan
        metrics.drafted_tokens = metrics.accepted_tokens = 0  # a new reply: its figures come with its end
        metrics.tokens_per_step = math.nan
        self._requests[request_id] = _Tracked(pane, t_submit, metrics.context_tokens)
        while len(self._requests) > TRACKED_KEPT:  # a request that never reached the engine has no final event
            del self._requests[next(iter(self._requests))]

    # -- events (on the event loop, for every engine step) ---------------------------------------

    def on_events(self, events) -> None:
        for ev in events:
            tracked = self._requests.get(ev.request_id)
            metrics = self.panes.get(tracked.pane) if tracked else None
            if metrics is None:
                continue
            if isinstance(ev, TokenEvent):
                self._on_token(ev, tracked, metrics)
            elif isinstance(ev, FinishEvent):
                self._on_finish(ev, tracked, metrics)
                self.finished.append((tracked.pane, ev.stats))
                del self._requests[ev.request_id]

    def _on_token(self, ev: TokenEvent, tracked: _Tracked, m: PaneMetrics) -> None:
        if ev.n_tokens == 0:
            return
        if ev.cached >= 0:  # the first token tells its prompt's hit: shown now, not when the reply ends
            self._on_hit(m, ev.t, hit_rate(ev.cached, ev.evaluated))
            tracked.hit_known = True
        previous = m.last_token_t.get(ev.request_id)
        if previous is None:
            m.ttft_s = ev.t - tracked.t_submit
            m.ttft.push(ev.t, m.ttft_s)
        else:
            m.itl.push(ev.t, ev.t - previous)
        m.last_token_t[ev.request_id] = ev.t
        m.recent_tokens.append((ev.t, ev.n_tokens))
        m.gen_tokens += ev.n_tokens
        if ev.thought:
            m.thought_tokens += ev.n_tokens
        elif m.thought_tokens and math.isnan(m.answer_s) and ev.text:
            m.answer_s = ev.t - tracked.t_submit
            m.answer.push(ev.t, m.answer_s)
        m.context_tokens = tracked.base_context + m.gen_tokens

    @staticmethod
    def _on_hit(m: PaneMetrics, t: float, rate: float) -> None:
        if not math.isnan(rate):
            m.kv_hit_rate = rate
            m.kv_hit.push(t, rate)

    def _on_finish(self, ev: FinishEvent, tracked: _Tracked, m: PaneMetrics) -> None:
        m.last_token_t.pop(ev.request_id, None)
        st = ev.stats
        t = st.t_finish if not math.isnan(st.t_finish) else st.t_submit
        m.drafted_tokens, m.accepted_tokens = st.drafted_tokens, st.accepted_tokens
        if st.drafted_tokens:
            m.tokens_per_step = tokens_per_step(st.gen_tokens, st.accepted_tokens)
            m.draft_accepted.push(t, st.accepted_tokens / st.drafted_tokens)
            m.step_tokens.push(t, m.tokens_per_step)
        if st.prompt_tokens:
            m.context_tokens = st.prompt_tokens + st.gen_tokens
        if not tracked.hit_known:  # a reply with no first token that told it (a remote pane's, one ended at once)
            self._on_hit(m, t, st.kv_hit_rate)

    # -- the plot timer ------------------------------------------------------------------------

    def sample(self, now: float, steps=()) -> None:
        """Push one rate point per pane and the engine's figures for the steps since last time.

        `now` on time.monotonic's clock, as the tokens' times; `steps`: those of the last RATE_WINDOW_S."""
        for m in self.panes.values():
            while m.recent_tokens and m.recent_tokens[0][0] <= now - RATE_WINDOW_S:
                m.recent_tokens.popleft()
            m.tok_s = sum(n for _, n in m.recent_tokens) / RATE_WINDOW_S
            m.tok_rate.push(now, m.tok_s)
        self._sample_engine(now, steps)

    def _sample_engine(self, now: float, steps) -> None:
        recent = steps  # those of the last RATE_WINDOW_S
        self.engine_rate.push(now, sum(st.n_decode for st in recent) / RATE_WINDOW_S)
        new = [st for st in recent if st.t_end > self._last_step_t]
        if new:
            self.seqs_per_step.push(now, sum(st.n_seqs for st in new) / len(new))
            self.batch_limit.push(now, new[-1].batch_limit)
            self._last_step_t = new[-1].t_end
        elif not recent:
            self.seqs_per_step.push(now, 0.0)
        # else a step is longer than a tick: no new point rather than a false drop to zero
