"""`Batch`: one llama_batch over numpy arrays, filled a sequence's tokens at a time."""

from __future__ import annotations

import ctypes

import llama_cpp as ll
import numpy as np


def seq_runs(seq_id: np.ndarray, n: int) -> list[tuple[int, int]]:
    """(sequence id, rows) of each run of one sequence's rows, in batch order (a sequence's rows follow each other)."""
    if not n:
        return []
    if seq_id[0] == seq_id[n - 1]:  # one sequence (its rows follow each other): a lone pane's every step
        return [(int(seq_id[0]), n)]
    ids = seq_id[:n]
    starts = np.flatnonzero(np.diff(ids)) + 1
    bounds = np.concatenate(([0], starts, [n]))
    return [(int(ids[a]), int(b - a)) for a, b in zip(bounds[:-1], bounds[1:], strict=True)]


class Batch:
    """A llama_batch whose arrays are numpy-owned, so a prompt chunk is one slice assignment.

    Every token belongs to exactly one sequence: shared prefixes are shared with seq_cp, never by
    listing one token under several sequences.
    """

    def __init__(self, capacity: int):
        self.capacity = capacity
        self.token = np.zeros(capacity, dtype=np.int32)
        self.pos = np.zeros(capacity, dtype=np.int32)
        self.n_seq_id = np.ones(capacity, dtype=np.int32)
        self.seq_id = np.zeros(capacity, dtype=np.int32)
        self.logits = np.zeros(capacity, dtype=np.int8)
        int_p = ctypes.POINTER(ctypes.c_int32)
        base = self.seq_id.ctypes.data
        self._seq_id_rows = (int_p * capacity)(*(ctypes.cast(base + 4 * i, int_p) for i in range(capacity)))
        self.struct = ll.llama_batch(
            n_tokens=0,
            token=self.token.ctypes.data_as(int_p),
            embd=None,
            pos=self.pos.ctypes.data_as(int_p),
            n_seq_id=self.n_seq_id.ctypes.data_as(int_p),
            seq_id=self._seq_id_rows,
            logits=self.logits.ctypes.data_as(ctypes.POINTER(ctypes.c_int8)),
        )
        self.clear()

    def clear(self) -> None:
        self.n_tokens = 0
        self.output_rows: list[int] = []  # the rows whose logits the decode keeps, in batch order

    def add_all(self, seq_id: int, tokens: list[int], start_pos: int) -> int:
        """Append tokens of one sequence, every one with its logits (a drafted run to verify);
        return the first one's row (the others follow it)."""
        first = self.n_tokens
        self.add(seq_id, tokens, start_pos, True)
        self.logits[first : self.n_tokens] = 1
        self.output_rows[-1:] = range(first, self.n_tokens)
        return first

    def add(self, seq_id: int, tokens, start_pos: int, logits_last: bool) -> int:
        """Append tokens of one sequence; return the row whose logits will be read (or -1)."""
        n = len(tokens)
        i = self.n_tokens
        end = i + n
        if end > self.capacity:
            raise ValueError(f"batch overflow: {end} > {self.capacity}")
        if n == 1:  # a generating sequence's next token: plain item writes beat slicing
            self.token[i], self.pos[i], self.seq_id[i] = tokens[0], start_pos, seq_id
        else:
            self.token[i:end] = tokens
            self.pos[i:end] = np.arange(start_pos, start_pos + n, dtype=np.int32)
            self.seq_id[i:end] = seq_id
            self.logits[i : end - 1] = 0
        self.n_tokens = end
        self.logits[end - 1] = logits_last
        if logits_last:
            self.output_rows.append(end - 1)
            return end - 1
        return -1


class ImageBatch:
    """A llama_batch of embeddings: pictures' rows, each with its sequence and position(s). llama.cpp's
    batch holds token ids or embeddings, never both: a step's pictures are a decode of their own.
    A model that places pictures in 2D (M-RoPE) reads `sections` positions a row (time, y, x, z),
    section by section: all the rows' first, then all their second... (llama_batch's `pos`)."""

    def __init__(self, capacity: int, n_embd: int, sections: int = 1):
        self.capacity = capacity
        self.embd = np.zeros((capacity, n_embd), dtype=np.float32)
        self.pos = np.zeros((sections, capacity), dtype=np.int32)  # by section, filled row by row
        self._pos_sections = np.zeros(sections * capacity, dtype=np.int32)  # what llama.cpp reads: section after section
        self.n_seq_id = np.ones(capacity, dtype=np.int32)
        self.seq_id = np.zeros(capacity, dtype=np.int32)
        self.logits = np.zeros(capacity, dtype=np.int8)  # a picture's rows never need logits
        int_p = ctypes.POINTER(ctypes.c_int32)
        base = self.seq_id.ctypes.data
        self._seq_id_rows = (int_p * capacity)(*(ctypes.cast(base + 4 * i, int_p) for i in range(capacity)))
        self.struct = ll.llama_batch(
            n_tokens=0,
            token=None,
            embd=self.embd.ctypes.data_as(ctypes.POINTER(ctypes.c_float)),
            pos=self._pos_sections.ctypes.data_as(int_p),
            n_seq_id=self.n_seq_id.ctypes.data_as(int_p),
            seq_id=self._seq_id_rows,
            logits=self.logits.ctypes.data_as(ctypes.POINTER(ctypes.c_int8)),
        )
        self.n_tokens = 0

    def clear(self) -> None:
        self.n_tokens = 0

    def add(self, seq_id: int, rows: np.ndarray, positions: np.ndarray) -> None:
        """Append a picture's embedding rows (n, n_embd) for one sequence at `positions` (sections, n)."""
        n = len(rows)
        i, end = self.n_tokens, self.n_tokens + n
        if end > self.capacity:
            raise ValueError(f"image batch overflow: {end} > {self.capacity}")
        self.embd[i:end] = rows
        self.pos[:, i:end] = positions
        self.seq_id[i:end] = seq_id
        self.n_tokens = end

    def seal(self) -> None:
        """Lay the positions out as llama.cpp reads them, for the rows added (before the decode)."""
        n = self.n_tokens
        self._pos_sections[: self.pos.shape[0] * n] = self.pos[:, :n].ravel()
        self.struct.n_tokens = n
