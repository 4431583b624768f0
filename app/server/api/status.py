"""How the server is doing: `GET /health` (is the engine running) and `GET /metrics` (Prometheus text)."""

from __future__ import annotations

from aiohttp import web

from ..prometheus import RATE_WINDOW_S, ModelFigures, prometheus_text
from .submit import SERVER


async def health(request: web.Request) -> web.Response:
    client = request.app[SERVER].client
    if client.is_running:
        return web.json_response({"status": "ok"})
    reason = client.failure or "the engine is not running"
    return web.json_response({"status": "error", "error": reason}, status=503)


async def metrics(request: web.Request) -> web.Response:
    server = request.app[SERVER]
    client = server.client
    figures = {}
    for name in client.models:
        snapshot = client.snapshot_of(name)
        if snapshot is not None:  # else unloaded since
            figures[name] = ModelFigures(snapshot, client.recent_steps(RATE_WINDOW_S, name))
    text = prometheus_text(figures, server.totals)
    return web.Response(text=text, content_type="text/plain", charset="utf-8", headers={"X-Format": "prometheus 0.0.4"})
