"""The KV cell map dock: the pool's cells by slot, coloured by the pane they serve, and the RAM tier.

It draws the engine's `CellMap` (rebuilt at most ten times a second on the engine thread) from the
window's 10 Hz tick: a cell a pixel of one image, laid out in numpy. In one pool llama.cpp places
the cells itself, so each slot's cells are drawn as one run, in slot order; a prefix two slots share
is drawn once, checkered, in the lower slot's run. With a stream per sequence each slot has a band of
its stream's cells. Evictions, restores and preemptions show in the counters and the event lines as
they happen.
"""

from __future__ import annotations

import html
import math
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import pyqtgraph as pg
from PySide6.QtCore import QPointF, Qt
from PySide6.QtGui import QColor
from PySide6.QtWidgets import QHBoxLayout, QLabel, QVBoxLayout, QWidget

from app.client import EngineClient
from app.engine.cell_map import CellMap, SlotCells, SlotState

from . import theme

FREE, GAP = -1, -2  # a cell no slot holds; the blank row between two streams
NEUTRAL = "#7f7f7f"  # the cells of a chat no pane shows (another chat, the API, a bare prompt)
KEPT_FADE = 0.55  # an idle slot's cells (kept for the next turn) are faded toward the free colour
EVENT_LINES = 4  # the latest evictions, saves, restores and preemptions shown
CHANGED_S = 2.0  # a counter that just moved stays bold this long
# a redraw of the map repaints the whole dock (tens of thousands of cells scaled to it): four a
# second keep it live at a fraction of ten's cost (window-bench, docs/performance.md)
DRAW_EVERY_S = 0.25

PaneLabels = Callable[[], dict[str, tuple[str, str]]]  # a chat key -> (its pane's colour, "pane 2 “name”")


@dataclass(frozen=True)
class CellLayout:
    """Where each cell is drawn: `slot_index[row, col]` indexes the map's slots (FREE, GAP), and
    `shared[row, col]` marks cells that more than one slot holds."""

    slot_index: np.ndarray
    shared: np.ndarray

    def cell_counts(self, n_slots: int) -> np.ndarray:
        """The cells drawn for each of the map's `n_slots` slots."""
        return np.bincount(self.slot_index[self.slot_index >= 0], minlength=n_slots)


def columns_for(n_cells: int, aspect: float = 1.0) -> int:
    """Columns that give the cells about the view's `aspect` (width / height), rounded up to 16 cells."""
    return max(16, math.ceil(math.sqrt(max(n_cells, 1) * aspect) / 16) * 16)


def lay_out(m: CellMap, cols: int | None = None) -> CellLayout:
    """The map's cells on a grid of `cols` columns: one pool's slots as runs in slot order, then the
    free cells; or each stream as a band of rows of its own."""
    cols = cols or columns_for(m.n_cells + (len(m.slots) - 1) * 16 * m.streams)
    if m.streams:
        return _streams(m, cols)
    n = len(m.slots)
    drawn_shared = [max(s.shared - (s.cells - s.own), 0) for s in m.slots]  # shared with higher slots
    index = np.repeat(np.arange(n, dtype=np.int32), [s.own for s in m.slots])
    shared = np.repeat(np.tile([True, False], n), [x for s, d in zip(m.slots, drawn_shared) for x in (d, s.own - d)])
    rows = math.ceil(m.n_cells / cols)
    grid = np.full(rows * cols, GAP, dtype=np.int32)
    grid[: m.n_cells] = FREE
    grid[: len(index)] = index[: rows * cols]
    marks = np.zeros(rows * cols, dtype=bool)
    marks[: len(shared)] = shared[: rows * cols]
    return CellLayout(grid.reshape(rows, cols), marks.reshape(rows, cols))


def _streams(m: CellMap, cols: int) -> CellLayout:
    per = m.stream_cells
    band_rows = math.ceil(per / cols)
    bands = []
    for i, s in enumerate(m.slots):
        band = np.full(band_rows * cols, GAP, dtype=np.int32)
        band[:per] = FREE
        band[: min(s.cells, per)] = i
        bands.append(band.reshape(band_rows, cols))
        bands.append(np.full((1, cols), GAP, dtype=np.int32))
    grid = np.vstack(bands[:-1]) if bands else np.full((1, cols), GAP, dtype=np.int32)
    return CellLayout(grid, np.zeros(grid.shape, dtype=bool))


def _rgba(colour: QColor) -> tuple[int, int, int, int]:
    return colour.red(), colour.green(), colour.blue(), 255


class KVMapPanel(QWidget):
    def __init__(self, client: EngineClient, pane_labels: PaneLabels):
        super().__init__()
        self.client = client
        self.pane_labels = pane_labels
        self.shown: CellMap | None = None  # the map drawn last
        self.layout_now: CellLayout | None = None
        self.events: deque[tuple[float, str]] = deque(maxlen=EVENT_LINES)
        self._changed: dict[str, float] = {}  # counter -> when it last moved
        self._labels: dict[str, tuple[str, str]] = {}
        self._drawn_at = -math.inf
        self._build()

    def _build(self) -> None:
        t = theme.current()
        self.view = pg.GraphicsLayoutWidget()
        self.view.setBackground(t.base)
        self.view.setMinimumSize(220, 180)
        self.box = self.view.addViewBox(lockAspect=True, invertY=True, enableMouse=False, enableMenu=False)
        self.image = pg.ImageItem(axisOrder="row-major")
        self.box.addItem(self.image)
        self.view.scene().sigMouseMoved.connect(self._on_hover)
        self.ram_label = QLabel(textFormat=Qt.TextFormat.RichText, alignment=Qt.AlignmentFlag.AlignTop)
        self.ram_label.setMinimumWidth(150)
        self.ram_label.setWordWrap(True)
        top = QHBoxLayout()
        top.addWidget(self.view, 3)
        top.addWidget(self.ram_label, 1)
        self.counters_label = QLabel(textFormat=Qt.TextFormat.RichText)
        self.events_label = QLabel(textFormat=Qt.TextFormat.RichText)
        self.legend_label = QLabel(textFormat=Qt.TextFormat.RichText)
        self.legend_label.setWordWrap(True)
        self.hover_label = QLabel("Point at a cell: whose it is")
        self.hover_label.setWordWrap(True)
        column = QVBoxLayout(self)
        column.setContentsMargins(4, 4, 4, 4)
        column.addLayout(top, 1)
        for label in (self.counters_label, self.events_label, self.legend_label, self.hover_label):
            column.addWidget(label)

    # -- refresh, from the window's tick ---------------------------------------------------------

    def refresh(self) -> None:
        now = time.monotonic()
        m = self.client.cell_map_of(None) if self.client.is_running else None
        labels = self.pane_labels()
        if m is None or (m is self.shown and labels == self._labels) or now - self._drawn_at < DRAW_EVERY_S:
            self._show_counters(self.shown)  # a bold counter goes back to normal
            return
        self._drawn_at = now
        self._note_events(self.shown, m)
        self.shown, self._labels = m, labels
        aspect = self.view.width() / max(self.view.height(), 1)
        self.layout_now = lay_out(m, columns_for(m.n_cells, min(max(aspect, 0.5), 4.0)))
        self.image.setImage(self._pixels(m, self.layout_now), autoLevels=False)
        self.box.autoRange(padding=0.01)
        self._show_counters(m)
        self.legend_label.setText(self._legend(m))
        self.ram_label.setText(self._ram(m))

    def colour_of(self, conversation_id: str | None) -> QColor:
        entry = self._labels.get(conversation_id) if conversation_id is not None else None
        return QColor(entry[0] if entry else NEUTRAL)

    def name_of(self, conversation_id: str | None) -> str:
        if conversation_id is None:
            return "a prompt without a chat"
        entry = self._labels.get(conversation_id)
        return entry[1] if entry else f"“{conversation_id[:24]}” (no pane)"

    def _pixels(self, m: CellMap, cells: CellLayout) -> np.ndarray:
        t = theme.current()
        free, gap = theme.blend(t.base, t.text, 0.12), t.base
        lut = [_rgba(gap), _rgba(free)]
        lighter = [_rgba(gap), _rgba(free)]
        for s in m.slots:
            colour = self.colour_of(s.conversation_id)
            if s.state is SlotState.KEPT:
                colour = theme.blend(colour, free, KEPT_FADE)
            lut.append(_rgba(colour))
            lighter.append(_rgba(theme.blend(colour, t.base, 0.6)))
        index = cells.slot_index + 2  # GAP -> 0, FREE -> 1, slot i -> i + 2
        rows, cols = np.indices(index.shape)
        checker = cells.shared & ((rows + cols) % 2 == 1)
        return np.where(checker[..., None], np.array(lighter, np.uint8)[index], np.array(lut, np.uint8)[index])

    def _note_events(self, old: CellMap | None, new: CellMap) -> None:
        if old is None:
            return
        now = time.monotonic()
        before = {s.conversation_id for s in old.saved}
        after = {s.conversation_id for s in new.saved}
        for name in ("evictions", "preemptions", "saves", "restores", "dropped"):
            if getattr(new, name) > getattr(old, name):
                self._changed[name] = now
        if new.saves > old.saves and new.saved:  # the RAM tier's entries, the latest saved last
            self.events.append((now, f"saved to RAM: {self.name_of(new.saved[-1].conversation_id)}"))
        if new.restores > old.restores:
            for c in before - after or {None}:
                self.events.append((now, f"restored from RAM: {self.name_of(c) if c else 'a chat'}"))
        if new.preemptions > old.preemptions:
            who = ", ".join(self.name_of(p.conversation_id) for p in new.preempted) or "a reply"
            self.events.append((now, f"preempted, waits for its turn: {who}"))
        if new.evictions > old.evictions and new.saves == old.saves:
            self.events.append((now, "evicted: a short history, dropped (cheaper to compute again)"))

    def _show_counters(self, m: CellMap | None) -> None:
        if m is None:
            return
        now = time.monotonic()
        parts = []
        for name in ("evictions", "saves", "restores", "preemptions", "dropped"):
            text = f"{name} {getattr(m, name)}"
            parts.append(f"<b>{text}</b>" if now - self._changed.get(name, -math.inf) < CHANGED_S else text)
        used = m.cells_used
        self.counters_label.setText(f"{used:,} of {m.n_cells:,} cells used · " + " · ".join(parts))
        self.events_label.setText(
            "<br>".join(f"{now - t:4.1f} s ago: {html.escape(text)}" for t, text in reversed(self.events))
            or "No eviction, restore or preemption yet."
        )

    def _legend(self, m: CellMap) -> str:
        layout = "a stream per sequence" if m.streams else "one pool, slots' runs in slot order (llama.cpp places the cells)"
        rows = [f"<i>{layout}; checkered: cells shared with another slot; faded: kept for the next turn</i>"]
        for s in m.slots:
            if s.state is SlotState.EMPTY:
                continue
            rows.append(f"{self._chip(s.conversation_id)} {html.escape(self._describe(s))}")
        if m.preempted:
            waiting = ", ".join(self.name_of(p.conversation_id) for p in m.preempted)
            rows.append(f"preempted, waiting: {html.escape(waiting)}")
        return "<br>".join(rows)

    def _describe(self, s: SlotCells) -> str:
        text = f"slot {s.slot}: {self.name_of(s.conversation_id)}, {s.cells:,} cells"
        if s.shared:
            by_count: dict[int, list[str]] = {}
            for slot, n in zip(s.shared_with, s.shared_counts):
                by_count.setdefault(n, []).append(str(slot))
            groups = [f"{n:,} with slot{'s' if len(o) > 1 else ''} {', '.join(o)}" for n, o in sorted(by_count.items())]
            text += f" (shared: {'; '.join(groups)})"
        return f"{text}, {s.state.value}"

    def _ram(self, m: CellMap) -> str:
        total = sum(s.bytes for s in m.saved)
        rows = [f"<b>RAM tier</b>: {len(m.saved)} saved, {total / 1e6:.1f} MB"]
        for s in reversed(m.saved):  # the latest first
            name = html.escape(self.name_of(s.conversation_id))
            rows.append(f"{self._chip(s.conversation_id)} {name}<br>&nbsp;&nbsp;{s.tokens:,} tokens, {s.bytes / 1e6:.1f} MB")
        return "<br>".join(rows)

    def _chip(self, conversation_id: str | None) -> str:
        return f"<span style='color:{self.colour_of(conversation_id).name()}'>■</span>"

    # -- hover -----------------------------------------------------------------------------------

    def _on_hover(self, pos: QPointF) -> None:
        text = self.describe_at(self.box.mapSceneToView(pos))
        if text is not None:
            self.hover_label.setText(text)

    def describe_at(self, point: QPointF) -> str | None:
        """What the cell under `point` (in image coordinates) is; None outside the picture."""
        cells, m = self.layout_now, self.shown
        row, col = math.floor(point.y()), math.floor(point.x())
        if cells is None or m is None or not (0 <= row < cells.slot_index.shape[0] and 0 <= col < cells.slot_index.shape[1]):
            return None
        i = int(cells.slot_index[row, col])
        if i == GAP:
            return None
        if i == FREE:
            return f"a free cell ({m.n_cells - m.cells_used:,} free)"
        text = self._describe(m.slots[i])
        return text + (" · this cell is shared" if cells.shared[row, col] else "")
