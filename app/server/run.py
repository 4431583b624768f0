"""`python -m app serve`: the engine (one model or several) and the API server on one asyncio loop until Ctrl+C or SIGTERM."""

from __future__ import annotations

import asyncio
import signal
import sys
from collections.abc import Sequence

from app.client import EngineClient
from app.engine.params import EngineConfig
from app.loopback import is_loopback

from .protocol import DEFAULT_THINKING, Thinking
from .server import ApiServer


async def serve(
    models: Sequence[tuple[EngineConfig, str | None]],
    host: str,
    port: int,
    api_key: str | None,
    max_queue: int | None = None,
    allow_origins: Sequence[str] = (),
    allow_hosts: Sequence[str] = (),
    store_mb: int | None = None,
    thinking: Thinking = DEFAULT_THINKING,
    allow_image_urls: bool = False,
) -> int:
    """Serve `models` ((settings, alias or None) each; the first is the default) until a signal.

    `allow_origins`: web pages' origins that may call it beside this machine's ("*": any);
    `allow_hosts`: names it answers to beside this machine's ("*": any); `store_mb`: MiB for the
    Responses API's stored responses (None: the server's default); `thinking`: a thinking model's
    defaults (the thoughts apart or not, a budget, template variables); `allow_image_urls`: pictures
    sent by http(s) URL are fetched."""
    if not api_key and not is_loopback(host):
        print(f"warning: serving on {host} without --api-key: anyone who reaches this port can use the model", file=sys.stderr)
    (config, alias), *more = models
    client = EngineClient(config, alias)
    await client.start()  # a bad model raises ModelLoadError: the command line prints it
    try:
        for other, other_alias in more:
            await client.load_model(other, other_alias)
    except BaseException:
        await client.close()
        raise
    store = {} if store_mb is None else {"store_bytes": store_mb * 2**20}
    server = ApiServer(
        client,
        api_key,
        max_queue=max_queue,
        allow_origins=allow_origins,
        allow_hosts=allow_hosts,
        thinking=thinking,
        allow_image_urls=allow_image_urls,
        **store,
    )
    print(client.model_info.build.summary(), file=sys.stderr)
    for name, info in client.models.items():
        print(f"{name}: {info.placement()}; pool {info.pool_reason}; layout {info.kv_layout}", file=sys.stderr)
        if info.sees_images:
            print(f"{name}: sees images (projector {info.projector})", file=sys.stderr)
        for notice in info.notices:
            print(f"notice: {name}: {notice}", file=sys.stderr)
    try:
        try:
            url = await server.start(host, port)
        except OSError as e:
            print(f"error: cannot listen on {host}:{port}: {e.strerror or e}", file=sys.stderr)
            return 2
        for name, info in client.models.items():
            room = f"{info.n_ctx} KV cells, up to {info.n_ctx_seq} tokens a request"
            print(f"serving {name} at {url}/v1 ({client.config_of(name).capacity} parallel, {room})")
        if allow_origins:
            print(f"web pages from {', '.join(allow_origins)} may call it", file=sys.stderr)
        if server.host_names and not api_key and "*" not in server.allow_hosts:
            names = ", ".join(sorted({"localhost", *server.host_names, *server.allow_hosts}))
            print(f"it answers to a Host of an IP address or {names}; --allow-host NAME for another", file=sys.stderr)
        print(f"{server.max_queue} requests in flight at most", flush=True)
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
