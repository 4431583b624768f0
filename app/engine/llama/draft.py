"""`DraftModel`: a small model with the target's vocabulary that drafts tokens for greedy sequences
(llama.cpp's `-md`, `--spec-type draft-simple`), verified in the target's shared batch (engine.py).

It has a context of its own beside the target's: a sequence per slot in one pool of as many cells
as the target's. What a slot holds there is kept as tokens; before drafting, the slot keeps the
longest prefix it shares with the target's sequence and reads the rest, so a new turn, an accepted
draft or a slot given to another chat all come down to one rule. The drafting sequences go through
it together: each draft decode holds the next guess of every one of them.
"""

from __future__ import annotations

import os
import time

import llama_cpp as ll
import numpy as np

from ..errors import ModelLoadError
from ..model_file import check_gguf_file
from ..step_cost import StepCost
from .batch import Batch
from .devices import build_has_amx
from .log_capture import forget_tail, last_error, recording_load
from .vocab import Vocab

# llama.cpp's own rule for a draft model's vocabulary (common/speculative.cpp): the same kind of
# tokenizer, the same BOS and EOS, sizes within this of each other, and the same text for each
# token from this id on (the first few are often control tokens named differently)
VOCAB_SIZE_SLACK = 128
VOCAB_CHECK_FROM = 5


class DraftModel:
    def __init__(
        self, path: str, target_model, n_ctx: int, capacity: int, n_batch: int, threads: tuple[int, int], gpu_layers: int
    ):
        """Load `path` and make its context; ModelLoadError when it cannot be, or when its vocabulary is
        not the target's."""
        check_gguf_file(path)
        self.name = os.path.basename(path)
        params = ll.llama_model_default_params()
        params.use_extra_bufts = not build_has_amx()  # as the target's load (context.py)
        params.n_gpu_layers = gpu_layers
        with recording_load():
            forget_tail()
            self.model = ll.llama_model_load_from_file(path.encode(), params)
            if not self.model:
                raise ModelLoadError(f"cannot load draft model {self.name}: {last_error() or 'llama.cpp could not read it'}")
            why = vocab_difference(target_model, self.model)
            if why:
                self.close()
                raise ModelLoadError(f"draft model {self.name} cannot draft for this model: {why}")
            self.ctx = ll.llama_init_from_model(self.model, self._context_params(n_ctx, capacity, n_batch, threads))
        if not self.ctx:
            self.close()
            raise ModelLoadError(f"cannot create a context for draft model {self.name}: {last_error() or 'out of memory'}")
        self.memory = ll.llama_get_memory(self.ctx)
        self.vocab = Vocab(self.model)
        self.n_vocab = min(self.vocab.n_vocab, ll.llama_vocab_n_tokens(ll.llama_model_get_vocab(target_model)))
        self.batch = Batch(n_batch)
        self._held: dict[int, list[int]] = {}  # slot -> the tokens whose cells its sequence holds here
        self.cost = StepCost()  # what a decode of n tokens takes the draft model here
        self._measure()

    def _measure(self) -> None:
        """Time decodes of one and of two tokens now, so that the first decision to draft knows what a
        guess costs (a draft model as slow as the model never pays, and should not start)."""
        token = max(ll.llama_vocab_bos(ll.llama_model_get_vocab(self.model)), 0)
        for n, start in ((1, 0), (1, 1), (2, 2), (1, 4), (2, 5)):  # the first warms the graph up
            self.batch.clear()
            self.batch.add(0, [token] * n, start, True)
            self.batch.struct.n_tokens = self.batch.n_tokens
            t0 = time.perf_counter()
            if ll.llama_decode(self.ctx, self.batch.struct) != 0:
                break
            if start:
                self.cost.observe(n, time.perf_counter() - t0)
        ll.llama_memory_seq_rm(self.memory, 0, -1, -1)

    @property
    def guess_s(self) -> float:
        """What one more guess costs: a decode of one token (those of several drafting sequences
        share a decode, so this is the most)."""
        return self.cost.of(1) or 0.0

    @staticmethod
    def _context_params(n_ctx: int, capacity: int, n_batch: int, threads: tuple[int, int]):
        params = ll.llama_context_default_params()
        params.n_ctx = n_ctx
        params.n_batch = params.n_ubatch = n_batch
        params.n_seq_max = capacity
        params.n_threads, params.n_threads_batch = threads
        params.kv_unified = True  # a slot holds what it needs of the pool, however long its chat
        params.swa_full = True  # a prefix kept stays whole, as in the target
        params.no_perf = True
        return params

    def draft(self, wants: list[tuple[int, list[int], int]], p_min: float) -> list[list[int]]:
        """For each (slot, tokens, most): up to `most` greedy guesses of what follows `tokens`, stopping
        where the draft model's top token is less likely than `p_min` or ends the reply."""
        drafts: list[list[int]] = [[] for _ in wants]
        going = [i for i, (_, tokens, most) in enumerate(wants) if most > 0 and tokens]
        slots = {wants[i][0] for i in going}
        if not going or not self._catch_up([wants[i] for i in going], slots):
            return drafts
        while going and self._decode(slots) == 0:
            for i in going:  # what was just read is held now
                slot, tokens, _ = wants[i]
                self._held[slot] = [*tokens, *drafts[i]]
            guesses = self._read(p_min)
            self.batch.clear()
            still = []
            for i, guess in zip(going, guesses, strict=True):
                slot, tokens, most = wants[i]
                if guess is None:
                    continue
                drafts[i].append(guess)
                if len(drafts[i]) < most and not self.vocab.is_eog(guess):
                    self.batch.add(slot, [guess], len(tokens) + len(drafts[i]) - 1, True)
                    still.append(i)
            going = still
        return drafts

    def _catch_up(self, wants: list[tuple[int, list[int], int]], slots: set[int]) -> bool:
        """Fill the batch for the first guesses: each slot keeps the longest prefix its cells share
        with its tokens, the rest is read (a full batch decoded at a time, no logits) and its last
        token, whose logits give its first guess, ends the batch left to decode. False when a decode
        failed (the cells past what is known held are removed at the next call)."""
        reading = []
        for slot, tokens, _ in wants:
            kept = min(_shared(self._held.get(slot, []), tokens), len(tokens) - 1)
            if not ll.llama_memory_seq_rm(self.memory, slot, kept, -1):  # a partial removal refused: all of it
                ll.llama_memory_seq_rm(self.memory, slot, -1, -1)
                kept = 0
            self._held[slot] = tokens[:kept]
            reading.append((slot, tokens, kept))
        batch = self.batch
        batch.clear()
        for slot, tokens, start in reading:
            while start < len(tokens) - 1:
                if batch.n_tokens == batch.capacity:
                    if self._decode(slots) != 0:
                        return False
                    batch.clear()
                n = min(len(tokens) - 1 - start, batch.capacity - batch.n_tokens)
                batch.add(slot, tokens[start : start + n], start, False)
                start += n
        if batch.n_tokens + len(reading) > batch.capacity:  # the last tokens go in together
            if self._decode(slots) != 0:
                return False
            batch.clear()
        for slot, tokens, _ in reading:
            batch.add(slot, [tokens[-1]], len(tokens) - 1, True)
        return True

    def _decode(self, slots: set[int]) -> int:
        """Decode the batch (its cost kept by size); when the pool is full, once more after the other
        slots' cells are dropped (they are read again when those slots draft next)."""
        self.batch.struct.n_tokens = self.batch.n_tokens
        t0 = time.perf_counter()
        rc = ll.llama_decode(self.ctx, self.batch.struct)
        if rc == 1:
            for slot in [s for s in self._held if s not in slots]:
                ll.llama_memory_seq_rm(self.memory, slot, -1, -1)
                del self._held[slot]
            t0 = time.perf_counter()
            rc = ll.llama_decode(self.ctx, self.batch.struct)
        if rc == 0:
            self.cost.observe(self.batch.n_tokens, time.perf_counter() - t0)
        return rc

    def _read(self, p_min: float) -> list[int | None]:
        """Each output row's top token, in batch order; None where it is not one the target has, or
        less likely than `p_min`."""
        out = []
        for i in self.batch.output_rows:
            row = np.ctypeslib.as_array(ll.llama_get_logits_ith(self.ctx, i), shape=(self.vocab.n_vocab,))
            token = int(row.argmax())
            if token >= self.n_vocab or (p_min > 0 and 1.0 / np.exp(row - row[token]).sum() < p_min):
                out.append(None)
            else:
                out.append(token)
        return out

    def close(self) -> None:
        if getattr(self, "ctx", None):
            ll.llama_free(self.ctx)
            self.ctx = None
        if self.model:
            ll.llama_model_free(self.model)
            self.model = None


def _shared(a: list[int], b: list[int]) -> int:
    """The length of the prefix two token lists share."""
    n = min(len(a), len(b))
    for i in range(n):
        if a[i] != b[i]:
            return i
    return n


def vocab_difference(target_model, draft_model) -> str | None:
    """Why the draft model's tokens do not mean the target's (llama.cpp's check), or None."""
    t, d = ll.llama_model_get_vocab(target_model), ll.llama_model_get_vocab(draft_model)
    if ll.llama_vocab_type(t) != ll.llama_vocab_type(d):
        return "its tokenizer is of another kind"
    for name, add, token in (
        ("BOS", ll.llama_vocab_get_add_bos, ll.llama_vocab_bos),
        ("EOS", ll.llama_vocab_get_add_eos, ll.llama_vocab_eos),
    ):
        if add(t) != add(d) or (add(t) and token(t) != token(d)):
            return f"its {name} token differs"
    n_t, n_d = ll.llama_vocab_n_tokens(t), ll.llama_vocab_n_tokens(d)
    if abs(n_t - n_d) > VOCAB_SIZE_SLACK:
        return f"its vocabulary has {n_d} tokens, this model's {n_t}"
    text = ll.llama_vocab_get_text
    for i in range(VOCAB_CHECK_FROM, min(n_t, n_d)):
        if text(t, i) != text(d, i):
            there, here = (text(v, i).decode("utf-8", errors="replace") for v in (d, t))
            return f"token {i} is {there!r} there, {here!r} here"
    return None
