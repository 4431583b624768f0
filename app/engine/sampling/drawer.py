"""Each sequence's next token, drawn from its batch row's logits after a decode: the constrained
rows' logits masked first (all their masks filled together), greedy rows from one pass over their
logits, the others by their sampler chains; a constrained reply's matcher then takes the token."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from ..probs import TokenProbs
from ..sequence import Sequence
from .draw import Draw, draw_for


def greedy(seq: Sequence) -> bool:
    """A greedy reply: its tokens are the top ones (after the chain's penalties, if any; under a
    grammar, of its masked logits), so guesses of them can be checked exactly (speculative decoding
    drafts for these only). A lazy grammar still waiting for its trigger does not draft: a trigger
    among the guesses would leave the rows after it unmasked."""
    if seq.grammar is not None:
        return greedy_in_grammar(seq) and seq.grammar.holds
    return seq.draw is Draw.ARGMAX or (seq.draw is Draw.CHAIN and seq.params.is_greedy)


def greedy_in_grammar(seq: Sequence) -> bool:
    """A greedy reply under a grammar, with nothing else to move the likeliest token: its token is the
    top one of its masked logits, read with the others' in one pass."""
    params = seq.params
    return seq.grammar is not None and seq.draw is Draw.CHAIN and params.is_greedy and not params.greedy_needs_chain


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
        """Draw the next token of every sequence at its row: the constrained rows masked first, all
        their masks filled together; greedy ones from one pass over their rows' logits."""
        samplers = self.backend.samplers
        drawn, forced = [], {}
        constrained = [(seq.grammar, samplers.row_logits(row)) for seq, row in rows.items() if seq.grammar is not None]
        if constrained:
            forced = self.backend.constraints.mask(constrained)
            refused = {seq for seq in rows if seq.grammar is not None and seq.grammar.error is not None}
            drawn = [Drawn(seq, error=constraint_error(seq)) for seq in refused]  # a limit of llguidance's
            rows = {seq: row for seq, row in rows.items() if seq not in refused}
        greedy_rows = {seq: row for seq, row in rows.items() if seq.draw is Draw.ARGMAX or greedy_in_grammar(seq)}
        top = dict(zip(greedy_rows, samplers.top_tokens(list(greedy_rows.values())), strict=True))
        for seq, row in rows.items():
            token, probs = top.get(seq), None
            if token is None and self._takes_forced(seq, forced.get(seq.grammar)):
                token = forced[seq.grammar]
                samplers.accept(seq.sampler, token)  # its penalties see it, as after a draw
            if token is None or (seq.params.ignore_eos and self.backend.vocab.is_eog(token)):
                token, probs = self._draw(seq, row)  # the chain bans end-of-generation tokens when told to
            error = self.refusal(seq, token)
            drawn.append(Drawn(seq, token, probs) if error is None else Drawn(seq, error=error))
        return drawn

    def _takes_forced(self, seq: Sequence, token: int | None) -> bool:
        """Whether a sampled reply takes the one token its grammar allows without running its chain
        (about half a JSON reply's tokens: each draw skipped costs what a free row's does). Not where
        the chain would say more: the probabilities asked for, Mirostat's surprise it learns from, an
        end-of-generation token the chain bans under ignore EOS."""
        if token is None or seq.draw is not Draw.CHAIN or seq.params.mirostat:
            return False
        return not (seq.params.ignore_eos and self.backend.vocab.is_eog(token))

    def mask_drafted(self, seq: Sequence, rows: list[int], draft: tuple[int, ...]) -> None:
        """A constrained draft's rows masked, each as the guesses before it leave the matcher."""
        if seq.grammar is not None:
            samplers = self.backend.samplers
            self.backend.constraints.mask_drafted(seq.grammar, [samplers.row_logits(row) for row in rows], list(draft))

    def refusal(self, seq: Sequence, token: int) -> str | None:
        """A constrained reply's matcher takes `token`; why the reply cannot go on, or None."""
        if seq.grammar is None or self.backend.constraints.accept(seq.grammar, token) is None:
            return None
        return constraint_error(seq)

    def _draw(self, seq: Sequence, row: int) -> tuple[int, TokenProbs | None]:
        samplers = self.backend.samplers
        if seq.draw is Draw.IN_GRAPH:
            return samplers.sampled(seq.sampler, row), None
        if seq.draw is Draw.PROBS:
            params = seq.params
            return samplers.sample_with_probs(seq.sampler, row, params.n_probs, params.is_greedy)
        return samplers.sample(seq.sampler, row), None


def constraint_error(seq: Sequence) -> str:
    return f"the grammar cannot go on: {seq.grammar.error or 'it refused the token drawn'}"
