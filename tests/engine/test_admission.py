"""Cache-aware admission under pressure: cached requests go first, and no request starves."""

from __future__ import annotations

import asyncio

import pytest
from helpers import Started, collect, run
from hypothesis import given, settings
from hypothesis import strategies as st

from app.engine.kv.host_cache import HostCache
from app.engine.kv.manager import KVCacheManager
from app.engine.sampling.params import GREEDY
from app.engine.sched.adaptive import AdaptiveBatch
from app.engine.sched.scheduler import MAX_BYPASSES, SLICE_STEPS, SLICE_TOKENS, Scheduler
from app.engine.sequence import Request, Sequence, SequenceStatus
from app.engine.stats import RequestStats, StepStats


class CellBook:
    """llama.cpp's memory as the KV manager sees it, without llama.cpp: admission needs no model."""

    def seq_rm(self, seq_id, p0, p1=-1):
        return True

    def seq_cp(self, src, dst, p0, p1):
        pass

    def seq_state_size(self, seq_id):
        return 1

    def seq_save(self, seq_id, size):
        return object()

    def seq_restore(self, seq_id, state, size):
        return True


def turn(conversation: int, n_turn: int, prompt_len: int, max_tokens: int, arrival: int) -> Sequence:
    """A conversation's turn: its tokens start with the ones its earlier turns had (as a chat does)."""
    name = f"c{conversation}t{n_turn}"
    request = Request(name, GREEDY.with_(max_tokens=max_tokens), prompt=name, conversation_id=f"c{conversation}")
    tokens = [100_000 * (conversation + 1) + i for i in range(prompt_len)]
    return Sequence(request, tokens, RequestStats(name), arrival)


def trained_limits(target_s: float, capacity: int) -> AdaptiveBatch:
    """An adaptive batch whose model has seen 24 steps of a world where a pass costs 12 ms and a
    token 7 ms (as the scheduling tests price them)."""
    limits = AdaptiveBatch(target_s, capacity=capacity, n_batch=128)
    for i in range(24):
        ubatches, decodes, prompt = 1 + i % 3, i % 5, 8 * (i % 4)
        seconds = 0.004 + 0.012 * ubatches + 0.007 * (decodes + prompt)
        limits.observe(
            StepStats(0.0, decodes + prompt, decodes + 1, decodes, prompt, seconds, seconds, capacity, n_ubatches=ubatches)
        )
    assert limits.model.prices_passes
    return limits


def step(scheduler: Scheduler) -> list[Sequence]:
    """One decode step as the engine runs it, every sampled token a new one; returns who finished."""
    plan = scheduler.schedule()
    for seq, n in plan.n_tokens.items():
        scheduler.kv.commit(seq, n)
    done = []
    for seq in plan.seqs:
        if seq.num_pending == 0:
            seq.tokens.append(7 + len(seq.tokens))
            if seq.num_generated >= seq.params.max_tokens:
                scheduler.finish(seq)
                done.append(seq)
    return done


@pytest.mark.unit
def test_a_cached_turn_goes_before_a_new_chat_that_would_evict_it():
    kv = KVCacheManager(CellBook(), n_slots=4, n_cells=1000)
    scheduler = Scheduler(kv, n_batch=512, max_running=4)
    for c in range(3):  # three idle conversations hold 900 of the 1,000 cells
        first = turn(c, 0, 299, max_tokens=1, arrival=c)
        scheduler.add(first)
        while scheduler.has_work():
            step(scheduler)
    new_chat = turn(9, 0, 400, max_tokens=4, arrival=10)  # needs 400 cells: someone's cache must go
    returning = turn(1, 1, 330, max_tokens=4, arrival=11)  # conversation 1's next turn: its prompt cached
    scheduler.add(new_chat)
    scheduler.add(returning)
    step(scheduler)
    assert returning.status is SequenceStatus.RUNNING and returning.stats.cached_tokens == 299
    assert new_chat.status is SequenceStatus.WAITING and new_chat.bypassed == 1
    while scheduler.has_work():
        step(scheduler)
    assert new_chat.status is SequenceStatus.FINISHED and kv.evictions >= 1


@pytest.mark.unit
def test_a_request_passed_by_cached_ones_too_often_is_passed_no_more():
    kv = KVCacheManager(CellBook(), n_slots=4, n_cells=1000)
    scheduler = Scheduler(kv, n_batch=512, max_running=4)
    first = turn(0, 0, 299, max_tokens=1, arrival=0)
    scheduler.add(first)
    while scheduler.has_work():
        step(scheduler)
    new_chat = turn(9, 0, 800, max_tokens=2, arrival=1)  # fits only once conversation 0 gives way
    new_chat.bypassed = MAX_BYPASSES
    returning = turn(0, 1, 320, max_tokens=2, arrival=2)
    scheduler.add(new_chat)
    scheduler.add(returning)
    step(scheduler)
    assert new_chat.status is SequenceStatus.RUNNING and returning.status is SequenceStatus.WAITING


@pytest.mark.unit
@settings(max_examples=60, deadline=None)
@given(
    n_cells=st.integers(300, 2000),
    capacity=st.integers(1, 6),
    chats=st.lists(
        st.lists(st.tuples(st.integers(10, 250), st.integers(1, 40)), min_size=1, max_size=4),  # (new tokens, reply)
        min_size=1,
        max_size=8,
    ),
    streams=st.booleans(),
    target_ms=st.sampled_from([None, 60, 100, 300]),
)
def test_under_any_pressure_every_turn_finishes_and_none_is_passed_beyond_the_bound(n_cells, capacity, chats, streams, target_ms):
    """Conversations send their turns (each longer than the last by its new text and the reply)
    into a pool of any size, one pool or a stream per sequence, with or without an adaptive batch
    (one that has learnt what a pass and a token cost); a turn too long for the pool (or its
    stream) is left out, as the engine refuses it. No stream ever holds more than its share."""
    kv = KVCacheManager(CellBook(), n_slots=capacity, n_cells=n_cells, host=HostCache(1 << 30), streams=streams)
    per_sequence = n_cells // capacity if streams else n_cells
    scheduler = Scheduler(kv, n_batch=128, max_running=capacity)
    if target_ms:
        scheduler.limits = trained_limits(target_ms / 1000, capacity)
    length = [0] * len(chats)
    next_turn = [0] * len(chats)
    seen: list[Sequence] = []

    def send(c: int) -> None:
        while next_turn[c] < len(chats[c]):
            new, reply = chats[c][next_turn[c]]
            next_turn[c] += 1
            length[c] += new
            if length[c] + reply <= per_sequence:
                seq = turn(c, next_turn[c], length[c], reply, arrival=len(seen))
                length[c] += reply
                scheduler.add(seq)
                seen.append(seq)
                return

    for c in range(len(chats)):
        send(c)
    for _ in range(20_000):
        if not scheduler.has_work():
            break
        for seq in step(scheduler):
            send(int(seq.request.conversation_id[1:]))
        assert kv.cells_used <= n_cells and all(len(slot.cells) <= per_sequence for slot in kv.slots)
    assert not scheduler.has_work(), f"stuck: running {scheduler.running}, waiting {list(scheduler.waiting)}"
    assert all(s.status is SequenceStatus.FINISHED for s in seen)
    assert all(s.bypassed <= MAX_BYPASSES for s in seen)


@pytest.mark.unit
def test_a_request_kept_waiting_takes_the_turn_of_the_reply_that_ran_longest():
    """Two long replies hold both slots; a third request gets in after SLICE_STEPS steps, in the
    place of the one that had run longer, whose cells go to RAM; all three finish whole."""
    kv = KVCacheManager(CellBook(), n_slots=2, n_cells=1000, host=HostCache(1 << 30))
    scheduler = Scheduler(kv, n_batch=512, max_running=2)
    first, second = turn(0, 0, 100, max_tokens=200, arrival=0), turn(1, 0, 100, max_tokens=200, arrival=1)
    scheduler.add(first)
    step(scheduler)
    scheduler.add(second)
    step(scheduler)
    late = turn(2, 0, 50, max_tokens=4, arrival=2)
    scheduler.add(late)
    waited = 0
    while late.status is SequenceStatus.WAITING:
        step(scheduler)
        waited += 1
    assert waited == SLICE_STEPS
    assert first.status is SequenceStatus.WAITING and first.stats.preemptions == 1  # it had run one step longer
    assert second.status is SequenceStatus.RUNNING and kv.host.saves == 1
    while scheduler.has_work():
        step(scheduler)
    assert all(s.status is SequenceStatus.FINISHED for s in (first, second, late))
    assert first.num_generated == second.num_generated == 200 and kv.host.restores >= 1
    assert second.stats.preemptions <= 200 // SLICE_TOKENS


@pytest.mark.unit
def test_sequential_serving_and_a_pool_without_a_ram_tier_keep_each_reply_whole():
    for host, max_running in ((HostCache(1 << 30), 1), (None, 2)):
        kv = KVCacheManager(CellBook(), n_slots=2, n_cells=1000, host=host)
        scheduler = Scheduler(kv, n_batch=512, max_running=max_running)
        replies = [turn(c, 0, 100, max_tokens=100, arrival=c) for c in range(3)]
        for seq in replies:
            scheduler.add(seq)
        while scheduler.has_work():
            step(scheduler)
        assert all(s.num_generated == 100 and s.stats.preemptions == 0 for s in replies)


@pytest.mark.tiny
def test_the_real_engine_under_pressure_finishes_every_turn(tiny_config):
    """Four chats of three turns in a pool that holds about two of them: cached turns are let
    through first, and every turn of every chat still ends with its reply (on the tiny model)."""
    tight = tiny_config.with_(n_ctx=512, capacity=3)
    story = "In the old harbour town, the lighthouse keeper wrote down every ship that passed. " * 4

    async def chat(client, c: int) -> list[str]:
        messages, reasons = [], []
        for t in range(3):
            messages.append({"role": "user", "content": f"Chat {c}, question {t}. {story}"})
            _, final = await collect(client.generate(list(messages), GREEDY.with_(max_tokens=16), conversation_id=f"c{c}"))
            messages.append({"role": "assistant", "content": final.text})
            reasons.append(final.reason.value)
        return reasons

    async def main():
        async with Started(tight) as client:
            reasons = await asyncio.gather(*(chat(client, c) for c in range(4)))
            bypasses = await client.call(lambda e: e.scheduler.bypasses)
            return reasons, bypasses, client.snapshot

    reasons, bypasses, snapshot = run(main())
    assert all(r in ("stop", "length") for chat_reasons in reasons for r in chat_reasons)
    assert snapshot.evictions >= 1  # the pool was under pressure
    assert bypasses <= 4 * 3 * MAX_BYPASSES


@pytest.mark.unit
def test_a_request_is_not_admitted_into_the_cells_running_replies_are_about_to_write():
    kv = KVCacheManager(CellBook(), n_slots=4, n_cells=1000)
    scheduler = Scheduler(kv, n_batch=512, max_running=4)
    writing = turn(0, 0, 600, max_tokens=100, arrival=0)  # will write 100 more cells
    scheduler.add(writing)
    while writing.num_generated == 0:
        step(scheduler)
    late = turn(1, 0, 360, max_tokens=4, arrival=1)  # fits the 399 free cells now, not beside 64 of headroom
    scheduler.add(late)
    step(scheduler)
    assert late.status is SequenceStatus.WAITING and kv.free_cells >= 360
    while late.status is SequenceStatus.WAITING:
        step(scheduler)
    assert writing.stats.preemptions == 0 and writing.status is SequenceStatus.FINISHED
