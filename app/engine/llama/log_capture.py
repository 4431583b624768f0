"""llama.cpp's log, kept quiet: its last lines (the reason a load failed) and every line of a load in
progress, read back for where the model went (`placement_from_log`)."""

from __future__ import annotations

import re
import threading
from contextlib import contextmanager

import llama_cpp as ll

_load_lock = threading.Lock()  # one load at a time: its log lines are read back to see where the model went
_log_tail: list[str] = []  # last lines llama.cpp logged: the reason a load failed
_load_log: list[str] | None = None  # every line of the load in progress
_MIB = 1 << 20


@ll.llama_log_callback
def on_log(level: int, text: bytes, _user_data) -> None:
    # keep llama.cpp quiet, but remember what it said so a failed load can tell why
    line = text.decode("utf-8", errors="replace").strip()
    if line:
        _log_tail.append(line)
        del _log_tail[:-20]
        if _load_log is not None:
            _load_log.append(line)


@contextmanager
def recording_load():
    """Keep every line llama.cpp logs meanwhile: where it put the weights and the KV pool."""
    global _load_log
    with _load_lock:
        _load_log = lines = []
        try:
            yield lines
        finally:
            _load_log = None


def forget_tail() -> None:
    """Forget the lines logged so far, before a call whose failure `last_error` will explain."""
    _log_tail.clear()


def last_error() -> str:
    for line in reversed(_log_tail):
        low = line.lower()
        if "error" in low or "failed" in low or "invalid" in low:
            return line.split(": ", 1)[-1] if line.startswith("llama_") else line
    return ""


def placement_from_log(lines: list[str]) -> dict:
    """Where llama.cpp put the model, from what it logged while loading: the layers it offloaded, the
    size of each weights buffer and of each KV buffer, the cache types, whether flash attention is on."""
    place: dict = {"weights": [], "kv_devices": [], "notices": []}
    kv_mib = 0.0
    for line in lines:
        if m := re.search(r"offloaded (\d+)/(\d+) layers to GPU", line):
            place["gpu_layers"] = int(m.group(1))
        elif m := re.search(r"(\S+) model buffer size =\s*([\d.]+) MiB", line):
            place["weights"].append((m.group(1), round(float(m.group(2)) * _MIB)))
        elif m := re.search(r"(\S+) KV buffer size =\s*([\d.]+) MiB", line):
            kv_mib += float(m.group(2))
            place["kv_devices"].append(m.group(1))
        elif m := re.search(r"K \((\w+)\):.*V \((\w+)\):", line):
            place["kv_types"] = (m.group(1), m.group(2))
        elif (m := re.search(r"flash_attn\s*=\s*(enabled|disabled)", line)) or (
            m := re.search(r"Flash Attention (enabled|disabled)", line)
        ):
            place["flash_attn"] = "on" if m.group(1) == "enabled" else "off"
        elif "mlock" in line.lower() and ("failed" in line.lower() or "warning" in line.lower()):
            place["notices"].append(f"mlock failed: {line.split(': ', 1)[-1]}")
    if kv_mib:
        place["kv_bytes"] = round(kv_mib * _MIB)
    return place
