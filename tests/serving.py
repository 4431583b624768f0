"""Helpers for the HTTP tests: the real engine behind a real server on a free loopback port."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Sequence

from app.client import EngineClient
from app.engine.params import EngineConfig
from app.server.server import ApiServer


class Serving:
    """`async with Serving(config) as (client, server, url):` an engine and its API, always closed afterwards.

    `more`: other models to load beside the first, (settings, name or None) each; `server_options`:
    ApiServer's keywords (allowed origins, deadlines, caps).
    """

    def __init__(
        self,
        config: EngineConfig,
        api_key: str | None = None,
        more: Sequence[tuple[EngineConfig, str | None]] = (),
        **server_options,
    ):
        self.client = EngineClient(config)
        self.server = ApiServer(self.client, api_key, **server_options)
        self.more = more

    async def __aenter__(self):
        await self.client.start()
        for config, name in self.more:
            await self.client.load_model(config, name)
        url = await self.server.start("127.0.0.1", 0)
        return self.client, self.server, url

    async def __aexit__(self, *exc):
        await self.server.stop()
        await self.client.close()


async def engine_is_idle(client: EngineClient, timeout: float = 10.0) -> bool:
    """Wait until the scheduler holds no running or waiting sequence; False if it never does."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        running, waiting = await client.call(lambda e: (len(e.scheduler.running), len(e.scheduler.waiting)))
        if running == waiting == 0:
            return True
        await asyncio.sleep(0.05)
    return False


def chat(text: str, **fields) -> dict:
    return {"messages": [{"role": "user", "content": text}], "temperature": 0, "max_tokens": 16, **fields}
