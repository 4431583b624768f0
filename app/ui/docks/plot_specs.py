"""The live plots as a table: each plot's title, unit, y axis and series, one `PlotSpec` each.

`PlotsPanel` builds its rows, curves, feeds and y ranges from `PLOTS`, top to bottom: a new plot is
one entry here and its series (and, if its figures are new, a Ring in `app/workspace/metrics.py`).
"""

from __future__ import annotations

from dataclasses import dataclass

from PySide6.QtCore import Qt

# the batch limit the adaptive controller chose: an olive no pane has (the panes' are tab10's first
# eight, the API's grey), dark enough to read on a light background and light enough on a dark one
LIMIT_COLOUR = "#9c8f00"


@dataclass(frozen=True)
class LineSpec:
    """A line through a Ring's points: in a per-pane plot, one for each pane, in the pane's colour;
    in an engine plot, one, in `colour` (None: the theme's text colour, readable on any theme)."""

    name: str  # its key in PlotsPanel.pane_curves[pane] or PlotsPanel.engine_curves
    ring: str  # the Ring's attribute: of PaneMetrics in a per-pane plot, of MetricsStore in an engine plot
    colour: str | None = None
    style: Qt.PenStyle = Qt.PenStyle.SolidLine
    # said in its plot's title, in its colour, with its newest value: what a dashed line is ("": nothing)
    label: str = ""
    # per pane: each pane's line drawn on the ones of the panes before it, the band between filled in
    # its colour, so equal lines never hide each other (on a linear axis only)
    stacked: bool = False


@dataclass(frozen=True)
class PointsSpec:
    """A point per request, in its pane's colour; every pane's in one scatter item (one item paints
    far cheaper than eight), so only in a per-pane plot."""

    name: str  # its key in PlotsPanel.point_sets and PlotsPanel.points
    ring: str  # the Ring's attribute of PaneMetrics
    size: int  # in pixels
    scale: float = 1.0  # drawn as the ring's values times this
    symbol: str = "o"  # pyqtgraph's: "o" a dot, "t1" a triangle pointing up
    right: bool = False  # against the plot's right axis (its `right_unit`), fitted on its own


@dataclass(frozen=True)
class PlotSpec:
    """One plot, a row of the panel (the panel's `<name>_plot`). Each plot's x axis is linked to the
    last plot's, the one that shows it."""

    name: str
    title: str
    unit: str  # said at the title's end: a rotated axis label would crowd the tick labels
    per_pane: bool  # its series are each pane's figures; else the engine's
    series: tuple[LineSpec | PointsSpec, ...]
    log_y: bool = False  # a decade axis; the panel feeds log10 of the values
    # fixed; None fits it to the points shown, in whole decades on a log axis, else from 0 to a round value
    y_range: tuple[float, float] | None = None
    # a right axis for the point sets marked `right`, from 0 to a round value ("": none); said in the
    # title after `unit` ("% | tok/step")
    right_unit: str = ""
    # the row stays folded away until its first point: a plot of what only some settings make
    folded_until_points: bool = False
    # when the panel is too short for every row at a legible height, rows of least priority fold first
    priority: int = 0

    def __post_init__(self):
        if not self.per_pane and any(isinstance(s, PointsSpec) for s in self.series):
            raise ValueError(f"plot {self.name!r}: points are drawn per pane only")
        right = [s for s in self.series if isinstance(s, PointsSpec) and s.right]
        if bool(right) != bool(self.right_unit):
            raise ValueError(f"plot {self.name!r}: a right axis needs both its unit and its point sets")
        if any(isinstance(s, LineSpec) and s.stacked for s in self.series) and (self.log_y or not self.per_pane):
            raise ValueError(f"plot {self.name!r}: lines stack per pane on a linear axis only")


PLOTS = (
    # stacked rather than offset lines (which would misstate every rate but one) or a plot per pane
    # (eight rows' height and axes): panes in one batch get the same rate, and a band each shows
    # every pane, its share and, at the top, the total the batch gave
    PlotSpec(
        "rate",
        "Tokens per pane, stacked: a band each",
        "tok/s",
        per_pane=True,
        series=(LineSpec("rate", "tok_rate", stacked=True),),
        priority=6,
    ),
    PlotSpec(
        "latency",
        "Latency per pane: TTFT ● / answer ▲ / ITL —",
        "s",
        per_pane=True,
        # a thinking reply's first answer token beside its first token: what the thoughts cost
        series=(LineSpec("itl", "itl"), PointsSpec("ttft", "ttft", size=7), PointsSpec("answer", "answer", size=9, symbol="t1")),
        log_y=True,
        priority=4,
    ),
    PlotSpec(
        "hit",
        "KV cache hit of each prompt",
        "%",
        per_pane=True,
        series=(PointsSpec("hit", "kv_hit", size=6, scale=100),),  # in %, as the readouts say it
        y_range=(0, 105),
        priority=2,
    ),
    PlotSpec(  # speculative decoding (--spec-type): shown from the first reply that drafted
        "drafts",
        "Drafts: accepted ● / per step ▲",
        "%",
        per_pane=True,
        series=(
            PointsSpec("accepted", "draft_accepted", size=6, scale=100),
            PointsSpec("step_tokens", "step_tokens", size=8, symbol="t1", right=True),
        ),
        y_range=(0, 105),
        right_unit="tok/step",
        folded_until_points=True,
        priority=3,
    ),
    PlotSpec(
        "engine",
        "Engine: tokens generated",
        "tok/s",
        per_pane=False,
        series=(LineSpec("rate", "engine_rate"),),
        priority=5,
    ),
    PlotSpec(
        "batch",
        "Sequences per step —",
        "",
        per_pane=False,
        series=(
            LineSpec("batch", "seqs_per_step"),
            LineSpec("limit", "batch_limit", LIMIT_COLOUR, Qt.PenStyle.DashLine, label="dashed: batch limit"),
        ),
        priority=1,
    ),
)
