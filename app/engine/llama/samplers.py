"""`Samplers`: a context's sampler chains, built per request, run on the host or inside the decode
graph, and the logits they draw from."""

from __future__ import annotations

import ctypes
import math
import threading
from collections import OrderedDict

import llama_cpp as ll
import numpy as np

from ..probs import TokenProbs, token_probs
from ..sampling.params import MOVES_TOP, SamplingParams
from .batch import Batch
from .vocab import Vocab

DRY_KEPT = 8  # DRY settings whose sampler is kept to clone
_TOKEN_DATA = np.dtype([("id", np.int32), ("logit", np.float32), ("p", np.float32)])  # llama_token_data


class Samplers:
    """The sampler chains of one llama_context and the logits of its last decode (engine thread only)."""

    def __init__(self, ctx, vocab: Vocab, batch: Batch, capacity: int):
        self.ctx = ctx
        self._vocab = vocab
        self._n_vocab = vocab.n_vocab
        self._batch = batch
        self._capacity = capacity  # the rows llama.cpp's logits buffer holds at least
        self._logits_address, self._logits = 0, np.empty((0, 0), dtype=np.float32)
        self._attached: dict[int, object] = {}  # seq_id -> the sampler llama.cpp runs in the graph for it
        self._token_ids = np.arange(vocab.n_vocab, dtype=np.int32)  # a fresh candidate array's ids
        # DRY samplers made once per setting, on the prompt thread (`make_dry`), and cloned for each
        # request: making one reads every token of the vocabulary for each sequence breaker (~18 ms
        # here for the default four), a clone takes ~0.04 ms; the lock guards the kept ones
        self._dry: OrderedDict[tuple, object] = OrderedDict()
        self._dry_lock = threading.Lock()

    def new(self, params: SamplingParams, seed: int, history: list[int], logit_bias: tuple = ()):
        """A request's sampler chain as llama.cpp's common_sampler_init builds it: the logit bias
        (`logit_bias`: token id and bias pairs, the request's texts made tokens), then the samplers in
        the request's order (those that would do nothing left out), then the draw (greedy, Mirostat or
        the random draw); its penalties and DRY primed with the prompt's `history`."""
        chain = ll.llama_sampler_chain_init(ll.llama_sampler_chain_default_params())
        seed &= 0xFFFFFFFF
        ordered = [] if params.mirostat else [name for name in params.samplers if _runs(name, params)]
        if params.is_greedy:  # after the last sampler that can move the likeliest token, the rest keep it
            moving = [i for i, name in enumerate(ordered) if name in MOVES_TOP]
            ordered = ordered[: moving[-1] + 1] if moving else []
        samplers = [self._ban(self._vocab.eog_tokens)] if params.ignore_eos else []  # as llama.cpp: never drawn
        if logit_bias:
            samplers.append(self._biased(logit_bias))
        samplers += [self._sampler(name, params, seed) for name in ordered]
        samplers += self._draw(params, seed)
        for sampler in samplers:
            ll.llama_sampler_chain_add(chain, sampler)
        # the penalties and DRY look back into the prompt too, as llama-server's do
        window = max((_window(name, params) for name in ordered), default=0)
        for token in history[-window:] if window else ():
            ll.llama_sampler_accept(chain, token)
        return chain

    def _sampler(self, name: str, p: SamplingParams, seed: int):
        """One sampler of the order, as common/sampling.cpp makes it."""
        if name == "penalties":
            return ll.llama_sampler_init_penalties(
                self._n_vocab, p.repeat_last_n, p.repeat_penalty, p.frequency_penalty, p.presence_penalty
            )
        if name == "dry":
            return self._dry_clone(p)
        if name == "top_n_sigma":
            return ll.llama_sampler_init_top_n_sigma(p.top_n_sigma)
        if name == "top_k":
            return ll.llama_sampler_init_top_k(p.top_k)
        if name == "typ_p":
            return ll.llama_sampler_init_typical(p.typical_p, 1)
        if name == "top_p":
            return ll.llama_sampler_init_top_p(p.top_p, 1)
        if name == "min_p":
            return ll.llama_sampler_init_min_p(p.min_p, 1)
        if name == "xtc":
            return ll.llama_sampler_init_xtc(p.xtc_probability, p.xtc_threshold, 1, seed)
        assert name == "temperature", name
        return ll.llama_sampler_init_temp_ext(p.temperature, p.dynatemp_range, p.dynatemp_exponent)

    def make_dry(self, p: SamplingParams) -> None:
        """Make the DRY sampler of `p`'s setting, unless kept (any thread: the prompt thread, so that
        the engine thread only clones it); the last DRY_KEPT settings are kept."""
        if not p.drys:
            return
        key = _dry_key(p)
        with self._dry_lock:
            if key in self._dry:
                return
        breakers = [b.encode("utf-8") for b in p.dry_sequence_breakers]
        array = (ctypes.c_char_p * len(breakers))(*breakers)
        made = ll.llama_sampler_init_dry(self._vocab.model_vocab, *key[:4], array, len(breakers))
        with self._dry_lock:
            if key in self._dry:  # made meanwhile by another
                ll.llama_sampler_free(made)
                return
            self._dry[key] = made
            while len(self._dry) > DRY_KEPT:
                ll.llama_sampler_free(self._dry.popitem(last=False)[1])

    def _dry_clone(self, p: SamplingParams):
        """A request's own DRY sampler: a clone of its setting's (made here if it was not kept)."""
        key = _dry_key(p)
        while True:
            with self._dry_lock:
                made = self._dry.get(key)
                if made is not None:
                    self._dry.move_to_end(key)
                    return ll.llama_sampler_clone(made)
            self.make_dry(p)

    def close(self) -> None:
        """Free the samplers kept to clone (the chains are freed with their sequences)."""
        with self._dry_lock:
            while self._dry:
                ll.llama_sampler_free(self._dry.popitem()[1])

    def _draw(self, p: SamplingParams, seed: int) -> list:
        """The chain's end, which picks the token: the likeliest left, Mirostat (after the temperature,
        as llama.cpp runs it), or a random draw by the probabilities left."""
        if p.is_greedy:
            return [ll.llama_sampler_init_greedy()]
        if p.mirostat == 1:
            return [
                ll.llama_sampler_init_temp(p.temperature),
                ll.llama_sampler_init_mirostat(self._n_vocab, seed, p.mirostat_tau, p.mirostat_eta, 100),
            ]
        if p.mirostat == 2:
            return [
                ll.llama_sampler_init_temp(p.temperature),
                ll.llama_sampler_init_mirostat_v2(seed, p.mirostat_tau, p.mirostat_eta),
            ]
        return [ll.llama_sampler_init_dist(seed)]

    def _biased(self, logit_bias: tuple):
        biases = (ll.llama_logit_bias * len(logit_bias))(*logit_bias)
        return ll.llama_sampler_init_logit_bias(self._n_vocab, len(logit_bias), biases)

    def _candidates(self, row: int):
        """Every token with its logit at batch row `row`, as the array llama.cpp's samplers take."""
        n_vocab = self._n_vocab
        logits = np.ctypeslib.as_array(ll.llama_get_logits_ith(self.ctx, row), shape=(n_vocab,))
        candidates = np.empty(n_vocab, dtype=_TOKEN_DATA)
        candidates["id"] = self._token_ids
        candidates["logit"] = logits
        candidates["p"] = 0.0
        array = ll.llama_token_data_array(candidates.ctypes.data_as(ctypes.POINTER(ll.llama_token_data)), n_vocab, -1, False)
        return candidates, array

    @staticmethod
    def _read(array) -> np.ndarray:
        """The candidates where the array says they are now (a sampler may point it at its own buffer)."""
        kept = np.ctypeslib.as_array(
            ctypes.cast(array.data, ctypes.POINTER(ctypes.c_byte)), shape=(array.size * _TOKEN_DATA.itemsize,)
        )
        return kept.view(_TOKEN_DATA)

    def _ban(self, tokens: tuple[int, ...]):
        return self._biased(tuple((t, -math.inf) for t in tokens))

    def logits(self, row: int) -> np.ndarray:
        """A copy of the logits the last decode produced at batch row `row`."""
        return self.row_logits(row).copy()

    def row_logits(self, row: int) -> np.ndarray:
        """The logits the last decode produced at batch row `row`, as llama.cpp holds them (no copy):
        a constraint masks them in place, and every draw after reads them masked."""
        return np.ctypeslib.as_array(ll.llama_get_logits_ith(self.ctx, row), shape=(self._n_vocab,))

    def sample(self, sampler, row: int) -> int:
        return ll.llama_sampler_sample(sampler, self.ctx, row)

    def accept(self, sampler, token: int) -> None:
        """A token put into the reply without a draw (a budget's closing marker): its penalties see it."""
        ll.llama_sampler_accept(sampler, token)

    def top_tokens(self, rows: list[int]) -> list[int]:
        """The top-logit token of each batch row in `rows` (greedy, as llama.cpp's greedy sampler: the
        first of equals), from one view of the last decode's logits: no pass over the vocabulary per
        token in Python, no candidate array per token as a sampler chain builds."""
        if not rows:
            return []
        outputs = self._batch.output_rows  # llama.cpp keeps the outputs in batch order
        logits = self._logits_view()[: len(outputs)]
        if rows == outputs:
            return logits.argmax(axis=1).tolist()
        index = {row: k for k, row in enumerate(outputs)}
        return logits[[index[row] for row in rows]].argmax(axis=1).tolist()

    def _logits_view(self) -> np.ndarray:
        """The last decode's logits, a row per output, as numpy sees them (no copy). llama.cpp's
        buffer holds a row for each sequence at least, and one per output of the last batch; the view
        is made anew when it moves or grows."""
        address = ctypes.addressof(ll.llama_get_logits(self.ctx).contents)
        rows = max(self._capacity, len(self._batch.output_rows))  # drafted runs add rows
        if address != self._logits_address or rows > len(self._logits):
            buffer = (ctypes.c_float * (rows * self._n_vocab)).from_address(address)
            self._logits = np.frombuffer(buffer, dtype=np.float32).reshape(rows, self._n_vocab)
            self._logits_address = address
        return self._logits

    def attach(self, seq_id: int, sampler) -> bool:
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

    def detach_all(self) -> None:
        """Take every sampler off the graph (before its context is freed: a new one gets them again
        as `attach` is asked)."""
        for seq_id in self._attached:
            ll.llama_set_sampler(self.ctx, seq_id, None)
        self._attached.clear()

    def sampled(self, sampler, row: int) -> int:
        """The token drawn at batch row `row` with `sampler` attached, which then takes it into its
        state (penalties, the random draw). llama.cpp runs in the graph the chain's first samplers
        that have a graph form; where one has none (DRY, XTC, top-nσ, typical-p, Mirostat), the graph
        stops there and llama_sampler_sample runs the rest on the host, from what the graph left."""
        return ll.llama_sampler_sample(sampler, self.ctx, row)

    def free(self, sampler) -> None:
        """Free a chain made by `new`, taken off the graph first."""
        for seq_id in [seq_id for seq_id, attached in self._attached.items() if attached == sampler]:
            ll.llama_set_sampler(self.ctx, seq_id, None)  # the graph must not keep a freed sampler
            del self._attached[seq_id]
        ll.llama_sampler_free(sampler)

    def sample_with_probs(self, sampler, row: int, n_top: int, greedy: bool) -> tuple[int, TokenProbs]:
        """Sample as llama_sampler_sample does (apply the chain to every token, then accept the draw),
        keeping what the samplers left, to tell how likely the drawn token and its rivals were."""
        logits = self.row_logits(row)
        candidates, array = self._candidates(row)  # `array` points into `candidates`: both kept
        ll.llama_sampler_apply(sampler, ctypes.byref(array))
        kept = self._read(array)
        token = int(kept["id"][array.selected])
        ll.llama_sampler_accept(sampler, token)
        kept_logits = None if greedy else kept["logit"].copy()
        return token, token_probs(logits.copy(), kept["id"].copy(), kept_logits, token, n_top, self._vocab.spell)


def _runs(name: str, p: SamplingParams) -> bool:
    """Whether sampler `name` of the order would change anything (llama.cpp's own no-ops are left out)."""
    if name == "penalties":
        return p.penalizes and p.repeat_last_n > 0
    if name == "dry":
        return p.drys
    if name == "top_n_sigma":
        return p.top_n_sigma > 0
    if name == "top_k":
        return p.top_k > 0
    if name == "typ_p":
        return p.typical_p < 1
    if name == "top_p":
        return p.top_p < 1
    if name == "min_p":
        return p.min_p > 0
    if name == "xtc":
        return p.xtc_probability > 0 and p.xtc_threshold <= 0.5
    return True  # the temperature: it scales, or at 0 keeps the likeliest only


def _dry_key(p: SamplingParams) -> tuple:
    """What a DRY sampler is made of: its multiplier, base, allowed length, window, then its breakers."""
    return (p.dry_multiplier, p.dry_base, p.dry_allowed_length, p.dry_penalty_last_n, p.dry_sequence_breakers)


def _window(name: str, p: SamplingParams) -> int:
    """How many of the last tokens sampler `name` looks back at."""
    return {"penalties": p.repeat_last_n, "dry": p.dry_penalty_last_n}.get(name, 0)
