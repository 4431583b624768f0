"""gpt-oss's tool calls through `serve` with the official `openai` client: the bundled model carrying
a Harmony template (tool_templates.GPT_OSS). Its analysis channel comes back as `reasoning_content`,
a message to a function as `tool_calls`; whole and streamed alike. The bundled model never learnt
Harmony: a reasoning budget ends its analysis after 3 tokens (test_tool_parse.py reads a reply of
every channel through the split and the parser)."""

from __future__ import annotations

import json

import pytest
from test_server_native_tools import ASK, CITIES, GREEDY, TIME, WEATHER, _serve

ASKED = {"model": "m", "messages": ASK, "max_tokens": 100, "tools": [WEATHER, TIME], **GREEDY}
BUDGET = {**GREEDY["extra_body"], "reasoning_budget_tokens": 3}


async def _streamed(api, **fields) -> tuple[str, str, list, str | None]:
    """A streamed reply's thoughts, content, tool-call deltas and finish reason."""
    thoughts, content, deltas, finish = "", "", [], None
    async for chunk in await api.chat.completions.create(stream=True, **fields):
        for choice in chunk.choices:
            thoughts += getattr(choice.delta, "reasoning_content", None) or ""
            content += choice.delta.content or ""
            deltas += choice.delta.tool_calls or []
            finish = choice.finish_reason or finish
    return thoughts, content, deltas, finish


@pytest.mark.model
def test_gpt_oss_analysis_is_reasoning_its_call_a_tool_call_and_its_final_answer_content(family_models):
    async def body(api):
        called = await api.chat.completions.create(tool_choice="required", **{**ASKED, "extra_body": BUDGET})
        streamed = await _streamed(api, tool_choice="required", **{**ASKED, "extra_body": BUDGET})
        free = {**ASKED, "max_tokens": 16, "extra_body": BUDGET}
        answered = await api.chat.completions.create(tool_choice="auto", **free)
        answered_streamed = await _streamed(api, tool_choice="auto", **free)
        return called.choices[0], streamed, answered.choices[0], answered_streamed

    called, (thoughts, content, deltas, finish), answered, answered_streamed = _serve(family_models["gpt_oss"], body)
    # required: an analysis message, then the call (the budget's close, then the call, as the grammar allows)
    assert called.message.tool_calls, called
    call = called.message.tool_calls[0]
    assert called.finish_reason == "tool_calls" and len(called.message.tool_calls) == 1 and not called.message.content
    assert called.message.reasoning_content and "<|" not in called.message.reasoning_content
    assert call.function.name in ("get_weather", "get_time") and "<|" not in call.function.arguments
    if call.function.name == "get_weather":
        assert json.loads(call.function.arguments)["city"] in CITIES
    # streamed: the same thoughts, no content, the call's head then its arguments
    assert (thoughts, content, finish) == (called.message.reasoning_content, "", "tool_calls")
    assert deltas[0].id and deltas[0].function.name == call.function.name
    assert "".join(d.function.arguments or "" for d in deltas) == call.function.arguments
    # auto: free until a message to a function; the bundled model writes none (nor an analysis: the
    # split of analysis and final channels through serve is test_server_thinking's)
    assert answered.message.content and not answered.message.tool_calls
    assert answered_streamed[1:3] == (answered.message.content, [])
