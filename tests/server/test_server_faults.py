"""`serve` and bad input: a 400 with a clear OpenAI-style error, never a stuck engine; clients that leave."""

from __future__ import annotations

import asyncio
import json

import aiohttp
import pytest
from helpers import run
from serving import Serving, chat, engine_is_idle

from app.engine.events import FinishEvent, FinishReason
from app.server.protocol import MAX_MESSAGES, MAX_STOP_CHARS

pytestmark = pytest.mark.model

BAD_BODIES = {
    "malformed JSON": (b'{"messages": [', "not valid JSON"),
    "not an object": (b"[1, 2]", "JSON object"),
    "no messages": (b'{"model": "x"}', "'messages'"),
    "messages not a list": (json.dumps({"messages": "hi"}), "'messages' must be a list"),
    "bad role": (json.dumps({"messages": [{"role": "wizard", "content": "hi"}]}), "role"),
    "image part without a URL": (
        json.dumps({"messages": [{"role": "user", "content": [{"type": "image_url", "image_url": {}}]}]}),
        "image_url must be a URL",
    ),
    "audio part": (
        json.dumps({"messages": [{"role": "user", "content": [{"type": "input_audio", "input_audio": {}}]}]}),
        "only text and image_url",
    ),
    "temperature a string": (json.dumps(chat("hi", temperature="hot")), "'temperature' must be a number"),
    "temperature 1e9": (json.dumps(chat("hi", temperature=1e9)), "'temperature' must be between"),
    "temperature NaN": (b'{"messages": [{"role": "user", "content": "hi"}], "temperature": NaN}', "finite"),
    "negative max_tokens": (json.dumps(chat("hi", max_tokens=-5)), "'max_tokens' must be between 1"),
    "fractional max_tokens": (json.dumps(chat("hi", max_tokens=1.5)), "'max_tokens' must be an integer"),
    "boolean top_k": (json.dumps(chat("hi", top_k=True)), "'top_k' must be an integer"),
    "stop not strings": (json.dumps(chat("hi", stop=[1, 2])), "'stop'"),
    "too many choices": (json.dumps(chat("hi", n=17)), "'n' must be between 1 and 16"),
    "logprobs beyond the limit": (
        json.dumps(chat("hi", logprobs=True, top_logprobs=101)),
        "'top_logprobs' must be between 0 and 100",
    ),
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
            return await engine_is_idle(client), client.snapshot

    idle, snapshot = run(main())
    assert idle, "the request kept its sequence after its client left"
    assert [f.reason for f in finals] == [FinishReason.CANCELLED]
    assert finals[0].stats.gen_tokens < 2000
    assert snapshot.running == snapshot.waiting == 0


def test_the_lone_surrogate_request_gets_a_400_naming_the_field_and_the_engine_goes_on(config):
    """The request that used to end the engine thread for good."""
    bodies = {
        "messages[0].content": b'{"messages":[{"role":"user","content":"\\ud800 x"}],"max_tokens":4}',
        "messages[1].content": b'{"messages":[{"role":"user","content":"hi"},{"role":"user","content":[{"type":"text","text":"\\udfff"}]}]}',
        "stop[0]": b'{"messages":[{"role":"user","content":"hi"}],"stop":["\\ud83d"]}',
        "messages[0].role": b'{"messages":[{"role":"\\ud800","content":"hi"}]}',
    }

    async def main():
        async with Serving(config) as (client, _server, url), aiohttp.ClientSession() as http:
            answers = {}
            for field, body in bodies.items():
                async with http.post(f"{url}/v1/chat/completions", data=body, headers={"Content-Type": "application/json"}) as r:
                    answers[field] = r.status, await r.json()
            completion = b'{"prompt":"\\ud800","max_tokens":2}'
            async with http.post(f"{url}/v1/completions", data=completion, headers={"Content-Type": "application/json"}) as r:
                answers["prompt"] = r.status, await r.json()
            async with http.get(f"{url}/health") as r:
                health = r.status
            async with http.post(f"{url}/v1/chat/completions", json=chat("Hi", max_tokens=4)) as r:
                good = r.status
            return answers, health, good, client.is_running

    answers, health, good, alive = run(main())
    for field, (status, body) in answers.items():
        assert status == 400 and body["error"]["param"] == field, (field, body)
    assert health == 200 and good == 200 and alive


def test_caps_on_messages_and_stop_strings_are_400s_with_the_limit(config):
    many = {"messages": [{"role": "user", "content": ""}] * (MAX_MESSAGES + 1), "max_tokens": 2}
    long_stop = chat("hi", stop=["x" * (MAX_STOP_CHARS + 1)])

    async def main():
        async with Serving(config) as (_client, _server, url), aiohttp.ClientSession() as http:
            out = []
            for body in (many, long_stop):
                async with http.post(f"{url}/v1/chat/completions", json=body) as r:
                    out.append((r.status, (await r.json())["error"]["message"]))
            return out

    (s1, m1), (s2, m2) = run(main())
    assert s1 == 400 and f"at most {MAX_MESSAGES} messages" in m1
    assert s2 == 400 and f"at most {MAX_STOP_CHARS} characters" in m2


def test_beyond_the_queue_bound_requests_get_503_with_retry_after(config):
    async def main():
        async with Serving(config) as (_client, server, url), aiohttp.ClientSession() as http:
            server._max_queue = 2
            long = chat("Tell me a story.", max_tokens=300, ignore_eos=True, stream=True)
            held = [await http.post(f"{url}/v1/chat/completions", json=long) for _ in range(2)]
            async with http.post(f"{url}/v1/chat/completions", json=chat("Hi", max_tokens=2)) as r:
                refused = r.status, r.headers.get("Retry-After"), await r.json()
            for response in held:
                response.close()  # the clients leave: their places free up
            await asyncio.sleep(0.3)
            async with http.post(f"{url}/v1/chat/completions", json=chat("Hi", max_tokens=2)) as r:
                after = r.status
            return refused, after, server.in_flight

    (status, retry_after, body), after, in_flight = run(main())
    assert status == 503 and retry_after == "1" and "2 requests are in flight" in body["error"]["message"]
    assert after == 200 and in_flight == 0


def test_a_dead_engine_is_reported_by_health_and_requests_get_503(config):
    async def main():
        async with Serving(config) as (client, _server, url), aiohttp.ClientSession() as http:
            stream = await http.post(
                f"{url}/v1/chat/completions", json=chat("Story", max_tokens=4000, ignore_eos=True, stream=True)
            )
            await stream.content.readline()
            client._thread.call(lambda engine: (_ for _ in ()).throw(SystemExit("injected fault")))
            rest = await asyncio.wait_for(stream.read(), 10)  # the open stream ends at once, with the reason
            async with http.get(f"{url}/health") as r:
                health = r.status, await r.json()
            async with http.post(f"{url}/v1/chat/completions", json=chat("Hi")) as r:
                refused = r.status, await r.json()
            await client.restart()
            async with http.get(f"{url}/health") as r:
                healed = r.status
            return rest, health, refused, healed

    rest, (health_status, health), (status, body), healed = run(main())
    assert b"injected fault" in rest
    assert health_status == 503 and "injected fault" in health["error"]
    assert status == 503 and "injected fault" in body["error"]["message"]
    assert healed == 200


def test_the_api_key_scheme_is_case_insensitive_and_odd_headers_get_401(config):
    async def main():
        async with Serving(config, api_key="sesame") as (_client, _server, url), aiohttp.ClientSession() as http:
            out = {}
            for name, header in {
                "lower": "bearer sesame",
                "upper": "BEARER sesame",
                "non-ascii": "Bearer sésame",
                "no scheme": "sesame",
                "bytes": "Bearer \udcff",
            }.items():
                try:
                    async with http.get(f"{url}/v1/models", headers={"Authorization": header}) as r:
                        out[name] = r.status
                except UnicodeEncodeError:  # the client itself refuses to send it
                    out[name] = None
            return out

    out = run(main())
    assert out["lower"] == out["upper"] == 200
    assert out["non-ascii"] == out["no scheme"] == 401
    assert out["bytes"] in (401, None)
