"""A sequence's saved KV state moved between llama.cpp's layouts (app/engine/llama/seq_state.py), on
states built byte by byte as llama.cpp writes them: one KV cache or two (a sliding-window model's),
V rows transposed or not (flash attention off or on), cells with M-RoPE's extra positions or not.
A state saved by llama.cpp itself goes through the same rewrite and back into a context of the other
layout (the last test); the engine's moves are in tests/engine/test_kv_layout_change.py."""

from __future__ import annotations

import struct

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from app.engine.kv.layout import LayoutChoice
from app.engine.llama.context import LlamaBackend
from app.engine.llama.seq_state import MAGIC, StateFormatError, restream, stream_count


def block(n_cells: int, seq_id: int, n_layer: int, row: int, v_trans: bool, ext: bool) -> bytes:
    """One stream's cells of one sequence: count, cells, then K and V rows, as state_write does."""
    out = struct.pack("<I", n_cells)
    for pos in range(n_cells):
        out += struct.pack("<iI", pos, 1) + (struct.pack("<iii", pos, 0, 7) if ext else b"") + struct.pack("<i", seq_id)
    out += struct.pack("<II", v_trans, n_layer)
    for layer in range(n_layer):
        out += struct.pack("<iQ", 1, row) + bytes([layer % 251]) * (row * n_cells)
    for layer in range(n_layer):
        if v_trans:
            out += struct.pack("<iII", 1, 2, row // 2) + bytes([(layer + 7) % 251]) * (row * n_cells)
        else:
            out += struct.pack("<iQ", 1, row) + bytes([(layer + 7) % 251]) * (row * n_cells)
    return out


def state(caches: list[bytes], n_stream: int, stream: int, seq_id: int = 3) -> bytes:
    """A whole state: llama.cpp's header, then each cache's stream count and streams, the cells in `stream`."""
    out = struct.pack("<Ii", MAGIC, seq_id)
    for cells in caches:
        out += struct.pack("<I", n_stream)
        out += b"".join(cells if s == stream else struct.pack("<I", 0) for s in range(n_stream))
    return out


shapes = st.tuples(
    st.integers(1, 40),  # cells
    st.integers(1, 4),  # layers
    st.sampled_from([2, 6, 64]),  # bytes per row
    st.booleans(),  # V transposed
    st.booleans(),  # M-RoPE's extra positions
)


@pytest.mark.unit
@settings(max_examples=60, deadline=None)
@given(shapes=st.lists(shapes, min_size=1, max_size=2), n_stream=st.integers(2, 16), data=st.data())
def test_a_state_moves_between_layouts_with_every_row_as_it_was(shapes, n_stream, data):
    stream = data.draw(st.integers(0, n_stream - 1))
    caches = [block(n, 3, layers, row, v_trans, ext) for n, layers, row, v_trans, ext in shapes]
    saved = state(caches, n_stream, stream)

    pooled = bytes(restream(saved, 1))
    assert pooled == state(caches, 1, 0) and stream_count(pooled) == 1
    # back to streams: llama.cpp restores a sequence's cells into its own stream whichever it reads them from
    assert bytes(restream(pooled, n_stream)) == state(caches, n_stream, 0)


@pytest.mark.unit
def test_a_state_without_cells_moves_too():
    assert bytes(restream(state([struct.pack("<I", 0)], 4, 0), 1)) == state([struct.pack("<I", 0)], 1, 0)


@pytest.mark.unit
@settings(max_examples=200, deadline=None)
@given(garbage=st.binary(max_size=300), cut=st.integers(1, 200))
def test_bytes_that_are_no_state_are_refused_with_one_error(garbage, cut):
    try:
        restream(bytearray(struct.pack("<Ii", MAGIC, 0) + garbage), 1)  # parses, or says why not
    except StateFormatError:
        pass
    with pytest.raises(StateFormatError):  # a state cut short never passes for a whole one
        restream(bytearray(state([block(5, 0, 2, 6, False, False)], 4, 1)[:-cut]), 1)


@pytest.mark.unit
def test_a_sequence_spread_over_two_streams_is_refused():
    cells = block(3, 0, 1, 2, False, False)
    two = struct.pack("<IiI", MAGIC, 0, 2) + cells + cells
    with pytest.raises(StateFormatError, match="more than one stream"):
        restream(two, 1)
    with pytest.raises(StateFormatError, match="not a sequence state"):
        stream_count(b"\0" * 12)


@pytest.mark.tiny
def test_a_state_saved_by_llama_cpp_comes_back_whole_in_the_other_layout(tiny_config):
    """Cells decoded in streams, saved by llama.cpp, rewritten for one pool and restored there: the
    positions are as they were, the rows byte for byte."""
    backend = LlamaBackend(tiny_config.with_(n_ctx=2048, capacity=2, kv_unified=None))
    try:
        assert backend.streams and backend.n_stream == 2
        backend.batch.clear()
        backend.batch.add(1, list(range(100, 140)), 0, True)
        assert backend.decode() == 0
        size = backend.seq_state_size(1)
        saved = bytes(backend.seq_save(1, size))
        assert stream_count(saved) == 2
        pooled = restream(saved, 1)
        assert backend.relayout(LayoutChoice(True, "test"), []) is None and not backend.streams
        assert backend.seq_restore(1, pooled, len(pooled))
        assert (backend.seq_pos_min(1), backend.seq_pos_max(1)) == (0, 39)
        again = bytes(backend.seq_save(1, backend.seq_state_size(1)))
        # back to two streams it reads as the state saved there (the block in the first stream: llama.cpp
        # restores it into the sequence's own)
        assert again == bytes(pooled) and bytes(restream(again, 2)) == bytes(restream(saved, 2))
    finally:
        backend.close()
