"""Honest numbers: what each request and each decode step cost, and what the KV cache saved."""

from __future__ import annotations

import math
import threading
from collections import OrderedDict, deque
from dataclasses import dataclass, field


def percentile(values, q: float) -> float:
    """The q-th percentile (0..100) by linear interpolation; NaN for no values."""
    data = sorted(values)
    if not data:
        return math.nan
    k = (len(data) - 1) * q / 100.0
    lo = math.floor(k)
    hi = min(lo + 1, len(data) - 1)
    return data[lo] + (data[hi] - data[lo]) * (k - lo)


def hit_rate(cached: int, evaluated: int) -> float:
    total = cached + evaluated
    return cached / total if total else math.nan


@dataclass
class RequestStats:
    request_id: str
    conversation_id: str | None = None
    prompt_tokens: int = 0
    cached_tokens: int = 0  # prompt tokens whose KV cells were reused
    restored_tokens: int = 0  # of those, cells brought back from RAM
    evaluated_tokens: int = 0  # prompt tokens computed (again, after a preemption)
    recomputed_tokens: int = 0  # of those, tokens computed once before (evicted, preempted, or sent twice)
    gen_tokens: int = 0
    reasoning_tokens: int = 0  # of those, the reply's thoughts (its family's markers counted with them)
    drafted_tokens: int = 0  # speculative decoding: tokens guessed and verified
    accepted_tokens: int = 0  # of those, the right ones (each a token that took no step of its own)
    preemptions: int = 0
    images: int = 0  # pictures in the prompt
    image_tokens: int = 0  # of prompt_tokens, their image tokens
    encode_s: float = 0.0  # what encoding its pictures took on the prompt thread (none: each was encoded before)
    t_submit: float = 0.0
    t_admit: float = math.nan
    t_first_token: float = math.nan
    t_last_token: float = math.nan
    t_first_answer: float = math.nan  # the first token of the answer after thoughts (NaN: no thoughts, or no answer yet)
    t_finish: float = math.nan
    itl: list[float] = field(default_factory=list)  # gaps between consecutive tokens, seconds
    # the whole conversation so far, this request included: its running KV hit rate
    conversation_cached_tokens: int = 0
    conversation_evaluated_tokens: int = 0

    @property
    def queued_s(self) -> float:
        return self.t_admit - self.t_submit

    @property
    def ttft_s(self) -> float:
        return self.t_first_token - self.t_submit

    @property
    def answer_s(self) -> float:
        """From the submit to the answer's first token, after the thoughts (NaN without thoughts)."""
        return self.t_first_answer - self.t_submit

    @property
    def kv_hit_rate(self) -> float:
        return hit_rate(self.cached_tokens, self.evaluated_tokens)

    @property
    def conversation_hit_rate(self) -> float:
        return hit_rate(self.conversation_cached_tokens, self.conversation_evaluated_tokens)

    @property
    def gen_tok_s(self) -> float:
        """Generation speed of this stream after its first token."""
        span = self.t_last_token - self.t_first_token
        return (self.gen_tokens - 1) / span if self.gen_tokens > 1 and span > 0 else math.nan

    @property
    def itl_p50_s(self) -> float:
        return percentile(self.itl, 50)

    @property
    def itl_p95_s(self) -> float:
        return percentile(self.itl, 95)

    def on_inserted(self, n: int, now: float) -> None:
        """`n` tokens put into the reply, not drawn (a budget's closing marker): counted, no gap of their own."""
        self.gen_tokens += n
        self.t_last_token = now

    def on_token(self, now: float) -> None:
        if self.gen_tokens == 0:
            self.t_first_token = now
        else:
            self.itl.append(now - self.t_last_token)
        self.t_last_token = now
        self.gen_tokens += 1


@dataclass(frozen=True, slots=True)
class StepPart:
    """One sequence's share of a step's batch."""

    request_id: str
    conversation_id: str | None  # a pane's chat (its key), or None
    n_tokens: int
    is_decode: bool  # its next token; else a chunk of its prompt
    drafted: int = 0  # of n_tokens, guesses after its next token, verified in this step
    image_tokens: int = 0  # of n_tokens, a picture's embedding rows (decoded before the step's tokens)
    start: int = 0  # the sequence's tokens already in its cells: where a prompt chunk is read


@dataclass(frozen=True)
class StepStats:
    t_end: float  # monotonic time the step finished
    n_tokens: int  # tokens in the batch
    n_seqs: int  # sequences in the batch
    n_decode: int  # of which generating one token each
    n_prefill_tokens: int  # prompt tokens read in this step
    step_s: float  # schedule + decode + sample
    decode_s: float  # llama_decode alone
    batch_limit: int  # sequences allowed to run: the capacity, or what the adaptive batch chose
    parts: tuple[StepPart, ...] = ()  # the batch's composition, in batch order
    token_budget: int = 0  # the tokens it could take (Scheduler.token_budget): who waited on it decides
    held_back: bool = False  # planned while a burst made the adaptive batch hold its prompt chunks back
    # the decodes llama.cpp cut it into: one in one pool; with a stream per sequence, one per run of
    # consecutive sequences, and one more for a prompt chunk's rest (kv/layout.py's equal_splits)
    n_ubatches: int = 1
    n_image_tokens: int = 0  # of n_prefill_tokens, pictures' embedding rows
    # the cells its prompt chunks attend beyond what a token's share costs, as the layout makes
    # llama.cpp compute them (kv/layout.py's chunk_attention): a chunk deep in a long chat costs more
    n_attended: int = 0
    image_s: float = 0.0  # of decode_s, the pictures' decode (a decode of their own, before the tokens')

    @property
    def t_start(self) -> float:
        return self.t_end - self.step_s


class ConversationTotals:
    """Cached and evaluated prompt tokens of each recent conversation, so far: its running hit rate.

    The least recently active conversations are forgotten beyond `kept`; a request without a
    conversation is its own.
    """

    def __init__(self, kept: int):
        self._kept = kept
        self._totals: OrderedDict[str, list[int]] = OrderedDict()  # id -> [cached, evaluated]

    def add(self, stats: RequestStats) -> None:
        """Add a finished request's tokens to its conversation, and give it the totals so far."""
        totals = [0, 0]
        if stats.conversation_id is not None:
            totals = self._totals.setdefault(stats.conversation_id, totals)
            self._totals.move_to_end(stats.conversation_id)
            while len(self._totals) > self._kept:
                self._totals.popitem(last=False)
        totals[0] += stats.cached_tokens
        totals[1] += stats.evaluated_tokens
        stats.conversation_cached_tokens, stats.conversation_evaluated_tokens = totals

    def __contains__(self, conversation_id: str) -> bool:
        return conversation_id in self._totals

    def __len__(self) -> int:
        return len(self._totals)

    def ids(self) -> list[str]:
        """The conversations remembered, the least recently active first."""
        return list(self._totals)


class StepHistory:
    """The recent steps: appended on the engine thread, read as tuples from any thread."""

    def __init__(self, maxlen: int):
        self._steps: deque[StepStats] = deque(maxlen=maxlen)
        self._lock = threading.Lock()  # a deque copied while appended to raises

    def append(self, step: StepStats) -> None:
        with self._lock:
            self._steps.append(step)

    def since(self, t: float = -math.inf) -> tuple[StepStats, ...]:
        """The steps that ended after monotonic time t, oldest first (walking back from the newest)."""
        with self._lock:
            recent = []
            for step in reversed(self._steps):
                if step.t_end <= t:
                    break
                recent.append(step)
        return tuple(reversed(recent))


@dataclass(frozen=True)
class EngineSnapshot:
    """The engine as a whole, at one moment (safe to hand to another thread)."""

    cells_used: int
    cells_total: int
    slots_used: int
    slots_total: int
    running: int
    waiting: int
    evictions: int
    preemptions: int
    steps: int
    generated_tokens: int
    step_s: float = 0.0  # time in steps since the engine started: schedule, decode, sample, events
    decode_s: float = 0.0  # of which in llama_decode
    paused: int = 0  # running sequences beyond the batch limit: they keep their cells and wait their turn
    # the RAM tier: evicted cells kept in host memory
    saved_entries: int = 0
    saved_bytes: int = 0
    saves: int = 0
    restores: int = 0
    restored_tokens: int = 0
    recomputed_tokens: int = 0  # prompt tokens computed again after they were computed once
    drafted_tokens: int = 0  # speculative decoding, every request's together
    accepted_tokens: int = 0
    kv_layout: str = ""  # the KV layout now, and why (LlamaBackend.layout_text)
    layout_changes: int = 0  # times the layout changed while chats ran, every slot's cells carried over
    layout_change_s: float = 0.0  # spent on those changes
    step_size: str = ""  # what the last step's token budget was, and why (figures.step_size_line)
