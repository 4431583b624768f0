"""Helpers for driving the real engine from tests."""

from __future__ import annotations

import asyncio

from app.client import EngineClient
from app.engine.events import FinishEvent, TokenEvent
from app.engine.params import EngineConfig


def run(coro):
    """Run a coroutine on a fresh asyncio loop (the engine tests need no Qt)."""
    return asyncio.run(coro)


class Started:
    """`async with Started(config) as client:` an engine that is always closed afterwards."""

    def __init__(self, config: EngineConfig):
        self.client = EngineClient(config)

    async def __aenter__(self) -> EngineClient:
        await self.client.start()
        return self.client

    async def __aexit__(self, *exc):
        await self.client.close()


async def collect(stream) -> tuple[list[TokenEvent], FinishEvent]:
    tokens = []
    async for event in stream:
        if isinstance(event, FinishEvent):
            return tokens, event
        tokens.append(event)
    raise AssertionError("no final event")


def user(text: str) -> list[dict[str, str]]:
    return [{"role": "user", "content": text}]


# logits: on this build, with flash attention on (llama.cpp's auto, the default), a token's logits are
# the same bit for bit whatever is decoded beside it; without it they move by up to 1.07 on the
# default model (scripts/batch-logits, docs/performance.md): the margin is for such a build
NEAR_TIE = 1.5


def token_ids(events) -> list[int]:
    return [e.token for e in events if e.n_tokens]


def divergence_is_a_near_tie(model_path: str, prompt: list[int], a_ids: list[int], b_ids: list[int]) -> str | None:
    """None if two greedy replies to `prompt` agree, or part only where two tokens were nearly tied.

    Without flash attention llama.cpp's CPU attention adds in another order for several tokens of a
    step than for one (measured: up to 0.94 for a drafted run, 1.07 beside 7 sequences in one pool;
    with it on, 0.0). A 135M model may then take another word where two were nearly tied. Replaying
    `a` alone up to the first difference tells whether that was so: both tokens must be within
    NEAR_TIE of the best logit there. A sequence that read wrong cells would leave a clear winner.
    """
    from app.engine.kv.prefix import common_prefix_len
    from app.engine.llama.context import LlamaBackend

    k = common_prefix_len(a_ids, b_ids)
    if k == min(len(a_ids), len(b_ids)):
        return None
    backend = LlamaBackend(EngineConfig(model_path, n_ctx=2048, n_batch=2048, capacity=1, n_threads=2))
    try:
        backend.batch.clear()
        row = backend.batch.add(0, prompt + a_ids[:k], 0, True)
        assert backend.decode() == 0
        logits = backend.samplers.logits(row)
    finally:
        backend.close()
    best = float(logits.max())
    behind = [best - float(logits[t]) for t in (a_ids[k], b_ids[k])]
    if max(behind) < NEAR_TIE:
        return None
    return f"token {k}: {a_ids[k]} vs {b_ids[k]} are {behind[0]:.2f} and {behind[1]:.2f} behind the best logit"
