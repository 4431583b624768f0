"""`check_gguf_file`: whether a path can be a GGUF model, from its `stat` and header, before llama.cpp opens it;
`find_projector` (the model library's): the vision projector beside a model."""

from __future__ import annotations

import os
import re
import stat

from app.models.library import find_projector as find_projector

from .errors import ModelLoadError

_GGUF_MAGIC = b"GGUF"
_SPLIT_NAME = re.compile(r"(.+)-(\d{5})-of-(\d{5})\.gguf", re.DOTALL)


def check_gguf_file(path: str) -> None:
    """Raise ModelLoadError with a one-line reason if `path` cannot be a GGUF model."""
    if not path:
        raise ModelLoadError("no model file given")
    try:
        mode = os.stat(path).st_mode  # never blocks, where opening a FIFO waits for a writer forever
    except FileNotFoundError:
        raise ModelLoadError(f"model file not found: {path}") from None
    except OSError as e:
        raise ModelLoadError(f"cannot read model file {path}: {e.strerror}") from e
    if stat.S_ISDIR(mode):
        raise ModelLoadError(f"model path is a folder, not a GGUF file: {path}")
    if not stat.S_ISREG(mode):
        raise ModelLoadError(f"model path is {_file_kind(mode)}, not a GGUF file: {path}")
    for part in _other_parts(path):  # llama.cpp opens them by these names
        if os.path.exists(part) and not os.path.isfile(part):
            raise ModelLoadError(f"a part of this split model is {_file_kind(os.stat(part).st_mode)}, not a GGUF file: {part}")
    try:
        with open(path, "rb") as f:
            magic = f.read(4)
    except OSError as e:
        raise ModelLoadError(f"cannot read model file {path}: {e.strerror}") from e
    if magic != _GGUF_MAGIC:
        raise ModelLoadError(f"not a GGUF model file (bad header): {path}")


def _other_parts(path: str) -> list[str]:
    """The other files of a split model (its name ends -00001-of-0000N.gguf), named as llama.cpp names them."""
    match = _SPLIT_NAME.fullmatch(path)
    if match is None:
        return []
    prefix, n = match.group(1), int(match.group(3))
    return [f"{prefix}-{i:05d}-of-{n:05d}.gguf" for i in range(1, n + 1) if i != int(match.group(2))]


def _file_kind(mode: int) -> str:
    kinds = (
        (stat.S_ISFIFO, "a FIFO (named pipe)"),
        (stat.S_ISSOCK, "a socket"),
        (stat.S_ISCHR, "a device"),
        (stat.S_ISBLK, "a device"),
    )
    return next((name for test, name in kinds if test(mode)), "not a regular file")
