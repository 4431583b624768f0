"""The KV cache's RAM tier: cells a full pool evicts come back from host memory, not from the model.

The tests of mechanics (preemption, saves and restores, what /metrics counts) run on the tiny model;
those comparing a restored reply with a recomputed one, or sized in SmolLM2-135M's bytes a cell,
on the bundled one."""

from __future__ import annotations

import asyncio

import aiohttp
import pytest
from helpers import Started, collect, divergence_is_a_near_tie, run, token_ids, user
from hypothesis import given, settings
from hypothesis import strategies as st
from serving import Serving

from app.engine.kv.host_cache import HostBudget, HostCache, SavedCells
from app.engine.sampling.params import GREEDY
from app.engine.sequence import Request

STORY = "Once upon a time, in a village by the sea, there lived an old fisherman named Tom. " * 28  # 560 tokens
OTHER = "Far away, in a city of glass towers, a young baker called Sam made bread every night. " * 28


def chat(first_reply: str | None = None, story: str = STORY) -> list[dict[str, str]]:
    messages = [{"role": "user", "content": story + "What was his name?"}]
    if first_reply is not None:
        messages += [{"role": "assistant", "content": first_reply}, {"role": "user", "content": "Where did he live?"}]
    return messages


def replies_at_once(config, prompts: list[str], max_tokens: int):
    """Every prompt's greedy reply of exactly `max_tokens`, all sent at once: (finals, snapshot, bytes a cell)."""
    params = GREEDY.with_(max_tokens=max_tokens, ignore_eos=True)

    async def main():
        async with Started(config) as client:
            finals = await asyncio.gather(
                *(collect(client.generate(user(p), params, conversation_id=f"c{i}")) for i, p in enumerate(prompts))
            )
            return [f for _, f in finals], client.snapshot, client.model_info.kv_bytes_per_cell

    return run(main())


@pytest.mark.model
def test_an_evicted_conversation_is_restored_from_ram_and_answers_as_if_recomputed(config, model_path):
    small = config.with_(n_ctx=512, capacity=2)  # room for one such chat at a time
    params = GREEDY.with_(max_tokens=16)
    story, other_story = STORY[: len(STORY) // 2], OTHER[: len(OTHER) // 2]  # 14 sentences, about 300 tokens

    async def main():
        async with Started(small) as client:
            _, first = await collect(client.generate(chat(story=story), params, conversation_id="a"))
            other = [{"role": "user", "content": other_story + "Who?"}]
            await collect(client.generate(other, params, conversation_id="b"))  # pushes "a" out
            mid = client.snapshot
            later = chat(first.text, story)
            second_events, second = await collect(client.generate(later, params, conversation_id="a"))
            prompt = await client.call(lambda e: e.intake.prompts.build(Request("x", params, tuple(later)))[0])
            return first, mid, second_events, second, prompt, client.snapshot

    first, mid, second_events, second, prompt, after = run(main())
    assert mid.evictions >= 1 and mid.saves >= 1 and mid.saved_bytes > 0
    history = first.stats.prompt_tokens + first.stats.gen_tokens - 1
    assert second.stats.restored_tokens == second.stats.cached_tokens == history
    assert after.restores == 1 and after.restored_tokens == history

    later = chat(first.text, story)

    async def recomputed():  # the same turn on an engine that never saw the chat
        async with Started(small.with_(kv_reuse=False)) as client:
            return await collect(client.generate(later, params))

    fresh_events, fresh = run(recomputed())
    assert divergence_is_a_near_tie(model_path, prompt, token_ids(fresh_events), token_ids(second_events)) is None


@pytest.mark.tiny
def test_a_preempted_reply_resumes_from_ram(tiny_config):
    """Four long replies in a pool too small for them all: some are preempted mid-reply; they come
    back with their cells restored (waiting for room for the cells they bring back), and every one
    finishes."""
    tales = [f"Tale {i}. " + STORY[:840] for i in range(4)]
    finals, snapshot, _ = replies_at_once(tiny_config.with_(n_ctx=1024, capacity=4), tales, max_tokens=160)
    assert all(f.stats.gen_tokens == 160 for f in finals)
    assert snapshot.preemptions >= 1 and snapshot.restores >= 1
    preempted = [f for f in finals if f.stats.preemptions]
    assert preempted and all(f.stats.restored_tokens > 0 for f in preempted)


@pytest.mark.tiny
def test_preempted_replies_sharing_their_prompt_save_and_restore_only_their_own_cells(tiny_config):
    """Four replies to one story share its cells; those preempted for room save only the cells
    past it and share it again when they come back."""
    story = STORY[: len(STORY) * 5 // 7]  # 400 tokens: with four replies of 120, past 768 cells
    asks = [story + f"Question {i}: who lived there?" for i in range(4)]
    finals, snapshot, cell_bytes = replies_at_once(tiny_config.with_(n_ctx=768, capacity=4), asks, max_tokens=120)
    assert all(f.stats.gen_tokens == 120 for f in finals)
    assert snapshot.preemptions >= 1 and snapshot.restores >= 1
    restored = [f for f in finals if f.stats.restored_tokens]
    assert restored and all(f.stats.cached_tokens >= f.stats.restored_tokens > f.stats.prompt_tokens for f in restored)
    story_cells = 400 * cell_bytes  # the story's cells, as llama.cpp sizes them: what a whole copy would hold
    assert snapshot.saved_entries == 0 or snapshot.saved_bytes < snapshot.saved_entries * story_cells


@pytest.mark.tiny
def test_metrics_show_the_ram_tier_and_cache_ram_0_turns_it_off(tiny_config):
    small = tiny_config.with_(n_ctx=1024, capacity=2)

    async def turns(cache_ram_mib: int) -> dict[str, float]:
        async with (
            Serving(small.with_(cache_ram_mib=cache_ram_mib)) as (client, _server, url),
            aiohttp.ClientSession() as http,
        ):
            params = GREEDY.with_(max_tokens=8)
            _, first = await collect(client.generate(chat(), params, conversation_id="a"))
            await collect(client.generate(chat(story=OTHER), params, conversation_id="b"))  # pushes "a" out
            await collect(client.generate(chat(first.text), params, conversation_id="a"))
            async with http.get(f"{url}/metrics") as r:
                text = await r.text()
        pairs = (line.rsplit(" ", 1) for line in text.splitlines() if line.startswith("batch_playground_kv_ram"))
        return {name.removeprefix("batch_playground_kv_ram_"): float(value) for name, value in pairs}

    on, off = run(turns(64)), run(turns(0))
    assert on["saves_total"] >= 1 and on["restores_total"] == 1 and on["restored_tokens_total"] > 500
    assert on["entries"] >= 1 and 0 < on["bytes"] <= 64 << 20  # "b", pushed out in turn
    assert off == dict.fromkeys(on, 0.0)


@pytest.mark.model
def test_a_chat_larger_than_the_ram_budget_is_never_copied_out_of_the_pool(config):
    """A 1 MiB budget holds 45 of SmolLM2-135M's cells: the evicted chat's state is measured, not copied."""
    small = config.with_(n_ctx=512, capacity=2, kv_unified=True, cache_ram_mib=1)
    story, other_story = STORY[: len(STORY) // 2], OTHER[: len(OTHER) // 2]  # about 300 tokens each
    params = GREEDY.with_(max_tokens=8)

    async def main():
        async with Started(small) as client:
            sizes, copies = [], []

            def spy(engine):
                backend = engine.backend
                size_of, save = backend.seq_state_size, backend.seq_save
                backend.seq_state_size = lambda seq_id: sizes.append(size_of(seq_id)) or sizes[-1]
                backend.seq_save = lambda seq_id, size: copies.append(size) or save(seq_id, size)

            await client.call(spy)
            await collect(client.generate(chat(story=story), params, conversation_id="a"))
            await collect(client.generate(chat(story=other_story), params, conversation_id="b"))  # pushes "a" out
            return sizes, copies, client.snapshot

    sizes, copies, snapshot = run(main())
    assert snapshot.evictions >= 1 and sizes and min(sizes) > 1 << 20
    assert copies == [] and snapshot.saves == snapshot.saved_entries == snapshot.saved_bytes == 0


@pytest.mark.model
def test_two_models_keep_their_evicted_chats_within_one_budget_and_an_unload_gives_its_bytes_back(config, q8_model_path):
    """Each model's pool holds one chat; each evicts chats of 7 MB to a 16 MiB budget they share:
    together they never hold more than two, the idle model gives way to the other, and each
    model's figures tell its own."""
    small = config.with_(n_ctx=512, capacity=2, cache_ram_mib=16)
    params = GREEDY.with_(max_tokens=8)
    lee = "High in the hills, a shepherd called Lee counted his sheep every single morning. "
    stories = [STORY[: len(STORY) // 2], OTHER[: len(OTHER) // 2], lee * 14]  # about 300 tokens each

    async def main():
        async with Started(small) as client:
            await client.load_model(small.with_(model_path=q8_model_path), "q8")
            held = []
            for model in (None, "q8"):
                for story in stories:
                    await collect(client.generate(chat(story=story), params, conversation_id=story[-40:], model=model))
                    exact = [await client.call(lambda e: e.kv.host.bytes_used, m) for m in (None, "q8")]
                    held.append((exact, [client.snapshot_of(m).saved_bytes for m in (None, "q8")]))
            budget = await client.call(lambda e: e.kv.host.budget)
            saves = [client.snapshot_of(m).saves for m in (None, "q8")]
            await client.unload_model("q8")
            kept = await client.call(lambda e: e.kv.host.bytes_used)
            return held, saves, kept, budget.bytes_used, len(budget.caches)

    held, saves, kept, after, n_caches = run(main())
    assert saves == [2, 2]
    for exact, shown in held:
        assert exact == shown and sum(exact) <= 16 << 20
    (q4_alone, _), _, _, (both, _) = held[2:]
    assert q4_alone[0] > 12 << 20 and 0 < both[0] < q4_alone[0] and both[1] > 0  # the first model gave way
    assert n_caches == 1 and after == kept > 0


class FakeMemory:
    """A sequence state of `size` bytes, without llama.cpp; counts the copies it makes."""

    def __init__(self, size: int = 100):
        self.size = size
        self.copies = 0
        self.restored: list[int] = []

    def seq_state_size(self, seq_id):
        return self.size

    def seq_save(self, seq_id, size):
        assert size == self.size
        self.copies += 1
        return object()

    def seq_restore(self, seq_id, state, size):
        self.restored.append(seq_id)
        return True


def history(owner: str, n: int = 40) -> list[int]:
    """A history of its own for each owner: none is the start of another."""
    return [ord(owner[0])] + list(range(n - 1))


@pytest.mark.unit
def test_the_ram_tier_keeps_within_its_budget_dropping_the_least_recent():
    host = HostCache(250)
    memory = FakeMemory()
    for owner in "abc":
        host.save(memory, 0, owner, history(owner))
    assert len(host) == 2 and host.bytes_used == 200 and host.dropped == 1 and host.get("a") is None
    host.save(memory, 0, "b", history("b", 50))  # saved again: the newest now
    host.save(memory, 0, "d", history("d"))
    assert host.get("c") is None and host.get("b").tokens == history("b", 50)
    assert host.best(history("b")[:3] + [99]) == ("b", 3)
    assert not host.worth_saving(10) and host.worth_saving(40)
    assert host.restore(memory, 3, SavedCells([1], object(), 100)) and memory.restored == [3]


@pytest.mark.unit
def test_a_later_state_of_a_history_replaces_its_earlier_one_and_two_histories_opening_alike_are_both_kept():
    """Two chats may open alike (the server names them alike) and go on differently: each is kept;
    a history saved again, longer, holds all its earlier state held."""
    host = HostCache(1000)
    memory = FakeMemory()
    opening = list(range(40))
    host.save(memory, 0, "first", opening + [1] * 10)
    host.save(memory, 0, "twin", opening + [2] * 10)
    assert len(host) == 2
    host.save(memory, 0, "first again", opening + [1] * 20)
    assert len(host) == 2 and host.get("first") is None and host.get("twin") is not None
    assert host.best(opening + [2] * 12) == ("twin", 50) and host.best(opening + [1] * 30) == ("first again", 60)


@pytest.mark.unit
def test_a_state_larger_than_the_budget_is_never_copied_and_pushes_nothing_out():
    host = HostCache(250)
    host.save(FakeMemory(100), 0, "a", history("a"))
    too_big = FakeMemory(251)
    host.save(too_big, 1, "b", history("b"))
    assert too_big.copies == 0 and host.get("b") is None
    assert host.get("a") is not None and host.bytes_used == 100 and host.dropped == 0


@pytest.mark.unit
def test_models_on_one_budget_hold_no_more_than_it_together_and_the_largest_gives_way():
    budget = HostBudget()
    told = []
    a = HostCache(300, budget, lambda: told.append("a"))
    b = HostCache(300, budget, lambda: told.append("b"))
    memory = FakeMemory(100)
    for owner in "xyz":
        a.save(memory, 0, owner, history(owner))  # a model alone may fill the budget
    assert a.bytes_used == 300 and told == []
    b.save(memory, 0, "x", history("x"))  # a holds the most: its oldest goes, and it is told
    assert (a.bytes_used, b.bytes_used, a.get("x"), told) == (200, 100, None, ["a"])
    b.save(memory, 0, "y", history("y"))  # 200 each, b's new entry counted: the first gives way
    assert (a.bytes_used, b.bytes_used, told) == (100, 200, ["a", "a"])
    b.save(memory, 0, "z", history("z"))  # b would hold the most now: its own oldest goes
    assert (a.bytes_used, b.bytes_used, b.get("x"), told) == (100, 200, None, ["a", "a"])
    assert budget.bytes_used == 300


@pytest.mark.unit
@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 2), st.integers(1, 400), st.integers(0, 5)), max_size=40))
def test_any_saves_on_any_models_keep_within_the_largest_limit_and_each_models_own(saves):
    budget = HostBudget()
    limits = (300, 500, 200)
    caches = [HostCache(limit, budget) for limit in limits]
    for model, size, owner in saves:
        caches[model].save(FakeMemory(size), 0, str(owner), history(str(owner)))
        assert sum(c.bytes_used for c in caches) == budget.bytes_used <= max(limits)
        assert all(c.bytes_used == sum(c.get(o).size for o in map(str, range(6)) if c.get(o)) for c in caches)
        assert all(c.bytes_used <= limit for c, limit in zip(caches, limits))


@pytest.mark.unit
def test_a_model_dropped_gives_its_bytes_and_its_share_of_the_limit_back():
    budget = HostBudget()
    kept, dropped = HostCache(100, budget), HostCache(300, budget)
    dropped.save(FakeMemory(250), 0, "a", history("a"))
    assert budget.bytes_used == 250 and budget.limit_bytes == 300
    del dropped  # as an unloaded model's engine is freed
    assert budget.bytes_used == 0 and budget.limit_bytes == 100 and budget.caches == [kept]
