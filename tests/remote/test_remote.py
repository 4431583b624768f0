"""RemoteClient against a real `serve` on loopback, and against endpoints that are down, slow or broken."""

from __future__ import annotations

import asyncio
import json
import math
import subprocess
import sys
import time
from pathlib import Path

import pytest
from aiohttp import web
from helpers import collect, run, user
from hypothesis import given, settings
from hypothesis import strategies as st
from serving import Serving, engine_is_idle
from spawn import free_port

from app.engine.events import FinishEvent, FinishReason, TokenEvent
from app.engine.sampling.params import GREEDY
from app.engine.stats import RequestStats
from app.remote import CONVERSATIONS_KEPT, Endpoint, RemoteClient, RemoteError, _read_line, _Reply


@pytest.mark.model
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


@pytest.mark.tiny
def test_a_remote_pane_tells_what_the_server_drafted_ahead(tiny_config, tiny_model_path):
    """serve (as llama-server) reports a reply's drafted and accepted tokens in its timings: a remote
    pane's final event carries them as a local one does."""
    from app.engine.params import SpecType

    # the model drafting for itself, at every step
    config = tiny_config.with_(spec_type=SpecType.DRAFT, spec_draft_model=tiny_model_path, spec_draft_n_min=2)

    async def main():
        async with Serving(config) as (client, _server, url):
            remote = RemoteClient(Endpoint(url))
            text = "repeat after me: " + "the mill and the river " * 6
            _, final = await collect(remote.generate(user(text), GREEDY.with_(max_tokens=64, ignore_eos=True)))
            await remote.close()
            return final, client.snapshot

    final, snapshot = run(main())
    assert final.ok and final.stats.gen_tokens == 64
    assert (final.stats.drafted_tokens, final.stats.accepted_tokens) == (snapshot.drafted_tokens, snapshot.accepted_tokens)
    assert 0 < final.stats.accepted_tokens <= final.stats.drafted_tokens


@pytest.mark.model
def test_remote_stop_cancels_the_request_on_the_server(config):
    async def main():
        async with Serving(config) as (client, _server, url):
            remote = RemoteClient(Endpoint(url))
            received, final = 0, None
            async for event in remote.generate(
                user("Tell me a long story."), GREEDY.with_(max_tokens=2000, ignore_eos=True), request_id="r"
            ):
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


async def _faulty_server(handler, path: str = "/v1/chat/completions") -> tuple[web.AppRunner, str]:
    app = web.Application()
    app.router.add_post(path, handler)
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


@pytest.mark.unit
def test_an_endpoint_that_is_down_says_so():
    final = remote_error(None)
    assert final.reason is FinishReason.ERROR and final.error.startswith("cannot reach http://127.0.0.1:")


@pytest.mark.unit
def test_a_slow_endpoint_times_out():
    final = remote_error(_never_answers, timeout_s=0.5)
    assert final.reason is FinishReason.ERROR and "no answer from" in final.error and "within 0.5 s" in final.error


@pytest.mark.unit
def test_stop_before_the_server_answers_ends_the_reply_at_once():
    async def main():
        runner, url = await _faulty_server(_never_answers)
        remote = RemoteClient(Endpoint(url, timeout_s=60))
        try:
            stream = remote.generate(user("Hi"), GREEDY, request_id="r1")
            pending = asyncio.ensure_future(collect(stream))
            await asyncio.sleep(0.3)  # the request is sent; no headers will come
            t0 = time.monotonic()
            remote.cancel("r1")
            _, final = await asyncio.wait_for(pending, 5)
            return final, time.monotonic() - t0, dict(remote._open)
        finally:
            await remote.close()
            await runner.cleanup()

    final, took, still_open = run(main())
    assert final.reason is FinishReason.CANCELLED and final.error is None
    assert took < 1.0 and not still_open


@pytest.mark.unit
def test_garbage_is_named():
    assert "not an OpenAI stream: '<html>" in remote_error(_html).error
    broken = remote_error(_broken_chunk)
    assert "not OpenAI JSON: '{oops'" in broken.error and broken.text == "Hel"
    assert remote_error(_cut_short).error == "the stream ended without a final chunk"


@pytest.mark.model
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


# -- endpoints that misbehave: each reply ends with ERROR and the reason, the next one works ----------


def _streaming(*lines: bytes, repeat: bool = False, pause_s: float = 0.0, content_type: str = "text/event-stream"):
    """A handler that sends `lines` (over and over with `repeat`), `pause_s` apart, until the client hangs up."""

    async def handler(request):
        response = web.StreamResponse(headers={"Content-Type": content_type})
        await response.prepare(request)
        try:
            while True:
                for line in lines:
                    await response.write(line)
                    await asyncio.sleep(pause_s)
                if not repeat:
                    return response
        except ConnectionError:  # the client gave up on us, as it should
            return response

    return handler


def _chunk(value) -> bytes:
    return b"data: " + json.dumps(value).encode() + b"\n\n"


def _delta(content) -> bytes:
    return _chunk({"choices": [{"delta": {"content": content}}]})


_fine = _streaming(_delta("Hello"), _chunk({"choices": [{"delta": {}, "finish_reason": "stop"}]}), b"data: [DONE]\n\n")


async def _reply(remote: RemoteClient, params=GREEDY) -> FinishEvent:
    """The final event of one reply, checking that it is the one FinishEvent and comes last."""
    events = [e async for e in remote.generate(user("Hi"), params, conversation_id="c")]
    assert all(isinstance(e, TokenEvent) for e in events[:-1]) and isinstance(events[-1], FinishEvent)
    return events[-1]


def answer(handler, params=GREEDY, **limits) -> tuple[FinishEvent, float]:
    """The final event of a reply from a server that answers with `handler`, and how long it took; the
    next reply from the same RemoteClient, which the server answers properly, must be fine."""
    calls = []

    async def first_faulty(request):
        calls.append(request)
        return await (handler if len(calls) == 1 else _fine)(request)

    async def main():
        runner, url = await _faulty_server(first_faulty)
        remote = RemoteClient(Endpoint(url, **limits))
        try:
            t0 = time.monotonic()
            bad = await _reply(remote, params)
            took_s = time.monotonic() - t0
            good = await _reply(remote)
            assert not remote._open  # nothing of the first request is kept
            return bad, took_s, good
        finally:
            await remote.close()
            await runner.cleanup()

    first, took_s, good = run(main())
    assert good.ok and good.text == "Hello", good
    return first, took_s


def failed(handler, params=GREEDY, **limits) -> tuple[FinishEvent, float]:
    final, took_s = answer(handler, params, **limits)
    assert final.reason is FinishReason.ERROR, final
    return final, took_s


@pytest.mark.unit
@pytest.mark.parametrize(
    "chunk, fault",
    [
        ({"choices": [{"delta": {"content": 5}}]}, "'content' as a number, not a string"),
        ({"choices": [{"delta": {"content": ["Hel"]}}]}, "'content' as an array, not a string"),
        ({"choices": [{"delta": "Hel"}]}, "'delta' as a string, not an object"),
        ({"choices": {"0": {"delta": {}}}}, "'choices' as an object, not an array"),
        ({"choices": ["Hel"]}, "a choice as a string, not an object"),
        ({"choices": [], "usage": [1, 2]}, "'usage' as an array, not an object"),
        ({"choices": [], "timings": "fast"}, "'timings' as a string, not an object"),
        ({"choices": [{"delta": {}, "finish_reason": 1}]}, "'finish_reason' as a number, not a string"),
        ({"usage": {}}, "a chunk without choices"),
        ([1, 2], "a chunk as an array, not an object"),
        ({"error": {"message": "out of memory"}}, "the endpoint failed: out of memory"),
    ],
)
def test_a_chunk_of_the_wrong_shape_is_named(chunk, fault):
    bad, _ = failed(_streaming(_delta("Hel"), _chunk(chunk)))
    assert fault in bad.error and bad.text == "Hel"


@pytest.mark.unit
def test_a_line_over_the_limit_is_named():
    bad, _ = failed(_streaming(_delta("x" * 5000)), max_line_bytes=1000)
    assert bad.error == "the endpoint sent a line longer than 1,000 bytes"


@pytest.mark.unit
def test_bytes_dripping_without_a_line_end_stall():
    bad, took_s = failed(_streaming(b"d", repeat=True, pause_s=0.1), timeout_s=0.5)
    assert "no complete line from http://127.0.0.1:" in bad.error and bad.error.endswith("within 0.5 s")
    assert took_s < 5


@pytest.mark.unit
def test_a_stream_that_never_ends_meets_the_deadline():
    # a line every 0.1 s keeps a per-line timeout happy forever: only the total deadline stops it
    bad, took_s = failed(_streaming(b"\n", repeat=True, pause_s=0.1), timeout_s=1, deadline_s=2)
    assert bad.error.endswith("took longer than the reply deadline of 2 s")
    assert 2 <= took_s < 6


@pytest.mark.unit
def test_a_slow_whole_reply_meets_the_deadline():
    bad, took_s = failed(_streaming(b" ", repeat=True, pause_s=0.1, content_type="application/json"), timeout_s=1, deadline_s=2)
    assert bad.error.endswith("took longer than the reply deadline of 2 s") and took_s < 6


@pytest.mark.unit
def test_gigabytes_meet_the_byte_cap():
    big = _delta("x" * 60_000)
    streamed, _ = failed(_streaming(big, repeat=True), max_bytes=2**20)
    assert streamed.error == "the reply passed its cap of 1 MiB" and 0 < len(streamed.text) <= 2**20
    whole, _ = failed(_streaming(b"[" + b"0," * 30_000, repeat=True, content_type="application/json"), max_bytes=2**20)
    assert whole.error == "the reply passed its cap of 1 MiB"


@pytest.mark.unit
def test_a_huge_error_page_is_cut_to_its_start():
    async def huge_error(request):
        return web.Response(status=502, text="Bad gateway " + "x" * 10_000_000)

    bad, _ = failed(huge_error)
    assert "answered 502: Bad gateway xxx" in bad.error and len(bad.error) < 300


@pytest.mark.unit
def test_endless_pieces_meet_the_piece_cap():
    bad, _ = failed(_streaming(_delta("ab"), repeat=True), GREEDY.with_(max_tokens=8))
    assert bad.error == "the endpoint sent more than 48 pieces of text for a reply of at most 8 tokens"
    assert bad.text == "ab" * 48


@pytest.mark.unit
def test_usage_counts_that_are_not_counts_are_ignored():
    usage = {"prompt_tokens": -3, "completion_tokens": "7", "prompt_tokens_details": {"cached_tokens": True}}
    end = _chunk(
        {"choices": [{"delta": {}, "finish_reason": "stop"}], "usage": usage, "timings": {"cache_n": 1.5, "prompt_n": -1}}
    )
    final, _ = answer(_streaming(_delta("Hel"), _delta("lo"), end, b"data: [DONE]\n\n"))
    st = final.stats
    assert final.reason is FinishReason.STOP and final.text == "Hello"
    assert st.prompt_tokens == 0 and st.gen_tokens == 2 and math.isnan(st.kv_hit_rate)


@pytest.mark.unit
def test_lone_surrogates_become_replacement_characters():
    end = _chunk({"choices": [{"delta": {"content": "b\udfff"}, "finish_reason": "stop"}]})
    final, _ = answer(_streaming(_delta("\ud800a"), end, b"data: [DONE]\n\n"))
    assert final.text == "\ufffdab\ufffd"


# -- any JSON as a chunk: the reply still ends with exactly one FinishEvent ---------------------------

OPENAI_KEYS = [
    "choices",
    "delta",
    "content",
    "finish_reason",
    "usage",
    "timings",
    "error",
    "message",
    "prompt_tokens",
    "cached_tokens",
]
json_values = st.recursive(
    st.one_of(st.none(), st.booleans(), st.integers(), st.floats(), st.text(max_size=8)),
    lambda inner: st.one_of(
        st.lists(inner, max_size=4),
        st.dictionaries(st.one_of(st.sampled_from(OPENAI_KEYS), st.text(max_size=4)), inner, max_size=4),
    ),
    max_leaves=20,
)
counts = st.one_of(st.integers(-5, 10**6), json_values)
choice = st.fixed_dictionaries(
    {},
    optional={
        "delta": st.one_of(
            st.fixed_dictionaries({}, optional={"content": st.one_of(st.text(max_size=8), json_values)}), json_values
        ),
        "finish_reason": st.one_of(st.sampled_from(["stop", "length", "tool_calls"]), json_values),
    },
)
usage = st.fixed_dictionaries(
    {},
    optional={
        "prompt_tokens": counts,
        "completion_tokens": counts,
        "prompt_tokens_details": st.one_of(st.fixed_dictionaries({"cached_tokens": counts}), json_values),
    },
)
# anything at all, and chunks shaped like OpenAI's with any of their fields replaced by anything
chunks = st.one_of(
    json_values,
    st.fixed_dictionaries(
        {},
        optional={
            "choices": st.one_of(st.lists(st.one_of(choice, json_values), max_size=3), json_values),
            "usage": st.one_of(usage, json_values),
            "timings": st.one_of(st.fixed_dictionaries({"cache_n": counts, "prompt_n": counts}), json_values),
            "error": json_values,
        },
    ),
)


@pytest.mark.unit
@settings(max_examples=300, deadline=None, database=None)
@given(st.lists(chunks, min_size=1, max_size=4))
def test_any_chunk_ends_in_a_final_event_through_the_parser(stream):
    """The parsing `generate` runs on each line, fed directly: only a RemoteError (which names the fault)
    may come out, and the final event's counts are counts."""
    remote = RemoteClient(Endpoint("http://127.0.0.1:1/v1"))
    reply = _Reply(RequestStats("r", "c"))
    error = None
    try:
        for chunk in stream:
            reply.pieces += _read_line("data: " + json.dumps(chunk), reply)
    except RemoteError as e:
        error = str(e)
    final = remote._final(reply, error)
    assert final.reason is (FinishReason.ERROR if error else reply.reason or FinishReason.STOP)
    st_ = final.stats
    for count in (st_.prompt_tokens, st_.gen_tokens, st_.cached_tokens, st_.evaluated_tokens, st_.conversation_cached_tokens):
        assert type(count) is int and count >= 0
    final.text.encode("utf-8")  # the chat can be saved


@pytest.mark.unit
@settings(max_examples=8, deadline=None, database=None)
@given(st.lists(chunks, max_size=3))
def test_any_chunk_ends_in_a_final_event_over_http(stream):
    answer(_streaming(*map(_chunk, stream), b"data: [DONE]\n\n"))


@pytest.mark.unit
@pytest.mark.parametrize("url", ["http://[", "host:8080", "ftp://example.test/v1", ""])
def test_an_endpoint_that_is_not_a_url_says_so(url):
    async def main():
        remote = RemoteClient(Endpoint(url))
        try:
            return await _reply(remote)
        finally:
            await remote.close()

    final = run(main())
    assert final.reason is FinishReason.ERROR and final.error.startswith("the endpoint is not a valid http(s) URL: ")


@pytest.mark.unit
def test_the_client_keeps_the_totals_of_recent_conversations_only():
    remote = RemoteClient(Endpoint("http://127.0.0.1:1/v1"))
    for i in range(CONVERSATIONS_KEPT + 50):
        remote._final(_Reply(RequestStats(f"r{i}", "first" if i % 100 == 0 else f"c{i}")), None)
    remote.cancel("r1")  # over: nothing to stop, nothing kept
    assert len(remote.conversations) == CONVERSATIONS_KEPT and not remote._open
    assert "first" in remote.conversations and "c1" not in remote.conversations  # used lately, kept


@pytest.mark.unit
def test_the_remote_client_does_not_load_the_local_engine():
    code = "import sys, app.remote; print('llama_cpp' in sys.modules or 'app.client' in sys.modules)"
    root = Path(__file__).parents[2]
    assert (
        subprocess.run([sys.executable, "-c", code], cwd=root, capture_output=True, text=True, check=True).stdout.strip()
        == "False"
    )
