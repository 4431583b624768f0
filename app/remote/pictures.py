"""A chat's pictures as a remote endpoint takes them: a message's text and pictures as content parts
in order, each picture a data: URI (the chat API's `image_url`, the Responses API's `input_image`)."""

from __future__ import annotations

import base64
from functools import lru_cache

from app.engine.image_file import mime_of
from app.engine.images import IMAGE_MARKER, Image


@lru_cache(maxsize=64)  # a chat sends its pictures again each turn: encoded once
def data_uri(image: Image) -> str:
    return f"data:{mime_of(image.data)};base64,{base64.b64encode(image.data).decode('ascii')}"


def chat_turn(message: dict) -> dict:
    """A message for the chat API: its text alone, or text and `image_url` parts."""
    return _turn(message, "text", lambda image: {"type": "image_url", "image_url": {"url": data_uri(image)}})


def responses_turn(message: dict) -> dict:
    """A message for the Responses API: its text alone, or `input_text` and `input_image` parts."""
    return _turn(message, "input_text", lambda image: {"type": "input_image", "image_url": data_uri(image)})


def _turn(message: dict, text_type: str, image_part) -> dict:
    images = message.get("images") or ()
    if not images:
        return {"role": message["role"], "content": message["content"]}
    parts = []
    pieces = message["content"].split(IMAGE_MARKER)
    for i, piece in enumerate(pieces):
        if piece:
            parts.append({"type": text_type, "text": piece})
        if i < len(images):
            parts.append(image_part(images[i]))
    return {"role": message["role"], "content": parts}
