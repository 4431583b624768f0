"""`serve` with several models: /v1/models lists them, a request's `model` picks one, an unknown one
is a 404 that lists them, /metrics labels each model's figures, and an unloaded model's streams end
with the reason while the other's go on."""

from __future__ import annotations

import asyncio
import json

import aiohttp
import openai
import pytest
from helpers import run
from serving import Serving, chat
from test_server import openai_client, stream_chat

from app.cli import main

pytestmark = pytest.mark.model

Q4 = "SmolLM2-135M-Instruct.Q4_1"


@pytest.fixture
def two(config, q8_model_path):
    """The bundled model (the default) and its Q8_0 twin named q8."""
    small = config.with_(n_ctx=1024, capacity=4)
    return small, [(small.with_(model_path=q8_model_path), "q8")]


def test_each_request_goes_to_the_model_it_names_and_an_unknown_one_is_a_404_listing_them(two):
    config, more = two

    async def main():
        async with Serving(config, more=more) as (client, _server, url), aiohttp.ClientSession() as http:
            api = openai_client(url)
            listed = [m.id for m in (await api.models.list()).data]
            replies = await asyncio.gather(  # by name, by file name, or none (the default)
                *(stream_chat(api, "Name a colour.", m, max_tokens=12) for m in ["q8", Q4, f"{Q4}.gguf"]),
                _post(http, f"{url}/v1/chat/completions", chat("Name a colour.", max_tokens=12)),
            )
            with pytest.raises(openai.NotFoundError) as unknown:
                await api.chat.completions.create(model="gpt-4", messages=[{"role": "user", "content": "Hi"}])
            snapshots = {name: client.snapshot_of(name) for name in client.models}
            async with http.get(f"{url}/metrics") as r:
                metrics = await r.text()
            await api.close()
            return listed, replies, unknown.value, snapshots, metrics

    listed, replies, unknown, snapshots, metrics = run(main())
    assert listed == [Q4, "q8"]
    *streamed, (status, whole) = replies
    assert [last.model for _, _, _, last in streamed] == ["q8", Q4, Q4] and status == 200 and whole["model"] == Q4
    assert all(usage.usage.completion_tokens >= 1 for _, _, usage, _ in streamed)
    assert unknown.status_code == 404
    error = unknown.body
    assert error["code"] == "model_not_found" and error["param"] == "model"
    assert f"'gpt-4' is not loaded; loaded: {Q4}, q8" in error["message"]
    # each engine decoded its own requests' tokens only
    assert snapshots["q8"].generated_tokens == streamed[0][2].usage.completion_tokens
    assert (
        snapshots[Q4].generated_tokens
        == sum(u.usage.completion_tokens for _, _, u, _ in streamed[1:]) + whole["usage"]["completion_tokens"]
    )
    values = dict(line.rsplit(" ", 1) for line in metrics.splitlines() if not line.startswith("#"))
    p = "batch_playground_"
    each = [float(values[f'{p}generated_tokens_total{{model="{m}"}}']) for m in (Q4, "q8")]
    assert min(each) > 0 and sum(each) == float(values[f"{p}generated_tokens_total"])
    # 4 sequences in 1,024 cells each: streams of 256 would cut chats short, so one pool each
    assert [values[f'{p}kv_layout_streams{{model="{m}"}}'] for m in (Q4, "q8")] == ["0", "0"]
    assert values[f"{p}kv_layout_streams"] == values[f"{p}kv_layout_changes_total"] == "0"
    assert (
        float(values[f'{p}requests_total{{model="q8",reason="length"}}'])
        + float(values.get(f'{p}requests_total{{model="q8",reason="stop"}}', 0))
        == 1
    )


def test_one_model_serves_any_name_as_llama_server_does(config):
    async def main():
        async with Serving(config.with_(n_ctx=1024, capacity=2)) as (_client, _server, url), aiohttp.ClientSession() as http:
            return await _post(http, f"{url}/v1/chat/completions", chat("Hi", max_tokens=4, model="gpt-4"))

    status, body = run(main())
    assert status == 200 and body["model"] == Q4


def test_unloading_a_model_ends_its_streams_with_the_reason_and_the_other_goes_on(two):
    config, more = two

    async def stream(http, url, model, max_tokens):
        body = chat("Count.", max_tokens=max_tokens, ignore_eos=True, stream=True, model=model)
        async with http.post(f"{url}/v1/chat/completions", json=body) as r:
            return [json.loads(line[6:]) for line in (await r.text()).splitlines() if line.startswith("data: {")]

    async def main():
        async with Serving(config, more=more) as (client, _server, url), aiohttp.ClientSession() as http:
            doomed = asyncio.ensure_future(stream(http, url, "q8", 5000))
            other = asyncio.ensure_future(stream(http, url, Q4, 48))
            while client.snapshot_of("q8").generated_tokens < 4:
                await asyncio.sleep(0.05)
            await client.unload_model("q8")
            cut = await asyncio.wait_for(doomed, 10)
            async with http.get(f"{url}/v1/models") as r:
                listed = [m["id"] for m in (await r.json())["data"]]
            return cut, await other, listed, await _post(http, f"{url}/v1/chat/completions", chat("Hi", model="q8"))

    cut, other, listed, (status, refused) = run(main())
    assert "the model q8 was unloaded" in cut[-1]["error"]["message"]
    assert other[-1]["choices"][0]["finish_reason"] == "length"
    assert listed == [Q4]
    assert status == 200 and refused["model"] == Q4  # one model left: it serves any name


def test_an_alias_for_each_model_at_most(capsys, model_path):
    assert main(["serve", "--model", model_path, "--alias", "a", "--alias", "b"]) == 2
    assert "2 aliases for 1 models" in capsys.readouterr().err


async def _post(http, url: str, body: dict) -> tuple[int, dict]:
    async with http.post(url, json=body) as r:
        return r.status, await r.json()
