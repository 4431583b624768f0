"""Images in a chat: `Image` (a picture's bytes and their hash), the marker that stands for one in a
message's text, and the placeholder ids that stand for its tokens in a sequence's token list.

A message that shows pictures carries them under "images", in order, and its "content" holds
IMAGE_MARKER where each one goes (`with_images`). The prompt builder renders the chat with the
markers in it, then puts each picture's tokens in its marker's place: mtmd's own texts around it
(Gemma 3's <start_of_image>), then one placeholder id per image token. A placeholder is negative, so
it is never a vocabulary id; it names the picture by a key the prompt builder gives each hash, and
the token's place in it. Two chats with the same picture hold the same ids, so the KV cache's
prefix reuse finds its cells as it finds a text's (llama-server keys them by the hash too).
"""

from __future__ import annotations

import hashlib
from array import array
from dataclasses import dataclass, field

import numpy as np

# what stands for a picture in a message's text: llama.cpp's mtmd splits the rendered prompt on it
IMAGE_MARKER = "<__image__>"
_OFFSET_BITS = 24  # an image of up to 16 million tokens; its key above them
_OFFSET_MASK = (1 << _OFFSET_BITS) - 1


@dataclass(frozen=True, eq=False)
class Image:
    """A picture as sent: its file's bytes (PNG, JPEG, GIF or BMP) and their SHA-256, which names it."""

    data: bytes = field(repr=False)
    digest: str

    @staticmethod
    def of(data: bytes) -> Image:
        return Image(bytes(data), hashlib.sha256(data).hexdigest())

    def __eq__(self, other) -> bool:
        return isinstance(other, Image) and other.digest == self.digest

    def __hash__(self) -> int:
        return hash(self.digest)


def with_images(text: str, images: tuple[Image, ...] | list[Image], role: str = "user") -> dict:
    """A message showing `images` before its `text` (as a pane sends them)."""
    if not images:
        return {"role": role, "content": text}
    return {"role": role, "content": IMAGE_MARKER * len(images) + text, "images": tuple(images)}


def images_of(message: dict) -> tuple[Image, ...]:
    return tuple(message.get("images") or ())


def image_token(key: int, offset: int) -> int:
    """The placeholder id of the `offset`-th token of the picture keyed `key` (key >= 1)."""
    return -1 - ((key << _OFFSET_BITS) | offset)


def is_image_token(token: int) -> bool:
    return token < 0


def image_key(token: int) -> tuple[int, int]:
    """(key, offset) of a placeholder id."""
    value = -1 - token
    return value >> _OFFSET_BITS, value & _OFFSET_MASK


def image_tokens(key: int, n: int) -> list[int]:
    return [image_token(key, i) for i in range(n)]


def count_image_tokens(tokens) -> int:
    return sum(1 for t in tokens if t < 0)


def picture_runs(tokens, start: int = 0, end: int | None = None) -> list[tuple[int, int]]:
    """The [first, last + 1) runs of `tokens[start:end]` that are pictures' placeholders, a run a
    picture (two pictures side by side are two runs), found with numpy rather than a loop a token."""
    a = np.frombuffer(array("q", tokens[start:end]), np.int64)  # a list's ints to numpy at C speed
    picture = a < 0
    if not picture.any():
        return []
    first = picture.copy()  # a picture's token after a text's, or a picture's first token
    first[1:] &= ~picture[:-1] | (((-1 - a[1:]) & _OFFSET_MASK) == 0)
    last = picture.copy()  # a picture's token before a text's or before another picture's first
    last[:-1] &= ~picture[1:] | first[1:]
    return [(start + int(i), start + int(j) + 1) for i, j in zip(np.flatnonzero(first), np.flatnonzero(last), strict=True)]
