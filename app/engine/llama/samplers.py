"""`Samplers`: a context's sampler chains, built per request, run on the host or inside the decode
graph, and the logits they draw from."""

from __future__ import annotations

import ctypes
import math
import re
import time
from collections import OrderedDict
from dataclasses import dataclass, field

import llama_cpp as ll
import numpy as np

from ..probs import TokenProbs, token_probs
from ..sampling.params import SamplingParams
from .batch import Batch
from .log_capture import last_error
from .vocab import Vocab

_TOKEN_DATA = np.dtype([("id", np.int32), ("logit", np.float32), ("p", np.float32)])  # llama_token_data
GRAMMAR_FIRST = 64  # a greedy draw the grammar refuses looks among this many likeliest tokens first
GRAMMARS_KEPT = 16  # parsed grammars kept to copy for the next request with the same one (5 us a copy)


@dataclass(eq=False)
class Grammar:
    """A request's grammar: llama.cpp's sampler, and for a lazy one the patterns it waits for. A lazy
    grammar lets the reply run free until a trigger matches its text, then holds the reply from the
    match (its first group, if any) on, as llama.cpp's lazy grammar does. That waiting is done here,
    not by llama.cpp's: a bad pattern, or a trigger whose token carries text the grammar refuses,
    aborts the process there (a C++ exception through the C API)."""

    sampler: object
    triggers: tuple[re.Pattern[bytes], ...] = ()
    waiting: bool = False  # no trigger yet: the reply is free
    free: bool = False  # the text from the trigger broke the grammar: the reply stays free
    text: bytearray = field(default_factory=bytearray)  # the reply while waiting, control tokens written out

    @property
    def holds(self) -> bool:
        """Whether the grammar constrains the next token."""
        return not (self.waiting or self.free)


def _trigger_start(match: re.Match[bytes]) -> int:
    """Where a trigger's match puts the grammar to work: its first group that matched text, else the match."""
    return next((match.start(i) for i in range(1, len(match.groups()) + 1) if match.group(i)), match.start())


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
        # GBNF text -> llama.cpp's parsed grammar, never drawn with: each request gets a copy (the
        # prompt thread alone parses, copies and frees these)
        self._parsed: OrderedDict[str, object] = OrderedDict()

    def new(self, params: SamplingParams, seed: int, history: list[int]):
        """A request's sampler chain, its penalties primed with the prompt's `history`."""
        chain = ll.llama_sampler_chain_init(ll.llama_sampler_chain_default_params())
        add = ll.llama_sampler_chain_add
        if params.ignore_eos:  # as llama.cpp does: an end-of-generation token can never be drawn
            add(chain, self._ban(self._vocab.eog_tokens))
        if params.penalizes:
            penalties = (params.repeat_penalty, params.frequency_penalty, params.presence_penalty)
            add(chain, ll.llama_sampler_init_penalties(self._n_vocab, params.repeat_last_n, *penalties))
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

    def grammar(self, text: str, patterns: tuple[re.Pattern[bytes], ...] = ()) -> Grammar:
        """llama.cpp's grammar sampler for `text` (GBNF, root rule "root"), lazy when given trigger
        `patterns` (sampling/constraints.py compiles them); ValueError when it does not parse."""
        return Grammar(ll.llama_sampler_clone(self._parse(text)), patterns, waiting=bool(patterns))

    def _parse(self, text: str):
        """The parsed grammar of `text`: parsed once, kept for the next requests (a schema's grammar
        comes again with each request of a client; a large one takes llama.cpp 0.5 s to parse)."""
        parsed = self._parsed.get(text)
        if parsed is not None:
            self._parsed.move_to_end(text)
            return parsed
        parsed = ll.llama_sampler_init_grammar(self._vocab.model_vocab, text.encode(), b"root")
        if not parsed:
            reason = last_error() or "llama.cpp could not parse it"
            raise ValueError(f"the grammar does not parse: {reason}")
        self._parsed[text] = parsed
        while len(self._parsed) > GRAMMARS_KEPT:
            ll.llama_sampler_free(self._parsed.popitem(last=False)[1])
        return parsed

    def close(self) -> None:
        """Free the parsed grammars kept (before the model whose vocabulary they read)."""
        while self._parsed:
            ll.llama_sampler_free(self._parsed.popitem()[1])

    @staticmethod
    def free_grammar(grammar: Grammar) -> None:
        """Free a grammar made by `grammar` (never attached to the graph: any thread may free it)."""
        ll.llama_sampler_free(grammar.sampler)

    def sample_constrained(self, sampler, grammar: Grammar, row: int, greedy_token: int | None = None) -> tuple[int, float]:
        """Draw with the chain (or take the greedy top token), and keep it if the grammar allows it;
        else draw again from the tokens the grammar allows. Checking one token first spares the
        grammar a pass over the whole vocabulary at most steps (as llama.cpp's own sampler does).
        A lazy grammar still waiting lets the draw be, and watches for its trigger. Returns the
        token and the seconds of this thread's CPU the grammar's own work took: not the wall clock,
        which a busy machine stretches (the chain's draws not counted either: a penalised chain's
        pass over the vocabulary is every reply's, not the grammar's doing)."""
        token = greedy_token
        if token is None:
            token = self._chain_draw(sampler, row)
        t0 = time.thread_time()
        if not grammar.holds:
            ll.llama_sampler_accept(sampler, token)
            self._watch(grammar, token)
            return token, time.thread_time() - t0
        spent = 0.0
        if not self._allows(grammar.sampler, token):
            allowed = self._best_allowed(grammar.sampler, row) if greedy_token is not None else None
            if allowed is not None:
                token = allowed
            else:
                candidates, array = self._candidates(row)
                ll.llama_sampler_apply(grammar.sampler, ctypes.byref(array))
                spent = time.thread_time() - t0
                ll.llama_sampler_apply(sampler, ctypes.byref(array))
                token = int(self._read(array)["id"][array.selected])
                t0 = time.thread_time()
        ll.llama_sampler_accept(grammar.sampler, token)
        spent += time.thread_time() - t0
        ll.llama_sampler_accept(sampler, token)
        return token, spent

    def _chain_draw(self, sampler, row: int) -> int:
        """The chain's choice at a row, not yet taken (a grammar may refuse it)."""
        candidates, array = self._candidates(row)
        ll.llama_sampler_apply(sampler, ctypes.byref(array))
        return int(self._read(array)["id"][array.selected])

    def _watch(self, grammar: Grammar, token: int) -> None:
        """A lazy grammar's reply took `token`: once a trigger matches the text, the grammar reads the
        text from the match on, each token checked first (a refused one would abort in llama.cpp)."""
        if not grammar.waiting:
            return
        grammar.text += self._vocab.spell(token)
        starts = [_trigger_start(m) for m in (p.search(grammar.text) for p in grammar.triggers) if m]
        if not starts:
            return
        grammar.waiting = False
        held = bytes(grammar.text[min(starts) :]).decode("utf-8", errors="replace")
        grammar.text.clear()
        for t in self._vocab.tokenize(held, add_special=False):  # the grammar reads characters, however split
            if not self._allows(grammar.sampler, t):
                grammar.free = True
                return
            ll.llama_sampler_accept(grammar.sampler, t)

    def _best_allowed(self, grammar, row: int) -> int | None:
        """Greedy under a grammar: the likeliest of the GRAMMAR_FIRST likeliest tokens it allows, which
        is the likeliest of all it allows; None when it allows none of them (then all are checked)."""
        logits = np.ctypeslib.as_array(ll.llama_get_logits_ith(self.ctx, row), shape=(self._n_vocab,))
        ids = np.argpartition(logits, -GRAMMAR_FIRST)[-GRAMMAR_FIRST:]
        few = np.empty(GRAMMAR_FIRST, dtype=_TOKEN_DATA)
        few["id"], few["logit"], few["p"] = ids, logits[ids], 0.0
        array = ll.llama_token_data_array(few.ctypes.data_as(ctypes.POINTER(ll.llama_token_data)), GRAMMAR_FIRST, -1, False)
        ll.llama_sampler_apply(grammar, ctypes.byref(array))
        kept = self._read(array)
        finite = np.isfinite(kept["logit"])
        if not finite.any():
            return None
        best = np.flatnonzero(finite)[np.argmax(kept["logit"][finite])]
        return int(kept["id"][best])

    def _allows(self, grammar, token: int) -> bool:
        one = np.array([(token, 0.0, 0.0)], dtype=_TOKEN_DATA)
        array = ll.llama_token_data_array(one.ctypes.data_as(ctypes.POINTER(ll.llama_token_data)), 1, -1, False)
        ll.llama_sampler_apply(grammar, ctypes.byref(array))
        return bool(np.isfinite(one["logit"][0]))

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
        biases = (ll.llama_logit_bias * len(tokens))(*((t, -math.inf) for t in tokens))
        return ll.llama_sampler_init_logit_bias(self._n_vocab, len(tokens), biases)

    def logits(self, row: int) -> np.ndarray:
        """A copy of the logits the last decode produced at batch row `row`."""
        n_vocab = self._n_vocab
        return np.ctypeslib.as_array(ll.llama_get_logits_ith(self.ctx, row), shape=(n_vocab,)).copy()

    def sample(self, sampler, row: int) -> int:
        return ll.llama_sampler_sample(sampler, self.ctx, row)

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
        """The token the graph drew at batch row `row` with `sampler` attached, which then takes it
        into its state (penalties, the random draw) as llama_sampler_sample does."""
        token = ll.llama_get_sampled_token_ith(self.ctx, row)
        ll.llama_sampler_accept(sampler, token)
        return token

    def free(self, sampler) -> None:
        """Free a chain made by `new`, taken off the graph first."""
        for seq_id in [seq_id for seq_id, attached in self._attached.items() if attached == sampler]:
            ll.llama_set_sampler(self.ctx, seq_id, None)  # the graph must not keep a freed sampler
            del self._attached[seq_id]
        ll.llama_sampler_free(sampler)

    def sample_with_probs(
        self, sampler, row: int, n_top: int, greedy: bool, grammar: Grammar | None = None
    ) -> tuple[int, TokenProbs]:
        """Sample as llama_sampler_sample does (apply the chain to every token, then accept the draw),
        keeping what the samplers left, to tell how likely the drawn token and its rivals were."""
        logits = np.ctypeslib.as_array(ll.llama_get_logits_ith(self.ctx, row), shape=(self._n_vocab,))
        candidates, array = self._candidates(row)  # `array` points into `candidates`: both kept
        holds = grammar is not None and grammar.holds
        if holds:
            ll.llama_sampler_apply(grammar.sampler, ctypes.byref(array))
        ll.llama_sampler_apply(sampler, ctypes.byref(array))
        kept = self._read(array)
        token = int(kept["id"][array.selected])
        if holds:
            ll.llama_sampler_accept(grammar.sampler, token)
        elif grammar is not None:
            self._watch(grammar, token)
        ll.llama_sampler_accept(sampler, token)
        kept_logits = None if greedy else kept["logit"].copy()
        return token, token_probs(logits.copy(), kept["id"].copy(), kept_logits, token, n_top, self._vocab.spell)
