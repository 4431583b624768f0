"""Pictures over the API with the official openai client, on the tiny model and a projector of random
weights: `image_url` parts in chat completions, `input_image` in the Responses API, the picture's
tokens in the usage; a model without a projector, bad pictures and URLs each a 400 that says why."""

from __future__ import annotations

import asyncio
import base64

import openai
import pytest
from aiohttp import web
from helpers import run
from pictures import animated_png, gif, png
from serving import Serving

import app.server.image_input as image_input
from app.engine.params import EngineConfig

pytestmark = pytest.mark.tiny

N_IMAGE = 16  # the synthetic projector's tokens a picture


def data_uri(data: bytes, kind: str = "image/png") -> str:
    return f"data:{kind};base64,{base64.b64encode(data).decode()}"


def picture_part(url: str) -> dict:
    return {"type": "image_url", "image_url": {"url": url}}


def chat_with(url: str, text: str = "What is in this picture?") -> list[dict]:
    return [{"role": "user", "content": [{"type": "text", "text": text}, picture_part(url)]}]


def _config(model: str, mmproj: str) -> EngineConfig:
    return EngineConfig(model, n_ctx=4096, n_batch=128, capacity=4, n_threads=2, mmproj=mmproj)


def serve(config: EngineConfig, body, **options):
    async def go():
        async with Serving(config, **options) as (_client, _server, url):
            api = openai.AsyncOpenAI(base_url=f"{url}/v1", api_key="none", max_retries=0, timeout=120)
            return await body(api, url)

    return run(go())


def test_a_chat_shows_a_picture_and_the_usage_counts_its_tokens(tiny_model_path, tiny_mmproj_path):
    uri = data_uri(png(seed=1))

    async def body(api, _url):
        plain = await api.chat.completions.create(
            model="any", messages=[{"role": "user", "content": "What is in this picture?"}], max_tokens=2, temperature=0
        )
        seen = await api.chat.completions.create(model="any", messages=chat_with(uri), max_tokens=2, temperature=0)
        chunks = [
            c
            async for c in await api.chat.completions.create(
                model="any",
                messages=chat_with(uri),
                max_tokens=2,
                temperature=0,
                stream=True,
                stream_options={"include_usage": True},
            )
        ]
        listed = await api.models.list()
        return plain, seen, chunks, listed.data[0]

    plain, seen, chunks, model = serve(_config(tiny_model_path, tiny_mmproj_path), body)
    assert model.capabilities == ["completion", "multimodal"] and model.meta["projector"] == tiny_mmproj_path
    assert seen.choices[0].finish_reason == "length"
    assert seen.usage.prompt_tokens == plain.usage.prompt_tokens + N_IMAGE
    usage = chunks[-1].usage
    assert usage.prompt_tokens == seen.usage.prompt_tokens
    assert usage.prompt_tokens_details.cached_tokens >= seen.usage.prompt_tokens - 1  # the same picture: its cells again


def test_the_responses_api_reads_input_image_and_keeps_it_for_the_next_response(tiny_model_path, tiny_mmproj_path):
    uri = data_uri(png(seed=2))
    shown = [
        {
            "role": "user",
            "content": [{"type": "input_text", "text": "Describe it."}, {"type": "input_image", "image_url": uri}],
        }
    ]

    async def body(api, _url):
        first = await api.responses.create(model="any", input=shown, max_output_tokens=2, temperature=0)
        plain = await api.responses.create(model="any", input="Describe it.", max_output_tokens=2, temperature=0)
        later = await api.responses.create(
            model="any", input="And the colours?", previous_response_id=first.id, max_output_tokens=2, temperature=0
        )
        return first, plain, later

    first, plain, later = serve(_config(tiny_model_path, tiny_mmproj_path), body)
    assert first.status == "incomplete" and first.usage.input_tokens == plain.usage.input_tokens + N_IMAGE
    # the stored conversation kept the picture: the continuation shows it again, from its cells
    assert later.usage.input_tokens > first.usage.input_tokens
    assert later.usage.input_tokens_details.cached_tokens >= first.usage.input_tokens - 1


def test_a_model_without_a_projector_given_a_picture_is_a_400_saying_so(tiny_model_path):
    async def body(api, _url):
        with pytest.raises(openai.BadRequestError) as refused:
            await api.chat.completions.create(model="any", messages=chat_with(data_uri(png())), max_tokens=2)
        fine = await api.chat.completions.create(model="any", messages=[{"role": "user", "content": "Hi"}], max_tokens=2)
        return refused.value.body, fine

    error, fine = serve(EngineConfig(tiny_model_path, n_ctx=2048, capacity=2, n_threads=2, mmproj="none"), body)
    assert "does not see images" in error["message"] and "--mmproj" in error["message"]
    assert error["code"] == "model_not_multimodal" and fine.choices[0].finish_reason == "length"


@pytest.mark.parametrize(
    ("url", "reason"),
    [
        (data_uri(png()[:-20]), "truncated"),
        (data_uri(png()[:30] + b"\x00" + png()[31:]), "corrupt"),
        (data_uri(animated_png()), "animated PNG"),
        (data_uri(gif(frames=3), "image/gif"), "animated GIF"),
        (data_uri(b"RIFF\x00\x00\x00\x00WEBPVP8 ", "image/webp"), "WebP"),
        (data_uri(b"hello"), "not a picture file"),
        ("data:image/png;base64,@@@@", "base64 is not valid"),
        ("data:image/png,rawbytes", "must be base64"),
        ("ftp://example.com/a.png", "only data: URIs"),
        ("http://127.0.0.1:9/a.png", "does not fetch pictures from URLs"),
    ],
    ids=["truncated", "corrupt", "apng", "animated-gif", "webp", "text", "bad-base64", "not-base64", "ftp", "url-not-allowed"],
)
def test_a_bad_picture_is_a_400_for_that_request_only(tiny_model_path, tiny_mmproj_path, url, reason):
    async def body(api, _url):
        bad = api.chat.completions.create(model="any", messages=chat_with(url), max_tokens=2)
        good = api.chat.completions.create(model="any", messages=chat_with(data_uri(png(seed=3))), max_tokens=2)
        results = await asyncio.gather(bad, good, return_exceptions=True)
        return results

    bad, good = serve(_config(tiny_model_path, tiny_mmproj_path), body)
    assert isinstance(bad, openai.BadRequestError), bad
    assert reason in bad.body["message"] and bad.body["param"].startswith("messages[0].content[1]")
    assert good.choices[0].finish_reason == "length" and good.usage.prompt_tokens > N_IMAGE


def test_only_a_user_message_shows_pictures(tiny_model_path, tiny_mmproj_path):
    async def body(api, _url):
        with pytest.raises(openai.BadRequestError) as refused:
            await api.chat.completions.create(
                model="any",
                messages=[{"role": "system", "content": [picture_part(data_uri(png()))]}, {"role": "user", "content": "?"}],
                max_tokens=2,
            )
        return refused.value.body

    error = serve(_config(tiny_model_path, tiny_mmproj_path), body)
    assert "only a user message may show pictures" in error["message"]


def test_pictures_by_url_are_fetched_when_allowed_within_bounds(tiny_model_path, tiny_mmproj_path, monkeypatch):
    monkeypatch.setattr(image_input, "IMAGE_URL_TIMEOUT_S", 1.0)
    picture = png(seed=4)

    async def slow(_request):
        await asyncio.sleep(3)
        return web.Response(body=picture)

    async def whole(_request):
        return web.Response(body=picture, content_type="image/png")

    async def gone(_request):
        return web.Response(status=404)

    async def body(api, _url):
        files = web.Application()
        files.router.add_get("/a.png", whole)
        files.router.add_get("/slow.png", slow)
        files.router.add_get("/gone.png", gone)
        runner = web.AppRunner(files)
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", 0)
        await site.start()
        base = f"http://127.0.0.1:{site._server.sockets[0].getsockname()[1]}"
        try:
            fetched = await api.chat.completions.create(model="any", messages=chat_with(f"{base}/a.png"), max_tokens=2)
            errors = []
            for name in ("slow.png", "gone.png"):
                with pytest.raises(openai.BadRequestError) as refused:
                    await api.chat.completions.create(model="any", messages=chat_with(f"{base}/{name}"), max_tokens=2)
                errors.append(refused.value.body["message"])
            return fetched, errors
        finally:
            await runner.cleanup()

    fetched, (slow_error, gone_error) = serve(_config(tiny_model_path, tiny_mmproj_path), body, allow_image_urls=True)
    assert fetched.usage.prompt_tokens > N_IMAGE
    assert "took more than 1 s" in slow_error and "HTTP 404" in gone_error
