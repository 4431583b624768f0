"""Structured output through `serve`, with the official `openai` client and the bundled model:
OpenAI's `response_format` (a JSON object, a JSON schema; its `parse` helper with a pydantic model),
the Responses API's `text.format`, and llama-server's `json_schema` and `grammar`, on chat and
completions, streamed and not. A reply
that stops follows its format; a schema or grammar that cannot constrain one is a 400 saying why."""

from __future__ import annotations

import json

import openai
import pytest
from pydantic import BaseModel
from test_server_responses import serve

pytestmark = pytest.mark.model

ASK = [{"role": "user", "content": "Describe a person who lives in Paris, as JSON."}]
PERSON = {
    "type": "object",
    "properties": {"name": {"type": "string"}, "age": {"type": "integer"}, "city": {"type": "string"}},
    "required": ["name", "age", "city"],
    "additionalProperties": False,
}


class Person(BaseModel):
    name: str
    age: int
    city: str


def test_json_schema_and_json_object_replies_follow_their_format(config):
    async def body(api, _url):
        schema = {"type": "json_schema", "json_schema": {"name": "person", "schema": PERSON, "strict": True}}
        whole = await api.chat.completions.create(model="m", messages=ASK, max_tokens=120, temperature=0, response_format=schema)
        pieces = []
        stream = await api.chat.completions.create(
            model="m", messages=ASK, max_tokens=120, temperature=0.8, seed=5, response_format=schema, stream=True
        )
        async for chunk in stream:
            pieces += [c.delta.content or "" for c in chunk.choices]
        anything = await api.chat.completions.create(
            model="m",
            messages=ASK,
            max_tokens=120,
            temperature=0,
            response_format={"type": "json_object"},
            logprobs=True,
            top_logprobs=2,
        )
        parsed = await api.beta.chat.completions.parse(
            model="m", messages=ASK, max_tokens=120, temperature=0, response_format=Person
        )
        llama = await api.completions.create(
            model="m", prompt="A person, as JSON: ", max_tokens=120, temperature=0, extra_body={"json_schema": PERSON}
        )
        grammar = await api.chat.completions.create(
            model="m", messages=ASK, max_tokens=8, temperature=0, extra_body={"grammar": 'root ::= "yes" | "no"'}
        )
        form = {"format": {"type": "json_schema", "name": "person", "schema": PERSON, "strict": True}}
        response = await api.responses.create(model="m", input=ASK[0]["content"], max_output_tokens=120, temperature=0, text=form)
        return whole, "".join(pieces), anything, parsed, llama, grammar, response

    whole, streamed, anything, parsed, llama, grammar, response = serve(config, body)
    assert response.text.format.type == "json_schema"  # the format asked, echoed
    for text in (whole.choices[0].message.content, streamed, llama.choices[0].text, response.output_text):
        person = json.loads(text)
        assert set(person) == {"name", "age", "city"} and isinstance(person["age"], int), text
    assert whole.choices[0].finish_reason == "stop"
    assert anything.choices[0].finish_reason == "stop" and isinstance(json.loads(anything.choices[0].message.content), dict)
    told = "".join(t.token for t in anything.choices[0].logprobs.content)  # the probabilities path obeys it too
    assert told == anything.choices[0].message.content
    assert isinstance(parsed.choices[0].message.parsed, Person)
    assert grammar.choices[0].message.content in ("yes", "no")


def test_a_format_that_cannot_constrain_a_reply_is_a_400_saying_why(config):
    deep = {"type": "object", "properties": {}}
    node = deep
    for _ in range(100):
        node["properties"]["x"] = {"type": "object", "properties": {}}
        node = node["properties"]["x"]
    cases = {
        "grammar": {"extra_body": {"grammar": "root ::= ("}},
        "json_schema": {"extra_body": {"json_schema": deep}},
        "response_format": {"response_format": {"type": "json_schema", "json_schema": {"name": "x"}}},
        "nested grammar": {"extra_body": {"grammar": "root ::= " + "(" * 500 + '"a"' + ")" * 500}},
        "two formats": {"response_format": {"type": "json_object"}, "extra_body": {"grammar": 'root ::= "a"'}},
    }

    async def body(api, _url):
        said = {}
        for name, fields in cases.items():
            with pytest.raises(openai.BadRequestError) as info:
                await api.chat.completions.create(model="m", messages=ASK, max_tokens=4, **fields)
            said[name] = info.value.body["message"]
        after = await api.chat.completions.create(model="m", messages=ASK, max_tokens=2)
        return said, after

    said, after = serve(config, body)
    assert "does not parse" in said["grammar"]
    assert "nests deeper than 64" in said["json_schema"]
    assert "must be an object holding a 'schema'" in said["response_format"]
    assert "nests parentheses deeper" in said["nested grammar"]
    assert "send one of" in said["two formats"]
    assert after.choices[0].finish_reason == "length"  # the server went on serving
