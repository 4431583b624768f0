"""The KV cache's RAM tier: cells a full pool evicts come back from host memory, not from the model."""

from __future__ import annotations

import asyncio

import aiohttp
from helpers import Started, collect, divergence_is_a_near_tie, run, token_ids, user
from serving import Serving

from app.engine.host_cache import HostCache, SavedCells
from app.engine.params import GREEDY
from app.engine.sequence import Request

STORY = "Once upon a time, in a village by the sea, there lived an old fisherman named Tom. " * 28  # 560 tokens
OTHER = "Far away, in a city of glass towers, a young baker called Sam made bread every night. " * 28


def chat(first_reply: str | None = None, story: str = STORY) -> list[dict[str, str]]:
    messages = [{"role": "user", "content": story + "What was his name?"}]
    if first_reply is not None:
        messages += [{"role": "assistant", "content": first_reply}, {"role": "user", "content": "Where did he live?"}]
    return messages


def replies_at_once(config, prompts: list[str], max_tokens: int):
    """Every prompt's greedy reply of exactly `max_tokens`, all sent at once: (finals, snapshot)."""
    params = GREEDY.with_(max_tokens=max_tokens, ignore_eos=True)

    async def main():
        async with Started(config) as client:
            finals = await asyncio.gather(
                *(collect(client.generate(user(p), params, conversation_id=f"c{i}")) for i, p in enumerate(prompts))
            )
            return [f for _, f in finals], client.snapshot

    return run(main())


def test_an_evicted_conversation_is_restored_from_ram_and_answers_as_if_recomputed(config, model_path):
    small = config.with_(n_ctx=1024, capacity=2)  # room for one such chat at a time
    params = GREEDY.with_(max_tokens=16)

    async def main():
        async with Started(small) as client:
            _, first = await collect(client.generate(chat(), params, conversation_id="a"))
            other = [{"role": "user", "content": OTHER + "Who?"}]
            await collect(client.generate(other, params, conversation_id="b"))  # pushes "a" out
            mid = client.snapshot
            second_events, second = await collect(client.generate(chat(first.text), params, conversation_id="a"))
            prompt = await client.call(lambda e: e.prompts.build(Request("x", params, tuple(chat(first.text))))[0])
            return first, mid, second_events, second, prompt, client.snapshot

    first, mid, second_events, second, prompt, after = run(main())
    assert mid.evictions >= 1 and mid.saves >= 1 and mid.saved_bytes > 0
    history = first.stats.prompt_tokens + first.stats.gen_tokens - 1
    assert second.stats.restored_tokens == second.stats.cached_tokens == history
    assert after.restores == 1 and after.restored_tokens == history

    async def recomputed():  # the same turn on an engine that never saw the chat
        async with Started(small.with_(kv_reuse=False)) as client:
            return await collect(client.generate(chat(first.text), params))

    fresh_events, fresh = run(recomputed())
    assert divergence_is_a_near_tie(model_path, prompt, token_ids(fresh_events), token_ids(second_events)) is None


def test_a_preempted_reply_resumes_from_ram(config):
    """Four long replies in a pool too small for them all: some are preempted mid-reply; they come
    back with their cells restored (waiting for room for the cells they bring back), and every one
    finishes."""
    tales = [f"Tale {i}. " + STORY[:840] for i in range(4)]
    finals, snapshot = replies_at_once(config.with_(n_ctx=1024, capacity=4), tales, max_tokens=160)
    assert all(f.stats.gen_tokens == 160 for f in finals)
    assert snapshot.preemptions >= 1 and snapshot.restores >= 1
    preempted = [f for f in finals if f.stats.preemptions]
    assert preempted and all(f.stats.restored_tokens > 0 for f in preempted)


def test_preempted_replies_sharing_their_prompt_save_and_restore_only_their_own_cells(config):
    """Four replies to one story share its cells; those preempted for room save only the cells
    past it and share it again when they come back."""
    story = STORY[: len(STORY) * 5 // 7]  # 400 tokens: with four replies of 120, past 768 cells
    asks = [story + f"Question {i}: who lived there?" for i in range(4)]
    finals, snapshot = replies_at_once(config.with_(n_ctx=768, capacity=4), asks, max_tokens=120)
    assert all(f.stats.gen_tokens == 120 for f in finals)
    assert snapshot.preemptions >= 1 and snapshot.restores >= 1
    restored = [f for f in finals if f.stats.restored_tokens]
    assert restored and all(f.stats.cached_tokens >= f.stats.restored_tokens > f.stats.prompt_tokens for f in restored)
    story_cells = 400 * 23_040  # SmolLM2-135M's f16 cells: what a whole copy would hold
    assert snapshot.saved_entries == 0 or snapshot.saved_bytes < snapshot.saved_entries * story_cells


def test_metrics_show_the_ram_tier_and_cache_ram_0_turns_it_off(config):
    small = config.with_(n_ctx=1024, capacity=2)

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


class FakeMemory:
    def __init__(self):
        self.restored: list[int] = []

    def seq_save(self, seq_id):
        return object(), 100

    def seq_restore(self, seq_id, state, size):
        self.restored.append(seq_id)
        return True


def test_the_ram_tier_keeps_within_its_budget_dropping_the_least_recent():
    host = HostCache(budget_bytes=250)
    memory = FakeMemory()
    for owner in "abc":
        host.save(memory, 0, owner, list(range(40)))
    assert len(host) == 2 and host.bytes_used == 200 and host.dropped == 1 and host.get("a") is None
    host.save(memory, 0, "b", list(range(50)))  # saved again: the newest now
    host.save(memory, 0, "d", list(range(40)))
    assert host.get("c") is None and host.get("b").tokens == list(range(50))
    assert host.best([0, 1, 2, 99]) == ("b", 3) or host.best([0, 1, 2, 99])[1] == 3
    assert not host.worth_saving(10) and host.worth_saving(40)
    assert host.restore(memory, 3, SavedCells([1], object(), 100)) and memory.restored == [3]
