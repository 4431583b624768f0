"""Live plots, a row for each entry of `plot_specs.PLOTS`: per-pane tokens/s, latency, KV hit rate
and drafts (once a reply drafted), and the engine's tokens/s and batch size.

Curves are made once and fed from the window's one 10 Hz timer. Without a GPU every redraw is
paid in CPU taken from the engine, so a tick does as little as it can: the x range changes only
when the span steps up (10, 20, 30, 60 s, to cover the activity shown), items hold time since the
panel opened and are moved left once a second, a line is fed only when its ring got new points,
and between moves only its newest part is redrawn. With at most a few hundred points a line,
clip-to-view and downsampling would cost more than they save.

A row keeps a legible height: when the panel is too short for all of them, the rows of least
priority fold, and a line under the legend says so.
"""

from __future__ import annotations

import html
import math
import time

import numpy as np
import pyqtgraph as pg
from PySide6.QtCore import QSize, Qt
from PySide6.QtGui import QBrush, QColor, QPainterPath, QPalette, QPen
from PySide6.QtWidgets import QGraphicsItem, QGraphicsPathItem, QSizePolicy

from app.workspace.metrics import MetricsStore, Ring

from .plot_specs import PLOTS, LineSpec, PlotSpec, PointsSpec

WINDOW_S = 60.0  # the widest span: the step timeline's, always
# the x spans, narrowest first: the plots show the shortest that holds what happened since the
# first activity still in the last minute, so a 6 s broadcast fills the plot. Each change moves
# every row's range and axis, so there are few
SPANS_S = (10.0, 20.0, 30.0, WINDOW_S)
SPAN_HEADROOM_S = 1.0  # the span steps up this long before the first activity reaches its left edge
LEGEND_LINE_CHARS = 48  # a legend line holds entries up to this many characters: a longer one would widen the dock
RIGHT_MARGIN_S = 1.0  # room right of now, so a point just added is drawn whole
BODY_PIECES = 6  # items a line's body is cut in: a tick's repaint strokes about a sixth of it
SLIDE_MARGIN_S = 2.0  # items hold this much left of the window, so a line enters from the edge
PREFERRED_WIDTH = 400  # as the window opens: on a 1366 px laptop screen eight panes get 230 px each
LEFT_AXIS_WIDTH = 38
RIGHT_AXIS_WIDTH = 34  # a right axis's; while one shows, every plot keeps this margin, so their times line up
MIN_VIEW_HEIGHT = 80  # a plot's drawing area, at least: lower, its ticks and points cannot be told apart
TITLE_HEIGHT = 16  # a title's row (pyqtgraph gives 30 to its 11pt titles)
# between a title and its plot: the top tick label, centred on its tick, reaches above the plot this far
TITLE_GAP = 6
TITLE_SIZE = "9pt"
BAND_ALPHA = 60  # a stacked band's fill: its pane's colour, pale, so the lines on it stay the boldest
QWIDGETSIZE_MAX = (1 << 24) - 1  # Qt's largest widget size: no maximum


class Line:
    """A line through points, drawn by plain QGraphicsPathItems, so that their bounding boxes and their
    painting stay in C++. Qt calls back every Python-made item (pyqtgraph's curves, or a subclass of
    our own) for its box and its paint on each repaint: with 38 lines, measured, a quarter of a
    plot tick.

    A long line is cut in `pieces` runs of points, one item each: a repaint at the plot's right edge
    then strokes only the last run, not the whole minute (stroking was 40% of a tick's paint).

    With a `band` brush, each run also fills down to a floor line (a stacked line's), in items of
    their own under the lines: a filled item's outline would stroke the floor in this colour too."""

    def __init__(self, pen: QPen, pieces: int = 1, band: QBrush | None = None):
        self.items = [QGraphicsPathItem() for _ in range(pieces)]
        for item in self.items:
            item.setPen(pen)
        self.fills = [QGraphicsPathItem() for _ in range(pieces)] if band is not None else []
        for fill in self.fills:
            fill.setPen(QPen(Qt.PenStyle.NoPen))
            fill.setBrush(band)
            fill.setZValue(-1)  # under every line
        self.x = self.y = np.empty(0)
        self.y_extent: tuple[float, float] | None = None  # (min, max) of y, None when empty

    def set_points(self, x: np.ndarray, y: np.ndarray, floor: np.ndarray | None = None) -> None:
        self.x, self.y = x, y
        self.y_extent = (float(y.min()), float(y.max())) if len(x) else None
        # each run ends on the next one's first point, so the line is unbroken
        last = len(x) - 1
        pieces = len(self.items) if last > 0 else 1  # a lone point needs one item
        for i, item in enumerate(self.items):
            start, end = i * last // pieces, (i + 1) * last // pieces
            run = slice(start, end + 1) if i < pieces and len(x) else slice(0, 0)
            item.setPath(_polygon(x[run], y[run]))  # repaints the old box and the new one
            if self.fills:
                xs = x[run]
                self.fills[i].setPath(_polygon(np.r_[xs, xs[::-1]], np.r_[y[run], floor[run][::-1]]))

    def getData(self) -> tuple[np.ndarray, np.ndarray]:
        return self.x, self.y


def _polygon(x: np.ndarray, y: np.ndarray) -> QPainterPath:
    path = QPainterPath()
    if len(x):
        path.addPolygon(pg.functions.arrayToQPolygonF(x, y))
    return path


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

    def __init__(self, pen: QPen, band: QBrush | None = None):
        self.body = Line(pen, BODY_PIECES, band)
        self.tail = Line(pen, band=band)
        self.body_pushes = -1  # ring.pushes when the body was fed
        self.tail_pushes = -1  # ring.pushes when the tail was fed
        self.extent: tuple[float, float] | None = None  # (min, max) of y in body and tail

    @property
    def items(self) -> list[QGraphicsPathItem]:
        """The line's items (a stacked line's band fills are `fills`)."""
        return self.body.items + self.tail.items

    @property
    def fills(self) -> list[QGraphicsPathItem]:
        return self.body.fills + self.tail.fills

    def move_to(self, x: float) -> None:
        for item in self.items + self.fills:
            item.setPos(x, 0)

    def add_to(self, plot: pg.PlotItem) -> None:
        for item in self.items + self.fills:
            plot.addItem(item)

    def remove_from(self, plot: pg.PlotItem) -> None:
        for item in self.items + self.fills:
            plot.removeItem(item)

    def getData(self) -> tuple[np.ndarray, np.ndarray]:
        """Every point the series shows, oldest first."""
        (bx, by), (tx, ty) = self.body.getData(), self.tail.getData()
        if not len(tx):
            return bx, by
        return np.r_[bx[:-1], tx], np.r_[by[:-1], ty]  # the tail starts at the body's last point

    def set_body(self, x: np.ndarray, y: np.ndarray, pushes: int, floor: np.ndarray | None = None) -> None:
        self.body.set_points(x, y, floor)
        self.tail.set_points(x[:0], y[:0], floor)
        self.body_pushes = self.tail_pushes = pushes
        self.extent = self.body.y_extent

    def set_tail(self, x: np.ndarray, y: np.ndarray, pushes: int, floor: np.ndarray | None = None) -> None:
        """The points pushed since the body was fed, after the body's last point."""
        self.tail.set_points(x, y, floor)
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


def _plot(layout: pg.GraphicsLayoutWidget, row: int, spec: PlotSpec, text_colour: str) -> pg.PlotItem:
    axes = {"left": DecadeAxis("left")} if spec.log_y else {}
    plot = layout.addPlot(row=row, col=0, axisItems=axes)
    plot.setLogMode(y=spec.log_y)
    plot.disableAutoRange()  # the panel fits y itself from what it feeds: autorange rescans every item
    plot.setMouseEnabled(x=False, y=False)
    plot.hideButtons()
    # the title spans the axes too: only its width, not its width and both axes', is what a plot needs
    plot.layout.removeItem(plot.titleLabel)
    plot.layout.addItem(plot.titleLabel, 0, 0, 1, 3)
    plot.titleLabel.setSizePolicy(QSizePolicy.Policy.Ignored, QSizePolicy.Policy.Fixed)  # cut, never wider than the dock
    plot.vb.setMinimumHeight(MIN_VIEW_HEIGHT)
    plot.getAxis("left").setWidth(LEFT_AXIS_WIDTH)
    plot.titleLabel.item.document().setDocumentMargin(0)  # its row is its text's height
    if spec.y_range is not None:
        plot.setYRange(*spec.y_range, padding=0)
    for name in ("left", "bottom"):
        axis = plot.getAxis(name)
        axis.setTextPen(text_colour)
        # axes are text, the dearest thing to draw without a GPU: keep each as a pixmap that is
        # redrawn only when its range changes, not on every curve update
        axis.setCacheMode(QGraphicsItem.CacheMode.DeviceCoordinateCache)
    return plot


def _right_view(plot: pg.PlotItem, text_colour: str) -> pg.ViewBox:
    """A second view over the plot's, with its own y range, read on the plot's right axis (its unit
    is in the title)."""
    view = pg.ViewBox(enableMouse=False, enableMenu=False)
    view.setParentItem(plot)  # shown and hidden with its plot
    view.disableAutoRange()
    view.setXLink(plot)
    axis = plot.getAxis("right")
    axis.linkToView(view)
    axis.setWidth(RIGHT_AXIS_WIDTH)
    axis.setTextPen(text_colour)
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


def _fold(item: pg.PlotItem | pg.LabelItem, folded: bool) -> None:
    """Hide a row and give its height to the others (a hidden item alone keeps its minimum)."""
    item.setVisible(not folded)
    if isinstance(item, pg.PlotItem):
        item.vb.setMinimumHeight(0 if folded else MIN_VIEW_HEIGHT)
    item.setMaximumHeight(0 if folded else QWIDGETSIZE_MAX)


def _values_at(t: np.ndarray, ring_t: np.ndarray, ring_v: np.ndarray) -> np.ndarray:
    """A ring's values at times `t` (0 before its first point: a pane added later had no tokens)."""
    if not len(ring_t):
        return np.zeros(len(t))
    return np.interp(t, ring_t, ring_v, left=0.0)


class PlotsPanel(pg.GraphicsLayoutWidget):
    """Reads a MetricsStore; `refresh(now)` moves every curve to the latest data. Its plots are
    `specs`, top to bottom, each also the attribute `<name>_plot`; the lowest shown one shows the
    time axis."""

    _built = False  # resized by pyqtgraph's own __init__ already: the rows are fitted once they exist
    _axis_h = 0

    def __init__(self, metrics: MetricsStore, parent=None, *, specs: tuple[PlotSpec, ...] = PLOTS):
        super().__init__(parent)
        self.metrics = metrics
        self.setBackground(self.palette().color(QPalette.ColorRole.Base))  # dark with a dark theme
        self.text_colour = self.palette().color(QPalette.ColorRole.Text).name()  # titles, ticks, legend
        self.ci.layout.setSpacing(2)
        self.ci.layout.setContentsMargins(4, 4, 4, 4)  # not the 9 px of Qt's: a row's worth at 300 px tall
        self._rows = [(spec, _plot(self, row, spec, self.text_colour)) for row, spec in enumerate(specs)]
        for spec, plot in self._rows:
            setattr(self, f"{spec.name}_plot", plot)
        self.right_views = {spec.name: _right_view(plot, self.text_colour) for spec, plot in self._rows if spec.right_unit}
        self._waiting = {spec.name for spec, _ in self._rows if spec.folded_until_points}  # folded until their first point
        self.folded: set[str] = set()  # rows folded for want of room
        for name in self._waiting:
            _fold(getattr(self, f"{name}_plot"), True)
        self._line_up_right_edges()
        self.legend = self.addLabel("", row=len(specs), col=0, justify="left")  # each pane's colour and name
        self.fold_note = self.addLabel("", row=len(specs) + 1, col=0, justify="left")  # what folded, while some did
        for label in (self.legend, self.fold_note):
            # its text must never widen the plots past the dock: it wraps in lines, and its width is ignored
            label.setSizePolicy(QSizePolicy.Policy.Ignored, QSizePolicy.Policy.Preferred)
        self._say_folded(1)
        self._note_height = math.ceil(self.fold_note.minimumHeight()) + self._spacing()  # folded, it has none
        _fold(self.fold_note, True)
        self._legend_entries: dict[str, tuple[str, str]] = {}  # pane -> (name, colour)
        self.t0 = time.monotonic()
        self._x_right = 0  # the moment at the right edge, in whole seconds since the panel opened
        self.span = SPANS_S[0]  # seconds of the x range
        self._set_span(self.span)
        self._active_since: float | None = None  # the first activity still in the widest span
        self._last_active = -math.inf
        self._checked: dict[Ring, int] = {}  # ring -> its pushes when activity was last looked for
        self._line_values: dict[str, float] = {}  # an engine line with a label -> the value its title says
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
        self._stacks: dict[str, tuple[str, ...]] = {}  # a stacked line -> the panes in its stack, bottom first
        self._brushes: dict[str, object] = {}
        for spec, plot in self._rows:
            for series in spec.series:
                self._add_series(spec, plot, series)
            self._set_title(spec, plot)
        self._built = True
        self._fit_rows(again=True)

    def _add_series(self, spec: PlotSpec, plot: pg.PlotItem, series: LineSpec | PointsSpec) -> None:
        """Make an engine line or a point set; a pane's line is made as its pane is added."""
        if not spec.per_pane:
            self.engine_curves[series.name] = LiveSeries(line_pen(series.colour or self.text_colour, series.style))
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

    def _set_title(self, spec: PlotSpec, plot: pg.PlotItem) -> None:
        """The title in the theme's text colour; a labelled line's words in its colour, with its value;
        the units last."""
        parts = [html.escape(spec.title)]
        for series in spec.series:
            if isinstance(series, LineSpec) and series.label:
                value = self._line_values.get(series.name)
                said = series.label if value is None else f"{series.label} ({value:g})"
                parts.append(f"<span style='color:{series.colour or self.text_colour}'>{html.escape(said)}</span>")
        units = spec.unit + (f" | {spec.right_unit}" if spec.right_unit else "")
        title = " · ".join(parts) + (f" ({html.escape(units)})" if units else "")
        plot.setTitle(title, color=self.text_colour, size=TITLE_SIZE)
        plot.titleLabel.setMaximumHeight(TITLE_HEIGHT)
        plot.layout.setRowFixedHeight(0, TITLE_HEIGHT)
        plot.layout.setRowFixedHeight(1, TITLE_GAP)  # the top axis's row, empty

    def sizeHint(self) -> QSize:
        return QSize(PREFERRED_WIDTH, super().sizeHint().height())

    def minimumSizeHint(self) -> QSize:
        """Room for one legible row, the time axis, the legend and the fold note."""
        one_row = self._row_height() + self._axis_height() + self._note_height
        return QSize(super().minimumSizeHint().width(), self._fixed_height() + one_row)

    def resizeEvent(self, event) -> None:
        if self._built and not self.closed:  # first: the layout takes the new size within the rows' new minimums
            self._fit_rows(resizing=True)
        super().resizeEvent(event)

    # -- rows that fit ----------------------------------------------------------------------------

    def _row_height(self) -> int:
        _, top, _, bottom = self._rows[0][1].layout.getContentsMargins()  # the same in every plot
        return TITLE_HEIGHT + TITLE_GAP + MIN_VIEW_HEIGHT + math.ceil(top + bottom) + self._spacing()

    def _spacing(self) -> int:
        return math.ceil(self.ci.layout.verticalSpacing())

    def _axis_height(self) -> int:
        """The time axis's height: a hidden axis has none, so the largest it had while shown."""
        for _, plot in self._rows:
            axis = plot.getAxis("bottom")
            if axis.isVisible():
                self._axis_h = max(self._axis_h, math.ceil(axis.minimumHeight()))
        return self._axis_h

    def _fixed_height(self) -> int:
        """The panel's height less its rows': the legend and the layout's margins."""
        _, top, _, bottom = self.ci.layout.getContentsMargins()
        return math.ceil(self.legend.minimumHeight() + top + bottom) + 2 * self.frameWidth()

    def _fit_rows(self, again: bool = False, resizing: bool = False) -> None:
        """Fold the rows of least priority that do not fit at a legible height, so none overlaps;
        unfold them when the room returns. One row is always shown. `again`: lay out the rows even
        if the same fold (a row joined them); `resizing`: the view lays the rows out next."""
        rows = [(spec, plot) for spec, plot in self._rows if spec.name not in self._waiting]
        ranked = sorted(rows, key=lambda row: -row[0].priority)
        room = self.height() - self._fixed_height() - self._axis_height()
        kept = len(ranked)
        while kept > 1 and kept * self._row_height() + (self._note_height if kept < len(ranked) else 0) > room:
            kept -= 1
        folded = {spec.name for spec, _ in ranked[kept:]}
        if folded == self.folded and not again:
            return
        self.folded = folded
        for spec, plot in rows:
            _fold(plot, spec.name in folded)
        self._show_time_axis()
        self._say_folded(len(folded))
        _fold(self.fold_note, not folded)
        if not resizing:  # the layout was given the view's size under the old minimums: again
            self.ci.setGeometry(self.range)

    def _say_folded(self, count: int) -> None:
        plots = "plot" if count == 1 else "plots"
        self.fold_note.setText(f"{count} {plots} folded: make the dock taller", size="8pt", color=self.text_colour)

    def _show_time_axis(self) -> None:
        """The lowest row shown shows the time axis for all."""
        shown = [plot for spec, plot in self._rows if spec.name not in self._waiting | self.folded]
        for _, plot in self._rows:
            plot.showAxis("bottom", bool(shown) and plot is shown[-1])

    def _set_span(self, span: float) -> None:
        """Show the last `span` seconds in every row: a range change runs pyqtgraph's axis machinery,
        so it is done only as the span steps."""
        self.span = span
        step = int(_round_up(span / 6))
        # the ticks say the unit themselves: an axis label under them would take a row's worth of room
        ticks = [[(float(v), f"{v} s" if v else "now") for v in range(-int(span), 1, step)]]
        for _, plot in self._rows:
            plot.setXRange(-span, RIGHT_MARGIN_S, padding=0)  # a margin: the newest dots whole
            plot.getAxis("bottom").setTicks(ticks)

    def _follow_activity(self, now: float) -> None:
        """Step the span to hold the first activity (a pane's tokens, the engine's steps, a request's
        point) still in the widest span, with some headroom; back to the narrowest once all of it
        scrolled out."""
        rates = [m.tok_rate for m in self.metrics.panes.values()] + [self.metrics.seqs_per_step]
        # a request's point (its TTFT, its hit, its drafts) is activity whatever its value
        points = [
            getattr(m, series.ring)
            for m in self.metrics.panes.values()
            for series, _ in self._pane_series
            if isinstance(series, PointsSpec)
        ]
        first, last = math.inf, -math.inf
        checked = {}
        for ring, is_rate in [(r, True) for r in rates] + [(r, False) for r in points]:  # new since the last look
            t, v = ring.last(ring.pushes - self._checked.get(ring, 0))
            active = t[v > 0] if is_rate else t
            if len(active):
                first, last = min(first, active[0]), max(last, active[-1])
            checked[ring] = ring.pushes
        self._checked = checked
        if last > -math.inf:
            if self._active_since is None or first - self._last_active > WINDOW_S:
                self._active_since = float(first)
            self._last_active = max(self._last_active, float(last))
        if self._active_since is not None and now - self._last_active > WINDOW_S + SLIDE_MARGIN_S:
            self._active_since = None
        covered = 0.0 if self._active_since is None else now - self._active_since + SPAN_HEADROOM_S
        span = next((s for s in SPANS_S if s >= covered), SPANS_S[-1])
        if span != self.span:
            self._set_span(span)
            for series in self._all_series():
                series.body_pushes = series.tail_pushes = -1  # fed again, over the new span

    # -- panes -----------------------------------------------------------------------------------

    def add_pane(self, key: str, colour: str, name: str = "") -> None:
        self._legend_entries[key] = (name or key, colour)
        self._show_legend()
        pen = line_pen(colour)
        band = QColor(colour)
        band.setAlpha(BAND_ALPHA)
        self.pane_curves[key] = {}
        for series, _ in self._pane_series:
            if isinstance(series, LineSpec):
                curve = LiveSeries(pen, QBrush(band) if series.stacked else None)
                curve.add_to(self._plot_of[series.name])
                curve.move_to(-self._x_right)
                self.pane_curves[key][series.name] = curve
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
        self.legend.setText("<br>".join("&nbsp;&nbsp; ".join(line) for line in lines), size="8pt", color=self.text_colour)
        self._fit_rows()  # a legend of more lines leaves less room

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

    # -- the tick --------------------------------------------------------------------------------

    def refresh(self, now: float) -> None:
        # Time slides left in whole seconds (once a second looks as live as ten times), and by
        # moving the items, not the x range: a range change runs pyqtgraph's axis machinery through
        # all the plots. Between slides only the tails are fed.
        right = math.ceil(now - self.t0)
        sliding = right > self._x_right
        if sliding:
            self._follow_activity(now)
        new_points = set()
        for key, curves in self.pane_curves.items():
            m = self.metrics.panes.get(key)
            if m is None:
                continue
            for series, log_y in self._pane_series:
                ring = getattr(m, series.ring)
                if isinstance(series, PointsSpec):
                    if self._collect(series, key, ring, now, log_y):
                        new_points.add(series.name)
                elif not series.stacked:
                    self._feed(curves[series.name], ring, now, sliding, log_y)
        for series, _ in self._pane_series:
            if isinstance(series, LineSpec) and series.stacked:
                self._feed_stack(series, now, sliding)
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
            self._say_line_values()

    def _say_line_values(self) -> None:
        """Titles say their labelled lines' newest values (the batch limit), when those change: a
        title's new text lays the panel out again, so at most once a second."""
        for spec, plot in self._rows:
            changed = False
            for series in spec.series:
                if isinstance(series, LineSpec) and series.label and not spec.per_pane:
                    ring = getattr(self.metrics, series.ring)
                    value = float(ring.last(1)[1][0]) if len(ring) else None
                    if value != self._line_values.get(series.name):
                        self._line_values[series.name] = value
                        changed = True
            if changed:
                self._set_title(spec, plot)

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
        """Give a series its new points: all of the span shown when the range slides (or the first
        time), else only the tail pushed since the body was fed."""
        if ring.pushes == series.tail_pushes and not (sliding and series.tail_pushes != series.body_pushes):
            return
        if sliding or series.body_pushes < 0:
            series.set_body(*self._shown(ring, now, log_y), ring.pushes)
        else:  # with the body's last point, so the line is unbroken
            t, v = ring.last(ring.pushes - series.body_pushes + 1)
            series.set_tail(*self._xy(t, v, log_y), ring.pushes)

    def _feed_stack(self, spec: LineSpec, now: float, sliding: bool) -> None:
        """Feed a stacked line of every pane, each on the panes' before it, at the times of the
        longest ring (every pane's rate is sampled at once), as `_feed` does: bodies as the range
        slides, tails between."""
        panes = [(key, curves[spec.name]) for key, curves in self.pane_curves.items() if key in self.metrics.panes]
        if not panes:
            return
        stack = [(curve, getattr(self.metrics.panes[key], spec.ring)) for key, curve in panes]
        order = tuple(key for key, _ in panes)
        fresh = order != self._stacks.get(spec.name) or any(curve.body_pushes < 0 for curve, _ in stack)
        tails = any(curve.tail_pushes != curve.body_pushes for curve, _ in stack)
        if not fresh and all(ring.pushes == curve.tail_pushes for curve, ring in stack) and not (sliding and tails):
            return
        self._stacks[spec.name] = order
        reference = max(stack, key=lambda pane: len(pane[1]))
        if fresh or sliding:
            t = self._window(reference[1], now)[0]
            shown = [self._window(ring, now) for _, ring in stack]
        else:  # from the body's last point
            t = reference[1].last(reference[1].pushes - reference[0].body_pushes + 1)[0]
            shown = [ring.last(ring.pushes - curve.body_pushes + 1) for curve, ring in stack]
        floor = np.zeros(len(t))
        for (curve, ring), (ring_t, ring_v) in zip(stack, shown):
            top = floor + _values_at(t, ring_t, ring_v)
            if fresh or sliding:
                curve.set_body(t - self.t0, top, ring.pushes, floor)
            else:
                curve.set_tail(t - self.t0, top, ring.pushes, floor)
            floor = top

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
        shown = y[x >= time.monotonic() - self.t0 - self.span]
        if len(shown):
            self._point_extent[name] = (float(shown.min()), float(shown.max()))
        item.setData(x=x, y=y, brush=brushes)
        if len(x) and self._row_of[name] in self._waiting:
            self._waiting.discard(self._row_of[name])
            _fold(getattr(self, f"{self._row_of[name]}_plot"), False)
            self._line_up_right_edges()
            self._fit_rows(again=True)

    def _line_up_right_edges(self) -> None:
        """While a shown row has a right axis, every other keeps as much room, so their times line up."""
        shown = [(spec, plot) for spec, plot in self._rows if spec.name not in self._waiting]
        if any(spec.right_unit for spec, _ in shown):
            for spec, plot in shown:
                if not spec.right_unit:
                    _keep_right_margin(plot)

    def _shown(self, ring: Ring, now: float, log_y: bool) -> tuple[np.ndarray, np.ndarray]:
        """The ring's points of the span shown and a margin, in plot coordinates."""
        return self._xy(*self._window(ring, now), log_y)

    def _window(self, ring: Ring, now: float) -> tuple[np.ndarray, np.ndarray]:
        """The ring's points of the span shown and a margin (views of the ring)."""
        t, v = ring.view()
        start = np.searchsorted(t, now - self.span - SLIDE_MARGIN_S)
        return t[start:], v[start:]

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
