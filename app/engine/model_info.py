"""What the engine tells of a loaded model and of the llama.cpp build: `ModelInfo`, `BuildInfo`, `Device`.

Plain values, without llama_cpp: the client, the server, the window and the remote client read them."""

from __future__ import annotations

from dataclasses import dataclass

from .kv.pool import format_bytes


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
    chat_template_file: str = ""  # the template file used instead of the model's own ("": its own)
    notices: tuple[str, ...] = ()  # settings the build or the model could not honour, and what was done instead
    drafts_refused: str = ""  # why this model never drafts (speculative decoding), "" where it may
    build: BuildInfo | None = None
    projector: str = ""  # the vision projector's file (mmproj): the model sees images; "" where it does not
    image_decode: str = ""  # how its pictures' tokens are decoded beside the others', in words

    @property
    def sees_images(self) -> bool:
        return bool(self.projector)

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
            "chat_template_file": self.chat_template_file or None,
            "kv_devices": list(self.kv_devices),
            "cache_type_k": self.cache_type_k,
            "cache_type_v": self.cache_type_v,
            "flash_attn": self.flash_attn,
            "pool": self.pool_reason,
            "kv_layout": self.kv_layout,
            "notices": list(self.notices),
            "projector": self.projector or None,
            "image_decode": self.image_decode or None,
        }
