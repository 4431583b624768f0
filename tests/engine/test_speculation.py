"""Speculative decoding by n-gram lookup (app/engine/spec/): drafted tokens verified in the
shared batch give a greedy reply token for token the one decoding without them gives, the rejected
guesses' cells are removed (the KV manager's count is checked against llama.cpp's after every
decode in the tests), and the next turn finds the whole history."""

from __future__ import annotations

import asyncio

import llama_cpp
import pytest
from helpers import Started, run, user
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from app.engine.events import FinishReason
from app.engine.llama.context import LlamaBackend
from app.engine.params import SpecType
from app.engine.sampling.params import GREEDY
from app.engine.spec.drafters import PROBE_EVERY, PROBE_LEAST_OFTEN, PROBE_LENGTH, Drafter, NgramDrafter
from app.engine.step_cost import StepCost

WORDS = ["the", "mill", "river", "flour", "daughter", "counted", "sacks", "of", "and", "ran", "past"]


@pytest.mark.unit
def test_the_drafter_proposes_what_followed_the_last_tokens_before():
    drafter = NgramDrafter(n_min=0, n_max=4)
    tokens = [1, 2, 3, 4, 5, 6, 9, 9, 2, 3, 4]
    assert drafter.draft(tokens, limit=4) == [5, 6, 9, 9]  # after (2, 3, 4): 5 6 9 9 ...
    assert drafter.draft(tokens, limit=2) == [5, 6]
    assert NgramDrafter(n_min=0, n_max=4).draft([7, 8, 9], limit=10) == []  # nothing seen before
    short = [1, 2, 3, 4, 5, 2, 3, 4]
    assert NgramDrafter(n_min=4, n_max=8).draft(short, limit=10) == [5, 2, 3, 4]
    assert NgramDrafter(n_min=5, n_max=8).draft(short, limit=10) == []  # fewer than n_min found


def costs(seconds) -> StepCost:
    cost = StepCost()
    for n in (1, 2, 4, 8, 16, 32):
        cost.observe(n, seconds(n))
    return cost


@pytest.mark.unit
def test_the_draft_length_is_what_pays_on_the_steps_measured_here():
    gpu = costs(lambda n: 0.010)  # a step of 32 tokens costs what one of 1 does
    cpu = costs(lambda n: 0.004 + 0.007 * n)  # each token costs most of a step
    linear = costs(lambda n: 0.011 * n)  # nothing fixed: a guess never pays
    sure, unsure = NgramDrafter(0, 16), NgramDrafter(0, 16)
    for _ in range(20):
        sure.verified(16, 16)
        unsure.verified(8, 1)
    assert sure.length(gpu, 1, 16) == unsure.length(gpu, 1, 16) == 16
    assert sure.length(cpu, 1, 16) == 16 and unsure.length(cpu, 1, 16) == 0
    assert unsure.length(cpu, 8, 16) == 0
    assert sure.length(linear, 1, 16) == sure.length(linear, 8, 16) == 0
    assert NgramDrafter(0, 16).length(StepCost(), 1, 5) == 0  # nothing measured yet
    probing = NgramDrafter(0, 16)
    for _ in range(20):
        probing.verified(8, 1)
    lengths = [probing.length(cpu, 1, 16) for _ in range(PROBE_EVERY)]
    assert lengths[:-1] == [0] * (PROBE_EVERY - 1) and lengths[-1] == PROBE_LENGTH  # now and then, look again
    assert probing.length(cpu, 8, 16) == 0  # but not where a probe costs much
    assert (sure.drafted, sure.accepted) == (320, 320)


def chats(n: int) -> list[list[dict[str, str]]]:
    text = " ".join(WORDS * 3)
    return [user(f"Chat {i}: repeat after me: {text} {text}") for i in range(n)]


async def replies(client, messages, params):
    return await asyncio.gather(*(client.complete(m, params, conversation_id=f"c{i}") for i, m in enumerate(messages)))


@pytest.mark.tiny
def test_greedy_replies_are_the_same_with_drafts_verified_in_the_batch(tiny_config):
    config = tiny_config.with_(n_ctx=4096, capacity=4)
    cases = [
        (chats(1), GREEDY.with_(max_tokens=120, ignore_eos=True)),
        (chats(2), GREEDY.with_(max_tokens=97, ignore_eos=True)),  # two sequences drafting in one step
        (chats(2), GREEDY.with_(max_tokens=60)),
        (chats(1), GREEDY.with_(max_tokens=80, stop=("flour",))),  # a stop string inside a draft
    ]

    async def main(spec):
        async with Started(config.with_(spec_type=spec)) as client:
            out = [await replies(client, m, p) for m, p in cases]
            return out, client.snapshot

    plain, plain_snapshot = run(main(SpecType.NONE))
    drafted, snapshot = run(main(SpecType.NGRAM))
    assert [[(f.text, f.reason, f.stats.gen_tokens) for f in c] for c in drafted] == [
        [(f.text, f.reason, f.stats.gen_tokens) for f in c] for c in plain
    ]
    assert plain_snapshot.drafted_tokens == 0
    assert snapshot.accepted_tokens > 0 and snapshot.drafted_tokens >= snapshot.accepted_tokens
    assert sum(f.stats.accepted_tokens for c in drafted for f in c) == snapshot.accepted_tokens
    # fewer steps than tokens: accepted drafts took none of their own
    assert snapshot.steps < plain_snapshot.steps


@pytest.mark.tiny
def test_a_request_that_asks_not_to_draft_never_does(tiny_config):
    async def main():
        async with Started(tiny_config.with_(spec_type=SpecType.NGRAM)) as client:
            params = GREEDY.with_(max_tokens=64, ignore_eos=True)
            drafted = await client.complete(chats(1)[0], params)
            plain = await client.complete(chats(1)[0], params.with_(speculate=False))
            return drafted, plain

    drafted, plain = run(main())
    assert drafted.stats.drafted_tokens > 0 and plain.stats.drafted_tokens == 0 and plain.text == drafted.text


@pytest.mark.tiny
def test_after_a_drafted_reply_the_next_turn_finds_its_whole_history(tiny_config):
    messages = chats(1)[0]
    params = GREEDY.with_(max_tokens=64, ignore_eos=True)

    async def main():
        async with Started(tiny_config.with_(spec_type=SpecType.NGRAM)) as client:
            first = await client.complete(messages, params, conversation_id="a")
            later = messages + [{"role": "assistant", "content": first.text}, {"role": "user", "content": "Again."}]
            second = await client.complete(later, params.with_(max_tokens=4), conversation_id="a")
            return first, second

    first, second = run(main())
    assert first.stats.accepted_tokens > 0 and first.reason is FinishReason.LENGTH
    assert second.stats.cached_tokens == first.stats.prompt_tokens + first.stats.gen_tokens - 1


@pytest.mark.tiny
@settings(max_examples=8, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    words=st.lists(st.sampled_from(WORDS), min_size=3, max_size=40),
    max_tokens=st.integers(1, 90),
    eos=st.booleans(),
    penalty=st.sampled_from([1.0, 1.1, 1.3]),
)
def test_any_prompt_gets_the_same_greedy_reply_with_or_without_drafts(tiny_config, words, max_tokens, eos, penalty):
    # built to draft: the reply starts as an earlier assistant turn did, so from its first step its last
    # tokens were seen before, and drafts of at least one are made whatever the costs say
    text = " ".join(words)
    messages = [*user(text), {"role": "assistant", "content": text}, *user(text)]
    params = GREEDY.with_(max_tokens=max_tokens, ignore_eos=eos, repeat_penalty=penalty)

    async def main(spec):
        async with Started(tiny_config.with_(n_ctx=2048, capacity=2, spec_type=spec, spec_draft_n_min=1)) as client:
            start = await client.call(lambda engine: engine.backend.vocab.tokenize(text, add_special=False)[:2])
            return await client.complete(messages, params, reply_prefix=tuple(start))

    plain, drafted = run(main(SpecType.NONE)), run(main(SpecType.NGRAM))
    assert (drafted.text, drafted.reason, drafted.stats.gen_tokens) == (plain.text, plain.reason, plain.stats.gen_tokens)
    assert plain.stats.drafted_tokens == 0
    # a reply of one or two tokens has no room for a draft (the token after it is one more)
    assert drafted.stats.drafted_tokens > 0 or plain.stats.gen_tokens < 3, drafted.stats


@pytest.mark.unit
def test_a_step_size_never_measured_costs_what_its_measured_neighbours_say():
    cost = StepCost()
    cost.observe(1, 0.010)
    assert cost.of(1) == 0.010 and cost.of(5) is None  # one size: nothing to draw a line with
    cost.observe(9, 0.050)
    assert cost.of(5) == pytest.approx(0.030)  # between two sizes: on the line
    assert cost.of(17) == pytest.approx(0.090)  # above them: their slope, on
    cost.observe(9, 0.070)
    assert cost.of(9) == pytest.approx(0.052)  # a size measured again moves a tenth of the way


@pytest.mark.unit
def test_probes_come_ever_more_seldom_while_they_find_nothing_right_and_never_where_nothing_could_pay():
    cpu = costs(lambda n: 0.004 + 0.007 * n)
    drafter = Drafter(0, 16)
    for _ in range(20):
        drafter.verified(8, 1)  # seldom right: no draft pays, only probes
    gaps = []
    for _ in range(4):
        steps = 1
        while drafter.length(cpu, 1, 16) == 0:
            steps += 1
        gaps.append(steps)
        drafter.verified(PROBE_LENGTH, 0)  # the probe found nothing right either
    assert gaps == [PROBE_EVERY, 2 * PROBE_EVERY, 4 * PROBE_EVERY, 8 * PROBE_EVERY]
    drafter.verified(PROBE_LENGTH, PROBE_LENGTH)  # all right: back to the first pace
    assert [drafter.length(cpu, 1, 16) for _ in range(PROBE_EVERY)][-1] == PROBE_LENGTH
    # a draft model as slow as the model: even guesses all right never pay, so it never probes
    slow = Drafter(0, 16)
    assert all(slow.length(cpu, 1, 16, guess_s=cpu.of(1)) == 0 for _ in range(4 * PROBE_EVERY))
    assert PROBE_LEAST_OFTEN >= 8 * PROBE_EVERY


@pytest.mark.unit
def test_a_fewest_draft_length_drafts_at_least_that_whatever_was_measured():
    linear = costs(lambda n: 0.011 * n)  # nothing fixed: a guess never pays
    assert Drafter(4, 16).length(linear, 8, 16) == 4
    assert Drafter(4, 16).length(StepCost(), 1, 16) == 4  # nothing measured yet
    assert Drafter(4, 16).length(linear, 1, 3) == 0  # fewer fit: none
    assert Drafter(0, 16).length(linear, 8, 16) == 0


def refuses_partial_removal(monkeypatch):
    """The backend's memory acts as a recurrent one: removing part of a sequence is refused."""
    real = LlamaBackend.seq_rm

    def seq_rm(self, seq_id, p0, p1=-1):
        return False if p0 > 0 or p1 >= 0 else real(self, seq_id, p0, p1)

    monkeypatch.setattr(LlamaBackend, "seq_rm", seq_rm)


@pytest.mark.tiny
def test_a_model_whose_memory_refuses_partial_removal_never_drafts_and_says_so(tiny_config, monkeypatch):
    refuses_partial_removal(monkeypatch)
    monkeypatch.setattr(llama_cpp, "llama_model_is_hybrid", lambda model: True)  # as llama.cpp tells of such a model

    async def main():
        async with Started(tiny_config.with_(spec_type=SpecType.NGRAM)) as client:
            final = await client.complete(chats(1)[0], GREEDY.with_(max_tokens=48, ignore_eos=True))
            return final, client.snapshot, client.model_info

    final, snapshot, info = run(main())
    assert final.ok and final.stats.gen_tokens == 48
    assert snapshot.drafted_tokens == 0
    assert [n for n in info.notices if n.startswith("speculative decoding is off")] == [
        "speculative decoding is off for this model: its memory (recurrent or hybrid) cannot remove rejected guesses"
    ]
    assert (
        info.drafts_refused == "its memory (recurrent or hybrid) cannot remove rejected guesses"
    )  # the panes' Draft ahead reads it


@pytest.mark.model  # the tiny model's replies are runs of one token: its guesses are never wrong
def test_rejected_guesses_a_memory_cannot_remove_are_read_again_not_kept(config, monkeypatch):
    """Where seq_rm refuses to drop the rejected guesses anyway, the sequence reads its tokens again
    (the engine checks its cells against llama.cpp's after every decode) and the reply is the plain one.
    Drafts at every step (--spec-draft-n-min), not as the measured step costs say: on a loaded machine
    those made drafts few enough to be all right."""
    config = config.with_(n_ctx=2048, capacity=2, spec_draft_n_min=2)
    params = GREEDY.with_(max_tokens=64, ignore_eos=True)

    async def main(spec):
        async with Started(config.with_(spec_type=spec)) as client:
            return await client.complete(chats(1)[0], params)

    plain = run(main(SpecType.NONE))
    refuses_partial_removal(monkeypatch)
    drafted = run(main(SpecType.NGRAM))
    assert drafted.stats.drafted_tokens > drafted.stats.accepted_tokens  # some guesses were wrong
    assert drafted.stats.recomputed_tokens > 0
    assert (drafted.text, drafted.stats.gen_tokens) == (plain.text, plain.stats.gen_tokens)
