"""The step timeline dock: each engine step a column as wide as its time, as tall as its batch's
tokens, stacked by pane in the pane's colour (solid: decode tokens; hatched: drafted tokens, the
guesses of speculative decoding verified in the step; pale: prompt-chunk tokens), under the batch
limit (dashed) and each step's sequences (dotted): the gap between them is idle slots.

It scrolls as the live plots do (x in seconds ago, the same minute, moved once a second) and is fed
from the window's 10 Hz tick. A pane's rectangles of one kind are one item (one drawRects), not
an item per step: the body (redrawn as the plot slides, once a second) and the tail since (fed at each tick).
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable

import numpy as np
import pyqtgraph as pg
from PySide6.QtCore import QPointF, QRectF, Qt
from PySide6.QtGui import QBrush, QColor, QCursor, QPainterPath, QPalette
from PySide6.QtWidgets import QGraphicsItem, QGraphicsPathItem, QSizePolicy, QToolTip

from app.engine.stats import StepStats
from app.workspace.step_columns import PartKind, StepColumns, step_summary

from .plot_specs import LIMIT_COLOUR
from .plots import RIGHT_MARGIN_S, SLIDE_MARGIN_S, WINDOW_S, line_pen

OTHER_COLOUR = "#888888"  # steps' parts of no pane (the API, a closed pane)
PROMPT_ALPHA = 90  # of 255: a prompt chunk's fill, paler than its pane's decode tokens
DRAFTED_ALPHA = 40  # of 255: under drafted tokens' hatching, so a column narrower than the hatch still shows
DRAFTED_HATCH = Qt.BrushStyle.BDiagPattern  # drafted tokens: the pane's colour in diagonal lines
Z_ORDER = {PartKind.PROMPT: 0, PartKind.DECODE: 1, PartKind.DRAFTED: 1, PartKind.IMAGE: 0}
IMAGE_HATCH = Qt.BrushStyle.DiagCrossPattern  # a picture's rows: the pane's colour in a cross-hatch
TALL_CAP = (
    4  # the y axis goes up to this many times the batch limit: a long prompt's chunk is cut, not the decode columns flattened
)
CUT_LABEL_ROOM = 0.05  # of the x range: the least gap between two cut columns' labels, so they never overlap
MIN_TOP = 10  # tokens: one sequence's column is drawn small, beside a batch of eight
KEY_LINES = (  # short lines: the dock may be a third of a laptop screen wide
    "solid: decode tokens · hatched: drafted tokens",
    "pale: prompt chunks, in the pane's colour",
    "dashed: batch limit · dotted: sequences in the step",
    "(between those two lines: idle slots)",
)

Panes = Callable[[], dict[str, tuple[str, str]]]  # pane key -> (name, colour)


def step_line_path(steps: list[StepStats], value: Callable[[StepStats], float], joined: bool, t0: float) -> QPainterPath:
    """A value per step, level across each step's width; `joined` links a step's level to the next."""
    if not steps:
        return QPainterPath()
    xs = np.array([(st.t_start - t0, st.t_end - t0) for st in steps]).ravel()
    ys = np.repeat(np.array([value(st) for st in steps], dtype=float), 2)
    connect = np.ones(len(xs), dtype=np.int32) if joined else np.tile(np.array([1, 0], dtype=np.int32), len(steps))
    return pg.arrayToQPath(xs, ys, connect=connect)


class Rects(QGraphicsItem):
    """Rectangles of one brush, painted by one QPainter.drawRects over a numpy-backed array of
    QRectF (pyqtgraph's, as its BarGraphItem does): filling one path of ten thousand rectangles
    took 170 ms a repaint, measured."""

    def __init__(self):
        super().__init__()
        self._array = pg.Qt.internals.PrimitiveArray(QRectF, 4)
        self._brush = QBrush()
        self._under: QBrush | None = None  # painted first, when the brush is a pattern
        self._box = QRectF()
        self.rects: tuple[np.ndarray, ...] = tuple(np.empty(0) for _ in range(4))  # x0, width, y0, height

    def setBrush(self, brush: QBrush, under: QBrush | None = None) -> None:
        self._brush, self._under = brush, under
        self.update()

    def brush(self) -> QBrush:
        return self._brush

    def under_brush(self) -> QBrush | None:
        return self._under

    def set_rects(self, x0: np.ndarray, w: np.ndarray, y0: np.ndarray, h: np.ndarray) -> None:
        self.prepareGeometryChange()
        self.rects = (x0, w, y0, h)
        self._array.resize(len(x0))
        if len(x0):
            memory = self._array.ndarray()
            memory[:, 0], memory[:, 1], memory[:, 2], memory[:, 3] = x0, y0, w, h
            left, bottom = float(x0.min()), float(y0.min())
            self._box = QRectF(left, bottom, float((x0 + w).max()) - left, float((y0 + h).max()) - bottom)
        else:
            self._box = QRectF()
        self.update()

    def boundingRect(self) -> QRectF:
        return self._box

    def paint(self, painter, *args) -> None:
        if len(self._array):
            painter.setPen(Qt.PenStyle.NoPen)
            for brush in (self._under, self._brush):
                if brush is not None:
                    painter.setBrush(brush)
                    painter.drawRects(*self._array.drawargs())


class _Layer:
    """One thing drawn as a body and a tail: a pane's rectangles of one kind, or a line."""

    def __init__(self, plot: pg.PlotItem, z: float, rects: bool = False):
        self.body, self.tail = (Rects(), Rects()) if rects else (QGraphicsPathItem(), QGraphicsPathItem())
        for item in (self.body, self.tail):
            item.setZValue(z)
            plot.addItem(item)

    def style(self, pen=None, brush=None, under=None) -> None:
        for item in (self.body, self.tail):
            if pen is not None:
                item.setPen(pen)
            if under is not None:  # a Rects: a pattern over a fill
                item.setBrush(brush, under)
            elif brush is not None:
                item.setBrush(brush)

    def move_to(self, x: float) -> None:
        self.body.setPos(x, 0)
        self.tail.setPos(x, 0)

    def remove_from(self, plot: pg.PlotItem) -> None:
        plot.removeItem(self.body)
        plot.removeItem(self.tail)


class StepTimeline(pg.GraphicsLayoutWidget):
    """Reads the engine's recent steps (`recent_steps(seconds)`, the client's) and the panes' names
    and colours (`panes()`); `refresh(now)` draws the steps since the last call."""

    def __init__(self, recent_steps: Callable[[float], tuple[StepStats, ...]], panes: Panes, parent=None, key: bool = True):
        super().__init__(parent)
        self._recent_steps, self._panes = recent_steps, panes
        self.setBackground(self.palette().color(QPalette.ColorRole.Base))
        self.text_colour = self.palette().color(QPalette.ColorRole.Text).name()  # readable on any theme
        self.plot = self.addPlot(row=0, col=0)
        self.plot.setTitle("Engine steps: tokens by pane", color=self.text_colour)
        # a title never widens the plot past its dock (it was cut off with the newest steps)
        self.plot.titleLabel.setSizePolicy(QSizePolicy.Policy.Ignored, QSizePolicy.Policy.Fixed)
        self.key_label: pg.LabelItem | None = None  # key=False: the caller says what the columns mean
        if key:
            self.key_label = self.addLabel(
                "<br>".join(KEY_LINES), row=1, col=0, size="8pt", justify="left", color=self.text_colour
            )
            self.key_label.setSizePolicy(QSizePolicy.Policy.Ignored, QSizePolicy.Policy.Preferred)  # never widens the dock
        self.cut_labels: list[pg.TextItem] = []  # clip_at's: the tokens of each column cut at the top
        plot = self.plot
        plot.disableAutoRange()
        plot.setMouseEnabled(x=False, y=False)
        plot.hideButtons()
        plot.getAxis("left").setWidth(38)
        plot.setLabel("left", "tokens / step")
        plot.setLabel("bottom", "seconds ago")
        plot.setXRange(-WINDOW_S, RIGHT_MARGIN_S, padding=0)
        plot.getAxis("bottom").setTicks([[(float(v), str(v)) for v in range(-int(WINDOW_S), 1, 10)]])
        for name in ("left", "bottom"):
            plot.getAxis(name).setCacheMode(QGraphicsItem.CacheMode.DeviceCoordinateCache)
        self.columns = StepColumns(WINDOW_S + SLIDE_MARGIN_S)
        self.t0 = time.monotonic()
        self._x_right = 0  # the moment at the right edge, in whole seconds since the dock opened
        self._body_cut = -math.inf  # monotonic t_end of the last step in the bodies
        self._y_top = 0.0
        self._still = False  # show_run's: x is seconds since the run began, not seconds ago
        # (pane key, kind) -> its rectangles; PartKind.DECODE and PROMPT are True and False as keys too
        self.bars: dict[tuple[str | None, PartKind], _Layer] = {}
        self._colours: dict[str | None, str] = {}
        text = self.palette().color(QPalette.ColorRole.Text)
        self.limit_line = _Layer(plot, 10)
        self.limit_line.style(pen=line_pen(LIMIT_COLOUR, Qt.PenStyle.DashLine))
        self.seqs_line = _Layer(plot, 11)
        self.seqs_line.style(pen=line_pen(text.name(), Qt.PenStyle.DotLine))
        self.scene().sigMouseMoved.connect(self._on_mouse_moved)

    # -- feeding -------------------------------------------------------------------------------

    def refresh(self, now: float) -> None:
        fetch = WINDOW_S + SLIDE_MARGIN_S
        if self.columns.last_t_end > -math.inf:
            fetch = min(fetch, now - self.columns.last_t_end + 1.0)
        new = self.columns.add(self._recent_steps(fetch))
        right = math.ceil(now - self.t0)
        sliding = right > self._x_right
        if not (new or sliding):
            return
        panes = self._panes()
        for key in self.columns.keys:
            self._ensure_bars(key, panes)
        if sliding or self._body_cut == -math.inf:
            self._draw(body=True)
            self._body_cut = self.columns.last_t_end
        else:
            self._draw(body=False)
        self._fit_y()
        if sliding:
            self._x_right = right
            for layer in self._layers():
                layer.move_to(-right)

    def show_run(self, steps: tuple[StepStats, ...], t_start: float, span: float, title: str) -> None:
        """Draw a finished run's steps, still: x in seconds since `t_start`, from 0 to `span`."""
        self.t0 = t_start
        self.columns = StepColumns(span + SLIDE_MARGIN_S)
        self.columns.add(steps)
        panes = self._panes()
        for key in self.columns.keys:
            self._ensure_bars(key, panes)
        self._draw(body=True)
        self._fit_y()
        self.plot.setTitle(title, color=self.text_colour)
        self.plot.setLabel("bottom", "seconds since the broadcast")
        self.plot.getAxis("bottom").setTicks(None)
        self.plot.setXRange(0, span, padding=0.01)
        self._still = True

    def clip_at(self, top: float) -> None:
        """Hold the y axis at `top` tokens: a taller column (a prompt's chunk) is cut there, its tokens
        written on it. Neighbours closer than a label's room keep the first one's label."""
        self._y_top = top
        self.plot.setYRange(0, top, padding=0)
        for label in self.cut_labels:
            self.plot.removeItem(label)
        self.cut_labels = []
        (left, right), _ = self.plot.viewRange()
        room, last = (right - left) * CUT_LABEL_ROOM, -math.inf
        text = self.palette().color(QPalette.ColorRole.Text)
        for st in self.columns.steps:
            x = (st.t_start + st.t_end) / 2 - self.t0
            if st.n_tokens > top and x - last >= room:
                label = pg.TextItem(str(st.n_tokens), color=text, anchor=(0.5, 0))
                label.setPos(x, top)
                label.setZValue(20)
                self.plot.addItem(label)
                self.cut_labels.append(label)
                last = x

    def _layers(self):
        yield from self.bars.values()
        yield self.limit_line
        yield self.seqs_line

    def _ensure_bars(self, key: str | None, panes: dict[str, tuple[str, str]]) -> None:
        colour = panes[key][1] if key in panes else OTHER_COLOUR
        if self._colours.get(key) == colour:
            return
        self._colours[key] = colour
        for kind in PartKind:
            layer = self.bars.get((key, kind))
            if layer is None:
                layer = self.bars[(key, kind)] = _Layer(self.plot, Z_ORDER[kind], rects=True)
                layer.move_to(-self._x_right)
            layer.style(**_brushes(kind, colour))

    def _draw(self, body: bool) -> None:
        """The bodies from every step kept, or the tails from the steps since the bodies'."""
        since = -math.inf if body else self._body_cut
        for (key, kind), layer in self.bars.items():
            x0, w, y0, h = self.columns.kind_rects(key, kind, since)
            (layer.body if body else layer.tail).set_rects(x0 - self.t0, w, y0, h)
            if body:
                layer.tail.set_rects(*(a[:0] for a in (x0, w, y0, h)))
        steps = self.columns.since(since)
        for layer, value, joined in ((self.limit_line, _limit, True), (self.seqs_line, _seqs, False)):
            (layer.body if body else layer.tail).setPath(step_line_path(steps, value, joined, self.t0))
            if body:
                layer.tail.setPath(QPainterPath())

    def _fit_y(self) -> None:
        steps = self.columns.steps
        if not steps:
            return
        limit = max(st.batch_limit for st in steps)
        tallest = max(st.n_tokens for st in steps)
        top = _nice_top(max(MIN_TOP, limit * 1.25, min(tallest, TALL_CAP * limit)))
        if top != self._y_top:
            self._y_top = top
            self.plot.setYRange(0, top, padding=0.02)

    # -- what is drawn, and the hover ----------------------------------------------------------

    def drawn(self, key: str | None, kind: PartKind | bool) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """(x0, width, y0, height) of a pane's rectangles of a kind (True: decode, False: prompt chunks)
        as drawn: x in seconds since the dock opened."""
        layer = self.bars.get((key, PartKind(int(kind))))
        if layer is None:
            return tuple(np.empty(0) for _ in range(4))
        rects = [item.rects for item in (layer.body, layer.tail)]
        return tuple(np.concatenate([r[i] for r in rects]) for i in range(4))

    def step_at_x(self, x: float) -> StepStats | None:
        """The step drawn at x (seconds ago, as the axis reads)."""
        return self.columns.step_at(x + self._x_right + self.t0)

    def hover_text(self, x: float) -> str:
        step = self.step_at_x(x)
        if step is None:
            return ""
        names: dict[str | None, str] = {key: name for key, (name, _) in self._panes().items()}
        when = f"at {step.t_start - self.t0:.2f} s" if self._still else f"{time.monotonic() - step.t_end:.1f} s ago"
        return f"step {when}\n" + step_summary(step, names)

    def _on_mouse_moved(self, pos: QPointF) -> None:
        if not self.plot.sceneBoundingRect().contains(pos):
            return
        x = self.plot.vb.mapSceneToView(pos).x()
        text = self.hover_text(x)
        self.setToolTip(text)
        if text:
            QToolTip.showText(QCursor.pos(), text, self)
        else:
            QToolTip.hideText()


def _brushes(kind: PartKind, colour: str) -> dict[str, QBrush]:
    """A kind's fill in its pane's colour: decode solid, a prompt chunk pale, drafted tokens hatched
    and a picture's rows cross-hatched, each over a faint fill."""
    fill = QColor(colour)
    if kind is PartKind.PROMPT:
        fill.setAlpha(PROMPT_ALPHA)
    if kind not in (PartKind.DRAFTED, PartKind.IMAGE):
        return {"brush": QBrush(fill)}
    under = QColor(colour)
    under.setAlpha(DRAFTED_ALPHA)
    return {"brush": QBrush(fill, DRAFTED_HATCH if kind is PartKind.DRAFTED else IMAGE_HATCH), "under": QBrush(under)}


def _nice_top(value: float) -> float:
    """`value` rounded up to a multiple of half its power of ten (32 to 35, 10 to 10, 512 to 550)."""
    step = 10 ** math.floor(math.log10(max(value, 1))) / 2
    return max(1.0, math.ceil(value / step) * step)


def _limit(st: StepStats) -> float:
    return st.batch_limit


def _seqs(st: StepStats) -> float:
    return st.n_seqs
