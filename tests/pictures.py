"""Picture files for the tests, written here byte by byte (PNG, BMP, GIF; JPEG through Qt's writer):
small, seeded, and broken on purpose where a test needs that."""

from __future__ import annotations

import struct
import zlib

import numpy as np


def pixels(width: int, height: int, seed: int = 0) -> np.ndarray:
    """(height, width, 3) uint8 of seeded noise: each seed a different picture."""
    return np.random.default_rng(seed).integers(0, 256, (height, width, 3), dtype=np.uint8)


def _chunk(kind: bytes, body: bytes) -> bytes:
    return struct.pack(">I", len(body)) + kind + body + struct.pack(">I", zlib.crc32(kind + body))


def png(width: int = 24, height: int = 16, seed: int = 0, extra: bytes = b"") -> bytes:
    """An RGB PNG; `extra` chunks go after its header (an acTL makes it animated)."""
    rows = pixels(width, height, seed)
    raw = b"".join(b"\x00" + rows[y].tobytes() for y in range(height))
    header = _chunk(b"IHDR", struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0))
    return b"\x89PNG\r\n\x1a\n" + header + extra + _chunk(b"IDAT", zlib.compress(raw)) + _chunk(b"IEND", b"")


def animated_png() -> bytes:
    return png(extra=_chunk(b"acTL", struct.pack(">II", 2, 0)))


def png_header_only(width: int, height: int) -> bytes:
    """A PNG whose header claims a size and whose pixels are a token few (a decompression bomb's shape)."""
    return png(8, 8)[:8] + _chunk(b"IHDR", struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)) + png(8, 8)[33:]


def bmp(width: int = 8, height: int = 6, seed: int = 0) -> bytes:
    rows = pixels(width, height, seed)[::-1, :, ::-1]  # bottom-up, BGR
    stride = (width * 3 + 3) & ~3
    data = b"".join(rows[y].tobytes().ljust(stride, b"\x00") for y in range(height))
    info = struct.pack("<IiiHHIIiiII", 40, width, height, 1, 24, 0, len(data), 2835, 2835, 0, 0)
    return b"BM" + struct.pack("<IHHI", 14 + 40 + len(data), 0, 0, 54) + info + data


def gif(frames: int = 1) -> bytes:
    """A 2x2 GIF of a two-colour palette, `frames` pictures (more: animated)."""
    head = b"GIF89a" + struct.pack("<HHBBB", 2, 2, 0x80, 0, 0) + b"\x00\x00\x00\xff\xff\xff"
    frame = b"\x2c" + struct.pack("<HHHHB", 0, 0, 2, 2, 0) + b"\x02\x02\x44\x01\x00"
    return head + frame * frames + b"\x3b"


def jpeg(width: int = 24, height: int = 16, seed: int = 0) -> bytes:
    """A JPEG through Qt's writer (the tests' only picture not written here)."""
    from PySide6.QtCore import QBuffer, QByteArray, QIODevice
    from PySide6.QtGui import QImage

    rows = np.ascontiguousarray(pixels(width, height, seed))
    image = QImage(rows.data, width, height, 3 * width, QImage.Format.Format_RGB888).copy()
    data = QByteArray()
    buffer = QBuffer(data)
    buffer.open(QIODevice.OpenModeFlag.WriteOnly)
    assert image.save(buffer, "JPEG")
    return bytes(data.data())
