"""Live plots, a row for each entry of `plot_specs.PLOTS`: per-pane tokens/s, latency, KV hit rate
and drafts (once a reply drafted), and the engine's tokens/s and batch size.

Curves are made once and fed from the window's one 10 Hz timer. Without a GPU every redraw is
paid in CPU taken from the engine, so a tick does as little as it can: the x range is fixed at the
last minute, items hold time since the panel opened and are moved left once a second, a line is
fed only when its ring got new points, and between moves only its newest part is redrawn.
With at most a few hundred points a line, clip-to-view and downsampling would cost more than they
save.
"""

from __future__ import annotations

import html
import math
import time

import numpy as np
import pyqtgraph as pg
from PySide6.QtCore import QSize, Qt
from PySide6.QtGui import QColor, QPainterPath, QPalette, QPen
from PySide6.QtWidgets import QGraphicsItem, QGraphicsPathItem, QSizePolicy

from app.workspace.metrics import MetricsStore, Ring

from .plot_specs import PLOTS, LineSpec, PlotSpec, PointsSpec

WINDOW_S = 60.0
LEGEND_LINE_CHARS = 48  # a legend line holds entries up to this many characters: a longer one would widen the dock
RIGHT_MARGIN_S = 1.0  # room right of now, so a point just added is drawn whole
BODY_PIECES = 6  # items a line's body is cut in: a tick's repaint strokes about a sixth of it
SLIDE_MARGIN_S = 2.0  # items hold this much left of the window, so a line enters from the edge
PREFERRED_WIDTH = 400  # as the window opens: on a 1366 px laptop screen eight panes get 230 px each
LEFT_AXIS_WIDTH = 38
RIGHT_AXIS_WIDTH = 34  # a right axis's; while one shows, every plot keeps this margin, so their times line up
QWIDGETSIZE_MAX = (1 << 24) - 1  # Qt's largest widget size: no maximum


class Line:
    """A line through points, drawn by plain QGraphicsPathItems, so that their bounding boxes and their
    painting stay in C++. Qt calls back every Python-made item (pyqtgraph's curves, or a subclass of
    our own) for its box and its paint on each repaint: with 38 lines, measured, a quarter of a
    plot tick.

    A long line is cut in `pieces` runs of points, one item each: a repaint at the plot's right edge
    then strokes only the last run, not the whole minute (stroking was 40% of a tick's paint)."""

    def __init__(self, pen: QPen, pieces: int = 1):
        self.items = [QGraphicsPathItem() for _ in range(pieces)]
        for item in self.items:
            item.setPen(pen)
        self.x = self.y = np.empty(0)
        self.y_extent: tuple[float, float] | None = None  # (min, max) of y, None when empty

    def set_points(self, x: np.ndarray, y: np.ndarray) -> None:
        self.x, self.y = x, y
        self.y_extent = (float(y.min()), float(y.max())) if len(x) else None
        # each run ends on the next one's first point, so the line is unbroken
        last = len(x) - 1
        pieces = len(self.items) if last > 0 else 1  # a lone point needs one item
        for i, item in enumerate(self.items):
            start, end = i * last // pieces, (i + 1) * last // pieces
            path = QPainterPath()
            if i < pieces and len(x):
                path.addPolygon(pg.functions.arrayToQPolygonF(x[start : end + 1], y[start : end + 1]))
            item.setPath(path)  # repaints the old box and the new one

    def getData(self) -> tuple[np.ndarray, np.ndarray]:
        return self.x, self.y


def line_pen(colour: str, style=Qt.PenStyle.SolidLine) -> QPen:
    """A one-pixel line at any zoom. Width 0 (not a cosmetic width of 1) also makes the path item's
    box the points' bounds: with a width it strokes the whole path to find its box."""
    pen = QPen(QColor(colour), 0, style)
    pen.setCosmetic(True)
    return pen


class LiveSeries:
    """One line of a live plot, drawn as two curves: the body, redrawn only when the x range slides
    (once a second), and the tail since then, fed at every tick. Qt repaints the boxes of the items
    that changed, so a tick repaints a sliver at the right edge instead of the whole plot."""

    def __init__(self, pen: QPen):
        self.body = Line(pen, BODY_PIECES)
        self.tail = Line(pen)
        self.body_pushes = -1  # ring.pushes when the body was fed
        self.tail_pushes = -1  # ring.pushes when the tail was fed
        self.extent: tuple[float, float] | None = None  # (min, max) of y in body and tail

    @property
    def items(self) -> list[QGraphicsPathItem]:
        return self.body.items + self.tail.items

    def move_to(self, x: float) -> None:
        for item in self.items:
            item.setPos(x, 0)

    def add_to(self, plot: pg.PlotItem) -> None:
        for item in self.items:
            plot.addItem(item)

    def remove_from(self, plot: pg.PlotItem) -> None:
        for item in self.items:
            plot.removeItem(item)

    def getData(self) -> tuple[np.ndarray, np.ndarray]:
        """Every point the series shows, oldest first."""
        (bx, by), (tx, ty) = self.body.getData(), self.tail.getData()
        if not len(tx):
            return bx, by
        return np.r_[bx[:-1], tx], np.r_[by[:-1], ty]  # the tail starts at the body's last point

    def set_body(self, x: np.ndarray, y: np.ndarray, pushes: int) -> None:
        self.body.set_points(x, y)
        self.tail.set_points(x[:0], y[:0])
        self.body_pushes = self.tail_pushes = pushes
        self.extent = self.body.y_extent

    def set_tail(self, x: np.ndarray, y: np.ndarray, pushes: int) -> None:
        """The points pushed since the body was fed, after the body's last point."""
        self.tail.set_points(x, y)
        self.tail_pushes = pushes
        body, tail = self.body.y_extent, self.tail.y_extent
        self.extent = (min(body[0], tail[0]), max(body[1], tail[1])) if body else tail


class DecadeAxis(pg.AxisItem):
    """A log axis with a tick and a label at each power of ten only: minor labels pile up. Its labels
    say the values themselves (0.01, 0.1 s), never a power of ten times an SI scale."""

    def __init__(self, orientation: str):
        super().__init__(orientation)
        self.enableAutoSIPrefix(False)

    def tickValues(self, minVal, maxVal, size):
        return [(1.0, [float(v) for v in range(math.ceil(minVal), math.floor(maxVal) + 1)])]


def _plot(layout: pg.GraphicsLayoutWidget, row: int, spec: PlotSpec) -> pg.PlotItem:
    axes = {"left": DecadeAxis("left")} if spec.log_y else {}
    plot = layout.addPlot(row=row, col=0, title=spec.title, axisItems=axes)
    plot.setLogMode(y=spec.log_y)
    plot.disableAutoRange()  # the panel fits y itself from what it feeds: autorange rescans every item
    plot.setMouseEnabled(x=False, y=False)
    plot.hideButtons()
    # the title spans the axes too: only its width, not its width and both axes', is what a plot needs
    plot.layout.removeItem(plot.titleLabel)
    plot.layout.addItem(plot.titleLabel, 0, 0, 1, 3)
    plot.getAxis("left").setWidth(LEFT_AXIS_WIDTH)
    if spec.unit:
        plot.getAxis("left").setLabel(spec.unit)
    if spec.y_range is not None:
        plot.setYRange(*spec.y_range, padding=0)
    for name in ("left", "bottom"):
        # axes are text, the dearest thing to draw without a GPU: keep each as a pixmap that is
        # redrawn only when its range changes, not on every curve update
        plot.getAxis(name).setCacheMode(QGraphicsItem.CacheMode.DeviceCoordinateCache)
    return plot


def _right_view(plot: pg.PlotItem, unit: str) -> pg.ViewBox:
    """A second view over the plot's, with its own y range, read on the plot's right axis."""
    view = pg.ViewBox(enableMouse=False, enableMenu=False)
    view.setParentItem(plot)  # shown and hidden with its plot
    view.disableAutoRange()
    view.setXLink(plot)
    axis = plot.getAxis("right")
    axis.linkToView(view)
    axis.setLabel(unit)
    axis.setWidth(RIGHT_AXIS_WIDTH)
    axis.setCacheMode(QGraphicsItem.CacheMode.DeviceCoordinateCache)
    plot.showAxis("right")
    plot.vb.sigResized.connect(lambda vb: view.setGeometry(vb.geometry()))  # the plot's view's place, in the plot
    return view


def _keep_right_margin(plot: pg.PlotItem) -> None:
    """An empty right axis as wide as a real one, so this plot's times are where the other rows' are."""
    axis = plot.getAxis("right")
    axis.setWidth(RIGHT_AXIS_WIDTH)
    axis.setTicks([])
    axis.setPen(pg.mkPen(None))
    plot.showAxis("right")


def _fold(plot: pg.PlotItem, folded: bool) -> None:
    """Hide a row and give its height to the others (a hidden item alone keeps its minimum)."""
    plot.setVisible(not folded)
    plot.setMaximumHeight(0 if folded else QWIDGETSIZE_MAX)


class PlotsPanel(pg.GraphicsLayoutWidget):
    """Reads a MetricsStore; `refresh(now)` moves every curve to the latest data. Its plots are
    `specs`, top to bottom, each also the attribute `<name>_plot`; the last one shows the time axis."""

    def __init__(self, metrics: MetricsStore, parent=None, *, specs: tuple[PlotSpec, ...] = PLOTS):
        super().__init__(parent)
        self.metrics = metrics
        self.setBackground(self.palette().color(QPalette.ColorRole.Base))  # dark with a dark theme
        self.ci.layout.setSpacing(2)
        self._rows = [(spec, _plot(self, row, spec)) for row, spec in enumerate(specs)]
        for spec, plot in self._rows:
            setattr(self, f"{spec.name}_plot", plot)
        self.right_views = {spec.name: _right_view(plot, spec.right_unit) for spec, plot in self._rows if spec.right_unit}
        self._folded = {spec.name for spec, _ in self._rows if spec.folded_until_points}
        for name in self._folded:
            _fold(getattr(self, f"{name}_plot"), True)
        self._line_up_right_edges()
        self.legend = self.addLabel("", row=len(specs), col=0, justify="left")  # each pane's colour and name
        # its text must never widen the plots past the dock: it wraps in lines, and its width is ignored
        self.legend.setSizePolicy(QSizePolicy.Policy.Ignored, QSizePolicy.Policy.Preferred)
        self._legend_entries: dict[str, tuple[str, str]] = {}  # pane -> (name, colour)
        *above, (_, axis_plot) = self._rows
        for _, plot in above:
            plot.setXLink(axis_plot)
            plot.hideAxis("bottom")  # the bottom plot's axis says it for all
        axis_plot.setLabel("bottom", "seconds ago")
        axis_plot.setXRange(-WINDOW_S, RIGHT_MARGIN_S, padding=0)  # a margin: the newest dots whole
        axis_plot.getAxis("bottom").setTicks([[(float(v), str(v)) for v in range(-int(WINDOW_S), 1, 10)]])
        self.t0 = time.monotonic()
        self._x_right = 0  # the moment at the right edge, in whole seconds since the panel opened
        self._fed: dict[tuple[str, str], int] = {}  # (point set, pane) -> ring.pushes when last taken
        self._point_extent: dict[str, tuple[float, float]] = {}  # point set -> (min, max) of its y
        self._y_range: dict[str, tuple[float, float]] = {}  # plot -> its y range
        self.pane_curves: dict[str, dict[str, LiveSeries]] = {}
        self.engine_curves: dict[str, LiveSeries] = {}
        self.point_sets: dict[str, pg.ScatterPlotItem] = {}
        self._points: dict[str, dict[str, tuple[np.ndarray, np.ndarray]]] = {}  # point set -> pane -> (x, y)
        self._plot_of: dict[str, pg.PlotItem] = {}  # a pane's line -> its plot
        self._row_of: dict[str, str] = {}  # a point set -> its plot's name
        self._pane_series: list[tuple[LineSpec | PointsSpec, bool]] = []  # with its plot's log_y, fed for each pane
        self._engine_series: list[tuple[LineSpec, bool]] = []
        self._brushes: dict[str, object] = {}
        text_colour = self.palette().color(QPalette.ColorRole.Text).name()
        for spec, plot in self._rows:
            for series in spec.series:
                self._add_series(spec, plot, series, text_colour)

    def _add_series(self, spec: PlotSpec, plot: pg.PlotItem, series: LineSpec | PointsSpec, text_colour: str) -> None:
        """Make an engine line or a point set; a pane's line is made as its pane is added."""
        if not spec.per_pane:
            self.engine_curves[series.name] = LiveSeries(line_pen(series.colour or text_colour, series.style))
            self.engine_curves[series.name].add_to(plot)
            self._engine_series.append((series, spec.log_y))
            return
        self._pane_series.append((series, spec.log_y))
        if isinstance(series, LineSpec):
            self._plot_of[series.name] = plot
        else:
            self.point_sets[series.name] = pg.ScatterPlotItem(size=series.size, pen=None, symbol=series.symbol)
            (self.right_views[spec.name] if series.right else plot).addItem(self.point_sets[series.name])
            self._points[series.name] = {}
            self._row_of[series.name] = spec.name

    def sizeHint(self) -> QSize:
        return QSize(PREFERRED_WIDTH, super().sizeHint().height())

    def add_pane(self, key: str, colour: str, name: str = "") -> None:
        self._legend_entries[key] = (name or key, colour)
        self._show_legend()
        pen = line_pen(colour)
        self.pane_curves[key] = {name: LiveSeries(pen) for name in self._plot_of}
        for name, series in self.pane_curves[key].items():
            series.add_to(self._plot_of[name])
            series.move_to(-self._x_right)
        self._brushes[key] = pg.mkBrush(colour)

    def name_pane(self, key: str, name: str) -> None:
        entry = self._legend_entries.get(key)
        if entry is not None and entry[0] != name:
            self._legend_entries[key] = (name, entry[1])
            self._show_legend()

    def _show_legend(self) -> None:
        lines: list[list[str]] = [[]]
        used = 0
        for name, colour in self._legend_entries.values():
            if lines[-1] and used + len(name) > LEGEND_LINE_CHARS:
                lines.append([])
                used = 0
            lines[-1].append(f"<span style='color:{colour}'>&#9632;</span>&nbsp;{html.escape(name)}")
            used += len(name) + 4
        self.legend.setText("<br>".join("&nbsp;&nbsp; ".join(line) for line in lines), size="8pt")

    def remove_pane(self, key: str) -> None:
        if self._legend_entries.pop(key, None) is not None:
            self._show_legend()
        for name, series in self.pane_curves.pop(key, {}).items():
            series.remove_from(self._plot_of[name])
        self._brushes.pop(key, None)
        for name, points in self._points.items():
            self._fed.pop((name, key), None)
            if points.pop(key, None) is not None:
                self._show_points(name)

    def points(self, key: str, name: str) -> tuple[np.ndarray, np.ndarray]:
        """One pane's points of a point set ("ttft", "hit") as drawn (x since the panel opened; y in
        log10 on a log axis, times the set's scale)."""
        return self._points[name].get(key, (np.empty(0), np.empty(0)))

    def refresh(self, now: float) -> None:
        # Time slides left in whole seconds (once a second looks as live as ten times), and by
        # moving the items, not the x range: a range change runs pyqtgraph's linked-view and axis
        # machinery through all the plots. Between slides only the tails are fed.
        right = math.ceil(now - self.t0)
        sliding = right > self._x_right
        new_points = set()
        for key, curves in self.pane_curves.items():
            m = self.metrics.panes.get(key)
            if m is None:
                continue
            for series, log_y in self._pane_series:
                ring = getattr(m, series.ring)
                if isinstance(series, LineSpec):
                    self._feed(curves[series.name], ring, now, sliding, log_y)
                elif self._collect(series, key, ring, now, log_y):
                    new_points.add(series.name)
        for name in new_points:
            self._show_points(name)
        for series, log_y in self._engine_series:
            self._feed(self.engine_curves[series.name], getattr(self.metrics, series.ring), now, sliding, log_y)
        for spec, plot in self._rows:
            if spec.y_range is None:
                self._fit_y(spec.name, plot, list(self._extents(spec)), spec.log_y)
            if spec.right_unit:
                self._fit_y(f"{spec.name}:right", self.right_views[spec.name], list(self._extents(spec, right=True)))
        if sliding:
            self._x_right = right
            for series in self._all_series():
                series.move_to(-right)
            for item in self.point_sets.values():
                item.setPos(-right, 0)
                item.viewTransformChanged()  # a scatter culls points by a cached view rectangle

    def _all_series(self):
        yield from self.engine_curves.values()
        for curves in self.pane_curves.values():
            yield from curves.values()

    def _extents(self, spec: PlotSpec, right: bool = False):
        """(min, max) of y of each item against a plot's left axis (its right one: `right`), None for an empty one."""
        for series in spec.series:
            if (isinstance(series, PointsSpec) and series.right) is not right:
                continue
            if isinstance(series, PointsSpec):
                yield self._point_extent.get(series.name)
            elif spec.per_pane:
                yield from (curves[series.name].extent for curves in self.pane_curves.values())
            else:
                yield self.engine_curves[series.name].extent

    def _fit_y(self, key: str, view, extents: list[tuple[float, float] | None], log_y: bool = False) -> None:
        """Set a plot's (or a right view's) y to a round range around the items' points, only when
        that range changes; `key` names the range."""
        extents = [e for e in extents if e is not None]
        if not extents:
            return
        low, high = min(e[0] for e in extents), max(e[1] for e in extents)
        if log_y:  # log10 values: whole decades
            rng = (math.floor(low), max(math.ceil(high), math.floor(low) + 1))
        else:
            rng = (0.0, _round_up(high))
        if self._y_range.get(key) != rng:
            self._y_range[key] = rng
            view.setYRange(*rng, padding=0.02)

    def _feed(self, series: LiveSeries, ring: Ring, now: float, sliding: bool, log_y: bool) -> None:
        """Give a series its new points: all of the last window when the range slides (or the first
        time), else only the tail pushed since the body was fed."""
        if ring.pushes == series.tail_pushes and not (sliding and series.tail_pushes != series.body_pushes):
            return
        if sliding or series.body_pushes < 0:
            series.set_body(*self._shown(ring, now, log_y), ring.pushes)
        else:  # with the body's last point, so the line is unbroken
            t, v = ring.last(ring.pushes - series.body_pushes + 1)
            series.set_tail(*self._xy(t, v, log_y), ring.pushes)

    def _collect(self, points: PointsSpec, key: str, ring: Ring, now: float, log_y: bool) -> bool:
        """Take a pane's new request points; True if there were any."""
        if self._fed.get((points.name, key)) == ring.pushes:
            return False
        self._fed[(points.name, key)] = ring.pushes
        x, y = self._shown(ring, now, log_y)
        self._points[points.name][key] = (x, y * points.scale)
        return True

    def _show_points(self, name: str) -> None:
        points = self._points[name]
        item = self.point_sets[name]
        if not points:
            item.clear()
            self._point_extent.pop(name, None)
            return
        x = np.concatenate([xy[0] for xy in points.values()])
        y = np.concatenate([xy[1] for xy in points.values()])
        brushes = [self._brushes[key] for key, xy in points.items() for _ in range(len(xy[0]))]
        shown = y[x >= time.monotonic() - self.t0 - WINDOW_S]
        if len(shown):
            self._point_extent[name] = (float(shown.min()), float(shown.max()))
        item.setData(x=x, y=y, brush=brushes)
        if len(x) and self._row_of[name] in self._folded:
            self._folded.discard(self._row_of[name])
            _fold(getattr(self, f"{self._row_of[name]}_plot"), False)
            self._line_up_right_edges()

    def _line_up_right_edges(self) -> None:
        """While a shown row has a right axis, every other keeps as much room, so their times line up."""
        shown = [(spec, plot) for spec, plot in self._rows if spec.name not in self._folded]
        if any(spec.right_unit for spec, _ in shown):
            for spec, plot in shown:
                if not spec.right_unit:
                    _keep_right_margin(plot)

    def _shown(self, ring: Ring, now: float, log_y: bool) -> tuple[np.ndarray, np.ndarray]:
        """The ring's points of the last window and a margin, in plot coordinates."""
        t, v = ring.view()
        start = np.searchsorted(t, now - WINDOW_S - SLIDE_MARGIN_S)
        return self._xy(t[start:], v[start:], log_y)

    def _xy(self, t: np.ndarray, v: np.ndarray, log_y: bool) -> tuple[np.ndarray, np.ndarray]:
        """Plot coordinates: x in seconds since the panel opened, y a copy (the ring is reused)."""
        if log_y:  # bare items leave the log mapping of a log-mode plot to their feeder
            return t - self.t0, np.log10(np.maximum(v, 1e-4))
        return t - self.t0, v.copy()


def _round_up(value: float) -> float:
    """The next of 1, 2, 5, 10, 20, 50, ... at or above `value` (1 at least)."""
    if value <= 1:
        return 1.0
    scale = 10 ** math.floor(math.log10(value))
    return next(m * scale for m in (1, 2, 5, 10) if m * scale >= value)
