"""The engine's only door to llama.cpp: model, context, batch, samplers, tokenizer, chat template.

Everything here runs on the engine thread, but for `tokenize`, which the prompt thread also calls (under
the engine thread's lock, so the model is never freed under it); nothing else imports llama_cpp.
"""

from __future__ import annotations

import ctypes
import math
import os
import threading
from dataclasses import dataclass

import llama_cpp as ll
import numpy as np

from .errors import ModelLoadError
from .params import EngineConfig, SamplingParams

_GGUF_MAGIC = b"GGUF"
_backend_lock = threading.Lock()
_backend_ready = False
_log_tail: list[str] = []  # last lines llama.cpp logged: the reason a load failed


@ll.llama_log_callback
def _on_log(level: int, text: bytes, _user_data) -> None:
    # keep llama.cpp quiet, but remember what it said so a failed load can tell why
    line = text.decode("utf-8", errors="replace").strip()
    if line:
        _log_tail.append(line)
        del _log_tail[:-20]


def _init_backend() -> None:
    global _backend_ready
    with _backend_lock:
        if not _backend_ready:
            ll.llama_log_set(_on_log, ctypes.c_void_p(0))
            ll.llama_backend_init()
            _backend_ready = True


@dataclass(frozen=True)
class ModelInfo:
    """What the user sees of a loaded model."""

    path: str
    name: str
    description: str  # e.g. "llama 135M Q4_1"
    size_bytes: int
    n_params: int
    n_ctx_train: int
    n_ctx: int  # the context (KV cells) actually allocated


def check_gguf_file(path: str) -> None:
    """Raise ModelLoadError with a one-line reason if `path` cannot be a GGUF model."""
    if not path:
        raise ModelLoadError("no model file given")
    if not os.path.exists(path):
        raise ModelLoadError(f"model file not found: {path}")
    if os.path.isdir(path):
        raise ModelLoadError(f"model path is a folder, not a GGUF file: {path}")
    try:
        with open(path, "rb") as f:
            magic = f.read(4)
    except OSError as e:
        raise ModelLoadError(f"cannot read model file {path}: {e.strerror}") from e
    if magic != _GGUF_MAGIC:
        raise ModelLoadError(f"not a GGUF model file (bad header): {path}")


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
        self.n_tokens = 0

    def clear(self) -> None:
        self.n_tokens = 0

    def add(self, seq_id: int, tokens, start_pos: int, logits_last: bool) -> int:
        """Append tokens of one sequence; return the row whose logits will be read (or -1)."""
        n = len(tokens)
        i = self.n_tokens
        end = i + n
        if end > self.capacity:
            raise ValueError(f"batch overflow: {end} > {self.capacity}")
        self.token[i:end] = tokens
        self.pos[i:end] = np.arange(start_pos, start_pos + n, dtype=np.int32)
        self.seq_id[i:end] = seq_id
        self.logits[i:end] = 0
        self.n_tokens = end
        if logits_last:
            self.logits[end - 1] = 1
            return end - 1
        return -1


class LlamaBackend:
    """One model and one llama_context shared by all sequences (unified KV cells)."""

    def __init__(self, config: EngineConfig):
        _init_backend()
        check_gguf_file(config.model_path)
        self.config = config
        self.model = self._load_model(config.model_path)
        self.vocab = ll.llama_model_get_vocab(self.model)
        self.ctx = self._new_context(config)
        self.memory = ll.llama_get_memory(self.ctx)
        self.n_ctx = ll.llama_n_ctx(self.ctx)
        self.batch = Batch(config.n_batch)
        self._piece_buf = ctypes.create_string_buffer(256)
        self._pieces: dict[int, bytes] = {}
        self._spellings: dict[int, bytes] = {}
        self.info = self._read_info(config.model_path)
        self.chat_template = self._meta("tokenizer.chat_template")
        self.bos_text = self._token_text(ll.llama_vocab_bos(self.vocab))
        self.eos_text = self._token_text(ll.llama_vocab_eos(self.vocab))
        self.special_texts = self._special_texts()
        self.eog_tokens = tuple(t for t in range(ll.llama_vocab_n_tokens(self.vocab)) if ll.llama_vocab_is_eog(self.vocab, t))

    # -- loading ---------------------------------------------------------------------------

    def _load_model(self, path: str):
        params = ll.llama_model_default_params()
        # AMX weight packing crashes llama_decode (ggml_backend_amx_mul_mat, llama.cpp issue 20824;
        # seen here with SmolLM2 Q4_1 on a Sapphire Rapids CPU): where the build has AMX, load the
        # weights without extra buffer types
        params.use_extra_bufts = not _build_has_amx()
        _log_tail.clear()
        model = ll.llama_model_load_from_file(path.encode(), params)
        if not model:
            reason = _last_error() or "llama.cpp could not read it"
            raise ModelLoadError(f"cannot load model {os.path.basename(path)}: {reason}")
        return model

    def _new_context(self, config: EngineConfig):
        params = ll.llama_context_default_params()
        params.n_ctx = config.n_ctx
        params.n_batch = config.n_batch
        params.n_ubatch = config.n_batch
        params.n_seq_max = config.capacity
        params.n_threads = config.n_threads
        params.n_threads_batch = config.n_threads
        params.kv_unified = True  # one pool of cells; seq_cp shares cells instead of copying
        params.swa_full = True  # sliding-window models keep whole prefixes, so they can be reused
        params.no_perf = True
        ctx = ll.llama_init_from_model(self.model, params)
        if not ctx:
            ll.llama_model_free(self.model)
            reason = _last_error() or "out of memory?"
            raise ModelLoadError(f"cannot create a context of {config.n_ctx} tokens: {reason}")
        return ctx

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
        return ModelInfo(
            path=path,
            name=self._meta("general.name") or os.path.basename(path),
            description=desc,
            size_bytes=os.path.getsize(path),
            n_params=ll.llama_model_n_params(self.model),
            n_ctx_train=ll.llama_model_n_ctx_train(self.model),
            n_ctx=self.n_ctx,
        )

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
        writes them; cached per token, and safe on the prompt thread (a buffer of its own)."""
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
        return ll.llama_vocab_is_eog(self.vocab, token)

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
        if params.repeat_penalty != 1.0:
            n_vocab = ll.llama_vocab_n_tokens(self.vocab)
            add(chain, ll.llama_sampler_init_penalties(n_vocab, params.repeat_last_n, params.repeat_penalty, 0.0, 0.0))
        if params.temperature <= 0:
            add(chain, ll.llama_sampler_init_greedy())
        else:
            if params.top_k > 0:
                add(chain, ll.llama_sampler_init_top_k(params.top_k))
            add(chain, ll.llama_sampler_init_top_p(params.top_p, 1))
            add(chain, ll.llama_sampler_init_min_p(params.min_p, 1))
            add(chain, ll.llama_sampler_init_temp(params.temperature))
            add(chain, ll.llama_sampler_init_dist(seed & 0xFFFFFFFF))
        # the repeat penalty looks back into the prompt too, as llama-server's does
        for token in history[-params.repeat_last_n :] if params.repeat_penalty != 1.0 else ():
            ll.llama_sampler_accept(chain, token)
        return chain

    def _ban(self, tokens: tuple[int, ...]):
        biases = (ll.llama_logit_bias * len(tokens))(*((t, -math.inf) for t in tokens))
        return ll.llama_sampler_init_logit_bias(ll.llama_vocab_n_tokens(self.vocab), len(tokens), biases)

    def logits(self, row: int) -> np.ndarray:
        """A copy of the logits the last decode produced at batch row `row`."""
        n_vocab = ll.llama_vocab_n_tokens(self.vocab)
        return np.ctypeslib.as_array(ll.llama_get_logits_ith(self.ctx, row), shape=(n_vocab,)).copy()

    def sample(self, sampler, row: int) -> int:
        return ll.llama_sampler_sample(sampler, self.ctx, row)

    @staticmethod
    def free_sampler(sampler) -> None:
        ll.llama_sampler_free(sampler)

    # -- KV memory -------------------------------------------------------------------------

    def seq_rm(self, seq_id: int, p0: int, p1: int = -1) -> bool:
        return ll.llama_memory_seq_rm(self.memory, seq_id, p0, p1)

    def seq_cp(self, src: int, dst: int, p0: int, p1: int) -> None:
        ll.llama_memory_seq_cp(self.memory, src, dst, p0, p1)

    def seq_pos_max(self, seq_id: int) -> int:
        return ll.llama_memory_seq_pos_max(self.memory, seq_id)

    def clear_memory(self) -> None:
        ll.llama_memory_clear(self.memory, True)


def _build_has_amx() -> bool:
    return "AMX_INT8 = 1" in ll.llama_print_system_info().decode("utf-8", errors="replace")


def _last_error() -> str:
    for line in reversed(_log_tail):
        low = line.lower()
        if "error" in low or "failed" in low or "invalid" in low:
            return line.split(": ", 1)[-1] if line.startswith("llama_") else line
    return ""
