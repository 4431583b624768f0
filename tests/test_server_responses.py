"""The Responses API over real loopback HTTP with the official openai client: whole and streamed
responses, a chain continued with previous_response_id on its KV cells, stored ones, refusals."""

from __future__ import annotations

import asyncio

import aiohttp
import openai
import pytest
from helpers import run
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from serving import Serving

from app.server.responses import Kept, KeptResponses

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
        deleted = await api.responses.delete(kept.id)
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
    assert deleted is None or getattr(deleted, "deleted", True)
    assert "not found" in gone[0].message and gone[1].status_code == 404
    assert unknown_previous.body["param"] == "previous_response_id"


def test_unsupported_fields_and_bad_requests_are_400s_naming_them(tiny_config):
    async def body(api, url):
        errors = []
        for fields in (
            {"tools": [{"type": "web_search"}]},
            {"reasoning": {"effort": "high"}},
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


def test_kept_responses_drop_the_least_recently_used():
    kept = KeptResponses(limit=2)
    for name in "abc":
        if name == "c":
            kept.get("a")  # a was used since b
        kept.keep(Kept({"id": name}, "conv", ()))
    assert kept.get("b") is None and kept.get("a") and kept.get("c") and len(kept) == 2


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
