"""`POST /tokenize` and `POST /detokenize`, as llama-server has them: a text to the model's token ids
(with each token's piece, if asked) and ids back to text; a logit bias names tokens by these ids."""

from __future__ import annotations

from aiohttp import web

from ..protocol import BadRequest, check_text, get_field, parse_json, requested_model, shown
from .submit import SERVER

MAX_TOKENIZE_CHARS = 2**20  # read on the prompt thread, which the requests' prompts wait for
MAX_DETOKENIZE = 2**20  # ids in one request


async def tokenize(request: web.Request) -> web.Response:
    """{"content": text, or a list of texts and token ids; "add_special": false; "parse_special":
    true; "with_pieces": false} -> {"tokens": ids, or [{"id", "piece"}]}."""
    server = request.app[SERVER]
    body = parse_json(await request.read())
    model, _ = server.pick_model(requested_model(body))
    add_special = get_field(body, "add_special", bool, False)
    parse_special = get_field(body, "parse_special", bool, True)
    with_pieces = get_field(body, "with_pieces", bool, False)
    tokens = []
    for i, part in enumerate(_content(body)):  # BOS, if asked, before the first part only (llama-server's rule)
        if isinstance(part, str):
            tokens += await server.client.tokenize(part, model, add_special and i == 0, parse_special)
        else:
            tokens.append(part)
    if not with_pieces:
        return web.json_response({"tokens": tokens})
    pieces = await _spelled(server, tokens, model)
    return web.json_response({"tokens": [{"id": t, "piece": _piece(p)} for t, p in zip(tokens, pieces, strict=True)]})


async def detokenize(request: web.Request) -> web.Response:
    """{"tokens": ids} -> {"content": their text}."""
    server = request.app[SERVER]
    body = parse_json(await request.read())
    model, _ = server.pick_model(requested_model(body))
    tokens = get_field(body, "tokens", list, [])
    if len(tokens) > MAX_DETOKENIZE or not all(type(t) is int for t in tokens):
        raise BadRequest(f"'tokens' must be a list of at most {MAX_DETOKENIZE} token ids", "tokens")
    try:
        content = await server.client.detokenize(tokens, model)
    except ValueError as e:
        raise BadRequest(str(e), "tokens") from None
    return web.json_response({"content": content})


def _content(body: dict) -> list:
    """The text to tokenize, as parts: texts, and token ids kept as they are."""
    content = body.get("content")
    if content is None:
        return []
    parts = [content] if isinstance(content, str) else content
    if not isinstance(parts, list) or not all(isinstance(p, str) or type(p) is int for p in parts):
        raise BadRequest(f"'content' must be a text, or a list of texts and token ids; got {shown(content)}", "content")
    if sum(len(p) for p in parts if isinstance(p, str)) + len(parts) > MAX_TOKENIZE_CHARS:
        raise BadRequest(f"'content' holds more than {MAX_TOKENIZE_CHARS} characters", "content")
    return [check_text(p, "content") if isinstance(p, str) else p for p in parts]


async def _spelled(server, tokens: list[int], model: str) -> list[bytes]:
    try:
        return await server.client.spell(tokens, model)
    except ValueError as e:  # an id given in the content that the model does not have
        raise BadRequest(str(e), "content") from None


def _piece(piece: bytes):
    """A token's piece as text, or its bytes where they are not whole UTF-8 characters (llama-server's form)."""
    try:
        return piece.decode("utf-8")
    except UnicodeDecodeError:
        return list(piece)
