"""Pictures placed in 2D (M-RoPE: Qwen2-VL, Qwen2.5-VL, Qwen3-VL), on a tiny qwen2vl model and a
qwen2vl_merger projector of random weights (conftest's `qwen_vl_paths`): a picture's tokens at
mtmd's positions, the text after it where llama.cpp's own helper puts it (the same logits), its cells
reused by the next turn and by another pane, kept through the RAM tier and a change of KV layout.
The engines here check their KV count against llama.cpp's last position after every decode."""

from __future__ import annotations

import asyncio
import ctypes
import math
import time

import llama_cpp as ll
import llama_cpp.mtmd_cpp as mtmd
import numpy as np
import pytest
from helpers import Started, collect, run
from pictures import png

from app.engine.engine import Engine
from app.engine.events import FinishReason, TokenEvent
from app.engine.images import Image, with_images
from app.engine.params import EngineConfig
from app.engine.sampling.params import SamplingParams
from app.engine.sequence import Request

pytestmark = pytest.mark.tiny

GREEDY = SamplingParams(max_tokens=4, temperature=0.0, ignore_eos=True)
FIRST_PROBS = SamplingParams(max_tokens=1, temperature=0.0, n_probs=20)
PICTURE = (40, 28)  # pixels: 5 x 4 tokens of 8 x 8 (after mtmd's resize), over 5 positions
N_IMAGE = 20
# the first reply token's log-probabilities: llama.cpp's helper and the engine agree to 7e-7 here;
# with the picture's tokens a position each (as a model without M-RoPE reads them) they differ by 7e-3
SAME_LOGITS = 1e-4


def _config(paths: tuple[str, str], **settings) -> EngineConfig:
    model, mmproj = paths
    base = {"n_ctx": 4096, "n_batch": 64, "capacity": 4, "n_threads": 2}
    return EngineConfig(model, mmproj=mmproj, **(base | settings))


def _chat(seed: int, text: str = "What is in this picture?") -> list[dict]:
    return [with_images(text, [Image.of(png(*PICTURE, seed=seed))])]


def _logprobs(events) -> dict[int, float]:
    """The first reply token's rivals' log-probabilities under the model, by token."""
    first = next(e for e in events if isinstance(e, TokenEvent) and e.probs)
    return {c.token: c.logprob for c in first.probs.top}


def _same(logprobs: dict[int, float], expected: dict[int, float]) -> bool:
    """The same likeliest token, and the rivals both name as likely within SAME_LOGITS."""
    common = logprobs.keys() & expected.keys()
    top = max(logprobs, key=logprobs.get)
    return (
        top == max(expected, key=expected.get)
        and len(common) >= 10
        and all(abs(logprobs[t] - expected[t]) < SAME_LOGITS for t in common)
    )


def _helper_logprobs(engine: Engine, text: str, picture: bytes, n_batch: int) -> tuple[dict[int, float], list[int], int]:
    """The same prompt read by llama.cpp's own mtmd helper (`mtmd_helper_eval_chunks`) on a context of
    its own: the next token's log-probabilities, the prompt's tokens (-1 a picture's) and the
    position after it."""
    params = ll.llama_context_default_params()
    params.n_ctx, params.n_batch, params.n_ubatch = 1024, n_batch, n_batch
    params.n_threads = params.n_threads_batch = 2
    ctx = ll.llama_init_from_model(engine.backend.model, params)
    vision = engine.backend.vision.ctx
    chunks = mtmd.mtmd_input_chunks_init()
    buf = (ctypes.c_uint8 * len(picture)).from_buffer_copy(picture)
    bitmap = mtmd.mtmd_helper_bitmap_init_from_buf(vision, buf, len(picture), False)
    try:
        data = text.encode()
        given = mtmd.mtmd_input_text(data, len(data), True, True)
        assert mtmd.mtmd_tokenize(vision, chunks, ctypes.byref(given), (mtmd.mtmd_bitmap_p_ctypes * 1)(bitmap), 1) == 0
        tokens = []
        for i in range(mtmd.mtmd_input_chunks_size(chunks)):
            chunk = mtmd.mtmd_input_chunks_get(chunks, i)
            if mtmd.mtmd_input_chunk_get_type(chunk) == mtmd.MTMD_INPUT_CHUNK_TYPE_TEXT:
                n = ctypes.c_size_t()
                text_tokens = mtmd.mtmd_input_chunk_get_tokens_text(chunk, ctypes.byref(n))
                tokens += [text_tokens[j] for j in range(n.value)]
            else:
                tokens += [-1] * mtmd.mtmd_input_chunk_get_n_tokens(chunk)
        n_past = ll.llama_pos(0)
        assert mtmd.mtmd_helper_eval_chunks(vision, ctx, chunks, 0, 0, n_batch, True, ctypes.byref(n_past)) == 0
        n_vocab = ll.llama_vocab_n_tokens(ll.llama_model_get_vocab(engine.backend.model))
        logits = np.ctypeslib.as_array(ll.llama_get_logits_ith(ctx, -1), shape=(n_vocab,)).astype(np.float64)
        logprobs = logits - logits.max() - np.log(np.exp(logits - logits.max()).sum())
        return {t: float(logprobs[t]) for t in range(n_vocab)}, tokens, n_past.value
    finally:
        mtmd.mtmd_input_chunks_free(chunks)
        mtmd.mtmd_bitmap_free(bitmap)
        ll.llama_free(ctx)


@pytest.mark.parametrize("n_batch", [64, 8])  # the picture in one step, or cut across three
def test_the_next_token_after_a_picture_is_what_llama_cpps_own_helper_gives(qwen_vl_paths, n_batch):
    picture = png(*PICTURE, seed=3)
    events = []
    engine = Engine(_config(qwen_vl_paths, n_batch=n_batch, n_ubatch=n_batch, capacity=2, n_ctx=1024), events.extend)
    engine.kv.check_cells = True
    try:
        request = Request("r", FIRST_PROBS, messages=(with_images("What is in this picture?", [Image.of(picture)]),))
        text = engine.intake.prompts.text_of(request)
        prompt = engine.intake.prepare(request)
        engine.submit(request, time.monotonic(), prompt)
        while engine.step():
            pass
        helper, helper_tokens, n_past = _helper_logprobs(engine, text, picture, n_batch)
        assert [t if t >= 0 else -1 for t in prompt.tokens] == helper_tokens  # the same prompt, token for token
        assert len(helper_tokens) - n_past == N_IMAGE - 5  # 20 tokens over 5 positions
        assert _same(_logprobs(events), helper)
        picture_steps = [s for s in engine.figures.steps.since(-math.inf) if s.n_image_tokens]
        assert len(picture_steps) == (1 if n_batch == 64 else 3)
    finally:
        engine.shutdown("done")


def test_a_picture_beside_a_text_pane_and_its_cells_reused_by_the_next_turn_and_another_pane(qwen_vl_paths):
    chat = _chat(seed=1)
    story = [{"role": "user", "content": "Tell me a story."}]
    long_reply = SamplingParams(max_tokens=64, temperature=0.0, ignore_eos=True)  # decoding while the picture is read

    async def go():
        async with Started(_config(qwen_vl_paths)) as client:
            (_, text_only), (_, first) = await asyncio.gather(
                collect(client.generate(story, long_reply, conversation_id="t")),
                collect(client.generate(chat, GREEDY, conversation_id="a")),
            )
            later = [*chat, {"role": "assistant", "content": first.text}, {"role": "user", "content": "And its colours?"}]
            _, second = await collect(client.generate(later, GREEDY, conversation_id="a"))
            _, other = await collect(client.generate(chat, GREEDY, conversation_id="b"))
            return first, text_only, second, other, client.recent_steps(600)

    first, text_only, second, other, steps = run(go())
    assert all(f.reason is FinishReason.LENGTH and f.error is None for f in (first, text_only, second, other))
    assert first.stats.image_tokens == N_IMAGE
    picture_steps = [s for s in steps if s.n_image_tokens]
    assert sum(s.n_image_tokens for s in picture_steps) == N_IMAGE  # decoded once, for three requests
    beside = [s for s in picture_steps if any(p.conversation_id == "t" for p in s.parts)]
    assert beside  # the picture's rows in a step with the text-only pane's tokens
    # the next turn reads its new text only: the picture and the turn before (but the reply's last
    # token, drawn and never read) come from its cells
    assert second.stats.cached_tokens == first.stats.prompt_tokens + GREEDY.max_tokens - 1
    assert second.stats.evaluated_tokens < N_IMAGE
    assert other.stats.cached_tokens == other.stats.prompt_tokens - 1 and other.stats.encode_s == 0.0


def _two_turns(paths, settings: dict, between=None):
    """A picture's chat, then its next turn (the first token's log-probabilities), with `between`
    (a coroutine on the client) run between the turns; (the second turn's final, its logprobs, the engine's snapshot then)."""
    chat = _chat(seed=2)

    async def go():
        async with Started(_config(paths, **settings)) as client:
            _, first = await collect(client.generate(chat, GREEDY, conversation_id="a"))
            if between is not None:
                await between(client)
            later = [*chat, {"role": "assistant", "content": first.text}, {"role": "user", "content": "And its colours?"}]
            events, second = await collect(client.generate(later, FIRST_PROBS, conversation_id="a"))
            return second, _logprobs(events), client.snapshot

    return run(go())


def test_a_pictures_cells_keep_their_positions_through_the_ram_tier_and_a_change_of_layout(qwen_vl_paths):
    """The next turn after the chat's cells went to RAM and came back, and after a long chat moved
    every chat to one pool, reads the same next token as when they stayed where they were."""
    plain, expected, _ = _two_turns(qwen_vl_paths, {"kv_unified": True})

    async def crowd_out(client):  # another chat fills the small pool: the picture's chat goes to RAM
        await collect(client.generate(_chat(5, "Another picture " * 90), GREEDY, conversation_id="x"))

    restored, after_ram, _ = _two_turns(qwen_vl_paths, {"n_ctx": 256, "capacity": 2, "kv_unified": True}, crowd_out)
    assert restored.stats.restored_tokens > N_IMAGE

    async def outgrow(client):  # a chat longer than a stream of 1,024 cells: every chat moves to one pool
        await collect(client.generate([{"role": "user", "content": "Go on. " * 370}], GREEDY, conversation_id="long"))

    moved, after_move, snapshot = _two_turns(qwen_vl_paths, {"n_ctx": 2048, "capacity": 2}, outgrow)
    assert snapshot.layout_changes == 1 and snapshot.kv_layout.startswith("one pool")
    assert moved.stats.cached_tokens == plain.stats.cached_tokens  # its cells came along
    assert _same(after_ram, expected) and _same(after_move, expected)


def test_a_decode_that_fails_after_its_pictures_went_through_takes_the_picture_back_whole(qwen_vl_paths):
    """A step decodes its pictures, then its tokens: when the tokens' decode finds no room, the
    cells the picture's rows wrote go, and with them its rows of earlier steps (they share its
    position: llama.cpp cannot keep a part); the picture is read again, whole, with the same result."""
    picture = png(*PICTURE, seed=3)
    events = []
    engine = Engine(_config(qwen_vl_paths, n_batch=8, n_ubatch=8, capacity=2, n_ctx=1024), events.extend)
    engine.kv.check_cells = True
    try:
        request = Request("r", FIRST_PROBS, messages=(with_images("What is in this picture?", [Image.of(picture)]),))
        text = engine.intake.prompts.text_of(request)
        engine.submit(request, time.monotonic())
        seq = engine.scheduler.find("r")
        first = seq.tokens.index(next(t for t in seq.tokens if t < 0))
        while seq.num_computed < first + 16:  # two of the picture's three steps
            engine.step()
        real_decode, failed = engine.backend.decode, []

        def no_room():  # the step's tokens find no room, after its picture's last rows went in
            failed.append(engine.backend.seq_pos_max(seq.slot_id))
            engine.backend.decode = real_decode
            return 1

        engine.backend.decode = no_room
        engine.scheduler.relieve_pressure = lambda: True  # the pool has room: the step is tried again
        engine.step()
        assert failed == [seq.position(first)] and seq.num_computed == first  # the picture went whole
        assert engine.backend.seq_pos_max(seq.slot_id) == seq.position(first) - 1
        while engine.step():
            pass
        helper, _, _ = _helper_logprobs(engine, text, picture, 8)
        assert _same(_logprobs(events), helper)
        assert sum(s.n_image_tokens for s in engine.figures.steps.since(-math.inf)) == 2 * N_IMAGE  # its rows twice
    finally:
        engine.shutdown("done")


def test_a_reply_between_two_pictures_keeps_its_own_tokens_on_the_next_turns(qwen_vl_paths):
    """A turn's reply comes back between its picture and the next turn's: the prompt keeps the
    tokens the model wrote (here six newlines, which the tokenizer reads as fewer), so each turn
    finds every earlier token in its cells, the pictures' positions included."""
    first_message = _chat(seed=1, text="What's this? I don't know.")[0]
    six = SamplingParams(max_tokens=6, temperature=0.0, ignore_eos=True)

    async def go():
        async with Started(_config(qwen_vl_paths)) as client:
            _, a = await collect(client.generate([first_message], six, conversation_id="a"))
            later = [first_message, {"role": "assistant", "content": a.text}, *_chat(seed=2, text="And this one?")]
            _, b = await collect(client.generate(later, six, conversation_id="a"))
            last = [*later, {"role": "assistant", "content": b.text}, {"role": "user", "content": "Sure?"}]
            _, c = await collect(client.generate(last, six, conversation_id="a"))
            return a, b, c

    a, b, c = run(go())
    assert b.stats.image_tokens == c.stats.image_tokens == 2 * N_IMAGE
    for before, after in ((a, b), (b, c)):
        assert after.stats.cached_tokens == before.stats.prompt_tokens + six.max_tokens - 1
