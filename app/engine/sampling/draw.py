"""The ways a sequence's next token is drawn, and which one its sampling parameters take."""

from __future__ import annotations

from enum import Enum, auto

from .params import SamplingParams


class Draw(Enum):
    """How a sequence's next token is drawn from the logits of its batch row."""

    IN_GRAPH = auto()  # by its sampler chain inside llama.cpp's decode graph (backend sampling)
    ARGMAX = auto()  # greedy with nothing to penalise: the top logit, read for every such row at once
    CHAIN = auto()  # by its sampler chain on the host, over the whole vocabulary
    PROBS = auto()  # by the chain on the host, keeping what it left: the token probabilities asked for


def draw_for(params: SamplingParams, in_graph: bool) -> Draw:
    """The draw for `params`; `in_graph`: whether its chain may run in the decode graph."""
    if params.n_probs is not None:
        return Draw.PROBS
    if params.grammar is not None:  # the constraint masks the logits on the host
        return Draw.CHAIN
    if in_graph:
        return Draw.IN_GRAPH
    return Draw.ARGMAX if params.is_greedy and not params.greedy_needs_chain else Draw.CHAIN
