"""How the engine is built (EngineConfig) and the choices it offers (serving modes, policies, cache types)."""

from __future__ import annotations

import os
from dataclasses import dataclass, field, replace
from enum import Enum, IntEnum


class ServingMode(str, Enum):
    BATCHED = "batched"  # continuous batching: all sequences step together
    SEQUENTIAL = "sequential"  # one request at a time, like a single-request server
    # static batching: a batch gathered from the queue runs until its last sequence ends; newcomers
    # wait for the next batch, and a finished sequence's place stays empty
    STATIC = "static"

    @property
    def label(self) -> str:
        """Its name in the window: "continuous" for batched serving (each step refills the batch)."""
        return "continuous" if self is ServingMode.BATCHED else self.value


class OverflowPolicy(str, Enum):
    """What happens when one conversation no longer fits in the context."""

    STOP = "stop"  # refuse the request with a clear message
    TRUNCATE = "truncate"  # drop the oldest turns, keep the system prompt


class Policy(str, Enum):
    """In which order sequences get a step's token budget (orders in sched/policy.py; what each does: `help`)."""

    FCFS = "fcfs"
    DECODE_FIRST = "decode-first"
    SHORTEST_FIRST = "shortest-first"
    LENGTH_GROUP = "length-group"
    PRIORITY = "priority"

    @property
    def help(self) -> str:
        return _POLICY_HELP[self]


_POLICY_HELP = {
    Policy.FCFS: "strictly by arrival: an early long prompt holds up everyone behind it",
    Policy.DECODE_FIRST: "running streams first, then prompt chunks, then admissions",
    Policy.SHORTEST_FIRST: "the least work left first: short questions overtake long documents",
    Policy.LENGTH_GROUP: "read waiting prompts of similar length together",
    Policy.PRIORITY: "high-priority requests (panes marked so) first, taking a slot if need be",
}


class FlashAttn(str, Enum):
    """llama.cpp's --flash-attn: auto lets llama.cpp decide per device and model."""

    ON = "on"
    OFF = "off"
    AUTO = "auto"


class SpecType(str, Enum):
    """llama.cpp's --spec-type: how replies are drafted ahead, to be verified in the batch."""

    NONE = "none"
    NGRAM = "ngram-simple"  # the tokens that followed the sequence's last few tokens earlier in it
    DRAFT = "draft-simple"  # a small model's greedy guesses (spec_draft_model, llama.cpp's -md)


# llama.cpp's -kvu as a setting: on (one pool), off (a stream per sequence), or auto (kv/layout.py)
KV_UNIFIED = {"auto": None, "on": True, "off": False}


def kv_unified_name(value: bool | None) -> str:
    return next(name for name, v in KV_UNIFIED.items() if v is value)


class CacheType(str, Enum):
    """A KV cache data type (llama.cpp's --cache-type-k/-v); bytes_per_value is its storage cost."""

    F16 = "f16"
    Q8_0 = "q8_0"
    Q4_0 = "q4_0"

    @property
    def bytes_per_value(self) -> float:
        return _CACHE_TYPE_BYTES[self]

    @property
    def is_quantized(self) -> bool:
        return self is not CacheType.F16


# ggml's block sizes: q8_0 stores 32 values in 34 bytes, q4_0 in 18
_CACHE_TYPE_BYTES = {CacheType.F16: 2.0, CacheType.Q8_0: 34 / 32, CacheType.Q4_0: 18 / 32}

GPU_LAYERS_ALL = -1  # llama.cpp's n_gpu_layers < 0: every layer
MMPROJ_NONE = "none"  # EngineConfig.mmproj: no projector, not even one found beside the model


class Priority(IntEnum):
    NORMAL = 0
    HIGH = 1


DEFAULT_CACHE_RAM_MIB = 8192  # llama-server's default; only cells the pool evicts use it


def default_threads() -> int:
    return max(1, os.cpu_count() or 1)


@dataclass(frozen=True)
class EngineConfig:
    model_path: str
    # the KV pool asked for, in cells, every sequence's together (llama.cpp's -c); 0: sized from the
    # model and the machine (kv/pool.py). One sequence may hold all of it, or its stream's n_ctx / capacity
    n_ctx: int = 0
    # token budget of one decode step while replies stream: on a CPU a 512-token step holds every
    # stream for seconds; 128 lets streams and first tokens through sooner
    n_batch: int = 128
    # prompt tokens a step may read when no reply is waiting for its next token (llama.cpp's -ub):
    # nobody waits on such a step; 512 (llama.cpp's default) read no faster than 128 on this CPU
    n_ubatch: int = 128
    capacity: int = 8  # sequences that can hold cells at once (llama.cpp's n_seq_max)
    n_threads: int = field(default_factory=default_threads)
    mode: ServingMode = ServingMode.BATCHED
    # static batching: how long the first waiting request waits for others to fill the batch, so a
    # broadcast to every pane (its prompts built one after another) lands in one batch
    static_window_ms: float = 50.0
    kv_reuse: bool = True
    # llama.cpp's -kvu: one pool of cells for all sequences (prefixes shared by seq_cp), or a stream
    # of n_ctx / capacity cells each, which decodes faster (each token attends to its own cells only);
    # None: streams, and one pool while a chat outgrows its stream (kv/layout.py: choose_layout, next_layout)
    kv_unified: bool | None = None
    overflow: OverflowPolicy = OverflowPolicy.STOP
    policy: Policy = Policy.DECODE_FIRST
    itl_target_ms: float | None = None  # set: the batch size adapts to keep the latency under it
    # llama.cpp's own settings, with its flag names' meanings (-ngl, -mg, -fa, -ctk, -ctv, -tb)
    gpu_layers: int | None = None  # None: all when the build has a GPU backend, else 0; GPU_LAYERS_ALL: all
    main_gpu: int = 0
    flash_attn: FlashAttn = FlashAttn.AUTO
    cache_type_k: CacheType = CacheType.F16
    cache_type_v: CacheType = CacheType.F16
    use_mlock: bool = False
    use_mmap: bool = True
    n_threads_batch: int | None = None  # threads for prompt batches; None: n_threads
    # the KV cache's RAM tier (llama-server's --cache-ram): MiB of host memory for evicted cells; 0: none
    cache_ram_mib: int = DEFAULT_CACHE_RAM_MIB
    # llama.cpp's --backend-sampling: each sequence's sampler chain runs inside the decode graph.
    # Off by default: measured slower than drawing on the host, on the CPU and on an H200
    # (docs/performance.md); a request wanting token probabilities samples on the host either way
    backend_sampling: bool = False
    # speculative decoding (llama.cpp's --spec-type, --spec-draft-n-max, --spec-draft-n-min, -md,
    # --spec-draft-p-min): greedy replies draft tokens from their own prompt and reply, or with a
    # small model of the same vocabulary, verified in the shared batch
    spec_type: SpecType = SpecType.NONE
    spec_draft_n_max: int = 16
    spec_draft_n_min: int = 0
    spec_draft_model: str | None = None
    spec_draft_p_min: float = 0.0  # a draft model's guess less likely than this (to it) ends the draft
    # the vision projector (llama.cpp's --mmproj, an mmproj GGUF for llama.cpp's mtmd): None, one
    # found beside the model (model_file.find_projector); MMPROJ_NONE, none at all
    mmproj: str | None = None
    # a Jinja chat template file used instead of the model's own (llama.cpp's --chat-template-file)
    chat_template_file: str | None = None

    def with_(self, **changes) -> EngineConfig:
        return replace(self, **changes)

    def for_other_model(self, path: str) -> EngineConfig:
        """These settings for another model loaded beside this one: a projector named for this model
        is not that one's (it finds its own beside it; none stays none), nor is a chat template file."""
        mmproj = self.mmproj if self.mmproj == MMPROJ_NONE else None
        return replace(self, model_path=path, mmproj=mmproj, chat_template_file=None)

    @property
    def step_tokens_max(self) -> int:
        """The most tokens one decode takes: the context's batch (and ubatch) size."""
        return max(self.n_batch, self.n_ubatch)

    def problem(self) -> str | None:
        """Why llama.cpp could not honour these settings on any build (a one-line reason), or None."""
        for name in ("cache_type_k", "cache_type_v"):
            value = getattr(self, name)
            if not isinstance(value, CacheType):
                kinds = ", ".join(t.value for t in CacheType)
                return f"unknown KV cache type {value!r} for {name}: use one of {kinds}"
        if not isinstance(self.flash_attn, FlashAttn):
            return f"flash attention must be on, off or auto; got {self.flash_attn!r}"
        if self.cache_type_v.is_quantized and self.flash_attn is FlashAttn.OFF:
            return (
                f"a quantized V cache ({self.cache_type_v.value}) needs flash attention: "
                "turn flash attention on (or auto), or use an f16 V cache"
            )
        if self.gpu_layers is not None and self.gpu_layers < GPU_LAYERS_ALL:
            return f"GPU layers must be a number of layers or all; got {self.gpu_layers}"
        if self.main_gpu < 0:
            return f"the main GPU is a device index, 0 or more; got {self.main_gpu}"
        if self.n_batch < 1 or self.n_ubatch < 1:
            return "the batch sizes must be 1 token or more"
        if self.n_ctx < 0:
            return f"the context must be a number of KV cells, or 0 for automatic; got {self.n_ctx}"
        if not self.static_window_ms >= 0:
            return f"the static batch window is a number of ms, 0 or more; got {self.static_window_ms}"
        if self.cache_ram_mib < 0:
            return f"the RAM cache is a number of MiB, or 0 for none; got {self.cache_ram_mib}"
        if self.n_threads < 1 or (self.n_threads_batch is not None and self.n_threads_batch < 1):
            return "thread counts must be 1 or more"
        if self.spec_type is SpecType.DRAFT and not self.spec_draft_model:
            return "speculative decoding with a draft model needs one: give its GGUF file (-md FILE)"
        if not 0.0 <= self.spec_draft_p_min <= 1.0:
            return f"the draft's least probability is between 0 and 1; got {self.spec_draft_p_min}"
        return None

    @property
    def threads_batch(self) -> int:
        return self.n_threads_batch or self.n_threads
