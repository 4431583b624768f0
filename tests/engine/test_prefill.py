"""A last assistant message continued (a prefill), as llama.cpp composes its prompt: the chat before
it with the reply's opening, then the message as the model would have written it, by the thinking
family of the template: thoughts opened where the prompt did not open them (and an empty thought the
prompt closed taken back), closed where an answer follows; a new turn where the request says so."""

from __future__ import annotations

import pytest
import think_templates

from app.engine.params import OverflowPolicy
from app.engine.prompt.builder import PromptBuilder
from app.engine.prompt.chat_template import ChatTemplate
from app.engine.sampling.params import GREEDY
from app.engine.sequence import Request

pytestmark = pytest.mark.unit

ASK = {"role": "user", "content": "2+2?"}
THOUGHT = {"role": "assistant", "content": "", "reasoning_content": "Two and"}
ANSWER = {"role": "assistant", "content": "It is"}
BOTH = {"role": "assistant", "content": "Four.", "reasoning_content": "Sums."}


@pytest.fixture(scope="module")
def builders():
    made = {
        family: PromptBuilder(
            ChatTemplate(source), lambda text, add_special=True: list(text.encode()), 1 << 20, OverflowPolicy.STOP
        )
        for family, source in think_templates.FAMILIES.items()
    }
    yield made
    for builder in made.values():
        builder.close()


def _prompt(builder: PromptBuilder, last: dict, **fields):
    request = Request("r", GREEDY, messages=(ASK, last), **fields)
    return builder.text_of(request), builder.prepare(request)


@pytest.mark.parametrize(
    ("family", "last", "ends", "prefill"),
    [
        # DeepSeek R1 opens the thoughts in its generation prompt
        ("r1", THOUGHT, "assistant\n<think>\nTwo and", "Two and"),
        ("r1", ANSWER, "<think>\n\n</think>\n\nIt is", "\n</think>\n\nIt is"),
        ("r1", BOTH, "<think>\nSums.\n</think>\n\nFour.", "Sums.\n</think>\n\nFour."),
        ("r1", {"role": "assistant", "content": "<think>Hmm"}, "<think>\nHmm", "Hmm"),  # opened twice: once
        # Qwen3 leaves them to the model
        ("qwen3", THOUGHT, "assistant\n<think>Two and", "<think>Two and"),
        ("qwen3", ANSWER, "assistant\nIt is", "It is"),
        ("qwen3", {"role": "assistant", "content": "<think>Hmm"}, "assistant\n<think>Hmm", "<think>Hmm"),
        # gpt-oss's channels
        ("harmony", THOUGHT, "<|channel|>analysis<|message|>Two and", "Two and"),
        ("harmony", ANSWER, "<|end|><|start|>assistant<|channel|>final<|message|>It is", None),
        # Apriel's thoughts open unmarked
        ("apriel", ANSWER, "reasoning steps:\n\n[BEGIN FINAL RESPONSE]It is", "\n[BEGIN FINAL RESPONSE]It is"),
    ],
)
def test_the_prompt_ends_with_the_message_as_the_family_writes_it(builders, family, last, ends, prefill):
    text, prompt = _prompt(builders[family], last)
    assert prompt.error is None and text.endswith(ends)
    assert bytes(prompt.tokens).decode() == text  # the prefill is read with the prompt, as one text
    assert prompt.prefill == (prefill if prefill is not None else prompt.prefill) and text.endswith(prompt.prefill)


def test_an_empty_thought_the_prompt_closed_is_taken_back_where_the_thoughts_go_on(builders):
    off = {"template_kwargs": {"enable_thinking": False}}
    text, prompt = _prompt(builders["qwen3"], THOUGHT, **off)
    assert text.endswith("<|im_start|>assistant\n<think>Two and") and "</think>" not in text
    assert not prompt.closed and prompt.prefill == "<think>Two and"
    text, prompt = _prompt(builders["qwen3"], ANSWER, **off)  # the answer goes on after the closed thought
    assert text.endswith("<think>\n\n</think>\n\nIt is") and prompt.closed


def test_a_budget_of_nothing_closes_thoughts_the_prefill_left_open(builders):
    _, prompt = _prompt(builders["r1"], THOUGHT, reasoning_budget=0)
    assert prompt.prefill == "Two and\n</think>\n\n" and bytes(prompt.tokens).decode().endswith("Two and\n</think>\n\n")


def test_a_new_turn_after_the_message_where_the_request_says_so(builders):
    text, prompt = _prompt(builders["qwen3"], ANSWER, continue_final=False)
    assert text.endswith("It is<|im_end|>\n<|im_start|>assistant\n") and prompt.prefill == ""
    calls = {
        "role": "assistant",
        "content": "",
        "tool_calls": [{"id": "a", "type": "function", "function": {"name": "f", "arguments": {}}}],
    }
    text, prompt = _prompt(builders["qwen3"], calls)  # a turn of tool calls is never continued
    assert text.endswith("<|im_start|>assistant\n") and prompt.prefill == ""
