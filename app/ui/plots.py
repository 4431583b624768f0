"""Live plots: per-pane tokens/s, latency and KV hit rate, and the engine's tokens/s and batch size.

Curves are made once and fed with setData from the window's one 10 Hz timer. Without a GPU every
redraw is paid in CPU taken from the engine, so a tick does as little as it can: x is time since
the panel opened, a curve is fed only when its ring got new points, and the five plots share one
x range that slides left (one axis of text, "seconds ago", is redrawn; the others are cached).
With at most a few hundred points a curve, clip-to-view and downsampling would cost more than they
save: they recompute every curve whenever the range slides.
"""

from __future__ import annotations

import math
import time

import numpy as np
import pyqtgraph as pg
from PySide6.QtCore import QRectF, Qt
from PySide6.QtWidgets import QGraphicsItem

from .metrics import MetricsStore, Ring

WINDOW_S = 60.0
ENGINE_COLOUR = "#333333"
LIMIT_COLOUR = "#d04a02"  # the batch limit the adaptive controller chose


class LiveCurve(pg.PlotCurveItem):
    """A curve whose bounding box is worked out once per setData, from its data and a padding of
    a few pixels. pyqtgraph's own runs NaN-aware scans and pixel maths on every paint: measured,
    a third of a plot tick with eighteen curves."""

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self._box = QRectF()

    def set_points(self, x: np.ndarray, y: np.ndarray, pixel: tuple[float, float]) -> None:
        """setData, with the size of a pixel in data units (the pen must stay inside the box)."""
        self.setData(x, y)
        if not len(x):
            self._box = QRectF()
            return
        px, py = 3 * abs(pixel[0]), 3 * abs(pixel[1])
        x0, x1, y0, y1 = float(x[0]), float(x[-1]), float(y.min()), float(y.max())
        self._box = QRectF(x0 - px, y0 - py, x1 - x0 + 2 * px, y1 - y0 + 2 * py)

    def boundingRect(self) -> QRectF:
        return self._box


class SecondsAgoAxis(pg.AxisItem):
    """Ticks every 10 s back from the right edge, labelled in seconds ago; they stay put as x slides."""

    def tickValues(self, minVal, maxVal, size):
        return [(10.0, [maxVal - k for k in range(0, int(WINDOW_S) + 1, 10)])]

    def tickStrings(self, values, scale, spacing):
        right = max(values, default=0.0)
        return [f"{round(v - right):d}" for v in values]


class DecadeAxis(pg.AxisItem):
    """A log axis with a tick and a label at each power of ten only: minor labels pile up."""

    def tickValues(self, minVal, maxVal, size):
        return [(1.0, [float(v) for v in range(math.ceil(minVal), math.floor(maxVal) + 1)])]


def _plot(layout: pg.GraphicsLayoutWidget, row: int, title: str, units: str = "", log_y: bool = False) -> pg.PlotItem:
    axes = {"bottom": SecondsAgoAxis("bottom")}
    if log_y:
        axes["left"] = DecadeAxis("left")
    plot = layout.addPlot(row=row, col=0, title=title, axisItems=axes)
    plot.setLogMode(y=log_y)
    plot.disableAutoRange()  # the panel fits y itself from what it feeds: autorange rescans every item
    plot.setMouseEnabled(x=False, y=False)
    plot.hideButtons()
    plot.getAxis("left").setWidth(38)
    if units:
        plot.getAxis("left").setLabel(units)
    for name in ("left", "bottom"):
        # axes are text, the dearest thing to draw without a GPU: keep each as a pixmap that is
        # redrawn only when its range changes, not on every curve update
        plot.getAxis(name).setCacheMode(QGraphicsItem.CacheMode.DeviceCoordinateCache)
    return plot


class PlotsPanel(pg.GraphicsLayoutWidget):
    """Reads a MetricsStore; `refresh(now)` moves every curve to the latest data."""

    def __init__(self, metrics: MetricsStore, parent=None):
        super().__init__(parent)
        self.metrics = metrics
        self.setBackground("w")
        self.ci.layout.setSpacing(2)
        self.rate_plot = _plot(self, 0, "Tokens/s per pane")
        self.latency_plot = _plot(self, 1, "Latency per pane: TTFT ● / inter-token —", "s", log_y=True)
        self.hit_plot = _plot(self, 2, "KV cache hit rate per pane")
        self.hit_plot.setYRange(0, 1.05, padding=0)
        self.engine_plot = _plot(self, 3, "Engine: generated tokens/s")
        self.batch_plot = _plot(self, 4, "Engine: sequences per step — / batch limit - -")
        for plot in (self.rate_plot, self.latency_plot, self.hit_plot, self.engine_plot):
            plot.setXLink(self.batch_plot)
            plot.hideAxis("bottom")  # the bottom plot's axis says it for all
        self.batch_plot.setLabel("bottom", "seconds ago")
        self._t0 = time.monotonic()
        self._x_right = -math.inf  # the right edge of the x range, in seconds since the panel opened
        self._fed: dict[int, int] = {}  # id(curve) -> ring.pushes when it was last fed
        self._extent: dict[int, tuple[float, float]] = {}  # id(curve) -> (min, max) of what it shows
        self._y_range: dict[int, tuple[float, float]] = {}
        self.pane_curves: dict[str, dict[str, pg.PlotCurveItem]] = {}
        engine_pen = pg.mkPen(ENGINE_COLOUR, width=1)
        self.engine_curves = {
            "rate": LiveCurve(pen=engine_pen, skipFiniteCheck=True),
            "batch": LiveCurve(pen=engine_pen, skipFiniteCheck=True),
            "limit": LiveCurve(pen=pg.mkPen(LIMIT_COLOUR, width=1, style=Qt.PenStyle.DashLine), skipFiniteCheck=True),
        }
        self.engine_plot.addItem(self.engine_curves["rate"])
        self.batch_plot.addItem(self.engine_curves["batch"])
        self.batch_plot.addItem(self.engine_curves["limit"])
        self._plot_of = {"rate": self.rate_plot, "itl": self.latency_plot}
        # a point per request, every pane's in one scatter item per plot (one item paints far
        # cheaper than eight), each point in its pane's colour
        self.point_sets = {"ttft": pg.ScatterPlotItem(size=7, pen=None), "hit": pg.ScatterPlotItem(size=6, pen=None)}
        self.latency_plot.addItem(self.point_sets["ttft"])
        self.hit_plot.addItem(self.point_sets["hit"])
        self._points: dict[str, dict[str, tuple[np.ndarray, np.ndarray]]] = {"ttft": {}, "hit": {}}
        self._brushes: dict[str, object] = {}

    def add_pane(self, key: str, colour: str) -> None:
        pen = pg.mkPen(colour, width=1)
        # bare curve items: a PlotDataItem carries a curve and a scatter plus per-paint bookkeeping
        self.pane_curves[key] = {
            "rate": LiveCurve(pen=pen, skipFiniteCheck=True),
            "itl": LiveCurve(pen=pen, skipFiniteCheck=True),
        }
        for name, item in self.pane_curves[key].items():
            self._plot_of[name].addItem(item)
        self._brushes[key] = pg.mkBrush(colour)

    def remove_pane(self, key: str) -> None:
        for name, item in self.pane_curves.pop(key, {}).items():
            self._plot_of[name].removeItem(item)
            self._fed.pop(id(item), None)
            self._extent.pop(id(item), None)
        self._brushes.pop(key, None)
        for name, points in self._points.items():
            if points.pop(key, None) is not None:
                self._show_points(name)

    def points(self, key: str, name: str) -> tuple[np.ndarray, np.ndarray]:
        """One pane's "ttft" or "hit" points as drawn (x since the panel opened; ttft in log10)."""
        return self._points[name].get(key, (np.empty(0), np.empty(0)))

    def refresh(self, now: float) -> None:
        new_points = set()
        for key, curves in self.pane_curves.items():
            m = self.metrics.panes.get(key)
            if m is None:
                continue
            self._feed(curves["rate"], m.tok_rate, now)
            self._feed(curves["itl"], m.itl, now, log_y=True)
            if self._collect("ttft", key, m.ttft, now, log_y=True):
                new_points.add("ttft")
            if self._collect("hit", key, m.kv_hit, now):
                new_points.add("hit")
        for name in new_points:
            self._show_points(name)
        self._feed(self.engine_curves["rate"], self.metrics.engine_rate, now)
        self._feed(self.engine_curves["batch"], self.metrics.seqs_per_step, now)
        self._feed(self.engine_curves["limit"], self.metrics.batch_limit, now)
        for plot in (self.rate_plot, self.latency_plot, self.engine_plot, self.batch_plot):
            self._fit_y(plot)
        self._slide_to(now - self._t0)

    def _slide_to(self, right: float) -> None:
        """Move the shared x range in whole seconds: sliding the five linked views is the dearest
        part of a tick, and once a second looks as live as ten times."""
        if right > self._x_right:
            self._x_right = math.ceil(right)
            self.batch_plot.setXRange(self._x_right - WINDOW_S, self._x_right, padding=0)

    def _fit_y(self, plot: pg.PlotItem) -> None:
        """Set y to a round range around the items' points, only when that range changes."""
        extents = [self._extent[id(item)] for item in plot.items if id(item) in self._extent]
        if not extents:
            return
        low, high = min(e[0] for e in extents), max(e[1] for e in extents)
        if plot is self.latency_plot:  # log10 values: whole decades
            rng = (math.floor(low), max(math.ceil(high), math.floor(low) + 1))
        else:
            rng = (0.0, _round_up(high))
        if self._y_range.get(id(plot)) != rng:
            self._y_range[id(plot)] = rng
            plot.setYRange(*rng, padding=0.02)

    def _feed(self, item: LiveCurve, ring: Ring, now: float, log_y: bool = False) -> None:
        """Give a curve its points of the last window (plus a margin), if it has new ones."""
        if self._fed.get(id(item)) == ring.pushes:
            return
        self._fed[id(item)] = ring.pushes
        x, y = self._recent(ring, now, log_y)
        self._note_extent(id(item), x, y, now)
        item.set_points(x, y, item.getViewBox().viewPixelSize())

    def _collect(self, name: str, key: str, ring: Ring, now: float, log_y: bool = False) -> bool:
        """Take a pane's new request points; True if there were any."""
        if self._fed.get((name, key)) == ring.pushes:
            return False
        self._fed[(name, key)] = ring.pushes
        self._points[name][key] = self._recent(ring, now, log_y)
        return True

    def _show_points(self, name: str) -> None:
        points = self._points[name]
        item = self.point_sets[name]
        if not points:
            item.clear()
            return
        x = np.concatenate([xy[0] for xy in points.values()])
        y = np.concatenate([xy[1] for xy in points.values()])
        brushes = [self._brushes[key] for key, xy in points.items() for _ in range(len(xy[0]))]
        self._note_extent(id(item), x, y, time.monotonic())
        item.setData(x=x, y=y, brush=brushes)

    def _recent(self, ring: Ring, now: float, log_y: bool) -> tuple[np.ndarray, np.ndarray]:
        t, v = ring.view()
        start = np.searchsorted(t, now - 2 * WINDOW_S)
        x, y = t[start:] - self._t0, v[start:]
        if log_y:  # bare items leave the log mapping of a log-mode plot to their feeder
            y = np.log10(np.maximum(y, 1e-4))
        return x, y

    def _note_extent(self, item_id: int, x: np.ndarray, y: np.ndarray, now: float) -> None:
        shown = y[x >= now - self._t0 - WINDOW_S]
        if len(shown):
            self._extent[item_id] = (float(shown.min()), float(shown.max()))


def _round_up(value: float) -> float:
    """The next of 1, 2, 5, 10, 20, 50, ... at or above `value` (1 at least)."""
    if value <= 1:
        return 1.0
    scale = 10 ** math.floor(math.log10(value))
    return next(m * scale for m in (1, 2, 5, 10) if m * scale >= value)
