"""Live plots: per-pane tokens/s, latency and KV hit rate, and the engine's tokens/s and batch size.

Curves are made once and fed with setData from the window's one 10 Hz timer. Without a GPU every
redraw is paid in CPU taken from the engine, so a tick does as little as it can: x is time since
the panel opened, a curve is fed only when its ring got new points, and the five plots share one
x range that slides left (one axis of text, "seconds ago", is redrawn; the others are cached).
With at most a few hundred points a curve, clip-to-view and downsampling would cost more than they
save: they recompute every curve whenever the range slides.
"""

from __future__ import annotations

import time

import numpy as np
import pyqtgraph as pg
from PySide6.QtWidgets import QGraphicsItem

from .metrics import MetricsStore, Ring

WINDOW_S = 60.0
ENGINE_COLOUR = "#333333"


class SecondsAgoAxis(pg.AxisItem):
    """Ticks every 10 s back from the right edge, labelled in seconds ago; they stay put as x slides."""

    def tickValues(self, minVal, maxVal, size):
        return [(10.0, [maxVal - k for k in range(0, int(WINDOW_S) + 1, 10)])]

    def tickStrings(self, values, scale, spacing):
        right = max(values, default=0.0)
        return [f"{round(v - right):d}" for v in values]


def _plot(layout: pg.GraphicsLayoutWidget, row: int, title: str, units: str = "", log_y: bool = False) -> pg.PlotItem:
    plot = layout.addPlot(row=row, col=0, title=title, axisItems={"bottom": SecondsAgoAxis("bottom")})
    plot.showGrid(x=False, y=True, alpha=0.2)
    plot.setLogMode(y=log_y)
    if log_y:
        plot.getAxis("left").setStyle(maxTickLevel=0)  # decades only: minor log labels pile up
    plot.enableAutoRange(x=False)
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
        self.batch_plot = _plot(self, 4, "Engine: sequences per step")
        for plot in (self.rate_plot, self.latency_plot, self.hit_plot, self.engine_plot):
            plot.setXLink(self.batch_plot)
            plot.hideAxis("bottom")  # the bottom plot's axis says it for all
        self.batch_plot.setLabel("bottom", "seconds ago")
        self._t0 = time.monotonic()
        self._fed: dict[int, int] = {}  # id(curve) -> ring.pushes when it was last fed
        self.pane_curves: dict[str, dict[str, pg.PlotDataItem]] = {}
        self.engine_curves = {
            "rate": self.engine_plot.plot(pen=pg.mkPen(ENGINE_COLOUR, width=1), skipFiniteCheck=True),
            "batch": self.batch_plot.plot(pen=pg.mkPen(ENGINE_COLOUR, width=1), skipFiniteCheck=True),
        }

    def add_pane(self, key: str, colour: str) -> None:
        pen = pg.mkPen(colour, width=1)
        self.pane_curves[key] = {
            "rate": self.rate_plot.plot(pen=pen, skipFiniteCheck=True),
            "itl": self.latency_plot.plot(pen=pg.mkPen(colour, width=1), skipFiniteCheck=True),
            "ttft": self.latency_plot.plot(pen=None, symbol="o", symbolSize=7, symbolBrush=colour, symbolPen=None),
            "hit": self.hit_plot.plot(pen=pen, symbol="o", symbolSize=6, symbolBrush=colour, symbolPen=None, skipFiniteCheck=True),
        }

    def remove_pane(self, key: str) -> None:
        plots = {"rate": self.rate_plot, "itl": self.latency_plot, "ttft": self.latency_plot, "hit": self.hit_plot}
        for name, curve in self.pane_curves.pop(key, {}).items():
            plots[name].removeItem(curve)

    def refresh(self, now: float) -> None:
        for key, curves in self.pane_curves.items():
            m = self.metrics.panes.get(key)
            if m is None:
                continue
            self._feed(curves["rate"], m.tok_rate, now)
            self._feed(curves["itl"], m.itl, now)
            self._feed(curves["ttft"], m.ttft, now)
            self._feed(curves["hit"], m.kv_hit, now)
        self._feed(self.engine_curves["rate"], self.metrics.engine_rate, now)
        self._feed(self.engine_curves["batch"], self.metrics.seqs_per_step, now)
        right = now - self._t0
        self.batch_plot.setXRange(right - WINDOW_S, right, padding=0)

    def _feed(self, curve: pg.PlotDataItem, ring: Ring, now: float) -> None:
        """Give a curve its points of the last window (plus a margin), if it has new ones."""
        if self._fed.get(id(curve)) == ring.pushes:
            return
        self._fed[id(curve)] = ring.pushes
        t, v = ring.view()
        start = np.searchsorted(t, now - 2 * WINDOW_S)
        curve.setData(t[start:] - self._t0, v[start:])
