"""KV reuse with a stream per sequence (llama.cpp's kv_unified off), with the real model: a later
turn and a shared system prompt are reused across streams, an evicted chat comes back from RAM,
and the engine picks the layout by the room a stream would give a chat. A reply compared with one
computed elsewhere is the bundled model's; the rest runs on the tiny one."""

from __future__ import annotations

import asyncio

import pytest
from helpers import Started, collect, divergence_is_a_near_tie, run, token_ids, user
from test_host_cache import OTHER, chat
from test_kv_cache import prompt_tokens, system_chat

from app.engine.kv.layout import LONG_CHAT, MIN_STREAM, choose_layout
from app.engine.kv.prefix import common_prefix_len
from app.engine.params import EngineConfig
from app.engine.sampling.params import GREEDY


@pytest.fixture
def streams(config) -> EngineConfig:
    return config.with_(n_ctx=4096, capacity=4, kv_unified=False)  # 4 streams of 1,024 cells


@pytest.fixture
def tiny_streams(tiny_config) -> EngineConfig:
    return tiny_config.with_(n_ctx=4096, capacity=4, kv_unified=False)


@pytest.mark.model
def test_a_system_prompt_is_copied_across_streams_and_a_later_turn_reuses_its_stream(streams, model_path):
    params = GREEDY.with_(max_tokens=16)
    second_turn = system_chat("How much is printing?")

    async def main():
        async with Started(streams) as client:
            await client.complete(system_chat("When do you open on Saturday?"), params, conversation_id="a")
            b_events, b = await collect(client.generate(second_turn, params, conversation_id="b"))
            later = second_turn + [{"role": "assistant", "content": b.text}, {"role": "user", "content": "In colour?"}]
            c = await client.complete(later, params, conversation_id="b")
            prompts = [await prompt_tokens(client, m) for m in (system_chat("When do you open on Saturday?"), second_turn)]
            return b_events, b, c, prompts, client.model_info.kv_layout

    b_events, b, c, (pa, pb), layout = run(main())
    assert layout.startswith("a stream per sequence, 4 × 1024 cells")
    shared = common_prefix_len(pa, pb)
    assert shared > 200 and b.stats.cached_tokens == shared  # copied from a's stream, not computed
    assert c.stats.cached_tokens == len(pb) + b.stats.gen_tokens - 1  # b's stream kept its turn

    async def recomputed():  # the same prompt where nothing was copied
        async with Started(streams.with_(kv_reuse=False)) as client:
            return await collect(client.generate(second_turn, params))

    fresh_events, _ = run(recomputed())
    assert divergence_is_a_near_tie(model_path, pb, token_ids(fresh_events), token_ids(b_events)) is None


@pytest.mark.tiny
def test_with_streams_an_evicted_chat_comes_back_from_ram(tiny_streams):
    two = tiny_streams.with_(n_ctx=2048, capacity=2)  # two streams: a third chat takes a's

    async def main():
        async with Started(two) as client:
            first = await client.complete(chat(), GREEDY.with_(max_tokens=16), conversation_id="a")
            for name in ("b", "c"):
                other = [{"role": "user", "content": f"{name}: {OTHER}"}]
                await client.complete(other, GREEDY.with_(max_tokens=4), conversation_id=name)
            second = await client.complete(chat(first.text), GREEDY.with_(max_tokens=16), conversation_id="a")
            return first, second, client.snapshot

    first, second, snapshot = run(main())
    history = first.stats.prompt_tokens + first.stats.gen_tokens - 1
    assert snapshot.evictions >= 1 and snapshot.restores >= 1
    assert second.stats.restored_tokens == second.stats.cached_tokens == history and second.ok


@pytest.mark.unit
def test_the_engine_picks_streams_where_a_chat_can_move_to_one_pool_when_it_outgrows_its_stream():
    assert not choose_layout(8 * 8192, 8, 8192, None, True).unified  # the default pool of 8 panes
    assert not choose_layout(8 * MIN_STREAM, 8, 131072, None, True).unified  # short streams: a long chat moves
    assert choose_layout(4096, 16, 8192, None, True).unified  # 256 cells a chat: outgrown at once
    assert choose_layout(65536, 1, 8192, None, True).unified  # one sequence: the same either way
    assert (
        choose_layout(4096, 16, 8192, False, True).reason == "as set" and not choose_layout(4096, 16, 8192, False, True).unified
    )


@pytest.mark.unit
def test_where_the_layout_cannot_change_streams_only_where_each_holds_a_long_chat():
    assert not choose_layout(8 * 8192, 8, 8192, None, False).unified
    assert not choose_layout(4 * 2048, 4, 2048, None, False).unified  # the whole training context each
    assert choose_layout(8 * (LONG_CHAT - 256), 8, 131072, None, False).unified  # a long-context model, short streams
    assert not choose_layout(8 * LONG_CHAT, 8, 131072, None, False).unified


@pytest.mark.tiny
def test_an_automatic_engine_reports_the_layout_it_chose(tiny_config):
    async def main(n_ctx):
        async with Started(tiny_config.with_(n_ctx=n_ctx, capacity=2, kv_unified=None)) as client:
            await client.complete(user("Hi"), GREEDY.with_(max_tokens=2))
            return client.model_info.kv_layout, client.model_info.as_json()["kv_layout"]

    streams_text, as_json = run(main(2 * 8192))
    assert (
        streams_text == as_json == "a stream per sequence, 2 × 8192 cells (automatic: one pool when a chat outgrows its stream)"
    )
    pool_text, _ = run(main(1024))
    assert pool_text == "one pool (automatic: a stream of 512 cells would cut chats short)"


@pytest.mark.tiny
@pytest.mark.parametrize("unified", [True, False])
def test_a_step_counts_the_ubatches_its_layout_cuts_it_into(tiny_streams, unified):
    """One pool runs a step as one ubatch; with a stream per sequence, a prompt read beside a reply
    that decodes is a ubatch of its own (llama.cpp's equal split)."""

    async def main():
        async with Started(tiny_streams.with_(kv_unified=unified)) as client:
            long = GREEDY.with_(max_tokens=600, ignore_eos=True)  # decoding while the second's prompt is read
            first = asyncio.ensure_future(client.complete(user("Count to twenty."), long, conversation_id="a"))
            while not first.done() and not await client.call(lambda e: any(s.num_generated for s in e.scheduler.running)):
                await asyncio.sleep(0.01)  # the first decodes before the second arrives (its prompt read, not beside it)
            second = client.complete(user("Name a colour. " * 40), GREEDY.with_(max_tokens=2), conversation_id="b")
            await asyncio.gather(first, second)
            return await client.call(lambda e: list(e.figures.steps.since()))

    steps = run(main())
    mixed = [s for s in steps if s.n_decode and s.n_prefill_tokens]
    assert mixed, "no step read a prompt beside a decode"
    assert all(s.n_ubatches == (1 if unified else 2) for s in mixed)
    assert all(s.n_ubatches == 1 for s in steps if not (s.n_decode and s.n_prefill_tokens) and s.n_seqs == 1)
    # each part of the second is read where the one before ended (its first after the cells it found
    # cached), and in streams a chunk's attention over its stream is counted (in one pool every
    # token attends the same extent)
    parts = [p for s in steps for p in s.parts if p.conversation_id == "b"]
    assert not parts[0].is_decode and parts[-1].is_decode
    assert all(b.start == a.start + a.n_tokens for a, b in zip(parts, parts[1:]))
    assert all((s.n_attended > 0) != unified for s in mixed)
