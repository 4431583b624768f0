"""The panes' grid: as many columns as the width leaves each pane room for, rows of a height a
pane stays usable in, and a scroll bar rather than crushed panes when docks take the room."""

from __future__ import annotations

import math

from PySide6.QtCore import QEvent, QObject
from PySide6.QtWidgets import QFrame, QGridLayout, QScrollArea, QWidget

from app.workspace.workspace import MAX_PANES

# a pane narrower than this wraps its words letter by letter and loses its readout; lower than this,
# its transcript shows two lines (measured at 1366x768 with the docks open)
MIN_PANE_WIDTH = 230
MIN_PANE_HEIGHT = 190
SPACING = 6


def grid_columns(n: int, width: int | None = None) -> int:
    """1 pane: one column; up to 4: two; more: two rows; fewer where `width` is too narrow for them."""
    wanted = 1 if n == 1 else 2 if n <= 4 else math.ceil(n / 2)
    if width is None:
        return wanted
    fits = max(1, (width + SPACING) // (MIN_PANE_WIDTH + SPACING))
    return max(1, min(wanted, fits))


class PaneGrid(QScrollArea):
    """Lays `panes` out in a grid; `relayout()` after a pane comes or goes. A resize that changes how
    many columns fit lays them out again; one that does not touches nothing."""

    def __init__(self, parent=None):
        super().__init__(parent)
        self.panes: list[QWidget] = []
        self.setWidgetResizable(True)
        self.setFrameShape(QFrame.Shape.NoFrame)
        self.inner = QWidget()
        self.grid = QGridLayout(self.inner)
        self.grid.setContentsMargins(0, 0, 0, 0)
        self.grid.setSpacing(SPACING)
        self.setWidget(self.inner)
        self.columns = 0
        self.viewport().installEventFilter(self)

    def set_panes(self, panes: list[QWidget]) -> None:
        self.panes = panes
        self.relayout()

    def relayout(self) -> None:
        for pane in self.panes:
            self.grid.removeWidget(pane)
        cols = self.columns = grid_columns(len(self.panes), self.viewport().width())
        for i, pane in enumerate(self.panes):
            self.grid.addWidget(pane, i // cols, i % cols)
        for c in range(MAX_PANES):
            self.grid.setColumnStretch(c, 1 if c < cols else 0)
        rows = math.ceil(len(self.panes) / cols) if self.panes else 1
        self.inner.setMinimumHeight(rows * MIN_PANE_HEIGHT + (rows - 1) * SPACING)

    def eventFilter(self, watched: QObject, event: QEvent) -> bool:
        resized = watched is self.viewport() and event.type() == QEvent.Type.Resize
        if resized and grid_columns(len(self.panes), self.viewport().width()) != self.columns:
            self.relayout()
        return super().eventFilter(watched, event)
