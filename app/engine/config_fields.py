"""EngineConfig's settings, each described once: its label, its help, its text form and its flags;
its default is EngineConfig's own, said from its value. The command line's engine flags and each
command's own engine options, the settings file and the engine panel are built from this table."""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from enum import Enum

from .params import (
    GPU_LAYERS_ALL,
    KV_UNIFIED,
    MMPROJ_NONE,
    CacheType,
    EngineConfig,
    FlashAttn,
    OverflowPolicy,
    Policy,
    ServingMode,
    SpecType,
    kv_unified_name,
)


@dataclass(frozen=True)
class Text:
    """A setting's value as text, both ways: a flag's argument and the settings file's value.
    `parse` raises ValueError with the reason; `choices`: the words a flag takes (none: any text)."""

    parse: Callable[[str], object]
    format: Callable[[object], str] = str
    choices: tuple[str, ...] = ()


@dataclass(frozen=True)
class ConfigField:
    """One EngineConfig field as users set it."""

    name: str  # the EngineConfig field, and its key in the settings file
    label: str  # in the engine panel
    help: str  # the command line's --help, and the panel's tooltip
    text: Text
    flags: tuple[str, ...] = ()  # the engine flags of every command; none: each command's own options set it
    switch: bool | None = None  # a flag without an argument, which sets the field to this
    metavar: str | None = None  # the argument's name in --help (default: the long flag's, CTX for --ctx)
    computed: str = ""  # what a default computed on this machine is (the cores: "all cores")

    @property
    def default(self) -> str | None:
        """EngineConfig's default as a flag takes it; None where there is none, or for a switch (its flag says what it sets)."""
        declared = next(f for f in dataclasses.fields(EngineConfig) if f.name == self.name)
        if declared.default is not dataclasses.MISSING:
            value = declared.default
        elif declared.default_factory is not dataclasses.MISSING:
            value = declared.default_factory()
        else:
            return None
        if self.switch is not None:
            return None
        if isinstance(value, bool):
            return "on" if value else "off"
        return self.text.format(value)

    def described(self, default: object = None) -> str:
        """The help with the default said: EngineConfig's, or a command's own (`default`)."""
        said = self.default if default is None else str(default)
        if said is None:
            return self.help
        return f"{self.help} (default: {f'{self.computed}, {said} here' if self.computed else said})"

    @property
    def tooltip(self) -> str:
        return f"{', '.join(self.flags)}: {self.described()}" if self.flags else self.help


def whole(minimum: int, unset: str | None = None) -> Text:
    """A whole number of at least `minimum`; `unset`: the word for None."""

    def parse(text: str) -> int | None:
        text = text.strip()
        if unset and text.lower() == unset:
            return None
        try:
            value = int(text)
        except ValueError:
            raise ValueError(f"expected a whole number, got {text!r}") from None
        if value < minimum:
            raise ValueError(f"must be {minimum} or more")
        return value

    return Text(parse, lambda value: unset if value is None else str(value))


def _milliseconds(text: str) -> float | None:
    """A latency target in ms, or off."""
    text = text.strip()
    if text.lower() == "off":
        return None
    try:
        value = float(text)
    except ValueError:
        raise ValueError(f"expected a number of milliseconds or off, got {text!r}") from None
    if not (math.isfinite(value) and value > 0):
        raise ValueError("must be more than 0")
    return value


def _window_ms(text: str) -> float:
    """A wait in ms, 0 or more."""
    try:
        value = float(text.strip())
    except ValueError:
        raise ValueError(f"expected a number of milliseconds, got {text!r}") from None
    if not (math.isfinite(value) and value >= 0):
        raise ValueError("must be 0 or more")
    return value


def choice(kind: type[Enum]) -> Text:
    """An Enum, by its value."""
    return Text(kind, lambda value: value.value, tuple(member.value for member in kind))


def _word(words: Mapping[str, object], text: str):
    try:
        return words[text.strip().lower()]
    except KeyError:
        raise ValueError(f"expected one of {', '.join(words)}, got {text!r}") from None


def _gpu_layers(text: str) -> int | None:
    """A number of layers, all, or auto (None: all when llama.cpp is built for a GPU, else 0)."""
    text = text.strip().lower()
    if text in ("all", "auto"):
        return GPU_LAYERS_ALL if text == "all" else None
    try:
        value = int(text)
    except ValueError:
        raise ValueError(f"expected a number of layers or 'all', got {text!r}") from None
    if value < 0:
        raise ValueError("must be 0 or more, or 'all'")
    return value


def _path(text: str) -> str:
    if not text.strip():
        raise ValueError("no model file")
    return text.strip()


_ON_OFF = {"on": True, "off": False, "true": True, "false": False}
# a flag says on or off; the settings file true or false, as Qt writes a bool (older files did)
ON_OFF = Text(lambda text: _word(_ON_OFF, text), lambda value: "true" if value else "false", ("on", "off"))
GPU_LAYERS = Text(_gpu_layers, lambda n: "auto" if n is None else "all" if n == GPU_LAYERS_ALL else str(n))
POLICY_HELP = "the order in which sequences get a step's token budget:\n" + "\n".join(f"{p.value}: {p.help}" for p in Policy)


def _draft_model(text: str) -> str | None:
    """A draft model's GGUF file, or none."""
    text = text.strip()
    return None if text.lower() in ("", "none") else text


def _mmproj(text: str) -> str | None:
    """A projector's GGUF file, auto (one found beside the model) or none."""
    text = text.strip()
    if text.lower() in ("", "auto"):
        return None
    return MMPROJ_NONE if text.lower() == MMPROJ_NONE else text


def _template_file(text: str) -> str | None:
    """A chat template file, or none (the model's own)."""
    text = text.strip()
    return None if text.lower() in ("", "none") else text


def _probability(text: str) -> float:
    try:
        value = float(text.strip())
    except ValueError:
        raise ValueError(f"expected a number between 0 and 1, got {text!r}") from None
    if not 0.0 <= value <= 1.0:
        raise ValueError("must be between 0 and 1")
    return value


CONFIG_FIELDS = (
    # the engine's own, set by each command's options (--model, --parallel, --batch, bench's --mode ...)
    ConfigField("model_path", "Model", help="the GGUF model file", text=Text(_path)),
    ConfigField(
        "capacity", "Parallel capacity", help="sequences that can hold KV cells at once (llama.cpp's n_seq_max)", text=whole(1)
    ),
    ConfigField("n_batch", "Batch size", help="token budget of a decode step while replies are generating", text=whole(1)),
    ConfigField(
        "n_ubatch",
        "Prompt chunk, idle",
        help="the most prompt tokens a step reads while no reply is generating (nobody waits on it; "
        "fewer steps); llama.cpp's ubatch",
        text=whole(1),
        flags=("-ub", "--ubatch-size"),
        metavar="N",
    ),
    ConfigField(
        "mode",
        "Serving",
        help="batched: all sequences step together, a newcomer joins at the next step; static: a batch "
        "gathered from the queue runs until its last sequence ends, newcomers wait for the next; "
        "sequential: one request at a time",
        text=choice(ServingMode),
    ),
    ConfigField(
        "static_window_ms",
        "Static batch window",
        help="static serving: how long the first waiting request waits for others to fill a batch, in ms",
        text=Text(_window_ms, lambda ms: f"{ms:g}"),
        flags=("--static-window-ms",),
        metavar="MS",
    ),
    ConfigField("policy", "Scheduling", help=POLICY_HELP, text=choice(Policy)),
    ConfigField(
        "itl_target_ms",
        "Adaptive batch",
        help="tune the batch to keep the inter-token latency under this target (ms)",
        text=Text(_milliseconds, lambda ms: "off" if ms is None else repr(float(ms))),
    ),
    ConfigField(
        "overflow",
        "Chat too long",
        help="when a chat outgrows the context: stop with a message, or drop the oldest turns and keep the system prompt",
        text=choice(OverflowPolicy),
    ),
    # every command's engine flags (llama.cpp's names and meanings where it has the setting), in --help's order
    ConfigField(
        "gpu_layers",
        "GPU layers",
        help="layers to put on the GPU, or all; auto: all when llama.cpp is built for a GPU, else 0",
        text=GPU_LAYERS,
        flags=("-ngl", "--gpu-layers", "--n-gpu-layers"),
        metavar="N|all",
    ),
    ConfigField("main_gpu", "main GPU", help="the GPU to use", text=whole(0), flags=("-mg", "--main-gpu"), metavar="I"),
    ConfigField(
        "flash_attn",
        "Flash attention",
        help="flash attention",
        text=choice(FlashAttn),
        flags=("-fa", "--flash-attn"),
    ),
    ConfigField(
        "cache_type_k",
        "K cache",
        help="KV cache type for K",
        text=choice(CacheType),
        flags=("-ctk", "--cache-type-k"),
    ),
    ConfigField(
        "cache_type_v",
        "V cache",
        help="KV cache type for V (quantized needs flash attention)",
        text=choice(CacheType),
        flags=("-ctv", "--cache-type-v"),
    ),
    ConfigField(
        "kv_unified",
        "KV layout",
        help="on: one KV pool for all sequences; off: a stream of ctx/parallel cells each, faster on long chats; "
        "auto: streams while every chat fits its stream, one pool when one outgrows it (the chats carried over)",
        text=Text(lambda text: _word(KV_UNIFIED, text), kv_unified_name, tuple(KV_UNIFIED)),
        flags=("-kvu", "--kv-unified"),
    ),
    ConfigField(
        "backend_sampling",
        "Backend sampling",
        help="draw tokens inside llama.cpp's decode graph (the host draws faster)",
        text=ON_OFF,
        flags=("--backend-sampling",),
    ),
    ConfigField(
        "spec_type",
        "Speculative decoding",
        help="draft tokens ahead and verify them in the batch: none, ngram-simple (the tokens "
        "that followed the last few earlier in the chat) or draft-simple (a draft model's guesses, -md); "
        "greedy replies only, the same reply either way",
        text=choice(SpecType),
        flags=("--spec-type",),
    ),
    ConfigField(
        "spec_draft_n_max",
        "Draft tokens, most",
        help="the most tokens drafted at once",
        text=whole(1),
        flags=("--spec-draft-n-max",),
        metavar="N",
    ),
    ConfigField(
        "spec_draft_n_min",
        "Draft tokens, fewest",
        help="above 0: a draft of at least this many tokens at every step, whatever the measured costs say, "
        "and none where fewer are found; 0: drafts as long as they pay, measured here",
        text=whole(0),
        flags=("--spec-draft-n-min",),
        metavar="N",
    ),
    ConfigField(
        "spec_draft_model",
        "Draft model",
        help="a small GGUF model with this model's vocabulary that drafts for it (draft-simple, which this flag alone chooses)",
        text=Text(_draft_model, lambda path: path or "none"),
        flags=("-md", "--model-draft", "--spec-draft-model"),
        metavar="FNAME",
    ),
    ConfigField(
        "spec_draft_p_min",
        "Draft confidence, least",
        help="a draft model's guess it finds less likely than this ends the draft",
        text=Text(_probability, repr),
        flags=("--spec-draft-p-min", "--draft-p-min"),
        metavar="P",
    ),
    ConfigField(
        "mmproj",
        "Vision projector",
        help="the model's projector for images (an mmproj GGUF); auto: an mmproj-*.gguf beside the model; none: no images",
        text=Text(_mmproj, lambda path: "auto" if path is None else path),
        flags=("-mm", "--mmproj"),
        metavar="FILE",
    ),
    ConfigField(
        "chat_template_file",
        "Chat template file",
        help="a Jinja chat template used instead of the model's own (a .jinja file, as llama.cpp's); none: the model's",
        text=Text(_template_file, lambda path: path or "none"),
        flags=("--chat-template-file",),
        metavar="JINJA_TEMPLATE_FILE",
    ),
    ConfigField("use_mlock", "mlock", help="keep the model in RAM (no swapping)", text=ON_OFF, flags=("--mlock",), switch=True),
    ConfigField(
        "use_mmap",
        "mmap",
        help="read the model into memory instead of mapping it",
        text=ON_OFF,
        flags=("--no-mmap",),
        switch=False,
    ),
    ConfigField(
        "n_threads", "Threads", help="threads for decoding", text=whole(1), flags=("-t", "--threads"), computed="all cores"
    ),
    ConfigField(
        "n_threads_batch",
        "Prompt threads",
        help="threads for prompt batches; auto: --threads",
        text=whole(1, unset="auto"),
        flags=("-tb", "--threads-batch"),
    ),
    ConfigField(
        "n_ctx",
        "Context (KV cells)",
        help="KV cells of the pool; 0: sized from the model, the panes and the free memory; with a stream per sequence, one holds ctx / parallel of them",
        text=whole(0),
        flags=("-c", "--ctx"),
    ),
    ConfigField(
        "cache_ram_mib",
        "RAM cache",
        help="host memory for KV cells evicted from the pool, restored when their chat returns; 0: none",
        text=whole(0),
        flags=("-cram", "--cache-ram"),
        metavar="MiB",
    ),
    ConfigField(
        "kv_reuse",
        "KV reuse",
        help="recompute every prompt from scratch (no cached prefix, no RAM cache)",
        text=ON_OFF,
        flags=("--no-kv-reuse",),
        switch=False,
    ),
)
FIELDS = {field.name: field for field in CONFIG_FIELDS}


def config_texts(config: EngineConfig) -> dict[str, str]:
    """Every setting as text, by field name: what the settings file keeps."""
    return {field.name: field.text.format(getattr(config, field.name)) for field in CONFIG_FIELDS}


def config_from_texts(texts: Mapping[str, str], base: EngineConfig) -> EngineConfig:
    """`base` with the settings read from `texts`; a missing or unreadable one keeps base's value."""
    changes = {}
    for field in CONFIG_FIELDS:
        if field.name in texts:
            try:
                changes[field.name] = field.text.parse(texts[field.name])
            except ValueError:  # an edited or older settings file
                continue
    return base.with_(**changes)
