"""`GET /v1/models`: each loaded model, where it went and what the build runs on."""

from __future__ import annotations

from aiohttp import web

from .submit import SERVER


async def models(request: web.Request) -> web.Response:
    server = request.app[SERVER]
    data = [_model(server, name, info) for name, info in server.client.models.items()]
    return web.json_response({"object": "list", "data": data})


def _model(server, name: str, info) -> dict:
    # n_ctx: the KV pool's cells, every sequence's together; n_ctx_seq: what one request may hold
    meta = {"n_ctx": info.n_ctx, "n_ctx_seq": info.n_ctx_seq, "n_ctx_train": info.n_ctx_train}
    meta |= {"n_params": info.n_params, "size": info.size_bytes}
    # where the model went (layers offloaded, the KV pool's memory) and what the build can run on
    meta |= {**info.as_json(), "placement": info.placement(), "build": info.build.as_json() if info.build else None}
    # llama-server's word for a model that reads pictures beside text
    capabilities = ["completion", "multimodal"] if info.sees_images else ["completion"]
    return {
        "id": name,
        "object": "model",
        "created": server.created,
        "owned_by": "batch-playground",
        "capabilities": capabilities,
        "meta": meta,
    }
