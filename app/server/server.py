"""ApiServer: the aiohttp application on the engine client's loop, its routes, key check and error JSON."""

from __future__ import annotations

import hmac
import os
import time
from collections.abc import AsyncIterator, Callable

from aiohttp import web

from app.client import EngineClient, new_request_id
from app.engine.backend import ModelInfo
from app.engine.errors import EngineError, UnknownModelError
from app.engine.events import Event

from . import handlers
from .prometheus import ServedTotals
from .protocol import BadRequest, Job
from .shaping import error_body

MAX_BODY_BYTES = 64 * 2**20  # larger bodies get a 413; a long prompt under this gets a clear 400
PUBLIC_PATHS = {"/health"}  # answered without the API key, as llama-server does
QUEUE_PER_SLOT = 4  # default admission bound: this many requests in flight per parallel sequence
RETRY_AFTER_S = 1  # what a refused client is told to wait before trying again
Observer = Callable[[str, float], None]  # (request id, submit time): the window's plots


class ApiServer:
    def __init__(
        self,
        client: EngineClient,
        api_key: str | None = None,
        on_request: Observer | None = None,
        max_queue: int | None = None,
    ):
        self.client = client
        self._max_queue = max_queue
        self.in_flight = 0  # requests admitted and not yet answered
        self.api_key = api_key or None
        self.on_request = on_request
        self.totals = ServedTotals()
        self.created = int(time.time())
        self._runner: web.AppRunner | None = None
        self.url: str | None = None

    def pick_model(self, requested: str | None) -> tuple[str, ModelInfo]:
        """The loaded model a request's `model` field names, by its name or its file name (none: the
        default). With one model loaded, any name is served by it, as llama-server does; with
        several, a name not loaded is an UnknownModelError (HTTP 404)."""
        models = self.client.models
        name = requested or self.client.default_model
        if name not in models:
            by_file = [n for n, info in models.items() if os.path.basename(info.path) == name]
            if by_file or len(models) == 1:
                name = (by_file or list(models))[0]
            else:
                raise UnknownModelError(f"the model {requested!r} is not loaded; loaded: {', '.join(models)}")
        return name, models[name]

    @property
    def max_queue(self) -> int:
        """Requests admitted at once (running and waiting); more get a 503 with Retry-After."""
        return self._max_queue or QUEUE_PER_SLOT * sum(self.client.config_of(name).capacity for name in self.client.models)

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

    def admit(self, n: int = 1) -> Admission:
        """Places in the queue for a request of n choices (`with server.admit(n):`), or Busy when it is full."""
        if self.in_flight + n > max(self.max_queue, n):  # a request of more choices than the queue holds goes alone
            raise Busy()
        return Admission(self, n)

    def submit(self, job: Job, model: str, index: int = 0) -> AsyncIterator[Event]:
        """Choice `index` of a job for `model`; the first keeps the chat's KV slot between turns, the others take free ones."""
        request_id = new_request_id()
        if self.on_request is not None:
            self.on_request(request_id, time.monotonic())
        conversation_id = job.conversation_id if index == 0 else None
        return self.client.generate(
            job.messages,
            job.choice_params(index),
            prompt=job.prompt,
            conversation_id=conversation_id,
            request_id=request_id,
            model=model,
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
        if self.api_key and request.path not in PUBLIC_PATHS and not self._key_matches(request.headers.get("Authorization", "")):
            body = error_body("invalid or missing API key", "authentication_error", code="invalid_api_key")
            return web.json_response(body, status=401)
        return await handler(request)

    def _key_matches(self, header: str) -> bool:
        scheme, _, given = header.strip().partition(" ")
        if scheme.lower() != "bearer" or not given.isascii():  # a key is ASCII; anything else is no key
            return False
        return hmac.compare_digest(given.strip().encode(), self.api_key.encode())

    @web.middleware
    async def _errors(self, request: web.Request, handler):
        try:
            return await handler(request)
        except BadRequest as e:
            return web.json_response(error_body(str(e), param=e.param), status=400)
        except Busy:
            body = error_body(
                f"the server is busy: {self.max_queue} requests are in flight; try again shortly", "unavailable_error"
            )
            return web.json_response(body, status=503, headers={"Retry-After": str(RETRY_AFTER_S)})
        except UnknownModelError as e:  # OpenAI's answer to a model it does not have
            return web.json_response(error_body(str(e), param="model", code="model_not_found"), status=404)
        except EngineError as e:  # the engine thread ended: the request cannot be served until a restart
            return web.json_response(error_body(str(e), "unavailable_error"), status=503)
        except web.HTTPException as e:  # 404, 405, 413: the same JSON shape as every other error
            if e.status < 400:
                raise
            return web.json_response(error_body(f"{e.reason}: {request.method} {request.path}", code=e.status), status=e.status)


class Busy(Exception):
    """Every place in the admission queue is taken: HTTP 503 with Retry-After."""


class Admission:
    def __init__(self, server: ApiServer, n: int):
        self._server = server
        self._n = n
        server.in_flight += n

    def __enter__(self) -> Admission:
        return self

    def __exit__(self, *exc) -> None:
        self._server.in_flight -= self._n
