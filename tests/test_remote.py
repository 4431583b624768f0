"""RemoteClient against a real `serve` on loopback, and against endpoints that are down, slow or broken."""

from __future__ import annotations

import asyncio
import math

from aiohttp import web

from app.engine.events import FinishEvent, FinishReason, TokenEvent
from app.engine.params import GREEDY
from app.remote import Endpoint, RemoteClient
from app.server.spawn import free_port
from helpers import collect, run, user
from serving import Serving, engine_is_idle


def test_remote_chat_streams_with_stats_and_kv_hits(config):
    async def main():
        async with Serving(config, api_key="k") as (client, _server, url):
            remote = RemoteClient(Endpoint(url, api_key="k"))  # a bare URL means its /v1
            messages = user("What is the capital of France?")
            first = await collect(remote.generate(messages, GREEDY.with_(max_tokens=12), conversation_id="c"))
            messages += [{"role": "assistant", "content": first[1].text}, *user("And of Italy?")]
            second = await collect(remote.generate(messages, GREEDY.with_(max_tokens=12), conversation_id="c"))
            await remote.close()
            return first, second

    (tokens, final), (_, final2) = run(main())
    assert final.ok and final.text and final.text == "".join(t.text for t in tokens)
    st = final.stats
    assert st.gen_tokens == len(tokens) <= 12 and st.prompt_tokens > 10
    assert st.ttft_s > 0 and st.gen_tok_s > 0
    assert math.isnan(st.kv_hit_rate) is False and st.cached_tokens == 0
    assert final2.ok and final2.stats.kv_hit_rate > 0.5  # the server kept the first turn's cells
    assert 0 < final2.stats.conversation_hit_rate < final2.stats.kv_hit_rate


def test_remote_stop_cancels_the_request_on_the_server(config):
    async def main():
        async with Serving(config) as (client, _server, url):
            remote = RemoteClient(Endpoint(url))
            received, final = 0, None
            async for event in remote.generate(user("Tell me a long story."), GREEDY.with_(max_tokens=2000, ignore_eos=True), request_id="r"):
                if isinstance(event, FinishEvent):
                    final = event
                else:
                    received += 1
                    if received == 3:
                        remote.cancel("r")
            await remote.close()
            return final, await engine_is_idle(client)

    final, idle = run(main())
    assert final.reason is FinishReason.CANCELLED and final.stats.gen_tokens < 100
    assert idle


async def _faulty_server(handler) -> tuple[web.AppRunner, str]:
    app = web.Application()
    app.router.add_post("/v1/chat/completions", handler)
    runner = web.AppRunner(app, shutdown_timeout=0.1)
    await runner.setup()
    port = free_port()
    await web.TCPSite(runner, "127.0.0.1", port).start()
    return runner, f"http://127.0.0.1:{port}/v1"


async def _never_answers(request):
    await asyncio.sleep(3600)


async def _html(request):
    return web.Response(text="<html><body>Welcome to nginx!</body></html>", content_type="text/html")


async def _broken_chunk(request):
    response = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
    await response.prepare(request)
    await response.write(b'data: {"choices": [{"delta": {"content": "Hel"}}]}\n\ndata: {oops\n\n')
    return response


async def _cut_short(request):
    response = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
    await response.prepare(request)
    await response.write(b'data: {"choices": [{"delta": {"content": "Hel"}}]}\n\n')
    return response


def remote_error(handler, timeout_s: float = 30.0) -> FinishEvent:
    async def main():
        runner, url = await _faulty_server(handler) if handler else (None, f"http://127.0.0.1:{free_port()}/v1")
        remote = RemoteClient(Endpoint(url, timeout_s=timeout_s))
        try:
            events = [e async for e in remote.generate(user("Hi"), GREEDY)]
        finally:
            await remote.close()
            if runner:
                await runner.cleanup()
        assert all(isinstance(e, TokenEvent) for e in events[:-1])
        return events[-1]

    return run(main())


def test_an_endpoint_that_is_down_says_so():
    final = remote_error(None)
    assert final.reason is FinishReason.ERROR and final.error.startswith("cannot reach http://127.0.0.1:")


def test_a_slow_endpoint_times_out():
    final = remote_error(_never_answers, timeout_s=0.5)
    assert final.reason is FinishReason.ERROR and "no answer from" in final.error and "within 0.5 s" in final.error


def test_garbage_is_named():
    assert "not an OpenAI stream: '<html>" in remote_error(_html).error
    broken = remote_error(_broken_chunk)
    assert "not OpenAI JSON: '{oops'" in broken.error and broken.text == "Hel"
    assert remote_error(_cut_short).error == "the stream ended without a final chunk"


def test_an_http_error_carries_the_server_message(config):
    async def main():
        async with Serving(config, api_key="right") as (_client, _server, url):
            remote = RemoteClient(Endpoint(url, api_key="wrong"))
            _, final = await collect(remote.generate(user("Hi"), GREEDY))
            await remote.close()
            return final

    final = run(main())
    assert final.reason is FinishReason.ERROR
    assert "answered 401: invalid or missing API key" in final.error
