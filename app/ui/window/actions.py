"""Where the window's actions show: the toolbar and the menu bar, the shortcuts people expect of a
chat app, and the About box."""

from __future__ import annotations

import html
from pathlib import Path
from typing import TYPE_CHECKING

from PySide6.QtCore import Qt
from PySide6.QtGui import QAction, QKeySequence
from PySide6.QtWidgets import QMessageBox, QWidget

from app.client import EngineClient

if TYPE_CHECKING:
    from .main_window import MainWindow


def build_toolbar(window: MainWindow) -> None:
    bar = window.addToolBar("Main")
    bar.setObjectName("main-toolbar")
    bar.addAction(window.add_action)
    bar.addAction(window.remove_action)
    bar.addSeparator()
    bar.addAction(window.chats_dock.toggleViewAction())
    bar.addAction(window.engine_dock.toggleViewAction())
    bar.addAction(window.plots_dock.toggleViewAction())
    bar.addAction(window.bench_dock.toggleViewAction())
    bar.addAction(window.library_dock.toggleViewAction())
    bar.addAction(window.kv_map_dock.toggleViewAction())
    bar.addAction(window.timeline_dock.toggleViewAction())
    bar.addAction(window.fan_out_action)
    bar.addAction(window.show_batching_action)
    bar.addSeparator()
    bar.addWidget(window.serve_control)


def build_menus(window: MainWindow) -> None:
    menus = window.menuBar()
    file = menus.addMenu("&File")
    window.add_action.setShortcut(QKeySequence.StandardKey.New)
    file.addAction(window.add_action)
    file.addAction(window.remove_action)
    file.addSeparator()
    file.addAction(window.save_trace_action)
    file.addSeparator()
    file.addAction(QAction("Quit", window, shortcut=QKeySequence.StandardKey.Quit, triggered=window.close))
    view = menus.addMenu("&View")
    docks = (window.chats_dock, window.engine_dock, window.plots_dock, window.bench_dock, window.library_dock)
    for n, dock in enumerate(docks, 1):
        dock.toggleViewAction().setShortcut(QKeySequence(f"Ctrl+{n}"))
        view.addAction(dock.toggleViewAction())
    window.kv_map_dock.toggleViewAction().setShortcut(QKeySequence("Ctrl+Shift+K"))
    view.addAction(window.kv_map_dock.toggleViewAction())
    window.timeline_dock.toggleViewAction().setShortcut(QKeySequence("Ctrl+Shift+T"))
    view.addAction(window.timeline_dock.toggleViewAction())
    view.addSeparator()
    focus = QAction("Broadcast field", window, shortcut=QKeySequence("Ctrl+L"))
    focus.triggered.connect(lambda: window.broadcast_edit.setFocus(Qt.FocusReason.ShortcutFocusReason))
    view.addAction(focus)
    compare = menus.addMenu("&Compare")
    window.fan_out_action.setShortcut(QKeySequence("Ctrl+Shift+F"))
    compare.addAction(window.fan_out_action)
    window.show_batching_action.setShortcut(QKeySequence("Ctrl+Shift+B"))
    compare.addAction(window.show_batching_action)
    compare.addAction(window.batching_dock.toggleViewAction())
    window.compare_dock.toggleViewAction().setShortcut(QKeySequence("Ctrl+6"))
    compare.addAction(window.compare_dock.toggleViewAction())
    engine = menus.addMenu("&Engine")
    engine.addAction(QAction("Stop all replies", window, shortcut=QKeySequence("Ctrl+."), triggered=window.stop_all))
    engine.addAction(QAction("Restart engine", window, triggered=window.recovery.restart))
    help_menu = menus.addMenu("&Help")
    help_menu.addAction(window.about_action)


def show_about(parent: QWidget, client: EngineClient) -> None:
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
