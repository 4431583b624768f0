"""Small GGUF files for the tests of the model files and the library: written by the llama.cpp
project's own writer, or a real model's first bytes."""

from __future__ import annotations

from pathlib import Path

import gguf
import numpy as np


def write_gguf(path: Path, arch: str = "llama", tensors: int = 3, split_max_tensors: int = 0, **keys) -> None:
    """A small GGUF written by the llama.cpp project's own writer: `tensors` F32 matrices of 64x32,
    general.type, a context length and a chat template when given (type=, context=, template=)."""
    writer = gguf.GGUFWriter(str(path), arch, split_max_tensors=split_max_tensors)
    if "type" in keys:
        writer.add_type(keys["type"])
    if "context" in keys:
        writer.add_context_length(keys["context"])
    if "template" in keys:
        writer.add_chat_template(keys["template"])
    for i in range(tensors):
        writer.add_tensor(f"blk.{i}.weight", np.zeros((64, 32), dtype=np.float32))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()


def copy_head(src: str, dst: Path, n_bytes: int) -> Path:
    with open(src, "rb") as f:
        dst.write_bytes(f.read(n_bytes))
    return dst


def with_tokens_renamed(src: str, dst: Path, renames: dict[int, str], template: str) -> str:
    """A copy of the model `src` whose tokens `renames` names spell new texts (their kind kept: a
    control token stays one) and whose chat template is `template`: a family's control tokens
    (gpt-oss's <|channel|>) in a model that has none, its weights as they were."""
    from gguf.scripts.gguf_new_metadata import MetadataDetails, copy_with_new_metadata, get_field_data

    reader = gguf.GGUFReader(src, "r")
    tokens = list(get_field_data(reader, gguf.Keys.Tokenizer.LIST))
    for token, text in renames.items():
        tokens[token] = text
    writer = gguf.GGUFWriter(str(dst), arch=get_field_data(reader, gguf.Keys.General.ARCHITECTURE), endianess=reader.endianess)
    array, string = gguf.GGUFValueType.ARRAY, gguf.GGUFValueType.STRING
    metadata = {
        gguf.Keys.Tokenizer.LIST: MetadataDetails(array, tokens, sub_type=string),
        gguf.Keys.Tokenizer.CHAT_TEMPLATE: MetadataDetails(string, template),
    }
    copy_with_new_metadata(reader, writer, metadata, [])
    return str(dst)
