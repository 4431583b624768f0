"""`serve`: n choices of one prompt (read once, sampled n ways) and tokens' probabilities (logprobs)."""

from __future__ import annotations

import math

import aiohttp
import pytest
from helpers import run
from serving import Serving
from test_server import openai_client

QUESTION = [{"role": "user", "content": "Write one sentence about the sea and the wind."}]
GREEDY = {"temperature": 0, "max_tokens": 12, "extra_body": {"repeat_penalty": 1.0}}  # the likeliest token, always


@pytest.mark.model
def test_openai_client_reads_logprobs_streamed_and_whole(config):
    async def main():
        async with Serving(config) as (_client, _server, url):
            api = openai_client(url)
            whole = await api.chat.completions.create(model="any", messages=QUESTION, logprobs=True, top_logprobs=3, **GREEDY)
            stream = await api.chat.completions.create(
                model="any", messages=QUESTION, logprobs=True, top_logprobs=3, stream=True, **GREEDY
            )
            streamed, text = [], []
            async for chunk in stream:
                for choice in chunk.choices:
                    text.append(choice.delta.content or "")
                    streamed += choice.logprobs.content if choice.logprobs and choice.logprobs.content else []
            plain = await api.chat.completions.create(model="any", messages=QUESTION, **GREEDY)
            await api.close()
            return whole, streamed, "".join(text), plain

    whole, streamed, text, plain = run(main())
    choice = whole.choices[0]
    content = choice.logprobs.content
    assert plain.choices[0].logprobs is None  # not asked: not computed
    assert choice.message.content == text == plain.choices[0].message.content
    assert "".join(t.token for t in content) == choice.message.content  # one entry per token of the reply
    assert [(t.token, t.logprob) for t in streamed] == [(t.token, t.logprob) for t in content]
    for t in content:
        assert len(t.top_logprobs) == 3 and t.logprob <= 0
        assert t.top_logprobs[0].token == t.token  # greedy takes the likeliest
        assert t.bytes == list(t.token.encode())
        assert sum(math.exp(a.logprob) for a in t.top_logprobs) <= 1 + 1e-6


@pytest.mark.tiny
def test_four_choices_read_the_prompt_once_and_sample_four_ways(tiny_config):
    async def main():
        async with Serving(tiny_config) as (client, _server, url), aiohttp.ClientSession() as http:
            body = {"messages": QUESTION, "n": 4, "temperature": 1.0, "max_tokens": 16, "seed": 3}
            async with http.post(f"{url}/v1/chat/completions", json=body) as r:
                assert r.status == 200, await r.text()
                first = await r.json()
            async with http.post(f"{url}/v1/chat/completions", json=body) as r:
                again = await r.json()
            async with http.post(f"{url}/v1/completions", json={"prompt": "The sea", "n": 2, "logprobs": 2}) as r:
                completion = await r.json()
            return first, again, completion

    first, again, completion = run(main())
    choices = first["choices"]
    assert [c["index"] for c in choices] == [0, 1, 2, 3]
    texts = [c["message"]["content"] for c in choices]
    assert len(set(texts)) > 1, "four samples of one prompt at temperature 1 all came out the same"
    assert texts == [c["message"]["content"] for c in again["choices"]]  # a seed makes the four repeatable
    prompt = first["usage"]["prompt_tokens"]
    computed = first["timings"]["prompt_n"] + sum(c["timings"]["prompt_n"] for c in choices[1:])
    assert computed <= prompt + 3, f"{computed} prompt tokens computed for 4 choices of a {prompt}-token prompt"
    assert (
        first["usage"]["completion_tokens"]
        == sum(c["timings"]["predicted_n"] for c in choices[1:]) + first["timings"]["predicted_n"]
    )
    logprobs = [c["logprobs"] for c in completion["choices"]]
    assert all(len(lp["tokens"]) == len(lp["token_logprobs"]) == len(lp["top_logprobs"]) for lp in logprobs)
    assert all(len(top) <= 2 for lp in logprobs for top in lp["top_logprobs"])


@pytest.mark.model
def test_a_stream_of_two_choices_ends_each_and_counts_both(config):
    async def main():
        async with Serving(config) as (_client, _server, url):
            api = openai_client(url)
            stream = await api.chat.completions.create(
                model="any",
                messages=QUESTION,
                n=2,
                max_tokens=10,
                stream=True,
                stream_options={"include_usage": True},
                extra_body={"ignore_eos": True},
            )
            texts, finishes, usage = {0: "", 1: ""}, {}, None
            async for chunk in stream:
                for choice in chunk.choices:
                    texts[choice.index] += choice.delta.content or ""
                    if choice.finish_reason:
                        finishes[choice.index] = choice.finish_reason
                usage = chunk.usage or usage
            await api.close()
            return texts, finishes, usage

    texts, finishes, usage = run(main())
    assert finishes == {0: "length", 1: "length"} and all(texts.values())
    assert usage.completion_tokens == 20
