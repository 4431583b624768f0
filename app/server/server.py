"""ApiServer: the aiohttp application on the engine client's loop, its routes, key check and error JSON.

What a browser page may do follows Ollama: a page from another origin gets a 403 (loopback pages
and --allow-origin ones may call it, with CORS headers), a server on loopback answers only to a
loopback Host (DNS rebinding), one beyond loopback without an API key only to an IP address or a
name of this machine (or --allow-host ones), and a POST body must be sent as application/json (415).
"""

from __future__ import annotations

import asyncio
import hmac
import ipaddress
import logging
import os
import socket
import time
from collections.abc import AsyncIterator, Callable, Iterable

from aiohttp import hdrs, web

from app.client import EngineClient, new_request_id
from app.engine.errors import EngineError, UnknownModelError
from app.engine.events import Event
from app.engine.model_info import ModelInfo
from app.loopback import host_of, is_loopback, is_loopback_origin

from .api.chat import chat_completions
from .api.completions import completions
from .api.models import models
from .api.responses import create_response, delete_response, get_response
from .api.status import health, metrics
from .api.submit import SERVER
from .api.template import apply_template, props
from .api.tokens import detokenize, tokenize
from .connections import BACKLOG, KEEPALIVE_S, MAX_CONNECTIONS, Connections
from .prometheus import ServedTotals
from .protocol import DEFAULT_THINKING, BadRequest, Job, Thinking
from .responses.store import STORE_BYTES, KeptResponses, NotFound
from .shaping import error_body

MAX_BODY_BYTES = 64 * 2**20  # larger bodies get a 413; a long prompt under this gets a clear 400
# the whole body must have come this long after the request's head, else 408 and the connection is
# closed: a body trickled in a byte at a time cannot hold a connection (a 64 MiB body at 2.2 MB/s fits)
BODY_TIMEOUT_S = 30.0
PUBLIC_PATHS = {"/health"}  # answered without the API key, as llama-server does
QUEUE_PER_SLOT = 4  # default admission bound: this many requests in flight per parallel sequence
RETRY_AFTER_S = 1  # what a refused client is told to wait before trying again
PREFLIGHT_MAX_AGE_S = 600  # how long a browser may keep a CORS preflight's answer
Observer = Callable[[str, float], None]  # (request id, submit time): the window's plots
_PREPARED = web.RequestKey("prepared", bool)  # the response's head is on its way: no other answer can be sent
log = logging.getLogger(__name__)


class ApiServer:
    def __init__(
        self,
        client: EngineClient,
        api_key: str | None = None,
        on_request: Observer | None = None,
        max_queue: int | None = None,
        *,
        allow_origins: Iterable[str] = (),
        allow_hosts: Iterable[str] = (),
        body_timeout_s: float = BODY_TIMEOUT_S,
        keepalive_s: float = KEEPALIVE_S,
        max_connections: int = MAX_CONNECTIONS,
        store_bytes: int = STORE_BYTES,
        thinking: Thinking = DEFAULT_THINKING,
        allow_image_urls: bool = False,
    ):
        """`allow_origins`: browser origins that may call the server beside loopback pages ("*": any);
        `allow_hosts`: names it answers to (its Host header) beside this machine's ("*": any);
        `store_bytes`: memory for the Responses API's stored responses; `thinking`: what a chat with a
        thinking model gets unless it says otherwise (--reasoning-format, --reasoning-budget,
        --chat-template-kwargs); `allow_image_urls`: pictures sent by http(s) URL are fetched (else only
        data: URIs are read)."""
        self.client = client
        self.allow_image_urls = allow_image_urls
        self.thinking = thinking
        self._max_queue = max_queue
        self.allow_origins = {_normal_origin(o) for o in allow_origins}
        self.allow_hosts = {_normal_host(h) for h in allow_hosts}
        self.host_names: frozenset[str] = frozenset()  # this machine's own names, while it listens beyond loopback
        self.body_timeout_s = body_timeout_s
        self.keepalive_s = keepalive_s
        self.max_connections = max_connections
        self.connections: Connections | None = None  # the open connections while serving
        self._loopback_only = True  # bound to loopback: the Host must name this machine
        self._listener: asyncio.Server | None = None
        self.in_flight = 0  # requests admitted and not yet answered
        self.api_key = api_key or None
        self.on_request = on_request
        self.responses = KeptResponses(store_bytes)  # stored responses of the Responses API, and their conversations
        self.totals = ServedTotals(self.responses)
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
        runner = web.AppRunner(
            self._app(), handler_cancellation=True, access_log=None, shutdown_timeout=2.0, keepalive_timeout=self.keepalive_s
        )
        await runner.setup()
        # aiohttp's handlers behind our own factory, which counts the connections
        self.connections = Connections(runner.server, self.max_connections)
        self._loopback_only = is_loopback(host or "")
        if not self._loopback_only:
            self.host_names = await asyncio.to_thread(_names_of_this_machine)  # getfqdn may ask DNS
        try:
            listener = await asyncio.get_running_loop().create_server(self.connections, host, port, backlog=BACKLOG)
        except OSError:
            await runner.cleanup()
            raise
        self._runner, self._listener = runner, listener
        self.client.add_listener(self.totals.on_events)
        bound_host, bound_port = listener.sockets[0].getsockname()[:2]
        self.url = f"http://{f'[{bound_host}]' if ':' in bound_host else bound_host}:{bound_port}"
        return self.url

    async def stop(self) -> None:
        """Close every connection; streams in flight are cancelled and their sequences freed."""
        if self._runner is not None:
            runner, self._runner = self._runner, None
            self._listener.close()
            self.client.remove_listener(self.totals.on_events)
            await runner.cleanup()

    def origin_allowed(self, origin: str) -> bool:
        """Whether a page from `origin` (a browser's Origin header) may call the server."""
        return is_loopback_origin(origin) or "*" in self.allow_origins or _normal_origin(origin) in self.allow_origins

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
        thinking = job.thinking
        return self.client.generate(
            job.messages,
            job.choice_params(index),
            prompt=job.prompt,
            conversation_id=conversation_id,
            request_id=request_id,
            model=model,
            template_kwargs=thinking.template_kwargs or None,
            separate_thoughts=thinking.separate,
            reasoning_budget=thinking.budget,
            continue_final=job.continue_final,
            add_generation_prompt=job.add_generation_prompt,
        )

    def _app(self) -> web.Application:
        middlewares = [self._track, self._errors, self._guard, self._auth, self._read_body]
        app = web.Application(client_max_size=MAX_BODY_BYTES, middlewares=middlewares)
        app[SERVER] = self
        app.on_response_prepare.append(self._on_prepare)
        for prefix in ("/v1", ""):
            app.router.add_post(f"{prefix}/chat/completions", chat_completions)
            app.router.add_post(f"{prefix}/completions", completions)
            app.router.add_get(f"{prefix}/models", models)
            app.router.add_post(f"{prefix}/responses", create_response)
            app.router.add_get(f"{prefix}/responses/{{response_id}}", get_response)
            app.router.add_delete(f"{prefix}/responses/{{response_id}}", delete_response)
        app.router.add_get("/health", health)
        app.router.add_get("/metrics", metrics)
        app.router.add_post("/tokenize", tokenize)
        app.router.add_post("/detokenize", detokenize)
        app.router.add_post("/apply-template", apply_template)
        app.router.add_get("/props", props)
        return app

    @web.middleware
    async def _track(self, request: web.Request, handler):
        """While a request is served, its connection is not idle: not closed to make room for another."""
        if self.connections is None:
            return await handler(request)
        with self.connections.serving(request.protocol):
            return await handler(request)

    @web.middleware
    async def _guard(self, request: web.Request, handler):
        """Browser pages: a foreign Origin or Host is a 403; CORS preflights; JSON bodies only."""
        refusal = self._refuse_page(request)
        if refusal is not None:
            return refusal
        route_error = request.match_info.http_exception  # 404, 405: those answers come first
        if request.method == hdrs.METH_OPTIONS and not isinstance(route_error, web.HTTPNotFound):
            return self._preflight(request, route_error)
        if request.method == hdrs.METH_POST and route_error is None and request.content_type != "application/json":
            sent = request.headers.get(hdrs.CONTENT_TYPE, "no Content-Type")
            message = f"the body must be JSON sent as Content-Type: application/json; got {sent[:80]}"
            return web.json_response(error_body(message, code="unsupported_media_type"), status=415)
        return await handler(request)

    def host_allowed(self, name: str) -> bool:
        """Whether a request may name the server `name` (its Host header, without the port). On
        loopback: loopback names; beyond it without a key: IP addresses and this machine's names;
        with a key, any. `--allow-host` names beside them. A page whose name was rebound to this
        machine's address (DNS rebinding) sends its own name: refused."""
        name = _normal_host(name)
        if is_loopback(name) or name in self.allow_hosts or "*" in self.allow_hosts:
            return True
        if self._loopback_only:
            return False
        return bool(self.api_key) or name in self.host_names or _is_ip_address(name)

    def _refuse_page(self, request: web.Request) -> web.Response | None:
        host = request.headers.get(hdrs.HOST)
        if host is not None and not self.host_allowed(host_of(host)):
            return web.json_response(self._host_refusal(host), status=403)
        origin = request.headers.get(hdrs.ORIGIN)
        if origin is not None and not self.origin_allowed(origin):
            message = (
                f"a page from {origin[:80]!r} may not call this server: only pages from this machine and those "
                "given with --allow-origin may"
            )
            return web.json_response(error_body(message, "permission_error", code="origin_not_allowed"), status=403)
        return None

    def _host_refusal(self, host: str) -> dict:
        name = host_of(host)[:80]
        if self._loopback_only:
            answers = "a server on a loopback address answers to localhost, 127.0.0.1 or [::1] only"
        else:
            names = ", ".join(sorted({"localhost", *self.host_names}))
            answers = (
                f"a server beyond loopback without an API key answers to IP addresses and this machine's names ({names}) only"
            )
        message = (
            f"the Host {host[:80]!r} is not this machine: {answers} (a page whose name was rebound to this address "
            f"is refused); if {name!r} is a name of this server, start it with --allow-host {name}"
        )
        return error_body(message, "permission_error", code="host_not_allowed")

    def _preflight(self, request: web.Request, route_error) -> web.Response:
        """A CORS preflight (or a plain OPTIONS) for a path that exists: the methods and headers a page may use."""
        methods = ", ".join(sorted({*getattr(route_error, "allowed_methods", ()), hdrs.METH_OPTIONS}))
        headers = {hdrs.ALLOW: methods}
        if hdrs.ORIGIN in request.headers:  # allowed, or _refuse_page would have answered
            asked = request.headers.get(hdrs.ACCESS_CONTROL_REQUEST_HEADERS, "Authorization, Content-Type")
            headers |= {
                hdrs.ACCESS_CONTROL_ALLOW_METHODS: methods,
                hdrs.ACCESS_CONTROL_ALLOW_HEADERS: asked,
                hdrs.ACCESS_CONTROL_MAX_AGE: str(PREFLIGHT_MAX_AGE_S),
            }
        return web.Response(status=204, headers=headers)

    async def _on_prepare(self, request: web.Request, response: web.StreamResponse) -> None:
        """Every response, as its head goes out: an allowed page may read it."""
        request[_PREPARED] = True
        origin = request.headers.get(hdrs.ORIGIN)
        if origin is not None and self.origin_allowed(origin):
            response.headers[hdrs.ACCESS_CONTROL_ALLOW_ORIGIN] = origin
            response.headers.add(hdrs.VARY, hdrs.ORIGIN)

    @web.middleware
    async def _read_body(self, request: web.Request, handler):
        """The whole body within body_timeout_s (read here; the handler's read() gets it again), else a 408."""
        if request.method == hdrs.METH_POST and request.match_info.http_exception is None:
            try:
                async with asyncio.timeout(self.body_timeout_s):
                    await request.read()
            except TimeoutError:
                message = f"the request body did not arrive within {self.body_timeout_s:g} s"
                response = web.json_response(error_body(message, code="request_timeout"), status=408)
                response.force_close()  # the rest of the body may still be coming
                return response
        return await handler(request)

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
            return web.json_response(error_body(str(e), param=e.param, code=e.code), status=400)
        except NotFound as e:  # a response id not kept (never stored, deleted or dropped): as OpenAI answers
            return web.json_response(error_body(str(e), param=e.param, code="not_found"), status=404)
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
        except web.RequestPayloadError as e:  # a body that breaks HTTP's framing (chunks, length)
            return web.json_response(error_body(f"the request body could not be read: {e}"), status=400)
        except ConnectionError:
            raise  # the client left: nobody to answer
        except Exception as e:  # a bug: the client is told so, never with a 4xx that blames its request
            if request.get(_PREPARED):
                raise  # the status line is gone: aiohttp logs it and drops the connection
            log.exception("%s %s failed", request.method, request.path)
            body = error_body(f"internal server error: {type(e).__name__}: {e}", "server_error")
            return web.json_response(body, status=500)


def _normal_origin(origin: str) -> str:
    return origin.strip().rstrip("/").lower()


def _normal_host(name: str) -> str:
    return name.strip().rstrip(".").lower()


def _names_of_this_machine() -> frozenset[str]:
    return frozenset(_normal_host(n) for n in (socket.gethostname(), socket.getfqdn()) if n)


def _is_ip_address(name: str) -> bool:
    try:
        ipaddress.ip_address(name)
    except ValueError:
        return False
    return True


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
