"""RemoteClient over the Responses API: a chain of turns against a real `serve` on the tiny model that
sends only each new turn after `previous_response_id`, an expired id, and streams that misbehave."""

from __future__ import annotations

import asyncio
import json
import math

import aiohttp
import pytest
from aiohttp import web
from helpers import run, user
from hypothesis import given, settings
from hypothesis import strategies as st
from serving import Serving
from test_remote import _faulty_server

from app.engine.events import FinishEvent, FinishReason, TokenEvent
from app.engine.sampling.params import GREEDY
from app.engine.stats import RequestStats
from app.remote import Endpoint, RemoteClient, RemoteError, _Reply

QUICK = GREEDY.with_(max_tokens=8)


def spied(remote: RemoteClient) -> list[dict]:
    """The bodies `remote` posts, in order."""
    bodies, post = [], remote._post

    async def recording(body):
        bodies.append(body)
        return await post(body)

    remote._post = recording
    return bodies


async def turn(remote: RemoteClient, messages: list[dict], conversation_id: str = "c") -> FinishEvent:
    events = [e async for e in remote.generate(messages, QUICK, conversation_id=conversation_id)]
    assert all(isinstance(e, TokenEvent) for e in events[:-1]) and isinstance(events[-1], FinishEvent)
    final = events[-1]
    assert final.text == "".join(e.text for e in events[:-1])
    messages.append({"role": "assistant", "content": final.text})
    return final


@pytest.mark.tiny
def test_a_chain_of_three_sends_only_each_new_turn_and_reuses_the_cells(tiny_config):
    async def main():
        async with Serving(tiny_config) as (_client, _server, url):
            remote = RemoteClient(Endpoint(url, api="responses"))
            bodies = spied(remote)
            messages = [{"role": "system", "content": "Be brief."}, *user("What is the capital of France?")]
            finals = [await turn(remote, messages)]
            for question in ("And of Italy?", "And of Spain?"):
                messages += user(question)
                finals.append(await turn(remote, messages))
            await remote.close()
            return bodies, finals

    bodies, finals = run(main())
    assert len(bodies) == 3 and all(f.reason in (FinishReason.STOP, FinishReason.LENGTH) for f in finals), finals
    first, second, third = bodies
    assert "previous_response_id" not in first and len(first["input"]) == 1 and first["instructions"] == "Be brief."
    assert first["store"] is True and first["stream"] is True and first["max_output_tokens"] == 8
    # the Responses API's own knobs, and of the others only those the pane moved (GREEDY's penalty)
    assert first["temperature"] == 0.0 and first["top_p"] == 0.95 and first["repeat_penalty"] == 1.0
    assert "top_k" not in first and "min_p" not in first and "logit_bias" not in first
    for body, question in ((second, "And of Italy?"), (third, "And of Spain?")):
        assert body["previous_response_id"].startswith("resp_") and body["instructions"] == "Be brief."
        assert body["input"] == [{"type": "message", "role": "user", "content": question}]
    assert second["previous_response_id"] != third["previous_response_id"]
    assert finals[0].stats.cached_tokens == 0 and finals[0].stats.prompt_tokens > 10
    for final in finals[1:]:
        st_ = final.stats
        assert st_.prompt_tokens > finals[0].stats.prompt_tokens and st_.cached_tokens > 0.5 * st_.prompt_tokens
        assert 0 < st_.gen_tokens <= 8


@pytest.mark.tiny
def test_a_panes_moved_knobs_reach_a_responses_endpoint_and_act_as_over_the_chat_api(tiny_config):
    asked = user("Write a short story about a cat.")

    async def reply(api: str, params) -> tuple[str, dict]:
        remote = RemoteClient(Endpoint(url, api=api))
        bodies = spied(remote)
        events = [e async for e in remote.generate(list(asked), params, conversation_id=api)]
        await remote.close()
        assert events[-1].ok, events[-1]
        return events[-1].text, bodies[0]

    async def main():
        nonlocal url
        async with Serving(tiny_config) as (_client, _server, url):
            plain, _ = await reply("responses", QUICK)
            banned = plain[:1]  # the reply's first character: the tiny model's is a line break
            moved = QUICK.with_(logit_bias=((banned, -math.inf),), top_k=5, seed=7)
            return plain, banned, await reply("responses", moved), await reply("chat", moved)

    url = ""
    plain, banned, (over_responses, body), (over_chat, _) = run(main())
    assert body["logit_bias"] == {banned: False} and body["top_k"] == 5 and body["seed"] == 7
    assert over_responses != plain  # the ban acted on the endpoint
    assert over_responses == over_chat  # the same knobs, the same greedy reply, whichever API carried them


@pytest.mark.tiny
def test_an_expired_previous_response_falls_back_to_the_whole_chat(tiny_config):
    async def main():
        async with Serving(tiny_config) as (_client, _server, url):
            remote = RemoteClient(Endpoint(url, api="responses"))
            bodies = spied(remote)
            messages = user("What is the capital of France?")
            await turn(remote, messages)
            response_id = remote.api.last["c"].response_id
            async with aiohttp.ClientSession() as http, http.delete(f"{url}/v1/responses/{response_id}") as r:
                assert r.status == 200
            messages += user("And of Italy?")
            final = await turn(remote, messages)
            messages += user("And of Spain?")
            third = await turn(remote, messages)
            await remote.close()
            return bodies, final, third

    bodies, final, third = run(main())
    assert final.ok and third.ok, (final, third)
    assert [len(b["input"]) for b in bodies] == [1, 1, 3, 1]  # the 404, then the whole chat once
    assert "previous_response_id" in bodies[1] and "previous_response_id" not in bodies[2]
    assert bodies[3]["previous_response_id"] not in (None, bodies[1]["previous_response_id"])


@pytest.mark.unit
def test_a_chat_that_is_not_the_last_response_plus_a_user_turn_is_sent_whole():
    remote = RemoteClient(Endpoint("http://127.0.0.1:1/v1", api="responses"))
    reply = _Reply(RequestStats("r", "c"), pieces=["Paris."], reason=FinishReason.STOP, response_id="resp_1")
    asked = user("Capital of France?")
    remote.api.remember(reply, asked)
    said = [*asked, {"role": "assistant", "content": "Paris."}]
    cases = {
        "goes on": (said + user("And Italy?"), "resp_1"),
        "edited reply": ([*asked, {"role": "assistant", "content": "Rome."}, *user("And Italy?")], None),
        "two new turns": (said + user("a") + user("b"), None),
        "new instructions": ([{"role": "system", "content": "Be brief."}, *said, *user("And Italy?")], None),
        "regenerated": (asked, None),
    }
    for name, (messages, previous) in cases.items():
        first = remote.api.bodies(remote.endpoint, messages, GREEDY, "c")[0]
        assert first.get("previous_response_id") == previous, name
    assert "previous_response_id" not in remote.api.bodies(remote.endpoint, said + user("x"), GREEDY, "other")[0]


# -- a stand-in that streams any sequence of events: the reply still ends once, with a reason -----------


async def stand_in(events: list[bytes]) -> tuple[web.AppRunner, str]:
    async def handler(request):
        response = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await response.prepare(request)
        for line in events:
            await response.write(line)
        return response

    return await _faulty_server(handler, "/v1/responses")


def streamed(*events: bytes, **limits) -> FinishEvent:
    async def main():
        runner, url = await stand_in(list(events))
        remote = RemoteClient(Endpoint(url, api="responses", **limits))
        try:
            out = [e async for e in remote.generate(user("Hi"), QUICK, conversation_id="c")]
        finally:
            await remote.close()
            await runner.cleanup()
        assert all(isinstance(e, TokenEvent) for e in out[:-1]) and isinstance(out[-1], FinishEvent)
        return out[-1]

    return run(main())


def sse(event) -> bytes:
    kind = event.get("type", "x") if isinstance(event, dict) else "x"
    return f"event: {kind}\ndata: {json.dumps(event)}\n\n".encode()


def delta(text) -> dict:
    return {"type": "response.output_text.delta", "delta": text}


def ended(kind="response.completed", **response) -> dict:
    return {"type": kind, "response": {"id": "resp_1", "usage": {"input_tokens": 9, "output_tokens": 2}, **response}}


@pytest.mark.unit
@pytest.mark.parametrize(
    "events, reason, said",
    [
        ([delta("Hel"), {"type": "response.reasoning.delta"}, delta("lo"), ended()], FinishReason.STOP, None),
        (
            [delta("Hel"), ended("response.incomplete", incomplete_details={"reason": "max_output_tokens"})],
            FinishReason.LENGTH,
            None,
        ),
        (
            [delta("Hel"), ended("response.incomplete", incomplete_details={"reason": "content_filter"})],
            FinishReason.ERROR,
            "incomplete: content_filter",
        ),
        ([delta("Hel"), {"type": "error", "message": "out of memory"}], FinishReason.ERROR, "the endpoint failed: out of memory"),
        (
            [delta("Hel"), {"type": "response.failed", "response": {"error": {"message": "boom"}}}],
            FinishReason.ERROR,
            "failed: boom",
        ),
        ([delta("Hel")], FinishReason.ERROR, "the stream ended without response.completed"),
        ([delta("Hel"), {"delta": "x"}], FinishReason.ERROR, "an event without a type"),
        ([delta("Hel"), delta(5)], FinishReason.ERROR, "'delta' as a number, not a string"),
    ],
)
def test_a_responses_stream_ends_with_its_reason(events, reason, said):
    final = streamed(*map(sse, events))
    assert final.reason is reason and final.text.startswith("Hel")
    assert said is None or said in final.error, final.error
    if reason is FinishReason.STOP:
        assert final.text == "Hello" and final.stats.prompt_tokens == 9 and final.stats.gen_tokens == 2


@pytest.mark.unit
def test_garbage_and_endless_events_meet_their_caps():
    assert "not a Responses stream: '<html>" in streamed(b"<html>\n").error
    assert "not JSON: '{oops'" in streamed(b"data: {oops\n\n").error
    endless = streamed(*[sse(delta("ab"))] * 100)
    assert endless.error == "the endpoint sent more than 48 pieces of text for a reply of at most 8 tokens"
    assert streamed(sse(delta("x" * 5000)), max_line_bytes=1000).error.endswith("longer than 1,000 bytes")


json_values = st.recursive(
    st.one_of(st.none(), st.booleans(), st.integers(), st.text(max_size=6)),
    lambda inner: st.one_of(st.lists(inner, max_size=3), st.dictionaries(st.text(max_size=4), inner, max_size=3)),
    max_leaves=12,
)
KINDS = ["response.created", "response.output_text.delta", "response.completed", "response.incomplete", "error"]
KINDS += ["response.failed", "response.output_text.done", "response.unknown"]
events = st.one_of(
    json_values,
    st.fixed_dictionaries(
        {"type": st.sampled_from(KINDS)},
        optional={
            "delta": st.one_of(st.text(max_size=6), json_values),
            "message": json_values,
            "response": st.one_of(
                json_values,
                st.fixed_dictionaries(
                    {},
                    optional={
                        "id": json_values,
                        "usage": st.one_of(json_values, st.fixed_dictionaries({"input_tokens": json_values})),
                        "incomplete_details": json_values,
                        "error": json_values,
                    },
                ),
            ),
        },
    ),
)


@pytest.mark.unit
@settings(max_examples=300, deadline=None, database=None)
@given(st.lists(events, min_size=1, max_size=5))
def test_any_events_end_in_a_final_event_through_the_parser(stream):
    remote = RemoteClient(Endpoint("http://127.0.0.1:1/v1", api="responses"))
    reply, error = _Reply(RequestStats("r", "c")), None
    try:
        for event in stream:
            reply.pieces += remote.api.read_line("data: " + json.dumps(event), reply)
    except RemoteError as e:
        error = str(e)
    final = remote._final(reply, error)
    assert final.reason is (FinishReason.ERROR if error else reply.reason or FinishReason.STOP)
    for count in (final.stats.prompt_tokens, final.stats.gen_tokens, final.stats.cached_tokens):
        assert type(count) is int and count >= 0
    final.text.encode("utf-8")


@pytest.mark.unit
@settings(max_examples=8, deadline=None, database=None)
@given(st.lists(events, max_size=4), st.booleans())
def test_any_events_end_in_a_final_event_over_http(stream, cut):
    lines = [sse(e) for e in stream]
    if cut and lines:
        lines[-1] = lines[-1][: len(lines[-1]) // 2]  # a stream cut off mid-event
    final = streamed(*lines)
    assert final.reason in (FinishReason.STOP, FinishReason.LENGTH, FinishReason.ERROR)
    assert (final.reason is FinishReason.ERROR) is (final.error is not None)


@pytest.mark.unit
def test_the_responses_client_keeps_the_last_responses_of_recent_conversations_only():
    remote = RemoteClient(Endpoint("http://127.0.0.1:1/v1", api="responses"))
    limit = remote.api.limit
    for i in range(limit + 10):
        remote.api.remember(_Reply(RequestStats("r", f"c{i}"), reason=FinishReason.STOP, response_id=f"resp_{i}"), user("Hi"))
    assert len(remote.api.last) == limit and "c0" not in remote.api.last and f"c{limit + 9}" in remote.api.last
    asyncio.run(remote.close())
