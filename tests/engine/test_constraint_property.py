"""Constrained replies on the tiny model (whose random weights push against any format): whatever
schema llguidance accepts and whatever the sampling settings, a reply that stops validates against
its schema; many constrained requests at once at varied temperatures, with a CPU hog beside the
engine, end without an error (no clock decides a reply)."""

from __future__ import annotations

import asyncio
import json
import multiprocessing
import time

import jsonschema
import pytest
from helpers import Started, run, user
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

import app.engine.llama.constraint as constraint_module
from app.client import EngineClient
from app.engine.events import FinishReason
from app.engine.params import SpecType
from app.engine.sampling.constraints import ConstraintError, schema_grammar
from app.engine.sampling.params import GREEDY, SamplingParams

pytestmark = pytest.mark.tiny

_names = st.sampled_from(["a", "b", "name", "n", "ok", "items"])
_leaves = st.one_of(
    st.builds(lambda n: {"type": "string", "maxLength": n}, st.integers(0, 6)),
    st.builds(
        lambda lo, span: {"type": "integer", "minimum": lo, "maximum": lo + span}, st.integers(-50, 50), st.integers(0, 99)
    ),
    st.just({"type": "boolean"}),
    st.just({"type": "null"}),
    st.builds(
        lambda values: {"enum": values},
        st.lists(st.one_of(st.integers(-3, 3), st.text("xyz", max_size=3)), min_size=1, max_size=3, unique=True),
    ),
    st.builds(lambda p: {"type": "string", "pattern": p}, st.sampled_from(["^[a-c]{1,3}$", "^[0-9]+-x$", "^(yes|no)$"])),
)


def _object(children):
    def build(props, required_mask, closed):
        names = list(props)
        schema = {"type": "object", "properties": props, "required": [n for n, r in zip(names, required_mask, strict=False) if r]}
        return schema | ({"additionalProperties": False} if closed else {})

    return st.builds(
        build, st.dictionaries(_names, children, min_size=1, max_size=3), st.lists(st.booleans(), max_size=3), st.booleans()
    )


schemas = st.recursive(
    _leaves,
    lambda inner: st.one_of(
        _object(inner),
        st.builds(lambda items, n: {"type": "array", "items": items, "maxItems": n}, inner, st.integers(0, 3)),
        st.builds(lambda a, b: {"anyOf": [a, b]}, inner, inner),
    ),
    max_leaves=6,
)
samplings = st.builds(
    SamplingParams,
    max_tokens=st.just(48),
    temperature=st.sampled_from([0.0, 0.3, 0.8, 1.5]),
    top_k=st.sampled_from([0, 1, 40]),
    top_p=st.sampled_from([0.5, 0.95, 1.0]),
    min_p=st.sampled_from([0.0, 0.05]),
    repeat_penalty=st.sampled_from([1.0, 1.3]),
    seed=st.integers(0, 2**31),
)


@pytest.fixture(scope="module")
def shared_engine(tiny_model_path):
    from app.engine.params import EngineConfig

    loop = asyncio.new_event_loop()
    client = EngineClient(EngineConfig(tiny_model_path, n_ctx=2048, n_batch=256, capacity=4, n_threads=2))
    loop.run_until_complete(client.start())
    yield loop, client
    loop.run_until_complete(client.close())
    loop.close()


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(schema=schemas, params=samplings)
def test_any_schema_llguidance_takes_gives_replies_valid_under_it_or_cut_by_max_tokens(shared_engine, schema, params):
    try:
        grammar = schema_grammar(schema)
    except ConstraintError:
        assume(False)
    loop, client = shared_engine
    final = loop.run_until_complete(asyncio.wait_for(client.complete(user("JSON?"), params.with_(grammar=grammar)), 60))
    assert final.reason in (FinishReason.STOP, FinishReason.LENGTH), final.error
    if final.reason is FinishReason.STOP:
        jsonschema.validate(json.loads(final.text), schema)


def _hog(stop):
    while not stop.is_set():
        sum(i * i for i in range(10_000))


def test_many_constrained_requests_at_varied_temperatures_beside_a_cpu_hog_end_without_error(tiny_config):
    schema = {
        "type": "object",
        "properties": {"n": {"type": "integer"}, "s": {"type": "string", "maxLength": 8}},
        "required": ["n", "s"],
    }
    grammar = schema_grammar(schema)
    stop = multiprocessing.Event()
    hogs = [multiprocessing.Process(target=_hog, args=(stop,), daemon=True) for _ in range(2)]

    async def main():
        async with Started(tiny_config) as client:
            requests = [
                client.complete(
                    user(f"Item {i}?"), SamplingParams(max_tokens=24, temperature=(i % 5) * 0.4, seed=i, grammar=grammar)
                )
                for i in range(40)
            ]
            return await asyncio.gather(*requests)

    for hog in hogs:
        hog.start()
    try:
        t0 = time.monotonic()
        finals = run(main())
    finally:
        stop.set()
        for hog in hogs:
            hog.join(5)
    assert all(f.reason in (FinishReason.STOP, FinishReason.LENGTH) for f in finals), [f.error for f in finals if f.error]
    for final in finals:
        if final.reason is FinishReason.STOP:
            jsonschema.validate(json.loads(final.text), schema)
    assert time.monotonic() - t0 < 300


@pytest.mark.parametrize("pool", [False, True], ids=["masks filled in turn", "llguidance's pool"])
def test_a_constrained_greedy_reply_drafts_and_each_drafted_row_is_masked(tiny_config, monkeypatch, pool):
    """n-gram guesses of a repetitive format are verified against rows masked as the guesses before
    them leave the grammar: the reply drafts, takes some guesses, and still follows its schema; with
    the masks filled by llguidance's pool (machines of 4 cores or more) as on this one."""
    monkeypatch.setattr(constraint_module, "PAR_MIN_CPUS", 1 if pool else 1 << 20)
    row = {"type": "object", "properties": {"k": {"enum": ["aa", "bb"]}}, "required": ["k"]}
    schema = {"type": "array", "items": row, "minItems": 12, "maxItems": 12}
    config = tiny_config.with_(spec_type=SpecType.NGRAM, spec_draft_n_min=2)

    async def main():
        async with Started(config) as client:
            return await client.complete(user("List"), GREEDY.with_(max_tokens=200, grammar=schema_grammar(schema)))

    final = run(main())
    assert final.reason is FinishReason.STOP, (final.reason, final.error, final.text)
    jsonschema.validate(json.loads(final.text), schema)
    assert final.stats.drafted_tokens > 0 and final.stats.accepted_tokens > 0, final.stats
