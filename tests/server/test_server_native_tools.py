"""Tool calls in a model family's own syntax, through `serve` with the official `openai` client: the
bundled model carrying a chat template of each family that writes one (tool_templates.py,
conftest's `family_models`). Only what the grammar forces is asserted: with `required` or a named
function every reply is a call in the family's syntax, whose arguments follow the schema; several
calls come back indexed 0..n-1; a stream sends each call's id, type and name first, then its
arguments in fragments; and the template itself renders the tools, the calls and their results."""

from __future__ import annotations

import dataclasses
import json

import pytest
import tool_templates
from helpers import run
from serving import Serving
from test_server_responses import openai_client

from app.engine.params import EngineConfig, OverflowPolicy
from app.engine.prompt.builder import PromptBuilder
from app.engine.prompt.chat_template import ChatTemplate
from app.engine.sequence import Request
from app.server.protocol import parse_chat
from app.server.tool_syntax import (
    APERTUS,
    COMMAND_R7B,
    DEEPSEEK_R1,
    DEEPSEEK_V3_1,
    DEEPSEEK_V3_2,
    FUNCTIONARY_V3_2,
    GLM_4_5,
    GLM_4_7,
    GPT_OSS,
    GRANITE,
    HERMES,
    KIMI_K2,
    LFM2,
    LLAMA_3,
    MINIMAX_M2,
    MINISTRAL_3,
    MISTRAL_NEMO,
    MISTRAL_SMALL_3_2,
    NEMOTRON_NANO_V2,
    QWEN3_CODER,
    SEED_OSS,
    Wrapper,
    detect,
    model_syntax,
)

CITIES = ["Paris", "London", "Tokyo"]
WEATHER = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "The weather now in a city",
        "parameters": {
            "type": "object",
            "properties": {"city": {"enum": CITIES}, "days": {"enum": [1, 2, 3]}},
            "required": ["city", "days"],
        },
    },
}
TIME = {"type": "function", "function": {"name": "get_time", "parameters": {"type": "object", "properties": {}}}}
ASK = [{"role": "user", "content": "What is the weather in Paris?"}]
THREE_CITIES = [{"role": "user", "content": "Tell me the weather in Paris, London and Tokyo."}]
TWO_CALLS_BEFORE = [
    {"role": "user", "content": "Weather in Rome for 2 days, and the time?"},
    {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {
                "id": "call00000",
                "type": "function",
                "function": {"name": "get_weather", "arguments": '{"city": "Rome", "days": 2}'},
            },
            {"id": "call00001", "type": "function", "function": {"name": "get_time", "arguments": "{}"}},
        ],
    },
    {"role": "tool", "tool_call_id": "call00000", "content": "Sunny, 24 C"},
    {"role": "tool", "tool_call_id": "call00001", "content": "14:05"},
    {"role": "assistant", "content": "Rome is sunny at 24 C for two days; it is 14:05."},
    {"role": "user", "content": "And the weather in Paris for 3 days, and the time?"},
]
SYNTAXES = {
    "hermes": HERMES,
    "llama3": LLAMA_3,
    "mistral": MISTRAL_NEMO,
    "granite": GRANITE,
    "command_r7b": COMMAND_R7B,
    "functionary": FUNCTIONARY_V3_2,
    "gpt_oss": GPT_OSS,
    "qwen3_coder": QWEN3_CODER,
    "seed_oss": SEED_OSS,
    "glm": GLM_4_5,
    "glm47": GLM_4_7,
    "minimax": MINIMAX_M2,
    "deepseek_v3_1": DEEPSEEK_V3_1,
    "deepseek_r1": DEEPSEEK_R1,
    "kimi_k2": KIMI_K2,
    "ministral": MINISTRAL_3,
    "mistral_small": MISTRAL_SMALL_3_2,
    "apertus": APERTUS,
    "nemotron_v2": NEMOTRON_NANO_V2,
    "lfm2": dataclasses.replace(LFM2, calls_in_content=True),  # its template shows no `tool_calls`
    "deepseek_v3_2": DEEPSEEK_V3_2,
}
# what a family's replies need beyond the rest: gpt-oss thinks first (the grammar lets it write an
# analysis message), which the bundled model would do to max_tokens; a budget closes it. DeepSeek's
# markers (one token each in its vocabulary) are some 15 tokens each in the bundled model's
FAMILY_EXTRA = {"gpt_oss": {"reasoning_budget_tokens": 3}}
FAMILY_MAX_TOKENS = {"deepseek_v3_1": 160, "deepseek_r1": 200, "deepseek_v3_2": 240}
# greedy with no penalty (the API's default repeat_penalty is 1.1): each constrained draw starts from
# the top token of its masked logits, read with the other greedy rows' in one pass; a chain's draw is
# a pass over the whole vocabulary (10-16 ms a token)
GREEDY = {"temperature": 0, "extra_body": {"repeat_penalty": 1.0}}
MARKS = (
    "<tool_call>",
    "</tool_call>",
    "[TOOL_CALLS]",
    "<|tool_call|>",
    "<|START_ACTION|>",
    '"name"',
    '"tool_name"',
    "to=functions.",
    "<|channel|>",
)  # a call's syntax, never content


def _serve(path: str, body):
    async def main():
        config = EngineConfig(model_path=path, n_ctx=4096, n_batch=256, capacity=8, n_threads=2)
        async with Serving(config) as (_client, _server, url):
            api = openai_client(url)
            try:
                return await body(api)
            finally:
                await api.close()

    return run(main())


def _follows_weather(arguments: str) -> bool:
    values = json.loads(arguments)
    return values["city"] in CITIES and values["days"] in (1, 2, 3)


def _follows_schema(call) -> bool:
    """A call of one of the tools, its arguments following that tool's parameters."""
    if call.function.name == "get_time":
        return json.loads(call.function.arguments) == {}
    return call.function.name == "get_weather" and _follows_weather(call.function.arguments)


async def _streamed(api, **fields) -> tuple[list, str, str | None]:
    """A streamed reply's tool-call deltas, its content and its finish reason."""
    deltas, content, finish = [], "", None
    async for chunk in await api.chat.completions.create(model="m", stream=True, **fields):
        for choice in chunk.choices:
            deltas += choice.delta.tool_calls or []
            content += choice.delta.content or ""
            finish = choice.finish_reason or finish
    return deltas, content, finish


@pytest.mark.model
@pytest.mark.parametrize("family", list(SYNTAXES))
def test_required_and_named_tools_yield_calls_in_the_familys_own_syntax(family_models, family):
    path = family_models[family]
    assert model_syntax(path).family == SYNTAXES[family].family
    # one call a reply: random weights could chain calls up to max_tokens (several: the test below);
    # 80 tokens hold Command R7B's call, its markers spelled out in the bundled model's tokens
    asked = {"messages": ASK, "max_tokens": 80, "tools": [WEATHER, TIME], "parallel_tool_calls": False, **GREEDY}
    asked["extra_body"] = {**GREEDY["extra_body"], **FAMILY_EXTRA.get(family, {})}
    asked["max_tokens"] = FAMILY_MAX_TOKENS.get(family, 80)

    async def body(api):
        required = await api.chat.completions.create(model="m", tool_choice="required", **asked)
        named = await api.chat.completions.create(
            model="m", tool_choice={"type": "function", "function": {"name": "get_weather"}}, **asked
        )
        streamed = await _streamed(api, tool_choice={"type": "function", "function": {"name": "get_weather"}}, **asked)
        call = named.choices[0].message.tool_calls[0]
        back = ASK + [
            {"role": "assistant", "content": None, "tool_calls": [call.model_dump()]},
            {"role": "tool", "tool_call_id": call.id, "content": '{"sky": "sunny", "celsius": 21}'},
        ]
        answer = await api.chat.completions.create(model="m", tool_choice="required", **{**asked, "messages": back})
        return required, named, streamed, answer

    required, named, (deltas, content, finish), answer = _serve(path, body)
    for reply in (required, named, answer):
        choice = reply.choices[0]
        assert choice.finish_reason == "tool_calls" and not choice.message.content, choice
        assert all(call.type == "function" and _follows_schema(call) for call in choice.message.tool_calls)
    assert named.choices[0].message.tool_calls[0].function.name == "get_weather"
    if family in ("mistral", "mistral_small"):  # its template takes back only such ids
        assert all(len(c.id) == 9 and c.id.isalnum() for c in named.choices[0].message.tool_calls)
    # streamed: each call's id, type and name first (arguments empty), then its arguments in fragments
    heads = [d for d in deltas if d.id]
    assert [d.index for d in heads] == list(range(len(heads))) and heads[0].function.name == "get_weather"
    if family == "kimi_k2":  # its own ids, which its template shows again beside the result
        assert named.choices[0].message.tool_calls[0].id == heads[0].id == "functions.get_weather:0"
    assert all(d.type == "function" and d.function.arguments == "" for d in heads)
    fragments = [d.function.arguments for d in deltas if not d.id and d.index == 0]
    assert len(fragments) > 1 and _follows_weather("".join(fragments))
    assert finish == "tool_calls" and not any(mark in content for mark in MARKS)


@pytest.mark.model
@pytest.mark.parametrize("family", ["hermes", "command_r7b", "qwen3_coder", "minimax"])
def test_several_calls_in_one_reply_come_back_indexed_and_parallel_off_makes_one(family_models, family):
    # greedy, the bundled model alone calls one function and closes the list in the array syntaxes;
    # after a turn of the same two calls, as in a real chat, it writes both in Hermes', Command
    # R7B's, Qwen3-Coder's (a block each) and MiniMax's (one block) (in Mistral's it then repeats
    # them until max_tokens: several calls there are test_tool_parse.py's, from the text)
    asked = {"messages": TWO_CALLS_BEFORE, "max_tokens": 120, "tools": [WEATHER, TIME], "tool_choice": "required", **GREEDY}

    async def body(api):
        several = (await api.chat.completions.create(model="m", parallel_tool_calls=True, **asked)).choices[0]
        deltas, _, _ = await _streamed(api, parallel_tool_calls=True, **asked)
        one = await api.chat.completions.create(model="m", **asked)  # off unless asked, as llama-server's
        return several, deltas, one.choices[0]

    several, deltas, one = _serve(family_models[family], body)
    calls = several.message.tool_calls
    assert several.finish_reason == "tool_calls" and len(calls) >= 2 and len({c.id for c in calls}) == len(calls)
    assert all(_follows_schema(c) for c in calls)
    # streamed: the same calls, their heads indexed 0..n-1 in order, each one's arguments in fragments
    heads = [d for d in deltas if d.id]
    assert [d.index for d in heads] == list(range(len(calls))) and [d.function.name for d in heads] == [
        c.function.name for c in calls
    ]
    for i, call in enumerate(calls):
        assert "".join(d.function.arguments or "" for d in deltas if d.index == i) == call.function.arguments
    assert len(one.message.tool_calls) == 1 and one.finish_reason == "tool_calls" and _follows_schema(one.message.tool_calls[0])


# the call get_weather(city="Paris", days=1) as a family of a syntax of its own writes it back
WRITTEN_BACK = {
    "mistral_small": '[TOOL_CALLS]get_weather[CALL_ID]abcDEF123[ARGS]{"city": "Paris", "days": 1}',
    "apertus": '<|tools_prefix|>[{"get_weather": {"city": "Paris", "days": 1}}]<|tools_suffix|>',
    "gpt_oss": 'to=functions.get_weather<|channel|>commentary json<|message|>{"city": "Paris", "days": 1}<|call|>',
}


def _written_call(family: str) -> str:
    """The call get_weather(city="Paris", days=1) as the family's template writes it."""
    syntax, arguments = SYNTAXES[family], '{"city": "Paris", "days": 1}'
    if family in WRITTEN_BACK:
        return WRITTEN_BACK[family]
    if syntax.form is not None:  # as the family writes it, a string argument raw
        return syntax.form.write([("get_weather", {"city": "Paris", "days": 1})])
    if syntax.wrapper is Wrapper.RECIPIENT:
        return f">>>get_weather\n{arguments}"
    return f'"{syntax.name_key}": "get_weather", "{syntax.arguments_key}": {arguments}'


CALLED_BACK = ASK + [
    {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {
                "id": "abcDEF123",
                "type": "function",
                "function": {"name": "get_weather", "arguments": '{"city": "Paris", "days": 1}'},
            }
        ],
    },
    {"role": "tool", "tool_call_id": "abcDEF123", "content": "sunny, 21 C"},
]


def _rendered(source: str, job) -> str:
    """The prompt a template makes of a request as `serve` reads it: what the model reads."""
    template = ChatTemplate(source, model="a test template")
    try:
        builder = PromptBuilder(template, lambda text, add_special=True: list(text.encode()), 4096, OverflowPolicy.STOP)
        tokens, _ = builder.build(Request("r", job.params, messages=job.messages))
    finally:
        template.close()
    return bytes(tokens).decode()


@pytest.mark.unit
@pytest.mark.parametrize("family", list(SYNTAXES))
def test_the_familys_template_renders_the_tools_the_call_and_its_result(family):
    job = parse_chat({"messages": CALLED_BACK, "tools": [WEATHER], "tool_choice": "auto"}, 4096, SYNTAXES[family])
    # auto, in a native syntax: free text until the family's trigger, the calls' grammar from there
    assert job.params.grammar is not None and job.params.grammar_triggers == SYNTAXES[family].triggers_for(("get_weather",))
    prompt = _rendered(tool_templates.FAMILIES[family], job)
    assert _written_call(family) in prompt
    assert "sunny, 21 C" in prompt and "The weather now in a city" in prompt
    assert "You can call these functions" not in prompt  # not the generic format's description


# DeepSeek V3.1's own template writes calls back but never shows the tools (its users describe them)
NO_TOOLS_SHOWN = """{%- for m in messages %}
{%- if m.role == 'system' %}{{ m.content }}
{%- elif m.role == 'user' %}<｜User｜>{{ m.content }}
{%- elif m.tool_calls %}<｜Assistant｜><｜tool▁calls▁begin｜>{% for call in m.tool_calls %}<｜tool▁call▁begin｜>{{ call.function.name }}<｜tool▁sep｜>{{ call.function.arguments | tojson }}<｜tool▁call▁end｜>{% endfor %}<｜tool▁calls▁end｜>
{%- elif m.role == 'tool' %}<｜tool▁output▁begin｜>{{ m.content }}<｜tool▁output▁end｜>
{%- else %}<｜Assistant｜>{{ m.content }}{% endif %}
{%- endfor %}
{%- if add_generation_prompt %}<｜Assistant｜>{% endif %}"""


@pytest.mark.unit
def test_a_template_that_writes_calls_but_never_shows_the_tools_is_told_of_them_in_its_syntax():
    syntax = detect(NO_TOOLS_SHOWN)
    assert syntax.family == DEEPSEEK_V3_1.family and not syntax.describes_tools
    job = parse_chat({"messages": CALLED_BACK, "tools": [WEATHER], "tool_choice": "required"}, 4096, syntax)
    prompt = _rendered(NO_TOOLS_SHOWN, job)
    assert prompt.startswith("You can call these functions:") and "The weather now in a city" in prompt
    assert "<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function_name<｜tool▁sep｜>" in prompt  # how to call, in its syntax
    assert _written_call("deepseek_v3_1") in prompt and "sunny, 21 C" in prompt


@pytest.mark.model
def test_a_familys_markers_that_are_one_token_each_are_drawn_as_those_tokens(marker_models):
    """Where the vocabulary holds a family's markers as single tokens (as real Ministral and gpt-oss
    models do), a call under `required` draws each marker as its one token, not spelled out in
    pieces the model never learnt to write, and is read back as a call. Ministral's [TOOL_CALLS]
    and [ARGS] are control tokens, which the grammar names as tokens (`with_tokens`)."""
    asked = {"messages": ASK, "tools": [WEATHER], "tool_choice": "required", "logprobs": True, **GREEDY}
    extra = {"gpt_oss": {"reasoning_budget_tokens": 3}}

    def call(family: str):
        body = {**asked, "extra_body": {**GREEDY["extra_body"], **extra.get(family, {})}, "max_tokens": 60}
        return _serve(marker_models[family], lambda api: api.chat.completions.create(model="m", **body))

    for family, markers in (("ministral", ["[TOOL_CALLS]", "[ARGS]"]), ("gpt_oss", ["<|channel|>", "<|message|>"])):
        reply = call(family)
        choice = reply.choices[0]
        assert choice.finish_reason == "tool_calls" and _follows_schema(choice.message.tool_calls[0]), (family, choice)
        drawn = [entry.token for entry in choice.logprobs.content]
        assert all(marker in drawn for marker in markers), (family, drawn)
