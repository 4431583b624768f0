"""The Responses API over real loopback HTTP with the official openai client: whole and streamed
responses, a chain continued with previous_response_id on its KV cells, stored ones, refusals."""

from __future__ import annotations

import asyncio
import json

import aiohttp
import openai
import pytest
from helpers import run
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from serving import Serving

from app.engine.events import FinishEvent, FinishReason
from app.engine.stats import RequestStats
from app.server.responses.request import parse_response
from app.server.responses.shape import ResponseShape, kept_of
from app.server.responses.store import Kept, KeptResponses, footprint

pytestmark = pytest.mark.tiny

STREAM_EVENTS = [
    "response.created",
    "response.in_progress",
    "response.output_item.added",
    "response.content_part.added",
]
CLOSING_EVENTS = ["response.output_text.done", "response.content_part.done", "response.output_item.done"]


def openai_client(url: str) -> openai.AsyncOpenAI:
    return openai.AsyncOpenAI(base_url=f"{url}/v1", api_key="none", max_retries=0, timeout=120)


def serve(tiny_config, body):
    """Run `body(api, url)` against a server of the tiny model; return what it returns."""

    async def main():
        async with Serving(tiny_config) as (_client, _server, url):
            api = openai_client(url)
            try:
                return await body(api, url)
            finally:
                await api.close()

    return run(main())


def test_a_response_whole_with_usage(tiny_config):
    async def body(api, _url):
        return await api.responses.create(
            model="any",
            input="Name a colour.",
            instructions="Be brief.",
            max_output_tokens=12,
            temperature=0,
            extra_body={"seed": 1},
        )

    response = serve(tiny_config, body)
    assert response.id.startswith("resp_") and response.object == "response"
    assert response.status in ("completed", "incomplete") and response.created_at > 0
    (item,) = response.output
    assert item.type == "message" and item.role == "assistant"
    assert item.content[0].type == "output_text" and item.content[0].annotations == []
    assert response.output_text == item.content[0].text
    usage = response.usage
    assert usage.input_tokens > 5 and 1 <= usage.output_tokens <= 12
    assert usage.total_tokens == usage.input_tokens + usage.output_tokens
    assert usage.input_tokens_details.cached_tokens == 0


def test_a_cut_response_is_incomplete(tiny_config):
    async def body(api, _url):
        return await api.responses.create(model="any", input="Tell a long story.", max_output_tokens=3, temperature=0)

    response = serve(tiny_config, body)
    assert response.status == "incomplete"
    assert response.incomplete_details.reason == "max_output_tokens"
    assert response.usage.output_tokens == 3


def test_a_streamed_response_sends_the_events_in_order(tiny_config):
    async def body(api, _url):
        stream = await api.responses.create(
            model="any",
            input=[{"role": "user", "content": [{"type": "input_text", "text": "Hi!"}]}],
            stream=True,
            max_output_tokens=10,
            temperature=0,
        )
        return [event async for event in stream]

    events = serve(tiny_config, body)
    types = [e.type for e in events]
    deltas = [e for e in events if e.type == "response.output_text.delta"]
    assert types[:4] == STREAM_EVENTS and deltas
    assert types[4 : 4 + len(deltas)] == ["response.output_text.delta"] * len(deltas)
    assert types[4 + len(deltas) :] == [*CLOSING_EVENTS, "response.incomplete"]  # the tiny model seldom stops
    assert [e.sequence_number for e in events] == list(range(len(events)))
    text = "".join(d.delta for d in deltas)
    assert events[-5 + 1].text == text  # output_text.done
    last = events[-1].response
    assert last.status == "incomplete" and last.output_text == text and last.usage.output_tokens == 10


def test_a_chain_of_three_reuses_its_kv_cells(tiny_config):
    async def body(api, _url):
        chain = []
        previous = None
        for text in ("My name is Ada and I like long walks by the sea.", "What is my name?", "And what do I like?"):
            response = await api.responses.create(
                model="any", input=text, previous_response_id=previous, max_output_tokens=16, temperature=0
            )
            chain.append(response)
            previous = response.id
        return chain

    chain = serve(tiny_config, body)
    assert chain[0].usage.input_tokens_details.cached_tokens == 0
    for before, after in zip(chain, chain[1:]):
        cached = after.usage.input_tokens_details.cached_tokens
        assert after.previous_response_id == before.id
        # the whole previous turn, its prompt and its reply as the model produced them, is reused
        assert cached >= before.usage.input_tokens + before.usage.output_tokens - 1
        assert cached > 0.6 * after.usage.input_tokens
        assert after.usage.input_tokens > before.usage.total_tokens


def test_stored_responses_are_retrieved_and_deleted_and_unstored_ones_are_not(tiny_config):
    async def body(api, _url):
        kept = await api.responses.create(model="any", input="Hello", max_output_tokens=4)
        again = await api.responses.retrieve(kept.id)
        deleted = (await api.responses.with_raw_response.delete(kept.id)).http_response.json()
        gone = []
        for response_id in (kept.id, "resp_unknown"):
            with pytest.raises(openai.NotFoundError) as e:
                await api.responses.retrieve(response_id)
            gone.append(e.value)
        unstored = await api.responses.create(model="any", input="Hello", max_output_tokens=4, store=False)
        with pytest.raises(openai.NotFoundError):
            await api.responses.retrieve(unstored.id)
        with pytest.raises(openai.NotFoundError) as e:
            await api.responses.create(model="any", input="Go on", previous_response_id=unstored.id, max_output_tokens=4)
        return kept, again, deleted, gone, e.value

    kept, again, deleted, gone, unknown_previous = serve(tiny_config, body)
    assert again.id == kept.id and again.output_text == kept.output_text
    assert deleted == {"id": kept.id, "object": "response", "deleted": True}
    assert "not found" in gone[0].message and gone[1].status_code == 404
    assert unknown_previous.body["param"] == "previous_response_id"


def test_unsupported_fields_and_bad_requests_are_400s_naming_them(tiny_config):
    async def body(api, url):
        errors = []
        for fields in (
            {"tools": [{"type": "web_search"}]},
            {"reasoning": {"effort": "high", "encrypted": True}},  # effort is honoured (thinking models'), no other field
            {"text": {"format": {"type": "xml"}}},
            {"max_output_tokens": 0},
            {"temperature": 9},
        ):
            with pytest.raises(openai.BadRequestError) as e:
                await api.responses.create(model="any", input="Hi", **fields)
            errors.append((fields, e.value.body))
        async with aiohttp.ClientSession() as http:
            async with http.post(f"{url}/v1/responses", json={"input": [{"type": "function_call"}]}) as r:
                errors.append(({"input": ...}, (await r.json())["error"]))
            # the defaults some clients send ask for nothing this server lacks
            no_ops = {"input": "Hi", "max_output_tokens": 2, "tools": [], "text": {"format": {"type": "text"}}}
            async with http.post(f"{url}/v1/responses", json=no_ops) as r:
                errors.append((no_ops, r.status))
        return errors

    errors = serve(tiny_config, body)
    for fields, error in errors[:-1]:
        assert error["type"] == "invalid_request_error"
        name = next(iter(fields))
        assert name in error["message"] or error["param"].startswith(name), (fields, error)
    assert errors[-1][1] == 200


def test_metadata_follows_openais_limits(tiny_config):
    most = {f"k{i:02d}".ljust(64, "k"): "v" * 512 for i in range(16)}
    refused = {
        "object_above_max_properties": {**most, "one more": "v"},
        "string_above_max_length": {"k" * 65: "v"},
        "invalid_type": {"count": 3},
    }

    async def body(api, _url):
        kept = await api.responses.create(model="any", input="Hi", max_output_tokens=2, metadata=most)
        errors = {}
        for code, metadata in [*refused.items(), ("value too long", {"k": "v" * 513})]:
            with pytest.raises(openai.BadRequestError) as e:
                await api.responses.create(model="any", input="Hi", max_output_tokens=2, metadata=metadata)
            errors[code] = e.value.body
        return kept, await api.responses.retrieve(kept.id), errors

    kept, again, errors = serve(tiny_config, body)
    assert kept.metadata == again.metadata == most
    for code, error in errors.items():
        assert error["param"] == "metadata" and error["type"] == "invalid_request_error", error
        assert error["code"] == code if code in refused else error["code"] == "string_above_max_length"
    assert "at most 16 properties" in errors["object_above_max_properties"]["message"]
    assert "at most 64 characters" in errors["string_above_max_length"]["message"]
    assert "maximum length 512" in errors["value too long"]["message"]


def test_user_is_kept_and_echoed(tiny_config):
    async def body(api, _url):
        made = await api.responses.create(model="any", input="Hi", max_output_tokens=2, user="user-7")
        return made, await api.responses.retrieve(made.id)

    made, again = serve(tiny_config, body)
    assert made.user == again.user == "user-7"
    assert again.model_dump(exclude_unset=True) == made.model_dump(exclude_unset=True)


def test_a_stored_response_keeps_only_the_apis_fields():
    """A client's own fields beside the API's, in its tools and formats, are neither echoed nor stored."""
    tool = {"type": "function", "name": "f", "parameters": {"type": "object", "properties": {}}, "x_junk": "j" * 999}
    with_tools = {"tools": [tool], "tool_choice": {"type": "function", "name": "f", "x_junk": 1}}
    text = {"text": {"format": {"type": "json_object", "x_junk": 2}, "x_junk": 3}}
    for asked in (with_tools, text):
        request = parse_response({"input": "Hi", "user": "u", **asked}, 512, KeptResponses())
        whole = ResponseShape(request, "m").finished(FinishEvent("r", FinishReason.STOP, "{}", RequestStats("r")))
        kept = kept_of(request, whole)
        assert "x_junk" not in json.dumps([kept.response, kept.messages]) and whole["user"] == "u"
    assert whole["text"] == {"format": {"type": "json_object"}}
    request = parse_response({"input": "Hi", **with_tools}, 512, KeptResponses())
    echoed = ResponseShape(request, "m").response()
    assert echoed["tools"] == [{k: v for k, v in tool.items() if k != "x_junk"}]
    assert echoed["tool_choice"] == {"type": "function", "name": "f"}


def test_the_store_holds_bytes_dropping_the_least_recently_used(tiny_config):
    ballast = "u" * 30_000  # each response's `user`, so that its bytes are known to within a few KB

    async def main():
        async with Serving(tiny_config, store_bytes=100_000) as (_client, server, url), aiohttp.ClientSession() as http:
            api = openai_client(url)
            try:

                async def create(user=ballast):
                    return (await api.responses.create(model="any", input="Hi", max_output_tokens=2, user=user)).id

                a, b = await create(), await create()
                await api.responses.retrieve(a)  # a is used since b
                c = await create()
                too_large = await create(user="u" * 120_000)  # more than the whole budget: not kept, nothing dropped for it
                found = {}
                for name, response_id in zip("abc", (a, b, c, too_large)):
                    try:
                        found[name] = bool(await api.responses.retrieve(response_id))
                    except openai.NotFoundError:
                        found[name] = False
                async with http.get(f"{url}/metrics") as r:
                    text = await r.text()
                return found, text, server.responses.bytes
            finally:
                await api.close()

    found, text, held = run(main())
    assert found == {"a": True, "b": False, "c": True}
    metrics = dict(line.rsplit(" ", 1) for line in text.splitlines() if not line.startswith("#"))
    assert metrics["batch_playground_responses_stored"] == "2" and metrics["batch_playground_responses_dropped_total"] == "2"
    assert 60_000 < int(metrics["batch_playground_responses_stored_bytes"]) == held <= 100_000


def test_kept_responses_drop_the_least_recently_used():
    def response(name: str) -> Kept:
        return Kept({"id": name, "output": "x" * 1000}, "conv", ())

    size = footprint(response("a").response)
    kept = KeptResponses(budget_bytes=2 * size)
    for name in "abc":
        if name == "c":
            kept.get("a")  # a was used since b
        kept.keep(response(name))
    assert kept.get("b") is None and kept.get("a") and kept.get("c") and len(kept) == 2
    assert kept.bytes == 2 * size and kept.dropped == 1


def test_a_chain_counts_its_common_turns_once():
    turns = tuple({"role": "user", "content": f"turn {i} " + "t" * 500} for i in range(4))
    chain = [Kept({"id": f"r{i}"}, "conv", turns[: i + 1]) for i in range(4)]  # each holds the turns before it
    kept = KeptResponses()
    for response in chain:
        kept.keep(response)
    assert kept.bytes == sum(footprint(turn) for turn in turns) + sum(footprint(r.response) for r in chain)
    kept.delete("r3")
    assert kept.bytes == sum(footprint(turn) for turn in turns[:3]) + sum(footprint(r.response) for r in chain[:3])
    for name in ("r0", "r1", "r2"):
        kept.delete(name)
    assert kept.bytes == 0 and len(kept) == 0


# -- any body gets an answer -------------------------------------------------------------------

text = st.text(max_size=12)
values = st.recursive(
    st.one_of(st.none(), st.booleans(), st.integers(-(2**40), 2**40), st.floats(allow_nan=False), text),
    lambda inner: st.one_of(st.lists(inner, max_size=3), st.dictionaries(text, inner, max_size=3)),
    max_leaves=10,
)
item = st.fixed_dictionaries(
    {"role": st.one_of(st.sampled_from(["user", "assistant", "system", "developer"]), values)},
    optional={"content": st.one_of(text, st.lists(st.fixed_dictionaries({"type": st.just("input_text"), "text": text})), values)},
)
response_body = st.fixed_dictionaries(
    {"input": st.one_of(text, st.lists(item, max_size=3), values), "max_output_tokens": st.integers(-1, 3)},
    optional={
        "stream": st.one_of(st.booleans(), values),
        "store": st.one_of(st.booleans(), values),
        "instructions": st.one_of(text, values),
        "temperature": st.one_of(st.floats(-1, 3), values),
        "top_p": values,
        "seed": values,
        "previous_response_id": st.one_of(st.just("resp_x"), values),
        "tools": values,
        "text": values,
        "metadata": values,
    },
)


def test_any_body_gets_a_2xx_or_4xx_answer(tiny_config):
    async def main():
        async with Serving(tiny_config) as (_client, _server, url), aiohttp.ClientSession() as http:
            answers = []

            @settings(max_examples=60, deadline=None, suppress_health_check=list(HealthCheck))
            @given(st.one_of(response_body, values))
            def one(body):
                answers.append(asyncio.run_coroutine_threadsafe(post(http, url, body), loop).result(timeout=60))

            loop = asyncio.get_running_loop()
            await asyncio.to_thread(one)
            return answers

    for status, kind, body in run(main()):
        assert status < 500, body
        assert kind == "text/event-stream" or isinstance(body, dict), body


async def post(http: aiohttp.ClientSession, url: str, body) -> tuple[int, str, object]:
    async with http.post(f"{url}/v1/responses", json=body) as r:
        if r.content_type == "text/event-stream":
            await r.read()
            return r.status, r.content_type, None
        return r.status, r.content_type, await r.json()
