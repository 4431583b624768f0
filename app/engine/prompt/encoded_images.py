"""`EncodedImages`: the pictures a model has seen, read and encoded once on the prompt thread and kept
by their hash within a memory budget, so a picture sent again (the next turn re-sends the chat, a
second pane shows the same one) costs no second encode.

Each distinct picture gets a key for the engine's life (a few bytes a picture): its tokens'
placeholder ids (images.py) stay the same however often it comes back, which is what lets the KV
cache find its cells again."""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass
from typing import Protocol

import numpy as np

from ..images import Image, image_tokens
from ..positions import PictureLayout

DEFAULT_BUDGET = 512 << 20  # bytes of embeddings kept (a 576-token picture of a 4096-wide model: 9 MiB)


class ImageReader(Protocol):
    """What llama/vision.py's `Vision` does for the prompt builder."""

    def read(self, image: Image): ...
    def encode(self, read) -> tuple[np.ndarray, float]: ...


@dataclass(frozen=True)
class EncodedImage:
    key: int
    before: tuple[int, ...]  # mtmd's text tokens before the picture's (Gemma 3's <start_of_image>)
    embd: np.ndarray  # (image tokens, the model's embedding size), float32
    after: tuple[int, ...]
    encode_s: float  # what encoding it took, once
    layout: PictureLayout | None = None  # where its tokens sit, when not a position each (M-RoPE)

    @property
    def tokens(self) -> list[int]:
        """Its place in a prompt: the texts around it, a placeholder per image token."""
        return [*self.before, *image_tokens(self.key, len(self.embd)), *self.after]


class EncodedImages:
    def __init__(self, reader: ImageReader, budget_bytes: int = DEFAULT_BUDGET):
        self._reader = reader
        self._budget = budget_bytes
        self._keys: dict[str, int] = {}  # digest -> key, never forgotten
        self._kept: OrderedDict[int, EncodedImage] = OrderedDict()
        self._bytes = 0
        self.encodes = 0  # pictures encoded (a picture kept is not encoded again)

    def get(self, image: Image) -> tuple[EncodedImage, bool]:
        """The picture encoded (RequestError when it cannot be read), and whether it was encoded now."""
        key = self._keys.get(image.digest)
        if key is not None and key in self._kept:
            self._kept.move_to_end(key)
            return self._kept[key], False
        read = self._reader.read(image)
        embd, seconds = self._reader.encode(read)
        key = self._keys.setdefault(image.digest, len(self._keys) + 1)
        encoded = EncodedImage(key, read.before, embd, read.after, seconds, read.layout)
        self.encodes += 1
        self._keep(encoded)
        return encoded, True

    def _keep(self, encoded: EncodedImage) -> None:
        self._kept[encoded.key] = encoded
        self._bytes += encoded.embd.nbytes
        while self._bytes > self._budget and len(self._kept) > 1:  # the one just made stays: its prompt needs it
            _, dropped = self._kept.popitem(last=False)
            self._bytes -= dropped.embd.nbytes

    def __len__(self) -> int:
        return len(self._kept)
