"""The prefix comparison behind KV reuse, and a later turn finding its whole history cached."""

import random

import pytest
from helpers import Started, collect, run, user

from app.engine.kv.prefix import common_prefix_len
from app.engine.sampling.params import GREEDY, SamplingParams
from app.engine.sequence import Request


def naive(a, b):
    n = 0
    while n < min(len(a), len(b)) and a[n] == b[n]:
        n += 1
    return n


@pytest.mark.unit
def test_common_prefix_len_matches_a_plain_scan():
    rng = random.Random(7)
    for _ in range(500):
        a = [rng.randrange(4) for _ in range(rng.randrange(0, 60))]
        b = a[: rng.randrange(0, len(a) + 1)] + [rng.randrange(4) for _ in range(rng.randrange(0, 20))]
        assert common_prefix_len(a, b) == naive(a, b)
        assert common_prefix_len(b, a) == naive(a, b)


@pytest.mark.tiny
def test_a_reply_that_re_tokenizes_differently_is_still_reused_whole(tiny_config):
    """Hot sampling draws token splits the tokenizer would not make ("secre"+"ted" where it reads
    "secret"+"ed"): the next turn must still find every cell of the reply in the cache."""
    question = user("Write a sentence with some unusual words, numbers and punctuation.")

    async def main():
        async with Started(tiny_config) as client:
            for seed in range(12):
                hot = SamplingParams(temperature=1.8, top_k=0, top_p=1.0, min_p=0.0, seed=seed, max_tokens=60)
                _, first = await collect(client.generate(question, hot, conversation_id=f"c{seed}"))
                if "\ufffd" in first.text:  # bytes that are no text: the chat cannot hold them as generated
                    continue
                follow = question + [{"role": "assistant", "content": first.text}, user("Go on.")[0]]
                own = await client.call(lambda e, cid=f"c{seed}": list(e.history.get(cid)))
                request = Request("x", hot, tuple(follow))
                fresh = await client.call(lambda e, r=request: e.intake.prompts.build(r)[0])
                if common_prefix_len(fresh, own) < len(own):  # re-tokenizing would lose part of the reply
                    _, second = await collect(client.generate(follow, GREEDY.with_(max_tokens=2), conversation_id=f"c{seed}"))
                    return first, second, own, fresh
            raise AssertionError("no reply in 12 re-tokenized differently")

    first, second, own, fresh = run(main())
    cells = first.stats.prompt_tokens + first.stats.gen_tokens - 1  # the last token was sampled, never decoded
    assert second.stats.cached_tokens == cells > common_prefix_len(fresh, own)
    assert second.stats.prompt_tokens >= len(own)
