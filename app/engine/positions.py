"""Where each token of a sequence sits: the position llama.cpp's RoPE and its KV cells read.

A token's position is its index in the sequence, except after a picture of a model that places a
picture's tokens in 2D (M-RoPE: Qwen2-VL, Qwen2.5-VL, Qwen3-VL). There every token of the picture
takes the picture's first position in time, its row and column beside it, the picture spans
max(rows, columns) positions, fewer than its tokens (mtmd's n_pos), and the text after it goes on
from there (as llama.cpp's mtmd helper and llama-server place it). The KV cells hold the time
position: `llama_memory_seq_rm/cp` cut by it, so a picture whose tokens share one is kept whole or
not at all. This module is the one place that maps a token's index to its position: a `Positions`
per model knows each picture's span by its key (images.py), and a `PositionTable` per token list
holds where its pictures begin (built once for a sequence, whose pictures are all in its prompt).
"""

from __future__ import annotations

import bisect
from dataclasses import dataclass

import numpy as np

from .images import image_key, picture_runs

SECTIONS = 4  # llama.cpp's positions per embedding row of an M-RoPE model: time, height, width, (unused)


@dataclass(frozen=True)
class PictureSpan:
    """What a token list's positions need of a picture: its tokens, the positions it spans, and
    whether its tokens share its first time position (M-RoPE's layout: its cells go whole or not
    at all) or take one each (HunyuanVL's, within M-RoPE)."""

    n_tokens: int
    n_pos: int
    shared: bool

    def time(self, first: int, offset: int) -> int:
        return first if self.shared else first + offset


@dataclass(frozen=True, eq=False)
class PictureLayout:
    """Where mtmd puts a picture's tokens (read once, from its chunk): `base` holds the positions of
    each token, (SECTIONS, n_tokens) in llama.cpp's section order (time, row, column, last), for a
    picture starting at position 0; `moves` says which of them follow the picture's first position
    (mtmd's are base + first or base alone); `n_pos`, the positions the picture spans. ValueError
    for a time layout other than mtmd's two (all the first, or one a token)."""

    n_pos: int
    base: np.ndarray
    moves: np.ndarray

    def rows(self, first: int, offset: int, end: int) -> np.ndarray:
        """The positions of its tokens [offset, end) for a picture starting at `first`."""
        return self.base[:, offset:end] + self.moves[:, offset:end] * first

    def __post_init__(self):
        time, moves = self.base[0], self.moves[0]
        if not (moves == 1).all() or not ((time == 0).all() or (time == np.arange(len(time))).all()):
            raise ValueError("its tokens' time positions are neither all the picture's first nor one a token")

    @property
    def span(self) -> PictureSpan:
        n = self.base.shape[1]
        return PictureSpan(n, self.n_pos, n > 1 and not self.base[0].any())


class Positions:
    """One model's pictures' spans by their keys, kept for the engine's life as the keys are (a few
    bytes a picture; the 2D layouts stay with the sequences that read them). A model whose pictures
    take a position a token (or that sees none) has none, and every position is the token's index."""

    def __init__(self):
        self._spans: dict[int, PictureSpan] = {}

    def learn(self, layouts: dict[int, PictureLayout]) -> None:
        for key, layout in layouts.items():
            if key not in self._spans:
                self._spans[key] = layout.span

    def table(self, tokens: list[int], layouts: dict[int, PictureLayout] | None = None) -> PositionTable | None:
        """Where the pictures of `tokens` sit (with their 2D `layouts` where its pictures' rows are to
        be decoded); None when every position is an index."""
        if not self._spans:
            return None
        runs = []
        shift = 0  # tokens minus positions of the pictures before
        for start, _ in picture_runs(tokens):
            key = image_key(tokens[start])[0]
            span = self._spans.get(key)
            if span is not None:  # else a picture that takes a position a token
                runs.append((start, start - shift, span, layouts.get(key) if layouts else None))
                shift += span.n_tokens - span.n_pos  # only the last run may be cut short: no text follows it
        return PositionTable(runs) if runs else None

    def cut(self, tokens: list[int], n: int) -> tuple[int, int]:
        """Keeping the first `n` of `tokens`' cells: how many can be kept (n, or fewer where n falls
        inside a picture kept whole), and the position from which the others go."""
        table = self.table(tokens)
        return (n, n) if table is None else table.cut(n)

    def last(self, tokens: list[int]) -> int:
        """The position of the last of `tokens` (-1 for none): what llama.cpp's seq_pos_max says of their cells."""
        table = self.table(tokens)
        return len(tokens) - 1 if table is None else table.of(len(tokens) - 1)


class PositionTable:
    """The pictures of one token list: where each begins, its first position, its span (and 2D
    layout, for a sequence's). A picture's tokens are counted whole even where the list holds only
    its start (the list ends there): the position asked for next is then its next token's."""

    def __init__(self, runs: list[tuple[int, int, PictureSpan, PictureLayout | None]]):
        self._runs = runs
        self._starts = [r[0] for r in runs]

    def _run(self, i: int):
        j = bisect.bisect_right(self._starts, i) - 1
        return self._runs[j] if j >= 0 else None

    def of(self, i: int) -> int:
        """The (time) position of token `i`, or of the token that would come at `i` (-1 for -1)."""
        run = self._run(i)
        if run is None:
            return i
        start, first, span, _ = run
        offset = i - start
        if offset < span.n_tokens:
            return span.time(first, offset)
        return first + span.n_pos + offset - span.n_tokens

    def cut(self, n: int) -> tuple[int, int]:
        """As Positions.cut: (tokens kept, the first position that goes)."""
        run = self._run(n)
        if run is not None:
            start, first, span, _ = run
            if span.shared and 0 < n - start < span.n_tokens:
                return start, first
        return n, self.of(n)

    def rows(self, start: int, end: int) -> np.ndarray:
        """The positions (SECTIONS, end - start) of a picture's tokens [start, end) (within one picture)."""
        run_start, first, _, layout = self._run(start)
        return layout.rows(first, start - run_start, end - run_start)
