"""The ways a token is drawn (sampling.draw.Draw) agree: the top logit read for many rows at once, llama.cpp's
sampler chain on the host, and the chain inside the decode graph (backend sampling)."""

from __future__ import annotations

import asyncio

import pytest
from helpers import Started, collect, run, token_ids, user

from app.engine.params import EngineConfig, ServingMode
from app.engine.sampling.params import SamplingParams

QUESTIONS = ["Why is the sky blue?", "Name three fruits.", "Say hi.", "What is 2 + 2?"]
GREEDY = SamplingParams(temperature=0.0, repeat_penalty=1.0, max_tokens=32)


def config(model_path: str, in_graph: bool | None) -> EngineConfig:
    return EngineConfig(model_path, n_ctx=2048, capacity=4, n_threads=2, backend_sampling=in_graph)


async def replies(client, params_of) -> list[tuple[list[int], object]]:
    """The four questions at once, each with its own params: the same batches in every run."""
    streams = [collect(client.generate(user(q), params_of(i))) for i, q in enumerate(QUESTIONS)]
    return [(token_ids(tokens), final) for tokens, final in await asyncio.gather(*streams)]


@pytest.mark.model
@pytest.mark.parametrize("in_graph", [False, True], ids=["top logit on the host", "in the decode graph"])
def test_a_greedy_reply_is_the_one_the_sampler_chain_draws(model_path, in_graph):
    """The same batches in two fresh engines, drawn once by the chain on the host (asking for token probabilities keeps
    a request there) and once by the fast path: the same tokens, and ignore_eos holds on both (the
    top logit is sometimes an end-of-generation token, which the fast path must then pass over)."""

    def params(probs: bool):
        def of(i: int) -> SamplingParams:
            return GREEDY.with_(ignore_eos=i % 2 == 1, n_probs=0 if probs else None)

        return of

    async def go(probs: bool):  # a fresh engine each, one request at a time: the same batches, cell for cell,
        # however the four arrive (batched, which ones share a step would depend on the machine's load)
        async with Started(config(model_path, in_graph).with_(mode=ServingMode.SEQUENTIAL)) as client:
            return await replies(client, params(probs))

    by_chain, fast = run(go(True)), run(go(False))
    assert [ids for ids, _ in fast] == [ids for ids, _ in by_chain]
    for i, (ids, final) in enumerate(fast):
        if i % 2 == 1:  # ignore_eos: every token generated, none the end
            assert final.reason.value == "length" and len(ids) == GREEDY.max_tokens
    assert any(final.reason.value == "stop" for _, final in fast[0::2])  # the others may end by themselves


@pytest.mark.tiny
def test_sampling_in_the_graph_repeats_a_seed_and_shares_slots_with_host_sampling(tiny_model_path):
    """Seeded sampling with penalties in the graph gives the same reply twice; requests asking for
    token probabilities (sampled on the host) then take the same slots, beside in-graph ones, and
    get their probabilities; a request after them all is served (no sampler is left in the graph)."""
    seeded = SamplingParams(temperature=0.9, repeat_penalty=1.3, frequency_penalty=0.5, seed=7, max_tokens=24)

    async def go(more: bool):  # a fresh engine each: the same batches, cell for cell
        async with Started(config(tiny_model_path, True)) as client:
            first = await replies(client, lambda i: seeded)
            if not more:
                return first, None, None
            mixed = await replies(client, lambda i: seeded.with_(n_probs=2 if i % 2 else None))
            return first, mixed, await replies(client, lambda i: GREEDY)

    (first, _, _), (again, mixed, after) = run(go(False)), run(go(True))
    assert [ids for ids, _ in first] == [ids for ids, _ in again]
    assert len({tuple(ids) for ids, _ in first}) > 1  # the questions differ, so do the replies
    assert all(final.error is None and ids for ids, final in mixed)
    assert all(final.error is None and ids for ids, final in after)


@pytest.mark.tiny
def test_token_probabilities_come_from_the_host_chain_beside_in_graph_sampling(tiny_model_path):
    """A request with token probabilities running beside in-graph ones gets them for every token."""

    async def go():
        async with Started(config(tiny_model_path, True)) as client:
            streams = [
                collect(client.generate(user(q), GREEDY.with_(n_probs=3 if i == 0 else None))) for i, q in enumerate(QUESTIONS)
            ]
            return await asyncio.gather(*streams)

    results = run(go())
    tokens, final = results[0]
    drawn = [e for e in tokens if e.n_tokens]
    assert drawn and all(e.probs is not None and len(e.probs.top) == 3 for e in drawn)
    assert all(e.probs is None for tokens, _ in results[1:] for e in tokens)
