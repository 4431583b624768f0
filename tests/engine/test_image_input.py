"""A picture's way in without a model: its file checked from its headers (image_file.py), its
placeholder ids (images.py), how a step cuts a prompt with pictures into chunks (Sequence.chunk), and
where a slot's pictures lie for the KV map (runs found with numpy, kept from one map to the next)."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st
from pictures import animated_png, bmp, gif, jpeg, png, png_header_only

from app.engine.cell_map import PictureCells
from app.engine.image_file import MAX_IMAGE_BYTES, ImageError, check_image
from app.engine.images import IMAGE_MARKER, Image, image_key, image_token, image_tokens, picture_runs, with_images
from app.engine.kv.cells import CellLedger, Slot
from app.engine.kv.history import TokenHistory, kept_prefix
from app.engine.sampling.params import SamplingParams
from app.engine.sequence import Request, Sequence
from app.engine.stats import RequestStats

pytestmark = pytest.mark.unit


@pytest.mark.parametrize(
    ("data", "facts"),
    [(png(24, 16), "PNG 24×16"), (bmp(8, 6), "BMP 8×6"), (gif(), "GIF 2×2")],
    ids=["png", "bmp", "gif"],
)
def test_pictures_llama_cpp_reads_are_taken(data, facts):
    assert str(check_image(data)) == facts


def test_a_jpeg_is_taken_and_one_cut_short_is_not():
    data = jpeg(40, 30)
    assert str(check_image(data)) == "JPEG 40×30"
    with pytest.raises(ImageError, match="JPEG is truncated"):
        check_image(data[: len(data) // 2])


@pytest.mark.parametrize(
    ("data", "reason"),
    [
        (b"", "empty"),
        (png()[:-12], "PNG is truncated"),
        (png()[:40], "PNG is truncated"),
        (png()[:30] + bytes([png()[30] ^ 0xFF]) + png()[31:], "fails its checksum"),
        (animated_png(), "animated PNG"),
        (gif(frames=2), "animated GIF"),
        (gif()[:-1], "GIF is truncated"),
        (bmp()[:-10], "BMP is truncated"),
        (b"RIFF\x00\x00\x00\x00WEBPVP8 ", "WebP"),
        (b"<svg xmlns='http://www.w3.org/2000/svg'/>", "SVG"),
        (b"%PDF-1.4 hello", "not a picture file"),
        (png_header_only(20000, 20000), "megapixels"),
        (png_header_only(30000, 10), "pixels a side"),
        (b"\x89PNG\r\n\x1a\n" + b"\x00" * (MAX_IMAGE_BYTES + 1), "MiB"),
    ],
    ids=[
        "empty",
        "png-no-iend",
        "png-cut-in-a-chunk",
        "png-checksum",
        "apng",
        "animated-gif",
        "gif-no-trailer",
        "bmp-cut",
        "webp",
        "svg",
        "pdf",
        "too-many-pixels",
        "too-wide",
        "too-many-bytes",
    ],
)
def test_a_file_that_is_no_picture_it_reads_says_why(data, reason):
    with pytest.raises(ImageError, match=reason):
        check_image(data)


def test_a_pictures_placeholders_name_it_and_never_a_vocabulary_id():
    assert image_key(image_token(7, 0)) == (7, 0) and image_key(image_token(123456, 4095)) == (123456, 4095)
    assert all(t < 0 for t in image_tokens(1, 600)) and len(set(image_tokens(1, 600) + image_tokens(2, 600))) == 1200
    a, b = Image.of(png(seed=1)), Image.of(png(seed=1))
    assert a == b and hash(a) == hash(b) and a != Image.of(png(seed=2))
    message = with_images("what?", [a, b])
    assert message["content"] == IMAGE_MARKER * 2 + "what?" and message["images"] == (a, b)
    assert with_images("plain", []) == {"role": "user", "content": "plain"}


def test_a_conversations_history_keeps_placeholders_and_stops_spelling_there():
    history = TokenHistory(4)
    tokens = [1, 2, *image_tokens(1 << 30, 3), 5]
    history.remember("a", tokens)
    assert history.get("a").tolist() == tokens
    spell = {1: b"ab", 2: b"c"}.__getitem__
    assert kept_prefix(history.get("a"), b"abcdef", (), spell) == (2, 3)  # the picture ends the run


def _sequence(tokens: list[int], images: dict, whole: bool = False, computed: int = 0) -> Sequence:
    seq = Sequence(Request("r", SamplingParams()), tokens, RequestStats("r"), 1)
    seq.images, seq.images_whole, seq.num_computed = images, whole, computed
    return seq


def test_a_chunk_is_a_picture_then_text_or_text_alone():
    picture = image_tokens(1, 6)
    tokens = [10, 11, 12, *picture, 13, 14, *image_tokens(2, 4), 15]
    images = {1: np.zeros((6, 4)), 2: np.zeros((4, 4))}
    assert _sequence(tokens, images).chunk(100) == 3  # text up to the picture
    assert _sequence(tokens, images, computed=3).chunk(100) == 8  # the picture, then text up to the next
    assert _sequence(tokens, images, computed=3).chunk(4) == 4  # a causal picture in parts
    assert _sequence(tokens, images, computed=5).chunk(100) == 6  # its rest, then text
    assert _sequence(tokens, images, computed=11).chunk(100) == 5  # the last picture and the text after
    assert _sequence(tokens, {}, computed=0).chunk(7) == 7  # without pictures: the limit


def test_a_picture_decoded_whole_is_taken_whole_or_not_at_all():
    tokens = [10, *image_tokens(1, 6), 13, 14]
    images = {1: np.zeros((6, 4))}
    at_picture = _sequence(tokens, images, whole=True, computed=1)
    assert at_picture.at_whole_picture
    assert at_picture.chunk(4) == 0  # the free cells cannot hold it: wait
    assert at_picture.chunk(4, stretch=True) == 6  # past the step's budget: a decode of its own
    assert at_picture.chunk(7) == 7 and at_picture.chunk(100) == 8
    assert not _sequence(tokens, images, whole=True).at_whole_picture


def runs_one_by_one(tokens: list[int]) -> list[tuple[int, int]]:
    """A picture's run of placeholders, found a token at a time: it starts at its first token (offset
    0) or after a text's token, and goes on while its offsets do."""
    runs = []
    for i, t in enumerate(tokens):
        if t >= 0:
            continue
        if runs and runs[-1][1] == i and image_key(t)[1] != 0:
            runs[-1] = (runs[-1][0], i + 1)
        else:
            runs.append((i, i + 1))
    return runs


def test_a_slots_pictures_are_its_runs_of_placeholders_two_side_by_side_two_runs():
    tokens = [1, 2, *image_tokens(1, 4), *image_tokens(2, 3), 5, *image_tokens(1, 4), 6]
    assert picture_runs(tokens) == runs_one_by_one(tokens) == [(2, 6), (6, 9), (10, 14)]
    assert picture_runs(tokens, 3, 8) == [(3, 6), (6, 8)]  # a part of a picture read so far is a run too
    assert picture_runs([1, 2, 3]) == picture_runs([]) == []


# what a slot's tokens go through: a chunk written (text, or a picture from its first token, or a
# picture's next tokens), or cut back to a length (a new prompt reusing its start)
_write = st.one_of(
    st.lists(st.integers(0, 50), min_size=1, max_size=6).map(lambda t: ("text", t)),
    st.tuples(st.integers(1, 3), st.integers(1, 9)).map(lambda kn: ("picture", image_tokens(*kn))),
    st.integers(1, 5).map(lambda n: ("more", n)),
)
_step = st.one_of(_write, st.integers(0, 12).map(lambda n: ("cut", n)))


@settings(max_examples=60, deadline=None)
@given(steps=st.lists(st.lists(_step, min_size=1, max_size=3), min_size=1, max_size=8))
@example(steps=[[("text", [1, 2]), ("picture", image_tokens(1, 4))], [("cut", 1), ("text", [3, 4, 5, 6, 7, 8])]])
def test_the_maps_pictures_read_only_new_tokens_and_match_a_full_read(steps):
    """Between two maps a slot writes chunks and is cut back: the runs kept and extended are the
    runs of its tokens read whole, a picture read over two maps one run."""
    ledger, slot, pictures = CellLedger(), Slot(0), PictureCells()
    for between_maps in steps:
        for kind, value in between_maps:
            if kind == "cut":
                del slot.tokens[value:]
                ledger.drop(slot, min(value, len(slot.cells)))
                continue
            if kind == "more":  # the picture being read goes on, if one is
                last = slot.tokens[-1] if slot.tokens else 0
                if last >= 0:
                    continue
                key, offset = image_key(last)
                value = image_tokens(key, offset + 1 + value)[offset + 1 :]
            slot.tokens.extend(value)
            ledger.add(slot, len(value))
        assert pictures.of(slot) == tuple(runs_one_by_one(slot.tokens))
