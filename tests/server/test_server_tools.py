"""Tool calls through `serve`, with the official `openai` client and the bundled model (whose chat
template has no tool syntax): the generic format (tool_calls.py) constrains the reply, so
`required` and a named function always yield a call whose arguments follow the function's
parameters; it comes back as `tool_calls` (streamed: id, type and name first, then the arguments in
fragments as they are written) with `finish_reason: "tool_calls"`; a tool's result is taken back; a
bad tool spec, or a field that cannot be honoured, is a 400. (The families' own syntaxes:
test_server_native_tools.py.)"""

from __future__ import annotations

import json

import openai
import pydantic
import pytest
from test_server_responses import serve

pytestmark = pytest.mark.model

WEATHER = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "The weather now in a city",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
    },
}
TIME = {
    "type": "function",
    "function": {"name": "get_time", "description": "The time now", "parameters": {"type": "object", "properties": {}}},
}
ASK = [{"role": "user", "content": "What is the weather in Paris?"}]


def test_a_required_or_named_tool_is_always_called_with_arguments_that_follow_its_parameters(config):
    async def body(api, _url):
        required = await api.chat.completions.create(
            model="m", messages=ASK, max_tokens=60, temperature=0, tools=[WEATHER, TIME], tool_choice="required"
        )
        named = await api.chat.completions.create(
            model="m",
            messages=ASK,
            max_tokens=60,
            temperature=0,
            tools=[WEATHER, TIME],
            tool_choice={"type": "function", "function": {"name": "get_weather"}},
        )
        deltas, finish = [], None
        stream = await api.chat.completions.create(
            model="m", messages=ASK, max_tokens=60, temperature=0, tools=[WEATHER, TIME], tool_choice="required", stream=True
        )
        async for chunk in stream:
            for c in chunk.choices:
                deltas += c.delta.tool_calls or []
                finish = c.finish_reason or finish
        call = named.choices[0].message.tool_calls[0]
        back = ASK + [
            {"role": "assistant", "content": None, "tool_calls": [call.model_dump()]},
            {"role": "tool", "tool_call_id": call.id, "content": '{"sky": "sunny", "celsius": 21}'},
        ]
        answer = await api.chat.completions.create(model="m", messages=back, max_tokens=40, temperature=0, tools=[WEATHER])
        one = await api.chat.completions.create(
            model="m",
            messages=ASK,
            max_tokens=60,
            temperature=0,
            tools=[WEATHER, TIME],
            tool_choice="required",
            parallel_tool_calls=False,
        )
        return required, named, deltas, finish, answer, one

    required, named, deltas, finish, answer, one = serve(config, body)
    for reply in (required, named):
        choice = reply.choices[0]
        assert choice.finish_reason == "tool_calls" and choice.message.content is None
        call = choice.message.tool_calls[0]
        assert call.type == "function" and call.id.startswith("call_")
        assert call.function.name in ("get_weather", "get_time")
        if call.function.name == "get_weather":
            assert isinstance(json.loads(call.function.arguments)["city"], str)
    assert named.choices[0].message.tool_calls[0].function.name == "get_weather"
    # streamed: each call's id, type and name first, then its arguments in fragments as they are written
    assert deltas[0].id.startswith("call_") and deltas[0].index == 0 and deltas[0].function.arguments == ""
    heads = [d for d in deltas if d.id]
    assert [d.index for d in heads] == list(range(len(heads))) and finish == "tool_calls"
    for head in heads:
        fragments = [d.function.arguments for d in deltas if d.index == head.index and not d.id]
        arguments = json.loads("".join(fragments))
        assert len(fragments) > 1 or arguments == {}
        assert isinstance(arguments["city"], str) if head.function.name == "get_weather" else arguments == {}
    assert len(one.choices[0].message.tool_calls) == 1  # parallel_tool_calls false: one call
    # with the result back and tool_choice auto, a call or an answer: either way in OpenAI's shape
    choice = answer.choices[0]
    assert choice.message.tool_calls or isinstance(choice.message.content, str)


def test_bad_tool_specs_are_400s_naming_them(config):
    nameless = {"type": "function", "function": {"parameters": {"type": "object"}}}
    cases = {
        "nameless": {"tools": [nameless]},
        "too many": {"tools": [{"type": "function", "function": {"name": f"f{i}"}} for i in range(1000)]},
        "unknown choice": {"tools": [WEATHER], "tool_choice": {"type": "function", "function": {"name": "nope"}}},
        "tools and a grammar": {"tools": [WEATHER], "extra_body": {"grammar": 'root ::= "a"'}},
        "parallel not a boolean": {"tools": [WEATHER], "parallel_tool_calls": "yes"},
        "strict not a boolean": {"tools": [{"type": "function", "function": {"name": "f", "strict": "very"}}]},
        "a call back without a function": {
            "tools": [WEATHER],
            "messages": ASK + [{"role": "assistant", "tool_calls": [{"id": "x", "type": "function"}]}],
        },
    }

    async def body(api, _url):
        said = {}
        for name, fields in cases.items():
            with pytest.raises(openai.BadRequestError) as info:
                await api.chat.completions.create(**{"model": "m", "messages": ASK, "max_tokens": 4, **fields})
            said[name] = (info.value.body["message"], info.value.body.get("param"))
        free = await api.chat.completions.create(model="m", messages=ASK, max_tokens=4, tools=[WEATHER], tool_choice="none")
        return said, free

    said, free = serve(config, body)
    assert "function.name must be" in said["nameless"][0] and said["nameless"][1] == "tools[0]"
    assert "at most 128 tools" in said["too many"][0]
    assert "not in 'tools'" in said["unknown choice"][0] and said["unknown choice"][1] == "tool_choice"
    assert "tools cannot be sent with a grammar" in said["tools and a grammar"][0]  # a JSON format can
    assert (
        said["parallel not a boolean"][1] == "parallel_tool_calls"
        and "strict must be a boolean" in said["strict not a boolean"][0]
    )
    assert "tool_calls[0] must be" in said["a call back without a function"][0]
    assert free.choices[0].message.tool_calls is None  # tool_choice none: free text


def test_a_tools_own_strict_is_honoured_as_a_response_formats(config):
    """OpenAI's `tools[].function.strict`: true refuses parameters with a keyword llguidance cannot
    hold a reply to (a 400 naming it and the tool); false or absent (OpenAI's default) leaves such a
    keyword unchecked and the call is made, its other keywords held. The Responses API's flat tools
    alike."""

    class Tags(pydantic.BaseModel):
        tags: set[str]  # pydantic writes `uniqueItems`, which llguidance cannot hold a reply to

    strict = openai.pydantic_function_tool(Tags, name="tag", description="Tags for the text")  # strict: true
    loose = json.loads(json.dumps(strict))
    loose["function"]["strict"] = False
    absent = json.loads(json.dumps(strict))
    del absent["function"]["strict"]
    ask = [{"role": "user", "content": "Tag this text: red apples and green pears."}]

    async def body(api, _url):
        with pytest.raises(openai.BadRequestError) as refused:
            await api.chat.completions.create(
                model="m", messages=ask, max_tokens=40, tools=[WEATHER, strict], tool_choice="required"
            )
        with pytest.raises(openai.BadRequestError) as refused_flat:
            await api.responses.create(
                model="m", input="Tag: red apples.", max_output_tokens=40, tools=[{"type": "function", **strict["function"]}]
            )
        calls = []
        for tool in (loose, absent):
            reply = await api.chat.completions.create(
                model="m", messages=ask, max_tokens=60, temperature=0, tools=[tool], tool_choice="required"
            )
            calls.append(reply.choices[0])
        flat = await api.responses.create(
            model="m",
            input="Tag: red apples.",
            max_output_tokens=60,
            temperature=0,
            tools=[{"type": "function", **loose["function"]}],
            tool_choice="required",
        )
        return refused.value.body, refused_flat.value.body, calls, flat

    refused, refused_flat, calls, flat = serve(config, body)
    assert "uniqueItems" in refused["message"] and "strict" in refused["message"] and refused["param"] == "tools[1]"
    assert "uniqueItems" in refused_flat["message"] and refused_flat["param"] == "tools[0]"
    for choice in calls:
        assert choice.finish_reason == "tool_calls"
        (call,) = choice.message.tool_calls
        arguments = json.loads(call.function.arguments)
        assert call.function.name == "tag" and list(arguments) == ["tags"]
        assert all(isinstance(t, str) for t in arguments["tags"])  # the items' type held, their uniqueness not
    (item,) = [i for i in flat.output if i.type == "function_call"]
    assert item.name == "tag" and all(isinstance(t, str) for t in json.loads(item.arguments)["tags"])
