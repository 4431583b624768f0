"""Several models on one engine thread: each request goes to the model it names, the models take
turns a decode each, and loading or unloading one never hurts the others' requests."""

from __future__ import annotations

import asyncio

import pytest
from helpers import Started, collect, run, user
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from app.engine.errors import ModelLoadError, UnknownModelError
from app.engine.events import FinishEvent, FinishReason, TokenEvent
from app.engine.sampling.params import GREEDY

pytestmark = pytest.mark.model

Q4, Q8 = "SmolLM2-135M-Instruct.Q4_1", "SmolLM2-135M-Instruct.Q8_0"
EXACT = GREEDY.with_(max_tokens=24, ignore_eos=True)


@pytest.fixture
def small(config):
    return config.with_(n_ctx=1024, capacity=4)


def test_two_models_stream_at_once_each_request_on_the_model_it_named(small, q8_model_path):
    async def main():
        async with Started(small) as client:
            assert await client.load_model(small.with_(model_path=q8_model_path)) == Q8
            names = list(client.models)
            streams = [
                collect(client.generate(user(f"Tell me about the number {i}."), EXACT, model=model))
                for i, model in enumerate([None, Q4, Q8, Q8])
            ]
            finals = [final for _, final in await asyncio.gather(*streams)]
            steps = {model: client.recent_steps(model=model) for model in names}
            return names, finals, steps, client.default_model, client.snapshot_of(Q8), client.model_info_of(Q8)

    names, finals, steps, default, q8_snapshot, q8_info = run(main())
    assert names == [Q4, Q8] and default == Q4 and q8_info.path.endswith("Q8_0.gguf")
    assert [f.model for f in finals] == [Q4, Q4, Q8, Q8]
    assert all(f.reason is FinishReason.LENGTH and f.stats.gen_tokens == 24 for f in finals)
    assert q8_snapshot.generated_tokens == 48  # its own two requests, nothing of the other model's
    # while both had work, they took turns: a decode each
    both = (max(steps[Q4][0].t_end, steps[Q8][0].t_end), min(steps[Q4][-1].t_end, steps[Q8][-1].t_end))
    counts = [sum(both[0] <= s.t_end <= both[1] for s in steps[model]) for model in names]
    assert min(counts) >= 20 and abs(counts[0] - counts[1]) <= 2, counts


def test_unloading_a_model_mid_stream_ends_its_replies_with_a_notice_and_the_other_model_goes_on(small, q8_model_path):
    async def main():
        async with Started(small) as client:
            await client.load_model(small.with_(model_path=q8_model_path), "q8")
            doomed = [
                asyncio.ensure_future(
                    collect(client.generate(user("Count."), GREEDY.with_(max_tokens=5000, ignore_eos=True), model="q8"))
                )
                for _ in range(2)
            ]
            going_on = asyncio.ensure_future(
                collect(client.generate(user("Count."), GREEDY.with_(max_tokens=64, ignore_eos=True)))
            )
            while client.snapshot_of("q8").generated_tokens < 4:
                await asyncio.sleep(0.05)
            await client.unload_model("q8")
            cut = [await asyncio.wait_for(stream, 10) for stream in doomed]
            _, other = await going_on
            with pytest.raises(UnknownModelError, match="loaded: SmolLM2"):
                await client.complete(user("Hi"), EXACT, model="q8")
            with pytest.raises(UnknownModelError):
                await client.unload_model("q8")
            with pytest.raises(ValueError, match="the only model loaded"):
                await client.unload_model(Q4)
            after = await client.complete(user("Hi"), EXACT)
            return cut, other, list(client.models), after, client.is_running

    cut, other, names, after, alive = run(main())
    for tokens, final in cut:
        assert final.reason is FinishReason.CANCELLED and "the model q8 was unloaded" in final.notice
        assert 0 < final.stats.gen_tokens < 5000 and final.text == "".join(t.text for t in tokens)
    assert other.reason is FinishReason.LENGTH and other.stats.gen_tokens == 64 and other.model == Q4
    assert names == [Q4] and after.ok and alive


def test_a_name_taken_or_a_bad_file_is_refused_and_the_engine_goes_on(small, q8_model_path, tmp_path):
    bad = tmp_path / "broken.gguf"
    bad.write_bytes(b"GGUF" + bytes(64))

    async def main():
        async with Started(small) as client:
            with pytest.raises(ValueError, match="already loaded"):
                await client.load_model(small)  # the default's own file, under its own name
            with pytest.raises(ModelLoadError, match="cannot load model broken.gguf"):
                await client.load_model(small.with_(model_path=str(bad)))
            twin = await client.load_model(small, "twin")  # the same file under another name: a model of its own
            with pytest.raises(UnknownModelError):
                await client.call(lambda engine: None, model="nope")
            finals = await asyncio.gather(*(client.complete(user("Hi"), EXACT, model=m) for m in (None, twin)))
            return list(client.models), finals

    names, finals = run(main())
    assert names == [Q4, "twin"] and [f.model for f in finals] == [Q4, "twin"]
    assert finals[0].text == finals[1].text  # greedy, the same weights


def test_reloading_one_model_keeps_its_place_and_leaves_the_other_alone(small, q8_model_path):
    async def main():
        async with Started(small) as client:
            await client.load_model(small, "other")
            other = asyncio.ensure_future(collect(client.generate(user("Count."), EXACT, model="other")))
            await client.reload(small.with_(model_path=q8_model_path))  # the default becomes the Q8 file
            _, final = await other
            return list(client.models), client.config.model_path, final

    names, default_path, final = run(main())
    assert names == [Q8, "other"] and default_path.endswith("Q8_0.gguf")
    assert final.reason is FinishReason.LENGTH and final.model == "other"


# -- any sequence of loads, unloads, requests and cancels -------------------------------------

_names = st.sampled_from(["a", "b", Q4])
_op = st.one_of(
    st.tuples(st.just("load"), _names),
    st.tuples(st.just("unload"), _names),
    st.tuples(st.just("generate"), st.one_of(st.none(), _names, st.just("nope")), st.integers(1, 40), st.booleans()),
)


@pytest.fixture(scope="module")
def shared_models(model_path, q8_model_path):
    """One client for every generated example: it must survive all of them."""
    from app.client import EngineClient
    from app.engine.params import EngineConfig

    loop = asyncio.new_event_loop()
    config = EngineConfig(model_path=model_path, n_ctx=512, n_batch=128, capacity=2, n_threads=2, cache_ram_mib=0)
    client = EngineClient(config)
    loop.run_until_complete(client.start())
    yield loop, client, {"a": config.with_(model_path=q8_model_path), "b": config.with_(model_path=q8_model_path), Q4: config}
    loop.run_until_complete(client.close())
    loop.close()


@settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(ops=st.lists(_op, min_size=1, max_size=8))
@example(  # the default unloaded while it streams: the next model becomes the default
    ops=[("load", "a"), ("generate", "a", 40, False), ("generate", None, 40, False), ("unload", Q4), ("generate", None, 5, True)]
    + [("unload", "a"), ("load", Q4), ("generate", Q4, 3, False)]
)
def test_any_loads_unloads_and_requests_leave_the_models_as_said_and_every_request_one_final_event(shared_models, ops):
    loop, client, configs = shared_models

    async def one(model, max_tokens, cancel):
        finals = 0
        try:
            async for event in client.generate(user("Hi"), GREEDY.with_(max_tokens=max_tokens), model=model):
                finals += isinstance(event, FinishEvent)
                assert finals <= 1
                if cancel and isinstance(event, TokenEvent):
                    client.cancel(event.request_id)
        except UnknownModelError:
            return None
        return finals

    async def main():
        expected = list(client.models)
        streams = []
        for op in ops:
            if op[0] == "generate":
                streams.append(asyncio.ensure_future(one(*op[1:])))
                await asyncio.sleep(0.05)
            elif op[0] == "load":
                try:
                    await client.load_model(configs[op[1]], op[1])
                    expected.append(op[1])
                except ValueError:
                    assert op[1] in expected
            else:
                try:
                    await client.unload_model(op[1])
                    expected.remove(op[1])
                except UnknownModelError:
                    assert op[1] not in expected
                except ValueError:
                    assert expected == [op[1]]
        counts = await asyncio.wait_for(asyncio.gather(*streams), 60)
        return expected, counts

    expected, counts = loop.run_until_complete(main())
    assert list(client.models) == expected and client.is_running
    assert all(count in (None, 1) for count in counts)
