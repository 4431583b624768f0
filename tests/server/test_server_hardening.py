"""`serve` against requests that used to hurt others: an empty prompt, faults told as a client's
error, penalties that make NaN, memory a request could grow, choices dropped mid-stream."""

from __future__ import annotations

import asyncio
import json
import logging
import socket

import aiohttp
import pytest
from helpers import run
from serving import Serving, chat, engine_is_idle

from app.engine.prompt.builder import PromptBuilder
from app.server import shaping, sse
from app.server.protocol import MAX_CHARS_PER_TOKEN, MAX_KEPT_PROBS


async def _post(http, url: str, path: str, body) -> tuple[int, dict]:
    async with http.post(f"{url}{path}", json=body) as r:
        return r.status, await r.json()


def _story(**fields) -> dict:
    return chat("Tell me a long story.", **{"max_tokens": 64, "ignore_eos": True, **fields})


@pytest.mark.tiny
@pytest.mark.parametrize("layout", [True, False], ids=["one pool", "a stream per sequence"])
def test_an_empty_prompt_is_a_400_and_the_replies_beside_it_go_on(tiny_config, layout):
    """With a model that adds no BOS, "" is no token at all: it used to end every reply on the model."""

    async def main():
        async with Serving(tiny_config.with_(kv_unified=layout)) as (client, _server, url), aiohttp.ClientSession() as http:
            running = asyncio.ensure_future(_post(http, url, "/v1/chat/completions", _story()))
            await asyncio.sleep(0.5)  # it is generating
            empties = [
                await _post(http, url, "/v1/completions", {"prompt": "", "max_tokens": 1}),
                await _post(http, url, "/v1/completions", {"prompt": [""], "max_tokens": 1, "logprobs": 2}),
            ]
            # past the server's check, the engine refuses it too: no request without tokens reaches a batch
            engine_final = await client.complete(params=None, prompt="")
            return empties, engine_final, await running, await engine_is_idle(client)

    empties, engine_final, (status, reply), idle = run(main())
    for code, body in empties:
        assert code == 400 and body["error"]["param"] == "prompt" and "empty" in body["error"]["message"]
    assert not engine_final.ok and "the prompt is empty" in engine_final.error and engine_final.fault == "request"
    assert status == 200 and reply["choices"][0]["finish_reason"] == "length" and reply["usage"]["completion_tokens"] == 64
    assert idle


@pytest.mark.model
def test_engine_faults_are_5xx_never_4xx(config, monkeypatch):
    """A request in flight when the engine dies: 503 (retry later); an internal error: 500."""

    def broken_build(self, request):
        raise RuntimeError("a bug in the prompt builder")

    async def main():
        async with Serving(config) as (client, _server, url), aiohttp.ClientSession() as http:
            whole = asyncio.ensure_future(_post(http, url, "/v1/chat/completions", _story(max_tokens=4000)))
            await asyncio.sleep(1.0)
            client._thread.call(lambda engine: (_ for _ in ()).throw(SystemExit("injected fault")))
            died = await whole
            await client.restart()
            monkeypatch.setattr(PromptBuilder, "build", broken_build)
            internal = await _post(http, url, "/v1/chat/completions", chat("Hi"))
            return died, internal

    (died_status, died), (internal_status, internal) = run(main())
    assert died_status == 503 and died["error"]["type"] == "unavailable_error" and "injected fault" in died["error"]["message"]
    assert internal_status == 500 and internal["error"]["type"] == "server_error"
    assert "a bug in the prompt builder" in internal["error"]["message"]


@pytest.mark.model
@pytest.mark.parametrize(
    "field, value",
    [("repeat_penalty", 0), ("repeat_penalty", 0.001), ("frequency_penalty", 2.5), ("presence_penalty", -3)],
)
def test_penalties_that_would_make_nan_are_refused_naming_the_field(config, field, value):
    async def main():
        async with Serving(config) as (_client, _server, url), aiohttp.ClientSession() as http:
            return await _post(http, url, "/v1/chat/completions", chat("Hi", **{field: value}))

    status, body = run(main())
    assert status == 400 and body["error"]["param"] == field


@pytest.mark.model
def test_frequency_and_presence_penalties_are_honoured(config):
    """OpenAI's penalties reach llama.cpp's penalties sampler: a greedy reply, the same each time
    without them, changes with them."""
    prompt = {"prompt": "one one one one one one one one", "max_tokens": 12, "temperature": 0, "repeat_penalty": 1.0}

    async def main():
        async with Serving(config) as (_client, _server, url), aiohttp.ClientSession() as http:
            bodies = [
                prompt,
                prompt,
                {**prompt, "frequency_penalty": 2.0},
                {**prompt, "presence_penalty": 2.0, "frequency_penalty": 2.0},
            ]
            return [await _post(http, url, "/v1/completions", body) for body in bodies]

    answers = run(main())
    assert [status for status, _ in answers] == [200] * 4
    plain, again, frequency, _both = (body["choices"][0]["text"] for _, body in answers)
    assert plain == again and frequency != plain, (plain, frequency)


@pytest.mark.unit
def test_replies_are_standard_json_whatever_the_values():
    body = {"logprob": float("nan"), "top": [float("-inf"), 1.5], "ok": "x"}
    text = shaping.dumps(body)
    assert json.loads(text) == {"logprob": None, "top": [None, 1.5], "ok": "x"}
    assert "NaN" not in text and "Infinity" not in text


@pytest.mark.model
def test_a_lone_surrogate_in_model_is_a_400_naming_the_field_with_one_model_loaded(config):
    async def main():
        async with Serving(config) as (_client, _server, url), aiohttp.ClientSession() as http:
            body = b'{"model":"\\ud800","messages":[{"role":"user","content":"hi"}]}'
            headers = {"Content-Type": "application/json"}
            async with http.post(f"{url}/v1/chat/completions", data=body, headers=headers) as r:
                return r.status, await r.json()

    status, body = run(main())
    assert status == 400 and body["error"]["param"] == "model"


@pytest.mark.tiny
def test_max_tokens_minus_one_runs_to_the_context_and_ends_length(tiny_config):
    async def main():
        async with Serving(tiny_config.with_(n_ctx=256, capacity=1)) as (_client, _server, url), aiohttp.ClientSession() as http:
            return await _post(http, url, "/v1/completions", {"prompt": "Once upon a time", "max_tokens": -1, "ignore_eos": True})

    status, body = run(main())
    assert status == 200 and body["choices"][0]["finish_reason"] == "length"
    assert body["usage"]["total_tokens"] == 256


@pytest.mark.model
def test_kept_token_probabilities_are_bounded_unless_streamed(config):
    many = chat("Hi", max_tokens=-1, logprobs=True, top_logprobs=20)

    async def main():
        async with Serving(config) as (_client, _server, url), aiohttp.ClientSession() as http:
            whole = await _post(http, url, "/v1/chat/completions", many)
            fits = await _post(http, url, "/v1/chat/completions", {**many, "max_tokens": 8})
            async with http.post(f"{url}/v1/chat/completions", json={**many, "max_tokens": 8, "stream": True}) as r:
                streamed = r.status, await r.read()
            return whole, fits, streamed

    (status, body), (fits_status, fits), (streamed_status, streamed) = run(main())
    assert status == 400 and body["error"]["param"] == "max_tokens" and str(MAX_KEPT_PROBS) in body["error"]["message"]
    assert fits_status == 200 and len(fits["choices"][0]["logprobs"]["content"]) >= 1
    assert streamed_status == 200 and b"top_logprobs" in streamed


@pytest.mark.model
def test_with_a_stream_per_sequence_a_request_is_measured_against_its_stream_not_the_pool(config):
    """4 streams of 1,024 cells in a pool of 4,096: the checks of a request's size and of the token
    probabilities it keeps count 1,024 (the pool's 4,096 let a text through to the tokenizer that
    no stream holds, and refused a whole reply with rivals that a stream bounds well within)."""
    streams = config.with_(n_ctx=4096, capacity=4, kv_unified=False)
    longer_than_a_stream = " ".join(f"w{i}" for i in range(1000))  # about 3,900 tokens
    no_stream_holds = "a " * (1024 * MAX_CHARS_PER_TOKEN // 2 + 1)  # within the pool's bound on characters

    async def main():
        async with Serving(streams) as (_client, _server, url), aiohttp.ClientSession() as http:
            async with http.get(f"{url}/v1/models") as r:
                meta = (await r.json())["data"][0]["meta"]
            return (
                meta,
                await _post(http, url, "/v1/completions", {"prompt": longer_than_a_stream, "max_tokens": 4}),
                await _post(http, url, "/v1/completions", {"prompt": no_stream_holds, "max_tokens": 4}),
                await _post(http, url, "/v1/chat/completions", chat("Hi", max_tokens=-1, logprobs=True, top_logprobs=20)),
            )

    meta, (long_status, long), (huge_status, huge), (probs_status, probs) = run(main())
    assert (meta["n_ctx"], meta["n_ctx_seq"]) == (4096, 1024)
    assert long_status == 400 and "but the context holds 1024" in long["error"]["message"]
    assert huge_status == 400 and huge["error"]["param"] == "prompt"
    assert "far more than the context of 1024 tokens holds" in huge["error"]["message"]
    assert probs_status == 200 and probs["choices"][0]["logprobs"]["content"]  # 1,024 × 21 kept at most: within the bound


@pytest.mark.model
def test_a_reader_that_stalls_is_cut_and_its_sequence_freed(config, monkeypatch):
    """Its events would pile up for as long as it reads nothing: after the deadline it is dropped."""
    monkeypatch.setattr(sse, "SEND_DEADLINE_S", 1.0)
    body = _story(max_tokens=3000, stream=True, logprobs=True, top_logprobs=100)  # about 10 kB a token

    async def main():
        async with Serving(config) as (client, _server, url):
            host, port = url.removeprefix("http://").split(":")
            sock = socket.socket()
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)  # a reader that reads nothing fills it at once
            sock.connect((host, int(port)))
            data = json.dumps(body).encode()
            head = f"POST /v1/chat/completions HTTP/1.1\r\nHost: {host}:{port}\r\nContent-Type: application/json\r\n"
            sock.sendall(head.encode() + f"Content-Length: {len(data)}\r\n\r\n".encode() + data)
            try:
                idle = await engine_is_idle(client, timeout=60)
                generated = client.snapshot.generated_tokens
            finally:
                sock.close()
            return idle, generated

    idle, generated = run(main())
    assert idle and generated < 3000, "the stalled reader kept its sequence to the end of its reply"


@pytest.mark.model
@pytest.mark.parametrize("lines_read", [0, 2])
def test_choices_streamed_and_dropped_free_their_sequences_at_once_and_log_no_error(config, caplog, lines_read):
    """n > 1 left before the first token or mid-stream: no `aclose(): ... already running` in the handler."""
    caplog.set_level(logging.WARNING)

    async def main():
        async with Serving(config) as (client, _server, url):
            async with aiohttp.ClientSession() as http:
                r = await http.post(f"{url}/v1/chat/completions", json=_story(max_tokens=2000, n=4, stream=True))
                for _ in range(lines_read):
                    await r.content.readline()
                r.close()  # the client goes away
            idle = await engine_is_idle(client, timeout=3)
            await asyncio.sleep(0.2)  # a task that failed unseen would be logged by now
            return idle, client.snapshot.running

    idle, running = run(main())
    assert idle and running == 0
    errors = [r for r in caplog.records if r.levelno >= logging.WARNING]
    assert not errors, [r.getMessage() for r in errors]
