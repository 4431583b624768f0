"""Pictures in the engine, on the tiny model with a projector of random weights (scripts/synthetic-mmproj):
a picture's tokens in the prompt, encoded once, decoded before the step's tokens beside other panes';
its cells reused on the next turn and by another pane showing it (by its hash); each step says
how many of its rows were a picture's."""

from __future__ import annotations

import asyncio
import threading

import pytest
from conftest import write_projector
from helpers import Started, collect, run
from pictures import png

from app.engine.events import FinishReason
from app.engine.images import IMAGE_MARKER, Image, with_images
from app.engine.params import EngineConfig
from app.engine.sampling.params import SamplingParams
from app.engine.trace import trace_events

pytestmark = pytest.mark.tiny

GREEDY = SamplingParams(max_tokens=4, temperature=0.0, ignore_eos=True)
N_IMAGE = 16  # the synthetic projector's tokens a picture: (56 / 14)^2


def _config(model: str, mmproj: str, **settings) -> EngineConfig:
    base = {"n_ctx": 4096, "n_batch": 128, "capacity": 8, "n_threads": 2}
    return EngineConfig(model, mmproj=mmproj, **(base | settings))


def test_a_pictures_tokens_are_in_the_prompt_and_reused_on_the_next_turn(tiny_model_path, tiny_mmproj_path):
    picture = Image.of(png(seed=1))
    chat = [with_images("What is in this picture?", [picture])]

    async def go():
        async with Started(_config(tiny_model_path, tiny_mmproj_path)) as client:
            _, first = await collect(client.generate(chat, GREEDY, conversation_id="a"))
            later = [*chat, {"role": "assistant", "content": first.text}, {"role": "user", "content": "And its colours?"}]
            _, second = await collect(client.generate(later, GREEDY, conversation_id="a"))
            return first, second, client.recent_steps(600)

    first, second, steps = run(go())
    assert first.reason is FinishReason.LENGTH and first.error is None
    assert not [t for t in threading.enumerate() if t.name == "llama-encode"]  # the encode's thread (and team) ended
    st = first.stats
    assert (st.images, st.image_tokens) == (1, N_IMAGE) and st.prompt_tokens > N_IMAGE
    assert st.encode_s > 0 and st.cached_tokens == 0
    picture_steps = [s for s in steps if s.n_image_tokens]
    assert sum(s.n_image_tokens for s in picture_steps) == N_IMAGE  # decoded once: the next turn reuses its cells
    assert all(s.image_s > 0 and s.image_s <= s.decode_s for s in picture_steps)
    # the next turn: the picture's cells and the text before and after it come from the cache, no encode
    assert second.stats.encode_s == 0.0 and second.stats.image_tokens == N_IMAGE
    assert second.stats.cached_tokens >= first.stats.prompt_tokens
    rows = [p for s in picture_steps for p in s.parts if p.image_tokens]
    assert rows and all(p.n_tokens >= p.image_tokens for p in rows)


def test_another_pane_with_the_same_picture_reuses_its_cells_and_another_picture_does_not(tiny_model_path, tiny_mmproj_path):
    same, other = Image.of(png(seed=2)), Image.of(png(seed=3))
    question = "Describe it."

    async def go():
        async with Started(_config(tiny_model_path, tiny_mmproj_path)) as client:
            _, a = await collect(client.generate([with_images(question, [same])], GREEDY, conversation_id="a"))
            _, b = await collect(client.generate([with_images(question, [same])], GREEDY, conversation_id="b"))
            _, c = await collect(client.generate([with_images(question, [other])], GREEDY, conversation_id="c"))
            return a.stats, b.stats, c.stats

    a, b, c = run(go())
    assert b.cached_tokens == b.prompt_tokens - 1  # all but the token read again for its logits
    before_picture = a.prompt_tokens - N_IMAGE - len("Describe it.") // 2  # roughly: the template's opening
    assert c.cached_tokens < a.prompt_tokens - N_IMAGE  # the other picture differs from its first token on
    assert c.cached_tokens >= min(before_picture, 1)
    assert c.encode_s > 0 and b.encode_s == 0.0


def test_eight_panes_with_pictures_are_batched_together(tiny_model_path, tiny_mmproj_path):
    chats = [[with_images(f"Picture {i}: what is it?", [Image.of(png(seed=10 + i))])] for i in range(8)]

    async def go():
        async with Started(_config(tiny_model_path, tiny_mmproj_path)) as client:
            finals = await asyncio.gather(
                *(collect(client.generate(chat, GREEDY, conversation_id=f"p{i}")) for i, chat in enumerate(chats))
            )
            return [f for _, f in finals], client.recent_steps(600)

    finals, steps = run(go())
    assert all(f.reason is FinishReason.LENGTH and f.stats.image_tokens == N_IMAGE for f in finals)
    assert sum(s.n_image_tokens for s in steps) == 8 * N_IMAGE
    # several panes' pictures in one decode, and pictures in a step beside other panes' text
    assert max(sum(1 for p in s.parts if p.image_tokens) for s in steps) >= 2
    assert any(s.n_image_tokens and s.n_tokens > s.n_image_tokens for s in steps)


def test_a_model_without_a_projector_refuses_a_picture_and_goes_on(tiny_model_path):
    async def go():
        config = EngineConfig(tiny_model_path, n_ctx=2048, capacity=2, n_threads=2, mmproj="none")
        async with Started(config) as client:
            _, refused = await collect(client.generate([with_images("See?", [Image.of(png())])], GREEDY))
            _, fine = await collect(client.generate([{"role": "user", "content": "Hello"}], GREEDY))
            return refused, fine

    refused, fine = run(go())
    assert refused.reason is FinishReason.ERROR and "does not see images" in refused.error and "--mmproj" in refused.error
    assert fine.reason is FinishReason.LENGTH


def test_a_bad_picture_fails_its_request_only(tiny_model_path, tiny_mmproj_path):
    good = Image.of(png(seed=4))
    broken = Image.of(png(seed=5)[:-30])  # cut short: no IEND

    async def go():
        async with Started(_config(tiny_model_path, tiny_mmproj_path)) as client:
            results = await asyncio.gather(
                collect(client.generate([with_images("one", [broken])], GREEDY)),
                collect(client.generate([with_images("two", [good])], GREEDY)),
                collect(client.generate([with_images("three", [Image.of(b"not a picture at all")])], GREEDY)),
            )
            return [f for _, f in results]

    broken_end, good_end, junk_end = run(go())
    assert broken_end.reason is FinishReason.ERROR and "truncated" in broken_end.error
    assert good_end.reason is FinishReason.LENGTH and good_end.stats.image_tokens == N_IMAGE
    assert junk_end.reason is FinishReason.ERROR and "not a picture" in junk_end.error


def test_a_text_holding_the_marker_is_refused_not_misread(tiny_model_path, tiny_mmproj_path):
    message = with_images(f"what does {IMAGE_MARKER} mean?", [Image.of(png())])

    async def go():
        async with Started(_config(tiny_model_path, tiny_mmproj_path)) as client:
            _, end = await collect(client.generate([message], GREEDY))
            _, plain = await collect(client.generate([{"role": "user", "content": f"what is {IMAGE_MARKER}?"}], GREEDY))
            return end, plain

    end, plain = run(go())
    assert end.reason is FinishReason.ERROR and "places for them" in end.error
    assert plain.reason is FinishReason.LENGTH  # without pictures the marker is text like any


def test_a_picture_of_gemma_3s_kind_is_decoded_whole_in_a_decode_of_its_own(tmp_path, tiny_model_path):
    path = write_projector(tiny_model_path, tmp_path / "mmproj-g3.gguf", "--type", "gemma3", "--image-size", "224")
    chats = [[with_images(f"Picture {i}?", [Image.of(png(seed=20 + i))])] for i in range(3)]

    async def go():
        # a step of 16 tokens, a picture of 64: it goes past the step's budget, whole, one a step
        async with Started(_config(tiny_model_path, path, n_batch=16, n_ubatch=16, capacity=4)) as client:
            finals = await asyncio.gather(*(collect(client.generate(chat, GREEDY)) for chat in chats))
            return [f for _, f in finals], client.recent_steps(600)

    finals, steps = run(go())
    assert all(f.reason is FinishReason.LENGTH and f.stats.image_tokens == 64 for f in finals)
    picture_steps = [s for s in steps if s.n_image_tokens]
    assert [s.n_image_tokens for s in picture_steps] == [64, 64, 64]  # each whole, one a step


def test_the_trace_shows_a_pictures_rows(tiny_model_path, tiny_mmproj_path):
    async def go():
        async with Started(_config(tiny_model_path, tiny_mmproj_path)) as client:
            _, end = await collect(client.generate([with_images("hi", [Image.of(png(seed=6))])], GREEDY))
            return end.stats, client.recent_steps(600)

    stats, steps = run(go())
    events = trace_events({"engine": steps}, [stats])
    step = next(e for e in events if e.get("cat") == "step" and "image_tokens" in e["args"])
    assert step["args"]["image_tokens"] == N_IMAGE and "image" in step["name"]
    request = next(e for e in events if e.get("cat") == "request")
    assert request["args"]["image_tokens"] == N_IMAGE and request["args"]["images"] == 1
