"""TextStream: whole UTF-8 characters only, stop strings cut exactly, nothing lost at the end."""

import pytest

from app.engine.text_stream import TextStream

pytestmark = pytest.mark.unit


def feed_all(stream: TextStream, pieces: list[bytes]) -> list[str]:
    return [stream.feed(p) for p in pieces]


def test_character_split_across_tokens_is_held_until_whole():
    globe = "🌍".encode()  # four bytes
    stream = TextStream()
    out = feed_all(stream, [b"Hi ", globe[:1], globe[1:3], globe[3:], b"!"])
    assert out == ["Hi ", "", "", "🌍", "!"]
    assert stream.text == "Hi 🌍!"


def test_broken_character_at_the_end_becomes_replacement():
    stream = TextStream()
    assert stream.feed("é".encode()[:1]) == ""
    assert stream.finish() == "\ufffd"


def test_stop_string_across_tokens_cuts_before_it():
    stream = TextStream(stop=("END",))
    out = feed_all(stream, [b"one two E", b"N", b"D three"])
    assert "".join(out) == "one two "
    assert stream.stopped
    assert stream.feed(b"more") == ""
    assert stream.finish() == ""


def test_possible_stop_prefix_is_released_when_it_does_not_complete():
    stream = TextStream(stop=("\nUser:",))
    assert stream.feed(b"a\nUs") == "a"
    assert stream.feed(b"ually") == "\nUsually"
    assert not stream.stopped


def test_stop_string_in_the_last_bytes_is_found_by_finish():
    stream = TextStream(stop=("xyz",))
    assert stream.feed(b"abc xy") == "abc "
    assert stream.finish() == "xy"
    assert stream.text == "abc xy"


def test_earliest_of_several_stop_strings_wins():
    stream = TextStream(stop=("BBB", "A"))
    assert stream.feed(b"hello A and BBB") == "hello "
