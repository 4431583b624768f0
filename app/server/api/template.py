"""The chat template, as llama-server shows it: `POST /apply-template` (a chat completion's body ->
the prompt its model's chat template makes of it, `{"prompt": text}`, nothing generated: what the
model reads, with the template's polyfills and a continued last message) and `GET /props` (the
template, what it renders and what is polyfilled for it, the model's slots and context)."""

from __future__ import annotations

from aiohttp import web

from app.client import new_request_id
from app.engine.errors import RequestError
from app.engine.sequence import Request

from ..protocol import BadRequest, parse_chat, parse_json, requested_model
from .submit import SERVER, tool_syntax


async def apply_template(request: web.Request) -> web.Response:
    server = request.app[SERVER]
    body = parse_json(await request.read())
    model, info = server.pick_model(requested_model(body))
    job = parse_chat(body, info.n_ctx_seq, await tool_syntax(body, info), server.thinking)
    chat = Request(
        new_request_id(),
        job.params,
        messages=job.messages,
        model=model,
        template_kwargs=job.thinking.template_kwargs or None,
        continue_final=job.continue_final,
        add_generation_prompt=job.add_generation_prompt,
    )
    try:
        prompt = await server.client.apply_template(chat)
    except RequestError as e:  # the template refused the chat, or ran over its budget
        raise BadRequest(str(e), "messages") from None
    return web.json_response({"prompt": prompt})


async def props(request: web.Request) -> web.Response:
    """llama-server's `/props` for a model (`?model=NAME`, else the default): its chat template and
    `chat_template_caps` (what the template renders, found by rendering), our polyfills in words,
    its parallel sequences, each one's context, whether it sees pictures."""
    server = request.app[SERVER]
    name, info = server.pick_model(request.query.get("model"))
    source, caps = await server.client.template_facts(name)
    return web.json_response(
        {
            "model_alias": name,
            "model_path": info.path,
            "total_slots": server.client.config_of(name).capacity,
            "default_generation_settings": {"n_ctx": info.n_ctx_seq},
            "chat_template": source,
            "chat_template_caps": caps.as_json(),
            "chat_template_polyfills": list(caps.polyfilled),
            "modalities": {"vision": info.sees_images, "audio": False},
        }
    )
