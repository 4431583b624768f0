"""KV reuse with the real engine: later turns, shared system prompts, a full pool, preemption, overflow.

Counts of cached and evaluated tokens, and overflow, run on the tiny model; a reply that must end
by itself, or must come out as it would elsewhere (after eviction, preemption), on the bundled one."""

from __future__ import annotations

import asyncio

import pytest
from helpers import Started, collect, divergence_is_a_near_tie, run, token_ids, user

from app.engine.events import FinishReason
from app.engine.kv.prefix import common_prefix_len
from app.engine.params import OverflowPolicy
from app.engine.sampling.params import GREEDY
from app.engine.sequence import Request

# a system prompt of well over 200 tokens, shared by every conversation below
SYSTEM = (
    "You are a patient, precise assistant working for a small public library. "
    "You answer questions from visitors about books, opening hours, membership and events. "
    "Keep answers short and friendly. If you do not know something, say so plainly and suggest "
    "asking a librarian at the front desk. Never invent titles, authors or dates. "
    "The library opens from nine in the morning until six in the evening on weekdays, and from ten "
    "until four on Saturdays; it is closed on Sundays and public holidays. Membership is free for "
    "residents and costs twelve euros a year for others. Members may borrow up to eight items at "
    "once for three weeks, and may renew each item twice unless someone has reserved it. "
    "Late returns cost twenty cents a day per item. The children's corner hosts a reading hour every "
    "Wednesday afternoon, and the local history society meets on the first Monday of each month. "
    "Printing costs ten cents a page in black and white and fifty cents in colour. Wireless internet "
    "is free; the network name and password are posted at the entrance. Quiet study rooms can be "
    "booked for two hours at a time at the front desk or on the library's website."
)


def system_chat(question: str) -> list[dict[str, str]]:
    return [{"role": "system", "content": SYSTEM}, {"role": "user", "content": question}]


async def prompt_tokens(client, messages, params=GREEDY):
    return await client.call(lambda e: e.intake.prompts.build(Request("probe", params, tuple(messages)))[0])


@pytest.mark.model
def test_a_later_turn_evaluates_only_its_new_tokens(config):
    params = GREEDY.with_(max_tokens=200)

    async def main():
        async with Started(config) as client:
            turn1 = user("What is a haiku?")
            first = await client.complete(turn1, params, conversation_id="chat")
            turn2 = turn1 + [{"role": "assistant", "content": first.text}, {"role": "user", "content": "Write one about rain."}]
            second = await client.complete(turn2, params, conversation_id="chat")
            glue = await client.call(
                lambda e: e.backend.vocab.tokenize(
                    "<|im_end|>\n<|im_start|>user\nWrite one about rain.<|im_end|>\n<|im_start|>assistant\n", add_special=False
                )
            )
            return first, second, await prompt_tokens(client, turn1), await prompt_tokens(client, turn2), glue

    first, second, p1, p2, glue = run(main())
    # the reply's tokens were read while generating, all but the last one sampled (never read back)
    reply_cached = first.stats.gen_tokens - 1
    assert second.stats.cached_tokens == len(p1) + reply_cached
    assert second.stats.evaluated_tokens == len(p2) - len(p1) - reply_cached
    # counted by hand: the reply's end token, the user's message and the template's glue
    assert first.reason is FinishReason.STOP
    assert second.stats.evaluated_tokens == len(glue)
    assert second.stats.kv_hit_rate > 0.75
    # the conversation's running rate counts both turns
    assert second.stats.conversation_cached_tokens == first.stats.cached_tokens + second.stats.cached_tokens
    assert second.stats.conversation_evaluated_tokens == first.stats.evaluated_tokens + second.stats.evaluated_tokens
    assert first.stats.kv_hit_rate < second.stats.conversation_hit_rate < second.stats.kv_hit_rate


@pytest.mark.tiny
def test_a_new_conversation_with_the_same_system_prompt_reuses_it(tiny_config):
    params = GREEDY.with_(max_tokens=16)

    async def main():
        async with Started(tiny_config) as client:
            await client.complete(system_chat("When do you open on Saturday?"), params, conversation_id="a")
            b = await client.complete(system_chat("How much is printing?"), params, conversation_id="b")
            pa = await prompt_tokens(client, system_chat("When do you open on Saturday?"))
            pb = await prompt_tokens(client, system_chat("How much is printing?"))
            return b, pa, pb

    b, pa, pb = run(main())
    shared = common_prefix_len(pa, pb)
    assert shared > 200
    assert b.stats.cached_tokens == shared
    assert b.stats.evaluated_tokens == len(pb) - shared


@pytest.mark.tiny
def test_conversations_arriving_together_compute_their_shared_prefix_once(tiny_config):
    questions = ["Can I renew a book?", "Is the wifi free?", "What happens on Wednesdays?", "Are you open Sunday?"]
    params = GREEDY.with_(max_tokens=8)

    async def main():
        async with Started(tiny_config) as client:
            finals = await asyncio.gather(
                *(client.complete(system_chat(q), params, conversation_id=f"c{i}") for i, q in enumerate(questions))
            )
            prompts = [await prompt_tokens(client, system_chat(q)) for q in questions]
            return finals, prompts

    finals, prompts = run(main())
    shared = min(common_prefix_len(prompts[0], p) for p in prompts[1:])
    assert shared > 200
    evaluated = sum(f.stats.evaluated_tokens for f in finals)
    tails = sum(len(p) - shared for p in prompts)
    assert evaluated == shared + tails, "the shared prefix was computed more than once"
    assert all(f.text for f in finals)


@pytest.mark.model
def test_a_small_pool_evicts_idle_conversations_and_every_request_completes(config, model_path):
    questions = [f"Tell me one fact about the number {i}." for i in range(8)]
    params = GREEDY.with_(max_tokens=16)

    async def serve(cfg):
        async with Started(cfg) as client:
            results = []
            for _round in range(2):  # eight conversations, two rounds, in four slots
                results += await asyncio.gather(
                    *(collect(client.generate(user(q), params, conversation_id=f"c{i}")) for i, q in enumerate(questions))
                )
            prompts = [await prompt_tokens(client, user(q)) for q in questions]
            return results, prompts, client.snapshot

    small, prompts, snap_small = run(serve(config.with_(capacity=4, n_ctx=256)))
    large, _, snap_large = run(serve(config.with_(capacity=8, n_ctx=4096)))
    assert snap_small.evictions > 0 and snap_large.evictions == 0
    assert all(f.reason is not FinishReason.ERROR for _, f in small)
    for i, ((a_events, _), (b_events, _)) in enumerate(zip(large, small)):
        problem = divergence_is_a_near_tie(model_path, prompts[i % 8], token_ids(a_events), token_ids(b_events))
        assert problem is None, problem


@pytest.mark.model
def test_preemption_resumes_a_sequence_with_the_same_output(config, model_path):
    questions = ["Describe a forest.", "Describe a city.", "Describe the sea.", "Describe a desert."]
    params = GREEDY.with_(max_tokens=80, ignore_eos=True)

    async def serve(cfg):
        async with Started(cfg) as client:
            results = await asyncio.gather(*(collect(client.generate(user(q), params)) for q in questions))
            prompts = [await prompt_tokens(client, user(q)) for q in questions]
            return results, prompts, client.snapshot

    # four prompts of about 35 tokens with replies of 80 cannot all fit in 256 cells at once: someone must give way
    tight, prompts, snap = run(serve(config.with_(capacity=4, n_ctx=256)))
    roomy, _, _ = run(serve(config.with_(capacity=4, n_ctx=4096)))
    assert snap.preemptions > 0
    assert sum(f.stats.preemptions for _, f in tight) == snap.preemptions
    for prompt, (a_events, _), (b_events, b) in zip(prompts, roomy, tight):
        assert b.reason is FinishReason.LENGTH and b.stats.gen_tokens == 80
        problem = divergence_is_a_near_tie(model_path, prompt, token_ids(a_events), token_ids(b_events))
        assert problem is None, problem


def long_chat(turns: int) -> list[dict[str, str]]:
    messages = [{"role": "system", "content": "You are terse."}]
    for i in range(turns):
        messages.append({"role": "user", "content": f"Question {i}: " + "please consider this carefully. " * 12})
        messages.append({"role": "assistant", "content": f"Answer {i}: " + "noted and understood. " * 12})
    messages.append({"role": "user", "content": "Final question: what is two plus two?"})
    return messages


@pytest.mark.tiny
def test_overflow_policy_stop_refuses_with_a_clear_message(tiny_config):
    async def main():
        async with Started(tiny_config.with_(n_ctx=512, overflow=OverflowPolicy.STOP)) as client:
            return await client.complete(long_chat(8), GREEDY.with_(max_tokens=16))

    final = run(main())
    assert final.reason is FinishReason.ERROR
    assert "context holds 512" in final.error


@pytest.mark.tiny
def test_overflow_policy_truncate_drops_oldest_turns_and_keeps_the_system_prompt(tiny_config):
    messages = long_chat(8)

    async def main():
        async with Started(tiny_config.with_(n_ctx=512, overflow=OverflowPolicy.TRUNCATE)) as client:
            final = await client.complete(messages, GREEDY.with_(max_tokens=16))
            text = await client.call(
                lambda e: "".join(
                    e.backend.vocab.piece(t).decode("utf-8", "replace")
                    for t in e.intake.prompts.build(Request("x", GREEDY.with_(max_tokens=16), tuple(messages)))[0]
                )
            )
            return final, text

    final, text = run(main())
    assert final.reason is not FinishReason.ERROR and final.text
    assert "dropped the" in final.notice and "oldest messages" in final.notice
    assert "You are terse." in text and "Final question" in text
    assert "Question 0:" not in text
    assert final.stats.prompt_tokens + 16 <= 512
