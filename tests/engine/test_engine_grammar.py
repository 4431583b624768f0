"""A reply constrained by a grammar, in the engine on the tiny model: it follows the grammar (GBNF,
Lark or a regular expression, all through llguidance), a grammar that does not parse or is past
llguidance's limits is refused before the request runs, while the others go on."""

from __future__ import annotations

import asyncio
import re

import pytest
from helpers import Started, run, user

import app.engine.sampling.constraints as grammar_module
from app.engine.events import Fault, FinishReason
from app.engine.sampling.params import GREEDY, SamplingParams

pytestmark = pytest.mark.tiny

YES_NO = 'root ::= ("yes" | "no") " " ("yes" | "no")'


def test_a_reply_follows_its_grammar_greedy_or_sampled_and_a_bad_one_is_refused(tiny_config):
    async def main():
        async with Started(tiny_config) as client:
            greedy = await client.complete(user("Well?"), GREEDY.with_(max_tokens=16, grammar=YES_NO))
            sampled = await client.complete(user("Well?"), SamplingParams(max_tokens=16, seed=1, grammar=YES_NO))
            bad = await client.complete(user("Well?"), GREEDY.with_(max_tokens=4, grammar="root ::= ("))
            return greedy, sampled, bad

    greedy, sampled, bad = run(main())
    for final in (greedy, sampled):
        assert final.reason is FinishReason.STOP and final.text.split(" ")[0] in ("yes", "no")
        assert final.text.split(" ")[1] in ("yes", "no"), final.text
    assert bad.reason is FinishReason.ERROR and bad.fault is Fault.REQUEST and "does not parse" in bad.error
    assert bad.stats.gen_tokens == 0


def test_a_grammar_compiled_once_serves_replies_at_once_and_later_each_its_own(tiny_config):
    """A grammar is compiled once (grammar.py keeps the last 64) and each request gets its own
    matcher: three replies under the same one at once each follow it from its start, and so does one
    after twenty other grammars."""
    others = [f'root ::= "{word}" (" " ("yes" | "no"))?' for word in map(str, range(20))]

    async def main():
        async with Started(tiny_config) as client:
            params = SamplingParams(max_tokens=16, grammar=YES_NO)
            together = await asyncio.gather(*(client.complete(user("Well?"), params.with_(seed=i)) for i in range(3)))
            between = [await client.complete(user("Well?"), GREEDY.with_(max_tokens=4, grammar=g)) for g in others]
            later = await client.complete(user("Well?"), params.with_(seed=7))
            return together, between, later

    together, between, later = run(main())
    for final in (*together, later):
        assert final.reason is FinishReason.STOP and re.fullmatch(r"(yes|no) (yes|no)", final.text), final.text
    assert [f.text.split(" ")[0] for f in between] == [str(i) for i in range(20)]


def test_a_grammar_past_llguidances_limits_is_refused_before_its_reply_and_the_others_go_on(tiny_config, monkeypatch):
    """The limits are llguidance's own counts (here its grammar size, made small), never a clock: the
    same grammar is refused on any machine and load, before a token is drawn."""
    monkeypatch.setattr(grammar_module, "LIMITS", grammar_module.LLParserLimits(max_grammar_size=20))
    many = "root ::= " + " | ".join(f'"w{i}"' for i in range(40))

    async def main():
        async with Started(tiny_config) as client:
            return await asyncio.gather(
                client.complete(user("Well?"), GREEDY.with_(max_tokens=16, grammar=many)),
                client.complete(user("Go on."), GREEDY.with_(max_tokens=24, ignore_eos=True)),
            )

    costly, free = run(main())
    assert costly.reason is FinishReason.ERROR and costly.fault is Fault.REQUEST and "grammar size" in costly.error
    assert costly.stats.gen_tokens == 0
    assert free.reason is FinishReason.LENGTH and free.stats.gen_tokens == 24


def test_lark_and_regular_expressions_hold_replies_as_llguidance_takes_them(tiny_config):
    async def main():
        async with Started(tiny_config) as client:
            lark = await client.complete(user("Well?"), SAMPLED.with_(grammar='start: ("yes" | "no") ("!" | "?")'))
            regex = await client.complete(
                user("Well?"), SAMPLED.with_(grammar=grammar_module.regex_grammar(r"[0-9]{3}-[a-c]{2}"))
            )
            return lark, regex

    lark, regex = run(main())
    assert lark.reason is FinishReason.STOP and re.fullmatch(r"(yes|no)[!?]", lark.text), lark.text
    assert regex.reason is FinishReason.STOP and re.fullmatch(r"[0-9]{3}-[a-c]{2}", regex.text), regex.text


# free until a space and the character after it (the trigger's group), then held to more such
# characters and " ok": the tiny model writes noise, whose text has spaces, never this ending
LAZY = 'root ::= [^ ]+ " ok"'
TRIGGER = r" (\S)"
SAMPLED = SamplingParams(
    max_tokens=24, seed=3, temperature=1.0, top_k=0, top_p=1.0, min_p=0.0, repeat_penalty=1.0
)  # greedy writes newlines


def test_a_lazy_grammar_lets_the_reply_run_free_until_its_trigger_then_holds_it(tiny_config):
    async def main():
        async with Started(tiny_config) as client:
            await client.complete(user("Well?"), SAMPLED)  # the prompt cached: each reply below reads it alike
            free = await client.complete(user("Well?"), SAMPLED)
            lazy = await client.complete(user("Well?"), SAMPLED.with_(grammar=LAZY, grammar_triggers=(TRIGGER,)))
            waiting = await client.complete(user("Well?"), SAMPLED.with_(grammar=LAZY, grammar_triggers=("^never",)))
            bad = await client.complete(user("Well?"), GREEDY.with_(max_tokens=4, grammar=LAZY, grammar_triggers=("(",)))
            after = await client.complete(user("Well?"), GREEDY.with_(max_tokens=8, ignore_eos=True))
            return free, lazy, waiting, bad, after

    free, lazy, waiting, bad, after = run(main())
    held = re.search(TRIGGER, free.text).start(1)  # where the free reply sets the trigger off
    assert lazy.text[:held] == free.text[:held], (free.text, lazy.text)  # free until then
    assert re.fullmatch(r"[^ ]+( ok)?", lazy.text[held:]), lazy.text  # the grammar's from there
    assert lazy.reason is FinishReason.LENGTH or lazy.text.endswith(" ok")
    # a trigger that never comes: the reply is the free one
    assert waiting.text == free.text and waiting.stats.gen_tokens == free.stats.gen_tokens
    assert bad.reason is FinishReason.ERROR and bad.fault is Fault.REQUEST and "not a regular expression" in bad.error
    assert after.reason is FinishReason.LENGTH and after.stats.gen_tokens == 8  # the engine goes on


def test_a_control_token_a_request_preserves_is_written_out_in_its_reply(tiny_config):
    """A tool syntax's marker that is one control token of the vocabulary (SamplingParams.preserved,
    llama.cpp's preserved tokens) reaches the reply as its text, for the syntax's parser to read;
    otherwise a control token is no text."""

    async def main():
        async with Started(tiny_config) as client:
            (marker,) = await client.tokenize("<|im_start|>")
            drawn = GREEDY.with_(max_tokens=2, logit_bias=((marker, 100.0),))
            plain = await client.complete(user("Well?"), drawn)
            kept = await client.complete(user("Well?"), drawn.with_(preserved=("<|im_start|>", "<not one token>")))
            return plain, kept

    plain, kept = run(main())
    assert plain.stats.gen_tokens == kept.stats.gen_tokens == 2 and "<|im_start|>" not in plain.text
    assert kept.text == "<|im_start|>" * 2


def test_a_tool_syntaxs_marker_that_is_a_control_token_is_drawn_as_that_token_under_its_grammar(tiny_config):
    """A grammar that writes a marker (SamplingParams.preserved) the vocabulary holds as one control
    token draws it as that token, as a model is trained to write it, whole or after a lazy
    grammar's trigger; without the marker named, the grammar's text is spelled in text pieces."""
    grammar = 'start: "<file_sep>" "<filename>"'
    markers = ("<file_sep>", "<filename>")

    async def main():
        async with Started(tiny_config) as client:
            (opening,) = await client.tokenize("<file_sep>")
            spelled = await client.complete(user("Well?"), GREEDY.with_(max_tokens=16, grammar=grammar))
            whole = await client.complete(user("Well?"), GREEDY.with_(max_tokens=16, grammar=grammar, preserved=markers))
            lazy = await client.complete(
                user("Well?"),
                GREEDY.with_(
                    max_tokens=16,
                    grammar=grammar,
                    grammar_triggers=("<file_sep>",),
                    preserved=markers,
                    logit_bias=((opening, 100.0),),  # the free reply opens with the trigger's token
                ),
            )
            return spelled, whole, lazy

    spelled, whole, lazy = run(main())
    assert spelled.text == "<file_sep><filename>" and spelled.stats.gen_tokens > 3
    for final in (whole, lazy):
        assert final.reason is FinishReason.STOP and final.text == "<file_sep><filename>", final.text
        assert final.stats.gen_tokens == 3  # the two markers, then the end the grammar leaves


def test_a_row_whose_grammar_allows_one_token_says_which_and_keeps_only_it(tiny_model_path):
    """A JSON key's quotes and colon leave one token possible: the mask says which (the drawer takes
    it without running a sampled reply's chain), its row left with that token only; a row with a
    choice is masked as before and says nothing."""
    import llama_cpp as ll
    import numpy as np

    from app.engine.llama.constraint import Constraints
    from app.engine.llama.runtime import init_backend
    from app.engine.llama.vocab import Vocab

    init_backend()
    params = ll.llama_model_default_params()
    params.vocab_only = True
    model = ll.llama_model_load_from_file(tiny_model_path.encode(), params)
    vocab = Vocab(model)
    constraints = Constraints(vocab, 2)
    one, two = constraints.new('start: "\\n" "yes"'), constraints.new('start: "yes" | "no"')
    rows = np.zeros((2, vocab.n_vocab), dtype=np.float32)
    forced = constraints.mask([(one, rows[0]), (two, rows[1])])
    newline = vocab.tokenize("\n", add_special=False)[0]
    assert forced == {one: newline}
    assert np.flatnonzero(np.isfinite(rows[0])).tolist() == [newline]
    assert np.isfinite(rows[1]).sum() >= 2 and vocab.tokenize("yes", add_special=False)[0] in np.flatnonzero(np.isfinite(rows[1]))
    ll.llama_model_free(model)
