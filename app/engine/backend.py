"""The engine's only door to llama.cpp: model, context, batch, samplers, tokenizer, chat template.

Nothing else imports llama_cpp.

Threads (engine_thread.py): a backend is built (model loaded, context created) on the thread that
builds its Engine: the engine thread for the first model, the loader thread for every later load or
reload, while the engine thread goes on decoding with the others. Once handed over, the engine
thread alone decodes, samples and changes the KV memory. The prompt thread reads the tokenizer
meanwhile (`tokenize`, `spell`, and what the load read: the chat template, the special texts,
`n_vocab`): llama.cpp's vocabulary does not change after the load, so that runs beside a decode.
No lock guards the model: `close` runs on the prompt thread itself, queued after any prompt being
built with it (on the engine thread only when the prompt thread has ended, or for a model no prompt
ever read: a load refused at hand-over). The module's functions run on any thread; loads take
turns (`_load_lock`), as each reads back its own log.
"""

from __future__ import annotations

import ctypes
import math
import os
import re
import stat
import threading
from contextlib import contextmanager
from dataclasses import dataclass
from itertools import chain

import llama_cpp as ll
import numpy as np

from .errors import ModelLoadError
from .params import GPU_LAYERS_ALL, CacheType, EngineConfig, FlashAttn, SamplingParams
from .pool import KVShape, LayoutChoice, choose_layout, default_pool, format_bytes, free_memory_bytes, halvings
from .probs import TokenProbs, token_probs

_GGUF_MAGIC = b"GGUF"
_TOKEN_DATA = np.dtype([("id", np.int32), ("logit", np.float32), ("p", np.float32)])  # llama_token_data
_backend_lock = threading.Lock()
_load_lock = threading.Lock()  # one load at a time: its log lines are read back to see where the model went
_backend_ready = False
_log_tail: list[str] = []  # last lines llama.cpp logged: the reason a load failed
_load_log: list[str] | None = None  # every line of the load in progress

_CACHE_GGML_TYPES = {CacheType.F16: ll.GGML_TYPE_F16, CacheType.Q8_0: ll.GGML_TYPE_Q8_0, CacheType.Q4_0: ll.GGML_TYPE_Q4_0}
_FLASH_ATTN_TYPES = {
    FlashAttn.ON: ll.LLAMA_FLASH_ATTN_TYPE_ENABLED,
    FlashAttn.OFF: ll.LLAMA_FLASH_ATTN_TYPE_DISABLED,
    FlashAttn.AUTO: ll.LLAMA_FLASH_ATTN_TYPE_AUTO,
}


@ll.llama_log_callback
def _on_log(level: int, text: bytes, _user_data) -> None:
    # keep llama.cpp quiet, but remember what it said so a failed load can tell why
    line = text.decode("utf-8", errors="replace").strip()
    if line:
        _log_tail.append(line)
        del _log_tail[:-20]
        if _load_log is not None:
            _load_log.append(line)


@contextmanager
def _recording_load():
    """Keep every line llama.cpp logs meanwhile: where it put the weights and the KV pool."""
    global _load_log
    with _load_lock:
        _load_log = lines = []
        try:
            yield lines
        finally:
            _load_log = None


def _init_backend() -> None:
    global _backend_ready
    with _backend_lock:
        if not _backend_ready:
            ll.llama_log_set(_on_log, ctypes.c_void_p(0))
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


@dataclass(frozen=True)
class Device:
    """One ggml backend device: the CPU, a GPU, an accelerator."""

    name: str
    description: str
    kind: str  # "CPU", "GPU", "iGPU", "accelerator"
    free_bytes: int
    total_bytes: int

    def __str__(self) -> str:
        memory = f", {format_bytes(self.total_bytes)} ({format_bytes(self.free_bytes)} free)" if self.total_bytes else ""
        return f"{self.name} ({self.kind}): {self.description}{memory}"


@dataclass(frozen=True)
class BuildInfo:
    """What this llama.cpp build can run on."""

    cpu_features: tuple[str, ...]  # those llama_print_system_info reports as present
    gpu_offload: bool  # llama_supports_gpu_offload: a GPU backend is built in
    devices: tuple[Device, ...]  # empty when the device API cannot be reached

    @property
    def gpus(self) -> tuple[Device, ...]:
        return tuple(d for d in self.devices if d.kind != "CPU")

    def summary(self) -> str:
        """One line: "CPU only (AVX2, ...)" or the GPUs and their memory."""
        cpu = f"CPU features: {' '.join(self.cpu_features) or 'none reported'}"
        if not self.gpu_offload or not self.gpus:
            return f"CPU only · {cpu}"
        return " · ".join([*(str(d) for d in self.gpus), cpu])

    def as_json(self) -> dict:
        return {
            "gpu_offload": self.gpu_offload,
            "cpu_features": list(self.cpu_features),
            "devices": [d.__dict__ for d in self.devices],
            "summary": self.summary(),
        }


@dataclass(frozen=True)
class ModelInfo:
    """What the user sees of a loaded model: its facts, and where llama.cpp put it."""

    path: str
    name: str
    description: str  # e.g. "llama 135M Q4_1"
    size_bytes: int
    n_params: int
    n_ctx_train: int  # the context the model was trained on
    n_ctx: int  # the KV pool's cells as allocated, every sequence's together (llama_n_ctx)
    n_ctx_seq: int  # what one sequence may hold (llama_n_ctx_seq): the whole pool, or its stream of it
    n_layer: int = 0
    gpu_layers: int = 0  # layers offloaded to a GPU
    weights: tuple[tuple[str, int], ...] = ()  # (llama.cpp's buffer, bytes): "CPU_Mapped", "CUDA0", ...
    kv_bytes: int = 0  # the KV pool's memory
    kv_bytes_per_cell: int = 0
    kv_devices: tuple[str, ...] = ()  # where the pool lives
    cache_type_k: str = "f16"
    cache_type_v: str = "f16"
    flash_attn: str = "auto"  # what llama.cpp chose: "on", "off" (or "auto" when it did not say)
    pool_reason: str = ""  # how the pool's size was chosen
    kv_layout: str = "one pool"  # or "a stream per sequence (8 × 8192 cells)", with how it was chosen
    has_chat_template: bool = True  # False: a base model (chats are rendered in ChatML; completion suits it better)
    notices: tuple[str, ...] = ()  # settings the build or the model could not honour, and what was done instead
    build: BuildInfo | None = None

    def placement(self) -> str:
        """Where the model went, in one line."""
        weights = ", ".join(f"{name} {format_bytes(size)}" for name, size in self.weights) or "?"
        kv_where = "/".join(self.kv_devices) or "?"
        return (
            f"{self.gpu_layers}/{self.n_layer + 1} layers on a GPU · weights: {weights} · "
            f"KV pool: {self.n_ctx} cells, {format_bytes(self.kv_bytes)} on {kv_where} "
            f"(K {self.cache_type_k}, V {self.cache_type_v}, flash attention {self.flash_attn})"
        )

    def as_json(self) -> dict:
        return {
            "n_layer": self.n_layer,
            "gpu_layers": self.gpu_layers,
            "weights_bytes": dict(self.weights),
            "kv_bytes": self.kv_bytes,
            "kv_bytes_per_cell": self.kv_bytes_per_cell,
            "chat_template": self.has_chat_template,
            "kv_devices": list(self.kv_devices),
            "cache_type_k": self.cache_type_k,
            "cache_type_v": self.cache_type_v,
            "flash_attn": self.flash_attn,
            "pool": self.pool_reason,
            "kv_layout": self.kv_layout,
            "notices": list(self.notices),
        }


_DEVICE_KINDS = {0: "CPU", 1: "GPU", 2: "iGPU", 3: "accelerator"}


def build_info() -> BuildInfo:
    """CPU features from llama_print_system_info; devices from ggml's backend device API (found in
    llama-cpp-python's library, which links ggml), or none when it cannot be reached."""
    _init_backend()
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


def quantize(source: str, target: str, kind: str = "q8_0", n_threads: int = 0) -> None:
    """Write `source` re-quantized as `kind` (llama.cpp's type names: q8_0, q4_k_m, ...) to `target`.

    The comparison users make most (Q4 against Q8) from one file, offline; a quantized source is
    dequantized first (allow_requantize), so the new file is no better than its source.
    """
    ftype = getattr(ll, f"LLAMA_FTYPE_MOSTLY_{kind.upper()}", None)
    if ftype is None:
        raise ValueError(f"unknown quantization type {kind!r}")
    check_gguf_file(source)
    _init_backend()
    params = ll.llama_model_quantize_default_params()
    params.ftype = ftype
    params.allow_requantize = True
    params.nthread = n_threads  # 0: every core
    _log_tail.clear()
    if ll.llama_model_quantize(source.encode(), target.encode(), ctypes.byref(params)) != 0:
        raise ModelLoadError(f"cannot quantize {os.path.basename(source)}: {_last_error() or 'llama.cpp refused it'}")


class Batch:
    """A llama_batch whose arrays are numpy-owned, so a prompt chunk is one slice assignment.

    Every token belongs to exactly one sequence: shared prefixes are shared with seq_cp, never by
    listing one token under several sequences.
    """

    def __init__(self, capacity: int):
        self.capacity = capacity
        self.token = np.zeros(capacity, dtype=np.int32)
        self.pos = np.zeros(capacity, dtype=np.int32)
        self.n_seq_id = np.ones(capacity, dtype=np.int32)
        self.seq_id = np.zeros(capacity, dtype=np.int32)
        self.logits = np.zeros(capacity, dtype=np.int8)
        int_p = ctypes.POINTER(ctypes.c_int32)
        base = self.seq_id.ctypes.data
        self._seq_id_rows = (int_p * capacity)(*(ctypes.cast(base + 4 * i, int_p) for i in range(capacity)))
        self.struct = ll.llama_batch(
            n_tokens=0,
            token=self.token.ctypes.data_as(int_p),
            embd=None,
            pos=self.pos.ctypes.data_as(int_p),
            n_seq_id=self.n_seq_id.ctypes.data_as(int_p),
            seq_id=self._seq_id_rows,
            logits=self.logits.ctypes.data_as(ctypes.POINTER(ctypes.c_int8)),
        )
        self.clear()

    def clear(self) -> None:
        self.n_tokens = 0
        self.output_rows: list[int] = []  # the rows whose logits the decode keeps, in batch order

    def add(self, seq_id: int, tokens, start_pos: int, logits_last: bool) -> int:
        """Append tokens of one sequence; return the row whose logits will be read (or -1)."""
        n = len(tokens)
        i = self.n_tokens
        end = i + n
        if end > self.capacity:
            raise ValueError(f"batch overflow: {end} > {self.capacity}")
        if n == 1:  # a generating sequence's next token: plain item writes beat slicing
            self.token[i], self.pos[i], self.seq_id[i] = tokens[0], start_pos, seq_id
        else:
            self.token[i:end] = tokens
            self.pos[i:end] = np.arange(start_pos, start_pos + n, dtype=np.int32)
            self.seq_id[i:end] = seq_id
            self.logits[i : end - 1] = 0
        self.n_tokens = end
        self.logits[end - 1] = logits_last
        if logits_last:
            self.output_rows.append(end - 1)
            return end - 1
        return -1


class LlamaBackend:
    """One model and its llama_context, which all sequences share: one pool of KV cells, or a stream
    per sequence (`layout`)."""

    def __init__(self, config: EngineConfig):
        _init_backend()
        check_gguf_file(config.model_path)
        problem = config.problem()
        if problem:
            raise ModelLoadError(problem)
        self.config = config
        self.build = build_info()
        self.notices: list[str] = []
        with _recording_load() as load_log:
            self.model = self._load_model(config)
            self.vocab = ll.llama_model_get_vocab(self.model)
            self.kv_shape = self._kv_shape()
            self.ctx = self._open_context(config)
        self.memory = ll.llama_get_memory(self.ctx)
        self.n_ctx = ll.llama_n_ctx(self.ctx)  # the pool's cells, as allocated
        self.n_ctx_seq = ll.llama_n_ctx_seq(self.ctx)  # what one sequence may hold: all, or its stream
        self._placement = _placement_from_log(load_log)
        self.batch = Batch(config.n_batch)
        self._piece_buf = ctypes.create_string_buffer(256)
        self._logits_address, self._logits = 0, np.empty((0, 0), dtype=np.float32)
        self._attached: dict[int, object] = {}  # seq_id -> the sampler llama.cpp runs in the graph for it
        self._pieces: dict[int, bytes] = {}
        self._spellings: dict[int, bytes] = {}
        self.info = self._read_info(config.model_path)
        self.notices = list(self.info.notices)
        self.chat_template = self._meta("tokenizer.chat_template")
        self.bos_text = self._token_text(ll.llama_vocab_bos(self.vocab))
        self.eos_text = self._token_text(ll.llama_vocab_eos(self.vocab))
        self.special_texts = self._special_texts()
        self.n_vocab = ll.llama_vocab_n_tokens(self.vocab)
        self._token_ids = np.arange(self.n_vocab, dtype=np.int32)  # a fresh candidate array's ids
        self.eog_tokens = tuple(t for t in range(self.n_vocab) if ll.llama_vocab_is_eog(self.vocab, t))
        self._eog = frozenset(self.eog_tokens)

    # -- loading ---------------------------------------------------------------------------

    def _load_model(self, config: EngineConfig):
        params = ll.llama_model_default_params()
        # AMX weight packing crashes llama_decode (ggml_backend_amx_mul_mat, llama.cpp issue 20824;
        # seen here with SmolLM2 Q4_1 on a Sapphire Rapids CPU): where the build has AMX, load the
        # weights without extra buffer types
        params.use_extra_bufts = not build_has_amx()
        params.n_gpu_layers = self.n_gpu_layers = self._gpu_layers(config)
        params.main_gpu = self._main_gpu(config)
        params.load_mode = self._load_mode(config)
        path = config.model_path
        _log_tail.clear()
        model = ll.llama_model_load_from_file(path.encode(), params)
        if not model:
            reason = _last_error() or "llama.cpp could not read it"
            raise ModelLoadError(f"cannot load model {os.path.basename(path)}: {reason}")
        return model

    def _gpu_layers(self, config: EngineConfig) -> int:
        """llama.cpp's n_gpu_layers: by default all when a GPU backend is built in; on a CPU-only build 0."""
        has_gpu = self.build.gpu_offload
        if config.gpu_layers is None:
            return GPU_LAYERS_ALL if has_gpu else 0
        if config.gpu_layers != 0 and not has_gpu:
            asked = "all" if config.gpu_layers == GPU_LAYERS_ALL else config.gpu_layers
            self.notices.append(
                f"GPU layers {asked} ignored: this llama.cpp build is CPU only (rebuild it for a GPU: see the README)"
            )
            return 0
        return config.gpu_layers

    def _main_gpu(self, config: EngineConfig) -> int:
        gpus = len(self.build.gpus)
        if not self.build.gpu_offload:
            if config.main_gpu:
                self.notices.append(f"main GPU {config.main_gpu} ignored: this llama.cpp build is CPU only")
            return 0
        if gpus and config.main_gpu >= gpus:
            raise ModelLoadError(f"there is no GPU {config.main_gpu}: this machine has {gpus} (0 to {gpus - 1})")
        return config.main_gpu

    def _load_mode(self, config: EngineConfig) -> int:
        mlock, mmap = config.use_mlock, config.use_mmap
        if mlock and not ll.llama_supports_mlock():
            self.notices.append("mlock ignored: this system cannot lock the model in memory")
            mlock = False
        if mmap and not ll.llama_supports_mmap():
            mmap = False
        if mmap and not mlock:
            return ll.LLAMA_LOAD_MODE_AUTO  # llama.cpp's default: it maps the file where it can
        return {
            (True, True): ll.LLAMA_LOAD_MODE_MMAP_MLOCK,
            (False, True): ll.LLAMA_LOAD_MODE_MLOCK,
            (False, False): ll.LLAMA_LOAD_MODE_NONE,
        }[(mmap, mlock)]

    def _kv_shape(self) -> KVShape:
        """What one KV cell holds, from the model: layers, and per layer the K and V row widths."""
        n_head = max(1, ll.llama_model_n_head(self.model))
        n_head_kv = ll.llama_model_n_head_kv(self.model) or n_head
        arch = self._meta("general.architecture") or ""
        head_k = _int(self._meta(f"{arch}.attention.key_length")) or ll.llama_model_n_embd(self.model) // n_head
        head_v = _int(self._meta(f"{arch}.attention.value_length")) or head_k
        return KVShape(ll.llama_model_n_layer(self.model), head_k * n_head_kv, head_v * n_head_kv)

    def _open_context(self, config: EngineConfig):
        """The context with the asked (or default) pool; one that cannot be allocated is halved until it
        can, with a notice; a quantized V cache that llama.cpp refuses falls back to f16."""
        bytes_per_cell = self.kv_shape.bytes_per_cell(config.cache_type_k, config.cache_type_v)
        free = self._pool_memory_free()
        automatic = default_pool(bytes_per_cell, ll.llama_model_n_ctx_train(self.model), config.capacity, free)
        if config.n_ctx:
            n_ctx, self.pool_reason = config.n_ctx, "as set"
        else:
            n_ctx, self.pool_reason = automatic.n_ctx, f"automatic: {automatic.reason}"
        # a pool larger than the free memory is not even tried: the kernel may grant it and then kill
        # the process when it is touched; and a smaller one is never larger than the automatic pool
        fits = (lambda n: n * bytes_per_cell <= free) if free else (lambda n: True)
        first_reason = ""
        smaller = halvings(n_ctx, lambda n: n <= automatic.n_ctx and fits(n))
        for n in chain([n_ctx] if fits(n_ctx) else [], smaller):
            ctx = ll.llama_init_from_model(self.model, self._context_params(config, n))
            if not ctx and config.cache_type_v.is_quantized and "flash_attn" in _last_error():
                self.notices.append(
                    f"V cache {config.cache_type_v.value} needs flash attention, which llama.cpp did not enable "
                    "for this model and device: the V cache is f16"
                )
                config = config.with_(cache_type_v=CacheType.F16)
                bytes_per_cell = self.kv_shape.bytes_per_cell(config.cache_type_k, config.cache_type_v)
                ctx = ll.llama_init_from_model(self.model, self._context_params(config, n))
            if ctx:
                if n != n_ctx:
                    why = (
                        first_reason
                        or f"it needs {format_bytes(n_ctx * bytes_per_cell)}, more than the {format_bytes(free)} free"
                    )
                    self.notices.append(
                        f"could not allocate a KV pool of {n_ctx} cells ({why}): using {n} cells "
                        f"({format_bytes(n * bytes_per_cell)})"
                    )
                self.cache_types = (config.cache_type_k, config.cache_type_v)
                return ctx
            first_reason = first_reason or _last_error() or "out of memory"
        ll.llama_model_free(self.model)
        self.model = None
        reason = first_reason or f"{format_bytes(n_ctx * bytes_per_cell)} needed, {format_bytes(free or 0)} free"
        raise ModelLoadError(f"cannot create a context of {n_ctx} tokens, nor a smaller one: {reason}")

    def _pool_memory_free(self) -> int | None:
        """The memory the pool will come from: the GPUs' when layers are offloaded, else the RAM."""
        gpus = self.build.gpus
        if gpus and self.n_gpu_layers != 0:
            return sum(d.free_bytes for d in gpus) or None
        return free_memory_bytes()

    def _context_params(self, config: EngineConfig, n_ctx: int):
        params = ll.llama_context_default_params()
        params.n_ctx = n_ctx
        params.n_batch = config.n_batch
        params.n_ubatch = config.n_batch
        params.n_seq_max = config.capacity
        params.n_threads = config.n_threads
        params.n_threads_batch = config.threads_batch
        # llama.cpp's auto (on wherever it can) stays: off is faster on a CPU with an f16 cache, but
        # there a prefix shared from another slot gives other logits than one computed in place
        # (up to 0.54), so a seeded reply would depend on where its cells sit (docs/performance.md)
        params.flash_attn_type = _FLASH_ATTN_TYPES[config.flash_attn]
        params.type_k = _CACHE_GGML_TYPES[config.cache_type_k]
        params.type_v = _CACHE_GGML_TYPES[config.cache_type_v]
        self.layout = choose_layout(n_ctx, config.capacity, ll.llama_model_n_ctx_train(self.model), config.kv_unified)
        params.kv_unified = self.layout.unified  # one pool: seq_cp shares cells instead of copying them
        params.swa_full = True  # sliding-window models keep whole prefixes, so they can be reused
        params.no_perf = True
        _log_tail.clear()
        return params

    def _meta(self, key: str) -> str | None:
        buf = ctypes.create_string_buffer(1 << 16)
        n = ll.llama_model_meta_val_str(self.model, key.encode(), buf, len(buf))
        if n < 0:
            return None
        if n >= len(buf):  # long chat templates
            buf = ctypes.create_string_buffer(n + 1)
            ll.llama_model_meta_val_str(self.model, key.encode(), buf, len(buf))
        return buf.value.decode("utf-8", errors="replace")

    def _read_info(self, path: str) -> ModelInfo:
        buf = ctypes.create_string_buffer(256)
        ll.llama_model_desc(self.model, buf, len(buf))
        desc = buf.value.decode("utf-8", errors="replace")
        place = self._placement
        type_k, type_v = self.cache_types
        per_cell = self.kv_shape.bytes_per_cell(type_k, type_v)
        if "kv_types" in place and place["kv_types"] != (type_k.value, type_v.value):
            self.notices.append(f"llama.cpp stores the KV cache as K {place['kv_types'][0]}, V {place['kv_types'][1]}")
        return ModelInfo(
            path=path,
            name=self._meta("general.name") or os.path.basename(path),
            description=desc,
            size_bytes=os.path.getsize(path),
            n_params=ll.llama_model_n_params(self.model),
            n_ctx_train=ll.llama_model_n_ctx_train(self.model),
            n_ctx=self.n_ctx,
            n_ctx_seq=self.n_ctx_seq,
            n_layer=ll.llama_model_n_layer(self.model),
            gpu_layers=place.get("gpu_layers", 0),
            weights=tuple(place.get("weights", ())),
            kv_bytes=place.get("kv_bytes") or per_cell * self.n_ctx,
            kv_bytes_per_cell=per_cell,
            kv_devices=tuple(place.get("kv_devices", ())) or ("CPU",),
            cache_type_k=type_k.value,
            cache_type_v=type_v.value,
            flash_attn=place.get("flash_attn", "auto"),
            pool_reason=self.pool_reason,
            kv_layout=self._layout_text(),
            has_chat_template=self._meta("tokenizer.chat_template") is not None,
            notices=tuple(self.notices) + tuple(place.get("notices", ())),
            build=self.build,
        )

    def _layout_text(self) -> str:
        layout: LayoutChoice = self.layout
        if layout.unified:
            return f"one pool ({layout.reason})"
        streams = self.n_ctx // max(1, self.n_ctx_seq)
        return f"a stream per sequence, {streams} × {self.n_ctx_seq} cells ({layout.reason})"

    @property
    def streams(self) -> bool:
        """Whether each sequence has a stream of its own (llama.cpp's kv_unified off)."""
        return not self.layout.unified

    def close(self) -> None:
        if self.ctx:
            ll.llama_free(self.ctx)
            self.ctx = None
        if self.model:
            ll.llama_model_free(self.model)
            self.model = None

    # -- tokens ----------------------------------------------------------------------------

    def tokenize(self, text: str, add_special: bool = True) -> list[int]:
        data = text.encode("utf-8")
        n_max = len(data) + 8
        buf = (ll.llama_token * n_max)()
        n = ll.llama_tokenize(self.vocab, data, len(data), buf, n_max, add_special, True)
        if n < 0:
            buf = (ll.llama_token * -n)()
            n = ll.llama_tokenize(self.vocab, data, len(data), buf, -n, add_special, True)
        return buf[:n]

    def piece(self, token: int) -> bytes:
        """The bytes a token stands for (special tokens render as nothing), cached per token."""
        cached = self._pieces.get(token)
        if cached is None:
            n = ll.llama_token_to_piece(self.vocab, token, self._piece_buf, 256, 0, False)
            cached = self._piece_buf.raw[: max(n, 0)]
            self._pieces[token] = cached
        return cached

    def spell(self, token: int) -> bytes:
        """The bytes a token stands for, control tokens written out (<|im_end|>), as a chat template
        writes them; cached per token. Both the prompt thread and the engine thread (token
        probabilities) call it: a buffer of its own each call, unlike `piece`, engine thread only."""
        cached = self._spellings.get(token)
        if cached is None:
            buf = ctypes.create_string_buffer(256)
            n = ll.llama_token_to_piece(self.vocab, token, buf, len(buf), 0, True)
            cached = self._spellings[token] = buf.raw[: max(n, 0)]
        return cached

    def _token_text(self, token: int) -> str:
        if token < 0:
            return ""
        n = ll.llama_token_to_piece(self.vocab, token, self._piece_buf, 256, 0, True)
        return self._piece_buf.raw[: max(n, 0)].decode("utf-8", errors="replace")

    def _special_texts(self) -> tuple[str, ...]:
        """The texts that tokenize as control tokens (such as <|im_start|>): markers of the chat format."""
        kinds = ll.LLAMA_TOKEN_ATTR_CONTROL | ll.LLAMA_TOKEN_ATTR_USER_DEFINED
        texts = set()
        for token in range(ll.llama_vocab_n_tokens(self.vocab)):
            if ll.llama_vocab_get_attr(self.vocab, token) & kinds:
                text = ll.llama_vocab_get_text(self.vocab, token).decode("utf-8", errors="replace")
                if text:
                    texts.add(text)
        return tuple(sorted(texts))

    def is_eog(self, token: int) -> bool:
        return token in self._eog

    # -- decoding and sampling -------------------------------------------------------------

    def decode(self) -> int:
        """Decode the batch: 0 ok, 1 no room in the KV cells, other values are errors."""
        self.batch.struct.n_tokens = self.batch.n_tokens
        return ll.llama_decode(self.ctx, self.batch.struct)

    def new_sampler(self, params: SamplingParams, seed: int, history: list[int]):
        chain = ll.llama_sampler_chain_init(ll.llama_sampler_chain_default_params())
        add = ll.llama_sampler_chain_add
        if params.ignore_eos:  # as llama.cpp does: an end-of-generation token can never be drawn
            add(chain, self._ban(self.eog_tokens))
        if params.penalizes:
            penalties = (params.repeat_penalty, params.frequency_penalty, params.presence_penalty)
            add(chain, ll.llama_sampler_init_penalties(self.n_vocab, params.repeat_last_n, *penalties))
        if params.temperature <= 0:
            add(chain, ll.llama_sampler_init_greedy())
        else:
            if params.top_k > 0:
                add(chain, ll.llama_sampler_init_top_k(params.top_k))
            add(chain, ll.llama_sampler_init_top_p(params.top_p, 1))
            add(chain, ll.llama_sampler_init_min_p(params.min_p, 1))
            add(chain, ll.llama_sampler_init_temp(params.temperature))
            add(chain, ll.llama_sampler_init_dist(seed & 0xFFFFFFFF))
        # the penalties look back into the prompt too, as llama-server's do
        for token in history[-params.repeat_last_n :] if params.penalizes else ():
            ll.llama_sampler_accept(chain, token)
        return chain

    def _ban(self, tokens: tuple[int, ...]):
        biases = (ll.llama_logit_bias * len(tokens))(*((t, -math.inf) for t in tokens))
        return ll.llama_sampler_init_logit_bias(self.n_vocab, len(tokens), biases)

    def logits(self, row: int) -> np.ndarray:
        """A copy of the logits the last decode produced at batch row `row`."""
        n_vocab = self.n_vocab
        return np.ctypeslib.as_array(ll.llama_get_logits_ith(self.ctx, row), shape=(n_vocab,)).copy()

    def sample(self, sampler, row: int) -> int:
        return ll.llama_sampler_sample(sampler, self.ctx, row)

    def top_tokens(self, rows: list[int]) -> list[int]:
        """The top-logit token of each batch row in `rows` (greedy, as llama.cpp's greedy sampler: the
        first of equals), from one view of the last decode's logits: no pass over the vocabulary per
        token in Python, no candidate array per token as a sampler chain builds."""
        if not rows:
            return []
        outputs = self.batch.output_rows  # llama.cpp keeps the outputs in batch order
        logits = self._logits_view()[: len(outputs)]
        if rows == outputs:
            return logits.argmax(axis=1).tolist()
        index = {row: k for k, row in enumerate(outputs)}
        return logits[[index[row] for row in rows]].argmax(axis=1).tolist()

    def _logits_view(self) -> np.ndarray:
        """The last decode's logits, a row per output, as numpy sees them (no copy). llama.cpp's
        buffer holds a row for each sequence at least; the view is made anew when it moves."""
        address = ctypes.addressof(ll.llama_get_logits(self.ctx).contents)
        if address != self._logits_address:
            rows = self.config.capacity
            buffer = (ctypes.c_float * (rows * self.n_vocab)).from_address(address)
            self._logits = np.frombuffer(buffer, dtype=np.float32).reshape(rows, self.n_vocab)
            self._logits_address = address
        return self._logits

    def attach_sampler(self, seq_id: int, sampler) -> bool:
        """Sample `seq_id`'s outputs with `sampler` inside the decode graph (None: on the host, from
        the logits); False when llama.cpp cannot run one of its samplers there. A change makes the next
        decode build its graph anew, so a sampler stays attached until another takes its place."""
        if self._attached.get(seq_id) == sampler:
            return True
        if not ll.llama_set_sampler(self.ctx, seq_id, sampler):
            ll.llama_set_sampler(self.ctx, seq_id, None)
            self._attached.pop(seq_id, None)
            return False
        self._attached[seq_id] = sampler
        return True

    def sampled(self, sampler, row: int) -> int:
        """The token the graph drew at batch row `row` with `sampler` attached, which then takes it
        into its state (penalties, the random draw) as llama_sampler_sample does."""
        token = ll.llama_get_sampled_token_ith(self.ctx, row)
        ll.llama_sampler_accept(sampler, token)
        return token

    def free_sampler(self, sampler) -> None:
        for seq_id in [seq_id for seq_id, attached in self._attached.items() if attached == sampler]:
            ll.llama_set_sampler(self.ctx, seq_id, None)  # the graph must not keep a freed sampler
            del self._attached[seq_id]
        ll.llama_sampler_free(sampler)

    def sample_with_probs(self, sampler, row: int, n_top: int, greedy: bool) -> tuple[int, TokenProbs]:
        """Sample as llama_sampler_sample does (apply the chain to every token, then accept the draw),
        keeping what the samplers left, to tell how likely the drawn token and its rivals were."""
        n_vocab = self.n_vocab
        logits = np.ctypeslib.as_array(ll.llama_get_logits_ith(self.ctx, row), shape=(n_vocab,))
        candidates = np.empty(n_vocab, dtype=_TOKEN_DATA)
        candidates["id"] = self._token_ids
        candidates["logit"] = logits
        candidates["p"] = 0.0
        array = ll.llama_token_data_array(candidates.ctypes.data_as(ctypes.POINTER(ll.llama_token_data)), n_vocab, -1, False)
        ll.llama_sampler_apply(sampler, ctypes.byref(array))
        # a sampler may point `data` at a buffer of its own: read the candidates where it says
        kept = np.ctypeslib.as_array(
            ctypes.cast(array.data, ctypes.POINTER(ctypes.c_byte)), shape=(array.size * _TOKEN_DATA.itemsize,)
        )
        kept = kept.view(_TOKEN_DATA)
        token = int(kept["id"][array.selected])
        ll.llama_sampler_accept(sampler, token)
        kept_logits = None if greedy else kept["logit"].copy()
        return token, token_probs(logits.copy(), kept["id"].copy(), kept_logits, token, n_top, self.spell)

    # -- KV memory -------------------------------------------------------------------------

    def seq_rm(self, seq_id: int, p0: int, p1: int = -1) -> bool:
        return ll.llama_memory_seq_rm(self.memory, seq_id, p0, p1)

    def seq_cp(self, src: int, dst: int, p0: int, p1: int) -> None:
        if self.streams and src != dst:  # llama.cpp aborts the process on a partial copy across streams
            raise ValueError("seq_cp across KV streams: the KV manager copies through the sequence state")
        ll.llama_memory_seq_cp(self.memory, src, dst, p0, p1)

    def seq_state_size(self, seq_id: int) -> int:
        """The bytes of one sequence's KV state (its cells' K and V rows, in the cache's types)."""
        return ll.llama_state_seq_get_size(self.ctx, seq_id)

    def seq_save(self, seq_id: int, size: int) -> object | None:
        """A copy of one sequence's cells (llama.cpp's sequence state) of `size` bytes, as
        seq_state_size tells; None when llama.cpp writes another size."""
        state = (ctypes.c_uint8 * size)()
        return state if ll.llama_state_seq_get_data(self.ctx, state, size, seq_id) == size else None

    def seq_restore(self, seq_id: int, state, size: int) -> bool:
        """Put saved cells back under `seq_id`; False when they find no room."""
        return ll.llama_state_seq_set_data(self.ctx, state, size, seq_id) == size

    def seq_pos_max(self, seq_id: int) -> int:
        return ll.llama_memory_seq_pos_max(self.memory, seq_id)

    def clear_memory(self) -> None:
        ll.llama_memory_clear(self.memory, True)


_MIB = 1 << 20


def _placement_from_log(lines: list[str]) -> dict:
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


def _int(text: str | None) -> int:
    try:
        return int(text) if text else 0
    except ValueError:
        return 0


def build_has_amx() -> bool:
    """Whether llama.cpp was built with AMX, whose weight packing crashes here (llama.cpp's own tools
    then need --no-repack, as the engine loads without it)."""
    return "AMX_INT8 = 1" in ll.llama_print_system_info().decode("utf-8", errors="replace")


def _last_error() -> str:
    for line in reversed(_log_tail):
        low = line.lower()
        if "error" in low or "failed" in low or "invalid" in low:
            return line.split(": ", 1)[-1] if line.startswith("llama_") else line
    return ""
