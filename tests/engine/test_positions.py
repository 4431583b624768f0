"""positions.py: a token's index to its position, for pictures that take a position a token and for
those placed in 2D (M-RoPE: all of a picture's tokens at its first position in time, the picture
spanning max(rows, columns) positions), as llama-server counts them (`server_tokens::pos_next`)."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from app.engine.images import image_tokens
from app.engine.positions import SECTIONS, PictureLayout, Positions

pytestmark = pytest.mark.unit


def mrope(nx: int, ny: int) -> PictureLayout:
    """mtmd's M-RoPE layout of a picture nx tokens wide and ny high (mtmd_image_tokens_get_decoder_pos)."""
    i = np.arange(nx * ny)
    base = np.stack([0 * i, i // nx, i % nx, 0 * i]).astype(np.int32)
    moves = np.array([[1], [1], [1], [0]], dtype=np.int32).repeat(nx * ny, axis=1)
    return PictureLayout(max(nx, ny), base, moves)


def test_text_after_a_picture_goes_on_from_its_last_position():
    positions, layouts = Positions(), {1: mrope(4, 3)}  # 12 tokens over 4 positions
    positions.learn(layouts)
    tokens = [10, 11, *image_tokens(1, 12), 12, 13]
    table = positions.table(tokens, layouts)
    assert [table.of(i) for i in range(len(tokens))] == [0, 1, *[2] * 12, 6, 7]
    assert table.of(len(tokens)) == 8 and positions.last(tokens) == 7
    rows = table.rows(2, 6)  # the first row of the picture: time 2, row 2, columns 2..5
    assert rows.shape == (SECTIONS, 4) and rows[0].tolist() == [2] * 4 and rows[1].tolist() == [2] * 4
    assert rows[2].tolist() == [2, 3, 4, 5] and rows[3].tolist() == [0] * 4
    assert table.rows(13, 14)[:, 0].tolist() == [2, 4, 5, 0]  # its last token: row 2 + 2, column 2 + 3


def test_a_picture_whose_tokens_share_a_position_is_cut_whole_or_not_at_all():
    positions = Positions()
    positions.learn({1: mrope(2, 4)})
    tokens = [10, *image_tokens(1, 8), 11, 12]
    assert positions.cut(tokens, 1) == (1, 1)  # before it: kept, from its first position on
    assert positions.cut(tokens, 5) == (1, 1)  # inside it: it goes whole
    assert positions.cut(tokens, 9) == (9, 5) and positions.cut(tokens, 10) == (10, 6)  # after it: 4 positions on
    assert positions.cut(tokens[:5], 5) == (1, 1)  # a slot holding its start only: the next token is inside it


def test_without_pictures_in_2d_a_position_is_an_index():
    positions = Positions()
    tokens = [10, *image_tokens(1, 8), 11]
    assert positions.table(tokens) is None and positions.cut(tokens, 5) == (5, 5) and positions.last(tokens) == 9
    positions.learn({2: mrope(2, 2)})  # another picture's layout: this one still takes a position a token
    assert positions.table(tokens) is None and positions.last([]) == -1


segments = st.lists(
    st.one_of(st.integers(1, 4), st.tuples(st.integers(1, 4), st.integers(1, 4))), min_size=1, max_size=6
)  # a text of n tokens, or a picture nx wide and ny high


@settings(max_examples=60, deadline=None)
@given(segments, st.integers(0, 3))
@example([(2, 2), 1], 2)
def test_positions_count_as_llama_server_does_and_every_cut_separates_them(parts, short):
    positions, tokens, expected, pos = Positions(), [], [], 0
    for key, part in enumerate(parts, start=1):
        if isinstance(part, int):
            tokens += [100 + i for i in range(part)]
            expected += list(range(pos, pos + part))
            pos += part
        else:
            nx, ny = part
            positions.learn({key: mrope(nx, ny)})
            tokens += image_tokens(key, nx * ny)
            expected += [pos] * (nx * ny)
            pos += max(nx, ny)  # mtmd_image_tokens_get_n_pos
    if short:  # a slot may hold the start of its last picture only
        tokens, expected = tokens[: max(1, len(tokens) - short)], expected[: max(1, len(tokens) - short)]
    table = positions.table(tokens)
    got = [table.of(i) if table else i for i in range(len(tokens))]
    assert got == expected
    assert positions.last(tokens) == expected[-1]
    for n in range(len(tokens) + 1):
        kept, position = positions.cut(tokens, n)
        assert kept <= n and all(p < position for p in expected[:kept]) and all(p >= position for p in expected[kept:])
        assert kept == n or expected[kept] == expected[n - 1] == position  # only a picture sharing a position moves it back


def test_a_picture_whose_tokens_take_a_time_position_each_can_be_cut_anywhere():
    """HunyuanVL's layout within M-RoPE: its tokens' time positions go one a token (its rows and
    columns apart); any other time layout is refused when the picture is read."""
    i = np.arange(6)
    each = PictureLayout(6, np.stack([i, i // 3, i % 3, 0 * i]).astype(np.int32), np.ones((4, 6), dtype=np.int32))
    positions = Positions()
    positions.learn({1: each})
    tokens = [10, *image_tokens(1, 6), 11]
    assert positions.cut(tokens, 4) == (4, 4) and positions.last(tokens) == 7
    with pytest.raises(ValueError, match="time positions"):
        PictureLayout(2, np.array([[0, 2], [0, 0], [0, 1], [0, 0]], dtype=np.int32), np.ones((4, 2), dtype=np.int32))
