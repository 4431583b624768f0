"""The window's actions as data: each toolbar and menu entry declared once (`Action`: its id, title,
shortcut, tooltip, the window's method it runs, where it shows), the table `ACTIONS` the window reads
to build its toolbar and menu bar; and the About box, which names the keys of this table."""

from __future__ import annotations

import html
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path

from PySide6.QtCore import Qt
from PySide6.QtGui import QAction, QKeySequence
from PySide6.QtWidgets import QDockWidget, QMenuBar, QMessageBox, QToolBar, QWidget

from app.client import EngineClient

TOOLBAR = "toolbar"
MENUS = ("&File", "&View", "&Compare", "&Engine", "&Help")  # the menu bar, left to right

Place = tuple[str, str]  # (TOOLBAR or a menu's title, the group within it: groups are split by a separator)


@dataclass(frozen=True)
class Action:
    """One entry of the toolbar and menus. Where `run` is empty the entry is a dock's own Show/Hide
    action (checkable, kept in step with the dock by Qt), and `title` names the dock."""

    id: str
    title: str
    run: str = ""  # the name of the window's method a trigger calls
    shortcut: str | QKeySequence.StandardKey = ""
    tooltip: str = ""  # none: Qt shows the title
    shows_in: tuple[Place, ...] = ()


_DOCK = ((TOOLBAR, "views"), ("&View", "docks"))  # a dock's Show/Hide: on the toolbar and in View
_COMPARE = ((TOOLBAR, "views"), ("&Compare", "compare"))

ACTIONS = (
    Action("pane.add", "Add pane", "add_pane", QKeySequence.StandardKey.New, shows_in=((TOOLBAR, "panes"), ("&File", "panes"))),
    Action("pane.remove_last", "Remove last pane", "remove_last_pane", shows_in=((TOOLBAR, "panes"), ("&File", "panes"))),
    Action(
        "file.save_trace",
        "Save trace…",
        "save_trace",
        tooltip="The recent engine steps and requests as a Chrome trace (Perfetto, chrome://tracing)",
        shows_in=(("&File", "trace"),),
    ),
    Action("app.quit", "Quit", "close", QKeySequence.StandardKey.Quit, shows_in=(("&File", "quit"),)),
    Action("dock.chats", "Chats", shortcut="Ctrl+1", shows_in=_DOCK),
    Action("dock.engine", "Engine", shortcut="Ctrl+2", shows_in=_DOCK),
    Action("dock.plots", "Live plots", shortcut="Ctrl+3", shows_in=_DOCK),
    Action("dock.benchmark", "Benchmark", shortcut="Ctrl+4", shows_in=_DOCK),
    Action("dock.library", "Model library", shortcut="Ctrl+5", shows_in=_DOCK),
    Action("dock.kv_cells", "KV cells", shortcut="Ctrl+Shift+K", shows_in=_DOCK),
    Action("dock.timeline", "Step timeline", shortcut="Ctrl+Shift+T", shows_in=_DOCK),
    Action("broadcast.focus", "Broadcast field", "focus_broadcast", "Ctrl+L", shows_in=(("&View", "focus"),)),
    Action(
        "compare.fan_out",
        "Fan out…",
        "ask_fan_out",
        "Ctrl+Shift+F",
        "One prompt, one setting over several values: a pane each, side by side",
        _COMPARE,
    ),
    Action(
        "compare.show_batching",
        "Show batching",
        "run_batching_demo",
        "Ctrl+Shift+B",
        "One prompt to every pane three times: served one at a time, in static batches, continuously; the timelines side by side",
        _COMPARE,
    ),
    Action("dock.batching", "Batching compared", shows_in=(("&Compare", "compare"),)),
    Action("dock.compare", "Compare", shortcut="Ctrl+6", shows_in=(("&Compare", "compare"),)),
    Action("engine.stop_all", "Stop all replies", "stop_all", "Ctrl+.", shows_in=(("&Engine", "engine"),)),
    Action("engine.restart", "Restart engine", "restart_engine", shows_in=(("&Engine", "engine"),)),
    Action("help.about", "About", "show_about", shows_in=(("&Help", "help"),)),
)


def make_actions(
    parent: QWidget, slot: Callable[[str], Callable], docks: Mapping[str, QDockWidget], table: tuple[Action, ...] = ACTIONS
) -> dict[str, QAction]:
    """Each action of `table` by its id: a new QAction calling `slot(run)`, or the dock's own (`docks`: by title)."""
    made = {}
    for spec in table:
        if spec.run:
            action = QAction(spec.title, parent)
            action.triggered.connect(slot(spec.run))
        else:
            action = docks[spec.title].toggleViewAction()
        if spec.shortcut:
            action.setShortcut(QKeySequence(spec.shortcut))
        if spec.tooltip:
            action.setToolTip(spec.tooltip)
        made[spec.id] = action
    return made


def place_actions(
    toolbar: QToolBar, menu_bar: QMenuBar, actions: Mapping[str, QAction], table: tuple[Action, ...] = ACTIONS
) -> None:
    """The toolbar and the menus filled in the table's order, a separator between two groups."""
    bars: dict[str, QToolBar | QMenuBar] = {TOOLBAR: toolbar} | {title: menu_bar.addMenu(title) for title in MENUS}
    last_group: dict[str, str] = {}
    for spec in table:
        for where, group in spec.shows_in:
            if last_group.setdefault(where, group) != group:
                bars[where].addSeparator()
                last_group[where] = group
            bars[where].addAction(actions[spec.id])


def about_box(parent: QWidget, client: EngineClient) -> None:
    info = client.model_info
    model = Path(client.config.model_path).name
    box = QMessageBox(QMessageBox.Icon.Information, "About Batch playground", "", parent=parent)
    box.setText(
        "<b>Batch playground</b><br>Several chat panes on one batching llama.cpp engine, "
        "with live figures of what batching and KV-cache reuse buy.<br><br>"
        f"Model: {html.escape(model)}" + (f" ({info.n_params / 1e6:.0f}M parameters)" if info else "") + "<br>"
        "Keys: Enter sends, Shift+Enter starts a line, Escape stops a reply, Ctrl+N adds a pane, "
        "Ctrl+L goes to the broadcast field, Ctrl+. stops all, Ctrl+Shift+F fans out a prompt, "
        "Ctrl+1 to 6 show the docks, Ctrl+Shift+T the step timeline, Ctrl+Shift+K the KV cells; "
        "Ctrl+Shift+B shows batching."
    )
    box.setAttribute(Qt.WidgetAttribute.WA_DeleteOnClose)
    box.setWindowModality(Qt.WindowModality.NonModal)  # the panes stream on behind it
    box.show()
