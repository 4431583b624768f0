"""Prompt tokens computed again after they were computed once: counted per request and in total."""

from __future__ import annotations

import pytest
from helpers import Started, run, user
from hypothesis import given, settings
from hypothesis import strategies as st

from app.engine.kv.computed import BLOCK, ComputedPrefixes
from app.engine.sampling.params import GREEDY


@pytest.mark.unit
@settings(max_examples=100, deadline=None)
@given(
    computed=st.lists(st.integers(0, 5), min_size=0, max_size=80),
    asked=st.lists(st.integers(0, 5), min_size=0, max_size=80),
)
def test_known_is_the_whole_blocks_of_the_common_prefix(computed, asked):
    ledger = ComputedPrefixes()
    assert ledger.known(asked) == 0
    ledger.add(computed, len(computed))
    common = 0
    while common < min(len(computed), len(asked)) and computed[common] == asked[common]:
        common += 1
    assert ledger.known(asked) == common // BLOCK * BLOCK


@pytest.mark.unit
def test_the_ledger_forgets_the_least_recently_seen_beyond_its_capacity():
    ledger = ComputedPrefixes(capacity=2)
    a, b = [1] * BLOCK, [2] * BLOCK
    ledger.add(a, BLOCK)
    ledger.add(b, BLOCK)
    assert ledger.known(a) == BLOCK  # seen again: now the most recent
    ledger.add([3] * BLOCK, BLOCK)
    assert ledger.known(a) == BLOCK and ledger.known(b) == 0


@pytest.mark.tiny
def test_a_chat_evicted_without_the_ram_tier_recomputes_its_history_and_says_so(tiny_config):
    """One slot, no RAM tier: another chat takes the slot, so the first one's next turn computes
    its history again; a chat never seen before recomputes nothing."""
    params = GREEDY.with_(max_tokens=24, ignore_eos=True)

    async def main():
        async with Started(tiny_config.with_(capacity=1, n_ctx=2048, cache_ram_mib=0, kv_unified=True)) as client:
            first = await client.complete(user("Name three rivers."), params, conversation_id="a")
            other = await client.complete(user("What is a comet? Answer briefly."), params, conversation_id="b")
            history = [*user("Name three rivers."), {"role": "assistant", "content": first.text}]
            again = await client.complete([*history, *user("And three lakes?")], params, conversation_id="a")
            return first, other, again, client.snapshot

    first, other, again, snapshot = run(main())
    assert first.stats.recomputed_tokens == other.stats.recomputed_tokens == 0
    history = first.stats.prompt_tokens + first.stats.gen_tokens
    # its history, in whole blocks, short of what the slot still held in common with the other chat
    assert history - BLOCK - again.stats.cached_tokens <= again.stats.recomputed_tokens <= history
    assert again.stats.recomputed_tokens <= again.stats.evaluated_tokens
    assert snapshot.recomputed_tokens == again.stats.recomputed_tokens


@pytest.mark.model
def test_two_chats_opening_alike_keep_their_own_histories_through_ram(config):
    """The server names a chat by its opening, so two people asking the same first question share a
    name but not their later turns: each history is saved and restored as its own, never computed again.
    (On the bundled model: the tiny one would write both replies alike, and one chat's last turn would
    find the other's cells in the pool, with nothing to restore.)"""
    params = GREEDY.with_(max_tokens=16, ignore_eos=True)
    opening = [{"role": "system", "content": "You answer questions about the sea."}, *user("What is a tide?")]

    async def turn(client, messages):
        return await client.complete(messages, params, conversation_id="same opening")

    async def main():
        async with Started(config.with_(capacity=3, n_ctx=768, kv_unified=True)) as client:
            histories = {}
            for follow_up in ("Why are there two a day?", "Which sea has the largest ones?"):
                first = await turn(client, opening)
                messages = [*opening, {"role": "assistant", "content": first.text}, *user(follow_up)]
                second = await turn(client, messages)
                histories[follow_up] = [*messages, {"role": "assistant", "content": second.text}]
            # a long chat of another name pushes both out of the pool, into RAM
            await client.complete(user("Tell me about whales. " * 140), params, conversation_id="other")
            finals = [await turn(client, [*h, *user("Thank you.")]) for h in histories.values()]
            return finals, client.snapshot

    finals, snapshot = run(main())
    assert snapshot.evictions >= 2 and snapshot.restores >= 2
    for final in finals:
        assert final.stats.restored_tokens > 0
        assert final.stats.recomputed_tokens < BLOCK, final.stats
