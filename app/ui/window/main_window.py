"""The main window: a grid of chat panes, a broadcast bar, the chat list, the plots and the engine
panel in docks, and a banner when the engine has stopped.

It draws the Workspace (app/workspace: the panes' life, the chats, what is saved) and forwards what
the user does to it; one 10 Hz timer samples the metrics, moves the plots and refreshes every pane's readout. While the
window is minimized nothing is drawn (the metrics are still sampled and the text kept): the engine
gets the CPU, and restoring the window catches up at once.

Its parts beside it, each given only what it needs: actions.py (the table of the toolbar's and
menus' entries, which the window reads), status_line.py, loaded_models.py, engine_recovery.py (the
banner's Restart), closing.py and trace_file.py.
"""

from __future__ import annotations

import time
from pathlib import Path

from PySide6.QtCore import QElapsedTimer, QEvent, Qt, QTimer, Signal
from PySide6.QtGui import QAction, QCloseEvent
from PySide6.QtWidgets import (
    QDockWidget,
    QFrame,
    QHBoxLayout,
    QLineEdit,
    QMainWindow,
    QMessageBox,
    QPushButton,
    QScrollArea,
    QTabWidget,
    QVBoxLayout,
    QWidget,
)
from qasync import asyncSlot

from app.client import EngineClient
from app.engine.params import SpecType
from app.models.library import ModelFinder
from app.server.server import ApiServer
from app.ui.dialogs import confirm, export_with_dialog
from app.ui.docks.batching_demo import DEMO_PROMPT, BatchingComparison, show_batching
from app.ui.docks.benchmark import BenchmarkPanel
from app.ui.docks.chat_list import ChatList, ChatRow
from app.ui.docks.compare_view import Compared, CompareView
from app.ui.docks.dock_layout import DockLayout, in_front
from app.ui.docks.engine_panel import EnginePanel
from app.ui.docks.get_models import GetModels
from app.ui.docks.kv_map import KVMapPanel
from app.ui.docks.model_library import ModelLibrary
from app.ui.docks.plots import PlotsPanel
from app.ui.docks.step_timeline import StepTimeline
from app.ui.pane.chat_pane import ChatPane
from app.ui.settings import WINDOW_STATE_VERSION, AppSettings
from app.workspace.chat_store import ChatStore
from app.workspace.metrics import RATE_WINDOW_S, MetricsStore
from app.workspace.presets import PresetBook
from app.workspace.session import Branch, PaneSession
from app.workspace.source import Sources
from app.workspace.workspace import Workspace

from .actions import about_box, make_actions, place_actions
from .closing import WindowClosing
from .engine_banner import EngineBanner
from .engine_recovery import EngineRecovery
from .fan_out import FanOutDialog, Sweep
from .loaded_models import LoadedModels, model_paths
from .pane_grid import PaneGrid
from .placement import place_window
from .serve_control import ServeControl
from .status_line import LayoutWatch, add_status_widgets, engine_status, show_save_state
from .trace_file import ask_and_save, panes_trace

TICK_MS = 100
FLUSH_MS = 40  # streamed text is shown as it arrives, 25 times a second at most
READOUT_EVERY_TICKS = 3  # the panes' and the status bar's figures, about three times a second
RESULT_SHARE = 0.4  # of the window's height for Show batching's result: the three timelines are what the demo was for
SAVE_RETRY_TICKS = 50  # chats that could not be saved are tried again every 5 s
API_KEY = "API"  # the metrics and plots entry of requests served over HTTP
API_COLOUR = "#555555"


def scrolled(widget: QWidget) -> QScrollArea:
    """`widget` in a frameless scroll area that gives it the whole width and scrolls what does not fit."""
    area = QScrollArea(widgetResizable=True, frameShape=QFrame.Shape.NoFrame)
    area.setWidget(widget)
    return area


class MainWindow(QMainWindow):
    sigClosed = Signal()  # after every reply was cancelled and the engine closed

    def __init__(self, client: EngineClient, store: ChatStore, settings: AppSettings, pane_count: int | None = None):
        super().__init__()
        self.client, self.store, self.settings = client, store, settings
        self.metrics = MetricsStore()
        self.presets = PresetBook(settings)  # every pane's ⚙ picks from them; kept in the settings file
        self.workspace = Workspace(Sources(client, self.metrics.on_events), store, settings, self.metrics, client.config.capacity)
        self.api_server = ApiServer(client, on_request=lambda request_id, t: self.metrics.track(request_id, API_KEY, t))
        self.panes: list[ChatPane] = []  # the workspace's sessions' views, in its order
        self.closing = WindowClosing(self, self.shut_down, self.sigClosed.emit)
        self.close_box: QMessageBox | None = None  # the last "Close pane" question
        self.fan_out_dialog: FanOutDialog | None = None  # the last one opened
        self._docks: dict[str, QDockWidget] = {}  # by title, for the actions table
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
        self.models.show_title()
        self.workspace.completion = self.models.is_base_model
        self.workspace.restore(pane_count)
        place_window(self, self.settings.geometry)
        # the docks as they were left; an empty state, or one of an older layout: the defaults
        self.restoreState(self.settings.window_state, WINDOW_STATE_VERSION)
        self.models.suit_blank_panes()
        self.chat_list.show_rows([ChatRow.of(chat, is_open) for chat, is_open in self.workspace.listed_chats()])
        if client.failure:
            self.recovery.on_failed(client.failure)
        self.tick_timer = QTimer(self, interval=TICK_MS, timeout=self.tick)
        self.tick_timer.start()

    # -- layout --------------------------------------------------------------------------------

    def _build(self) -> None:
        central = QWidget()
        layout = QVBoxLayout(central)
        layout.setContentsMargins(6, 6, 6, 6)
        self.banner = EngineBanner()
        layout.addWidget(self.banner)
        layout.addLayout(self._broadcast_bar())
        self.pane_grid = PaneGrid()
        layout.addWidget(self.pane_grid, 1)
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
        self.engine_panel.template_for = self.settings.chat_template_for
        self.engine_panel.sigConfigApplied.connect(self._on_config_applied)
        self.engine_panel.sigLiveChanged.connect(self.settings.set_engine_config)
        self.engine_dock = self._dock("Engine", self.engine_panel, Qt.DockWidgetArea.LeftDockWidgetArea)
        self.engine_dock.hide()
        self.benchmark_panel = BenchmarkPanel(lambda: self.client.config.model_path)
        # its form, chart and table scroll in a short dock, rather than set the window's least height
        self.bench_dock = self._dock("Benchmark", scrolled(self.benchmark_panel), Qt.DockWidgetArea.RightDockWidgetArea)
        self.bench_dock.hide()
        self.library = ModelLibrary(ModelFinder(), self.settings, loaded=model_paths(self.client))
        self.models = LoadedModels(self.client, self.workspace, self.panes, self.plots, self.library, self.settings, self)
        self.library.sigLoad.connect(self.models.load)
        self.library.sigUnload.connect(self.models.unload)
        self.get_models = GetModels()
        self.get_models.sigDownloaded.connect(lambda _path: self.library.rescan())
        self.library_tabs = QTabWidget(documentMode=True)
        self.library_tabs.addTab(self.library, "On this machine")
        self.library_tabs.addTab(self.get_models, "Get models")
        self.library_dock = self._dock("Model library", scrolled(self.library_tabs), Qt.DockWidgetArea.BottomDockWidgetArea)
        self.library_dock.hide()
        self.compare_view = CompareView()
        self.compare_view.sigExported.connect(self._show_exported)
        self.compare_dock = self._dock("Compare", self.compare_view, Qt.DockWidgetArea.BottomDockWidgetArea)
        self.compare_dock.hide()
        self.kv_map = KVMapPanel(self.client, self._pane_labels)
        self.kv_map_dock = self._dock("KV cells", self.kv_map, Qt.DockWidgetArea.RightDockWidgetArea)
        self.kv_map_dock.hide()
        self.timeline = StepTimeline(self.client.recent_steps, self.pane_names)
        self.timeline_dock = self._dock("Step timeline", self.timeline, Qt.DockWidgetArea.RightDockWidgetArea)
        self.timeline_dock.hide()
        self.batching = BatchingComparison()
        self.batching.sigRunsShown.connect(lambda: self.docks.show_bottom(self.batching_dock, RESULT_SHARE))
        self.batching_dock = self._dock("Batching compared", self.batching, Qt.DockWidgetArea.BottomDockWidgetArea)
        self.batching_dock.hide()
        self.docks = DockLayout(
            self,
            (
                (self.plots_dock, self.timeline_dock, self.kv_map_dock, self.bench_dock),
                (self.chats_dock, self.engine_dock),
                (self.compare_dock, self.batching_dock, self.library_dock),
            ),
        )
        self.status_label, self.save_warning = add_status_widgets(self.statusBar())
        self.layout_watch = LayoutWatch(self.client, self.statusBar())
        self.recovery = EngineRecovery(self.client, self.banner, self.engine_panel, self.statusBar())
        self.serve_control = ServeControl(self.api_server, self.settings.serve_address, self.settings.serve_api_key)
        self.serve_control.sigServing.connect(self._on_serving)
        self._actions = make_actions(self, lambda name: getattr(self, name), self._docks)
        toolbar = self.addToolBar("Main")
        toolbar.setObjectName("main-toolbar")
        place_actions(toolbar, self.menuBar(), self._actions)
        toolbar.addSeparator()
        toolbar.addWidget(self.serve_control)

    def action(self, action_id: str) -> QAction:
        """The toolbar's or a menu's entry of that id (actions.py's table)."""
        return self._actions[action_id]

    # -- what the actions run, beside the panes' and docks' own ------------------------------------

    @asyncSlot()
    async def run_batching_demo(self) -> None:
        action = self.action("compare.show_batching")
        action.setEnabled(False)  # one demo at a time
        try:
            prompt = self.broadcast_edit.text().strip() or DEMO_PROMPT
            await show_batching(self.client, self.workspace, self.batching, self.statusBar(), prompt)
        finally:
            action.setEnabled(True)

    def save_trace(self) -> None:
        requests = (stats for _pane, stats in self.metrics.finished)
        ask_and_save(self, panes_trace(self.pane_names(), requests, self.client.recent_steps()))

    def focus_broadcast(self) -> None:
        self.broadcast_edit.setFocus(Qt.FocusReason.ShortcutFocusReason)

    def restart_engine(self) -> None:
        self.recovery.restart()

    def show_about(self) -> None:
        about_box(self, self.client)

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

    def pane_names(self) -> dict[str, tuple[str, str]]:
        """Each pane's chat key -> (its chat's name, its colour): the step timeline's and the trace's."""
        return {s.key: (s.chat.name, s.colour) for s in self.workspace.sessions}

    def _dock(self, title: str, widget: QWidget, area: Qt.DockWidgetArea) -> QDockWidget:
        dock = QDockWidget(title, self)
        dock.setObjectName(title)
        dock.setWidget(widget)
        self.addDockWidget(area, dock)
        self._docks[title] = dock
        return dock

    def _pane_labels(self) -> dict[str, tuple[str, str]]:
        """Each pane's chat key -> (its colour, "pane 2 “chat name”"): the KV cell map's legend."""

        def label(i: int, name: str) -> str:
            return f"pane {i}" if name.lower() == f"pane {i}" else f"pane {i} “{name}”"

        return {p.session.key: (p.session.colour, label(i, p.chat.name)) for i, p in enumerate(self.panes, 1)}

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
        ws.saved.connect(lambda: show_save_state(self.statusBar(), self.save_warning, ws.saves, self.store.folder))
        ws.said.connect(lambda text: self.statusBar().showMessage(text, 15000))
        ws.said_in_list.connect(self.chat_list.say)

    @property
    def engine_drafts(self) -> bool:
        """Whether the engine speculates (its --spec-type, and a model whose memory can take back
        rejected guesses), which a pane's Draft ahead depends on."""
        info = self.client.model_info
        return self.client.config.spec_type is not SpecType.NONE and not (info and info.drafts_refused)

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
        session.params_changed.connect(lambda _params: self.models.name_in_plots(session))
        session.chat_changed.connect(lambda _chat: self.models.name_in_plots(session))
        session.reply_ended.connect(lambda final: self.compare_view.finish(session.key, final, session.reply_logprobs))
        pane.sigCloseRequested.connect(self.ask_to_close_pane)
        pane.sigCopySettings.connect(lambda p: self.workspace.copy_settings(p.session))
        pane.sigPresetToAll.connect(self.workspace.apply_preset)
        pane.sigDraftChanged.connect(lambda p, text: self.workspace.set_draft(p.session, text))
        pane.sigExported.connect(self._show_exported)
        pane.sigBranch.connect(self.branch)
        if self.client.models:
            seeing = frozenset(name for name, info in self.client.models.items() if info.sees_images)
            pane.show_models(list(self.client.models), seeing)
        pane.show_engine_drafts(self.engine_drafts)
        pane.set_token_reader(self.client)
        pane.set_presets(self.presets)
        self.panes.insert(index, pane)
        self.plots.add_pane(session.key, session.colour, session.chat.name)
        self.models.name_in_plots(session)
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

    def remove_last_pane(self) -> None:
        if len(self.panes) > 1:
            self.ask_to_close_pane(self.panes[-1])

    def _relayout(self) -> None:
        self.pane_grid.set_panes(self.panes)
        self.action("pane.add").setEnabled(len(self.panes) < self.capacity)
        self.engine_panel.set_min_capacity(len(self.panes))

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
        self.docks.show_bottom(self.compare_dock)  # room for a few rows; the panes keep the height they stream in
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
        # closed docks, and tabs behind another, cost nothing: the engine gets the CPU
        if in_front(self.plots_dock):
            self.plots.refresh(now)
        if in_front(self.timeline_dock):
            self.timeline.refresh(now)
        if in_front(self.kv_map_dock):
            self.kv_map.refresh()
        if self._ticks % READOUT_EVERY_TICKS == 0:  # numbers that change ten times a second cannot be read
            self.refresh_readouts()

    def refresh_readouts(self) -> None:
        for pane in self.panes:
            pane.refresh_readout()
        s = self.client.snapshot
        if s is not None:
            self.status_label.setText(*engine_status(self.client.config.mode.label, s))
        self.layout_watch.check()  # a KV layout changed while chats ran: said once, in the status bar
        if in_front(self.engine_dock):
            self.engine_panel.refresh_layout()

    def changeEvent(self, event: QEvent) -> None:
        super().changeEvent(event)
        if event.type() == QEvent.Type.WindowStateChange and not self.isMinimized():
            self._flush_panes()  # restored: show what came while it was minimized
            self.tick()

    # -- engine reloads and restarts -----------------------------------------------------------

    def _on_config_applied(self, config) -> None:
        self.settings.set_engine_config(config)  # and the template file, kept for its model
        self.library.show_templates()
        for pane in self.panes:
            pane.show_engine_drafts(self.engine_drafts)
        self.workspace.set_capacity(self.client.config.capacity)
        self._relayout()
        self.models.show_title()
        self.show_models()
        self.models.suit_blank_panes()

    def show_models(self) -> None:
        """The loaded models everywhere they show (the panes' pickers, the library, the title), and
        kept for the next start."""
        self.models.show()

    # -- closing -------------------------------------------------------------------------------

    @property
    def is_closed(self) -> bool:
        return self.closing.is_closed

    def closeEvent(self, event: QCloseEvent) -> None:
        self.closing.on_close_event(event)

    async def shut_down(self) -> None:
        """Cancel every reply, save, and close the engine: the first close's work (closing.py)."""
        self.tick_timer.stop()
        self.benchmark_panel.cancel()
        self.settings.geometry = self.saveGeometry()
        self.settings.window_state = self.saveState(WINDOW_STATE_VERSION)
        self.settings.sync()
        await self.serve_control.stop()
        await self.workspace.shutdown()
        self.settings.sync()
        await self.client.close()  # also when the engine has stopped on its own
