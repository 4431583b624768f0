"""Speculative decoding with a draft model (llama.cpp's -md, app/engine/llama/draft.py): a small model
of the same vocabulary guesses each greedy sequence's next tokens in a context of its own, the guesses
are verified in the target's shared batch, and the reply is token for token the one decoding without
them gives. A model drafting for itself guesses right every time under greedy decoding: a check of
the mechanics, not of the speed (that needs a small model beside a large one: docs/performance.md).
The KV manager's cell count is checked against llama.cpp's after every decode in the tests."""

from __future__ import annotations

import asyncio

import aiohttp
import openai
import pytest
from conftest import write_tiny_model
from helpers import Started, run, user
from serving import Serving

from app.cli import build_parser, engine_overrides
from app.engine.errors import ModelLoadError
from app.engine.params import SpecType
from app.engine.sampling.params import GREEDY

WORDS = ["the", "mill", "river", "flour", "daughter", "counted", "sacks", "of", "and", "ran", "past"]
TEXT = " ".join(WORDS * 3)
# drafts of 4 at every step, whatever this machine's step costs say (n_min), so the mechanics run
DRAFTING = {"spec_type": SpecType.DRAFT, "spec_draft_n_min": 4, "spec_draft_n_max": 8}


def chats(n: int) -> list[list[dict[str, str]]]:
    return [user(f"Chat {i}: repeat after me: {TEXT} {TEXT}") for i in range(n)]


async def replies(client, messages, params):
    return await asyncio.gather(*(client.complete(m, params, conversation_id=f"c{i}") for i, m in enumerate(messages)))


def outcome(finals):
    return [(f.text, f.reason, f.stats.gen_tokens) for f in finals]


CASES = [
    (chats(1), GREEDY.with_(max_tokens=90, ignore_eos=True)),
    (chats(3), GREEDY.with_(max_tokens=61, ignore_eos=True)),  # three sequences drafting in one step
    (chats(2), GREEDY.with_(max_tokens=70, stop=("flour",))),  # a stop string inside a draft
]


def run_cases(config):
    async def main():
        async with Started(config) as client:
            out = [await replies(client, m, p) for m, p in CASES]
            # a follow-up turn: the draft model keeps the shared prefix and reads only the rest
            first = out[0][0]
            later = [*CASES[0][0][0], {"role": "assistant", "content": first.text}, {"role": "user", "content": "Again."}]
            out.append([await client.complete(later, CASES[0][1], conversation_id="c0")])
            return out, client.snapshot

    return run(main())


def same_replies_drafted_by(draft_model: str, config):
    """The cases' replies drafted for by `draft_model`, checked to be those without drafts; the
    drafted ones and the engine's figures."""
    config = config.with_(capacity=4)
    plain, _ = run_cases(config)
    drafted, snapshot = run_cases(config.with_(spec_draft_model=draft_model, **DRAFTING))
    assert [outcome(c) for c in drafted] == [outcome(c) for c in plain]
    return drafted, snapshot


@pytest.mark.tiny
def test_a_model_drafting_for_itself_is_always_right_and_the_replies_are_the_same(tiny_config, tiny_model_path):
    drafted, snapshot = same_replies_drafted_by(tiny_model_path, tiny_config)
    assert snapshot.drafted_tokens > 100 and snapshot.accepted_tokens == snapshot.drafted_tokens
    assert all(f.stats.drafted_tokens > 0 for c in drafted for f in c)
    assert snapshot.steps < sum(f.stats.gen_tokens for c in drafted for f in c)  # accepted guesses took no step


@pytest.mark.model
def test_another_model_drafts_guesses_that_are_checked_and_the_reply_is_the_same(tiny_config, model_path):
    # the default model guessing what the tiny one (random weights, of its vocabulary) will say: mostly wrong
    _, snapshot = same_replies_drafted_by(model_path, tiny_config)
    assert snapshot.drafted_tokens > 100 and snapshot.accepted_tokens < snapshot.drafted_tokens  # wrong ones removed


@pytest.mark.tiny
def test_greedy_replies_under_a_repeat_penalty_are_drafted_for_and_stay_the_same(tiny_config, tiny_model_path):
    """Each guess is checked against the chain's own draw, row by row, so that each sees the penalties
    of the tokens taken before it. (A frequency penalty brings the tiny model's logits within 0.01 of
    each other, where a batch's shape decides the greedy token either way: not used here.)"""
    params = GREEDY.with_(max_tokens=90, repeat_penalty=1.1, ignore_eos=True)

    async def main(config):
        async with Started(config.with_(capacity=4)) as client:
            return await replies(client, chats(2), params)

    plain = run(main(tiny_config))
    drafted = run(main(tiny_config.with_(spec_draft_model=tiny_model_path, **DRAFTING)))
    assert [(f.text, f.stats.gen_tokens) for f in drafted] == [(f.text, f.stats.gen_tokens) for f in plain]
    assert all(0 < f.stats.accepted_tokens <= f.stats.drafted_tokens for f in drafted)


@pytest.mark.tiny
def test_a_draft_model_unsure_of_its_guesses_drafts_nothing(tiny_config, tiny_model_path):
    async def main():
        config = tiny_config.with_(spec_draft_model=tiny_model_path, spec_draft_p_min=1.0, **DRAFTING)
        async with Started(config) as client:
            return await client.complete(chats(1)[0], GREEDY.with_(max_tokens=40, ignore_eos=True))

    final = run(main())
    assert final.stats.gen_tokens == 40 and final.stats.drafted_tokens == 0  # no guess is certain to it


@pytest.mark.tiny
def test_a_draft_model_with_another_vocabulary_is_refused_naming_the_token(tiny_config, model_path, tmp_path):
    other = write_tiny_model(model_path, tmp_path / "renamed.gguf", "--token-text", "100=zzzq")

    async def main():
        async with Started(tiny_config.with_(spec_draft_model=other, spec_type=SpecType.DRAFT)):
            pass

    with pytest.raises(ModelLoadError, match=r"draft model renamed.gguf cannot draft for this model: token 100 is 'zzzq'"):
        run(main())


@pytest.mark.tiny
def test_a_missing_draft_model_is_refused_with_its_name(tiny_config, tmp_path):
    async def main():
        async with Started(tiny_config.with_(spec_draft_model=str(tmp_path / "nowhere.gguf"), spec_type=SpecType.DRAFT)):
            pass

    with pytest.raises(ModelLoadError, match="nowhere.gguf"):
        run(main())


@pytest.mark.unit
def test_the_draft_model_flag_alone_chooses_draft_simple():
    parse = build_parser().parse_args
    assert engine_overrides(parse(["-md", "small.gguf"])) == {"spec_draft_model": "small.gguf", "spec_type": SpecType.DRAFT}
    named = engine_overrides(parse(["--spec-type", "ngram-simple", "--model-draft", "small.gguf", "--spec-draft-p-min", "0.5"]))
    assert named == {"spec_type": SpecType.NGRAM, "spec_draft_model": "small.gguf", "spec_draft_p_min": 0.5}
    with pytest.raises(ValueError, match="needs one: give its GGUF file"):
        engine_overrides(parse(["--spec-type", "draft-simple"]))
    with pytest.raises(SystemExit):
        parse(["--spec-draft-p-min", "1.5"])


@pytest.mark.tiny
def test_serve_drafts_with_a_draft_model_for_the_official_client_and_metrics_count_the_guesses(tiny_config, tiny_model_path):
    async def main():
        config = tiny_config.with_(spec_draft_model=tiny_model_path, **DRAFTING)
        async with Serving(config) as (_client, _server, url):
            api = openai.AsyncOpenAI(base_url=f"{url}/v1", api_key="none")
            reply = await api.chat.completions.create(
                model="m", messages=chats(1)[0], max_tokens=48, temperature=0, extra_body={"ignore_eos": True}
            )
            async with aiohttp.ClientSession() as http, http.get(f"{url}/metrics") as r:
                return reply, await r.text()

    reply, text = run(main())
    values = dict(line.rsplit(" ", 1) for line in text.splitlines() if not line.startswith("#"))
    assert reply.usage.completion_tokens == 48
    drafted = float(values["batch_playground_draft_tokens_total"])
    assert drafted > 20 and float(values["batch_playground_draft_accepted_tokens_total"]) == drafted
