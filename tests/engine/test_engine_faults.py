"""The engine never dies of one request: every fault ends its own request (or call) with the reason,
and if the engine thread ends anyway every waiting stream is told at once.

On the tiny model (the bundled one re-quantized to Q8_0 as a second model): whether a request ends,
and how, does not depend here on what a model says."""

from __future__ import annotations

import asyncio
import math
import threading
import time

import pytest
from helpers import Started, collect, run, user
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from app.engine import figures
from app.engine.errors import EngineError
from app.engine.events import Fault, FinishEvent, FinishReason, TokenEvent
from app.engine.prompt.intake import Intake
from app.engine.sampling.constraints import JSON_OBJECT_GRAMMAR, lark_only, regex_grammar, schema_grammar
from app.engine.sampling.params import GREEDY, SamplingParams

QUICK = GREEDY.with_(max_tokens=4)


async def _stream_tokens(stream, log: list[float]) -> FinishEvent:
    """Consume a stream, noting when each token arrived."""
    async for event in stream:
        if isinstance(event, TokenEvent) and event.n_tokens:
            log.append(time.monotonic())
        if isinstance(event, FinishEvent):
            return event
    raise AssertionError("no final event")


@pytest.mark.tiny
@pytest.mark.parametrize("where", ["content", "prompt"])
def test_text_utf8_cannot_encode_fails_only_its_own_request(tiny_config, where):
    async def main():
        async with Started(tiny_config) as client:
            long = asyncio.ensure_future(
                collect(client.generate(user("Count to twenty."), GREEDY.with_(max_tokens=48, ignore_eos=True)))
            )
            if where == "content":
                bad = await client.complete(user("\ud800 x"), QUICK)
            else:
                bad = await client.complete(params=QUICK, prompt="a lone \udfff surrogate")
            _, other = await long
            after = await client.complete(user("Hi"), QUICK)
            return bad, other, after, client.is_running

    bad, other, after, alive = run(main())
    assert bad.reason is FinishReason.ERROR and "UTF-8 cannot encode" in bad.error
    assert other.reason is FinishReason.LENGTH and other.stats.gen_tokens == 48
    assert after.ok and alive


@pytest.mark.tiny
def test_a_fault_after_a_request_ended_in_a_step_keeps_its_final_event(tiny_config, monkeypatch):
    """A bug in the step's bookkeeping after a reply's last token was drawn: that reply ends as it
    should (its final event was made), the others in flight end with the error, and the engine goes on."""
    record = figures.Figures.record_step

    def failing(self, parts, *args):
        if any(not p.is_decode for p in parts) and any(p.request_id == "short" for p in parts):
            raise RuntimeError("a fault in the figures")
        return record(self, parts, *args)

    async def main():
        async with Started(tiny_config) as client:
            long = asyncio.ensure_future(client.complete(user("Count to twenty."), GREEDY.with_(max_tokens=48, ignore_eos=True)))
            await client.call(lambda e: None)
            monkeypatch.setattr(figures.Figures, "record_step", failing)
            # its prompt and its one token in one step, beside the long reply's decode
            short = await asyncio.wait_for(client.complete(user("Hi"), GREEDY.with_(max_tokens=1), request_id="short"), 60)
            other = await asyncio.wait_for(long, 60)
            monkeypatch.setattr(figures.Figures, "record_step", record)
            after = await client.complete(user("Hi"), QUICK)
            return short, other, after

    short, other, after = run(main())
    assert short.reason is FinishReason.LENGTH and short.stats.gen_tokens == 1
    assert other.reason is FinishReason.ERROR and "a fault in the figures" in other.error
    assert after.ok


@pytest.mark.tiny
def test_a_failing_call_or_reload_settles_its_future_and_the_engine_goes_on(tiny_config):
    async def main():
        async with Started(tiny_config) as client:
            with pytest.raises(ZeroDivisionError):
                await client.call(lambda engine: 1 / 0)
            with pytest.raises(TypeError):  # not one of the load errors: it used to end the thread
                await client.reload(tiny_config.with_(capacity="eight"))
            return await client.complete(user("Hi"), QUICK), client.is_running

    final, alive = run(main())
    assert final.ok and alive


@pytest.mark.tiny
@pytest.mark.parametrize(
    "params",
    [
        QUICK.with_(temperature=math.nan),
        QUICK.with_(top_p=2.0),
        QUICK.with_(top_k=-3),
        QUICK.with_(repeat_last_n=-1),
        QUICK.with_(max_tokens=0),
        QUICK.with_(seed=-7),
        QUICK.with_(stop=("",)),
    ],
)
def test_sampling_values_out_of_range_are_refused_with_the_reason(tiny_config, params):
    async def main():
        async with Started(tiny_config) as client:
            return await client.complete(user("Hi"), params), await client.complete(user("Hi"), QUICK)

    refused, fine = run(main())
    assert refused.reason is FinishReason.ERROR and "must be" in refused.error
    assert fine.ok


@pytest.mark.tiny
def test_a_dead_engine_ends_every_stream_at_once_and_says_why_then_restarts(tiny_config):
    reasons: list[str] = []

    async def main():
        async with Started(tiny_config) as client:
            client.add_failure_listener(reasons.append)
            streams = [
                asyncio.ensure_future(
                    collect(client.generate(user(f"Story {i}"), GREEDY.with_(max_tokens=4000, ignore_eos=True)))
                )
                for i in range(3)
            ]
            while client.snapshot.generated_tokens < 15:  # they stream
                await asyncio.sleep(0.01)
            client._thread.call(lambda engine: (_ for _ in ()).throw(SystemExit("injected fault")))
            t0 = time.monotonic()
            finals = [f for _, f in await asyncio.gather(*streams)]
            ended_in = time.monotonic() - t0
            alive = client.is_running
            with pytest.raises(EngineError, match="injected fault"):
                await client.complete(user("Hi"), QUICK)
            with pytest.raises(EngineError):
                await client.call(lambda engine: None)
            failure = client.failure
            await client.restart()
            return finals, ended_in, alive, failure, await client.complete(user("Hi"), QUICK)

    finals, ended_in, alive, failure, after = run(main())
    assert all(f.reason is FinishReason.ERROR and "injected fault" in f.error for f in finals)
    assert all(f.stats.gen_tokens < 4000 for f in finals)
    assert ended_in < 10  # far from the 4000 tokens they asked for
    assert not alive and "injected fault" in failure and reasons == [failure]
    assert after.ok


@pytest.mark.tiny
def test_a_huge_chat_is_read_without_stalling_the_running_streams(tiny_config):
    """8,000 messages take seconds to render and tokenize: a stream already running goes on meanwhile."""
    huge = [{"role": "user" if i % 2 == 0 else "assistant", "content": ""} for i in range(8_000)]
    arrivals: list[float] = []

    async def main():
        # room for the stream to run for as long as the chat takes (the tiny model's cells are small);
        # streams of 8,192 cells fixed, so the huge chat is refused once read, not computed
        async with Started(tiny_config.with_(n_ctx=65536, kv_unified=False)) as client:
            running = asyncio.ensure_future(
                _stream_tokens(
                    client.generate(user("Count slowly."), GREEDY.with_(max_tokens=100_000, ignore_eos=True)), arrivals
                )
            )
            while len(arrivals) < 3:
                await asyncio.sleep(0.05)
            t0 = time.monotonic()
            big = await client.complete(huge, QUICK)
            t1 = time.monotonic()
            running.cancel()
            await asyncio.gather(running, return_exceptions=True)
            return big, t0, t1

    big, t0, t1 = run(main())
    during = [t for t in arrivals if t0 <= t <= t1]
    gaps = [b - a for a, b in zip(during, during[1:])]
    print(f"huge chat read in {t1 - t0:.1f} s; {len(during)} tokens streamed meanwhile; longest gap {max(gaps, default=0):.3f} s")
    assert big.reason is FinishReason.ERROR and "context holds" in big.error
    assert t1 - t0 > 0.5, "the chat was read too fast for this test to show anything"
    assert len(during) >= 5 and max(gaps) < (t1 - t0) / 2


@pytest.mark.tiny
def test_per_conversation_totals_are_bounded(tiny_config, monkeypatch):
    monkeypatch.setattr(figures, "CONVERSATIONS_KEPT", 3)

    async def main():
        async with Started(tiny_config) as client:
            for i in range(6):
                await client.complete(user("Hi"), GREEDY.with_(max_tokens=1), conversation_id=f"c{i}")
            return await client.call(lambda engine: engine.figures.conversations.ids())

    assert run(main()) == ["c3", "c4", "c5"]


# -- any request -------------------------------------------------------------------------------

_text = st.text(st.characters(codec=None, exclude_categories=()), max_size=40)  # surrogates included
_message = st.fixed_dictionaries({"role": st.sampled_from(["system", "user", "assistant", "tool", ""]), "content": _text})
_params = st.builds(
    SamplingParams,
    temperature=st.one_of(st.floats(allow_nan=True, allow_infinity=True), st.just(0.0)),
    top_k=st.integers(-5, 100),
    top_p=st.floats(-1, 2),
    min_p=st.floats(-1, 2),
    repeat_penalty=st.one_of(st.floats(-1, 3), st.just(0.0)),
    frequency_penalty=st.one_of(st.just(0.0), st.floats(-3, 3)),
    presence_penalty=st.one_of(st.just(0.0), st.floats(-3, 3)),
    repeat_last_n=st.integers(-2, 100),
    seed=st.one_of(st.none(), st.integers(-(2**40), 2**40)),
    max_tokens=st.integers(-1, 3),
    stop=st.lists(_text, max_size=3).map(tuple),
    ignore_eos=st.booleans(),
    n_probs=st.sampled_from([None, 0, 3]),
    speculate=st.booleans(),
)
# the constraints a request may carry (grammar, lazy triggers): every kind there is, well made or not
_CALL = schema_grammar({"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]})
_constraints = st.sampled_from(
    [
        (None, ()),
        (None, ()),
        (JSON_OBJECT_GRAMMAR, ()),
        (_CALL, ()),
        (regex_grammar("[0-9]{3}-[a-c]{2}"), ()),
        (lark_only('?start: "#" /[0-9a-f]{6}/ | %json {"type": "boolean"}'), ()),
        ('root ::= ("yes" | "no")+', ()),
        ("root ::= (", ()),  # does not parse
        ('start: %json {"type": "objectx"}', ()),  # a schema llguidance refuses
        (_CALL, (r"\{",)),  # lazy: free until a brace, then the grammar from it
        (_CALL, (r"^\s*(\{)",)),  # lazy, from the reply's start: a group marks where it starts
        (_CALL, ("(",)),  # a trigger that is no pattern
        (None, ("x",)),  # triggers without a grammar
    ]
)
_params = st.tuples(_params, _constraints).map(lambda pc: pc[0].with_(grammar=pc[1][0], grammar_triggers=pc[1][1]))
# a chat, or a plain prompt: "" is no token at all with this model (it adds no BOS); or one longer
# than a stream of the automatic engine below (it moves every chat to one pool)
_long = st.integers(1030, 1500).map(lambda n: "word " * n)
_input = st.one_of(st.lists(_message, max_size=6), st.just(""), _text, _long)
_request = st.tuples(_input, _params, st.booleans(), st.sampled_from([None, "a", "b"]))


@pytest.fixture(
    scope="module",
    params=["one pool", "streams", "automatic, drafting", "draft model"],
    ids=["one pool", "a stream per sequence, adaptive", "automatic, drafting", "one pool, a draft model drafting"],
)
def shared_engine(tiny_model_path, request):
    """One engine for every generated example, in each KV layout (streams under an adaptive batch
    whose 2 ms target binds the tiny model's steps, so its plans and slow steps run; automatic:
    streams of 1,024 cells that a long prompt moves to one pool, with n-gram drafts), and with a
    draft model guessing at every step: it must survive all of them."""
    from app.client import EngineClient
    from app.engine.params import EngineConfig, SpecType

    loop = asyncio.new_event_loop()
    config = EngineConfig(tiny_model_path, n_ctx=2048, n_batch=256, capacity=4, n_threads=2, kv_unified=True)
    config = {
        "one pool": config,
        "streams": config.with_(kv_unified=False, itl_target_ms=2.0),
        "automatic, drafting": config.with_(kv_unified=None, capacity=2, spec_type=SpecType.NGRAM),
        "draft model": config.with_(spec_type=SpecType.DRAFT, spec_draft_model=tiny_model_path, spec_draft_n_min=2),
    }[request.param]
    client = EngineClient(config)
    loop.run_until_complete(client.start())
    yield loop, client
    loop.run_until_complete(client.close())
    loop.close()


@pytest.mark.tiny
@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(requests=st.lists(_request, min_size=1, max_size=4))
def test_any_requests_each_end_with_one_final_event_and_the_engine_survives(shared_engine, requests):
    loop, client = shared_engine

    async def one(given, params, cancel_early, conversation_id):
        chat, prompt = (None, given) if isinstance(given, str) else (given, None)
        finals = []
        async for event in client.generate(chat, params, prompt=prompt, conversation_id=conversation_id):
            if isinstance(event, FinishEvent):
                finals.append(event)
            if cancel_early:
                client.cancel(event.request_id)
        return finals

    async def main():
        finals = await asyncio.wait_for(asyncio.gather(*(one(*r) for r in requests)), 60)
        return finals, client.is_running, await client.complete(user("Hi"), QUICK)

    finals, alive, after = loop.run_until_complete(main())
    assert [len(f) for f in finals] == [1] * len(requests) and alive and after.ok
    # whatever was asked, a refusal is the request's fault: none ends others' replies as an engine fault
    faults = [(f[0].fault, f[0].error) for f in finals if f[0].reason is FinishReason.ERROR]
    assert all(fault is Fault.REQUEST for fault, _ in faults), faults


@pytest.mark.tiny
def test_text_full_of_chat_format_markers_is_refused_before_tokenizing(tiny_config):
    """llama.cpp's tokenizer takes time in the square of their count: 40,000 took 15 s. Counted per
    request: 1,024 messages of 200 each (under a per-message cap) are as many again."""
    flood = "<|im_start|>" * 40_000
    spread = [{"role": "user", "content": "<|im_end|>" * 200} for _ in range(1024)]

    async def main():
        async with Started(tiny_config) as client:
            t0 = time.monotonic()
            chat = await client.complete(user(flood), QUICK)
            plain = await client.complete(params=QUICK, prompt=flood)
            many = await client.complete(spread, QUICK)
            took = time.monotonic() - t0
            few = await client.complete(user("<|im_start|> is how ChatML opens a turn"), QUICK)
            return chat, plain, many, took, few

    chat, plain, many, took, few = run(main())
    assert chat.reason is FinishReason.ERROR and "messages hold 40000 chat-format markers (such as <|im_start|>)" in chat.error
    assert plain.reason is FinishReason.ERROR and "the prompt holds 40000" in plain.error
    assert many.reason is FinishReason.ERROR and "messages hold 204800 chat-format markers (such as <|im_end|>)" in many.error
    assert took < 5 and few.ok


@pytest.mark.tiny
def test_closing_the_engine_gives_every_request_in_flight_its_final_event(tiny_config):
    async def main():
        async with Started(tiny_config) as client:
            streams = [
                asyncio.ensure_future(collect(client.generate(user(f"Hi {i}"), GREEDY.with_(max_tokens=200)))) for i in range(6)
            ]
            await asyncio.sleep(0)  # each is submitted: in the prompt thread, the inbox or the engine
            await client.close()
            return [final for _, final in await asyncio.wait_for(asyncio.gather(*streams), 20)]

    finals = run(main())
    assert len(finals) == 6 and all(not f.ok and "the engine was closed" in (f.error or f.notice) for f in finals)


@pytest.mark.tiny
def test_a_request_cancelled_before_its_prompt_is_built_is_never_built(tiny_config, monkeypatch):
    """Its client left while another prompt was being read: the prompt thread drops it unread."""
    release = threading.Event()
    built: list[str] = []
    prepare = Intake.prepare

    def slow_prepare(intake, request):
        built.append(request.prompt)
        if request.prompt == "slow":
            release.wait(10)  # a long build holds the prompt thread
        return prepare(intake, request)

    monkeypatch.setattr(Intake, "prepare", slow_prepare)

    async def main():
        async with Started(tiny_config) as client:
            slow = asyncio.ensure_future(client.complete(params=QUICK, prompt="slow"))
            await asyncio.sleep(0.2)
            left = client.generate(params=QUICK, prompt="left", request_id="left")
            first = asyncio.ensure_future(anext(left))
            await asyncio.sleep(0.2)
            first.cancel()  # the client goes away before anything came
            await asyncio.gather(first, return_exceptions=True)
            finals = []
            client.add_listener(lambda events: finals.extend(e for e in events if isinstance(e, FinishEvent)))
            release.set()
            done = await slow
            after = await client.complete(params=QUICK, prompt="after")
            return done, after, finals

    done, after, finals = run(main())
    assert done.ok and after.ok
    assert built == ["slow", "after"], built
    assert [f.reason for f in finals if f.request_id == "left"] == [FinishReason.CANCELLED]


@pytest.mark.model
@pytest.mark.parametrize("action", ["unload", "reload"])
def test_unload_and_reload_do_not_wait_behind_a_prompt_being_built(tiny_config, q8_model_path, monkeypatch, action):
    release = threading.Event()
    prepare = Intake.prepare

    def slow_prepare(intake, request):
        if request.prompt == "slow":
            release.wait(60)  # longer than either action may take: waiting for it fails the test
        return prepare(intake, request)

    monkeypatch.setattr(Intake, "prepare", slow_prepare)

    async def main():
        async with Started(tiny_config) as client:
            second = await client.load_model(tiny_config.with_(model_path=q8_model_path))
            slow = asyncio.ensure_future(client.complete(params=QUICK, prompt="slow", model=second))
            await asyncio.sleep(0.3)  # the prompt thread is reading it, with the second model's tokenizer
            if action == "unload":
                await asyncio.wait_for(client.unload_model(second), 5)
            else:
                await asyncio.wait_for(client.reload(tiny_config.with_(model_path=q8_model_path), second, "again"), 30)
            release.set()
            final = await slow
            return final, await client.complete(user("Hi"), QUICK), client.is_running

    final, after, alive = run(main())
    assert final.reason is FinishReason.ERROR and final.fault is Fault.UNAVAILABLE  # its model is gone, or replaced
    assert after.ok and alive
