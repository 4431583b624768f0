"""`check_image`: whether a file's bytes are a picture llama.cpp's reader (stb_image) can take, read
from its headers before any pixel is decoded: its format, size and frames, and that it is whole.

A corrupt, truncated, huge (bytes or pixels), animated or unsupported file is refused here with a
reason a person can act on; what only decoding finds (a broken compressed stream) the engine
reports when it reads the pixels."""

from __future__ import annotations

import struct
import zlib
from dataclasses import dataclass

MAX_IMAGE_BYTES = 20 << 20  # a file's bytes (the OpenAI API's limit for one image)
MAX_IMAGE_PIXELS = 32 << 20  # width x height: 96 MiB of RGB once decoded
MAX_IMAGE_SIDE = 16384
FORMATS = ("PNG", "JPEG", "GIF", "BMP")


class ImageError(ValueError):
    """Why a file is no picture the engine can read: one line."""


@dataclass(frozen=True)
class ImageFacts:
    format: str  # one of FORMATS
    width: int
    height: int

    def __str__(self) -> str:
        return f"{self.format} {self.width}×{self.height}"

    @property
    def mime(self) -> str:
        return f"image/{self.format.lower()}"


def mime_of(data: bytes) -> str:
    """A picture's media type (for a data: URI), or a generic one where it is none the engine reads."""
    try:
        return check_image(data).mime
    except ImageError:
        return "application/octet-stream"


def check_image(data: bytes) -> ImageFacts:
    """The picture's format and size; ImageError when it cannot be read as one."""
    if not data:
        raise ImageError("the image is empty (0 bytes)")
    if len(data) > MAX_IMAGE_BYTES:
        raise ImageError(f"the image is {len(data) / 2**20:.1f} MiB; at most {MAX_IMAGE_BYTES >> 20} MiB")
    reader = _READERS.get(_kind(data))
    if reader is None:
        raise ImageError(f"the image is {_named(data)}: send PNG, JPEG, GIF (one frame) or BMP")
    facts = reader(data)
    if facts.width < 1 or facts.height < 1:
        raise ImageError(f"the image's {facts.format} header says it is {facts.width}×{facts.height} pixels")
    if max(facts.width, facts.height) > MAX_IMAGE_SIDE or facts.width * facts.height > MAX_IMAGE_PIXELS:
        mp = facts.width * facts.height / 1e6
        raise ImageError(
            f"the image is {facts.width}×{facts.height} pixels ({mp:.0f} megapixels); at most "
            f"{MAX_IMAGE_PIXELS / 1e6:.0f} megapixels and {MAX_IMAGE_SIDE} pixels a side: scale it down"
        )
    return facts


def _kind(data: bytes) -> str:
    if data.startswith(b"\x89PNG\r\n\x1a\n"):
        return "PNG"
    if data.startswith(b"\xff\xd8\xff"):
        return "JPEG"
    if data[:6] in (b"GIF87a", b"GIF89a"):
        return "GIF"
    if data.startswith(b"BM") and len(data) >= 26:
        return "BMP"
    return ""


def _named(data: bytes) -> str:
    """What an unsupported file looks like, for the message."""
    if data[:4] == b"RIFF" and data[8:12] == b"WEBP":
        return "WebP, which llama.cpp's image reader does not read"
    if data[:4] in (b"II*\x00", b"MM\x00*"):
        return "TIFF, which llama.cpp's image reader does not read"
    if data[4:12] in (b"ftypheic", b"ftypheix", b"ftypmif1", b"ftypavif"):
        return "HEIF/AVIF, which llama.cpp's image reader does not read"
    if data.lstrip()[:5] in (b"<?xml", b"<svg ") or data.lstrip()[:4] == b"<svg":
        return "SVG (a drawing, not pixels)"
    return "not a picture file (its first bytes are no image format's)"


def _png(data: bytes) -> ImageFacts:
    pos, size = 8, None
    while True:
        if pos + 8 > len(data):
            raise ImageError("the PNG is truncated: it ends before its IEND chunk")
        length, kind = struct.unpack(">I4s", data[pos : pos + 8])
        end = pos + 8 + length + 4
        if end > len(data):
            raise ImageError(f"the PNG is truncated: its {kind.decode('latin-1')} chunk runs past the end of the file")
        body = data[pos + 8 : pos + 8 + length]
        if zlib.crc32(kind + body) != struct.unpack(">I", data[end - 4 : end])[0]:
            raise ImageError(f"the PNG is corrupt: its {kind.decode('latin-1')} chunk fails its checksum")
        if size is None:
            if kind != b"IHDR" or length < 8:
                raise ImageError("the PNG is corrupt: it does not begin with its IHDR header")
            size = struct.unpack(">II", body[:8])
        elif kind == b"acTL":
            raise ImageError("the image is an animated PNG: send a single frame")
        elif kind == b"IEND":
            return ImageFacts("PNG", *size)
        pos = end


_SOF = {0xC0, 0xC1, 0xC2, 0xC3, 0xC5, 0xC6, 0xC7, 0xC9, 0xCA, 0xCB, 0xCD, 0xCE, 0xCF}
_SOF_UNSUPPORTED = {0xC3: "lossless", 0xC5: "hierarchical", 0xC6: "hierarchical", 0xC7: "hierarchical"}


def _jpeg(data: bytes) -> ImageFacts:
    pos, size = 2, None
    while True:
        while pos < len(data) and data[pos] == 0xFF and pos + 1 < len(data) and data[pos + 1] == 0xFF:
            pos += 1  # fill bytes
        if pos + 4 > len(data):
            raise ImageError("the JPEG is truncated: it ends inside its headers")
        if data[pos] != 0xFF:
            raise ImageError("the JPEG is corrupt: a header is not where the one before says")
        marker = data[pos + 1]
        length = struct.unpack(">H", data[pos + 2 : pos + 4])[0]
        if marker in _SOF:
            if marker >= 0xC9 or marker in _SOF_UNSUPPORTED:
                kind = _SOF_UNSUPPORTED.get(marker, "arithmetic-coded")
                raise ImageError(f"the image is a {kind} JPEG, which llama.cpp's image reader does not read")
            if pos + 9 > len(data):
                raise ImageError("the JPEG is truncated: it ends inside its frame header")
            height, width = struct.unpack(">HH", data[pos + 5 : pos + 9])
            size = (width, height)
        if marker == 0xDA:  # the scan: the compressed pixels follow, then the end marker
            if size is None:
                raise ImageError("the JPEG is corrupt: its pixels come before its frame header")
            if data.rfind(b"\xff\xd9", pos + 2 + length) < 0:
                raise ImageError("the JPEG is truncated: its end marker is missing")
            return ImageFacts("JPEG", *size)
        pos += 2 + length


def _gif(data: bytes) -> ImageFacts:
    if len(data) < 13:
        raise ImageError("the GIF is truncated: it ends inside its header")
    width, height, flags = struct.unpack("<HHB", data[6:11])
    pos = 13 + (3 << ((flags & 7) + 1) if flags & 0x80 else 0)
    frames = 0
    while pos < len(data):
        kind = data[pos]
        if kind == 0x3B:
            if frames == 0:
                raise ImageError("the GIF holds no picture")
            return ImageFacts("GIF", width, height)
        if kind == 0x21:  # an extension: label, then sub-blocks
            pos = _skip_blocks(data, pos + 2)
        elif kind == 0x2C:  # an image: its descriptor, its colours, the LZW size, its sub-blocks
            frames += 1
            if frames > 1:
                raise ImageError("the image is an animated GIF: send a single frame")
            if pos + 10 > len(data):
                break
            local = data[pos + 9]
            pos += 10 + (3 << ((local & 7) + 1) if local & 0x80 else 0)
            pos = _skip_blocks(data, pos + 1)
        else:
            raise ImageError("the GIF is corrupt: a block of an unknown kind")
    raise ImageError("the GIF is truncated: it ends before its trailer")


def _skip_blocks(data: bytes, pos: int) -> int:
    while pos < len(data):
        n = data[pos]
        pos += 1 + n
        if n == 0:
            return pos
    return len(data) + 1


def _bmp(data: bytes) -> ImageFacts:
    declared = struct.unpack("<I", data[2:6])[0]
    if declared and len(data) < declared:
        raise ImageError(f"the BMP is truncated: {len(data)} of its {declared} bytes")
    header = struct.unpack("<I", data[14:18])[0]
    if header == 12:
        width, height = struct.unpack("<HH", data[18:22])
    else:
        width, height = struct.unpack("<ii", data[18:26])
    return ImageFacts("BMP", abs(width), abs(height))


_READERS = {"PNG": _png, "JPEG": _jpeg, "GIF": _gif, "BMP": _bmp}
