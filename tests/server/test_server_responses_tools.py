"""Function tools on the Responses API through `serve`, with the official `openai` client and the
bundled model (generic format, tool_calls.py): `required` and a named function yield function_call
items whose arguments follow the parameters; streamed, each call's item is added with empty
arguments, its arguments come as deltas, then done; a call and its output given back get a reply;
a bad tool is a 400."""

from __future__ import annotations

import json

import openai
import pytest
from test_server_responses import serve

from app.engine.sampling.params import SamplingParams
from app.server.protocol import Job
from app.server.responses.request import ResponseRequest
from app.server.responses.shape import ResponseShape, kept_of
from app.server.responses.streamed import StreamedItems
from app.server.tool_calls import Tools
from app.server.tool_syntax import HERMES

WEATHER = {
    "type": "function",
    "name": "get_weather",
    "description": "The weather now in a city",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
    "strict": True,
}
TIME = {"type": "function", "name": "get_time", "description": "The time now", "parameters": {"type": "object", "properties": {}}}
ASK = "What is the weather in Paris?"
# one call a reply keeps them short
SHORT = {"model": "m", "max_output_tokens": 40, "temperature": 0, "parallel_tool_calls": False}


def calls_of(response) -> list:
    return [item for item in response.output if item.type == "function_call"]


@pytest.mark.model
def test_a_required_or_named_tool_yields_function_call_items_and_their_output_gets_a_reply(config):
    async def body(api, _url):
        required = await api.responses.create(input=ASK, tools=[WEATHER, TIME], tool_choice="required", **SHORT)
        named = await api.responses.create(
            input=ASK,
            tools=[WEATHER, TIME],
            tool_choice={"type": "function", "name": "get_weather"},
            **SHORT,
        )
        (call,) = calls_of(named)
        given_back = [
            {"role": "user", "content": ASK},
            {"type": "function_call", "call_id": call.call_id, "name": call.name, "arguments": call.arguments},
            {"type": "function_call_output", "call_id": call.call_id, "output": '{"sky": "sunny", "celsius": 21}'},
        ]
        answer = await api.responses.create(input=given_back, tools=[WEATHER], tool_choice="none", **SHORT)
        chained = await api.responses.create(
            previous_response_id=named.id,
            input=[{"type": "function_call_output", "call_id": call.call_id, "output": "sunny"}],
            tools=[WEATHER],
            **SHORT,
        )
        return required, named, answer, chained

    required, named, answer, chained = serve(config, body)
    for response in (required, named):
        assert response.status == "completed" and calls_of(response)
        for call in calls_of(response):
            assert call.status == "completed" and call.call_id.startswith("call_") and call.id.startswith("fc_")
            arguments = json.loads(call.arguments)
            assert isinstance(arguments["city"], str) if call.name == "get_weather" else arguments == {}
    assert [c.name for c in calls_of(named)] == ["get_weather"]
    assert named.tool_choice.name == "get_weather" and named.tools[0].name == "get_weather" and not named.parallel_tool_calls
    # the output given back (tool_choice none): a message
    assert [item.type for item in answer.output] == ["message"] and answer.output_text
    # chained on the call (tool_choice auto): a message or another call, either way in OpenAI's shape
    assert chained.output and all(item.type in ("message", "function_call") for item in chained.output)


@pytest.mark.model
def test_a_streamed_call_is_added_then_its_arguments_come_as_deltas_then_done(config):
    async def body(api, _url):
        stream = await api.responses.create(input=ASK, tools=[WEATHER], tool_choice="required", stream=True, **SHORT)
        return [event async for event in stream]

    events = serve(config, body)
    assert [e.sequence_number for e in events] == list(range(len(events)))
    assert [e.type for e in events[:3]] == ["response.created", "response.in_progress", "response.output_item.added"]
    added = events[2]
    assert added.item.type == "function_call" and added.item.arguments == "" and added.output_index == 0
    deltas = [e for e in events if e.type == "response.function_call_arguments.delta"]
    assert len(deltas) > 1 and all(d.item_id == added.item.id and d.output_index == 0 for d in deltas)
    (done,) = [e for e in events if e.type == "response.function_call_arguments.done"]
    assert done.arguments == "".join(d.delta for d in deltas) and isinstance(json.loads(done.arguments)["city"], str)
    assert [e.type for e in events[-2:]] == ["response.output_item.done", "response.completed"]
    item = events[-2].item
    assert item.status == "completed" and item.arguments == done.arguments and item.call_id == added.item.call_id
    assert events[-1].response.output == [item]


@pytest.mark.model
def test_bad_tools_are_400s_naming_them(config):
    cases = {
        "nameless": ({"tools": [{"type": "function", "parameters": {"type": "object"}}]}, "function.name must be"),
        "web search": ({"tools": [{"type": "web_search"}]}, "function tools only"),
        "unknown choice": ({"tools": [WEATHER], "tool_choice": {"type": "function", "name": "nope"}}, "not in 'tools'"),
        "a call without a name": ({"input": [{"type": "function_call", "call_id": "c", "arguments": "{}"}]}, "call_id, name"),
    }

    async def body(api, _url):
        said = {}
        for name, (fields, _) in cases.items():
            with pytest.raises(openai.BadRequestError) as info:
                await api.responses.create(**{"input": ASK, **SHORT, "max_output_tokens": 4, **fields})
            said[name] = info.value.body
        return said

    said = serve(config, body)
    for name, (fields, words) in cases.items():
        assert words in said[name]["message"], (name, said[name])
        assert said[name]["param"].startswith(list(fields)[-1]), (name, said[name])  # the field at fault


@pytest.mark.unit
def test_text_then_a_call_in_a_family_syntax_stream_as_a_message_item_then_a_function_call_item():
    tools = Tools(({"name": "get_weather", "parameters": WEATHER["parameters"]},), "auto", HERMES)
    shape = ResponseShape(ResponseRequest(Job(SamplingParams(), messages=(), tools=tools), (), True, None, None, None), "m")
    text = 'Let me look.<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>'
    items, events = StreamedItems(shape), []
    for character in text:  # a character a token
        events += items.feed(character)
    events += items.finish("completed")
    added = [(e["output_index"], e["item"]["type"]) for e in events if e["type"] == "response.output_item.added"]
    assert added == [(0, "message"), (1, "function_call")]
    assert "".join(e["delta"] for e in events if e["type"] == "response.output_text.delta") == "Let me look."
    arguments = "".join(e["delta"] for e in events if e["type"] == "response.function_call_arguments.delta")
    assert json.loads(arguments) == {"city": "Paris"} and events[-1]["item"]["arguments"] == arguments
    # kept for previous_response_id: one assistant turn with its text and its call
    (turn,) = kept_of(shape.asked, {"id": shape.id, "output": items.items}).messages
    assert turn["content"] == "Let me look." and turn["tool_calls"][0]["function"]["name"] == "get_weather"
