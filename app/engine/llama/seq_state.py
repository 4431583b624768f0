"""One sequence's saved KV state, moved between llama.cpp's two KV layouts.

`llama_state_seq_get_data` writes a magic number and the sequence id, then for each KV cache of the model (one; two for a sliding-window
model: the full layers', then the window's), the number of streams, then per stream its cells of
that sequence: a count, each cell's position and sequence ids (and, for M-RoPE models, 12 more
bytes), then the cells' K rows and V rows layer by layer. `llama_state_seq_set_data` refuses a state
whose stream count is not the context's. In one pool there is one stream; with a stream per
sequence the sequence's cells are all in its own. So a state moves to the other layout by keeping
each cache's one non-empty block and writing the stream counts around it: no row is touched.
"""

from __future__ import annotations

import ctypes
import struct

import numpy as np

_U32 = struct.Struct("<I")
_K_ENTRY = struct.Struct("<iQ")  # type, bytes per row
_V_ENTRY = _K_ENTRY
_V_TRANS_ENTRY = struct.Struct("<iII")  # type, bytes per element, values per cell
CELL_EXT_BYTES = 12  # llama_kv_cell_ext: x, y, token
HEADER_BYTES = 8  # llama.cpp's magic number and the saved sequence's id
MAGIC = 0xAF143CD8


def stream_count(state) -> int:
    """How many streams the context that saved `state` had (its first KV cache's count)."""
    magic, _, n_stream = struct.unpack_from("<III", memoryview(state).cast("B"))
    if magic != MAGIC:
        raise StateFormatError("not a sequence state")
    return n_stream


class StateFormatError(ValueError):
    """The bytes are not a single sequence's KV state as this reader knows it."""


def restream(state, n_stream: int) -> ctypes.Array:
    """`state` (one sequence's, from any layout) as a context of `n_stream` streams reads it. Where
    its cells sit among the streams does not matter: llama.cpp restores them into the stream of the
    sequence it is given. Raises StateFormatError when the bytes do not parse."""
    data = memoryview(state).cast("B")
    out = bytearray(data[:HEADER_BYTES])
    for blocks in _caches(data[HEADER_BYTES:]):
        if len(blocks) > 1:
            raise StateFormatError("a single sequence's cells in more than one stream")
        out += _U32.pack(n_stream)
        for s in range(n_stream):
            out += blocks[0] if blocks and s == 0 else _U32.pack(0)
    return (ctypes.c_uint8 * len(out)).from_buffer(out)


def _caches(data: memoryview) -> list[list[memoryview]]:
    """For each KV cache in the state, its non-empty blocks (cell count, cells, rows), as slices."""
    caches, at = [], 0
    while at < len(data):
        (n_stream,) = _read(_U32, data, at)
        at += 4
        if not 0 < n_stream <= 4096:
            raise StateFormatError(f"{n_stream} streams")
        blocks = []
        for _ in range(n_stream):
            start = at
            at = _block_end(data, at)
            if at - start > 4:
                blocks.append(data[start:at])
        caches.append(blocks)
    return caches


def _block_end(data: memoryview, at: int) -> int:
    (count,) = _read(_U32, data, at)
    at += 4
    if count == 0:
        return at
    for ext in (0, CELL_EXT_BYTES):  # whether the model keeps 2D positions is not told: try both
        end = _cells_end(data, at, count, ext)
        if end is None:
            continue
        try:
            return _rows_end(data, end, count)
        except StateFormatError:
            continue
    raise StateFormatError("the cells of a stream do not parse")


def _cells_end(data: memoryview, at: int, count: int, ext: int) -> int | None:
    """Where the cells' metadata ends, when every cell names exactly one sequence (as a single
    sequence's state does); None when the bytes do not read so."""
    width = 12 + ext
    end = at + count * width
    if end > len(data):
        return None
    cells = np.frombuffer(data[at:end], dtype=np.uint32).reshape(count, width // 4)
    if not (cells[:, 1] == 1).all() or not (cells[:, -1] == cells[0, -1]).all():
        return None
    return end


def _rows_end(data: memoryview, at: int, count: int) -> int:
    v_trans, n_layer = _read(struct.Struct("<II"), data, at)
    at += 8
    if v_trans > 1 or not 0 < n_layer <= 4096:
        raise StateFormatError("not a row header")
    for _ in range(n_layer):
        _, row = _read(_K_ENTRY, data, at)
        at += _K_ENTRY.size + count * row
    for _ in range(n_layer):
        if v_trans:
            _, element, width = _read(_V_TRANS_ENTRY, data, at)
            at += _V_TRANS_ENTRY.size + count * element * width
        else:
            _, row = _read(_V_ENTRY, data, at)
            at += _V_ENTRY.size + count * row
    if at > len(data):
        raise StateFormatError("rows past the end")
    return at


def _read(fmt: struct.Struct, data: memoryview, at: int) -> tuple:
    if at + fmt.size > len(data):
        raise StateFormatError("cut short")
    return fmt.unpack_from(data, at)
