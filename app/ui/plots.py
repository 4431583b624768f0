"""Live plots: per-pane tokens/s, latency and KV hit rate, and the engine's tokens/s and batch size.

Curves are made once and fed with setData from the window's one 10 Hz timer; x is "seconds ago"
over a rolling window, so old points scroll off to the left.
"""

from __future__ import annotations

import numpy as np
import pyqtgraph as pg

from .metrics import MetricsStore, Ring

WINDOW_S = 60.0
ENGINE_COLOUR = "#333333"


def _plot(layout: pg.GraphicsLayoutWidget, row: int, title: str, units: str = "", log_y: bool = False) -> pg.PlotItem:
    plot = layout.addPlot(row=row, col=0, title=title)
    plot.setClipToView(True)
    plot.setDownsampling(mode="peak")
    plot.showGrid(x=True, y=True, alpha=0.2)
    plot.setLogMode(y=log_y)
    plot.setXRange(-WINDOW_S, 0, padding=0)
    plot.enableAutoRange(x=False)
    plot.setMouseEnabled(x=False, y=False)
    plot.hideButtons()
    plot.getAxis("left").setWidth(38)
    if units:
        plot.getAxis("left").setLabel(units)
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
        self.pane_curves: dict[str, dict[str, pg.PlotDataItem]] = {}
        self.engine_curves = {
            "rate": self.engine_plot.plot(pen=pg.mkPen(ENGINE_COLOUR, width=2), skipFiniteCheck=True),
            "batch": self.batch_plot.plot(pen=pg.mkPen(ENGINE_COLOUR, width=2), skipFiniteCheck=True),
        }

    def add_pane(self, key: str, colour: str) -> None:
        pen = pg.mkPen(colour, width=2)
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
            _feed(curves["rate"], m.tok_rate, now)
            _feed(curves["itl"], m.itl, now)
            _feed(curves["ttft"], m.ttft, now)
            _feed(curves["hit"], m.kv_hit, now)
        _feed(self.engine_curves["rate"], self.metrics.engine_rate, now)
        _feed(self.engine_curves["batch"], self.metrics.seqs_per_step, now)


def _feed(curve: pg.PlotDataItem, ring: Ring, now: float) -> None:
    """Points inside the window, x as seconds before `now`."""
    t, v = ring.view()
    start = np.searchsorted(t, now - WINDOW_S)
    curve.setData(t[start:] - now, v[start:])
