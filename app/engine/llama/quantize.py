"""`quantize`: a GGUF model written again in another llama.cpp quantization type, offline."""

from __future__ import annotations

import ctypes
import os

import llama_cpp as ll

from ..errors import ModelLoadError
from ..model_file import check_gguf_file
from .log_capture import forget_tail, last_error
from .runtime import init_backend


def quantize(source: str, target: str, kind: str = "q8_0", n_threads: int = 0) -> None:
    """Write `source` re-quantized as `kind` (llama.cpp's type names: q8_0, q4_k_m, ...) to `target`.

    The comparison users make most (Q4 against Q8) from one file, offline; a quantized source is
    dequantized first (allow_requantize), so the new file is no better than its source.
    """
    ftype = getattr(ll, f"LLAMA_FTYPE_MOSTLY_{kind.upper()}", None)
    if ftype is None:
        raise ValueError(f"unknown quantization type {kind!r}")
    check_gguf_file(source)
    init_backend()
    params = ll.llama_model_quantize_default_params()
    params.ftype = ftype
    params.allow_requantize = True
    params.nthread = n_threads  # 0: every core
    forget_tail()
    if ll.llama_model_quantize(source.encode(), target.encode(), ctypes.byref(params)) != 0:
        raise ModelLoadError(f"cannot quantize {os.path.basename(source)}: {last_error() or 'llama.cpp refused it'}")
