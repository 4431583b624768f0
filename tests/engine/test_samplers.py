"""Each of llama.cpp's samplers acts on the bundled model's replies as it should: a logit bias bans a
token, XTC moves a greedy reply, DRY breaks a repetition, the sampler order counts, and the random
ones (Mirostat, top-nσ, typical-p, dynamic temperature) give the same reply again with a seed; the
greedy fast path stays right (sampling/draw.py)."""

from __future__ import annotations

import pytest
from helpers import Started, collect, run, token_ids, user

from app.engine.params import EngineConfig, ServingMode
from app.engine.sampling.draw import Draw, draw_for
from app.engine.sampling.params import GREEDY, SamplingParams

pytestmark = pytest.mark.model

GREEDY_40 = GREEDY.with_(max_tokens=40)
REPEATED = "the cat sat on the mat, the cat sat on the mat, the cat sat on the mat,"
SEEDED = SamplingParams(seed=11, max_tokens=20)
QUESTION = user("Write a short poem about the sea.")


def config(model_path: str) -> EngineConfig:
    # one request at a time: the same batches in every run, so a seeded reply is the same reply
    return EngineConfig(model_path, n_ctx=2048, capacity=2, n_threads=2, mode=ServingMode.SEQUENTIAL)


def replies(model_path: str, asks: list[tuple[SamplingParams, dict]]) -> list[tuple[str, list[int]]]:
    """Each (params, what to send) in turn, on one engine: the reply's text and token ids."""

    async def go():
        async with Started(config(model_path)) as client:
            out = []
            for params, sent in asks:
                tokens, final = await collect(client.generate(params=params, **sent))
                assert final.error is None, final.error
                out.append(("".join(e.text for e in tokens), token_ids(tokens)))
            return out

    return run(go())


def test_a_logit_bias_of_minus_100_bans_a_token_given_by_id_or_by_text(model_path):
    async def go():
        async with Started(config(model_path)) as client:
            (cat,) = await client.tokenize(" cat")
            out = [cat]
            for bias in ((), ((cat, -100.0),), ((" cat", -100.0),), ((" dog", 30.0),)):
                tokens, _ = await collect(client.generate(params=GREEDY_40.with_(logit_bias=bias), prompt=REPEATED))
                out.append(("".join(e.text for e in tokens), token_ids(tokens)))
            return out

    cat, plain, banned_by_id, banned_by_text, favoured = run(go())
    assert cat in plain[1]
    assert cat not in banned_by_id[1] and banned_by_id == banned_by_text
    assert favoured[0].count(" dog") > plain[0].count(" dog")


def test_xtc_with_probability_1_moves_a_greedy_reply_the_same_way_each_time(model_path):
    xtc = GREEDY_40.with_(xtc_probability=1.0, xtc_threshold=0.1)
    assert draw_for(xtc, in_graph=False) is Draw.CHAIN and xtc.is_greedy  # it removes the top choices: no fast path
    plain, moved, again = replies(
        model_path, [(GREEDY_40, {"messages": QUESTION}), (xtc, {"messages": QUESTION}), (xtc, {"messages": QUESTION})]
    )
    assert moved[1] != plain[1] and moved == again


def test_dry_breaks_a_repetition_the_plain_greedy_draw_goes_on_with(model_path):
    dry = GREEDY.with_(max_tokens=48, dry_multiplier=0.8)
    left_out = dry.with_(samplers=("top_k", "temperature"))  # DRY not in the order: it does not run
    plain, broken, unbroken = replies(
        model_path,
        [(GREEDY.with_(max_tokens=48), {"prompt": REPEATED}), (dry, {"prompt": REPEATED}), (left_out, {"prompt": REPEATED})],
    )
    assert plain[0].count("the cat sat on the mat") >= 4  # the plain draw repeats the phrase
    assert broken[0].count("the cat sat on the mat") <= 1, broken[0]
    assert unbroken == plain


RANDOM = (
    dict(mirostat=1),
    dict(mirostat=2, mirostat_tau=3.0),
    dict(top_n_sigma=0.3),
    dict(typical_p=0.5),
    dict(dynatemp_range=0.6),
)


def test_each_random_sampler_gives_the_same_reply_again_with_a_seed_and_another_than_the_plain_draw(model_path):
    asks = [(SEEDED, {"messages": QUESTION})] + [
        (SEEDED.with_(**knobs), {"messages": QUESTION}) for knobs in RANDOM for _ in (1, 2)
    ]
    plain, *drawn = replies(model_path, asks)
    for knobs, first, again in zip(RANDOM, drawn[0::2], drawn[1::2], strict=True):
        assert first == again, knobs
        assert first[1] != plain[1], knobs


def test_the_sampler_order_counts_and_temperature_0_without_its_sampler_draws_at_random(model_path):
    unordered = GREEDY_40.with_(samplers=("top_k", "min_p"), seed=3)  # no temperature: llama.cpp draws at 1
    assert not unordered.is_greedy and draw_for(unordered, in_graph=False) is Draw.CHAIN
    greedy, drawn, other_seed = replies(
        model_path,
        [
            (GREEDY_40, {"messages": QUESTION}),
            (unordered, {"messages": QUESTION}),
            (unordered.with_(seed=4), {"messages": QUESTION}),
        ],
    )
    assert drawn[1] != greedy[1] and drawn[1] != other_seed[1]


def test_the_greedy_fast_path_gives_the_chain_s_reply_where_no_sampler_can_move_the_likeliest_token(model_path):
    """Cuts (top-k, top-p, min-p, top-nσ), a dynamic temperature's exponent and Mirostat keep the top
    token at temperature 0: the fast path (one argmax) is taken, and it is the chain's reply (asking
    for token probabilities runs the chain on the host)."""
    keeps = GREEDY_40.with_(top_n_sigma=0.5, top_k=3, min_p=0.2, dynatemp_exponent=2.0, mirostat=2)
    assert draw_for(keeps, in_graph=False) is Draw.ARGMAX
    fast, by_chain = replies(model_path, [(keeps, {"messages": QUESTION}), (keeps.with_(n_probs=1), {"messages": QUESTION})])
    assert fast[1] == by_chain[1]


def test_in_the_decode_graph_a_chain_of_samplers_without_a_graph_form_is_finished_on_the_host(model_path):
    """Backend sampling runs a chain's first samplers in the graph; DRY, XTC, typical-p and Mirostat
    have no graph form, so llama.cpp stops there and the rest runs on the host: the replies are the
    host chain's, token for token."""
    asks = [
        GREEDY.with_(max_tokens=12, xtc_probability=1.0),
        GREEDY.with_(max_tokens=12, dry_multiplier=0.8, repeat_penalty=1.2),
        SamplingParams(seed=5, max_tokens=12, typical_p=0.5),
        SamplingParams(seed=5, max_tokens=12, mirostat=2),
    ]

    async def go(in_graph: bool):
        async with Started(config(model_path).with_(backend_sampling=in_graph)) as client:
            out = []
            for params in asks:
                tokens, final = await collect(client.generate(QUESTION, params))
                assert final.error is None, final.error
                out.append(token_ids(tokens))
            return out

    assert run(go(True)) == run(go(False))
