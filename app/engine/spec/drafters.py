"""Speculative decoding: tokens guessed from the sequence's own prompt and reply (an n-gram lookup)
or by a draft model (llama/draft.py), verified in the same decode as every other sequence's next token.

A reply that quotes or edits its prompt (a refactor, a summary quoting a document) repeats long
runs of it: where the last few tokens appeared before, the tokens that followed them there are a
cheap guess of what comes next. The guesses go into the batch after the sequence's next token,
each with its logits; the greedy choice at each row says how many were right, and the cells of
the wrong ones are removed. Drafting is for greedy sequences only, so a reply is exactly the one
decoding token by token would give.

Whether a draft pays is measured, not guessed: on a GPU a step of 17 tokens costs about what one of
1 does, on a CPU nearly 17 times as much (here: 1 token 11 ms, 17 tokens 124 ms with the default
model). `StepCost` (step_cost.py) keeps what steps of each size cost on this machine, and each sequence's
`Drafter` its rate of accepted guesses; a sequence drafts the length whose expected accepted
tokens are worth more than what they add to the step (and, with a draft model, what guessing them
costs), so none when the step is already large or its guesses are often wrong (and a short draft
now and then, to see whether that changed).
"""

from __future__ import annotations

from ..step_cost import StepCost

NGRAM_SIZES = (4, 3, 2)  # the longest run of last tokens found earlier wins
PROBE_EVERY = 16  # steps without a draft after which a sequence drafts once more, to measure again
PROBE_LENGTH = 4
PROBE_LEAST_OFTEN = 256  # probes that find nothing right come ever more seldom, down to one in this many steps


def token_worth(cost: StepCost, n_step: int) -> float | None:
    """What a token adds to a step of `n_step` tokens, so what an accepted guess saves: a step of one
    costs it all; in a batch the others' tokens share the step's fixed cost, and an accepted guess
    saves only its own part. None until measured."""
    base = cost.of(n_step)
    if base is None:
        return None
    one = cost.of(1)
    return base if n_step == 1 or one is None else max(0.0, (base - one) / (n_step - 1))


def _added(cost: StepCost, n_step: int, room: int, guess_s: float, worth: float):
    """For drafts of 1 to `room` guesses: what each adds to the step and costs to guess."""
    base = cost.of(n_step)
    for k in range(1, room + 1):
        yield (cost.of(n_step + k) or base + k * worth) - base + k * guess_s


def could_pay(cost: StepCost, n_step: int, room: int, guess_s: float = 0.0) -> bool:
    """Whether some draft beside a step of `n_step` tokens would pay if every guess were right (True
    until measured): where none would, no sequence of the step need look for guesses."""
    worth = token_worth(cost, n_step)
    return worth is None or any(k * worth > added for k, added in enumerate(_added(cost, n_step, room, guess_s, worth), 1))


class Drafter:
    """One sequence's draft length, adapted to how much of its last drafts was accepted."""

    def __init__(self, n_min: int, n_max: int):
        self.n_min, self.n_max = n_min, n_max
        self.drafted = self.accepted = 0
        self._hits = self._misses = 0  # recent guesses right, and drafts cut by a wrong one
        self._idle = 0  # steps since its last draft
        self._probe_every = PROBE_EVERY

    @property
    def acceptance(self) -> float:
        """The chance that a guess is right, given the ones before it were (with a prior of 1 in 2)."""
        return (self._hits + 1) / (self._hits + self._misses + 2)

    def length(self, cost: StepCost, n_step: int, room: int, guess_s: float = 0.0) -> int:
        """The draft length worth most beside a step of `n_step` tokens: expected accepted tokens, at
        what a token adds to such a step, less what the draft adds to it and `guess_s` a guess costs
        to make (at most `room`)."""
        room = min(room, self.n_max)
        worth = token_worth(cost, n_step)
        if worth is None:  # too little measured yet
            return self._at_least_n_min(self._probe(n_step, room), room)
        p = self.acceptance
        best, best_gain, expected, chance = 0, 0.0, 0.0, 1.0
        for k, added in enumerate(_added(cost, n_step, room, guess_s, worth), start=1):
            chance *= p
            expected += chance
            gain = expected * worth - added
            if gain > best_gain:
                best, best_gain = k, gain
        # where not even guesses all right would pay (a draft model as slow as this one), no probe either
        if not best and could_pay(cost, n_step, room, guess_s):
            best = self._probe(n_step, room)
        return self._at_least_n_min(best, room)

    def _at_least_n_min(self, n: int, room: int) -> int:
        """n_min set (above 0) asks for drafts of at least that many whatever the measurements say (as
        llama.cpp always drafts); where fewer fit, none."""
        return max(n, self.n_min) if self.n_min <= room else 0

    def _probe(self, n_step: int, room: int) -> int:
        """A short draft after PROBE_EVERY steps without one (more, after probes that found nothing
        right), where it costs little (a step of one or two tokens): what it measures (the cost of a
        larger step, how often the guesses are right) may say that drafts pay now."""
        self._idle += 1
        if self._idle < self._probe_every or n_step > 2:
            return 0
        return min(PROBE_LENGTH, room)

    def verified(self, drafted: int, accepted: int) -> None:
        self.drafted += drafted
        self.accepted += accepted
        self._idle = 0
        self._hits += accepted
        self._misses += accepted < drafted
        if drafted and not accepted:
            self._probe_every = min(2 * self._probe_every, PROBE_LEAST_OFTEN)
        elif accepted == drafted:
            self._probe_every = PROBE_EVERY
        if self._hits + self._misses > 64:  # the recent text counts most
            self._hits, self._misses = self._hits // 2, self._misses // 2


class NgramDrafter(Drafter):
    """A `Drafter` that guesses from an index of where each n-gram of the sequence's tokens last
    ended, kept up to date as the sequence grows."""

    def __init__(self, n_min: int, n_max: int):
        super().__init__(n_min, n_max)
        self._seen: dict[tuple[int, ...], int] = {}  # n-gram -> index just past its latest earlier end
        self._indexed = 0  # tokens[:_indexed] are in the index

    def draft(self, tokens: list[int], limit: int) -> list[int]:
        """The tokens that followed the latest earlier occurrence of the sequence's last tokens, at
        most `limit` of them; [] when none or fewer than n_min."""
        self._index(tokens)
        if limit < max(1, self.n_min):
            return []
        for n in NGRAM_SIZES:
            end = self._seen.get(tuple(tokens[-n:])) if len(tokens) > n else None
            if end is not None:
                guess = tokens[end : end + limit]
                return guess if len(guess) >= self.n_min else []
        return []

    def _index(self, tokens: list[int]) -> None:
        """Index the n-grams that end before the last token (the last one's own would find itself)."""
        last = len(tokens) - 1
        for end in range(max(self._indexed, 1), last + 1):
            for n in NGRAM_SIZES:
                if end >= n:
                    self._seen[tuple(tokens[end - n : end])] = end
        self._indexed = max(self._indexed, last + 1)
