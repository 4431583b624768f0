"""ApiServer: the aiohttp application on the engine client's loop, its routes, key check and error JSON."""

from __future__ import annotations

import hmac
import os
import time
from collections.abc import AsyncIterator, Callable

from aiohttp import web

from app.client import EngineClient, new_request_id
from app.engine.events import Event

from . import handlers
from .metrics import ServedTotals
from .protocol import BadRequest, Job
from .shaping import error_body

MAX_BODY_BYTES = 64 * 2**20  # larger bodies get a 413; a long prompt under this gets a clear 400
PUBLIC_PATHS = {"/health"}  # answered without the API key, as llama-server does
Observer = Callable[[str, float], None]  # (request id, submit time): the window's plots


class ApiServer:
    def __init__(self, client: EngineClient, api_key: str | None = None, alias: str | None = None, on_request: Observer | None = None):
        self.client = client
        self.api_key = api_key or None
        self.alias = alias
        self.on_request = on_request
        self.totals = ServedTotals()
        self.created = int(time.time())
        self._runner: web.AppRunner | None = None
        self.url: str | None = None

    @property
    def model_name(self) -> str:
        return self.alias or os.path.basename(self.client.config.model_path)

    @property
    def is_serving(self) -> bool:
        return self._runner is not None

    async def start(self, host: str = "127.0.0.1", port: int = 8080) -> str:
        """Listen on host:port (0: a free port); return the base URL. An OSError if it cannot bind."""
        runner = web.AppRunner(self._app(), handler_cancellation=True, access_log=None, shutdown_timeout=2.0)
        await runner.setup()
        try:
            await web.TCPSite(runner, host, port).start()
        except OSError:
            await runner.cleanup()
            raise
        self._runner = runner
        self.client.add_listener(self.totals.on_events)
        bound_host, bound_port = runner.addresses[0][:2]
        self.url = f"http://{bound_host}:{bound_port}"
        return self.url

    async def stop(self) -> None:
        """Close every connection; streams in flight are cancelled and their sequences freed."""
        if self._runner is not None:
            runner, self._runner = self._runner, None
            self.client.remove_listener(self.totals.on_events)
            await runner.cleanup()

    def submit(self, job: Job) -> AsyncIterator[Event]:
        request_id = new_request_id()
        if self.on_request is not None:
            self.on_request(request_id, time.monotonic())
        return self.client.generate(
            job.messages, job.params, prompt=job.prompt, conversation_id=job.conversation_id, request_id=request_id
        )

    def _app(self) -> web.Application:
        app = web.Application(client_max_size=MAX_BODY_BYTES, middlewares=[self._errors, self._auth])
        app[handlers.SERVER] = self
        for prefix in ("/v1", ""):
            app.router.add_post(f"{prefix}/chat/completions", handlers.chat_completions)
            app.router.add_post(f"{prefix}/completions", handlers.completions)
            app.router.add_get(f"{prefix}/models", handlers.models)
        app.router.add_get("/health", handlers.health)
        app.router.add_get("/metrics", handlers.metrics)
        return app

    @web.middleware
    async def _auth(self, request: web.Request, handler):
        if self.api_key and request.path not in PUBLIC_PATHS:
            given = request.headers.get("Authorization", "").removeprefix("Bearer ").strip()
            if not hmac.compare_digest(given.encode(), self.api_key.encode()):
                body = error_body("invalid or missing API key", "authentication_error", code="invalid_api_key")
                return web.json_response(body, status=401)
        return await handler(request)

    @web.middleware
    async def _errors(self, request: web.Request, handler):
        try:
            return await handler(request)
        except BadRequest as e:
            return web.json_response(error_body(str(e), param=e.param), status=400)
        except web.HTTPException as e:  # 404, 405, 413: the same JSON shape as every other error
            if e.status < 400:
                raise
            return web.json_response(error_body(f"{e.reason}: {request.method} {request.path}", code=e.status), status=e.status)
