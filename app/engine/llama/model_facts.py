"""A loaded model's facts from llama.cpp: its GGUF metadata values, its description, what one KV cell holds."""

from __future__ import annotations

import ctypes

import llama_cpp as ll

from app.models.gguf_meta import format_params

from ..kv.pool import KVShape


def meta_value(model, key: str) -> str | None:
    """The model's GGUF metadata value under `key` as text, or None when it has none."""
    buf = ctypes.create_string_buffer(1 << 16)
    n = ll.llama_model_meta_val_str(model, key.encode(), buf, len(buf))
    if n < 0:
        return None
    if n >= len(buf):  # long chat templates
        buf = ctypes.create_string_buffer(n + 1)
        ll.llama_model_meta_val_str(model, key.encode(), buf, len(buf))
    return buf.value.decode("utf-8", errors="replace")


def description(model) -> str:
    """The model's architecture, size and quantization, e.g. "llama 135M Q4_1": llama.cpp's description
    with the size counted from the weights, as the model library and About say it (llama.cpp names a
    size from the layer count alone: "256M" for SmolLM2-135M)."""
    buf = ctypes.create_string_buffer(256)
    ll.llama_model_desc(model, buf, len(buf))
    arch, _size, quant = (buf.value.decode("utf-8", errors="replace").split(" ", 2) + ["", ""])[:3]
    return " ".join(filter(None, (arch, format_params(ll.llama_model_n_params(model)), quant)))


def kv_shape(model) -> KVShape:
    """What one KV cell holds, from the model: layers, and per layer the K and V row widths."""
    n_head = max(1, ll.llama_model_n_head(model))
    n_head_kv = ll.llama_model_n_head_kv(model) or n_head
    arch = meta_value(model, "general.architecture") or ""
    head_k = _int(meta_value(model, f"{arch}.attention.key_length")) or ll.llama_model_n_embd(model) // n_head
    head_v = _int(meta_value(model, f"{arch}.attention.value_length")) or head_k
    return KVShape(ll.llama_model_n_layer(model), head_k * n_head_kv, head_v * n_head_kv)


def _int(text: str | None) -> int:
    try:
        return int(text) if text else 0
    except ValueError:
        return 0
