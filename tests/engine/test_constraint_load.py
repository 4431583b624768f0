"""Constrained replies on a busy machine: 200 requests held to a JSON schema, a regular expression or
a tool call, at temperatures from greedy to 2, all submitted at once while processes beside the
engine keep every core busy. No reply fails (no clock decides a constrained reply: llguidance's
limits are counts); each one that stops follows its format, and each one max_tokens cut is a
beginning of it."""

from __future__ import annotations

import asyncio
import json
import os
import re
import subprocess
import sys

import jsonschema
import pytest
from helpers import Started, run, user

from app.engine.events import FinishReason
from app.engine.sampling.constraints import follows, regex_grammar, schema_grammar
from app.engine.sampling.params import SamplingParams
from app.server.tool_calls import parse_tools

pytestmark = pytest.mark.tiny

REQUESTS = 200
SCHEMA = {
    "type": "object",
    "properties": {"answer": {"enum": ["yes", "no"]}, "n": {"type": "integer", "minimum": 0, "maximum": 99}},
    "required": ["answer", "n"],
}
PATTERN = "[0-9]{3}-[a-c]{2}"
WEATHER = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "parameters": {"type": "object", "properties": {"city": {"type": "string", "maxLength": 12}}, "required": ["city"]},
    },
}
TEMPERATURES = (0.0, 0.4, 0.7, 1.0, 1.5, 2.0)


def _valid(kind: str, text: str) -> bool:
    """A whole reply of `kind`, checked without llguidance."""
    if kind == "regex":
        return re.fullmatch(PATTERN, text) is not None
    document = json.loads(text)
    if kind == "schema":
        jsonschema.validate(document, SCHEMA)
        return True
    (call,) = document["tool_calls"]
    return call["name"] == "get_weather" and isinstance(call["arguments"]["city"], str)


def test_two_hundred_constrained_replies_on_a_loaded_machine_all_follow_their_format(tiny_config):
    tools = parse_tools({"tools": [WEATHER], "tool_choice": "required"})
    grammars = {"schema": schema_grammar(SCHEMA), "regex": regex_grammar(PATTERN), "tools": tools.grammar()}
    asks = []
    for i in range(REQUESTS):
        kind = ("schema", "regex", "tools")[i % 3]
        temperature = TEMPERATURES[i % len(TEMPERATURES)]
        params = SamplingParams(temperature=temperature, top_p=(1.0, 0.9)[i % 2], seed=i, max_tokens=24, grammar=grammars[kind])
        asks.append((kind, params))

    async def main():
        async with Started(tiny_config) as client:
            return await asyncio.wait_for(
                asyncio.gather(*(client.complete(user(f"Request {i}: {kind}"), p) for i, (kind, p) in enumerate(asks))),
                900,  # a hang guard, not a measure
            )

    hogs = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(os.cpu_count() or 1)]
    try:
        finals = run(main())
    finally:
        for hog in hogs:
            hog.kill()
            hog.wait()

    errors = [f.error for f in finals if f.reason not in (FinishReason.STOP, FinishReason.LENGTH)]
    assert errors == []
    stopped = 0
    for (kind, _params), final in zip(asks, finals):
        if final.reason is FinishReason.STOP:
            stopped += 1
            assert follows(grammars[kind], final.text) and _valid(kind, final.text), (kind, final.text)
        else:  # cut by max_tokens: a beginning of the format
            assert follows(grammars[kind], final.text, whole=False), (kind, final.text)
    assert stopped >= REQUESTS // 3  # the regular expression's replies end within 24 tokens
