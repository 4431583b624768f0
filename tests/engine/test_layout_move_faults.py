"""A change of KV layout that fails (LlamaBackend.relayout): at each point where it can (the save,
the free, the new context, the stream-count rewrite, the restore) the old layout goes on serving
every chat, or the engine ends every request with the reason and refuses new ones; no llama call
ever reaches a freed context; a failed move is not tried again at every step.

The engine is driven here step by step on its own (no engine thread), so a failure lands where
the test puts it."""

from __future__ import annotations

import time

import llama_cpp
import pytest

from app.engine.engine import Engine
from app.engine.events import FinishEvent, FinishReason
from app.engine.llama import context
from app.engine.llama.context import LlamaBackend
from app.engine.llama.seq_state import StateFormatError
from app.engine.sampling.params import GREEDY
from app.engine.sequence import Request

pytestmark = pytest.mark.tiny

SENTENCE = "The river ran past the old mill, where the miller's daughter counted sacks of flour. "
LONG = SENTENCE * 80  # over 1,024 tokens: more than a stream of the engine below holds
PARAMS = GREEDY.with_(max_tokens=8, ignore_eos=True)
# the calls that read or write a context's memory, with the argument that names the context
CALLS_ON_CONTEXT = (
    "llama_decode",
    "llama_state_seq_get_size",
    "llama_state_seq_get_data",
    "llama_state_seq_set_data",
    "llama_set_sampler",
    "llama_get_logits",
    "llama_get_logits_ith",
    "llama_sampler_sample",
)
CALLS_ON_MEMORY = ("llama_memory_seq_rm", "llama_memory_seq_cp", "llama_memory_seq_pos_max", "llama_memory_seq_pos_min")


class Driver:
    """An engine with its final events by request, run step by step until it is idle."""

    def __init__(self, config):
        self.events: list = []
        self.engine = Engine(config, self.events.extend)
        self.engine.kv.check_cells = True
        self._n = 0

    def ask(self, text: str, chat: str, params=PARAMS) -> FinishEvent:
        self._n += 1
        request_id = f"r{self._n}"
        request = Request(request_id, params, messages=({"role": "user", "content": text},), conversation_id=chat)
        self.engine.submit(request, time.monotonic())
        while self.engine.step():
            pass
        return self.final(request_id)

    def final(self, request_id: str) -> FinishEvent:
        finals = [e for e in self.events if isinstance(e, FinishEvent) and e.request_id == request_id]
        assert len(finals) == 1, finals  # exactly one final event, whatever happened
        return finals[0]

    def close(self) -> None:
        self.engine.shutdown("done")


@pytest.fixture
def freed_never_touched(monkeypatch):
    """Every llama call on a context or its memory is checked against the contexts freed so far."""
    freed, memory_of = set(), {}

    def watch(name, position_is_memory):
        real = getattr(llama_cpp, name)

        def call(*args):
            handle = args[0]
            ctx = memory_of.get(handle) if position_is_memory else handle
            assert ctx not in freed, f"{name} on a freed context"
            return real(*args)

        monkeypatch.setattr(llama_cpp, name, call)

    real_init, real_free, real_memory = llama_cpp.llama_init_from_model, llama_cpp.llama_free, llama_cpp.llama_get_memory

    def init(model, params):
        ctx = real_init(model, params)
        freed.discard(ctx)  # an address freed before may come back
        return ctx

    def get_memory(ctx):
        memory_of[real_memory(ctx)] = ctx
        return real_memory(ctx)

    def free(ctx):
        assert ctx not in freed, "a context freed twice"
        real_free(ctx)
        freed.add(ctx)

    for name in CALLS_ON_CONTEXT:
        watch(name, False)
    for name in CALLS_ON_MEMORY:
        watch(name, True)
    monkeypatch.setattr(llama_cpp, "llama_init_from_model", init)
    monkeypatch.setattr(llama_cpp, "llama_get_memory", get_memory)
    monkeypatch.setattr(llama_cpp, "llama_free", free)
    return freed


@pytest.fixture
def two_streams(tiny_config):
    return tiny_config.with_(n_ctx=2048, capacity=2, kv_unified=None)  # 2 streams of 1,024 cells


def fail_once(real, failure):
    """`real`, but its first call fails (returns `failure`'s value, or raises it)."""
    calls = []

    def call(*args):
        calls.append(args)
        if len(calls) == 1:
            if isinstance(failure, BaseException):
                raise failure
            return failure
        return real(*args)

    return call


def restream_fails(state, n_stream):
    raise StateFormatError("injected")


# where the move fails, and whether the old layout can be built again after it
FAULTS = {
    "save": (lambda mp: mp.setattr(LlamaBackend, "seq_save", fail_once(LlamaBackend.seq_save, None)), "kept"),
    "save raises": (lambda mp: mp.setattr(LlamaBackend, "seq_save", fail_once(LlamaBackend.seq_save, MemoryError())), "kept"),
    "free": (lambda mp: mp.setattr(llama_cpp, "llama_free", fail_once(llama_cpp.llama_free, RuntimeError("injected"))), "lost"),
    "new context": (
        lambda mp: mp.setattr(llama_cpp, "llama_init_from_model", fail_once(llama_cpp.llama_init_from_model, None)),
        "kept",
    ),
    "no context at all": (lambda mp: mp.setattr(llama_cpp, "llama_init_from_model", lambda model, params: None), "lost"),
    "stream-count rewrite": (lambda mp: mp.setattr(context, "restream", restream_fails), "kept"),
    "restore": (lambda mp: mp.setattr(llama_cpp, "llama_state_seq_set_data", lambda *args: 0), "lost"),
}


@pytest.mark.parametrize("fault", list(FAULTS))
def test_a_move_that_fails_leaves_the_old_layout_serving_or_every_request_ended(
    two_streams, freed_never_touched, fault, monkeypatch
):
    driver = Driver(two_streams)
    try:
        before = driver.ask("Chat a: tell me a story.", "a")
        inject, outcome = FAULTS[fault]
        inject(monkeypatch)
        long = driver.ask(LONG + "Summarize.", "long")
        engine = driver.engine
        assert engine.layout_move.changes == 0
        assert long.reason is FinishReason.ERROR and long.error  # the chat that wanted one pool ends, with why
        again = driver.ask("Chat a: tell me a story.", "a")
        if outcome == "kept":  # the old layout serves every chat as before
            assert engine.backend.streams and engine.backend.lost is None and "a stream holds 1024" in long.error
            assert again.ok and again.text == before.text
            assert again.stats.cached_tokens == before.stats.prompt_tokens - 1  # its cells were carried back
        else:  # stopped: every request ends with the reason, new ones too
            assert engine.backend.lost is not None and engine.backend.ctx is None
            assert long.fault is not None and "load it again" in long.error
            assert again.reason is FinishReason.ERROR and "load it again" in again.error
            assert engine.figures.snapshot.kv_layout.startswith("none (the KV layout could not change")
            assert engine.kv.cells_used == 0 and not engine.has_work()
    finally:
        driver.close()


def test_a_failed_save_is_not_tried_again_at_every_step_and_the_pool_keeps_serving(two_streams, monkeypatch):
    driver = Driver(two_streams)
    try:
        driver.ask(LONG + "Summarize.", "long")
        assert driver.engine.layout_move.changes == 1 and not driver.engine.backend.streams
        tries = []
        real = LlamaBackend.relayout

        def relayout(self, layout, seq_ids):
            tries.append(layout.unified)
            return real(self, layout, seq_ids)

        monkeypatch.setattr(LlamaBackend, "relayout", relayout)
        monkeypatch.setattr(LlamaBackend, "seq_save", lambda self, seq_id, size: None)
        steps = driver.engine.figures.snapshot.steps
        # two short chats take both slots: every chat fits a stream, the move back is wanted at each step
        x = driver.ask("x: hello there.", "x", GREEDY.with_(max_tokens=24, ignore_eos=True))
        y = driver.ask("y: hello there.", "y", GREEDY.with_(max_tokens=24, ignore_eos=True))
        assert x.ok and y.ok and x.stats.gen_tokens == y.stats.gen_tokens == 24
        assert driver.engine.figures.snapshot.steps - steps >= 40
        assert 1 <= len(tries) <= 4 and not any(tries)  # once per change of requests, not once a step
        monkeypatch.undo()
        z = driver.ask("z: hello there.", "z")  # something changed: the move is tried again, and done
        assert z.ok and driver.engine.backend.streams and driver.engine.layout_move.changes == 2
        assert_cells_as_llama_holds_them(driver.engine)
    finally:
        driver.close()


def assert_cells_as_llama_holds_them(engine) -> None:
    """Each slot's cells as llama.cpp holds them (positions 0 to its length), and, in streams (no
    cell shared), the manager's count of cells in use is the sum of what each sequence holds."""
    backend, kv = engine.backend, engine.kv
    held = 0
    for slot in kv.slots:
        first, last = backend.seq_pos_min(slot.seq_id), backend.seq_pos_max(slot.seq_id)
        assert (first, last) == ((0, len(slot.tokens) - 1) if slot.tokens else (-1, -1)), slot.seq_id
        assert len(slot.cells) == len(slot.tokens)
        held += last - first + 1 if slot.tokens else 0
    if backend.streams:
        assert kv.cells_used == held


def test_shared_prefixes_are_counted_as_llama_holds_them_after_moving_to_one_pool_and_back(tiny_config):
    """In one pool three chats share the system prompt's cells (seq_cp); moved to streams, each holds
    a copy, and the manager counts what llama.cpp holds, then and after the move back."""
    driver = Driver(tiny_config.with_(n_ctx=3072, capacity=3, kv_unified=None))
    try:
        driver.ask(LONG + "Summarize.", "long")
        for chat in ("x", "y"):
            driver.ask(f"{chat}: hello there my friend", chat)
        engine = driver.engine
        assert not engine.backend.streams and engine.kv.cells_used < sum(len(s.tokens) for s in engine.kv.slots)
        assert_cells_as_llama_holds_them(engine)
        for chat in ("w", "v", "u"):  # the long chat's slot goes to another: back to streams
            driver.ask(f"{chat}: hello there my friend", chat)
        assert engine.backend.streams and engine.layout_move.changes == 2
        assert_cells_as_llama_holds_them(engine)
        back = driver.ask(LONG + "Summarize.", "long")  # to one pool again, its cells from RAM
        assert back.stats.restored_tokens > 1024 and not engine.backend.streams
        assert_cells_as_llama_holds_them(engine)
    finally:
        driver.close()
