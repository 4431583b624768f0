"""The KV cells dock: which chat holds how many of the pool's cells, drawn at a scale that shows them.

Each row of the picture is a slot (a llama.cpp sequence) holding cells: its cells in token order, in
its pane's colour, the full width being the longest row rounded up, so 300 cells of a stream of 8,192
fill a visible area; the free rest is said in words. A prefix several rows share (held once in the
pool) is hatched; a picture's cells (its embeddings) are cross-hatched, as the step timeline draws a
picture's rows; a chat saved to the RAM tier is a striped row; the bar under the rows is the whole
pool to scale (its streams side by side, or in one pool, where llama.cpp places the cells itself,
each slot's cells as one run in slot order). The picture is one numpy image at the widget's pixel
size, redrawn from the window's tick at most four times a second.
"""

from __future__ import annotations

import html
import math
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
from PySide6.QtCore import QPointF, QSize, Qt
from PySide6.QtGui import QColor, QCursor, QImage, QMouseEvent, QPainter, QPaintEvent
from PySide6.QtWidgets import QLabel, QScrollArea, QSizePolicy, QToolTip, QVBoxLayout, QWidget

from app.client import EngineClient
from app.engine.cell_map import CellMap, SlotCells, SlotState
from app.ui import theme

FREE, GAP = -1, -2  # a pixel of the bar showing free cells; the gap between two streams
NEUTRAL = "#7f7f7f"  # the cells of a chat no pane shows (another chat, the API, a bare prompt)
KEPT_FADE = 0.55  # an idle slot's cells (kept for the next turn) are faded toward the free colour
EVENT_LINES = 4  # the latest evictions, saves, restores and preemptions shown
CHANGED_S = 2.0  # a counter that just moved stays bold this long
# a redraw repaints the whole picture: four a second keep it live at a fraction of ten's cost
# (window-bench, docs/performance.md)
DRAW_EVERY_S = 0.25
MIN_EXTENT = 64  # the picture's full width never stands for fewer cells: a short chat stays short
NICE = (1, 1.25, 1.5, 2, 2.5, 3, 4, 5, 6, 8, 10)  # the full width is a round number of cells
RAM_ROWS = 4  # the RAM tier's latest entries drawn as rows (the rest are listed)
ROW_PX, MIN_ROW_PX, GAP_PX = 18, 2, 2  # a row's height at most and at least, the gap between two
BAR_GAP_PX, BAR_PX = 6, 8  # the whole-pool bar under the rows
HATCH_PX = 6  # the period of a shared prefix's diagonal stripes
PICTURE_PX = 6  # the period of a picture's cross-hatch: thin lines both ways over a faint fill
PICTURE_FILL = 0.7  # under a picture's cross-hatch: its pane's colour this far toward the background

# the counters in plain words: (CellMap field, words after the number, what it counts)
COUNTERS = (
    ("evictions", "pushed out", "chats whose cells were taken back to make room for another chat"),
    ("saves", "saved to RAM", "pushed-out chats copied to the RAM tier, to bring back instead of reading again"),
    ("restores", "back from RAM", "chats whose cells were copied back from RAM when they went on"),
    ("preemptions", "replies paused", "replies stopped mid-way for lack of room; each waits, then goes on"),
    ("dropped", "dropped from RAM", "RAM entries pushed out by newer ones (the RAM tier was full)"),
)
STATE_WORDS = {
    SlotState.RUNNING: "writing a reply",
    SlotState.PAUSED: "its reply paused until the batch has room",
    SlotState.KEPT: "kept for its next turn",
}

PaneLabels = Callable[[], dict[str, tuple[str, str]]]  # a chat key -> (its pane's colour, "pane 2 “name”")


@dataclass(frozen=True)
class Row:
    """One row of the picture, pixel rows [top, top + height): a slot's cells or a RAM entry's."""

    top: int
    height: int
    cells: int  # its length: the cells it holds (a RAM entry: its tokens)
    shared: int  # of those, the leading ones it shares with other rows (held once)
    slot: int = -1  # its index in the map's slots, or -1
    saved: int = -1  # its index in the map's RAM entries, or -1


@dataclass(frozen=True)
class CellLayout:
    """Where the map is drawn on a `width` x `height` image: the rows, each `extent` cells wide, then
    the whole pool as a bar."""

    width: int
    height: int
    extent: int
    rows: tuple[Row, ...]
    bar_top: int
    hidden: int = 0  # rows that did not fit the height

    def span(self, cells: int) -> int:
        """Pixels `cells` cells take from a row's left edge (a cell at least one)."""
        return min(self.width, math.ceil(cells * self.width / self.extent))

    def cell_at(self, x: float) -> int:
        return math.floor(x * self.extent / self.width)

    def row_at(self, y: float) -> Row | None:
        return next((r for r in self.rows if r.top <= y < r.top + r.height), None)

    def in_bar(self, y: float) -> bool:
        return self.bar_top <= y < self.bar_top + BAR_PX


def extent_for(longest: int, stream_cells: int) -> int:
    """The cells the full width stands for: `longest` rounded up to a round number (a quarter more at
    most), never more than a stream holds."""
    if longest <= MIN_EXTENT:
        return min(MIN_EXTENT, stream_cells) or 1
    power = 10 ** math.floor(math.log10(longest))
    nice = next(math.ceil(f * power) for f in NICE if f * power >= longest)
    return max(min(nice, stream_cells), longest)


def lay_out(m: CellMap, width: int, height: int) -> CellLayout:
    """The rows of the slots that hold cells, then of the RAM tier's latest entries, as tall as the
    height allows; the bar under them."""
    held = [(i, s.cells, s.shared) for i, s in enumerate(m.slots) if s.cells]
    saved = [(j, m.saved[j].tokens) for j in reversed(range(len(m.saved)))][:RAM_ROWS]
    extent = extent_for(max([c for _, c, _ in held] + [t for _, t in saved], default=0), m.stream_cells)
    n = len(held) + len(saved)
    room = height - BAR_GAP_PX - BAR_PX
    gap = GAP_PX if n * (MIN_ROW_PX + GAP_PX) <= room else 1
    fit = min(n, max((room + gap) // (MIN_ROW_PX + gap), 0))
    row_px = min(ROW_PX, (room + gap) // fit - gap) if fit else 0
    entries = [(cells, shared, i, -1) for i, cells, shared in held] + [(tokens, 0, -1, j) for j, tokens in saved]
    rows = tuple(Row(k * (row_px + gap), row_px, *entry) for k, entry in enumerate(entries[:fit]))
    bar_top = fit * (row_px + gap) - gap + BAR_GAP_PX if fit else 0
    return CellLayout(width, height, extent, rows, bar_top, hidden=n - fit)


def bar_slots(m: CellMap, x: np.ndarray, width: int) -> np.ndarray:
    """For each pixel column `x` of the whole-pool bar `width` pixels wide: the index of the slot whose
    cells it shows, FREE, or GAP (between two streams)."""
    if m.streams and m.slots:  # a segment a stream, filled as far as its slot holds cells
        per = max(m.stream_cells, 1)
        cell = (x + 0.5) * m.n_cells / width
        stream = np.minimum(cell // per, len(m.slots) - 1).astype(np.int64)
        lengths = np.array([s.cells for s in m.slots])
        index = np.where(cell % per < lengths[stream], stream, FREE)
        if width >= 4 * len(m.slots) and len(x) > 1:
            index[1:][np.diff(stream) != 0] = GAP
        return index
    # one pool: each slot's run in slot order, a run at least a pixel
    ends = np.ceil(np.cumsum([s.own for s in m.slots]) * width / max(m.n_cells, 1))
    slot = np.searchsorted(ends, x, side="right")
    return np.where(slot < len(m.slots), slot, FREE)


def _rgba(colour: QColor) -> tuple[int, int, int, int]:
    return colour.red(), colour.green(), colour.blue(), 255


class CellPicture(QWidget):
    """The map's image at the widget's own pixel size; it calls `on_hover` with the pixel pointed at."""

    def __init__(self, on_hover: Callable[[QPointF], None]):
        super().__init__()
        self.on_hover = on_hover
        self.pixels: np.ndarray | None = None  # the image drawn last, rows x columns x RGBA
        self._image = QImage()
        self._rows = 4  # rows it should have room for at their full height
        self.setMouseTracking(True)
        self.setMinimumSize(160, 64)
        # room beyond its rows' full height is no use to it: the words below get that
        self.setSizePolicy(QSizePolicy.Policy.Expanding, QSizePolicy.Policy.Preferred)

    def sizeHint(self) -> QSize:
        return QSize(320, self._rows * (ROW_PX + GAP_PX) + BAR_GAP_PX + BAR_PX)

    def make_room(self, rows: int) -> None:
        if rows != self._rows:
            self._rows = rows
            self.updateGeometry()

    def pixel_size(self) -> tuple[int, int]:
        ratio = self.devicePixelRatioF()
        return max(round(self.width() * ratio), 1), max(round(self.height() * ratio), 1)

    def show_pixels(self, pixels: np.ndarray) -> None:
        self.pixels = pixels
        h, w = pixels.shape[:2]
        self._image = QImage(pixels.data, w, h, 4 * w, QImage.Format.Format_RGBA8888).copy()
        self._image.setDevicePixelRatio(self.devicePixelRatioF())
        self.update()

    def paintEvent(self, event: QPaintEvent) -> None:
        painter = QPainter(self)
        painter.drawImage(0, 0, self._image)
        painter.end()

    def mouseMoveEvent(self, event: QMouseEvent) -> None:
        self.on_hover(event.position() * self.devicePixelRatioF())


class KVMapPanel(QWidget):
    """The dock's content: the counters, the picture, what it shows in words, then a line per row,
    the RAM tier and the latest events."""

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
        def label(rich: bool = True) -> QLabel:
            text = QLabel(textFormat=Qt.TextFormat.RichText if rich else Qt.TextFormat.PlainText)
            text.setWordWrap(True)  # a narrow dock wraps the words, never cuts them
            return text

        self.counters_label = label()
        self.counters_label.setToolTip("<br>".join(f"<b>{words}</b>: {html.escape(meaning)}" for _, words, meaning in COUNTERS))
        self.picture = CellPicture(self._on_hover)
        self.explain_label = label(rich=False)  # what the picture shows, in words
        self.events_label, self.legend_label, self.ram_label = label(), label(), label()
        details = QWidget()
        rows = QVBoxLayout(details)
        rows.setContentsMargins(0, 0, 0, 0)
        for text in (self.legend_label, self.ram_label, self.events_label):
            rows.addWidget(text)
        rows.addStretch(1)
        scroll = QScrollArea(widgetResizable=True, frameShape=QScrollArea.Shape.NoFrame)
        scroll.setHorizontalScrollBarPolicy(Qt.ScrollBarPolicy.ScrollBarAlwaysOff)
        scroll.setWidget(details)
        scroll.setMinimumHeight(40)
        column = QVBoxLayout(self)
        column.setContentsMargins(4, 4, 4, 4)
        column.addWidget(self.counters_label)
        column.addWidget(self.picture)
        column.addWidget(self.explain_label)
        column.addWidget(scroll, 1)

    # -- refresh, from the window's tick ---------------------------------------------------------

    def refresh(self) -> None:
        now = time.monotonic()
        m = self.client.cell_map_of(None) if self.client.is_running else None
        labels = self.pane_labels()
        drawn = self.layout_now
        size = self.picture.pixel_size()
        same = m is self.shown and labels == self._labels and drawn is not None and size == (drawn.width, drawn.height)
        if m is None or same or now - self._drawn_at < DRAW_EVERY_S:
            self._show_counters(self.shown)  # a bold counter goes back to normal
            return
        self._drawn_at = now
        self._note_events(self.shown, m)
        self.shown, self._labels = m, labels
        self.layout_now = lay_out(m, *size)
        self.picture.make_room(len(self.layout_now.rows) + self.layout_now.hidden)
        self.picture.show_pixels(self._pixels(m, self.layout_now))
        self._show_counters(m)
        self.explain_label.setText(self._explain(m, self.layout_now))
        self.legend_label.setText(self._legend(m, self.layout_now))
        self.ram_label.setText(self._ram(m))

    def colour_of(self, conversation_id: str | None) -> QColor:
        entry = self._labels.get(conversation_id) if conversation_id is not None else None
        return QColor(entry[0] if entry else NEUTRAL)

    def name_of(self, conversation_id: str | None) -> str:
        if conversation_id is None:
            return "a prompt without a chat"
        entry = self._labels.get(conversation_id)
        return entry[1] if entry else f"a chat no pane shows (“{conversation_id[:12]}”)"

    # -- the picture -----------------------------------------------------------------------------

    def _pixels(self, m: CellMap, cells: CellLayout) -> np.ndarray:
        t = theme.current()
        free = theme.blend(t.base, t.text, 0.12)
        image = np.empty((cells.height, cells.width, 4), np.uint8)
        image[:] = _rgba(t.base)
        x = np.arange(cells.width)
        for row in cells.rows:
            band = image[row.top : row.top + row.height]
            end = cells.span(row.cells)
            if row.saved >= 0:  # a RAM entry: upright stripes two pixels wide, out of the pool
                colour = self.colour_of(m.saved[row.saved].conversation_id)
                band[:, :end] = _rgba(theme.blend(colour, t.base, 0.5))
                band[:, :end][:, (x[:end] // 2) % 2 == 0] = _rgba(colour)
                continue
            colour = self._slot_colour(m.slots[row.slot], free)
            if m.streams:
                band[:] = _rgba(free)  # the rest of its stream is free
            band[:, :end] = _rgba(colour)
            y = np.arange(row.top, row.top + row.height)[:, None]
            shared = cells.span(row.shared)
            if shared:  # diagonal stripes
                band[:, :shared][(x[:shared] + y) % HATCH_PX < HATCH_PX // 2] = _rgba(theme.blend(colour, t.base, 0.6))
            for first, end in self._picture_columns(m.slots[row.slot], cells):
                self._cross_hatch(band[:, first:end], x[first:end], y, colour, shared, t.base)
        image[cells.bar_top : cells.bar_top + BAR_PX] = self._bar(m, cells.width, free)
        return image

    @staticmethod
    def _picture_columns(s: SlotCells, cells: CellLayout) -> list[tuple[int, int]]:
        """The pixel columns of each of the slot's pictures, a picture at least one column wide."""
        spans = []
        for first, end in s.pictures:
            left = min(cells.span(first), cells.width - 1)
            spans.append((left, max(cells.span(end), left + 1)))
        return spans

    @staticmethod
    def _cross_hatch(band: np.ndarray, x: np.ndarray, y: np.ndarray, colour: QColor, shared: int, base: QColor) -> None:
        """A picture's cells: lines both ways in the pane's colour over a faint fill. Where they are a
        shared prefix too, the shared stripes are drawn and the cross-hatch shows between them."""
        stripe = (x < shared) & ((x + y) % (2 * HATCH_PX) < HATCH_PX // 2)  # the shared hatch's solid stripes, wider apart
        band[:] = _rgba(theme.blend(colour, base, PICTURE_FILL))
        band[((x + y) % PICTURE_PX == 0) | ((x - y) % PICTURE_PX == 0)] = _rgba(colour)
        band[stripe] = _rgba(colour)

    def _bar(self, m: CellMap, width: int, free: QColor) -> np.ndarray:
        """The whole pool as one row of pixels: each slot's cells in its colour, the free ones pale."""
        lut = [_rgba(theme.current().base), _rgba(free)] + [_rgba(self._slot_colour(s, free)) for s in m.slots]
        return np.array(lut, np.uint8)[bar_slots(m, np.arange(width), width) + 2][None, :, :]

    def _slot_colour(self, s: SlotCells, free: QColor) -> QColor:
        colour = self.colour_of(s.conversation_id)
        return theme.blend(colour, free, KEPT_FADE) if s.state is SlotState.KEPT else colour

    def _explain(self, m: CellMap, cells: CellLayout) -> str:
        """The picture in one sentence of plain words, naming only the marks it shows."""
        rows = [r for r in cells.rows if r.slot >= 0]
        if not rows:
            parts = [f"No chat holds cells: all {m.n_cells:,} are free."]
        elif m.streams:
            rest = m.stream_cells - cells.extent
            parts = [f"Each row is a chat's stream, in token order: {cells.extent:,} cells across"]
            parts[0] += f" (+ {rest:,} free in each stream, not drawn)." if rest > 0 else "."
        else:
            free = m.n_cells - m.cells_used
            parts = [
                f"Each row is a chat's cells in token order: {cells.extent:,} across ({free:,} free in the pool, not drawn)."
            ]
        if any(r.shared for r in rows):
            parts.append("Hatched: a prefix shared with other rows, held once.")
        if any(m.slots[r.slot].pictures for r in rows):
            in_shared = any(first < r.shared for r in rows for first, _ in m.slots[r.slot].pictures)
            parts.append(f"Cross-hatched: a picture's cells{' (striped too where shared)' if in_shared else ''}.")
        if any(m.slots[r.slot].state is SlotState.KEPT for r in rows):
            parts.append("Faded: kept for its next turn.")
        if any(r.saved >= 0 for r in cells.rows):
            parts.append("Striped: saved to RAM.")
        parts.append("Bottom bar: the whole pool to scale" + (", a stream a segment." if m.streams else "."))
        if cells.hidden:
            parts.append(f"{cells.hidden} more rows need a taller dock.")
        return " ".join(parts)

    # -- words -----------------------------------------------------------------------------------

    def _note_events(self, old: CellMap | None, new: CellMap) -> None:
        if old is None:
            return
        now = time.monotonic()
        before = {s.conversation_id for s in old.saved}
        after = {s.conversation_id for s in new.saved}
        for name, _, _ in COUNTERS:
            if getattr(new, name) > getattr(old, name):
                self._changed[name] = now
        if new.saves > old.saves and new.saved:  # the RAM tier's entries, the latest saved last
            self.events.append((now, f"saved to RAM: {self.name_of(new.saved[-1].conversation_id)}"))
        if new.restores > old.restores:
            for c in before - after or {None}:
                self.events.append((now, f"brought back from RAM: {self.name_of(c) if c else 'a chat'}"))
        if new.preemptions > old.preemptions:
            who = ", ".join(self.name_of(p.conversation_id) for p in new.preempted) or "a reply"
            self.events.append((now, f"paused for room, waits for its turn: {who}"))
        if new.evictions > old.evictions and new.saves == old.saves:
            self.events.append((now, "pushed out: a short chat, dropped (cheaper to read again)"))

    def _show_counters(self, m: CellMap | None) -> None:
        if m is None:
            return
        now = time.monotonic()
        parts = []
        for name, words, _ in COUNTERS:
            text = f"{getattr(m, name):,} {words}"
            parts.append(f"<b>{text}</b>" if now - self._changed.get(name, -math.inf) < CHANGED_S else text)
        used = f"{m.cells_used:,} of {m.n_cells:,} cells used ({m.cells_used / max(m.n_cells, 1):.0%})"
        self.counters_label.setText(f"{used} · " + " · ".join(parts))
        self.events_label.setText(
            "<br>".join(f"{now - t:4.1f} s ago: {html.escape(text)}" for t, text in reversed(self.events))
            or "Nothing pushed out, saved, brought back or paused yet."
        )

    def _legend(self, m: CellMap, cells: CellLayout) -> str:
        rows = ["<b>Rows</b>, top to bottom:"]
        for r in cells.rows:
            if r.slot >= 0:
                s = m.slots[r.slot]
                rows.append(f"{self._chip(s.conversation_id)} {html.escape(self._describe(m, s))}")
        empty = [str(s.slot) for s in m.slots if not s.cells]
        if empty:
            rows.append(f"empty slots, not drawn: {', '.join(empty)}")
        if m.preempted:
            waiting = ", ".join(self.name_of(p.conversation_id) for p in m.preempted)
            rows.append(f"paused for room, waiting: {html.escape(waiting)}")
        return "<br>".join(rows)

    def _describe(self, m: CellMap, s: SlotCells) -> str:
        text = f"{self.name_of(s.conversation_id)}: {s.cells:,} cells (slot {s.slot})"
        if s.pictures:
            n = len(s.pictures)
            text += f", {'a picture' if n == 1 else f'{n} pictures'} in {s.picture_cells:,} of them"
        if s.shared:
            text += f", the first {s.shared:,} shared with {self._sharers(m, s, 0)}"
        return f"{text}; {STATE_WORDS.get(s.state, s.state.value)}"

    def _sharers(self, m: CellMap, s: SlotCells, position: int) -> str:
        """The chats that hold the same cell as `s` at token `position`."""
        names = {o.slot: o.conversation_id for o in m.slots}
        return ", ".join(self.name_of(names.get(slot)) for slot, n in zip(s.shared_with, s.shared_counts) if n > position)

    def _ram(self, m: CellMap) -> str:
        total = sum(s.bytes for s in m.saved)
        rows = [f"<b>RAM tier</b> (striped rows): {len(m.saved)} chats saved, {total / 1e6:.1f} MB"]
        for s in reversed(m.saved):  # the latest first
            name = html.escape(self.name_of(s.conversation_id))
            rows.append(f"{self._chip(s.conversation_id)} {name}: {s.tokens:,} tokens, {s.bytes / 1e6:.1f} MB")
        return "<br>".join(rows)

    def _chip(self, conversation_id: str | None) -> str:
        return f"<span style='color:{self.colour_of(conversation_id).name()}'>■</span>"

    # -- hover -----------------------------------------------------------------------------------

    def _on_hover(self, point: QPointF) -> None:
        text = self.describe_at(point)
        if text:
            QToolTip.showText(QCursor.pos(), f"<p>{html.escape(text)}</p>", self.picture)  # <p>: wrapped
        else:
            QToolTip.hideText()

    def describe_at(self, point: QPointF) -> str | None:
        """Whose the cell under `point` (in the picture's pixels) is; None where nothing is drawn."""
        cells, m = self.layout_now, self.shown
        if cells is None or m is None or not 0 <= point.x() < cells.width:
            return None
        if cells.in_bar(point.y()):
            return self._describe_bar(m, cells, point.x())
        row = cells.row_at(point.y())
        if row is None:
            return None
        cell = cells.cell_at(point.x())
        if row.saved >= 0:
            s = m.saved[row.saved]
            return (
                f"{self.name_of(s.conversation_id)}: saved to RAM, {s.tokens:,} tokens, {s.bytes / 1e6:.1f} MB,"
                " out of the pool; copied back when the chat goes on"
            )
        s = m.slots[row.slot]
        if cell >= s.cells:
            if not m.streams:
                return None
            return f"free: {m.stream_cells - s.cells:,} cells of {self.name_of(s.conversation_id)}'s stream"
        text = f"{self.name_of(s.conversation_id)}: token {cell + 1:,} of {s.cells:,}"
        text += self._picture_at(s, cell)
        if s.prompt_cells and cell >= s.prompt_cells:
            text += f", in the reply being written (from token {s.prompt_cells + 1:,})"
        elif s.prompt_cells:
            text += ", in the prompt of the reply being written"
        if cell < s.shared:
            text += f"; the same cell as {self._sharers(m, s, cell)} (a shared prefix, held once)"
        return f"{text}; {STATE_WORDS.get(s.state, s.state.value)}"

    @staticmethod
    def _picture_at(s: SlotCells, cell: int) -> str:
        """The picture whose embedding the slot's `cell` holds, in words ("" where none does)."""
        for k, (first, end) in enumerate(s.pictures):
            if first <= cell < end:
                which = "a picture" if len(s.pictures) == 1 else f"picture {k + 1} of {len(s.pictures)}"
                return f", {which}: {end - first:,} cells (tokens {first + 1:,}–{end:,})"
        return ""

    def _describe_bar(self, m: CellMap, cells: CellLayout, x: float) -> str:
        text = f"the whole pool: {m.cells_used:,} of {m.n_cells:,} cells used"
        if m.streams and m.slots:
            s = m.slots[min(int(x * len(m.slots) / cells.width), len(m.slots) - 1)]
            whose = self.name_of(s.conversation_id) if s.cells else "no chat"
            return f"{text}; here slot {s.slot}'s stream: {s.cells:,} of {m.stream_cells:,} cells ({whose})"
        i = int(bar_slots(m, np.array([math.floor(x)]), cells.width)[0])
        if i >= 0:
            return f"{text}; here slot {m.slots[i].slot}'s run: {self.name_of(m.slots[i].conversation_id)}"
        return f"{text}; here the {m.n_cells - m.cells_used:,} free cells"
