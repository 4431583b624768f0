"""Each sequence's next token, drawn from its batch row's logits after a decode: greedy rows from one
pass over their logits, the others by their sampler chains, constrained rows through their grammars."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from ..probs import TokenProbs
from ..sequence import Sequence
from .draw import Draw, draw_for

GRAMMAR_TOKEN_S = 0.05  # a grammar slower than this for one token stops its reply (a hostile grammar stalls the batch)


def greedy(seq: Sequence) -> bool:
    """A greedy reply free of a grammar: its tokens are the top ones (after the chain's penalties, if
    any), so guesses of them can be checked exactly (speculative decoding drafts for these only)."""
    return seq.grammar is None and (seq.draw is Draw.ARGMAX or (seq.draw is Draw.CHAIN and seq.params.temperature <= 0))


def greedy_in_grammar(seq: Sequence) -> bool:
    """A greedy reply under a grammar, with nothing else to move the likeliest token: its draw starts
    from the top token, read with the others' in one pass."""
    params = seq.params
    return seq.grammar is not None and seq.draw is Draw.CHAIN and params.temperature <= 0 and not params.greedy_needs_chain


@dataclass(frozen=True)
class Drawn:
    """A sequence's next token, or why its reply stops instead."""

    seq: Sequence
    token: int = -1
    probs: TokenProbs | None = None
    error: str | None = None


class Drawer:
    def __init__(self, backend):
        self.backend = backend  # its samplers and vocabulary, read at each draw

    def place(self, seq: Sequence) -> None:
        """Attach the sequence's sampler to its slot for the decode graph, or (sampling on the host)
        take another's off it: llama.cpp would draw with that one and copy no logits."""
        wanted = seq.sampler if seq.draw is Draw.IN_GRAPH else None
        if not self.backend.samplers.attach(seq.slot_id, wanted):
            seq.draw = draw_for(seq.params, in_graph=False)  # one of its samplers cannot run there

    def draw_all(self, rows: Mapping[Sequence, int]) -> list[Drawn]:
        """Draw the next token of every sequence at its row; greedy ones from one pass over their rows' logits."""
        samplers = self.backend.samplers
        greedy_rows = {seq: row for seq, row in rows.items() if seq.draw is Draw.ARGMAX or greedy_in_grammar(seq)}
        top = dict(zip(greedy_rows, samplers.top_tokens(list(greedy_rows.values())), strict=True))
        drawn = []
        for seq, row in rows.items():
            token, probs = top.get(seq), None
            if seq.grammar is not None and seq.draw is not Draw.PROBS:
                token, grammar_s = samplers.sample_constrained(seq.sampler, seq.grammar, row, token)
                if grammar_s > GRAMMAR_TOKEN_S:  # every other stream waits for it
                    error = f"the grammar took over {GRAMMAR_TOKEN_S * 1000:.0f} ms to allow one token: the reply stops here"
                    drawn.append(Drawn(seq, error=error))
                    continue
            elif token is None or (seq.params.ignore_eos and self.backend.vocab.is_eog(token)):
                token, probs = self._draw(seq, row)  # the chain bans end-of-generation tokens when told to
            drawn.append(Drawn(seq, token, probs))
        return drawn

    def _draw(self, seq: Sequence, row: int) -> tuple[int, TokenProbs | None]:
        samplers = self.backend.samplers
        if seq.draw is Draw.IN_GRAPH:
            return samplers.sampled(seq.sampler, row), None
        if seq.draw is Draw.PROBS:
            params = seq.params
            return samplers.sample_with_probs(seq.sampler, row, params.n_probs, params.temperature <= 0, seq.grammar)
        return samplers.sample(seq.sampler, row), None
