"""`POST /v1/completions`: a plain text prompt checked (`protocol.py`), its choices served (`choices.py`)."""

from __future__ import annotations

from aiohttp import web

from ..protocol import parse_completion, parse_json, requested_model
from .choices import serve_choices
from .submit import SERVER


async def completions(request: web.Request) -> web.StreamResponse:
    server = request.app[SERVER]
    body = parse_json(await request.read())
    model, info = server.pick_model(requested_model(body))
    return await serve_choices(request, model, parse_completion(body, info.n_ctx_seq))  # a request is one sequence: its room
