"""Requests as the client libraries that people point at a local server send them (instructor,
LangChain, the OpenAI Agents SDK, pydantic-ai), each body copied from what the library sent and
replayed with the official `openai` client: pydantic's `$defs` / `$ref` in a tool's parameters, a
response format beside tools (an agent with tools and an output type), a named tool beside a
Responses `text.format`. The libraries themselves are no dependency; docs/serving.md says which
versions were run against `serve`."""

from __future__ import annotations

import enum
import json

import openai
import pydantic
import pytest
from test_server_responses import serve
from test_tool_parse import NATIVE, stream

from app.engine.sampling.constraints import follows
from app.server.output_format import grammar_of
from app.server.tool_calls import parse_tools
from app.server.tool_parse import scan
from app.server.tool_syntax import GENERIC, HERMES, QWEN3_CODER, Syntax
from app.server.tool_syntaxes.lark import properties

SYNTAXES = [GENERIC, *NATIVE]


class Color(str, enum.Enum):
    RED = "red"
    GREEN = "green"
    BLUE = "blue"


class Address(pydantic.BaseModel):
    city: str
    country: str


class Person(pydantic.BaseModel):
    name: str
    age: int
    address: Address
    hobbies: list[str]
    favourite: Color
    nickname: str | None = None


class Weather(pydantic.BaseModel):
    city: str
    sunny: bool


# instructor 1.17's Mode.TOOLS for a pydantic model with a nested model, a list, an enum and an
# optional field: pydantic's schema as it is, `$defs` and `$ref` in it
PERSON_PARAMETERS = {
    "$defs": {
        "Address": {
            "properties": {"city": {"title": "City", "type": "string"}, "country": {"title": "Country", "type": "string"}},
            "required": ["city", "country"],
            "title": "Address",
            "type": "object",
        },
        "Color": {"enum": ["red", "green", "blue"], "title": "Color", "type": "string"},
    },
    "properties": {
        "name": {"title": "Name", "type": "string"},
        "age": {"title": "Age", "type": "integer"},
        "address": {"$ref": "#/$defs/Address"},
        "hobbies": {"items": {"type": "string"}, "title": "Hobbies", "type": "array"},
        "favourite": {"$ref": "#/$defs/Color"},
        "nickname": {"anyOf": [{"type": "string"}, {"type": "null"}], "default": None, "title": "Nickname"},
    },
    "required": ["address", "age", "favourite", "hobbies", "name"],
    "type": "object",
}
PERSON_TOOL = {
    "type": "function",
    "function": {
        "name": "Person",
        "description": "Correctly extracted `Person` with all the required parameters with correct types",
        "parameters": PERSON_PARAMETERS,
    },
}
EXTRACT = [
    {"role": "user", "content": "Extract: John is 30, lives in Paris, France, likes chess and tennis, favourite colour blue."}
]

# the Agents SDK 0.20's Agent(tools=[get_weather], output_type=Weather): strict schemas, and the
# output type as the response format beside the tools (tool_choice left out: auto)
WEATHER_ARGS = {
    "properties": {"city": {"title": "City", "type": "string"}},
    "required": ["city"],
    "title": "get_weather_args",
    "type": "object",
    "additionalProperties": False,
}
WEATHER_TOOL = {
    "type": "function",
    "function": {"name": "get_weather", "description": "Get the weather in a city.", "parameters": WEATHER_ARGS, "strict": True},
}
WEATHER_SCHEMA = {
    "properties": {"city": {"title": "City", "type": "string"}, "sunny": {"title": "Sunny", "type": "boolean"}},
    "required": ["city", "sunny"],
    "title": "Weather",
    "type": "object",
    "additionalProperties": False,
}
ASK_WEATHER = [
    {"content": "Use the tool, then answer.", "role": "system"},
    {"role": "user", "content": "What is the weather in Paris?"},
]


def _required(tools: list[dict], syntax: Syntax, choice: object = "required"):
    return parse_tools({"tools": tools, "tool_choice": choice}, syntax)


@pytest.mark.unit
@pytest.mark.parametrize("syntax", SYNTAXES, ids=lambda s: s.family)
def test_a_tools_parameters_with_defs_and_refs_hold_its_calls_in_every_syntax(syntax):
    # two tools whose `#/$defs/A` name different schemas: each call's reference is its own tool's
    def tool(name: str, a: dict) -> dict:
        parameters = {"$defs": {"A": a}, "type": "object", "properties": {"a": {"$ref": "#/$defs/A"}}, "required": ["a"]}
        return {"type": "function", "function": {"name": name, "parameters": parameters}}

    tools = [tool("f", {"enum": ["x", "y"]}), tool("g", {"type": "integer"}), PERSON_TOOL]
    grammar = _required(tools, syntax).grammar()  # compiles: it was "Pointer '/$defs/A' does not exist"
    if syntax is GENERIC:
        call = '{{"tool_calls": [{{"name": "{}", "arguments": {}}}]}}'.format
        assert follows(grammar, call("f", '{"a": "x"}')) and follows(grammar, call("g", '{"a": 3}'))
        assert not follows(grammar, call("f", '{"a": 3}')) and not follows(grammar, call("g", '{"a": "x"}'))
        person = {"name": "J", "age": 3, "address": {"city": "P", "country": "F"}, "hobbies": [], "favourite": "red"}
        assert follows(grammar, call("Person", json.dumps(person)))
        assert not follows(grammar, call("Person", json.dumps({**person, "favourite": "pink"})))


@pytest.mark.unit
def test_an_argument_that_is_a_reference_is_the_schema_it_names():
    # families that write arguments one by one (Qwen3-Coder, GLM, LFM2...) read each one's schema apart
    named = {name: schema for name, schema, _ in properties(PERSON_PARAMETERS)}
    assert named["favourite"]["enum"] == ["red", "green", "blue"]  # a string: written raw, read as one
    assert named["address"]["required"] == ["city", "country"]
    grammar = _required([PERSON_TOOL], QWEN3_CODER).grammar()
    assert '"red\\n</parameter>\\n"' in grammar


@pytest.mark.unit
def test_a_json_answer_beside_tools_is_the_replys_content_whole_and_streamed():
    answer = '{"city": "Paris", "sunny": true}'
    for text, content in [
        (f'{{"response": {answer}}}', answer),
        (f'{{"response": {answer[:12]}', answer[:12]),  # cut by max_tokens: as far as it went
        ('{"response": "a text"}', "a text"),
    ]:
        assert scan(text, GENERIC).content == content
        assert stream(text, GENERIC, list(range(len(text)))) == (content, [])


@pytest.mark.unit
@pytest.mark.parametrize("syntax", SYNTAXES, ids=lambda s: s.family)
def test_tools_with_a_json_response_format_make_calls_or_an_answer_in_the_format(syntax):
    body = {
        "response_format": {
            "type": "json_schema",
            "json_schema": {"name": "final_output", "strict": True, "schema": WEATHER_SCHEMA},
        }
    }
    tools = _required([WEATHER_TOOL], syntax, "auto").answering(grammar_of(body))
    grammar = tools.grammar()
    assert tools.triggers() == ()  # held from the first token: a call, or the answer
    answer = '{"city": "Paris", "sunny": true}'
    if syntax is GENERIC:
        assert follows(grammar, f'{{"response": {answer}}}')
        assert follows(grammar, '{"tool_calls": [{"name": "get_weather", "arguments": {"city": "Paris"}}]}')
        assert not follows(grammar, '{"response": "sunny"}')
    else:  # in a family's own syntax, the answer alone
        assert follows(grammar, answer) and not follows(grammar, "sunny")
    if syntax is HERMES:
        assert follows(grammar, '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>')
    # a format with references of its own (pydantic's `$defs`), nested in the generic answer
    person = {"response_format": {"type": "json_schema", "json_schema": {"name": "Person", "schema": PERSON_PARAMETERS}}}
    grammar = _required([WEATHER_TOOL], syntax, "auto").answering(grammar_of(person)).grammar()
    someone = '{"name": "J", "age": 3, "address": {"city": "P", "country": "F"}, "hobbies": [], "favourite": "red"}'
    assert follows(grammar, f'{{"response": {someone}}}' if syntax is GENERIC else someone)
    # a named function or `required`: the reply is a call, which the format has nothing to say of
    named = _required([WEATHER_TOOL], syntax, {"type": "function", "function": {"name": "get_weather"}})
    assert named.answering(grammar_of(body)) is named
    with pytest.raises(ValueError, match="tools cannot be sent with a grammar"):
        named.answering(grammar_of({"grammar": 'root ::= "a"'}))


@pytest.mark.model
def test_instructor_and_pydantic_ai_tools_with_defs_come_back_as_valid_calls(config):
    async def body(api, _url):
        named = await api.chat.completions.create(
            model="m",
            messages=EXTRACT,
            max_tokens=200,
            temperature=0,
            tool_choice={"type": "function", "function": {"name": "Person"}},
            tools=[PERSON_TOOL],
        )
        # pydantic-ai 2.31's output_type as a tool: `required`, strict-shaped (additionalProperties false)
        strict_params = {**PERSON_PARAMETERS, "additionalProperties": False}
        tool = {"type": "function", "function": {"name": "final_result", "parameters": strict_params}}
        stream = await api.chat.completions.create(
            model="m",
            messages=EXTRACT,
            max_completion_tokens=200,
            temperature=0,
            tool_choice="required",
            tools=[tool],
            stream=True,
        )
        fragments = [d.function.arguments for c in [c async for c in stream] for d in (c.choices[0].delta.tool_calls or [])]
        return named, "".join(fragments)

    named, streamed = serve(config, body)
    choice = named.choices[0]
    assert choice.finish_reason == "tool_calls" and choice.message.tool_calls[0].function.name == "Person"
    Person.model_validate_json(choice.message.tool_calls[0].function.arguments)
    Person.model_validate_json(streamed)


@pytest.mark.model
def test_an_agent_with_tools_and_an_output_type_gets_a_call_or_an_answer_in_its_format(config):
    response_format = {"type": "json_schema", "json_schema": {"name": "final_output", "strict": True, "schema": WEATHER_SCHEMA}}

    async def body(api, _url):
        whole = await api.chat.completions.create(
            model="m", messages=ASK_WEATHER, max_tokens=80, temperature=0, response_format=response_format, tools=[WEATHER_TOOL]
        )
        chunks = await api.chat.completions.create(
            model="m",
            messages=ASK_WEATHER,
            max_tokens=80,
            temperature=0,
            response_format=response_format,
            tools=[WEATHER_TOOL],
            stream=True,
        )
        streamed = [c async for c in chunks]
        with pytest.raises(openai.BadRequestError, match="tools cannot be sent with a grammar"):
            await api.chat.completions.create(
                model="m", messages=ASK_WEATHER, tools=[WEATHER_TOOL], extra_body={"grammar": 'root ::= "a"'}
            )
        # the same agent on the Responses API: `text.format` beside the tools
        response = await api.responses.create(
            model="m",
            input=[{"content": "What is the weather in Paris?", "role": "user"}],
            instructions="Use the tool, then answer.",
            max_output_tokens=80,
            temperature=0,
            text={"format": {"type": "json_schema", "name": "final_output", "schema": WEATHER_SCHEMA, "strict": True}},
            tools=[{"type": "function", **WEATHER_TOOL["function"]}],
        )
        return whole, streamed, response

    whole, streamed, response = serve(config, body)
    message = whole.choices[0].message
    content = "".join(c.choices[0].delta.content or "" for c in streamed if c.choices)
    calls = [d for c in streamed if c.choices for d in (c.choices[0].delta.tool_calls or [])]
    if message.tool_calls:
        assert json.loads(message.tool_calls[0].function.arguments)["city"] and calls and not content
    else:
        assert Weather.model_validate_json(message.content) == Weather.model_validate_json(content) and not calls
    (item,) = response.output
    if item.type == "function_call":
        assert item.name == "get_weather" and isinstance(json.loads(item.arguments)["city"], str)
    else:
        Weather.model_validate_json(item.content[0].text)


@pytest.mark.model
def test_instructor_responses_tools_sends_a_named_tool_beside_its_format(config):
    # instructor's Mode.RESPONSES_TOOLS: the model as `text.format` and as the one tool it must call
    schema = {**PERSON_PARAMETERS, "additionalProperties": False}

    async def body(api, _url):
        return await api.responses.create(
            model="m",
            input=EXTRACT,
            max_output_tokens=200,
            temperature=0,
            text={"format": {"type": "json_schema", "name": "Person", "strict": True, "schema": schema}},
            tool_choice={"type": "function", "name": "Person"},
            tools=[{"type": "function", "name": "Person", "parameters": schema, "description": "A person."}],
        )

    response = serve(config, body)
    (item,) = response.output
    assert item.type == "function_call" and item.name == "Person"
    Person.model_validate_json(item.arguments)


@pytest.mark.unit
def test_the_one_function_a_reply_must_call_is_shown_by_its_name():
    # in the generic format; a placeholder name was copied into Person's own `name` by the 135M model
    named = _required([PERSON_TOOL, WEATHER_TOOL], GENERIC, {"type": "function", "function": {"name": "Person"}})
    assert '{"tool_calls": [{"name": "Person", ' in named.instructions()
    assert '{"tool_calls": [{"name": "Person", ' in _required([PERSON_TOOL], GENERIC).instructions()
    assert "<function name>" in _required([PERSON_TOOL, WEATHER_TOOL], GENERIC).instructions()
