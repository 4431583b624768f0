"""The step timeline's figures, without Qt: each engine step a column as wide as its time, its
batch's tokens stacked in batch order, a rectangle per sequence's share (`StepPart`).

The timeline dock (app/ui/docks/step_timeline.py) draws a pane's rectangles of one kind (decode tokens,
drafted tokens, or prompt-chunk tokens: `PartKind`) as one item; here they are kept in numpy columns
so that a pane's are picked out at once. A part with drafted tokens (speculative decoding: guesses
after its next token, verified in the step) is two rectangles: its next token, and the guesses above it;
a prompt chunk that begins with a picture is two too: the picture's rows, and the text above them.
"""

from __future__ import annotations

import bisect
import math
from collections import deque
from enum import IntEnum

import numpy as np

from app.engine.stats import StepStats

ROWS = 16384  # rectangles kept before the oldest are dropped: a minute of 8 panes at 30 steps a second


class PartKind(IntEnum):
    """What a rectangle's tokens are. PROMPT and DECODE equal False and True: `is_decode`, as a kind."""

    PROMPT = 0  # a chunk of a prompt
    DECODE = 1  # a sequence's next token
    DRAFTED = 2  # guesses after it (speculative decoding), verified in the same step
    IMAGE = 3  # a picture's embedding rows (a decode of their own, before the step's tokens)


class StepColumns:
    """The steps of the last `keep_s` seconds and their rectangles (x in monotonic seconds, y in tokens).

    A part of no conversation is filed under the key None."""

    def __init__(self, keep_s: float):
        self.keep_s = keep_s
        self.steps: deque[StepStats] = deque()
        self._ends: deque[float] = deque()  # each step's t_end, for step_at
        self.last_t_end = -math.inf
        self._keys: dict[str | None, int] = {}  # conversation -> its number in `_key`
        self._first, self._n = 0, 0  # the rows kept: [_first, _n)
        self._x0 = np.zeros(ROWS)
        self._w = np.zeros(ROWS)
        self._y0 = np.zeros(ROWS)
        self._h = np.zeros(ROWS)
        self._key = np.zeros(ROWS, dtype=np.int32)
        self._kind = np.zeros(ROWS, dtype=np.int8)  # a PartKind

    def add(self, steps) -> int:
        """Take the steps that ended after the last one taken; return how many were new."""
        new = [st for st in steps if st.t_end > self.last_t_end]
        for st in new:
            self._add_step(st)
        if new:
            self.last_t_end = new[-1].t_end
            self._forget_before(self.last_t_end - self.keep_s)
        return len(new)

    def _add_step(self, st: StepStats) -> None:
        self.steps.append(st)
        self._ends.append(st.t_end)
        if self._n + 2 * len(st.parts) > ROWS:  # a part is one rectangle, or two with a draft or a picture
            self._compact(keep=ROWS // 2)
        y = 0
        for part in st.parts:
            key = self._keys.setdefault(part.conversation_id, len(self._keys))
            if part.image_tokens:  # the picture's rows first, as decoded
                self._add_rect(st, key, PartKind.IMAGE, y, part.image_tokens)
                y += part.image_tokens
                if part.n_tokens == part.image_tokens:
                    continue
            own = part.n_tokens - part.drafted - part.image_tokens  # its next token (or its prompt chunk), then the guesses
            self._add_rect(st, key, PartKind.DECODE if part.is_decode else PartKind.PROMPT, y, own)
            if part.drafted:
                self._add_rect(st, key, PartKind.DRAFTED, y + own, part.drafted)
            y += part.n_tokens - part.image_tokens

    def _add_rect(self, st: StepStats, key: int, kind: PartKind, y0: int, height: int) -> None:
        i = self._n
        self._x0[i], self._w[i], self._y0[i], self._h[i] = st.t_start, st.step_s, y0, height
        self._key[i], self._kind[i] = key, kind
        self._n += 1

    def _forget_before(self, t: float) -> None:
        while self.steps and self.steps[0].t_end < t:
            self.steps.popleft()
            self._ends.popleft()
        n = self._n
        self._first = int(np.searchsorted(self._x0[:n] + self._w[:n], t))
        if self._first > ROWS // 4:  # rarely: moving rows costs as much as keeping them
            self._compact(keep=n - self._first)

    def _compact(self, keep: int) -> None:
        start = self._n - keep
        for column in (self._x0, self._w, self._y0, self._h, self._key, self._kind):
            column[:keep] = column[start : self._n]
        self._first, self._n = max(0, self._first - start), keep

    @property
    def keys(self) -> list[str | None]:
        """The conversations with a part in a step kept."""
        present = set(np.unique(self._key[self._first : self._n]).tolist())
        return [key for key, number in self._keys.items() if number in present]

    def rects(self, key: str | None, is_decode: bool, since: float = -math.inf) -> tuple[np.ndarray, ...]:
        """(x0, width, y0, height) of a conversation's decode tokens (its drafted ones apart) or prompt
        chunks, in steps that ended after `since`."""
        return self.kind_rects(key, PartKind(int(is_decode)), since)

    def kind_rects(self, key: str | None, kind: PartKind, since: float = -math.inf) -> tuple[np.ndarray, ...]:
        """(x0, width, y0, height) of a conversation's rectangles of one kind, in steps that ended after `since`."""
        number = self._keys.get(key)
        if number is None:
            return tuple(np.empty(0) for _ in range(4))
        rows = slice(self._first, self._n)
        x0, w = self._x0[rows], self._w[rows]
        mask = (self._key[rows] == number) & (self._kind[rows] == kind) & (x0 + w > since)
        return x0[mask], w[mask], self._y0[rows][mask], self._h[rows][mask]

    def step_at(self, t: float) -> StepStats | None:
        """The step that was running at monotonic time t, if any."""
        i = bisect.bisect_left(self._ends, t)
        if i < len(self.steps) and self.steps[i].t_start <= t:
            return self.steps[i]
        return None

    def since(self, t: float) -> list[StepStats]:
        """The steps kept that ended after t, oldest first."""
        return list(self.steps)[bisect.bisect_right(self._ends, t) :]


def step_summary(st: StepStats, names: dict[str | None, str]) -> str:
    """A step's figures in a few lines (the timeline's tooltip); `names` names the conversations."""
    idle = max(0, st.batch_limit - st.n_seqs)
    drafted = sum(part.drafted for part in st.parts)
    image = (
        f", of which {st.n_image_tokens} image ({st.image_s * 1e3:.1f} ms, a decode of their own)" if st.n_image_tokens else ""
    )
    lines = [
        f"{st.step_s * 1e3:.1f} ms step ({st.decode_s * 1e3:.1f} ms in llama_decode"
        + (f", cut into {st.n_ubatches} ubatches" if st.n_ubatches > 1 else "")
        + ")",
        f"{st.n_tokens} tokens: {st.n_decode} decode, {st.n_prefill_tokens} prompt{image}"
        + (f", {drafted} drafted" if drafted else ""),
        f"{st.n_seqs} sequences of a limit of {st.batch_limit}: {idle} idle",
    ]
    for part in st.parts:
        kind = "decode" if part.is_decode else "prompt chunk"
        name = names.get(part.conversation_id, part.conversation_id or "no conversation")
        if part.drafted:
            lines.append(f"  {name}: {part.n_tokens - part.drafted} {kind} + {part.drafted} drafted")
        elif part.image_tokens:
            lines.append(f"  {name}: {part.n_tokens} {kind}, {part.image_tokens} of them a picture's")
        else:
            lines.append(f"  {name}: {part.n_tokens} {kind}")
    return "\n".join(lines)
