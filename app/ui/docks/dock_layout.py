"""The window's docks: a group of tabs a side, each side's share of the window, and docks opened by name.

Stacked, the docks of one side halved each other: five plots, the step timeline and the KV map left
each other a few pixels on a 1366x768 screen. As tabs, opening one brings it to the front instead.
"""

from __future__ import annotations

from PySide6.QtCore import Qt, QTimer
from PySide6.QtWidgets import QDockWidget, QMainWindow

Area, Orientation = Qt.DockWidgetArea, Qt.Orientation
# the most of the window's width (a side) or height (the bottom) a side's docks take as one is shown
SHARES = {Area.LeftDockWidgetArea: 0.24, Area.RightDockWidgetArea: 0.3, Area.BottomDockWidgetArea: 0.25}


def in_front(dock: QDockWidget) -> bool:
    """Shown in the window, and not a tab behind another."""
    return dock.isVisible() and not dock.isFloating() and not dock.visibleRegion().isEmpty()


class DockLayout:
    """`groups`: the docks of each side, its first tab first. Showing a dock from its toggle action
    brings it to the front of its tabs and holds its side to its share."""

    def __init__(self, window: QMainWindow, groups: tuple[tuple[QDockWidget, ...], ...]):
        self.window, self.groups = window, groups
        for first, *others in groups:
            for dock in others:
                window.tabifyDockWidget(first, dock)
            first.raise_()
        for dock in self.docks:
            dock.toggleViewAction().triggered.connect(lambda shown, dock=dock: shown and self.bring_forward(dock))

    @property
    def docks(self) -> list[QDockWidget]:
        return [dock for group in self.groups for dock in group]

    def bring_forward(self, dock: QDockWidget) -> None:
        dock.raise_()
        QTimer.singleShot(0, self.fit)  # once the dock is laid out in its place

    def fit(self) -> None:
        """Each side's docks no wider, and the bottom's no taller, than their share of the window (a
        panel's preferred width, a table's rows would take the panes' room), or their least size where
        that is more."""
        w = self.window
        for area, share in SHARES.items():
            shown = next((d for d in self.docks if w.dockWidgetArea(d) == area and in_front(d)), None)
            across = Orientation.Vertical if area == Area.BottomDockWidgetArea else Orientation.Horizontal
            horizontal = across == Orientation.Horizontal
            most = int((w.width() if horizontal else w.height()) * share)
            if shown is not None and (shown.width() if horizontal else shown.height()) > most:
                w.resizeDocks([shown], [most], across)  # one of a tab group: the group takes its size

    def show(self, names: list[str]) -> None:
        """Open the docks named by their titles (any case), or every one for "all" (each group's
        first tab in front); the first named of a group is in front of its tabs."""
        by_title = {dock.windowTitle().lower(): dock for dock in self.docks}
        unknown = [name for name in names if name.lower() not in by_title and name.lower() != "all"]
        if unknown:
            known = ", ".join(d.windowTitle() for d in self.docks)
            raise SystemExit(f"error: no dock {', '.join(map(repr, unknown))}; one of: all, {known}")
        everything = any(name.lower() == "all" for name in names)
        chosen = self.docks if everything else [by_title[name.lower()] for name in names]
        for dock in reversed(chosen):
            dock.show()
            dock.raise_()
        QTimer.singleShot(0, self.fit)  # once the docks are laid out in their places

    def show_bottom(self, dock: QDockWidget, share: float = SHARES[Area.BottomDockWidgetArea]) -> None:
        """Show a bottom dock in front of its tabs, `share` of the window's height, so the panes keep the rest."""
        dock.show()
        dock.raise_()
        height = int(self.window.height() * share)
        QTimer.singleShot(0, lambda: self.window.resizeDocks([dock], [height], Orientation.Vertical))
