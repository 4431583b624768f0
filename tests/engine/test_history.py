"""Exact-token history: a later turn keeps the conversation's own tokens, whatever re-tokenizing gives."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from app.engine.kv.history import TokenHistory, kept_prefix

pytestmark = pytest.mark.unit

# a toy vocabulary: several tokens may spell the same text, as in BPE ("ab" or "a" + "b")
# 8 is a stray byte, no text on its own (a random or hot-sampled reply can hold one)
VOCAB = {1: b"a", 2: b"b", 3: b"ab", 4: b"<eot>", 5: "é".encode()[:1], 6: "é".encode()[1:], 7: b"", 8: b"\xc9", 9: b"<bos>"}


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


def test_a_stray_byte_is_kept_as_the_reply_showed_it():
    # the reply showed "a", U+FFFD for the stray byte, "a"; re-tokenizing that text loses the byte
    text = "a\ufffda<eot>\nnext".encode()
    assert kept_prefix([1, 8, 1, 4], text, [], spell) == (4, len("a\ufffda<eot>".encode()))
    assert kept_prefix([1, 8], "a\ufffd".encode(), [], spell) == (1, 1)  # the byte's fate is not known yet


def shown(tokens) -> bytes:
    return b"".join(spell(t) for t in tokens).decode("utf-8", errors="replace").encode()


@given(st.lists(st.sampled_from([1, 2, 3, 4, 5, 6, 8]), max_size=30), st.text(alphabet="abé\ufffd<eot>\n", max_size=30))
def test_what_is_kept_shows_exactly_the_start_of_the_text(history, typed):
    text = typed.encode()
    for prompt in (text, shown(history) + text):
        n, pos = kept_prefix(history, prompt, [], spell)
        assert shown(history[:n]) == prompt[:pos]
        prompt[pos:].decode("utf-8")  # the rest is whole characters, to tokenize on its own
    # the text goes on from the whole history: all of it is kept, but a last half character
    assert kept_prefix(history, shown(history) + text, [], spell)[0] >= len(history) - 1


def test_the_history_forgets_the_least_recent_conversation():
    history = TokenHistory(kept=2)
    history.remember("a", [1, 2])
    history.remember("b", [3])
    history.remember("a", [1, 2, 3])  # a is the most recent now
    history.remember("c", [4])
    assert history.get("b") is None and list(history.get("a")) == [1, 2, 3] and list(history.get("c")) == [4]
    assert history.get(None) is None and len(history) == 2
