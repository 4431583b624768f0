"""A remote pane's pictures: sent to the endpoint as data: URIs in content parts (the chat API's
image_url, the Responses API's input_image), to a real `serve` of the tiny model with a projector."""

from __future__ import annotations

import pytest
from helpers import collect, run
from pictures import png
from serving import Serving

from app.engine.images import Image, with_images
from app.engine.params import EngineConfig
from app.engine.sampling.params import GREEDY
from app.remote import Endpoint, RemoteClient
from app.remote.pictures import chat_turn, responses_turn

N_IMAGE = 16


@pytest.mark.unit
def test_a_message_with_pictures_becomes_parts_in_order():
    a, b = Image.of(png(seed=1)), Image.of(png(seed=2))
    message = with_images("two pictures", [a, b])
    parts = chat_turn(message)["content"]
    assert [p["type"] for p in parts] == ["image_url", "image_url", "text"]
    assert parts[0]["image_url"]["url"].startswith("data:image/png;base64,") and parts[2]["text"] == "two pictures"
    assert [p["type"] for p in responses_turn(message)["content"]] == ["input_image", "input_image", "input_text"]
    assert chat_turn({"role": "user", "content": "plain"}) == {"role": "user", "content": "plain"}


@pytest.mark.tiny
@pytest.mark.parametrize("api", ["chat", "responses"])
def test_a_remote_pane_sends_its_pictures(tiny_model_path, tiny_mmproj_path, api):
    config = EngineConfig(tiny_model_path, n_ctx=4096, capacity=2, n_threads=2, mmproj=tiny_mmproj_path)
    chat = [with_images("What is it?", [Image.of(png(seed=3))])]

    async def main():
        async with Serving(config) as (_client, _server, url):
            remote = RemoteClient(Endpoint(url, api=api))
            try:
                _, seen = await collect(remote.generate(chat, GREEDY.with_(max_tokens=2), conversation_id="c"))
                _, plain = await collect(
                    remote.generate([{"role": "user", "content": "What is it?"}], GREEDY.with_(max_tokens=2))
                )
            finally:
                await remote.close()
            return seen, plain

    seen, plain = run(main())
    assert seen.ok and seen.stats.prompt_tokens == plain.stats.prompt_tokens + N_IMAGE
