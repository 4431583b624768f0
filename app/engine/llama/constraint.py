"""Output constraints drawn with llguidance: the model's tokenizer for it (built once, at the first
constrained request), a request's matcher, and the token masks of a step's constrained rows, filled
together off the GIL and applied to their logits before the draw."""

from __future__ import annotations

import ctypes
import os
import re
import threading
from dataclasses import dataclass, field

import llama_cpp as ll
import numpy as np
from llguidance import LLExecutor, LLMatcher, LLTokenizer
from llguidance.numpy import (
    allocate_token_bitmask,
    fill_next_token_bitmask,
    fill_next_token_bitmask_par,
    fill_next_token_bitmask_par_with_draft_tokens,
)

from ..sampling.constraints import LIMITS, ConstraintError, lark_grammar, reason, trigger_patterns, with_tokens
from .vocab import Vocab

# llguidance's thread pool fills the masks where cores are spare for it. On 2 cores, which the
# decode's threads keep busy, handing 8 rows to the pool took 0.9-3.6 ms a step (its threads wait
# to be scheduled) against 0.4 ms filled one after another on the engine thread, each off the GIL
PAR_MIN_CPUS = 4


@dataclass(eq=False)
class Constraint:
    """A request's matcher, and for a lazy one the patterns it waits for. A lazy constraint lets the
    reply run free until a trigger matches its text, then holds the reply from the match (its first
    group, if any) on, as llama.cpp's lazy grammars do."""

    matcher: LLMatcher
    triggers: tuple[re.Pattern[bytes], ...] = ()
    waiting: bool = False  # no trigger yet: the reply is free
    free: bool = False  # the text from the trigger broke the grammar: the reply stays free
    text: bytearray = field(default_factory=bytearray)  # the reply while waiting, control tokens written out
    drawn: list[int] = field(default_factory=list)  # its tokens while waiting
    markers: frozenset[int] = frozenset()  # control tokens the grammar names as tokens (`with_tokens`)

    @property
    def holds(self) -> bool:
        """Whether the constraint limits the next token."""
        return not (self.waiting or self.free)

    @property
    def error(self) -> str | None:
        """Why the matcher cannot go on (a limit of llguidance's met mid-reply), or None."""
        return reason(self.matcher.get_error()) if self.matcher.is_error() else None


def _trigger_start(match: re.Match[bytes]) -> int:
    """Where a trigger's match puts the grammar to work: its first group that matched text, else the match."""
    return next((match.start(i) for i in range(1, len(match.groups()) + 1) if match.group(i)), match.start())


def _llg_tokenizer(vocab: Vocab) -> LLTokenizer:
    """llguidance's tokenizer of llama.cpp's vocabulary, as llguidance.llamacpp builds it (which
    calls llama.cpp's deprecated attribute getter once a token): each token's bytes, control tokens
    marked with a leading 0xFF so that no text spells them. User-defined tokens stay text (there
    llguidance marks those written `<...>`): a tool syntax's `<tool_call>` is one in Qwen's
    vocabulary, and the grammar writes it as text. Every end-of-generation token ends a
    constrained reply."""
    tokens = []
    for token in range(vocab.n_vocab):
        text = vocab.spell(token)
        control = ll.llama_vocab_get_attr(vocab.model_vocab, token) & ll.LLAMA_TOKEN_ATTR_CONTROL
        tokens.append(b"\xff" + text if control else text)
    tokenize = ctypes.cast(ll.llama_cpp._lib.llama_tokenize, ctypes.c_void_p).value
    eos = list(vocab.eog_tokens) or ll.llama_vocab_eos(vocab.model_vocab)
    return LLTokenizer.from_llamacpp(
        tokens=tokens, vocab_ptr=vocab.model_vocab, tokenize_fptr=tokenize, eos_token=eos, slices=None
    )


class Constraints:
    """A model's constraints: `new` on the prompt thread, `mask` and `accept` on the engine thread."""

    def __init__(self, vocab: Vocab, capacity: int):
        self._vocab = vocab
        self._lock = threading.Lock()
        self._tokenizer: LLTokenizer | None = None
        self._executor = LLExecutor() if (os.cpu_count() or 1) >= PAR_MIN_CPUS else None
        self._masks = allocate_token_bitmask(capacity, vocab.n_vocab)  # a row per constrained sequence at most
        self._n_vocab = vocab.n_vocab

    def _llg_tokenizer(self) -> LLTokenizer:
        """llguidance's tokenizer of the model's vocabulary: built once (about a second for 150k
        tokens), at the first constrained request, so that a model never constrained never pays it."""
        with self._lock:
            if self._tokenizer is None:
                self._tokenizer = _llg_tokenizer(self._vocab)
            return self._tokenizer

    def new(self, grammar: str, triggers: tuple[str, ...] = (), markers: tuple[str, ...] = ()) -> Constraint:
        """A request's constraint for `grammar` (GBNF or llguidance's Lark), lazy when given `triggers`;
        the `markers` (a tool syntax's) that this vocabulary holds as control tokens drawn as those
        tokens where the grammar writes them. ConstraintError when it does not compile, or its
        matcher for this vocabulary is past LIMITS."""
        patterns = trigger_patterns(triggers)
        tokens = self._control_tokens(markers)
        lark = with_tokens(lark_grammar(grammar), tokens)
        matcher = LLMatcher(self._llg_tokenizer(), lark, log_level=0, limits=LIMITS)
        if matcher.is_error():
            raise ConstraintError(f"the grammar cannot constrain a reply: {reason(matcher.get_error())}")
        return Constraint(matcher, patterns, waiting=bool(patterns), markers=frozenset(tokens.values()))

    def _control_tokens(self, texts: tuple[str, ...]) -> dict[str, int]:
        """The texts of `texts` that are one control token each in this vocabulary, and that token."""
        found = {}
        for text in texts:
            tokens = self._vocab.tokenize(text, add_special=False)
            if len(tokens) == 1 and self._is_control(tokens[0]):
                found[text] = tokens[0]
        return found

    def _is_control(self, token: int) -> bool:
        return bool(ll.llama_vocab_get_attr(self._vocab.model_vocab, token) & ll.LLAMA_TOKEN_ATTR_CONTROL)

    def mask(self, rows: list[tuple[Constraint, np.ndarray]]) -> dict[Constraint, int]:
        """Fill the masks of every constraint that holds together (in one call to llguidance's
        threads where cores are spare, else one after another; off the GIL either way), then set the
        logits of the tokens each refuses to -inf, in place. A matcher that meets a limit fills no
        mask: its `error` says why, and its row is left as it was. Returns the constraints that
        allow one token only (a JSON key, its quotes and colon), with that token: any draw gives it."""
        held = [(c, logits) for c, logits in rows if c.holds]
        if not held:
            return {}
        masks = self._rows(len(held))
        if self._executor is not None:
            fill_next_token_bitmask_par(self._executor, [(c.matcher, i) for i, (c, _) in enumerate(held)], masks)
        else:
            for i, (constraint, _) in enumerate(held):
                fill_next_token_bitmask(constraint.matcher, masks, i)
        forced = {}
        for i, (constraint, logits) in enumerate(held):
            token = self._apply(constraint, masks[i], logits)
            if token is not None:
                forced[constraint] = token
        return forced

    def mask_drafted(self, constraint: Constraint, rows: list[np.ndarray], draft: list[int]) -> None:
        """A drafting reply's rows (its next token's, then one after each guess): each row's mask as
        the guesses before it leave the matcher (which then goes back), filled together. Rows after
        a guess the grammar refuses are left as they are: verification stops at that guess's row,
        whose masked top token cannot be the refused guess."""
        masks = self._rows(len(rows))
        matcher = constraint.matcher
        taken = matcher.validate_tokens(draft)  # the guesses whose rows after them are filled
        if self._executor is not None:
            fill_next_token_bitmask_par_with_draft_tokens(self._executor, [(matcher, 0, draft)], masks)
        else:
            for i in range(taken + 1):
                fill_next_token_bitmask(matcher, masks, i)
                if i < taken:
                    matcher.consume_token(draft[i])
            matcher.rollback(taken)
        for i, logits in enumerate(rows[: taken + 1]):
            self._apply(constraint, masks[i], logits)

    def _rows(self, n: int) -> np.ndarray:
        if n > len(self._masks):
            self._masks = allocate_token_bitmask(n, self._n_vocab)
        return self._masks

    def _apply(self, constraint: Constraint, mask: np.ndarray, logits: np.ndarray) -> int | None:
        """-inf for the tokens the mask refuses; the token it allows where it allows one only."""
        if constraint.matcher.is_error():
            return None
        words = np.flatnonzero(mask)
        if len(words) == 1 and (word := int(mask[words[0]]) & 0xFFFFFFFF).bit_count() == 1:
            token = int(words[0]) * 32 + word.bit_length() - 1
            kept = logits[token]
            logits[:] = -np.inf  # one fill: cheaper than unpacking the mask
            logits[token] = kept
            return token
        allowed = np.unpackbits(mask.view(np.uint8), bitorder="little", count=self._n_vocab)
        logits[allowed == 0] = -np.inf
        return None

    def takes(self, constraint: Constraint, tokens: tuple[int, ...]) -> bool:
        """Whether a constraint that holds takes `tokens` next, the matcher left as it was."""
        return bool(tokens) and constraint.matcher.validate_tokens(list(tokens)) == len(tokens)

    def accept(self, constraint: Constraint, token: int) -> str | None:
        """The reply took `token`: the matcher moves past it (or a lazy constraint watches for its
        trigger). Why the constraint cannot go on, or None."""
        if not constraint.holds:
            self._watch(constraint, token)
            return None
        if not constraint.matcher.consume_token(token):
            return constraint.error or "the grammar refused the token drawn"
        return None

    def _watch(self, constraint: Constraint, token: int) -> None:
        """A lazy constraint's reply took `token`: once a trigger matches the text, the matcher reads
        the reply from the match on: the token the match starts in cut there and read as text, the
        tokens after as drawn (a control token the grammar does not name as a token spelled out as
        text, as the grammar writes it)."""
        if not constraint.waiting:
            return
        constraint.text += self._vocab.spell(token)
        constraint.drawn.append(token)
        starts = [_trigger_start(m) for m in (p.search(constraint.text) for p in constraint.triggers) if m]
        if not starts:
            return
        constraint.waiting = False
        tokens = self._from(constraint, min(starts))
        constraint.text.clear()
        constraint.drawn.clear()
        if constraint.matcher.try_consume_tokens(tokens) < len(tokens):
            constraint.free = True  # the trigger's own text breaks the grammar: let the reply be

    def _from(self, constraint: Constraint, start: int) -> list[int]:
        """The waiting reply's tokens from byte `start` of its text on, as the matcher reads them."""
        tokenizer, offset, tokens = self._llg_tokenizer(), 0, []
        for token in constraint.drawn:
            spelled = self._vocab.spell(token)
            end = offset + len(spelled)
            if end > start:
                whole = offset >= start and (token in constraint.markers or not self._is_control(token))
                tokens += [token] if whole else tokenizer.tokenize_bytes(spelled[max(start - offset, 0) :])
            offset = end
        return tokens
