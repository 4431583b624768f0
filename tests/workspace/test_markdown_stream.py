"""The streaming-Markdown splitter without Qt: a reply fed piece by piece splits into finished blocks,
which never change, and the open tail; fenced code is read as written."""

from __future__ import annotations

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from app.workspace.markdown_stream import MarkdownStream, fenced_code, finished_length

pytestmark = pytest.mark.unit


MARKDOWN_PIECES = [
    "# Title\n",
    "text ",
    "\n",
    "\n\n",
    "- item\n",
    "  indented\n",
    "```py\n",
    "```\n",
    "~~~\n",
    "| a | b |\n|---|---|\n",
    "> quote\n",
    "`x`",
]
# a reply as the pieces it streams in: Markdown's own pieces and odd bits of its characters
PIECES = st.lists(st.one_of(st.sampled_from(MARKDOWN_PIECES), st.text(alphabet="ab `~>-|#\n\t", max_size=6)), max_size=30)


def split(pieces: list[str]) -> tuple[list[str], MarkdownStream]:
    """What each piece finished, and the stream left after them."""
    stream = MarkdownStream()
    return [stream.feed(piece) for piece in pieces], stream


def test_finished_blocks_end_after_a_blank_line_or_a_fence():
    assert finished_length("Para one\nstill one\n\nP") == len("Para one\nstill one\n\n")
    assert finished_length("- a\n\n  more of a\n\n- b") == len("- a\n\n  more of a\n\n")  # not before "  more"
    assert finished_length("Look:\n```py\nx = 1\n\ny = 2\n") == len("Look:\n")  # the code block is open
    assert finished_length("```py\nx = 1\n```\n") == len("```py\nx = 1\n```\n")
    assert finished_length("```py\nx = 1\n``` no\n") == 0  # not a closing fence
    assert finished_length("```py print(1)``` inline\n\nNext") == len("```py print(1)``` inline\n\n")
    assert finished_length("A\n\nB\n\n| a |\n|---|\n") == len("A\n\n")  # B is rendered with its table


@settings(max_examples=100, deadline=None)
@example("a\n\n", "```\n")
@given(st.text(alphabet="ab `~>-\n", max_size=30), st.text(alphabet="ab `~>-\n", max_size=10))
def test_a_finished_block_stays_finished_whatever_follows(text, more):
    finished = finished_length(text)
    assert finished == 0 or text[finished - 1] == "\n"  # blocks end at a line's end
    assert finished_length(text + more) >= finished


def test_a_stream_hands_back_each_block_as_it_ends():
    finished, stream = split(["# Title\n", "\nSome ", "text\n", "\n", "More"])
    assert finished == ["", "# Title\n\n", "", "", "Some text\n\n"]
    assert stream.tail == "More"


def test_an_open_code_block_is_the_tail_until_its_fence_closes():
    finished, stream = split(["Look:\n", "```py\n", "x = 1\n", "\n", "y = 2\n"])
    assert "".join(finished) == "Look:\n"
    assert stream.tail == "```py\nx = 1\n\ny = 2\n"
    assert stream.open_code == "x = 1\n\ny = 2\n"  # the code so far, without its fence
    assert stream.feed("```\n") == "```py\nx = 1\n\ny = 2\n```\n"
    assert stream.tail == "" and stream.open_code is None


def test_open_code_is_only_a_fence_that_opens_a_block():
    for tail in ("```", "  ```py\nx", "```py print(1)``` inline\nx", "text\n```"):
        stream = MarkdownStream()
        stream.feed(tail)
        assert stream.open_code is None, tail
    stream = MarkdownStream()
    stream.feed("~~~~\n")
    assert stream.open_code == ""


def test_a_line_ended_with_the_last_piece_or_just_before_it():
    stream = MarkdownStream()
    assert [(stream.feed(piece), stream.line_ended)[1] for piece in ("a", "b\n", "c", "d", "e\nf")] == [
        False,
        True,
        True,  # the first text of a new line: it may end a block or begin one
        False,
        True,
    ]


def test_fenced_code_is_the_code_as_written():
    markdown = "Intro\n  ```py\n  x = 1\n\ty\n   z\n  ```\n> ```\n> quoted\n> ```\n~~~\nopen"
    assert fenced_code(markdown) == ["x = 1\n\ty\n z", "open"]  # the fence's indent off; a quote's aside
    assert fenced_code("```py print(1)``` inline") == []


@settings(max_examples=300, deadline=None)
@given(PIECES)
def test_the_finished_blocks_and_the_tail_are_the_text_fed(pieces):
    finished, stream = split(pieces)
    assert "".join(finished) + stream.tail == "".join(pieces)
    assert all(block.endswith("\n") for block in finished if block)  # blocks end at a line's end


@settings(max_examples=300, deadline=None)
@example(["a\n\n ", "b"])  # text after an indent may go on a list item: no block ends
@given(PIECES)
def test_how_a_reply_splits_does_not_depend_on_its_pieces(pieces):
    """Blocks once finished never change: what any piece finished is the next part of what the whole
    text finishes, fed at once."""
    whole = finished_length("".join(pieces))
    so_far = ""
    for block in split(pieces)[0]:
        so_far += block
        assert len(so_far) <= whole and "".join(pieces)[: len(so_far)] == so_far
    assert len(so_far) == whole
