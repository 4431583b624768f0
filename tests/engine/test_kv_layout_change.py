"""The KV layout follows the chats: streams while every chat fits its stream, one pool once one
outgrows it, streams again when all fit. Each change carries every slot's cells over through its
saved state, so no chat, reply, cached token or hit count is lost; the engine checks its count of
cells against llama.cpp's after every decode (BATCH_PLAYGROUND_CHECK_CELLS, on in the tests)."""

from __future__ import annotations

import asyncio

import pytest
from helpers import Started, run, user

from app.engine.events import FinishReason
from app.engine.kv.layout import MIN_STREAM, next_layout
from app.engine.sampling.params import GREEDY

SENTENCE = "The river ran past the old mill, where the miller's daughter counted sacks of flour. "
LONG_TEXT = SENTENCE * 80  # over 1,024 tokens: more than a stream of the configs below holds


def history(final) -> int:
    """The cells a finished turn leaves for the next one: its prompt and its reply but the last token."""
    return final.stats.prompt_tokens + final.stats.gen_tokens - 1


def follow_up(messages, final, text="And then?"):
    return messages + [{"role": "assistant", "content": final.text}, {"role": "user", "content": text}]


@pytest.fixture
def two_streams(tiny_config):
    return tiny_config.with_(n_ctx=2048, capacity=2, kv_unified=None)  # 2 streams of 1,024 cells


@pytest.mark.tiny
def test_a_long_prompt_moves_every_chat_to_one_pool_and_each_keeps_its_history(two_streams):
    short, long = user("Chat a: tell me a story."), user(LONG_TEXT + "Summarize.")
    params = GREEDY.with_(max_tokens=12, ignore_eos=True)

    async def main():
        async with Started(two_streams) as client:
            before = client.snapshot.kv_layout
            a = await client.complete(short, params, conversation_id="a")
            b = await client.complete(long, params, conversation_id="b")
            moved = client.snapshot
            a2 = await client.complete(follow_up(short, a), params, conversation_id="a")
            b2 = await client.complete(follow_up(long, b), params, conversation_id="b")
            return before, a, b, moved, a2, b2

    before, a, b, moved, a2, b2 = run(main())
    assert before.startswith("a stream per sequence, 2 × 1024 cells")
    assert b.stats.prompt_tokens > 1024 and b.reason is FinishReason.LENGTH and b.stats.gen_tokens == 12
    assert moved.layout_changes == 1 and moved.layout_change_s > 0
    assert moved.kv_layout.startswith(f"one pool (automatic: a chat of {b.stats.prompt_tokens} tokens outgrew its stream")
    # nothing was computed again: a's cells moved with the layout, b's stayed for its next turn
    assert a2.stats.cached_tokens == history(a) and a2.stats.recomputed_tokens == 0
    assert b2.stats.cached_tokens == history(b) and b2.stats.recomputed_tokens == 0


@pytest.mark.tiny
def test_a_reply_growing_past_its_stream_completes_instead_of_ending_at_the_stream(two_streams):
    params = GREEDY.with_(max_tokens=1100, ignore_eos=True)

    async def main():
        async with Started(two_streams) as client:
            final = await client.complete(user("Tell me a very long story."), params, conversation_id="a")
            return final, client.snapshot, client.model_info.n_ctx_seq

    final, snapshot, n_ctx_seq = run(main())
    assert n_ctx_seq == 2048  # a request may hold the whole pool: its stream is not its cap
    assert final.reason is FinishReason.LENGTH and final.stats.gen_tokens == 1100
    assert snapshot.layout_changes == 1 and snapshot.kv_layout.startswith("one pool")


@pytest.mark.tiny
def test_a_change_with_eight_chats_running_loses_none_of_them(tiny_config):
    eight = tiny_config.with_(n_ctx=8 * 1024, capacity=8, kv_unified=None)
    chats = [user(f"Chat {i}: tell me about the number {i}.") for i in range(7)]
    params = GREEDY.with_(max_tokens=96, ignore_eos=True)

    async def main():
        async with Started(eight) as client:
            running = [asyncio.ensure_future(client.complete(m, params, conversation_id=f"c{i}")) for i, m in enumerate(chats)]
            while client.snapshot.generated_tokens < 7 * 8:  # every chat well into its reply
                await asyncio.sleep(0.01)
            long = await client.complete(user(LONG_TEXT + "Summarize."), params.with_(max_tokens=8), conversation_id="long")
            finals = await asyncio.gather(*running)
            changed = client.snapshot
            later = await asyncio.gather(
                *(
                    client.complete(follow_up(m, f), params.with_(max_tokens=4), conversation_id=f"c{i}")
                    for i, (m, f) in enumerate(zip(chats, finals))
                )
            )
            return long, finals, changed, later

    long, finals, changed, later = run(main())
    assert changed.layout_changes == 1 and changed.kv_layout.startswith("one pool")
    assert long.ok and long.stats.gen_tokens == 8
    assert all(f.reason is FinishReason.LENGTH and f.stats.gen_tokens == 96 for f in finals)
    assert all(f.stats.cached_tokens + f.stats.evaluated_tokens == f.stats.prompt_tokens for f in finals)
    # each chat's next turn finds its whole history where the change put it
    assert [n.stats.cached_tokens for n in later] == [history(f) for f in finals]


@pytest.mark.tiny
def test_when_every_chat_fits_again_the_layout_goes_back_to_streams_and_the_long_chat_comes_back_from_ram(two_streams):
    params = GREEDY.with_(max_tokens=8, ignore_eos=True)
    long = user(LONG_TEXT + "Summarize.")

    async def main():
        async with Started(two_streams) as client:
            first = await client.complete(long, params, conversation_id="long")
            in_pool = client.snapshot
            # two short chats take both slots: the long chat's cells go to RAM, every slot fits a stream
            for name in ("x", "y"):
                await client.complete(user(f"{name}: hello there."), params, conversation_id=name)
            back = client.snapshot
            again = await client.complete(follow_up(long, first), params, conversation_id="long")
            return first, in_pool, back, again, client.snapshot

    first, in_pool, back, again, last = run(main())
    assert in_pool.layout_changes == 1 and in_pool.kv_layout.startswith("one pool")
    assert back.layout_changes == 2 and back.kv_layout.startswith(
        "a stream per sequence, 2 × 1024 cells (automatic: every chat fits"
    )
    assert last.layout_changes == 3 and last.kv_layout.startswith("one pool")
    assert again.stats.restored_tokens == again.stats.cached_tokens == history(first)
    assert again.stats.recomputed_tokens == 0


@pytest.mark.tiny
def test_the_layout_goes_back_to_streams_as_the_engine_goes_idle_not_at_the_next_request(two_streams):
    one = GREEDY.with_(max_tokens=1)  # a reply of one step: no step after its admission

    async def main():
        async with Started(two_streams) as client:
            await client.complete(user(LONG_TEXT + "Summarize."), one, conversation_id="long")
            for name in ("x", "y"):  # y takes the long chat's slot: every chat fits a stream now
                await client.complete(user(f"{name}: hello there."), one, conversation_id=name)
            for _ in range(200):
                if client.snapshot.layout_changes == 2:
                    break
                await asyncio.sleep(0.01)
            return client.snapshot

    snapshot = run(main())
    assert snapshot.layout_changes == 2 and snapshot.kv_layout.startswith("a stream per sequence")


@pytest.mark.tiny
def test_a_chat_saved_to_ram_in_streams_comes_back_in_one_pool(two_streams):
    params = GREEDY.with_(max_tokens=8, ignore_eos=True)
    # long enough to be worth keeping in RAM, and sharing nothing with the long chat but the template
    a = user("Far away, in a city of glass towers, a young baker called Sam made bread every night. " * 4)

    async def main():
        async with Started(two_streams) as client:
            first = await client.complete(a, params, conversation_id="a")
            for name in ("b", "c"):  # two streams: c takes a's, whose cells go to RAM as streams save them
                await client.complete(user(f"{name}: hello there."), params, conversation_id=name)
            await client.complete(user(LONG_TEXT + "Summarize."), params, conversation_id="long")
            in_pool = client.snapshot
            again = await client.complete(follow_up(a, first), params, conversation_id="a")
            return first, in_pool, again

    first, in_pool, again = run(main())
    assert in_pool.layout_changes == 1 and in_pool.kv_layout.startswith("one pool") and in_pool.saves >= 1
    # llama.cpp refuses a state saved with another stream count: the count is rewritten, no row touched
    assert again.stats.restored_tokens == again.stats.cached_tokens == history(first)
    assert again.stats.recomputed_tokens == 0


@pytest.mark.tiny
def test_a_layout_set_by_hand_never_changes_and_a_stream_still_caps_a_chat(two_streams):
    fixed = two_streams.with_(kv_unified=False)
    params = GREEDY.with_(max_tokens=1100, ignore_eos=True)

    async def main():
        async with Started(fixed) as client:
            final = await client.complete(user("Tell me a very long story."), params)
            return final, client.snapshot

    final, snapshot = run(main())
    assert final.reason is FinishReason.CONTEXT and "1024 tokens is full" in final.notice
    assert snapshot.layout_changes == 0


@pytest.mark.unit
def test_the_rule_moves_to_one_pool_at_the_first_cell_past_a_stream_and_back_below_three_quarters():
    assert next_layout(True, 4096, 4096) is None
    assert next_layout(True, 4096, 4097).unified
    assert next_layout(False, 4096, 3072) == next_layout(False, 4096, 1) and not next_layout(False, 4096, 1).unified
    assert next_layout(False, 4096, 3073) is None  # a chat near the end of a stream would move everyone again
    assert next_layout(False, MIN_STREAM - 256, 1) is None  # streams this short would be outgrown at once
