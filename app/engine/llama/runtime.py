"""llama.cpp's process-wide start, once: its log routed to `log_capture`, its backends initialised,
and glibc told to give large buffers back."""

from __future__ import annotations

import ctypes
import threading

import llama_cpp as ll

from .log_capture import on_log

_backend_lock = threading.Lock()
_backend_ready = False


def init_backend() -> None:
    global _backend_ready
    with _backend_lock:
        if not _backend_ready:
            ll.llama_log_set(on_log, ctypes.c_void_p(0))
            ll.llama_backend_init()
            _return_large_buffers_to_the_system()
            _backend_ready = True


# glibc's M_MMAP_THRESHOLD: from this size on a buffer is its own mapping, given back when freed
_M_MMAP_THRESHOLD, _LARGE_BUFFER = -3, 1 << 20


def _return_large_buffers_to_the_system() -> None:
    """The RAM tier allocates and frees sequence states of megabytes. glibc raises its mapping
    threshold to the largest buffer freed, so later ones come from the heap, which keeps what they
    freed: a 10-minute soak grew the server's memory 13% beyond the tier's own bytes (a probe of
    the same pattern: 40% over what it held, against none with the threshold fixed). Fixing it
    keeps large buffers mapped. Elsewhere than glibc there is nothing to do."""
    try:
        libc = ctypes.CDLL("libc.so.6")
    except OSError:
        return
    libc.mallopt(_M_MMAP_THRESHOLD, _LARGE_BUFFER)
