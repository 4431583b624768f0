"""`serve` over real HTTP on loopback: the official openai client, batching, usage and timings, metrics."""

from __future__ import annotations

import asyncio

import aiohttp
import openai
import pytest
from helpers import run
from serving import Serving, chat

pytestmark = pytest.mark.model


def openai_client(url: str, api_key: str = "none") -> openai.AsyncOpenAI:
    return openai.AsyncOpenAI(base_url=f"{url}/v1", api_key=api_key, max_retries=0, timeout=120)


async def stream_chat(api: openai.AsyncOpenAI, text: str, model: str = "any", **kwargs):
    """Stream one chat reply; return its text, finish reason, usage chunk and last chunk."""
    stream = await api.chat.completions.create(
        model=model,
        messages=[{"role": "user", "content": text}],
        stream=True,
        stream_options={"include_usage": True},
        temperature=0,
        **kwargs,
    )
    pieces, finish, usage, last = [], None, None, None
    async for chunk in stream:
        if chunk.choices:
            pieces.append(chunk.choices[0].delta.content or "")
            finish = chunk.choices[0].finish_reason or finish
            last = chunk
        else:
            usage = chunk
    return "".join(pieces), finish, usage, last


def test_openai_client_streams_a_chat_reply_with_usage_and_timings(config):
    async def main():
        async with Serving(config, api_key="sesame") as (_client, _server, url):
            api = openai_client(url, "sesame")
            first = await stream_chat(api, "What is the capital of France?", max_tokens=24)
            again = await stream_chat(api, "What is the capital of France?", max_tokens=24)
            with pytest.raises(openai.AuthenticationError):
                await openai_client(url, "wrong").models.list()
            models = await api.models.list()
            await api.close()
            return first, again, models

    (text, finish, usage_chunk, last), (text2, _, usage2, _), models = run(main())
    assert "Paris" in text and finish in ("stop", "length")
    assert text2 == text  # greedy
    usage = usage_chunk.usage
    assert usage.prompt_tokens > 10 and 1 <= usage.completion_tokens <= 24
    assert usage.total_tokens == usage.prompt_tokens + usage.completion_tokens
    assert usage.prompt_tokens_details.cached_tokens == 0
    # the same prompt again: all but its last token come from the KV cache, as llama-server reports it
    assert usage2.usage.prompt_tokens_details.cached_tokens == usage.prompt_tokens - 1
    timings = last.model_extra["timings"]
    assert timings["predicted_n"] == usage.completion_tokens and timings["prompt_n"] + timings["cache_n"] == usage.prompt_tokens
    assert timings["predicted_per_second"] > 0
    assert [m.id for m in models.data] == ["SmolLM2-135M-Instruct.Q4_1"]  # the file name without .gguf


def test_eight_concurrent_clients_share_decode_steps(config):
    questions = [f"Tell me a fact about the number {i}." for i in range(8)]

    async def main():
        async with Serving(config) as (client, _server, url):
            api = openai_client(url)
            replies = await asyncio.gather(
                *(stream_chat(api, q, max_tokens=32, extra_body={"ignore_eos": True}) for q in questions)
            )
            await api.close()
            return replies, list(client.recent_steps())

    replies, steps = run(main())
    assert all(usage.usage.completion_tokens == 32 and finish == "length" for _, finish, usage, _ in replies)
    assert max(st.n_decode for st in steps) == 8, "the eight clients never decoded in one step"
    assert sum(st.n_seqs >= 4 for st in steps) >= 16


def test_sampling_fields_are_honoured(config):
    async def main():
        async with Serving(config) as (_client, _server, url), aiohttp.ClientSession() as http:

            async def post(path, body):
                async with http.post(f"{url}{path}", json=body) as r:
                    assert r.status == 200, await r.text()
                    return await r.json()

            hot = dict(temperature=1.5, top_k=100, min_p=0.0, repeat_penalty=1.0, max_tokens=24)
            seeded = [await post("/v1/chat/completions", chat("Write a word.", seed=7, **hot)) for _ in range(2)]
            other = await post("/v1/chat/completions", chat("Write a word.", seed=8, **hot))
            exact = await post(
                "/v1/completions",
                {
                    "prompt": "Once upon a time",
                    "max_tokens": 20,
                    "ignore_eos": True,
                    "cache_prompt": False,
                    "unknown_field": {"x": 1},
                },
            )
            stopped = await post(
                "/v1/chat/completions", chat("Count from 1 to 10, separated by commas.", stop=[","], max_tokens=40)
            )
            return seeded, other, exact, stopped

    seeded, other, exact, stopped = run(main())
    texts = [r["choices"][0]["message"]["content"] for r in seeded + [other]]
    assert texts[0] == texts[1] and texts[2] != texts[0]
    assert exact["object"] == "text_completion" and exact["usage"]["completion_tokens"] == 20
    assert exact["choices"][0]["finish_reason"] == "length" and exact["choices"][0]["text"]
    reply = stopped["choices"][0]
    assert reply["finish_reason"] == "stop" and "," not in reply["message"]["content"]


def test_health_and_metrics(config):
    async def main():
        async with Serving(config, api_key="k") as (_client, _server, url), aiohttp.ClientSession() as http:
            async with http.get(f"{url}/health") as r:  # public, as llama-server's
                health = r.status, await r.json()
            auth = {"Authorization": "Bearer k"}
            async with http.post(f"{url}/v1/chat/completions", json=chat("Hi", max_tokens=8), headers=auth) as r:
                assert r.status == 200
            async with http.post(f"{url}/v1/chat/completions", json=chat("Hi", max_tokens=8), headers=auth) as r:
                assert r.status == 200
            async with http.get(f"{url}/metrics") as r:
                refused = r.status
            async with http.get(f"{url}/metrics", headers=auth) as r:
                return health, refused, r.headers["Content-Type"], await r.text()

    health, refused, content_type, text = run(main())
    assert health == (200, {"status": "ok"})
    assert refused == 401
    assert content_type.startswith("text/plain")
    values = dict(line.rsplit(" ", 1) for line in text.splitlines() if not line.startswith("#"))
    p = "batch_playground_"
    assert float(values[f"{p}generated_tokens_total"]) >= 2
    assert (
        float(values[f'{p}requests_total{{reason="length"}}']) + float(values.get(f'{p}requests_total{{reason="stop"}}', 0)) == 2
    )
    assert 0.4 < float(values[f"{p}kv_cache_hit_rate"]) < 0.6  # the second request reused all but one token
    assert float(values[f"{p}kv_cells_used"]) > 0
    assert float(values[f"{p}kv_cells_used"]) + float(values[f"{p}kv_cells_free"]) == float(values[f"{p}kv_cells_total"])
    assert values[f"{p}requests_running"] == values[f"{p}requests_waiting"] == "0"
    assert float(values[f"{p}generation_tokens_per_second"]) > 0
    # 8 sequences in 4,096 cells: streams of 512 would cut chats short, so one pool, never changed
    assert values[f"{p}kv_layout_streams"] == values[f"{p}kv_layout_changes_total"] == "0"
    assert values[f"{p}kv_layout_change_seconds_total"] == "0"
    assert "# TYPE batch_playground_kv_layout_streams gauge" in text
    assert "# TYPE batch_playground_kv_layout_changes_total counter" in text
