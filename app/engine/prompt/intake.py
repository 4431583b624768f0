"""A request's way in, on the prompt thread: its parameters checked, its prompt built, its
constraint compiled (llguidance's matcher: not on the engine thread)."""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Mapping

from ..kv.history import TokenHistory
from ..params import OverflowPolicy
from ..sequence import Request
from .builder import Prompt, PromptBuilder
from .chat_template import ChatTemplate
from .encoded_images import EncodedImages


class Intake:
    def __init__(self, backend, n_ctx_seq: int, overflow: OverflowPolicy, history: TokenHistory | None, name: str | None):
        self.backend = backend
        vocab = backend.vocab
        template = ChatTemplate(backend.chat_template, vocab.bos_text, vocab.eos_text, name or "the model")
        self.images = EncodedImages(backend.vision) if backend.vision is not None else None
        self.prompts = PromptBuilder(
            template, vocab.tokenize, n_ctx_seq, overflow, vocab.special_texts, history, vocab.spell, self.images
        )

    def prepare(self, request: Request) -> Prompt:
        """The request's prompt tokens; on the prompt thread: it reads the template, the tokenizer and
        the token histories (whose entries the engine thread replaces whole), and changes nothing."""
        try:
            problem = request.params.problem()
        except Exception as e:  # params of the wrong shape altogether
            problem = f"the sampling parameters cannot be read: {e!r}"
        if problem is None:
            problem = self._bad_tokens(request.reply_prefix) or thinking_problem(request)
        logit_bias, bias_problem = self._logit_bias(request.params.logit_bias) if problem is None else ((), None)
        problem = problem or bias_problem
        if problem is not None:
            return Prompt([], error=problem)
        self.backend.samplers.make_dry(request.params)  # here, not on the engine thread: it reads the whole vocabulary
        prompt = dataclasses.replace(self.prompts.prepare(request), logit_bias=logit_bias)
        if prompt.error is None and request.params.grammar is not None:
            try:  # compiled here, not on the engine thread; refused here when past llguidance's limits
                params = request.params
                grammar = self.backend.constraints.new(params.grammar, params.grammar_triggers, params.preserved)
                prompt = dataclasses.replace(prompt, grammar=grammar)
            except ValueError as e:
                return Prompt([], error=str(e))
        return prompt

    def _logit_bias(self, entries: tuple) -> tuple[tuple, str | None]:
        """The logit bias by token id: a text's tokens each get its bias (as llama-server does:
        tokenized without BOS, control-token texts as plain text); an id the model does not have
        is refused (llama.cpp's sampler would write past its logits)."""
        vocab, biases = self.backend.vocab, []
        for key, bias in entries:
            if isinstance(key, str):
                biases += [(token, bias) for token in vocab.tokenize(key, add_special=False, parse_special=False)]
            elif key >= vocab.n_vocab:
                return (
                    (),
                    f"logit_bias names token {key}, which the model does not have (its ids go from 0 to {vocab.n_vocab - 1})",
                )
            else:
                biases.append((key, bias))
        return tuple(biases), None

    def _bad_tokens(self, tokens) -> str | None:
        """A token llama.cpp does not know would abort the decode: refuse it here."""
        n_vocab = self.backend.vocab.n_vocab
        if not isinstance(tokens, tuple) or not all(type(t) is int and 0 <= t < n_vocab for t in tokens):
            return f"reply_prefix must be token ids between 0 and {n_vocab - 1}"
        return None


# the variables a request may not set for the template: its chat, its tools, whether it ends with the reply's opening
RESERVED_VARIABLES = ("messages", "tools", "add_generation_prompt")
MAX_KWARGS_CHARS = 16384


def thinking_problem(request: Request) -> str | None:
    """What is wrong with a request's template variables or reasoning budget, or None."""
    budget = request.reasoning_budget
    if budget is not None and (type(budget) is not int or budget < 0):
        return f"the reasoning budget must be a whole number of tokens, 0 or more, or unset; got {budget!r}"
    kwargs = request.template_kwargs
    if kwargs is None:
        return None
    if not isinstance(kwargs, Mapping) or not all(isinstance(k, str) for k in kwargs):
        return "the chat template's variables must be an object of named values"
    if not isinstance(kwargs.get("enable_thinking", True), bool):
        return f"enable_thinking must be true or false; got {kwargs['enable_thinking']!r}"
    taken = [k for k in RESERVED_VARIABLES if k in kwargs]
    if taken:
        return f"the chat template's variables cannot set {', '.join(taken)}: the request gives them"
    try:
        size = len(json.dumps(dict(kwargs)))
    except (TypeError, ValueError):
        return "the chat template's variables must be JSON values"
    if size > MAX_KWARGS_CHARS:
        return f"the chat template's variables take {size} characters of JSON; at most {MAX_KWARGS_CHARS}"
    return None
