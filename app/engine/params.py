"""Parameters: how the engine is built (EngineConfig) and how one request samples (SamplingParams)."""

from __future__ import annotations

import math
import os
from dataclasses import dataclass, field, replace
from enum import Enum, IntEnum


class ServingMode(str, Enum):
    BATCHED = "batched"  # continuous batching: all sequences step together
    SEQUENTIAL = "sequential"  # one request at a time, like a single-request server


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


class Priority(IntEnum):
    NORMAL = 0
    HIGH = 1


@dataclass(frozen=True)
class SamplingParams:
    temperature: float = 0.7
    top_k: int = 40
    top_p: float = 0.95
    min_p: float = 0.05
    repeat_penalty: float = 1.1
    repeat_last_n: int = 64
    seed: int | None = None  # None: a fresh random seed per request
    max_tokens: int = 256
    stop: tuple[str, ...] = ()
    ignore_eos: bool = False  # generate exactly max_tokens (benchmarks)

    def with_(self, **changes) -> SamplingParams:
        return replace(self, **changes)

    def problem(self) -> str | None:
        """What is out of range (llama.cpp's samplers would misbehave or abort on it), or None."""
        numbers = {
            "temperature": (self.temperature, 0.0, 1e6),
            "top_p": (self.top_p, 0.0, 1.0),
            "min_p": (self.min_p, 0.0, 1.0),
            "repeat_penalty": (self.repeat_penalty, 0.0, 1e6),
        }
        for name, (value, lo, hi) in numbers.items():
            if not isinstance(value, (int, float)) or not (math.isfinite(value) and lo <= value <= hi):
                return f"{name} must be a number between {lo:g} and {hi:g}; got {value!r}"
        integers = {
            "top_k": (self.top_k, 0, 2**31 - 1),
            "repeat_last_n": (self.repeat_last_n, 0, 65536),
            "max_tokens": (self.max_tokens, 1, 2**63 - 1),
        }
        for name, (value, lo, hi) in integers.items():
            if not isinstance(value, int) or isinstance(value, bool) or not lo <= value <= hi:
                return f"{name} must be a whole number between {lo} and {hi}; got {value!r}"
        if self.seed is not None and (not isinstance(self.seed, int) or self.seed < 0):
            return f"seed must be a whole number of at least 0, or unset; got {self.seed!r}"
        if not all(isinstance(s, str) and s for s in self.stop):
            return "every stop string must be a non-empty string"
        return None


GREEDY = SamplingParams(temperature=0.0, repeat_penalty=1.0)


def default_threads() -> int:
    return max(1, os.cpu_count() or 1)


@dataclass(frozen=True)
class EngineConfig:
    model_path: str
    n_ctx: int = 8192  # KV cells shared by all sequences
    # token budget of one decode step: on a CPU a 512-token step freezes every stream for seconds;
    # 128 reads prompts as fast (measured) and lets streams and first tokens through sooner
    n_batch: int = 128
    capacity: int = 8  # sequences that can hold cells at once (llama.cpp's n_seq_max)
    n_threads: int = field(default_factory=default_threads)
    mode: ServingMode = ServingMode.BATCHED
    kv_reuse: bool = True
    overflow: OverflowPolicy = OverflowPolicy.STOP
    policy: Policy = Policy.DECODE_FIRST
    itl_target_ms: float | None = None  # set: the batch size adapts to keep the latency under it

    def with_(self, **changes) -> EngineConfig:
        return replace(self, **changes)
