"""Static batching (ServingMode.STATIC) on the tiny model: a batch gathers within its window, runs
until its last sequence ends while newcomers wait, leaves its finished sequences' places empty, and
switching modes live loses no request; `bench --mode static` and the guide's rows."""

from __future__ import annotations

import asyncio
import itertools
import time

import pytest
from helpers import Started, run, user
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from app.bench import BenchSettings, guide_rows
from app.cli import main
from app.engine.events import FinishEvent, FinishReason, TokenEvent
from app.engine.params import ServingMode
from app.engine.sampling.params import GREEDY

pytestmark = pytest.mark.tiny

WINDOW_MS = 300.0  # long enough that the gathering shows on a busy 2-core machine


def reply(max_tokens: int):
    return GREEDY.with_(max_tokens=max_tokens, ignore_eos=True)  # the tiny model writes noise: bound it


def leaked_cells(engine) -> list[str]:
    """Slots whose cell count disagrees with llama.cpp's, and sequences left behind."""
    problems = [
        f"slot {slot.seq_id}: llama.cpp holds {engine.backend.seq_pos_max(slot.seq_id) + 1}, engine counts {len(slot.tokens)}"
        for slot in engine.kv.slots
        if engine.backend.seq_pos_max(slot.seq_id) + 1 != len(slot.tokens) or slot.sequence is not None
    ]
    return problems + [repr(s) for s in (*engine.scheduler.running, *engine.scheduler.waiting)]


def test_a_batch_gathers_for_its_window_then_runs_together(tiny_config):
    """Fewer requests than the capacity wait out the window (counted from the first), then start in
    one step; as many as the capacity start at once."""

    async def main():
        async with Started(tiny_config.with_(mode=ServingMode.STATIC, capacity=4, static_window_ms=WINDOW_MS)) as client:
            t0 = time.monotonic()
            first = asyncio.ensure_future(client.complete(user("one"), reply(4), request_id="a"))
            await asyncio.sleep(0.05)
            later = [asyncio.ensure_future(client.complete(user(t), reply(4), request_id=t)) for t in ("b", "c")]
            gathered = await asyncio.gather(first, *later)
            steps = await client.call(lambda e: list(e.figures.steps.since()))
            full = await asyncio.gather(*(client.complete(user(f"r{i}"), reply(4)) for i in range(4)))
            return t0, gathered, steps, full

    t0, gathered, steps, full = run(main())
    assert {p.request_id for p in steps[0].parts} == {"a", "b", "c"}  # one batch, read in one step
    admitted = [f.stats.t_admit for f in gathered]
    assert max(admitted) - min(admitted) < 0.05  # together
    assert WINDOW_MS / 1000 <= min(admitted) - t0 < WINDOW_MS / 1000 + 2.0  # after the window, not much later
    assert all(f.stats.queued_s < WINDOW_MS / 1000 for f in full)  # a full batch does not wait for it
    assert all(f.stats.gen_tokens == 4 for f in (*gathered, *full))


def test_a_newcomer_waits_for_the_whole_batch_and_holes_stay_empty(tiny_config):
    """A batch of two, one reply short and one long: the short one's place stays empty while the long
    one runs alone, and a request arriving meanwhile starts only once the batch has ended."""

    async def main():
        async with Started(tiny_config.with_(mode=ServingMode.STATIC, capacity=4)) as client:
            await client.complete(user("warm"), reply(2))
            short = asyncio.ensure_future(client.complete(user("short"), reply(3), request_id="short"))
            long = asyncio.ensure_future(client.complete(user("long"), reply(200), request_id="long"))
            await short
            late = await client.complete(user("late"), reply(3), request_id="late")  # a slot is free: it still waits
            await long
            steps = await client.call(lambda e: list(e.figures.steps.since()))
            return steps, late, (await long), (await client.call(leaked_cells))

    steps, late, long, leaks = run(main())
    ids = [{p.request_id for p in s.parts} for s in steps]
    ran = [i for i, parts in enumerate(ids) if parts & {"short", "long"}]
    short_end = max(i for i, parts in enumerate(ids) if "short" in parts)
    long_end = max(i for i, parts in enumerate(ids) if "long" in parts)
    late_start = min(i for i, parts in enumerate(ids) if "late" in parts)
    assert ids[ran[0]] == {"short", "long"}  # one batch
    assert all(ids[i] == {"long"} for i in range(short_end + 1, long_end + 1))  # the hole is not refilled
    assert late_start > long_end  # the newcomer waited for the batch's last sequence
    assert late.stats.t_admit >= long.stats.t_finish
    assert leaks == []


ACTIONS = st.lists(
    st.one_of(
        st.tuples(st.just("switch"), st.sampled_from(list(ServingMode))),
        st.tuples(st.just("arrive"), st.integers(1, 12)),
        st.tuples(st.just("wait"), st.integers(0, 30)),
    ),
    min_size=1,
    max_size=12,
)


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(actions=ACTIONS)
def test_switching_modes_with_requests_in_flight_loses_none(tiny_config, actions):
    """Whatever the order of switches and arrivals: every request ends once, with all its tokens,
    and no cell or sequence is left behind."""
    finals: dict[str, list[FinishEvent]] = {}

    def on_events(events) -> None:
        for event in events:
            if isinstance(event, FinishEvent):
                finals.setdefault(event.request_id, []).append(event)

    async def main():
        config = tiny_config.with_(capacity=3, n_batch=64, static_window_ms=20.0)
        async with Started(config) as client:
            client.add_listener(on_events)
            asked, tasks, ids = {}, [], itertools.count()
            for kind, value in [("switch", ServingMode.BATCHED), *actions, ("switch", ServingMode.BATCHED)]:
                if kind == "switch":
                    await client.set_mode(value)
                elif kind == "arrive":
                    rid = f"r{next(ids)}"
                    asked[rid] = value
                    tasks.append(asyncio.ensure_future(client.complete(user(rid), reply(value), request_id=rid)))
                    await asyncio.sleep(0)
                else:
                    await asyncio.sleep(value / 1000)
            done = await asyncio.wait_for(asyncio.gather(*tasks), timeout=60)
            await asyncio.sleep(0.05)  # the listeners of the last step
            return asked, done, await client.call(leaked_cells)

    asked, done, leaks = run(main())
    assert all(f.reason is FinishReason.LENGTH and f.stats.gen_tokens == asked[f.request_id] for f in done)
    assert {rid: len(events) for rid, events in finals.items()} == dict.fromkeys(asked, 1)
    assert leaks == []


def test_switching_to_static_makes_the_running_streams_the_batch(tiny_config):
    """Switched live, what runs is the batch: a request arriving after the switch waits for it."""

    async def main():
        async with Started(tiny_config.with_(capacity=4)) as client:
            started = asyncio.Event()

            async def stream(rid, n):
                async for event in client.generate(user(rid), reply(n), request_id=rid):
                    if isinstance(event, TokenEvent) and event.n_tokens:
                        started.set()
                    if isinstance(event, FinishEvent):
                        return event

            running = asyncio.ensure_future(stream("running", 30))
            await started.wait()
            await client.set_mode(ServingMode.STATIC)
            late = await client.complete(user("late"), reply(2), request_id="late")
            return await running, late, client.config.mode

    running, late, mode = run(main())
    assert mode is ServingMode.STATIC and running.stats.gen_tokens == 30
    assert late.stats.t_admit >= running.stats.t_finish


def test_bench_mode_static_runs_and_says_so(tiny_model_path, capsys):
    flags = ["--mode", "static", "--parallel", "3", "--max-tokens", "4", "--ignore-eos", "-t", "2"]
    code = main(["bench", "--model", tiny_model_path, *flags])
    out = capsys.readouterr().out
    assert code == 0
    assert "static + KV reuse" in out and " 3 " in out


def test_the_guide_rows_are_the_guides_with_continuous_batching_beyond():
    rows = guide_rows(BenchSettings("model.gguf", mode=ServingMode.STATIC), (4, 8))
    assert [(r.label, r.parallel, r.mode) for r in rows] == [
        ("one sequence", 1, ServingMode.BATCHED),
        ("static + KV reuse", 4, ServingMode.STATIC),
        ("continuous, no KV reuse", 4, ServingMode.BATCHED),
        ("continuous + KV reuse", 4, ServingMode.BATCHED),
        ("continuous + KV reuse", 8, ServingMode.BATCHED),
    ]
