"""What the window shows, measured: each visible dock, plot drawing area, transcript, readout and the
status bar, with its size and text, so a layout can be checked without looking at it
(`python -m app.ui.demo --geometry-json FILE`, and the layout tests).

A plot is any pyqtgraph view box shown in the window: its size is the drawing area, not the widget
around it, since that is what collapses first when docks crowd the window.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import pyqtgraph as pg
from PySide6.QtGui import QTextDocumentFragment
from PySide6.QtWidgets import QDockWidget

from app.ui.docks.kv_map import CellPicture

if TYPE_CHECKING:
    from .main_window import MainWindow


@dataclass(frozen=True)
class Shown:
    kind: str  # "dock" | "plot" | "transcript" | "readout" | "status"
    name: str
    width: int
    height: int
    text: str = ""


def layout_report(window: MainWindow) -> list[Shown]:
    """The visible widgets that matter, docks first, then what is inside them and the panes."""
    shown = [Shown("dock", d.windowTitle(), d.width(), d.height()) for d in _visible_docks(window)]
    shown += _plots(window)
    for i, pane in enumerate(window.panes, 1):
        if pane.transcript.isVisible():
            shown.append(
                Shown("transcript", f"pane {i}", pane.transcript.viewport().width(), pane.transcript.viewport().height())
            )
        if pane.readout.isVisible():
            r = pane.readout
            shown.append(Shown("readout", f"pane {i}", r.width(), r.height(), r.shown_text()))
    status = window.status_label
    message = window.statusBar().currentMessage()
    shown.append(Shown("status", "engine", status.width(), status.height(), status.shown_text()))
    if message:
        shown.append(Shown("status", "message", window.statusBar().width(), window.statusBar().height(), message))
    return shown


def write_layout_report(window: MainWindow, path: str | Path) -> None:
    Path(path).write_text(json.dumps([asdict(s) for s in layout_report(window)], indent=1, ensure_ascii=False), encoding="utf-8")


def _visible_docks(window: MainWindow) -> list[QDockWidget]:
    """Docks on screen: shown and, when tabbed, the tab in front (a tab behind has no size of its own)."""
    return [d for d in window.findChildren(QDockWidget) if d.isVisible() and not d.visibleRegion().isEmpty()]


def _plots(window: MainWindow) -> list[Shown]:
    found = []
    for dock in _visible_docks(window):
        for view in dock.findChildren(pg.GraphicsView):
            if view.isVisible() and not view.viewport().visibleRegion().isEmpty():
                found += [_plot_shown(dock, box, title) for box, title in _drawing_areas(view)]
        for picture in dock.findChildren(CellPicture):  # painted by hand, not a pyqtgraph view
            if picture.isVisible():
                found.append(Shown("plot", f"{dock.windowTitle()}: cells", picture.width(), picture.height()))
    return found


def _drawing_areas(view: pg.GraphicsView) -> list[tuple[pg.ViewBox, str]]:
    """Each plot's own view box with the plot's title, and each bare view box (a map); not the extra
    view boxes a plot lays over its own (a right axis's)."""
    areas = []
    for item in view.scene().items():
        if isinstance(item, pg.PlotItem) and item.isVisible():
            areas.append((item.vb, QTextDocumentFragment.fromHtml(item.titleLabel.text).toPlainText()))
        elif isinstance(item, pg.ViewBox) and item.isVisible() and not _inside_plot(item):
            areas.append((item, item.name or "view"))
    return areas


def _inside_plot(item) -> bool:
    parent = item.parentItem()
    while parent is not None and not isinstance(parent, pg.PlotItem):
        parent = parent.parentItem()
    return parent is not None


def _plot_shown(dock: QDockWidget, box: pg.ViewBox, title: str) -> Shown:
    size = box.size()
    return Shown("plot", f"{dock.windowTitle()}: {title}", round(size.width()), round(size.height()))
