"""A picture's way in without a model: its file checked from its headers (image_file.py), its
placeholder ids (images.py), and how a step cuts a prompt with pictures into chunks (Sequence.chunk)."""

from __future__ import annotations

import numpy as np
import pytest
from pictures import animated_png, bmp, gif, jpeg, png, png_header_only

from app.engine.image_file import MAX_IMAGE_BYTES, ImageError, check_image
from app.engine.images import IMAGE_MARKER, Image, image_key, image_token, image_tokens, with_images
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
