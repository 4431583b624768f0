"""`serve` and bad input: a 400 with a clear OpenAI-style error, never a stuck engine; clients that leave."""

from __future__ import annotations

import asyncio
import json

import aiohttp
import pytest

from app.engine.events import FinishEvent, FinishReason
from helpers import run
from serving import Serving, chat, engine_is_idle

BAD_BODIES = {
    "malformed JSON": (b'{"messages": [', "not valid JSON"),
    "not an object": (b"[1, 2]", "JSON object"),
    "no messages": (b'{"model": "x"}', "'messages'"),
    "messages not a list": (json.dumps({"messages": "hi"}), "'messages' must be a list"),
    "bad role": (json.dumps({"messages": [{"role": "wizard", "content": "hi"}]}), "role"),
    "image part": (json.dumps({"messages": [{"role": "user", "content": [{"type": "image_url", "image_url": {}}]}]}), "text parts"),
    "temperature a string": (json.dumps(chat("hi", temperature="hot")), "'temperature' must be a number"),
    "temperature 1e9": (json.dumps(chat("hi", temperature=1e9)), "'temperature' must be between"),
    "temperature NaN": (b'{"messages": [{"role": "user", "content": "hi"}], "temperature": NaN}', "finite"),
    "negative max_tokens": (json.dumps(chat("hi", max_tokens=-5)), "'max_tokens' must be between 1"),
    "fractional max_tokens": (json.dumps(chat("hi", max_tokens=1.5)), "'max_tokens' must be an integer"),
    "boolean top_k": (json.dumps(chat("hi", top_k=True)), "'top_k' must be an integer"),
    "stop not strings": (json.dumps(chat("hi", stop=[1, 2])), "'stop'"),
    "two choices": (json.dumps(chat("hi", n=2)), "n=1"),
    "stream not a boolean": (json.dumps(chat("hi", stream="yes")), "'stream' must be a boolean"),
    "10 MB prompt": (json.dumps(chat("x" * 10_000_000)), "characters, far more than the context"),
}


def test_each_bad_input_gets_a_400_and_the_engine_goes_on(config):
    async def main():
        answers = {}
        async with Serving(config) as (client, _server, url), aiohttp.ClientSession() as http:
            for name, (body, _) in BAD_BODIES.items():
                async with http.post(f"{url}/v1/chat/completions", data=body, headers={"Content-Type": "application/json"}) as r:
                    answers[name] = r.status, await r.json()
            async with http.post(f"{url}/v1/completions", json={"prompt": ["a", "b"]}) as r:
                answers["a batch of prompts"] = r.status, await r.json()
            async with http.get(f"{url}/v1/nothing-here") as r:
                missing = r.status, await r.json()
            async with http.post(f"{url}/v1/chat/completions", json=chat("What is two plus two?")) as r:
                good = r.status, await r.json()
            return answers, missing, good, await engine_is_idle(client)

    answers, missing, good, idle = run(main())
    for name, (_, expected) in BAD_BODIES.items():
        status, body = answers[name]
        assert status == 400, name
        assert body["error"]["type"] == "invalid_request_error" and expected in body["error"]["message"], (name, body)
    assert answers["a batch of prompts"][0] == 400
    assert missing[0] == 404 and "Not Found" in missing[1]["error"]["message"]
    assert good[0] == 200 and good[1]["choices"][0]["message"]["content"]
    assert idle


@pytest.mark.parametrize("stream", [False, True])
def test_prompt_longer_than_the_context_is_a_400_with_the_reason(config, stream):
    async def main():
        async with Serving(config.with_(n_ctx=512, capacity=2)) as (client, _server, url), aiohttp.ClientSession() as http:
            async with http.post(f"{url}/v1/chat/completions", json=chat("word " * 2000, stream=stream)) as r:
                refused = r.status, await r.json()
            async with http.post(f"{url}/v1/chat/completions", json=chat("Hi", stream=stream)) as r:
                fine = r.status
            return refused, fine, await engine_is_idle(client)

    (status, body), fine, idle = run(main())
    assert status == 400
    assert "but the context holds 512" in body["error"]["message"]
    assert fine == 200 and idle


@pytest.mark.parametrize("stream", [False, True])
def test_a_client_that_leaves_frees_its_sequence(config, stream):
    """Mid-stream, or while waiting for a whole reply: the request is cancelled, the slot let go."""
    finals: list[FinishEvent] = []

    async def main():
        async with Serving(config) as (client, _server, url):
            client.add_listener(lambda events: finals.extend(e for e in events if isinstance(e, FinishEvent)))
            body = chat("Tell me a very long story.", max_tokens=2000, ignore_eos=True, stream=stream)
            async with aiohttp.ClientSession() as http:
                if stream:
                    async with http.post(f"{url}/v1/chat/completions", json=body) as r:
                        await r.content.readline()
                        await r.content.readline()  # a chunk or two, then the client goes away
                else:
                    with pytest.raises(asyncio.TimeoutError):
                        await http.post(f"{url}/v1/chat/completions", json=body, timeout=aiohttp.ClientTimeout(total=1.5))
            return await engine_is_idle(client), client.engine.snapshot

    idle, snapshot = run(main())
    assert idle, "the request kept its sequence after its client left"
    assert [f.reason for f in finals] == [FinishReason.CANCELLED]
    assert finals[0].stats.gen_tokens < 2000
    assert snapshot.running == snapshot.waiting == 0
