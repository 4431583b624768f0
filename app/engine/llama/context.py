"""`LlamaBackend`: one model and its llama_context: the load, the KV pool, the decode, the `llama_memory_*` calls.

Threads (thread/engine_thread.py): a backend is built (model loaded, context created) on the thread that
builds its Engine: the engine thread for the first model, the loader thread for every later load or
reload, while the engine thread goes on decoding with the others. Once handed over, the engine
thread alone decodes, samples and changes the KV memory. The prompt thread reads the tokenizer
meanwhile (`vocab`, and what the load read: the chat template): llama.cpp's vocabulary does not
change after the load, so that runs beside a decode. No lock guards the model: `close` runs on the
prompt thread itself, queued after any prompt being built with it (on the engine thread only when
the prompt thread has ended, or for a model no prompt ever read: a load refused at hand-over).
Loads take turns (`log_capture.recording_load`), as each reads back its own log.
"""

from __future__ import annotations

import ctypes
import os
from itertools import chain

import llama_cpp as ll

from ..errors import ModelLoadError
from ..kv.layout import LayoutChoice, choose_layout
from ..kv.pool import POOL_STEP, default_pool, format_bytes, free_memory_bytes, halvings
from ..model_file import check_gguf_file, find_projector
from ..model_info import ModelInfo
from ..params import GPU_LAYERS_ALL, MMPROJ_NONE, CacheType, EngineConfig, FlashAttn, SpecType
from .batch import Batch, ImageBatch
from .constraint import Constraints
from .devices import build_has_amx, build_info
from .draft import DraftModel
from .log_capture import forget_tail, last_error, placement_from_log, recording_load
from .model_facts import description, kv_shape, meta_value
from .runtime import init_backend
from .samplers import Samplers
from .seq_state import StateFormatError, restream, stream_count
from .vocab import Vocab

_CACHE_GGML_TYPES = {CacheType.F16: ll.GGML_TYPE_F16, CacheType.Q8_0: ll.GGML_TYPE_Q8_0, CacheType.Q4_0: ll.GGML_TYPE_Q4_0}
_FLASH_ATTN_TYPES = {
    FlashAttn.ON: ll.LLAMA_FLASH_ATTN_TYPE_ENABLED,
    FlashAttn.OFF: ll.LLAMA_FLASH_ATTN_TYPE_DISABLED,
    FlashAttn.AUTO: ll.LLAMA_FLASH_ATTN_TYPE_AUTO,
}


class LlamaBackend:
    """One model and its llama_context, which all sequences share: one pool of KV cells, or a stream
    per sequence (`layout`)."""

    def __init__(self, config: EngineConfig):
        init_backend()
        check_gguf_file(config.model_path)
        problem = config.problem()
        if problem:
            raise ModelLoadError(problem)
        self.config = config
        self.build = build_info()
        self.notices: list[str] = []
        self.draft: DraftModel | None = None
        self._layout_kept = False  # a change of layout failed: no more are tried
        self.lost: str | None = None  # why the context is gone (a change of layout failed both ways)
        self.vision = None  # the projector, when the model sees images (vision.py)
        self.ctx = None
        with recording_load() as load_log:
            self.model = self._load_model(config)
            # a KV cache's sequence states (seq_state.py moves them), not a recurrent model's (asked once:
            # `movable` is read every step)
            self._kv_states = not ll.llama_model_is_recurrent(self.model) and not ll.llama_model_is_hybrid(self.model)
            self.kv_shape = kv_shape(self.model)
            self.vision = self._load_vision(config)
            self.ctx = self._open_context(config)
        self.memory = ll.llama_get_memory(self.ctx)
        self.n_ctx = ll.llama_n_ctx(self.ctx)  # the pool's cells, as allocated
        self.n_ctx_seq = ll.llama_n_ctx_seq(self.ctx)  # what one sequence may hold: all, or its stream
        self._placement = placement_from_log(load_log)
        self.batch = Batch(config.step_tokens_max)
        self.image_batch = ImageBatch(self.decode_max, self.vision.n_embd, self.vision.sections) if self.vision else None
        self.chat_template = meta_value(self.model, "tokenizer.chat_template")
        # llama.cpp's recurrent and hybrid memories refuse to remove part of a sequence: rejected
        # guesses would stay in the state, so such a model never drafts
        self.drafts_refused = None if self._kv_states else "its memory (recurrent or hybrid) cannot remove rejected guesses"
        if self.drafts_refused and config.spec_type is not SpecType.NONE:
            self.notices.append(f"speculative decoding is off for this model: {self.drafts_refused}")
        self.info = self._read_info(config.model_path)
        self.notices = list(self.info.notices)
        self.vocab = Vocab(self.model)  # the tokenizer: the prompt thread reads it
        self.samplers = Samplers(self.ctx, self.vocab, self.batch, config.capacity)
        self.constraints = Constraints(self.vocab, config.capacity)  # the prompt thread makes them too
        if config.spec_type is SpecType.DRAFT and not self.drafts_refused:
            self.draft = self._load_draft(config)

    def _load_draft(self, config: EngineConfig) -> DraftModel:
        """The draft model beside this one (its own context, as many cells); this one is freed if it fails."""
        try:
            threads = (config.n_threads, config.threads_batch)
            return DraftModel(
                config.spec_draft_model, self.model, self.n_ctx, config.capacity, config.n_batch, threads, self.n_gpu_layers
            )
        except ModelLoadError:
            self.close()
            raise

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
        forget_tail()
        model = ll.llama_model_load_from_file(path.encode(), params)
        if not model:
            reason = last_error() or "llama.cpp could not read it"
            raise ModelLoadError(f"cannot load model {os.path.basename(path)}: {reason}")
        return model

    def _load_vision(self, config: EngineConfig):
        """The projector that lets the model see images: the one asked for (a failure fails the load),
        or one found beside the model (a failure is a notice: the model loads without images)."""
        path, found = config.mmproj, False
        if path == MMPROJ_NONE:
            return None
        if path is None:
            path, found = find_projector(config.model_path), True
            if path is None:
                return None
        name = os.path.basename(path)
        try:
            from .vision import Vision  # libmtmd is loaded only for a model with a projector

            gpu = self.build.gpu_offload and self.n_gpu_layers != 0
            vision = Vision(path, self.model, config.threads_batch, gpu, _FLASH_ATTN_TYPES[config.flash_attn])
        except (ModelLoadError, ImportError, OSError) as e:
            if not found:
                ll.llama_model_free(self.model)
                self.model = None
                raise ModelLoadError(str(e) if isinstance(e, ModelLoadError) else f"cannot load the projector {name}: {e}") from e
            self.notices.append(f"images are off: the projector beside the model ({name}) could not be used: {e}")
            return None
        return vision

    @property
    def decode_max(self) -> int:
        """The most rows one decode takes: a step's tokens, or a whole picture of a model whose image
        tokens attend both ways (decoded at once, in a decode of its own)."""
        step = self.config.step_tokens_max
        return max(step, self.vision.max_tokens) if self.vision is not None and self.vision.non_causal else step

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
        n_ctx_train = ll.llama_model_n_ctx_train(self.model)
        for n in chain([n_ctx] if fits(n_ctx) else [], smaller):
            self.layout = choose_layout(n, config.capacity, n_ctx_train, config.kv_unified, self.movable)
            ctx = ll.llama_init_from_model(self.model, self._context_params(config, n))
            if not ctx and config.cache_type_v.is_quantized and "flash_attn" in last_error():
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
                self._context_config, self._context_cells = config, n  # a change of layout builds the same
                return ctx
            first_reason = first_reason or last_error() or "out of memory"
        if self.vision is not None:
            self.vision.close()
            self.vision = None
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
        params.n_batch = params.n_ubatch = self.decode_max  # a step is one ubatch (a picture may be larger)
        params.n_seq_max = config.capacity
        params.n_threads = config.n_threads
        params.n_threads_batch = config.threads_batch
        # llama.cpp's auto (on wherever it can) stays: off is faster on a CPU with an f16 cache, but
        # there a prefix shared from another slot gives other logits than one computed in place
        # (up to 0.54), so a seeded reply would depend on where its cells sit (docs/performance.md)
        params.flash_attn_type = _FLASH_ATTN_TYPES[config.flash_attn]
        params.type_k = _CACHE_GGML_TYPES[config.cache_type_k]
        params.type_v = _CACHE_GGML_TYPES[config.cache_type_v]
        params.kv_unified = self.layout.unified  # one pool: seq_cp shares cells instead of copying them
        params.swa_full = True  # sliding-window models keep whole prefixes, so they can be reused
        params.no_perf = True
        forget_tail()
        return params

    def _read_info(self, path: str) -> ModelInfo:
        place = self._placement
        type_k, type_v = self.cache_types
        per_cell = self.kv_shape.bytes_per_cell(type_k, type_v)
        if "kv_types" in place and place["kv_types"] != (type_k.value, type_v.value):
            self.notices.append(f"llama.cpp stores the KV cache as K {place['kv_types'][0]}, V {place['kv_types'][1]}")
        return ModelInfo(
            path=path,
            name=meta_value(self.model, "general.name") or os.path.basename(path),
            description=description(self.model),
            size_bytes=os.path.getsize(path),
            n_params=ll.llama_model_n_params(self.model),
            n_ctx_train=ll.llama_model_n_ctx_train(self.model),
            n_ctx=self.n_ctx,
            n_ctx_seq=self.seq_room,
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
            kv_layout=self.layout_text(),
            has_chat_template=self.chat_template is not None,
            projector=self.vision.path if self.vision else "",
            image_decode=self._image_decode_text(),
            chat_template_file=self.config.chat_template_file or "",
            notices=tuple(self.notices) + tuple(place.get("notices", ())),
            drafts_refused=self.drafts_refused or "",
            build=self.build,
        )

    def _image_decode_text(self) -> str:
        if self.vision is None:
            return ""
        if self.vision.non_causal:
            return (
                f"each picture whole, in a decode of its own (its tokens attend both ways), up to {self.vision.max_tokens} tokens"
            )
        where = "beside the step's tokens, in a decode of the step's pictures (a batch holds token ids or embeddings)"
        return where + (", their tokens placed in 2D (M-RoPE)" if self.vision.mrope else "")

    def layout_text(self) -> str:
        """The layout now, and why."""
        layout: LayoutChoice = self.layout
        if self.lost is not None:
            return f"none ({self.lost})"
        if layout.unified:
            return f"one pool ({layout.reason})"
        streams = self.n_ctx // max(1, self.n_ctx_seq)
        return f"a stream per sequence, {streams} × {self.n_ctx_seq} cells ({layout.reason})"

    @property
    def seq_room(self) -> int:
        """What one sequence may hold: its stream where the layout is fixed at streams, else the pool
        (a chat outgrowing its stream moves every chat to one pool)."""
        return self.n_ctx if self.movable else self.n_ctx_seq

    @property
    def stream_cells(self) -> int:
        """What a stream holds, or would hold in one pool."""
        if self.streams:
            return self.n_ctx_seq
        return self.n_ctx // max(1, self.config.capacity) // POOL_STEP * POOL_STEP

    @property
    def streams(self) -> bool:
        """Whether each sequence has a stream of its own (llama.cpp's kv_unified off)."""
        return not self.layout.unified

    @property
    def movable(self) -> bool:
        """Whether the layout may change while chats run: set to automatic, several sequences, and
        a KV cache whose sequence states seq_state.py can move (not a recurrent model's state)."""
        config = self.config
        kept = self._layout_kept or self.lost is not None
        return config.kv_unified is None and not kept and config.capacity > 1 and self._kv_states

    @property
    def n_stream(self) -> int:
        return 1 if self.layout.unified else self.config.capacity

    def relayout(self, layout: LayoutChoice, seq_ids: list[int]) -> str | None:
        """Build the context again in `layout`, the cells of `seq_ids` carried over through their
        saved states (nothing computed again); None when done, else why not. Then the old layout
        stays (built again where it was freed), or, where it could not be, the context is gone:
        `lost` says why, and no llama call reaches the freed one."""
        states = {}
        for seq_id in seq_ids:
            try:
                size = self.seq_state_size(seq_id)
                state = self.seq_save(seq_id, size)
            except Exception as e:  # e.g. no RAM for the copy: the context is untouched yet
                return f"the cells of sequence {seq_id} could not be saved: {e!r}"
            if state is None:
                return f"the cells of sequence {seq_id} could not be saved"
            states[seq_id] = (state, size)
        before = self.layout
        self.samplers.detach_all()  # the graph of the freed context must not keep them
        ctx = self._forget_context()
        try:
            ll.llama_free(ctx)
        except Exception as e:  # freed or not, it is never used again; a new one might hold the pool twice
            return self._lose(f"the old context could not be freed: {e!r}")
        why = self._open_in(layout, states)
        if why is None:
            return None
        if self._open_in(before, states) is not None:
            return self._lose(f"it could not change ({why}), nor be built again as it was")
        self._layout_kept = True  # from now on: a chat ends where its stream does
        self.layout = LayoutChoice(before.unified, f"kept: it could not change ({why})")
        return why

    def _forget_context(self):
        """Take the context's handles out of use (before it is freed); return the context."""
        ctx = self.ctx
        self.ctx = self.memory = self.samplers.ctx = None
        return ctx

    def _lose(self, why: str) -> str:
        self.lost = f"the KV layout could not change: {why}"
        return self.lost

    def _open_in(self, layout: LayoutChoice, states: dict[int, tuple[object, int]]) -> str | None:
        """A context of the same pool in `layout` with `states` restored; None when done, else why
        not (and no context)."""
        self.layout = layout
        forget_tail()
        try:
            ctx = ll.llama_init_from_model(self.model, self._context_params(self._context_config, self._context_cells))
        except Exception as e:
            return f"no context could be made: {e!r}"
        if not ctx:
            return last_error() or "out of memory"
        self.ctx, self.memory = ctx, ll.llama_get_memory(ctx)
        self.n_ctx, self.n_ctx_seq = ll.llama_n_ctx(ctx), ll.llama_n_ctx_seq(ctx)
        self.samplers.ctx = ctx
        why = self._restore_all(states)
        if why is not None:  # a half-filled context never serves
            ll.llama_free(self._forget_context())
        return why

    def _restore_all(self, states: dict[int, tuple[object, int]]) -> str | None:
        for seq_id, (state, size) in states.items():
            try:
                if not self.seq_restore(seq_id, state, size):
                    return f"the cells of sequence {seq_id} did not fit"
            except Exception as e:  # the stream-count rewrite or the restore failed in a way not foreseen
                return f"the cells of sequence {seq_id} could not be restored: {e!r}"
        return None

    def close(self) -> None:
        if getattr(self, "samplers", None) is not None:  # a load that failed before the context has none
            self.samplers.close()
        if self.draft:
            self.draft.close()
            self.draft = None
        if self.vision is not None:
            self.vision.close()
            self.vision = None
        if self.ctx:
            ll.llama_free(self.ctx)
            self.ctx = None
        if self.model:
            ll.llama_model_free(self.model)
            self.model = None

    # -- decoding --------------------------------------------------------------------------

    def decode(self) -> int:
        """Decode the batch: 0 ok, 1 no room in the KV cells, other values are errors."""
        if not self.ctx:
            return -1
        self.batch.struct.n_tokens = self.batch.n_tokens
        return ll.llama_decode(self.ctx, self.batch.struct)

    def decode_images(self) -> int:
        """Decode the image batch (pictures' embeddings): as decode(). Image tokens that attend both
        ways (Gemma 3) are decoded with the causal mask off: the batch then holds one whole picture."""
        if not self.ctx:
            return -1
        self.image_batch.seal()
        both_ways = self.vision.non_causal
        if both_ways:
            ll.llama_set_causal_attn(self.ctx, False)
        try:
            return ll.llama_decode(self.ctx, self.image_batch.struct)
        finally:
            if both_ways:
                ll.llama_set_causal_attn(self.ctx, True)

    # -- KV memory (without a context, after a failed change of layout: nothing held, nothing done) --

    def seq_rm(self, seq_id: int, p0: int, p1: int = -1) -> bool:
        return bool(self.memory) and ll.llama_memory_seq_rm(self.memory, seq_id, p0, p1)

    def seq_cp(self, src: int, dst: int, p0: int, p1: int) -> None:
        if not self.memory:
            return
        if self.streams and src != dst:  # llama.cpp aborts the process on a partial copy across streams
            raise ValueError("seq_cp across KV streams: the KV manager copies through the sequence state")
        ll.llama_memory_seq_cp(self.memory, src, dst, p0, p1)

    def seq_state_size(self, seq_id: int) -> int:
        """The bytes of one sequence's KV state (its cells' K and V rows, in the cache's types)."""
        return ll.llama_state_seq_get_size(self.ctx, seq_id) if self.ctx else 0

    def seq_save(self, seq_id: int, size: int) -> object | None:
        """A copy of one sequence's cells (llama.cpp's sequence state) of `size` bytes, as
        seq_state_size tells; None when llama.cpp writes another size."""
        if not self.ctx:
            return None
        state = (ctypes.c_uint8 * size)()
        return state if ll.llama_state_seq_get_data(self.ctx, state, size, seq_id) == size else None

    def seq_restore(self, seq_id: int, state, size: int) -> bool:
        """Put saved cells back under `seq_id` (saved in either layout); False when they find no room."""
        if not self.ctx:
            return False
        if self.movable:
            try:
                if stream_count(state) != self.n_stream:
                    state = restream(state, self.n_stream)
                    size = len(state)
            except StateFormatError:
                return False
        return ll.llama_state_seq_set_data(self.ctx, state, size, seq_id) == size

    def seq_pos_max(self, seq_id: int) -> int:
        return ll.llama_memory_seq_pos_max(self.memory, seq_id) if self.memory else -1

    def seq_pos_min(self, seq_id: int) -> int:
        return ll.llama_memory_seq_pos_min(self.memory, seq_id) if self.memory else -1

    def clear_memory(self) -> None:
        if self.memory:
            ll.llama_memory_clear(self.memory, True)
