"""The main window: a grid of chat panes, a broadcast bar, the chat list, the plots and the engine
panel in docks, and a banner when the engine has stopped.

It draws the Workspace (app/workspace: the panes' life, the chats, what is saved) and forwards what
the user does to it; one 10 Hz timer samples the metrics, moves the plots and refreshes every pane's readout. While the
window is minimized nothing is drawn (the metrics are still sampled and the text kept): the engine
gets the CPU, and restoring the window catches up at once.
"""

from __future__ import annotations

import asyncio
import html
import math
import os
import time
from pathlib import Path

from PySide6.QtCore import QElapsedTimer, QEvent, Qt, QTimer, Signal
from PySide6.QtGui import QAction, QCloseEvent, QKeySequence
from PySide6.QtWidgets import (
    QDockWidget,
    QGridLayout,
    QHBoxLayout,
    QLabel,
    QLineEdit,
    QMainWindow,
    QMessageBox,
    QPushButton,
    QSizePolicy,
    QVBoxLayout,
    QWidget,
)
from qasync import asyncSlot

from app.client import EngineClient
from app.engine.errors import EngineError
from app.engine.stats import EngineSnapshot
from app.models.library import ModelFinder
from app.server.server import ApiServer
from app.workspace.chat_store import ChatStore
from app.workspace.metrics import RATE_WINDOW_S, MetricsStore
from app.workspace.session import Branch, PaneSession
from app.workspace.source import Sources
from app.workspace.workspace import MAX_PANES, Workspace

from .benchmark_dock import BenchmarkPanel
from .chat_list import ChatList, ChatRow
from .chat_pane import ChatPane
from .compare_view import Compared, CompareView
from .dialogs import confirm, export_with_dialog
from .engine_banner import EngineBanner
from .engine_panel import EnginePanel
from .fan_out import FanOutDialog, Sweep
from .model_library import ModelLibrary
from .plots import PlotsPanel
from .readout import Readout
from .serve_control import ServeControl
from .settings import AppSettings
from .window_placement import place_window

TICK_MS = 100
FLUSH_MS = 40  # streamed text is shown as it arrives, 25 times a second at most
READOUT_EVERY_TICKS = 3  # the panes' and the status bar's figures, about three times a second
COMPARE_HEIGHT = 200  # px: the compare dock's first height
SAVE_RETRY_TICKS = 50  # chats that could not be saved are tried again every 5 s
API_KEY = "API"  # the metrics and plots entry of requests served over HTTP
API_COLOUR = "#555555"


def short_name(name: str, chars: int = 16) -> str:
    """A model's name within `chars`, its start and its end kept (where sizes and quantizations are)."""
    if len(name) <= chars:
        return name
    tail = chars // 2
    return f"{name[: chars - tail - 1]}…{name[-tail:]}"


def grid_columns(n: int) -> int:
    """1 pane: one column; up to 4: two; more: two rows."""
    return 1 if n == 1 else 2 if n <= 4 else math.ceil(n / 2)


class MainWindow(QMainWindow):
    sigClosed = Signal()  # after every reply was cancelled and the engine closed

    def __init__(self, client: EngineClient, store: ChatStore, settings: AppSettings, pane_count: int | None = None):
        super().__init__()
        self.client, self.store, self.settings = client, store, settings
        self.metrics = MetricsStore()
        self.workspace = Workspace(Sources(client, self.metrics.on_events), store, settings, self.metrics, client.config.capacity)
        self.api_server = ApiServer(client, on_request=lambda request_id, t: self.metrics.track(request_id, API_KEY, t))
        self.panes: list[ChatPane] = []  # the workspace's sessions' views, in its order
        self._closing: asyncio.Task | None = None  # the shutdown, once the window is asked to close
        self._closed = False
        self.close_box: QMessageBox | None = None  # the last "Close pane" question
        self.fan_out_dialog: FanOutDialog | None = None  # the last one opened
        client.add_failure_listener(self._on_engine_failed)
        # one flush shows every pane's new text, so streaming panes are painted in one pass. It runs
        # when text arrives, not on a clock of its own: the engine's steps (a token for every pane)
        # are further apart than FLUSH_MS, so text is shown at once and the GUI thread wakes no more
        # often than the engine makes it.
        self._flush_timer = QTimer(self, singleShot=True, timeout=self._flush_panes)
        self._since_flush = QElapsedTimer()
        self._since_flush.start()
        self._ticks = 0
        self._build()
        self._observe(self.workspace)
        self._show_title()
        self.workspace.completion = self._is_base_model
        self.workspace.restore(pane_count)
        place_window(self, self.settings.geometry)
        self.restoreState(self.settings.window_state)  # the docks as they were left (an empty state: the defaults)
        self._suit_blank_panes_to_model()
        self.chat_list.show_rows([ChatRow.of(chat, is_open) for chat, is_open in self.workspace.listed_chats()])
        if client.failure:
            self._on_engine_failed(client.failure)
        self._timer = QTimer(self, interval=TICK_MS, timeout=self.tick)
        self._timer.start()

    # -- layout --------------------------------------------------------------------------------

    def _build(self) -> None:
        central = QWidget()
        layout = QVBoxLayout(central)
        layout.setContentsMargins(6, 6, 6, 6)
        self.banner = EngineBanner()
        self.banner.sigRestart.connect(self.restart_engine)
        layout.addWidget(self.banner)
        layout.addLayout(self._broadcast_bar())
        self.grid = QGridLayout()
        self.grid.setSpacing(6)
        layout.addLayout(self.grid, 1)
        self.setCentralWidget(central)
        self.chat_list = ChatList()
        self.chat_list.sigOpen.connect(self.open_chat)
        self.chat_list.sigRename.connect(lambda chat_id, name: self.workspace.rename_chat(chat_id, name))
        self.chat_list.sigDelete.connect(self.delete_chat)
        self.chat_list.sigExport.connect(self.export_chat)
        self.chats_dock = self._dock("Chats", self.chat_list, Qt.DockWidgetArea.LeftDockWidgetArea)
        self.chats_dock.hide()
        self.plots = PlotsPanel(self.metrics)
        self.plots_dock = self._dock("Live plots", self.plots, Qt.DockWidgetArea.RightDockWidgetArea)
        self.plots.setMinimumWidth(320)
        self.engine_panel = EnginePanel(self.client)
        self.engine_panel.sigConfigApplied.connect(self._on_config_applied)
        self.engine_panel.sigLiveChanged.connect(self.settings.set_engine_config)
        self.engine_dock = self._dock("Engine", self.engine_panel, Qt.DockWidgetArea.LeftDockWidgetArea)
        self.engine_dock.hide()
        self.benchmark_panel = BenchmarkPanel(lambda: self.client.config.model_path)
        self.bench_dock = self._dock("Benchmark", self.benchmark_panel, Qt.DockWidgetArea.RightDockWidgetArea)
        self.tabifyDockWidget(self.plots_dock, self.bench_dock)
        self.plots_dock.raise_()
        self.bench_dock.hide()
        self.library = ModelLibrary(ModelFinder(), self.settings, loaded=self._model_paths())
        self.library.sigLoad.connect(self.load_model)
        self.library.sigUnload.connect(self.unload_model)
        self.library_dock = self._dock("Model library", self.library, Qt.DockWidgetArea.BottomDockWidgetArea)
        self.library_dock.hide()
        self.compare_view = CompareView()
        self.compare_view.sigExported.connect(self._show_exported)
        self.compare_dock = self._dock("Compare", self.compare_view, Qt.DockWidgetArea.BottomDockWidgetArea)
        self.compare_dock.hide()
        self._build_toolbar()
        self._build_menus()
        self.status_label = Readout(muted=False, pixel_size=12)
        self.status_label.setMinimumWidth(560)
        self.status_label.setSizePolicy(QSizePolicy.Policy.Preferred, QSizePolicy.Policy.Fixed)
        self.save_warning = QLabel()
        self.save_warning.setStyleSheet("color: white; background: #b00020; padding: 1px 6px;")
        self.save_warning.hide()
        self.statusBar().addPermanentWidget(self.save_warning)
        self.statusBar().addPermanentWidget(self.status_label)

    def _broadcast_bar(self) -> QHBoxLayout:
        row = QHBoxLayout()
        self.broadcast_edit = QLineEdit(placeholderText="Broadcast: one message to every pane at once")
        self.broadcast_edit.returnPressed.connect(self._on_broadcast)
        self.broadcast_edit.setText(self.settings.broadcast_draft)
        self.broadcast_edit.textChanged.connect(self._keep_broadcast_draft)
        row.addWidget(self.broadcast_edit, 1)
        row.addWidget(QPushButton("Send to all", clicked=self._on_broadcast))
        row.addWidget(QPushButton("Stop all", clicked=self.stop_all))
        return row

    def _keep_broadcast_draft(self, text: str) -> None:
        self.settings.broadcast_draft = text  # as typed: a crash keeps it too

    def _dock(self, title: str, widget: QWidget, area: Qt.DockWidgetArea) -> QDockWidget:
        dock = QDockWidget(title, self)
        dock.setObjectName(title)
        dock.setWidget(widget)
        self.addDockWidget(area, dock)
        return dock

    def _build_toolbar(self) -> None:
        bar = self.addToolBar("Main")
        bar.setObjectName("main-toolbar")
        self.add_action = QAction("Add pane", self, triggered=self.add_pane)
        bar.addAction(self.add_action)
        self.remove_action = QAction("Remove last pane", self, triggered=self._on_remove_last)
        bar.addAction(self.remove_action)
        bar.addSeparator()
        bar.addAction(self.chats_dock.toggleViewAction())
        bar.addAction(self.engine_dock.toggleViewAction())
        bar.addAction(self.plots_dock.toggleViewAction())
        bar.addAction(self.bench_dock.toggleViewAction())
        bar.addAction(self.library_dock.toggleViewAction())
        self.fan_out_action = QAction("Fan out…", self, triggered=self.ask_fan_out)
        self.fan_out_action.setToolTip("One prompt, one setting over several values: a pane each, side by side")
        bar.addAction(self.fan_out_action)
        # shown from the toolbar, a dock tabbed behind the plots comes to the front
        for dock in (self.plots_dock, self.bench_dock):
            dock.toggleViewAction().triggered.connect(lambda shown, d=dock: shown and d.raise_())
        bar.addSeparator()
        self.serve_control = ServeControl(self.api_server, self.settings.serve_address, self.settings.serve_api_key)
        self.serve_control.sigServing.connect(self._on_serving)
        bar.addWidget(self.serve_control)

    def _build_menus(self) -> None:
        """The menu bar, and the shortcuts people expect of a chat app."""
        menus = self.menuBar()
        file = menus.addMenu("&File")
        self.add_action.setShortcut(QKeySequence.StandardKey.New)
        file.addAction(self.add_action)
        file.addAction(self.remove_action)
        file.addSeparator()
        file.addAction(QAction("Quit", self, shortcut=QKeySequence.StandardKey.Quit, triggered=self.close))
        view = menus.addMenu("&View")
        docks = (self.chats_dock, self.engine_dock, self.plots_dock, self.bench_dock, self.library_dock)
        for n, dock in enumerate(docks, 1):
            dock.toggleViewAction().setShortcut(QKeySequence(f"Ctrl+{n}"))
            view.addAction(dock.toggleViewAction())
        view.addSeparator()
        focus = QAction("Broadcast field", self, shortcut=QKeySequence("Ctrl+L"))
        focus.triggered.connect(lambda: self.broadcast_edit.setFocus(Qt.FocusReason.ShortcutFocusReason))
        view.addAction(focus)
        compare = menus.addMenu("&Compare")
        self.fan_out_action.setShortcut(QKeySequence("Ctrl+Shift+F"))
        compare.addAction(self.fan_out_action)
        self.compare_dock.toggleViewAction().setShortcut(QKeySequence("Ctrl+6"))
        compare.addAction(self.compare_dock.toggleViewAction())
        engine = menus.addMenu("&Engine")
        engine.addAction(QAction("Stop all replies", self, shortcut=QKeySequence("Ctrl+."), triggered=self.stop_all))
        engine.addAction(QAction("Restart engine", self, triggered=self.restart_engine))
        help_menu = menus.addMenu("&Help")
        self.about_action = QAction("About", self, triggered=self._show_about)
        help_menu.addAction(self.about_action)

    def _show_about(self) -> None:
        info = self.client.model_info
        model = Path(self.client.config.model_path).name
        box = QMessageBox(QMessageBox.Icon.Information, "About Batch playground", "", parent=self)
        box.setText(
            "<b>Batch playground</b><br>Several chat panes on one batching llama.cpp engine, "
            "with live figures of what batching and KV-cache reuse buy.<br><br>"
            f"Model: {html.escape(model)}" + (f" ({info.n_params / 1e6:.0f}M parameters)" if info else "") + "<br>"
            "Keys: Enter sends, Shift+Enter starts a line, Escape stops a reply, Ctrl+N adds a pane, "
            "Ctrl+L goes to the broadcast field, Ctrl+. stops all, Ctrl+Shift+F fans out a prompt, "
            "Ctrl+1 to 6 show the docks."
        )
        box.setAttribute(Qt.WidgetAttribute.WA_DeleteOnClose)
        box.setWindowModality(Qt.WindowModality.NonModal)  # the panes stream on behind it
        box.show()

    def _on_serving(self, serving: bool) -> None:
        """Requests from outside get their own curves while the server runs."""
        if serving:
            self.settings.serve_address = self.serve_control.address_edit.text()
            self.settings.serve_api_key = self.serve_control.key_edit.text()
            self.metrics.add_pane(API_KEY)
            self.plots.add_pane(API_KEY, API_COLOUR, "API")
        else:
            self.plots.remove_pane(API_KEY)
            self.metrics.remove_pane(API_KEY)

    # -- panes: views of the workspace's sessions ----------------------------------------------

    def _observe(self, ws: Workspace) -> None:
        ws.pane_added.connect(self._on_pane_added)
        ws.pane_removed.connect(self._on_pane_removed)
        ws.chat_listed.connect(lambda chat, is_open: self.chat_list.update_row(ChatRow.of(chat, is_open)))
        ws.chat_unlisted.connect(self.chat_list.remove_row)
        ws.saved.connect(self._show_save_state)
        ws.said.connect(lambda text: self.statusBar().showMessage(text, 15000))
        ws.said_in_list.connect(self.chat_list.say)

    @property
    def capacity(self) -> int:
        return self.workspace.capacity

    def add_pane(self) -> ChatPane | None:
        """A new pane with a new chat, at the end; None when there is no room."""
        session = self.workspace.add_pane()
        return self.pane_of(session) if session is not None else None

    def pane_of(self, session: PaneSession) -> ChatPane:
        return next(p for p in self.panes if p.session is session)

    def _on_pane_added(self, session: PaneSession, index: int) -> None:
        pane = ChatPane(session)
        session.text_received.connect(self._request_flush)
        session.params_changed.connect(lambda _params: self._name_in_plots(session))
        session.chat_changed.connect(lambda _chat: self._name_in_plots(session))
        session.reply_ended.connect(lambda final: self.compare_view.finish(session.key, final, session.reply_logprobs))
        pane.sigCloseRequested.connect(self.ask_to_close_pane)
        pane.sigCopySettings.connect(lambda p: self.workspace.copy_settings(p.session))
        pane.sigDraftChanged.connect(lambda p, text: self.workspace.set_draft(p.session, text))
        pane.sigExported.connect(self._show_exported)
        pane.sigBranch.connect(self.branch)
        if self.client.models:
            pane.show_models(list(self.client.models))
        self.panes.insert(index, pane)
        self.plots.add_pane(session.key, session.colour, session.chat.name)
        self._name_in_plots(session)
        self._relayout()

    def _on_pane_removed(self, session: PaneSession) -> None:
        pane = self.pane_of(session)
        self.panes.remove(pane)
        self.plots.remove_pane(session.key)
        pane.deleteLater()
        self._relayout()

    def ask_to_close_pane(self, pane: ChatPane) -> None:
        """Close a pane after a Yes; at once when it is blank, as nothing is taken from view."""
        if pane.session.is_blank:
            self.close_pane(pane)
            return
        reply = " Its reply stops." if pane.is_busy else ""
        if pane.chat.messages:
            kept = "The chat stays in the Chats list, where it can be opened again."
        else:
            kept = "The message you typed and did not send is dropped."
        text = f"Close “{pane.chat.name}”?{reply} {kept}"
        self.close_box = confirm(self, "Close pane", text, lambda: self.close_pane(pane))

    @asyncSlot(object)
    async def close_pane(self, pane: ChatPane) -> None:
        """Stop the pane's reply, then remove the pane; its chat stays in the chat list."""
        await self.workspace.close_pane(pane.session)

    def _on_remove_last(self) -> None:
        if len(self.panes) > 1:
            self.ask_to_close_pane(self.panes[-1])

    def _relayout(self) -> None:
        for pane in self.panes:
            self.grid.removeWidget(pane)
        cols = grid_columns(len(self.panes))
        for i, pane in enumerate(self.panes):
            self.grid.addWidget(pane, i // cols, i % cols)
        for c in range(MAX_PANES):
            self.grid.setColumnStretch(c, 1 if c < cols else 0)
        self.add_action.setEnabled(len(self.panes) < self.capacity)
        self.engine_panel.set_min_capacity(len(self.panes))

    # -- saving --------------------------------------------------------------------------------

    def _show_save_state(self) -> None:
        """A failing save is told once, in the status bar, until a save works again; a repaired text, in a message."""
        saves = self.workspace.saves
        if saves.repaired:
            names = ", ".join(f"“{chat.name}”" for chat in saves.repaired)
            self.statusBar().showMessage(f"The text of {names} was repaired to be saved: broken characters became �.", 20000)
        error = saves.failure
        if error is None:
            self.save_warning.hide()
        elif self.save_warning.isHidden():
            self.save_warning.setText(f"Chats cannot be saved: {error.strerror or error}. They are kept and saved when possible.")
            self.save_warning.setToolTip(f"{self.store.folder}\n{error}")
            self.save_warning.show()

    # -- the chat list -------------------------------------------------------------------------

    @asyncSlot(str)
    async def open_chat(self, chat_id: str) -> None:
        """Show a saved chat in a free pane (idle, no messages, nothing typed), else in a new pane if the capacity allows."""
        session = await self.workspace.open_chat(chat_id)
        if session is not None:
            self.pane_of(session).input.setFocus()

    @asyncSlot(str)
    async def delete_chat(self, chat_id: str) -> None:
        """Delete a chat (the user confirmed); a pane that showed it gets a new empty chat."""
        await self.workspace.delete_chat(chat_id)

    def export_chat(self, chat_id: str) -> None:
        chat = self.workspace.chat_of(chat_id)
        if chat is not None and (written := export_with_dialog(self.chat_list, chat)) is not None:
            self._show_exported(written)

    def _show_exported(self, path: Path) -> None:
        self.statusBar().showMessage(f"Exported to {path.name}", 10000)

    # -- branches, fan out and compare ---------------------------------------------------------

    @asyncSlot(object, object)
    async def branch(self, source: ChatPane, branch: Branch) -> ChatPane | None:
        """A new chat in a free pane that goes on from another token of `source`'s reply."""
        session = await self.workspace.branch(source.session, branch)
        return self.pane_of(session) if session is not None else None

    def ask_fan_out(self) -> FanOutDialog:
        """The fan-out dialog, on the settings and text of the pane in focus (or the first)."""
        source = next((p for p in self.panes if p.isAncestorOf(self.focusWidget())), self.panes[0])
        prompt = source.input.toPlainText() or self.broadcast_edit.text()
        dialog = FanOutDialog(source.params, prompt, self.capacity, tuple(self.client.models), parent=self)
        dialog.sigStart.connect(self.fan_out)
        dialog.setAttribute(Qt.WidgetAttribute.WA_DeleteOnClose)
        dialog.open()
        self.fan_out_dialog = dialog
        return dialog

    def fan_out(self, sweep: Sweep) -> list[ChatPane]:
        """A pane for each value, all sent in one go; the compare view follows their replies."""
        variants = [(sweep.label_for(v), sweep.params_for(v)) for v in sweep.values]
        sessions = self.workspace.fan_out(sweep.prompt, variants)
        if not sessions:
            return []
        rows = [Compared(s.key, name) for s, (name, _params) in zip(sessions, variants)]
        self.compare_view.start(f"{sweep.prompt[:80]} · {sweep.setting.label} over {len(sessions)} panes", rows)
        if self.compare_dock.isHidden():  # room for a few rows; the panes keep the height they stream in
            self.compare_dock.show()
            self.resizeDocks([self.compare_dock], [COMPARE_HEIGHT], Qt.Orientation.Vertical)
        self.compare_dock.raise_()
        return [self.pane_of(s) for s in sessions]

    # -- broadcast and stop --------------------------------------------------------------------

    def _on_broadcast(self) -> None:
        text = self.broadcast_edit.text()
        if self.workspace.broadcast(text):
            self.broadcast_edit.clear()
        elif text.strip():  # it stays in the field, to send once a pane is free
            self.statusBar().showMessage("Every pane is busy: nothing was sent. Stop a reply, or send when one ends.", 10000)

    def stop_all(self) -> None:
        self.workspace.stop_all()

    # -- streamed text and the 10 Hz tick ------------------------------------------------------

    def _request_flush(self) -> None:
        # a 0 ms timer fires after the wake-ups already queued: the other panes' tokens of this step
        if not self._flush_timer.isActive():
            self._flush_timer.start(max(0, FLUSH_MS - self._since_flush.elapsed()))

    def _flush_panes(self) -> None:
        if self.isMinimized():
            return  # the text waits in the panes until the window is restored
        self._since_flush.restart()
        for pane in self.panes:
            pane.flush()

    def tick(self) -> None:
        now = time.monotonic()
        self.metrics.sample(now, self.client.recent_steps(RATE_WINDOW_S))
        self._ticks += 1
        if self._ticks % SAVE_RETRY_TICKS == 0:
            self.workspace.retry_saves()
        if self.isMinimized():
            return
        if self.plots_dock.isVisible():  # closed plots cost nothing: the engine gets the CPU
            self.plots.refresh(now)
        if self._ticks % READOUT_EVERY_TICKS == 0:  # numbers that change ten times a second cannot be read
            self.refresh_readouts()

    def refresh_readouts(self) -> None:
        for pane in self.panes:
            pane.refresh_readout()
        s = self.client.snapshot
        if s is not None:
            self.status_label.setText(engine_status(self.client.config.mode.value, s))

    def changeEvent(self, event: QEvent) -> None:
        super().changeEvent(event)
        if event.type() == QEvent.Type.WindowStateChange and not self.isMinimized():
            self._flush_panes()  # restored: show what came while it was minimized
            self.tick()

    # -- engine reloads and restarts -----------------------------------------------------------

    def _on_config_applied(self, config) -> None:
        self.settings.set_engine_config(config)
        self.workspace.set_capacity(self.client.config.capacity)
        self._relayout()
        self._show_title()
        self.show_models()
        self._suit_blank_panes_to_model()

    @property
    def _is_base_model(self) -> bool:
        info = self.client.model_info
        return info is not None and not info.has_chat_template

    def _suit_blank_panes_to_model(self) -> None:
        """Blank panes follow the model: completion mode for a base model (⚙ switches a pane)."""
        completion = self._is_base_model
        self.workspace.suit_blank_panes(completion)
        if completion:
            self.statusBar().showMessage(
                f"{Path(self.client.config.model_path).name} has no chat template (a base model): new panes continue "
                "text (completion mode); ⚙ switches a pane to chat.",
                20000,
            )

    @asyncSlot(str)
    async def load_model(self, path: str) -> None:
        """The library's Load: the model beside those loaded, with the first one's settings; the
        panes pick it in their header. One that cannot be loaded is said in the library."""
        try:
            name = await self.client.load_model(self.client.config.with_(model_path=path))
        except (EngineError, ValueError) as e:  # a bad file, a name taken, no memory for it
            self.library.set_loaded(self._model_paths(), str(e))
            return
        self.show_models()
        self.statusBar().showMessage(f"Loaded {name}: pick it in a pane's header.", 10000)

    @asyncSlot(str)
    async def unload_model(self, path: str) -> None:
        """The library's Unload: its panes' replies end with a notice, and they go on with the first model."""
        name = next((n for n, info in self.client.models.items() if os.path.realpath(info.path) == os.path.realpath(path)), None)
        if name is None:
            return
        try:
            await self.client.unload_model(name)
        except (EngineError, ValueError) as e:  # the last model: nothing would be left to chat with
            self.statusBar().showMessage(f"{name} stays loaded: {e}", 10000)
            return
        self.show_models()
        self.statusBar().showMessage(f"Unloaded {name}.", 10000)

    def _name_in_plots(self, session: PaneSession) -> None:
        """The pane's name in the plots' legend, with its model's when more than one is loaded."""
        models = self.client.models
        name = session.chat.name
        if len(models) >= 2 and session.params.endpoint() is None:
            name = f"{name} · {short_name(session.model or next(iter(models)))}"
        self.plots.name_pane(session.key, name)

    def _model_paths(self) -> list[str]:
        return [info.path for info in self.client.models.values()]

    def show_models(self) -> None:
        """The loaded models everywhere they show (the panes' pickers, the library, the title), and
        kept for the next start."""
        names = list(self.client.models)
        if not names:  # the engine thread has stopped: nothing changed
            return
        for pane in self.panes:
            pane.show_models(names)
            self._name_in_plots(pane.session)
        self.library.set_loaded(self._model_paths())
        self.settings.extra_models = self._model_paths()[1:]
        self._show_title()

    def _show_title(self) -> None:
        """The window's title names the models the local panes talk to."""
        names = list(self.client.models) or [Path(self.client.config.model_path).stem]
        self.setWindowTitle(f"{' + '.join(names)} · Batch playground")

    def _on_engine_failed(self, reason: str) -> None:
        """The engine thread ended on its own; every stream has already ended with the reason."""
        self.banner.show_failure(reason)

    @asyncSlot()
    async def restart_engine(self) -> None:
        """A fresh engine on the same configuration; the panes keep their chats (their next turn
        reads the whole chat again, as the old engine's cache is gone)."""
        self.banner.show_restarting()
        try:
            await self.client.restart()
        except (EngineError, OSError, ValueError) as e:
            self.banner.show_restart_failed(str(e))
            return
        self.banner.hide()
        self.engine_panel.show_model_facts()
        self.statusBar().showMessage("The engine was restarted.", 10000)

    # -- closing -------------------------------------------------------------------------------

    async def shutdown(self) -> None:
        """Cancel every reply, save, and close the engine."""
        self._timer.stop()
        self.benchmark_panel.cancel()
        self.settings.geometry = self.saveGeometry()
        self.settings.window_state = self.saveState()
        self.settings.sync()
        await self.serve_control.stop()
        await self.workspace.shutdown()
        self.settings.sync()
        await self.client.close()  # also when the engine has stopped on its own

    @property
    def is_closed(self) -> bool:
        return self._closed

    def closeEvent(self, event: QCloseEvent) -> None:
        # the first close only starts the async shutdown; its end closes the window for real
        if self._closed:
            event.accept()
            return
        event.ignore()
        if self._closing is None:
            self._closing = asyncio.ensure_future(self._close_async())  # kept: a task without a reference may be collected

    async def _close_async(self) -> None:
        try:
            await self.shutdown()
        finally:
            self._closed = True
            self.close()
            self.sigClosed.emit()


def engine_status(mode: str, s: EngineSnapshot) -> str:
    """The status bar's line: what runs and waits, the pool, and the RAM tier once it was used."""
    text = (
        f"{mode} · running {s.running - s.paused}{f' · paused {s.paused}' if s.paused else ''} · waiting {s.waiting} · "
        f"KV cells {s.cells_used}/{s.cells_total} · evictions {s.evictions}"
    )
    if s.recomputed_tokens:  # what a larger pool (or the RAM tier) would not have paid
        text += f" · recomputed {s.recomputed_tokens} tokens"
    if s.saves:
        text += f" · in RAM {s.saved_entries} ({s.saved_bytes / 2**20:.0f} MiB), {s.restores} restored"
    return f"{text} · steps {s.steps}"
