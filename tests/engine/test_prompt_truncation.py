"""Dropping the oldest turns to fit the context: the fewest turns dropped, found with a few renders."""

from __future__ import annotations

import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from app.engine.llama.context import LlamaBackend
from app.engine.params import EngineConfig, OverflowPolicy
from app.engine.prompt.builder import PromptBuilder, _first_fitting
from app.engine.prompt.chat_template import ChatTemplate
from app.engine.sampling.params import GREEDY
from app.engine.sequence import Request


@pytest.mark.unit
@settings(max_examples=300, deadline=None)
@given(n=st.integers(1, 200), data=st.data())
def test_first_fitting_finds_the_smallest_fitting_index_from_any_guess(n, data):
    threshold = data.draw(st.integers(0, n), label="first index that fits (n: none)")
    guess = data.draw(st.integers(0, n - 1), label="guess")
    calls: list[int] = []

    def fits(k: int) -> bool:
        assert 0 <= k < n
        calls.append(k)
        return k >= threshold

    assert _first_fitting(n, fits, guess) == threshold
    assert len(calls) <= 2 * n.bit_length() + 2  # logarithmic, however far off the guess


@pytest.mark.model
def test_truncation_keeps_the_most_turns_that_fit_with_few_renders(model_path):
    backend = LlamaBackend(EngineConfig(model_path, n_ctx=512, n_batch=64, capacity=1, n_threads=2))
    try:
        template = ChatTemplate(backend.chat_template, backend.vocab.bos_text, backend.vocab.eos_text)
        renders: list[int] = []

        def counting_render(messages, add_generation_prompt=True, **budget):
            renders.append(len(messages))
            return ChatTemplate.render(template, messages, add_generation_prompt, **budget)

        template.render = counting_render
        builder = PromptBuilder(template, backend.vocab.tokenize, 1024, OverflowPolicy.TRUNCATE)
        rng = random.Random(7)
        chat = [{"role": "system", "content": "You are terse."}]
        for i in range(300):
            words = " ".join(rng.choice(["alpha", "beta", "gamma", "delta"]) for _ in range(rng.randint(1, 40)))
            chat += [{"role": "user", "content": f"Question {i}: {words}"}, {"role": "assistant", "content": words}]
        chat.append({"role": "user", "content": "Final question"})
        request = Request("r", GREEDY.with_(max_tokens=64), tuple(chat))
        tokens, notice = builder.build(request)
    finally:
        backend.close()
    dropped = int(notice.split("dropped the ")[1].split()[0])
    kept = chat[:1] + chat[1 + dropped :]
    # the fewest dropped: keeping one more turn (two messages back) would not fit
    one_more = chat[:1] + chat[1 + dropped - 2 :]
    fits = lambda messages: len(backend_tokens(model_path, template, messages)) + 64 <= 1024  # noqa: E731
    assert fits(kept) and not fits(one_more)
    assert len(tokens) + 64 <= 1024 and chat[1 + dropped]["role"] == "user"
    assert len(renders) <= 6, f"{len(renders)} renders of a {len(chat)}-message chat"


def backend_tokens(model_path, template, messages):
    backend = LlamaBackend(EngineConfig(model_path, n_ctx=512, n_batch=64, capacity=1, n_threads=2))
    try:
        return backend.vocab.tokenize(ChatTemplate.render(template, messages))
    finally:
        backend.close()
