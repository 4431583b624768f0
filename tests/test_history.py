"""Exact-token history: a later turn keeps the conversation's own tokens, whatever re-tokenizing gives."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from app.engine.history import TokenHistory, kept_prefix

# a toy vocabulary: several tokens may spell the same text, as in BPE ("ab" or "a" + "b")
VOCAB = {1: b"a", 2: b"b", 3: b"ab", 4: b"<eot>", 5: "é".encode()[:1], 6: "é".encode()[1:], 7: b"", 9: b"<bos>"}


def spell(token: int) -> bytes:
    return VOCAB[token]


def test_keeps_every_token_whose_text_starts_the_new_prompt():
    history = [1, 2, 3, 4]  # "a" "b" "ab" "<eot>": spelled differently from how "abab" would tokenize
    assert kept_prefix(history, b"abab<eot>\nnext", [], spell) == (4, 9)
    assert kept_prefix(history, b"abax", [], spell) == (2, 2)  # "ab" kept, "ax" to tokenize
    assert kept_prefix(history, b"xyz", [], spell) == (0, 0)


def test_a_leading_bos_spells_nothing_and_is_kept():
    assert kept_prefix([9, 1, 2], b"ab!", [9], spell) == (3, 2)
    assert kept_prefix([9, 1, 2], b"zz", [9], spell) == (0, 0)  # nothing but the BOS: tokenize it all


def test_never_ends_inside_a_utf8_character_nor_keeps_an_invisible_token():
    # "a" + first byte of "é" matches, but the text goes on with another continuation byte
    text = b"a" + "é".encode()[:1] + b"\xa0"
    assert kept_prefix([1, 5, 6], text, [], spell) == (1, 1)
    assert kept_prefix([1, 7, 2], b"ab", [], spell) == (1, 1)  # token 7 would be invisible in the text


@given(st.lists(st.sampled_from([1, 2, 3, 4, 5, 6]), max_size=30), st.binary(max_size=40))
def test_what_is_kept_spells_exactly_the_start_of_the_text(history, text):
    n, pos = kept_prefix(history, text, [], spell)
    assert b"".join(spell(t) for t in history[:n]) == text[:pos]
    assert n == 0 or pos == len(text) or text[pos] & 0xC0 != 0x80


def test_the_history_forgets_the_least_recent_conversation():
    history = TokenHistory(kept=2)
    history.remember("a", [1, 2])
    history.remember("b", [3])
    history.remember("a", [1, 2, 3])  # a is the most recent now
    history.remember("c", [4])
    assert history.get("b") is None and list(history.get("a")) == [1, 2, 3] and list(history.get("c")) == [4]
    assert history.get(None) is None and len(history) == 2
