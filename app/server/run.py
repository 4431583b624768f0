"""`python -m app serve`: the engine and the API server on one asyncio loop until Ctrl+C or SIGTERM."""

from __future__ import annotations

import asyncio
import signal
import sys

from app.client import EngineClient
from app.engine.params import EngineConfig
from app.loopback import is_loopback

from .server import ApiServer


async def serve(
    config: EngineConfig, host: str, port: int, api_key: str | None, alias: str | None, max_queue: int | None = None
) -> int:
    if not api_key and not is_loopback(host):
        print(f"warning: serving on {host} without --api-key: anyone who reaches this port can use the model", file=sys.stderr)
    client = EngineClient(config)
    await client.start()  # a bad model raises ModelLoadError: the command line prints it
    server = ApiServer(client, api_key, alias, max_queue=max_queue)
    info = client.model_info
    print(f"{info.build.summary()}\n{info.placement()}; pool {info.pool_reason}", file=sys.stderr)
    for notice in info.notices:
        print(f"notice: {notice}", file=sys.stderr)
    try:
        try:
            url = await server.start(host, port)
        except OSError as e:
            print(f"error: cannot listen on {host}:{port}: {e.strerror or e}", file=sys.stderr)
            return 2
        print(
            f"serving {server.model_name} at {url}/v1 ({config.capacity} parallel, {info.n_ctx} KV cells, "
            f"{server.max_queue} requests in flight at most)",
            flush=True,
        )
        await _until_signal()
    finally:
        await server.stop()
        await client.close()
    return 0


async def _until_signal() -> None:
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    await stop.wait()
