"""What this llama.cpp build runs on: its CPU features and ggml's devices (`build_info`), and whether it has AMX."""

from __future__ import annotations

import ctypes
import re

import llama_cpp as ll

from ..model_info import BuildInfo, Device
from .runtime import init_backend

_DEVICE_KINDS = {0: "CPU", 1: "GPU", 2: "iGPU", 3: "accelerator"}


def build_info() -> BuildInfo:
    """CPU features from llama_print_system_info; devices from ggml's backend device API (found in
    llama-cpp-python's library, which links ggml), or none when it cannot be reached."""
    init_backend()
    text = ll.llama_print_system_info().decode("utf-8", errors="replace")
    features = tuple(m.group(1) for m in re.finditer(r"(\w+) = 1", text))
    return BuildInfo(features, bool(ll.llama_supports_gpu_offload()), _devices())


def _devices() -> tuple[Device, ...]:
    lib = getattr(getattr(ll, "llama_cpp", None), "_lib", None)
    names = ("ggml_backend_dev_count", "ggml_backend_dev_get", "ggml_backend_dev_name", "ggml_backend_dev_memory")
    if lib is None or not all(hasattr(lib, n) for n in names):
        return ()
    lib.ggml_backend_dev_count.restype = ctypes.c_size_t
    lib.ggml_backend_dev_get.argtypes = [ctypes.c_size_t]
    lib.ggml_backend_dev_get.restype = ctypes.c_void_p
    for name in ("ggml_backend_dev_name", "ggml_backend_dev_description"):
        getattr(lib, name).argtypes = [ctypes.c_void_p]
        getattr(lib, name).restype = ctypes.c_char_p
    lib.ggml_backend_dev_type.argtypes = [ctypes.c_void_p]
    lib.ggml_backend_dev_type.restype = ctypes.c_int
    size_p = ctypes.POINTER(ctypes.c_size_t)
    lib.ggml_backend_dev_memory.argtypes = [ctypes.c_void_p, size_p, size_p]
    lib.ggml_backend_dev_memory.restype = None
    devices = []
    for i in range(lib.ggml_backend_dev_count()):
        dev = lib.ggml_backend_dev_get(i)
        free, total = ctypes.c_size_t(0), ctypes.c_size_t(0)
        lib.ggml_backend_dev_memory(dev, ctypes.byref(free), ctypes.byref(total))
        devices.append(
            Device(
                name=lib.ggml_backend_dev_name(dev).decode(errors="replace"),
                description=(lib.ggml_backend_dev_description(dev) or b"").decode(errors="replace"),
                kind=_DEVICE_KINDS.get(lib.ggml_backend_dev_type(dev), "other"),
                free_bytes=free.value,
                total_bytes=total.value,
            )
        )
    return tuple(devices)


def build_has_amx() -> bool:
    """Whether llama.cpp was built with AMX, whose weight packing crashes here (llama.cpp's own tools
    then need --no-repack, as the engine loads without it)."""
    return "AMX_INT8 = 1" in ll.llama_print_system_info().decode("utf-8", errors="replace")
