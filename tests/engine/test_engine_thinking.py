"""Thinking in the engine, on the bundled model carrying a thinking family's template
(think_templates.py): the reply's thoughts come apart from its answer as it streams, a reasoning
budget puts the family's closing marker into the sequence and the answer follows, the template's
variables switch thinking off, and the thoughts can stay in the answer as written."""

from __future__ import annotations

import pytest
from helpers import Started, collect, run

from app.engine.events import FinishReason
from app.engine.params import EngineConfig
from app.engine.sampling.params import GREEDY
from app.engine.sequence import Request

pytestmark = pytest.mark.model

ASK = ({"role": "user", "content": "What is 2+2?"},)


def _replies(path: str, *requests: Request):
    async def main():
        config = EngineConfig(model_path=path, n_ctx=2048, n_batch=256, capacity=4, n_threads=2)
        async with Started(config) as client:
            return [await collect(client.reply(request)) for request in requests]

    return run(main())


def _ask(name: str, max_tokens: int = 40, **fields) -> Request:
    return Request(name, GREEDY.with_(max_tokens=max_tokens), messages=ASK, **fields)


def test_a_budget_ends_the_thoughts_with_the_marker_and_the_answer_follows(thinking_models):
    # the template opens <think> in its generation prompt: the bundled model thinks from its first token
    (events, final), (_, unlimited) = _replies(thinking_models["r1"], _ask("budget", reasoning_budget=3), _ask("free"))
    assert final.reason is FinishReason.STOP
    assert final.reasoning and final.text.strip()
    assert "</think>" not in final.text + final.reasoning  # the marker is neither thought nor answer
    assert "".join(e.reasoning for e in events) == final.reasoning
    assert "".join(e.text for e in events) == final.text
    inserted = [e for e in events if e.n_tokens > 1]  # the marker's tokens, put in at once
    assert len(inserted) == 1 and inserted[0].thought
    thought_tokens = sum(e.n_tokens for e in events if e.thought)
    assert final.stats.reasoning_tokens == thought_tokens == 3 + inserted[0].n_tokens
    assert final.stats.gen_tokens == sum(e.n_tokens for e in events)
    assert final.stats.t_first_answer >= final.stats.t_first_token
    # without a budget this model thinks until it ends the reply: all of it thoughts
    assert unlimited.reasoning and not unlimited.text and unlimited.stats.reasoning_tokens == unlimited.stats.gen_tokens - 1


def test_a_budget_of_nothing_closes_the_thoughts_in_the_prompt(thinking_models):
    [(events, final)] = _replies(thinking_models["r1"], _ask("none", reasoning_budget=0))
    assert final.reasoning == "" and final.text.strip()
    assert final.stats.reasoning_tokens == 0 and not any(e.thought for e in events)


def test_a_reply_held_to_a_grammar_answers_without_thinking(thinking_models):
    # the grammar would hold the thoughts the prompt opened: they are closed in the prompt instead
    yes_no = GREEDY.with_(max_tokens=8, grammar='root ::= "yes" | "no"')
    [(_, final)] = _replies(thinking_models["r1"], Request("grammar", yes_no, messages=ASK))
    assert final.reasoning == "" and final.text in ("yes", "no")


def test_thinking_switched_off_by_the_templates_variable(thinking_models):
    [(_, final)] = _replies(thinking_models["r1"], _ask("off", template_kwargs={"enable_thinking": False}))
    assert final.reasoning == "" and final.text.strip() and final.stats.reasoning_tokens == 0


def test_thoughts_kept_in_the_answer_as_written_are_still_counted(thinking_models):
    apart, kept = _replies(
        thinking_models["r1"], _ask("apart", reasoning_budget=3), _ask("kept", reasoning_budget=3, separate_thoughts=False)
    )
    (_, apart), (events, kept) = apart, kept
    assert kept.reasoning == "" and all(e.reasoning == "" for e in events)
    assert "</think>" in kept.text and kept.text.strip().startswith(apart.reasoning)
    assert kept.text.endswith(apart.text)
    assert kept.stats.reasoning_tokens == apart.stats.reasoning_tokens


def test_harmony_analysis_is_thought_and_the_final_channel_the_answer(thinking_models):
    # the test template opens the analysis channel; the budget closes it and opens the final one
    [(events, final)] = _replies(thinking_models["harmony"], _ask("harmony", reasoning_budget=4))
    assert final.reasoning.strip() and final.text.strip()
    assert "<|" not in final.reasoning + final.text
    assert "".join(e.reasoning for e in events) == final.reasoning


def test_a_bad_budget_or_template_variables_are_refused_with_the_reason(thinking_models):
    bad = [
        _ask("negative", reasoning_budget=-1),
        _ask("reserved", template_kwargs={"messages": []}),
        _ask("string", template_kwargs={"enable_thinking": "no"}),
        _ask("not json", template_kwargs={"x": object()}),
    ]
    finals = [final for _, final in _replies(thinking_models["r1"], *bad)]
    assert all(f.reason is FinishReason.ERROR for f in finals)
    assert "reasoning budget" in finals[0].error and "messages" in finals[1].error
    assert "enable_thinking" in finals[2].error and "JSON" in finals[3].error


def test_a_model_that_does_not_think_replies_as_before(model_path):
    [(events, final)] = _replies(model_path, _ask("plain", max_tokens=12, reasoning_budget=2))
    assert final.reasoning == "" and final.stats.reasoning_tokens == 0
    assert "".join(e.text for e in events) == final.text and final.text
