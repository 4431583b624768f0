"""Continuous batching: which tokens of which sequences go into the next decode.

Each step walks the sequences in the order its policy gives (by default: the next token of every
generating sequence, then chunks of prompts still being read, then admissions) while slots, cells
and the token budget allow. A long prompt is read a chunk per step, so the streams already running
keep producing tokens meanwhile. The step's token budget follows who waits on it: with no reply
generating, it reads prompts in chunks of n_ubatch (llama.cpp's ubatch, `-ub`);
with replies generating, n_batch (128), so that their tokens come often. An adaptive batch, when
set, narrows the budget and the number of sequences running to keep the steps under a latency target.

Static batching (ServingMode.STATIC) is the older way, kept to compare: once the running batch
has ended, the next one is gathered from the queue, up to the batch limit, when that many wait or
the first has waited `static_window_s`; while it runs, admission is closed to anyone outside it,
and a sequence that ends leaves its place empty. Its members still reuse cached prefixes.

The scheduler alone changes a sequence's status (sequence.SequenceStatus): it queues it (`add`),
admits it once the KV manager grants it a slot (`acquire`), preempts it (the KV manager takes its
cells, `preempt`) and ends it (`finish`, which the engine calls; the KV manager frees the slot,
`release`). It decides when; the KV manager moves the slots and cells.
"""

from __future__ import annotations

import math
import time
from collections import deque
from collections.abc import Callable

from ..kv.manager import Acquire, KVCacheManager
from ..params import EngineConfig, ServingMode
from ..sequence import Sequence, SequenceStatus
from .adaptive import AdaptiveBatch
from .plan import StepPlan
from .policy import Policy, preemption_victim, service_order

HEADROOM = 64  # tokens of each running reply kept free for it when admitting others
MAX_BYPASSES = 8  # a waiting request is passed by cheaper, cached ones at most this many times
# time slices under pressure: a request kept waiting this many steps (about 2 s on a CPU) takes the
# turn of the running reply that has had the longest one, at least SLICE_TOKENS tokens, and has more
# than SLICE_TOKENS to go (one about to end frees its place sooner than a save and restore would)
SLICE_STEPS = 32
SLICE_TOKENS = 16


class Scheduler:
    def __init__(
        self,
        kv: KVCacheManager,
        n_batch: int,
        max_running: int,
        policy: Policy = Policy.DECODE_FIRST,
        static_window_s: float = 0.05,
        n_ubatch: int | None = None,
    ):
        self.kv = kv
        self.n_batch = n_batch  # a step's tokens while replies stream
        self.n_ubatch = n_batch if n_ubatch is None else max(n_batch, n_ubatch)  # ... while none does
        self.max_running = max_running  # 1 when serving sequentially
        self.policy = policy
        self.limits: AdaptiveBatch | None = None  # set when the batch size adapts to a latency target
        self.waiting: deque[Sequence] = deque()
        self.running: list[Sequence] = []
        self.preemptions = 0
        self.bypasses = 0  # admissions that went ahead of an earlier waiting request
        self.static = False  # static batching: see set_static
        self.static_window_s = static_window_s
        self.static_batch: list[Sequence] = []  # the batch that runs now, its finished members included
        self.static_batches = 0  # batches formed
        self._step = 0
        self._whole_picture_planned = False

    def follow(self, config: EngineConfig, adapt_afresh: bool = False) -> None:
        """Take `config`'s serving settings at once: streams beyond a lower limit pause, keeping their
        cells; switched to static, the streams running are the batch that runs now; `adapt_afresh`:
        the batch size adapts anew to the latency target (None: stops adapting)."""
        self.max_running = 1 if config.mode is ServingMode.SEQUENTIAL else config.capacity
        if (config.mode is ServingMode.STATIC) != self.static:
            self.set_static(config.mode is ServingMode.STATIC)
        self.static_window_s = config.static_window_ms / 1000
        self.policy = config.policy
        if adapt_afresh:
            target = config.itl_target_ms
            self.limits = AdaptiveBatch(target / 1000, config.capacity, config.n_batch) if target else None

    def add(self, seq: Sequence) -> None:
        seq.status = SequenceStatus.WAITING
        seq.queued_step = self._step
        seq.t_queued = time.monotonic()
        self.waiting.append(seq)

    @property
    def batch_limit(self) -> int:
        """How many sequences may run at once now."""
        return self.max_running if self.limits is None else min(self.max_running, self.limits.max_running)

    def has_work(self) -> bool:
        return bool(self.running or self.waiting)

    # -- static batching ---------------------------------------------------------------------

    def set_static(self, on: bool) -> None:
        """Static batching on or off, at once. Switched on with sequences running, they are the
        batch that runs now (the waiting ones wait for the next); switched off, the queue is open."""
        self.static = on
        self.static_batch = list(self.running) if on else []

    @property
    def batch_running(self) -> bool:
        """Whether a static batch runs now: a member of it has not finished."""
        return any(s.status is not SequenceStatus.FINISHED for s in self.static_batch)

    def ready_in(self, now: float | None = None) -> float:
        """Seconds before a step can plan anything: 0, but while a static batch is being gathered."""
        if not self.static or self.batch_running or not self.waiting or len(self.waiting) >= self.batch_limit:
            return 0.0
        first = min(s.t_queued for s in self.waiting)
        return max(0.0, first + self.static_window_s - (time.monotonic() if now is None else now))

    def _gather(self) -> None:
        """Form the next static batch once the last has ended and the window allows: the first
        `batch_limit` waiting sequences in the policy's order."""
        if self.batch_running:
            return
        self.static_batch = []
        if self.waiting and self.ready_in() == 0:
            self.static_batch = service_order(self.policy, [], self.waiting)[: self.batch_limit]
            self.static_batches += 1

    def _admissible(self) -> deque[Sequence] | list[Sequence]:
        """The waiting sequences a step may admit: all of them, or a static batch's members only."""
        if not self.static:
            return self.waiting
        self._gather()
        return [s for s in self.waiting if s in self.static_batch]

    def find(self, request_id: str) -> Sequence | None:
        for seq in (*self.running, *self.waiting):
            if seq.request_id == request_id:
                return seq
        return None

    def finish(self, seq: Sequence) -> None:
        if seq.status is SequenceStatus.RUNNING:
            self.running.remove(seq)
            self.kv.release(seq)
        elif seq.status is SequenceStatus.WAITING:
            self.waiting.remove(seq)
        seq.status = SequenceStatus.FINISHED

    # -- the plan of one step ----------------------------------------------------------------

    def stepping(self) -> list[Sequence]:
        """The running sequences that get this step: the first `batch_limit` of them (the highest
        priority first under the priority policy). The others are paused: they keep their cells and
        resume in turn, so lowering the limit (sequential serving, the adaptive batch) applies at once."""
        running = self.running
        if self.policy is Policy.PRIORITY:
            running = sorted(running, key=lambda s: -s.request.priority)
        return running[: self.batch_limit]

    def schedule(self, _depth: int = 0) -> StepPlan:
        """Which sequences this step evaluates, and how many tokens of each."""
        if not _depth:
            self._step += 1
            self._end_a_turn()
        self._whole_picture_planned = False  # a picture decoded whole is a decode of its own: one a step
        plan: dict[Sequence, int] = {}
        stepping = self.stepping()
        decoders = self._room_for_decodes(stepping)
        decoding = len(decoders)
        decode_slots = [s.slot_id for s in decoders]
        order = service_order(self.policy, self.running, self._admissible())
        budget = self.token_budget(decoding, decode_slots, lambda: self._chunk_start(order, stepping))
        planned = 0  # tokens, hence cells, this step already takes
        read: list[tuple[int, int]] = []  # (start, tokens) of the prompt chunks planned
        admitting = True
        blocked: Sequence | None = None  # the first waiting request that did not go in
        for i, seq in enumerate(order):
            if planned >= budget:
                break
            reserved = planned + decoding  # the cells of decodes still to come stay theirs
            if seq.status is SequenceStatus.RUNNING and seq not in stepping:
                continue  # paused beyond the batch limit
            generating = seq.status is SequenceStatus.RUNNING and seq.is_decoding
            allowed = budget - planned
            if read and not generating:  # another prompt chunk: does the step have room for its cost?
                allowed = min(allowed, self._room_for_another_prompt(decode_slots, read, self._start(seq)))
                if allowed < 1:
                    admitting = admitting and seq.status is SequenceStatus.RUNNING  # the queue keeps its order
                    continue
            if generating:
                n = 1
                decoding -= 1
            elif seq.status is SequenceStatus.RUNNING:
                n = self._chunk(seq, allowed, reserved)
            elif admitting and self._cached_go_first(seq, order[i + 1 :], reserved):
                blocked, admitting = seq, False
                continue
            elif admitting:
                n, admitting = self._admit(seq, allowed, reserved)
                blocked = None if admitting else seq
            elif self._may_pass(seq, blocked, reserved):
                n, _ = self._admit(seq, allowed, reserved)
                if seq.status is SequenceStatus.RUNNING:
                    blocked.bypassed += 1
                    self.bypasses += 1
            else:
                continue
            if n:
                plan[seq] = n
                planned += n
                if not generating:
                    read.append((seq.num_computed, n))
        if not plan and self.running and _depth < len(self.kv.slots):
            # every running sequence is stuck reading a prompt into a full pool: make room
            self._preempt(preemption_victim(self.policy, self.running))
            return self.schedule(_depth + 1)
        return StepPlan(plan, budget)

    def token_budget(
        self, decoding: int, decode_slots: list[int] | None = None, chunk_start: Callable[[], int] = lambda: 0
    ) -> int:
        """The tokens a step may take when `decoding` replies (in `decode_slots`) wait for their next
        token: with none, prompt chunks as large as read fastest (nobody's latency is at stake); with
        some, the batch size, or what the adaptive batch allows beside them in this layout, its
        prompt chunk read after its chat's first `chunk_start()` tokens."""
        if not decoding:
            return self.n_ubatch
        if self.limits is None:
            return self.n_batch
        layout = self.kv.layout
        ubatches = self._decode_passes(decode_slots) if decode_slots else 1
        start = chunk_start()
        budget = self.limits.token_budget(decoding, ubatches, layout.prompt_passes, lambda n: layout.chunk_attention(start, n))
        return max(decoding, budget)

    def _decode_passes(self, decode_slots: list[int]) -> int:
        """The ubatches llama.cpp cuts the decodes of these slots into, a token each."""
        return self.kv.layout.ubatches([(slot, 1) for slot in sorted(decode_slots)])

    def _room_for_another_prompt(self, decode_slots: list[int], read: list[tuple[int, int]], start: int) -> int:
        """Tokens one more prompt chunk, read after its chat's first `start`, may take in a step whose
        prompt chunks `read` (start, tokens) are planned: the budget left room for one chunk's passes
        and attention, and in streams each chunk is a pass of its own. With no adaptive batch, or
        no reply waiting, the budget holds as it is; before the model can price a pass, none."""
        layout = self.kv.layout
        if self.limits is None or not decode_slots or not layout.prompt_passes or self.limits.spending:
            return self.n_batch
        if not self.limits.model.prices_passes:
            return 0  # the first steps' cost model lumps passes into a fixed part: it would not see this one
        taken = sum(n for _, n in read)

        def attended(n: int) -> int:
            later = layout.chunk_attention(start, max(0, n - taken))
            return later + sum(layout.chunk_attention(s, k) for s, k in read)

        decoding = len(decode_slots)
        passes = layout.prompt_passes * (len(read) + 1)
        fit = self.limits.within_target(decoding, self._decode_passes(decode_slots), passes, attended)
        return 0 if fit is None else fit - decoding - taken

    def _chunk_start(self, order: list[Sequence], stepping: list[Sequence]) -> int:
        """Where the step's prompt chunk will be read: after the cells of the first sequence in service
        order that reads its prompt (a waiting one's cached prefix)."""
        for seq in order:
            if seq.status is SequenceStatus.WAITING or (seq in stepping and not seq.is_decoding):
                return self._start(seq)
        return 0

    def _start(self, seq: Sequence) -> int:
        """Where a sequence reading its prompt reads its next chunk: after its computed cells, or a
        waiting one's cached prefix."""
        return self.kv.cached_prefix(seq.tokens) if seq.status is SequenceStatus.WAITING else seq.num_computed

    def _room_for_decodes(self, stepping: list[Sequence]) -> list[Sequence]:
        """Make sure every generating sequence of this step has a cell for its next token; return them."""
        decoding = [s for s in stepping if s.is_decoding]
        while decoding and not self.kv.make_room(len(decoding)):
            victim = preemption_victim(self.policy, self.running)
            self._preempt(victim)
            if victim in decoding:
                decoding.remove(victim)
        return decoding

    def _admit(self, seq: Sequence, budget: int, reserved: int) -> tuple[int, bool]:
        """Admit a waiting sequence and plan its first chunk: (tokens planned, whether to go on admitting)."""
        if len(self.running) >= self.batch_limit and not self._make_way_for(seq):
            return 0, False
        if self.running and not self.kv.could_fit(seq.tokens, reserved + self._headroom()):
            # joining now would soon be preempted, or preempt another: wait until running requests free cells
            return 0, False
        reading = [s for s in self.running if s.num_pending > 1]
        outcome = self.kv.acquire(seq, reading, reserved)
        if outcome == Acquire.NO_SLOT:
            return 0, False
        if outcome == Acquire.DEFER:
            return 0, True
        self.waiting.remove(seq)
        seq.turn_start = seq.num_generated
        if math.isnan(seq.stats.t_admit):
            seq.stats.t_admit = time.monotonic()
        seq.status = SequenceStatus.RUNNING
        self.running.append(seq)
        return self._chunk(seq, budget, reserved), True

    # -- cache-aware admission under pressure ----------------------------------------------------
    # When admitting the next waiting request would evict idle conversations' cells (or cannot
    # happen at all yet), requests behind it whose prompts are mostly cached and fit in the free
    # cells go first: they cost little and evict nobody. Each waiting request is passed so at most
    # MAX_BYPASSES times, after which everyone waits for it: no request starves.

    def _cached_go_first(self, seq: Sequence, later: list[Sequence], reserved: int) -> bool:
        if seq.bypassed >= MAX_BYPASSES or self.kv.is_cheap(seq.tokens, reserved, cached_share=0.0):
            return False
        return any(self._may_pass(other, seq, reserved) for other in later if other.status is SequenceStatus.WAITING)

    def _may_pass(self, seq: Sequence, blocked: Sequence | None, reserved: int) -> bool:
        return (
            blocked is not None
            and seq.status is SequenceStatus.WAITING
            and blocked.bypassed < MAX_BYPASSES
            and seq.request.priority >= blocked.request.priority
            and self.kv.is_cheap(seq.tokens, reserved)
        )

    # -- time slices under pressure ---------------------------------------------------------------
    # When cells (or slots) run short, the requests that got in first would keep them for their
    # whole replies while the others wait, however long: at 4,096 cells, 16 chats of 10 turns
    # waited 10 s for a first token in their last turns. So a request kept waiting SLICE_STEPS
    # steps takes the turn of the reply that has had the longest one (SLICE_TOKENS at least): that
    # reply's cells go to RAM and it waits at the back, to be restored in milliseconds. Only with
    # the RAM tier on: without it, the reply would compute its cells again.

    def _end_a_turn(self) -> None:
        if not self.waiting or self.kv.host is None or self.max_running == 1 or self.static:
            return  # sequential serving runs one at a time; a static batch runs to its end
        head = min(self.waiting, key=lambda s: s.queued_step)
        if self._step - head.queued_step < SLICE_STEPS:
            return
        if any(s.is_idle for s in self.kv.slots) and self.kv.could_fit(head.tokens, self._headroom()):
            return  # no one holds what it needs: it gets in as the batch limit allows
        longest = [
            s
            for s in self.stepping()
            if s.is_decoding
            and s.num_generated - s.turn_start >= SLICE_TOKENS
            and s.params.max_tokens - s.num_generated > SLICE_TOKENS
            and s.request.priority <= head.request.priority
        ]
        if longest:
            self._preempt(max(longest, key=lambda s: s.num_generated - s.turn_start), back=True)

    def _headroom(self) -> int:
        """Cells the running replies will take soon: what each has left to write, up to HEADROOM
        tokens. Admitting into them would preempt a reply a few steps later."""
        return sum(min(s.params.max_tokens - s.num_generated, HEADROOM) for s in self.running)

    def _make_way_for(self, seq: Sequence) -> bool:
        """Under the priority policy, a waiting request takes the slot of a lower-priority one."""
        if self.policy is not Policy.PRIORITY or not self.running:
            return False
        victim = preemption_victim(self.policy, self.running)
        if victim.request.priority >= seq.request.priority:
            return False
        self._preempt(victim)
        return True

    def _chunk(self, seq: Sequence, budget: int, reserved: int) -> int:
        """As much of the pending prompt as the budget and the cells not `reserved` by this step allow;
        its pictures cut it where they begin (sequence.py's `chunk`), and a picture decoded whole
        takes the step's one decode of its own, past the budget if it must."""
        want = min(seq.num_pending, budget)
        if seq.images:
            if seq.at_whole_picture and self._whole_picture_planned:
                return 0
            want = seq.chunk(want, stretch=True)
        if not self.kv.make_room(reserved + want):
            want = min(want, self.kv.free_cells - reserved)
            want = seq.chunk(want) if seq.images and want > 0 else want
        if want > 0 and seq.at_whole_picture:
            self._whole_picture_planned = True
        return max(want, 0)

    def relieve_pressure(self) -> bool:
        """Free cells after llama.cpp found no room: an idle slot first, else the newest request."""
        idle = [s for s in self.kv.slots if s.is_idle and s.tokens]
        if idle:
            self.kv.evict(min(idle, key=lambda s: s.last_used))
            return True
        if len(self.running) > 1:
            self._preempt(preemption_victim(self.policy, self.running))
            return True
        return False

    def _preempt(self, seq: Sequence, back: bool = False) -> None:
        """The sequence gives its cells back and waits: at the front when cells ran out (a last
        resort), at the back when its turn ended."""
        self.running.remove(seq)
        self.kv.preempt(seq)
        seq.status = SequenceStatus.WAITING
        seq.stats.preemptions += 1
        self.preemptions += 1
        seq.queued_step = self._step
        if back:
            self.waiting.append(seq)
        else:
            self.waiting.appendleft(seq)
