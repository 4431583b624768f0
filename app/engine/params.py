"""Parameters: how the engine is built (EngineConfig) and how one request samples (SamplingParams)."""

from __future__ import annotations

import os
from dataclasses import dataclass, field, replace
from enum import Enum, IntEnum

from .probs import MAX_TOP
from .sampling_fields import BY_NAME, SAMPLING_FIELDS


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
    """In which order sequences get a step's token budget (orders in policy.py; what each does: `help`)."""

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
    Policy.DECODE_FIRST: "running streams first, then prompt chunks, then admissions (the default)",
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


# llama.cpp's -kvu as a setting: on (one pool), off (a stream per sequence), or auto (pool.choose_layout)
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


class Priority(IntEnum):
    NORMAL = 0
    HIGH = 1


PENALTIES = ("repeat_penalty", "frequency_penalty", "presence_penalty")


@dataclass(frozen=True)
class SamplingParams:
    """How a request samples; its numeric knobs are declared in sampling_fields.py (ranges, sliders, API)."""

    temperature: float = 0.7
    top_k: int = 40
    top_p: float = 0.95
    min_p: float = 0.05
    repeat_penalty: float = 1.1
    repeat_last_n: int = 64
    frequency_penalty: float = 0.0  # OpenAI's: subtracted from a logit once per time its token came
    presence_penalty: float = 0.0  # OpenAI's: subtracted once from the logit of any token that came
    seed: int | None = None  # None: a fresh random seed per request
    max_tokens: int = 256
    stop: tuple[str, ...] = ()
    ignore_eos: bool = False  # generate exactly max_tokens (benchmarks)
    n_probs: int | None = None  # tell each token's probability and its n likeliest rivals' (None: do not)
    # a grammar every reply must follow, GBNF or llguidance's Lark (JSON, a JSON schema's, a tool call's,
    # or one given: llama/grammar.py)
    grammar: str | None = None
    # set: the grammar is lazy, the reply free until one of these patterns (Python regular expressions)
    # matches its text, control tokens written out; held to the grammar from the match on (llama.cpp's
    # lazy grammar: a tool call's syntax under tool_choice "auto")
    grammar_triggers: tuple[str, ...] = ()
    speculate: bool = True  # may draft ahead where the engine speculates (--spec-type): off, never
    # the functions a chat's own template is given as its `tools` (OpenAI's list, as JSON): serve's
    # tool calls with a template that renders them; None: the template sees no tools
    tools: str | None = None

    def with_(self, **changes) -> SamplingParams:
        return replace(self, **changes)

    @property
    def penalizes(self) -> bool:
        """Whether the penalties sampler has anything to do (it looks back at the last tokens)."""
        return any(getattr(self, name) != BY_NAME[name].neutral for name in PENALTIES)

    @property
    def greedy_needs_chain(self) -> bool:
        """At temperature 0, whether a sampler may still change the likeliest token, so the chain must run."""
        return any(f.neutral is not None and getattr(self, f.name) != f.neutral for f in SAMPLING_FIELDS)

    def problem(self) -> str | None:
        """What is out of range (llama.cpp's samplers would misbehave or abort on it), or None."""
        for f in SAMPLING_FIELDS:
            problem = f.problem(getattr(self, f.name))
            if problem is not None:
                return problem
        if self.n_probs is not None and (not isinstance(self.n_probs, int) or not 0 <= self.n_probs <= MAX_TOP):
            return f"n_probs must be a whole number between 0 and {MAX_TOP}, or unset; got {self.n_probs!r}"
        if self.seed is not None and (not isinstance(self.seed, int) or self.seed < 0):
            return f"seed must be a whole number of at least 0, or unset; got {self.seed!r}"
        if not all(isinstance(s, str) and s for s in self.stop):
            return "every stop string must be a non-empty string"
        if self.grammar is not None and not isinstance(self.grammar, str):
            return "the grammar must be GBNF text, or unset"
        if self.tools is not None and not isinstance(self.tools, str):
            return "the tools must be JSON text, or unset"
        if self.grammar_triggers and self.grammar is None:
            return "grammar triggers need a grammar to start"
        if self.grammar is not None and self.ignore_eos:
            return "ignore_eos cannot go with a format to follow: the reply ends where its format does"
        return None


GREEDY = SamplingParams(temperature=0.0, repeat_penalty=1.0)


DEFAULT_CACHE_RAM_MIB = 8192  # llama-server's default; only cells the pool evicts use it


def default_threads() -> int:
    return max(1, os.cpu_count() or 1)


@dataclass(frozen=True)
class EngineConfig:
    model_path: str
    # the KV pool asked for, in cells, every sequence's together (llama.cpp's -c); 0: sized from the
    # model and the machine (pool.py). One sequence may hold all of it, or its stream's n_ctx / capacity
    n_ctx: int = 0
    # token budget of one decode step: on a CPU a 512-token step freezes every stream for seconds;
    # 128 reads prompts as fast (measured) and lets streams and first tokens through sooner
    n_batch: int = 128
    capacity: int = 8  # sequences that can hold cells at once (llama.cpp's n_seq_max)
    n_threads: int = field(default_factory=default_threads)
    mode: ServingMode = ServingMode.BATCHED
    # static batching: how long the first waiting request waits for others to fill the batch, so a
    # broadcast to every pane (its prompts built one after another) lands in one batch
    static_window_ms: float = 50.0
    kv_reuse: bool = True
    # llama.cpp's -kvu: one pool of cells for all sequences (prefixes shared by seq_cp), or a stream
    # of n_ctx / capacity cells each, which decodes faster (each token attends to its own cells only);
    # None: streams, and one pool while a chat outgrows its stream (pool.choose_layout, next_layout)
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

    def with_(self, **changes) -> EngineConfig:
        return replace(self, **changes)

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
