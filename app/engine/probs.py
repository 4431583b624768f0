"""How likely a sampled token was: under the model (its raw logits) and after the request's samplers."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

MAX_TOP = 100  # alternatives one token can report (OpenAI allows 20, llama-server's n_probs more)


@dataclass(frozen=True, slots=True)
class TokenChoice:
    token: int
    piece: bytes  # the token's bytes (a piece of a UTF-8 character is possible)
    logprob: float  # natural log of its probability under the model, before any sampler
    sampled_p: float  # its probability after the samplers (penalties, top-k/p, min-p, temperature); 0: cut

    @property
    def text(self) -> str:
        return self.piece.decode("utf-8", "replace")


@dataclass(frozen=True, slots=True)
class TokenProbs:
    chosen: TokenChoice
    top: tuple[TokenChoice, ...]  # the most likely tokens under the model, most likely first


def token_probs(
    logits: np.ndarray,
    kept_ids: np.ndarray,
    kept_logits: np.ndarray | None,
    chosen: int,
    n_top: int,
    piece,
) -> TokenProbs:
    """The chosen token's and the `n_top` likeliest tokens' probabilities.

    `logits` are the model's, over the whole vocabulary; `kept_ids` the candidates the samplers
    left, with their logits as the samplers left them (`kept_logits`), or None when the last
    sampler was greedy (it draws the top token for certain). `piece(token)` gives a token's bytes.
    """
    log_z = _log_sum_exp(logits)
    after = _after_samplers(len(logits), kept_ids, kept_logits, chosen)
    top = np.argpartition(logits, -n_top)[-n_top:] if 0 < n_top < len(logits) else np.arange(min(n_top, len(logits)))
    top = top[np.argsort(-logits[top], kind="stable")]

    def choice(token: int) -> TokenChoice:
        return TokenChoice(token, piece(token), float(logits[token] - log_z), float(after[token]))

    return TokenProbs(choice(chosen), tuple(choice(int(t)) for t in top))


def _log_sum_exp(x: np.ndarray) -> float:
    m = float(x.max())
    return m + float(np.log(np.exp(x - m, dtype=np.float64).sum()))


def _after_samplers(n_vocab: int, ids: np.ndarray, logits: np.ndarray | None, chosen: int) -> np.ndarray:
    """Every token's probability as the final draw saw it: a softmax over the candidates left."""
    p = np.zeros(n_vocab)
    if logits is None:
        p[chosen] = 1.0
    else:
        kept = np.exp(logits - logits.max(), dtype=np.float64)
        p[ids] = kept / kept.sum()
    return p
