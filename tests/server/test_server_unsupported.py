"""Fields that constrain a reply, which `serve` does not honour (the legacy `functions`, tools on a
plain completion), are a 400 naming them, never dropped; the values that ask for nothing pass.
(Structured output: test_server_structured.py; tool calls: test_server_tools.py.)"""

from __future__ import annotations

import openai
import pytest
from test_server_responses import serve

pytestmark = pytest.mark.tiny

HI = [{"role": "user", "content": "hi"}]
TOOL = {"type": "function", "function": {"name": "get_time", "parameters": {"type": "object", "properties": {}}}}
REFUSED = {
    "functions": {"extra_body": {"functions": [TOOL["function"]]}},
    "function_call": {"extra_body": {"function_call": {"name": "get_time"}}},
}


def test_constraints_not_honoured_are_400s_naming_them_and_neutral_values_pass(tiny_config):
    async def body(api, _url):
        refused = {}
        for name, fields in REFUSED.items():
            with pytest.raises(openai.BadRequestError) as info:
                await api.chat.completions.create(model="m", messages=HI, max_tokens=2, **fields)
            refused[name] = (info.value.body["message"], info.value.body.get("param"))
        with pytest.raises(openai.BadRequestError) as info:
            await api.completions.create(model="m", prompt="hi", max_tokens=2, extra_body={"tools": [TOOL]})
        refused["completion tools"] = (info.value.body["message"], info.value.body.get("param"))
        neutral = await api.chat.completions.create(
            model="m", messages=HI, max_tokens=2, response_format={"type": "text"}, tools=[], tool_choice="none"
        )
        return refused, neutral

    refused, neutral = serve(tiny_config, body)
    for name, (message, param) in refused.items():
        field = name.split()[-1]
        assert param == field and f"'{field}' is not supported by this server" in message, name
    assert neutral.choices[0].finish_reason == "length"  # the server went on serving
