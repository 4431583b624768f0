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
