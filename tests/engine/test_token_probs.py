"""Token probabilities: each drawn token and its rivals, under the model and after the samplers."""

from __future__ import annotations

import math

import numpy as np
import pytest
from helpers import Started, collect, run, token_ids, user
from hypothesis import given, settings
from hypothesis import strategies as st

from app.engine.probs import token_probs
from app.engine.sampling.params import SamplingParams


def _piece(token: int) -> bytes:
    return str(token).encode()


@pytest.mark.unit
@settings(max_examples=60, deadline=None)
@given(
    logits=st.lists(st.floats(-30, 30, width=32), min_size=2, max_size=64),
    n_top=st.integers(0, 70),
    data=st.data(),
)
def test_probabilities_add_up_whatever_the_logits(logits, n_top, data):
    logits = np.array(logits, dtype=np.float32)
    kept = np.array(sorted(data.draw(st.sets(st.integers(0, len(logits) - 1), min_size=1))), dtype=np.int32)
    chosen = int(data.draw(st.sampled_from(kept)))
    probs = token_probs(logits, kept, logits[kept] / 0.7, chosen, n_top, _piece)

    model = np.exp(logits - logits.max(), dtype=np.float64)
    model /= model.sum()
    assert math.isclose(math.exp(probs.chosen.logprob), model[chosen], rel_tol=1e-4, abs_tol=1e-9)
    assert len(probs.top) == min(n_top, len(logits))
    assert [c.logprob for c in probs.top] == sorted((c.logprob for c in probs.top), reverse=True)
    if probs.top:  # the likeliest token under the model leads
        assert math.isclose(probs.top[0].logprob, math.log(model.max()), rel_tol=1e-4, abs_tol=1e-6)
    cut = [c for c in probs.top if c.token not in set(kept.tolist())]
    assert all(c.sampled_p == 0.0 for c in cut)  # a token the samplers removed cannot be drawn
    assert 0.0 < probs.chosen.sampled_p <= 1.0
    assert probs.chosen.piece == _piece(chosen)


@pytest.mark.unit
def test_greedy_draws_its_token_for_certain():
    logits = np.array([1.0, 3.0, 2.0], dtype=np.float32)
    probs = token_probs(logits, np.arange(3, dtype=np.int32), None, 1, 3, _piece)
    assert probs.chosen.sampled_p == 1.0
    assert [c.token for c in probs.top] == [1, 2, 0]
    assert [c.sampled_p for c in probs.top] == [1.0, 0.0, 0.0]


@pytest.mark.tiny
def test_every_token_tells_its_probability_and_the_same_seed_draws_the_same_reply(tiny_config):
    """Asking for probabilities changes nothing of the draw: same seed, same tokens, with or without."""

    async def go():
        async with Started(tiny_config) as client:
            base = SamplingParams(temperature=0.8, top_k=20, max_tokens=24, seed=7)
            plain, _ = await collect(client.generate(user("Name three fruits."), base))
            told, final = await collect(client.generate(user("Name three fruits."), base.with_(n_probs=5)))
            return plain, told, final

    plain, told, final = run(go())
    assert token_ids(told) == token_ids(plain)
    drawn = [e for e in told if e.n_tokens]
    assert all(e.probs is not None and e.probs.chosen.token == e.token for e in drawn)
    for e in drawn:
        top = e.probs.top
        assert len(top) == 5
        assert -30 < e.probs.chosen.logprob <= 0
        # top-k of 20 leaves at most 20 candidates; the five likeliest are among them
        assert sum(c.sampled_p for c in top) <= 1.0 + 1e-6
        assert e.probs.chosen.sampled_p > 0
    assert final.ok and final.text == "".join(e.text for e in told)


@pytest.mark.tiny
def test_greedy_reply_takes_the_likeliest_token_after_the_repeat_penalty(tiny_config):
    async def go():
        async with Started(tiny_config) as client:
            params = SamplingParams(temperature=0, repeat_penalty=1.0, max_tokens=16, n_probs=3)
            return await collect(client.generate(user("Count from one to five."), params))

    tokens, final = run(go())
    for e in (e for e in tokens if e.n_tokens):
        assert e.probs.top[0].token == e.token  # no penalty: greedy is the model's likeliest
        assert e.probs.chosen.sampled_p == 1.0
        assert e.probs.chosen.logprob == e.probs.top[0].logprob
    assert final.ok


@pytest.mark.model
def test_a_branch_from_a_rival_token_starts_from_the_cached_reply_and_goes_on_from_that_token(config):
    """The reply's cells up to the branch point are shared with the new sequence: only the rival is read."""
    greedy = SamplingParams(temperature=0, repeat_penalty=1.0, max_tokens=20, n_probs=3)
    question = user("Describe a lighthouse at night.")

    async def go():
        async with Started(config) as client:
            tokens, first = await collect(client.generate(question, greedy, conversation_id="a"))
            drawn = [e for e in tokens if e.n_tokens]
            at = 6
            rival = drawn[at].probs.top[1]  # the second likeliest token there
            prefix = [e.token for e in drawn[:at]] + [rival.token]
            branches = [
                await collect(client.generate(question, greedy, conversation_id=f"b{i}", reply_prefix=prefix)) for i in range(2)
            ]
            bad = await client.complete(question, greedy, reply_prefix=[10**9])
            after = await client.complete(question, greedy.with_(max_tokens=4))
            return first, drawn, at, rival, branches, bad, after

    first, drawn, at, rival, branches, bad, after = run(go())
    (tokens_b, final_b), (tokens_c, final_c) = branches
    n_prompt = first.stats.prompt_tokens
    assert final_b.stats.prompt_tokens == n_prompt + at + 1
    # every cell but the rival's came from the first reply's slot (the last one is read for its logits)
    assert (final_b.stats.cached_tokens, final_b.stats.evaluated_tokens) == (n_prompt + at, 1)
    assert final_b.text == final_c.text  # greedy: the same branch twice goes the same way
    assert not bad.ok and "reply_prefix must be token ids" in bad.error
    assert after.ok  # the engine goes on after refusing it
