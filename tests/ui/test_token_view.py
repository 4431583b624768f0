"""A reply drawn token by token: its text is the reply's, every tint keeps the text readable."""

from __future__ import annotations

import math

import pytest
from PySide6.QtGui import QPalette

from app.engine.probs import TokenChoice, TokenProbs
from app.ui.pane.token_view import rivals_html, tint, token_at, token_texts, tokens_html
from app.ui.theme import Theme, contrast, dark_palette


def probs(piece: bytes, p: float, token: int = 1, rivals=()) -> TokenProbs:
    chosen = TokenChoice(token, piece, math.log(p), p)
    return TokenProbs(chosen, (chosen, *rivals))


@pytest.mark.gui
def test_a_character_split_across_tokens_shows_whole_with_its_last_piece(qapp):
    euro = "€".encode()  # three bytes
    reply = [probs(b"A ", 0.9), probs(euro[:1], 0.5), probs(euro[1:], 0.5), probs(b"!\n", 0.2)]
    assert token_texts(reply) == ["A ", "", "€", "!\n"]
    drawn = tokens_html(3, reply, Theme.of(QPalette()))
    assert drawn.count('href="tok:3:') == 3 and "tok:3:2" in drawn and "tok:3:1" not in drawn  # the empty piece has no link
    assert "!<br>" in drawn


@pytest.mark.gui
@pytest.mark.parametrize("dark", [False, True])
def test_every_tint_keeps_the_text_readable_and_doubt_shows_stronger(qapp, dark):
    colours = Theme.of(dark_palette() if dark else QPalette())
    tints = [tint(p / 20, colours) for p in range(21)]
    assert all(contrast(c, colours.text) >= 4.5 for c in tints)
    distance = [abs(c.red() - colours.base.red()) + abs(c.green() - colours.base.green()) for c in tints]
    assert distance == sorted(distance, reverse=True) and distance[0] > distance[-1]


@pytest.mark.unit
def test_token_links_are_told_from_other_links():
    assert token_at("tok:4:17") == (4, 17)
    assert token_at("https://example.com") is None and token_at("tok:x:1") is None and token_at("copy:2") is None


@pytest.mark.unit
def test_rivals_show_both_probabilities_and_mark_the_drawn_token():
    rival = TokenChoice(2, b" sea", math.log(0.3), 0.0)
    drawn = probs(b" wind", 0.6, rivals=(rival,))
    table = rivals_html(drawn)
    assert "▶ ␣wind" in table and "60.0%" in table and "␣sea" in table and "30.0%" in table and "0%" in table
