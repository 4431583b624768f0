"""Continuous batching: which tokens of which sequences go into the next decode.

Each step takes the next token of every generating sequence first, then chunks of prompts still
being read, then admits waiting requests while slots, cells and the token budget allow. A long
prompt is read a chunk per step, so the streams already running keep producing tokens meanwhile.
"""

from __future__ import annotations

import math
import time
from collections import deque

from .kv_cache import Acquire, KVCacheManager
from .sequence import Sequence, SequenceStatus

Plan = list[tuple[Sequence, int]]  # (sequence, how many of its pending tokens to evaluate)


class Scheduler:
    def __init__(self, kv: KVCacheManager, n_batch: int, max_running: int):
        self.kv = kv
        self.n_batch = n_batch
        self.max_running = max_running
        self.waiting: deque[Sequence] = deque()
        self.running: list[Sequence] = []
        self.preemptions = 0

    def add(self, seq: Sequence) -> None:
        seq.status = SequenceStatus.WAITING
        self.waiting.append(seq)

    def has_work(self) -> bool:
        return bool(self.running or self.waiting)

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

    def schedule(self, _depth: int = 0) -> Plan:
        plan: Plan = []
        budget = self.n_batch
        budget -= self._schedule_decodes(plan)
        budget -= self._schedule_prompt_chunks(plan, budget)
        self._admit(plan, budget)
        if not plan and self.running and _depth < len(self.kv.slots):
            # every running sequence is stuck reading a prompt into a full pool: make room
            self._preempt(self.running[-1])
            return self.schedule(_depth + 1)
        return plan

    def _schedule_decodes(self, plan: Plan) -> int:
        decoding = [s for s in self.running if s.is_decoding]
        while decoding and not self.kv.make_room(len(decoding)):
            victim = self.running[-1]  # the latest admitted gives way
            self._preempt(victim)
            if victim in decoding:
                decoding.remove(victim)
        plan.extend((s, 1) for s in decoding)
        return len(decoding)

    def _schedule_prompt_chunks(self, plan: Plan, budget: int) -> int:
        used = 0
        for seq in self.running:
            if budget - used <= 0:
                break
            if not seq.is_decoding:
                n = self._chunk(seq, budget - used, self.n_batch - budget + used)
                if n:
                    plan.append((seq, n))
                    used += n
        return used

    def _admit(self, plan: Plan, budget: int) -> None:
        for seq in list(self.waiting):
            if budget <= 0 or len(self.running) >= self.max_running:
                return
            if self.running and not self.kv.could_fit(seq.tokens, self.n_batch - budget):
                # joining now would only be preempted again: wait until running requests free cells
                return
            reading = [s for s in self.running if s.num_pending > 1]
            outcome = self.kv.acquire(seq, reading)
            if outcome == Acquire.NO_SLOT:
                return
            if outcome == Acquire.DEFER:
                continue
            self.waiting.remove(seq)
            if math.isnan(seq.stats.t_admit):
                seq.stats.t_admit = time.monotonic()
            seq.status = SequenceStatus.RUNNING
            self.running.append(seq)
            n = self._chunk(seq, budget, self.n_batch - budget)
            if n:
                plan.append((seq, n))
                budget -= n

    def _chunk(self, seq: Sequence, budget: int, reserved: int) -> int:
        """As much of the pending prompt as the budget and the cells not `reserved` by this step allow."""
        want = min(seq.num_pending, budget)
        if not self.kv.make_room(reserved + want):
            want = min(want, self.kv.free_cells - reserved)
        return max(want, 0)

    def relieve_pressure(self) -> bool:
        """Free cells after llama.cpp found no room: an idle slot first, else the newest request."""
        idle = [s for s in self.kv.slots if s.is_idle and s.tokens]
        if idle:
            self.kv.evict(min(idle, key=lambda s: s.last_used))
            return True
        if len(self.running) > 1:
            self._preempt(self.running[-1])
            return True
        return False

    def _preempt(self, seq: Sequence) -> None:
        """Last resort when cells run out: the sequence gives its cells back and waits at the front."""
        self.running.remove(seq)
        self.kv.preempt(seq)
        seq.status = SequenceStatus.WAITING
        seq.stats.preemptions += 1
        self.preemptions += 1
        self.waiting.appendleft(seq)
