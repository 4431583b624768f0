"""The real engine thread: batching, streaming, stopping, cancelling.

Cells, steps and cancelling run on the tiny model; replies compared with one another, or that
depend on what the model says (a stop string, a character, an end-of-turn token), on the bundled one."""

from __future__ import annotations

import asyncio

import pytest
from helpers import Started, collect, divergence_is_a_near_tie, run, token_ids, user

from app.engine.events import FinishEvent, FinishReason, TokenEvent
from app.engine.params import ServingMode
from app.engine.sampling.params import GREEDY, SamplingParams
from app.engine.sequence import Request

QUESTIONS = [
    "What is the capital of France?",
    "Name three colours of the rainbow.",
    "Write one sentence about dogs.",
    "How many legs does a spider have?",
    "What is two plus two?",
    "What colour is the sky on a clear day?",
    "What is the opposite of hot?",
    "Name a planet in the solar system.",
]


def leaked_cells(engine) -> list[str]:
    """Slots whose cell count disagrees with what llama.cpp holds for that sequence."""
    problems = []
    for slot in engine.kv.slots:
        held = engine.backend.seq_pos_max(slot.seq_id) + 1
        if held != len(slot.tokens):
            problems.append(f"slot {slot.seq_id}: llama.cpp holds {held}, engine counts {len(slot.tokens)}")
    return problems


@pytest.mark.model
def test_eight_concurrent_greedy_requests_match_each_run_alone(config, model_path):
    """Batched greedy decoding gives each request the reply it gets alone, up to near-ties.

    Row 0 alone and row 0 in a batch of four give bit-identical logits here, but rows further into
    the batch differ by up to 0.5 (see helpers.divergence_is_a_near_tie): so where a batched reply
    leaves the lone one, the test checks that the lone run had a near-tie there.
    """
    params = GREEDY.with_(max_tokens=24)

    async def main():
        async with Started(config.with_(kv_reuse=False)) as client:
            alone = [await collect(client.generate(user(q), params)) for q in QUESTIONS]
            together = await asyncio.gather(*(collect(client.generate(user(q), params)) for q in QUESTIONS))
            prompts = await client.call(
                lambda e: [e.intake.prompts.build(Request("p", params, tuple(user(q))))[0] for q in QUESTIONS]
            )
            return alone, together, prompts, list(client.recent_steps())

    alone, together, prompts, steps = run(main())
    assert max(s.n_seqs for s in steps) == len(QUESTIONS), "the eight requests never shared a step"
    for prompt, (a_events, a), (b_events, b) in zip(prompts, alone, together):
        assert a.reason is not FinishReason.ERROR and b.reason is not FinishReason.ERROR
        assert divergence_is_a_near_tie(model_path, prompt, token_ids(a_events), token_ids(b_events)) is None, (a.text, b.text)


@pytest.mark.tiny
def test_cancel_mid_stream_frees_the_sequence_and_the_rest_goes_on(tiny_config):
    async def main():
        async with Started(tiny_config) as client:
            other = asyncio.ensure_future(client.complete(user("Count from one to twenty."), GREEDY.with_(max_tokens=40)))
            stream = client.generate(user("Tell me a long story."), GREEDY.with_(max_tokens=4000), request_id="long")
            received = 0
            async for event in stream:
                if isinstance(event, FinishEvent):
                    final = event
                    break
                received += event.n_tokens
                if received == 5:
                    client.cancel("long")
            other_final = await other
            return final, other_final, await client.call(leaked_cells), client.snapshot

    final, other, leaks, snapshot = run(main())
    assert final.reason is FinishReason.CANCELLED
    assert 5 <= final.stats.gen_tokens < 4000
    assert other.reason in (FinishReason.STOP, FinishReason.LENGTH) and other.text
    assert leaks == []
    assert snapshot.running == 0 and snapshot.waiting == 0


@pytest.mark.tiny
def test_a_consumer_that_goes_away_cancels_its_request(tiny_config):
    async def main():
        async with Started(tiny_config) as client:
            started = asyncio.Event()

            async def pane():  # a reply far longer than the test lasts: only the cancel ends it
                async for _ in client.generate(user("Tell me a long story."), GREEDY.with_(max_tokens=100_000, ignore_eos=True)):
                    started.set()

            task = asyncio.ensure_future(pane())
            await started.wait()
            task.cancel()  # what closing a pane does to its streaming task
            await asyncio.gather(task, return_exceptions=True)
            await client.call(lambda engine: None)  # the cancel is handled before this returns
            return client.snapshot, await client.call(leaked_cells)

    snapshot, leaks = run(main())
    assert snapshot.running == 0 and snapshot.waiting == 0
    assert leaks == []


@pytest.mark.model
def test_stop_string_ends_the_reply_before_it(config):
    async def main():
        async with Started(config) as client:
            free = await client.complete(user("List the days of the week."), GREEDY.with_(max_tokens=60))
            words = free.text.split()
            stop = words[len(words) // 2]
            cut = await client.complete(user("List the days of the week."), GREEDY.with_(max_tokens=60, stop=(stop,)))
            return free, stop, cut

    free, stop, cut = run(main())
    assert cut.reason is FinishReason.STOP
    assert stop not in cut.text
    assert cut.text == free.text[: free.text.index(stop)]


@pytest.mark.model
def test_multibyte_character_split_across_tokens_streams_whole(config):
    """The tokenizer splits this emoji into byte tokens; the stream must never show half of one."""

    async def main():
        async with Started(config) as client:
            pieces = await client.call(
                lambda engine: [engine.backend.vocab.piece(t) for t in engine.backend.vocab.tokenize("🌍", add_special=False)]
            )
            events, final = await collect(
                client.generate(prompt="Earth emoji: 🌍🌍🌍🌍🌍🌍🌍🌍", params=GREEDY.with_(max_tokens=24))
            )
            return pieces, events, final

    pieces, events, final = run(main())
    assert len(pieces) > 1 and all(p.decode("utf-8", errors="replace") != "🌍" for p in pieces)
    assert "🌍" in final.text, final.text
    assert all("\ufffd" not in e.text for e in events)
    held = [e for e in events if e.n_tokens and e.text == ""]
    assert held, "some token carried only part of a character and was held back"
    assert "".join(e.text for e in events) == final.text


@pytest.mark.tiny
def test_long_prompt_is_read_in_chunks_while_four_streams_keep_going(tiny_config):
    config = tiny_config.with_(n_batch=128)
    long_prompt = " ".join(f"Item {i}: the quick brown fox jumps over the lazy dog." for i in range(90))

    async def main():
        async with Started(config) as client:
            token_times: dict[int, list[float]] = {i: [] for i in range(4)}

            async def stream(i):
                # long enough to outlast the long prompt's dozen chunks, however many came before them
                async for event in client.generate(user(QUESTIONS[i]), GREEDY.with_(max_tokens=400, ignore_eos=True)):
                    if isinstance(event, TokenEvent) and event.n_tokens:
                        token_times[i].append(event.t)

            streams = [asyncio.ensure_future(stream(i)) for i in range(4)]
            while min(len(t) for t in token_times.values()) < 3:
                await asyncio.sleep(0.01)
            long_final = await client.complete(user(long_prompt), GREEDY.with_(max_tokens=4))
            await asyncio.gather(*streams)
            return long_final, token_times, list(client.recent_steps())

    long_final, token_times, steps = run(main())
    n_prompt = long_final.stats.prompt_tokens
    assert n_prompt > 3 * 128
    t_admit, t_first = long_final.stats.t_admit, long_final.stats.t_first_token
    chunks = [s for s in steps if t_admit <= s.t_end <= t_first and s.n_prefill_tokens]
    assert len(chunks) >= n_prompt // 128, "the long prompt was not read in chunks"
    assert all(s.n_decode == 4 and s.n_tokens <= 128 for s in chunks), "a chunk step left a running stream out"
    for i, times in token_times.items():
        during = [t for t in times if t_admit <= t <= t_first]
        assert len(during) >= len(chunks) - 1, f"stream {i} stalled while the long prompt was read"


@pytest.mark.tiny
def test_sequential_mode_serves_one_request_at_a_time_with_the_same_output(tiny_config):
    params = GREEDY.with_(max_tokens=24)

    async def main():
        async with Started(tiny_config.with_(mode=ServingMode.SEQUENTIAL)) as client:
            finals = await asyncio.gather(*(client.complete(user(q), params) for q in QUESTIONS[:4]))
            return finals, list(client.recent_steps())

    finals, steps = run(main())
    assert all(s.n_seqs == 1 for s in steps)
    assert all(f.text for f in finals)
    queued = sorted(f.stats.queued_s for f in finals)
    assert queued[-1] > queued[0], "later requests waited for the earlier ones"


@pytest.mark.tiny
def test_request_statistics_are_filled_in(tiny_config):
    async def main():
        async with Started(tiny_config) as client:
            return await client.complete(user("Say something nice."), GREEDY.with_(max_tokens=16, ignore_eos=True))

    final = run(main())
    st = final.stats
    assert st.gen_tokens == 16 and final.reason is FinishReason.LENGTH
    assert st.prompt_tokens == st.cached_tokens + st.evaluated_tokens > 0
    assert 0 <= st.queued_s < st.ttft_s
    assert len(st.itl) == 15 and all(x > 0 for x in st.itl)
    assert st.gen_tok_s > 0


@pytest.mark.model
@pytest.mark.parametrize("temperature", [0.0, 0.8])
def test_same_seed_same_reply(config, temperature):
    params = GREEDY.with_(temperature=temperature, seed=1234, max_tokens=24, top_k=40, top_p=0.95, min_p=0.05)

    async def main():
        async with Started(config) as client:
            a = await client.complete(user("Invent a word."), params)
            b = await client.complete(user("Invent a word."), params)
            return a.text, b.text

    a, b = run(main())
    assert a == b and a


@pytest.mark.model
def test_default_sampling_with_repeat_penalty_streams_a_reply(config):
    async def main():
        async with Started(config) as client:
            return await client.complete(user("Name two fruits."), SamplingParams(max_tokens=24, seed=7))

    final = run(main())
    assert final.reason in (FinishReason.STOP, FinishReason.LENGTH) and final.text.strip()


@pytest.mark.tiny
def test_a_fully_cached_prompt_reads_its_last_token_as_prefill_not_as_a_decode(tiny_config):
    """The step's figures say what the plan decided: that token is prompt, not generation."""

    async def main():
        async with Started(tiny_config) as client:
            await client.complete(user("Name a colour."), GREEDY.with_(max_tokens=1), conversation_id="c")
            again = await client.complete(user("Name a colour."), GREEDY.with_(max_tokens=1), conversation_id="c")
            return again, client.recent_steps()[-1]

    again, step = run(main())
    assert again.stats.evaluated_tokens == 1 and again.stats.cached_tokens == again.stats.prompt_tokens - 1
    assert (step.n_tokens, step.n_decode, step.n_prefill_tokens) == (1, 0, 1)


@pytest.mark.model
def test_ignore_eos_bans_end_of_generation_tokens(config):
    """With ignore_eos no end-of-turn token is ever drawn (llama.cpp's -inf bias), so a reply runs to
    max_tokens with only visible tokens and the next turn's cached prefix does not break on a hidden one."""
    question = user("What is 2 + 2?")

    async def main():
        async with Started(config) as client:
            plain = await collect(client.generate(question, GREEDY.with_(max_tokens=64)))
            banned = await collect(client.generate(question, GREEDY.with_(max_tokens=32, ignore_eos=True)))
            sampled = await collect(
                client.generate(question, SamplingParams(temperature=1.5, seed=7, max_tokens=32, ignore_eos=True))
            )
            eog = await client.call(lambda e: set(e.backend.vocab.eog_tokens))
            return plain, banned, sampled, eog

    (plain_events, plain), (banned_events, banned), (sampled_events, sampled), eog = run(main())
    assert eog, "the model names no end-of-generation token"
    assert plain.reason is FinishReason.STOP and token_ids(plain_events)[-1] in eog  # the greedy reply ends itself
    for events, final in ((banned_events, banned), (sampled_events, sampled)):
        assert final.reason is FinishReason.LENGTH and final.stats.gen_tokens == 32
        assert not eog & set(token_ids(events))
