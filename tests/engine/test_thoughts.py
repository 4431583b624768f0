"""A reply split into its thoughts and its answer as it streams, by its family's markers: the split
of any chunking of a text is the split of the whole text (a marker cut across tokens is held until
whole), blanks around the thoughts go, and without a format nothing changes."""

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from app.engine.thinking import APRIEL, GRANITE_3_3, HARMONY, MAGISTRAL, SEED, THINK_TAGS
from app.engine.thoughts import Thoughts

pytestmark = pytest.mark.unit


def split(fmt, pieces, opened=False, closed=False, separate=True) -> tuple[str, str, list[tuple[str, str]]]:
    """(thoughts, answer, what each piece gave) of a reply fed piece by piece."""
    thoughts = Thoughts(fmt, opened, separate, closed)
    given = [thoughts.feed(p) for p in pieces]
    given.append(thoughts.finish())
    assert "".join(t for t, _ in given) == thoughts.reasoning and "".join(a for _, a in given) == thoughts.answer
    return thoughts.reasoning, thoughts.answer, given


CASES = [
    (THINK_TAGS, False, "<think>\nTwo and two.\n</think>\n\nFour.", ("Two and two.", "Four.")),
    (THINK_TAGS, True, "Two and two.  \n</think>\n\nFour.", ("Two and two.", "Four.")),
    (THINK_TAGS, False, "Four. <think>no</think>", ("", "Four. <think>no</think>")),  # only at the start
    (THINK_TAGS, True, "still thinking when cut  ", ("still thinking when cut", "")),
    (THINK_TAGS, False, "  <thin", ("", "  <thin")),  # a marker's start that never came whole
    (MAGISTRAL, False, "[THINK]hm[/THINK]Yes.", ("hm", "Yes.")),
    (SEED, False, "<seed:think>hm</seed:think>Yes.", ("hm", "Yes.")),
    (GRANITE_3_3, False, "<think>hm</think><response>Yes.</response>", ("hm", "Yes.")),
    (APRIEL, True, "Here we go.\n[BEGIN FINAL RESPONSE]Yes.[END FINAL RESPONSE]", ("Here we go.", "Yes.")),
    (
        HARMONY,
        False,
        "<|channel|>analysis<|message|>Think.<|end|><|start|>assistant<|channel|>final<|message|>Hi!",
        ("Think.", "Hi!"),
    ),
    (
        HARMONY,
        False,
        "<|channel|>commentary to=assistant<|channel|>analysis<|message|>T<|end|><|start|>assistant<|channel|>final<|message|>A",
        ("T", "A"),
    ),
    (HARMONY, False, "<|channel|>commentary<|message|>Looking it up.<|end|>", ("", "Looking it up.")),
    (HARMONY, False, "plain words, no channel", ("", "plain words, no channel")),
]


@pytest.mark.parametrize(("fmt", "opened", "text", "expected"), CASES)
def test_each_format_splits_thoughts_from_the_answer(fmt, opened, text, expected):
    thoughts, answer, _ = split(fmt, [text], opened)
    assert (thoughts, answer) == expected
    assert split(fmt, list(text), opened)[:2] == expected  # a character at a time: the same


def test_a_harmony_call_stays_in_the_answer_as_written_for_the_tool_parser():
    call = '<|channel|>commentary to=functions.get_weather <|constrain|>json<|message|>{"city": "Paris"}'
    text = "<|channel|>analysis<|message|>Need weather.<|end|><|start|>assistant" + call
    assert split(HARMONY, [text])[:2] == ("Need weather.", call)


def test_the_prompt_that_closed_the_thoughts_leaves_the_answer_without_its_leading_blanks():
    assert split(THINK_TAGS, ["\n\n", "Four."], closed=True)[:2] == ("", "Four.")
    assert split(HARMONY, ["Four."], closed=True)[:2] == ("", "Four.")


def test_a_marker_cut_across_tokens_is_held_until_it_is_whole():
    _, _, given = split(THINK_TAGS, ["<th", "ink>", "Two", " </th", "ink>", "Four"])
    assert given == [("", ""), ("", ""), ("Two", ""), ("", ""), ("", ""), ("", "Four"), ("", "")]


def test_kept_in_the_answer_the_thoughts_are_still_told_apart():
    thoughts = Thoughts(THINK_TAGS, opened=True, separate=False)
    assert thoughts.feed("Two and two") == ("", "Two and two") and thoughts.in_thought
    assert thoughts.feed("</think>\n\nFour") == ("", "</think>\n\nFour") and not thoughts.in_thought
    assert thoughts.finish() == ("", "")
    assert thoughts.answer == "Two and two</think>\n\nFour"


def test_without_a_format_everything_is_answer():
    thoughts, answer, _ = split(None, ["<think>", "x</think>", " y"])
    assert (thoughts, answer) == ("", "<think>x</think> y")


PIECES = ["<think>", "</think>", "<th", "ink>", "</", "think", ">", "\n", " ", "a", "b c", "<", ">", "/"]
HARMONY_PIECES = ["<|channel|>", "analysis", "final", "commentary", " to=functions.f", "<|message|>", "<|end|>"]
HARMONY_PIECES += ["<|start|>", "assistant", "<|", "channel|>", "x", " ", "\n", "<|return|>", "to=", "t", "<"]


@settings(max_examples=300, deadline=None)
@given(
    st.lists(st.sampled_from(PIECES), max_size=14),
    st.lists(st.integers(1, 6), max_size=20),
    st.booleans(),
    st.sampled_from([THINK_TAGS, GRANITE_3_3]),
)
@example(["a", " ", "</", "think", ">", "b"], [1], True, THINK_TAGS)
def test_any_chunking_of_a_reply_splits_as_the_whole(pieces, cuts, opened, fmt):
    text = "".join(pieces)
    chunks, at = [], 0
    for n in cuts:
        chunks.append(text[at : at + n])
        at += n
    chunks.append(text[at:])
    assert split(fmt, chunks, opened)[:2] == split(fmt, [text], opened)[:2]


@settings(max_examples=300, deadline=None)
@given(st.lists(st.sampled_from(HARMONY_PIECES), max_size=14), st.lists(st.integers(1, 6), max_size=20), st.booleans())
def test_any_chunking_of_a_harmony_reply_splits_as_the_whole(pieces, cuts, opened):
    text = "".join(pieces)
    chunks, at = [], 0
    for n in cuts:
        chunks.append(text[at : at + n])
        at += n
    chunks.append(text[at:])
    assert split(HARMONY, chunks, opened)[:2] == split(HARMONY, [text], opened)[:2]


@pytest.mark.parametrize(
    ("fmt", "opened", "prefill", "reply", "expected"),
    [
        # a prefill inside the thoughts: the reply's thoughts go on, then the answer
        (THINK_TAGS, True, "Two and", " two make four.\n</think>\n\nFour.", (" two make four.", "Four.")),
        (THINK_TAGS, False, "<think>Two and", " two.</think>Four.", (" two.", "Four.")),
        # after the thoughts: all answer
        (THINK_TAGS, True, "Sums.\n</think>\n\nIt is", " four.", ("", " four.")),
        (THINK_TAGS, False, "It is", " four.", ("", " four.")),
        (HARMONY, True, "Sums.<|end|><|start|>assistant<|channel|>final<|message|>It is", " four.<|return|>", ("", " four.")),
        (APRIEL, True, "Sums.", " More.\n[BEGIN FINAL RESPONSE]Four.[END FINAL RESPONSE]", (" More.", "Four.")),
    ],
)
def test_a_prefill_is_read_first_and_the_reply_tells_only_what_follows(fmt, opened, prefill, reply, expected):
    thoughts = Thoughts(fmt, opened)
    thoughts.prime(prefill)
    thoughts.feed(reply)
    thoughts.finish()
    assert (thoughts.reasoning, thoughts.answer) == expected
