"""The KV cell map the engine publishes: each slot's cells as the KV manager counts them, a shared
prefix shown as shared, the RAM tier's entries as chats are evicted and restored, and for any
requests the map's total equal to the engine's cells used; a picture's cells as runs where its
placeholders lie."""

from __future__ import annotations

import asyncio

import pytest
from helpers import Started, collect, run, user
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pictures import png
from test_host_cache import OTHER, STORY, chat
from test_kv_cache import system_chat

from app.engine.cell_map import CellMap, SlotState
from app.engine.images import Image, with_images
from app.engine.params import EngineConfig
from app.engine.sampling.params import GREEDY

pytestmark = pytest.mark.tiny


def kv_counts(engine) -> tuple[list[int], int]:
    """Each slot's cells and the cells used, as the KV manager counts them (on the engine thread)."""
    return [len(s.cells) for s in engine.kv.slots], engine.kv.cells_used


def test_each_slot_holds_what_the_kv_manager_counts_and_a_shared_prefix_shows_as_shared(tiny_config):
    params = GREEDY.with_(max_tokens=8)

    async def main():
        async with Started(tiny_config) as client:
            await client.complete(system_chat("When do you open on Saturday?"), params, conversation_id="a")
            await client.complete(system_chat("How much is printing?"), params, conversation_id="b")
            return client.cell_map_of(), await client.call(kv_counts), client.snapshot

    m, (cells, used), snapshot = run(main())
    assert [s.cells for s in m.slots] == cells and m.cells_used == used == snapshot.cells_used
    a, b = (next(s for s in m.slots if s.conversation_id == c) for c in "ab")
    assert a.state is b.state is SlotState.KEPT and a.prompt_cells == b.prompt_cells == 0  # no reply running
    assert a.shared == b.shared > 200 and a.shared_with == (b.slot,) and b.shared_counts == (a.shared,)
    assert a.own + b.own == used and b.own == b.cells - b.shared  # the prefix counted once, in slot a's run


def test_a_failure_that_clears_the_pool_clears_the_map(tiny_config):
    async def main():
        async with Started(tiny_config) as client:
            await client.complete(system_chat("When do you open on Saturday?"), GREEDY.with_(max_tokens=8), conversation_id="a")
            before = client.cell_map_of()
            await client.call(lambda engine: engine.fail_all("a test's fault"))
            return before, client.cell_map_of()

    before, after = run(main())
    assert before.cells_used > 0 and after.cells_used == 0 and all(s.cells == 0 for s in after.slots)


def test_an_eviction_to_ram_and_the_restore_show_in_the_map(tiny_config):
    small = tiny_config.with_(n_ctx=1024, capacity=2)
    params = GREEDY.with_(max_tokens=8)

    async def main():
        async with Started(small) as client:
            _, first = await collect(client.generate(chat(), params, conversation_id="a"))
            await client.complete(chat(story=OTHER), params, conversation_id="b")  # pushes "a" out
            evicted = client.cell_map_of()
            await client.complete(chat(first.text), params, conversation_id="a")
            return evicted, client.cell_map_of(), await client.call(kv_counts)

    evicted, restored, (cells, used) = run(main())
    assert evicted.evictions >= 1 and evicted.saves >= 1
    assert "a" in {s.conversation_id for s in evicted.saved} and "a" not in {s.conversation_id for s in evicted.slots}
    saved_a = next(s for s in evicted.saved if s.conversation_id == "a")
    assert saved_a.tokens > 500 and saved_a.bytes > 0
    assert restored.restores == evicted.restores + 1 and "a" not in {s.conversation_id for s in restored.saved}
    assert "a" in {s.conversation_id for s in restored.slots}
    assert [s.cells for s in restored.slots] == cells and restored.cells_used == used


def test_a_preemption_shows_in_the_map_as_it_happens(tiny_config):
    """Four long replies in a pool too small for them: the map taken while they run names a
    preempted one (or counts it) before the replies end."""
    tales = [f"Tale {i}. " + STORY[:840] for i in range(4)]
    params = GREEDY.with_(max_tokens=160, ignore_eos=True)

    async def main():
        async with Started(tiny_config.with_(n_ctx=1024, capacity=4)) as client:
            maps: list[CellMap] = []
            replies = asyncio.gather(
                *(collect(client.generate(user(t), params, conversation_id=f"c{i}")) for i, t in enumerate(tales))
            )
            task = asyncio.ensure_future(replies)
            while not task.done():
                maps.append(client.cell_map_of())
                await asyncio.sleep(0.01)
            await task
            return maps, client.cell_map_of(), client.snapshot

    maps, last, snapshot = run(main())
    assert snapshot.preemptions >= 1 and last.preemptions == snapshot.preemptions
    seen = [m for m in maps if m.preemptions]
    assert seen and seen[0].steps < last.steps  # shown while the replies still ran
    assert any(m.preempted for m in maps) or any(s.state is SlotState.RUNNING for m in seen for s in m.slots)
    running = [s for m in maps for s in m.slots if s.state is SlotState.RUNNING]
    assert running and all(s.prompt_cells > 100 for s in running)  # where each reply starts: its prompt's end
    assert any(s.cells > s.prompt_cells for s in running)  # a reply being written after its prompt


_texts = st.sampled_from([STORY[:200], STORY[:600], STORY[:1200], OTHER[:400], OTHER[:900], "Hi"])
_request = st.tuples(
    _texts, st.sampled_from(["", " Why?", " Where?"]), st.integers(1, 12), st.sampled_from([None, "a", "b", "c"])
)


@pytest.fixture(scope="module", params=[True, False], ids=["one pool", "a stream per sequence"])
def small_engine(tiny_model_path, request):
    """One small engine for every generated example, in each layout: three slots, evictions often."""
    from app.client import EngineClient
    from app.engine.params import EngineConfig

    loop = asyncio.new_event_loop()
    config = EngineConfig(
        tiny_model_path, n_ctx=1536, n_batch=256, capacity=3, n_threads=2, kv_unified=request.param, cache_ram_mib=64
    )
    client = EngineClient(config)
    loop.run_until_complete(client.start())
    yield loop, client
    loop.run_until_complete(client.close())
    loop.close()


@settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(requests=st.lists(_request, min_size=1, max_size=5))
def test_for_any_requests_the_maps_cells_add_up_to_the_engines(small_engine, requests):
    loop, client = small_engine

    async def main():
        await asyncio.gather(
            *(client.complete(user(text + tail), GREEDY.with_(max_tokens=n), conversation_id=c) for text, tail, n, c in requests)
        )
        return client.cell_map_of(), await client.call(kv_counts), client.snapshot

    m, (cells, used), snapshot = loop.run_until_complete(asyncio.wait_for(main(), 60))
    assert m.cells_used == used == snapshot.cells_used
    assert [s.cells for s in m.slots] == cells
    assert all(s.own <= s.cells <= m.stream_cells and s.shared <= s.cells for s in m.slots)
    assert m.saves == snapshot.saves and m.restores == snapshot.restores and len(m.saved) == snapshot.saved_entries


def test_a_pictures_cells_show_as_a_run_in_each_slot_that_holds_it(tiny_model_path, tiny_mmproj_path):
    """Two chats with the same picture and one with two: each slot's map says where its pictures'
    cells lie, as its tokens hold their placeholders; the next turn keeps the runs where they were."""
    config = EngineConfig(
        tiny_model_path, mmproj=tiny_mmproj_path, n_ctx=4096, n_batch=8, capacity=4, n_threads=2, kv_unified=True
    )
    same, other = Image.of(png(seed=2)), Image.of(png(seed=3))
    params = GREEDY.with_(max_tokens=4)

    async def main():
        async with Started(config) as client:
            asked = [with_images("Describe it.", [same])]
            _, first = await collect(client.generate(asked, params, conversation_id="a"))
            await client.complete([with_images("Describe it.", [same])], params, conversation_id="b")
            await client.complete([with_images("Which differs?", [same, other])], params, conversation_id="c")
            before = client.cell_map_of()
            later = [*asked, {"role": "assistant", "content": first.text}, *user("And its colours?")]
            await client.complete(later, params, conversation_id="a")
            tokens = await client.call(lambda engine: {s.seq_id: list(s.tokens) for s in engine.kv.slots})
            return before, client.cell_map_of(), tokens

    before, after, tokens = run(main())
    a, b, c = (next(s for s in before.slots if s.conversation_id == k) for k in "abc")
    (start, end), *rest = a.pictures
    assert not rest and end - start == 16 and a.picture_cells == 16  # the synthetic projector's 16 tokens
    assert b.pictures == a.pictures and b.shared >= end  # the same picture, in the prefix the two share
    assert len(c.pictures) == 2 and c.picture_cells == 32 and c.pictures[0] == a.pictures[0]
    for s in after.slots:  # where each slot's tokens hold placeholders, and nowhere else
        held = tokens[s.slot]
        inside = {i for first, last in s.pictures for i in range(first, last)}
        assert inside == {i for i, t in enumerate(held) if t < 0}
    a_after = next(s for s in after.slots if s.conversation_id == "a")
    assert a_after.pictures == a.pictures and a_after.cells > a.cells
