"""The model library: the GGUF models in the folders the user adds, in other local tools' model
folders and the bundled one, each with its facts read from its header (not its weights), and Load.

The scan runs on a worker thread; a file that cannot be a model gets a row that says why.
"""

from __future__ import annotations

import asyncio
import os
from html import escape

from PySide6.QtCore import Qt, Signal
from PySide6.QtGui import QFont, QShowEvent
from PySide6.QtWidgets import (
    QAbstractItemView,
    QFileDialog,
    QHBoxLayout,
    QHeaderView,
    QLabel,
    QMenu,
    QPushButton,
    QSizePolicy,
    QTableWidget,
    QTableWidgetItem,
    QToolButton,
    QVBoxLayout,
    QWidget,
)
from qasync import asyncSlot

from app.default_model import default_model_path
from app.engine.model_file import find_projector
from app.models.library import ADDED, BUNDLED, ModelEntry, ModelFinder, ModelFolder, Scan, tool_folders
from app.ui import theme
from app.ui.settings import AppSettings

COLUMNS = ("Model", "Found in", "Architecture", "Parameters", "Quantization", "Size", "Context", "Chat template", "")
NAME, SOURCE, ARCH, PARAMS, QUANT, SIZE, CONTEXT, TEMPLATE, LOAD = range(len(COLUMNS))
SOURCE_WIDTH = 320  # at most: a hub repo's long name is elided in the middle; the whole path is in the tooltip


def format_size(n: int) -> str:
    return f"{n / 1e9:.1f} GB" if n >= 1e9 else f"{n / 1e6:.0f} MB" if n >= 1e6 else f"{n / 1e3:.0f} kB"


class ModelLibrary(QWidget):
    """Lists the models; Load asks the window to load one beside those loaded (sigLoad), Unload to free
    one (sigUnload)."""

    sigLoad = Signal(str)  # the model file's path (a split model's first part)
    sigUnload = Signal(str)  # a loaded model's path

    def __init__(self, finder: ModelFinder, settings: AppSettings, loaded: tuple[str, ...] = (), parent=None):
        super().__init__(parent)
        self.finder, self.settings = finder, settings
        self.loaded = _real_paths(loaded)  # the models loaded now
        self.loading = ""  # the path being loaded, while it is
        self.entries: tuple[ModelEntry, ...] = ()
        self.scan_result: Scan | None = None
        self.pick_folder = self._ask_folder  # tests set a function that returns a folder
        self._scan_task: asyncio.Future | None = None
        self._scan_again = False
        layout = QVBoxLayout(self)
        layout.setContentsMargins(6, 6, 6, 6)
        layout.addLayout(self._buttons())
        self.table = QTableWidget(0, len(COLUMNS))
        self.table.setHorizontalHeaderLabels(COLUMNS)
        self.table.verticalHeader().hide()
        self.table.setEditTriggers(QAbstractItemView.EditTrigger.NoEditTriggers)
        self.table.setSelectionBehavior(QAbstractItemView.SelectionBehavior.SelectRows)
        self.table.setWordWrap(False)
        self.table.setTextElideMode(Qt.TextElideMode.ElideMiddle)
        header = self.table.horizontalHeader()
        header.setSectionResizeMode(QHeaderView.ResizeMode.ResizeToContents)
        header.setSectionResizeMode(NAME, QHeaderView.ResizeMode.Stretch)  # what is left; elided in the middle
        header.setSectionResizeMode(SOURCE, QHeaderView.ResizeMode.Interactive)
        header.setMinimumSectionSize(48)
        self.table.setAlternatingRowColors(True)
        layout.addWidget(self.table, 1)
        self._show_folders()

    def _buttons(self) -> QHBoxLayout:
        row = QHBoxLayout()
        self.add_button = QPushButton("Add folder…", clicked=self.add_folder)
        self.add_button.setToolTip("List the GGUF models in a folder (and its subfolders)")
        self.remove_button = QToolButton(text="Remove folder")
        self.remove_button.setPopupMode(QToolButton.ToolButtonPopupMode.InstantPopup)
        self.remove_menu = QMenu(self.remove_button)
        self.remove_button.setMenu(self.remove_menu)
        self.rescan_button = QPushButton("Rescan", clicked=self.rescan)
        self.status = QLabel()
        self.status.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        # a long status (paths) must not widen the dock: what does not fit is in its tooltip
        self.status.setSizePolicy(QSizePolicy.Policy.Ignored, QSizePolicy.Policy.Preferred)
        for widget in (self.add_button, self.remove_button, self.rescan_button):
            row.addWidget(widget)
        row.addWidget(self.status, 1)
        return row

    # -- folders -------------------------------------------------------------------------------

    def folders(self) -> list[ModelFolder]:
        """The bundled model, the folders added (in order), then the other tools' folders."""
        try:
            bundled = [ModelFolder(default_model_path(), BUNDLED)]
        except FileNotFoundError:
            bundled = []
        return bundled + [ModelFolder(f, ADDED) for f in self.settings.library_folders] + tool_folders()

    def _ask_folder(self) -> str:
        start = (self.settings.library_folders or [os.path.expanduser("~")])[-1]
        return QFileDialog.getExistingDirectory(self, "Add a folder of GGUF models", start)

    def add_folder(self) -> None:
        folder = self.pick_folder()
        if not folder:
            return
        folder = os.path.abspath(folder)
        if folder not in self.settings.library_folders:
            self.settings.library_folders = [*self.settings.library_folders, folder]
        self._show_folders()
        self.rescan()

    def remove_folder(self, folder: str) -> None:
        self.settings.library_folders = [f for f in self.settings.library_folders if f != folder]
        self._show_folders()
        self.rescan()

    def _show_folders(self) -> None:
        self.remove_menu.clear()
        for folder in self.settings.library_folders:
            self.remove_menu.addAction(folder, lambda f=folder: self.remove_folder(f))
        self.remove_button.setEnabled(bool(self.settings.library_folders))

    # -- scanning ------------------------------------------------------------------------------

    def showEvent(self, event: QShowEvent) -> None:
        super().showEvent(event)
        if self.scan_result is None and self._scan_task is None:
            self.rescan()  # the first time the dock is shown: not at start-up, when the engine loads

    @asyncSlot()
    async def rescan(self) -> None:
        """Scan every folder on a worker thread; a rescan asked for meanwhile runs after it."""
        if self._scan_task is not None:
            self._scan_again = True
            return
        self._say("Scanning…")
        self.rescan_button.setEnabled(False)
        try:
            while True:
                self._scan_again = False
                self._scan_task = asyncio.get_running_loop().run_in_executor(None, self.finder.scan, self.folders())
                self.show_scan(await self._scan_task)
                if not self._scan_again:
                    break
        finally:
            self._scan_task = None
            self.rescan_button.setEnabled(True)

    def show_scan(self, scan: Scan) -> None:
        self.scan_result, self.entries = scan, scan.entries
        self.table.setRowCount(0)
        self.table.clearSpans()
        self.table.setRowCount(len(scan.entries))
        for row, entry in enumerate(scan.entries):
            self._fill_row(row, entry)
        self.table.resizeColumnToContents(SOURCE)
        self.table.setColumnWidth(SOURCE, min(self.table.columnWidth(SOURCE), SOURCE_WIDTH))
        self._show_status()

    def _show_status(self) -> None:
        scan = self.scan_result
        if scan is None:
            return
        usable = sum(e.loadable for e in scan.entries)
        text = f"{usable} model{'s' if usable != 1 else ''}"
        if len(scan.entries) > usable:
            text += f", {len(scan.entries) - usable} that cannot be loaded"
        text += f" · {scan.files} file{'s' if scan.files != 1 else ''} read in {scan.seconds:.2f} s"
        if scan.cut_short:
            text += f" · stopped early in {', '.join(scan.cut_short)} (too many folders)"
        if scan.missing:
            text += f" · not found: {', '.join(scan.missing)}"
        self._say(text)

    def _say(self, text: str) -> None:
        self.status.setText(text)
        self.status.setToolTip(text)

    # -- rows ----------------------------------------------------------------------------------

    def _fill_row(self, row: int, entry: ModelEntry) -> None:
        meta = entry.meta
        source = entry.source if entry.source != ADDED else os.path.basename(os.path.dirname(entry.path)) or entry.path
        if entry.repo:
            source = f"{entry.source}: {entry.repo}"
        cells = {NAME: entry.name, SOURCE: source}
        if entry.problem:  # its facts are in the tooltip; the row says why it cannot be loaded
            cells[ARCH] = entry.problem
        else:
            projector = find_projector(entry.path)
            cells |= {
                ARCH: f"{meta.architecture} · sees images" if projector else meta.architecture,
                PARAMS: entry.params_label,
                QUANT: meta.quantization,
                SIZE: format_size(entry.size_bytes),
                CONTEXT: f"{meta.context_length:,}" if meta.context_length else "?",
                TEMPLATE: self._template_text(entry),
            }
        tooltip = self._tooltip(entry)
        for column, text in cells.items():
            item = QTableWidgetItem(text)
            item.setToolTip(tooltip)
            if column in (PARAMS, SIZE, CONTEXT):
                item.setTextAlignment(Qt.AlignmentFlag.AlignRight | Qt.AlignmentFlag.AlignVCenter)
            self.table.setItem(row, column, item)
        colours = theme.current()
        if entry.problem:
            self.table.setSpan(row, ARCH, 1, TEMPLATE - ARCH + 1)
            self.table.item(row, ARCH).setForeground(colours.error if meta.error or entry.parts else colours.notice)
        elif not meta.has_chat_template:
            self.table.item(row, TEMPLATE).setForeground(colours.notice)
        button = QPushButton("Load")
        button.clicked.connect(lambda _=False, path=entry.path: self._on_button(path))
        self.table.setCellWidget(row, LOAD, button)
        self._show_row_state(row, entry)

    def _template_text(self, entry: ModelEntry) -> str:
        """Its own template, none (a base model), or the file chosen for it in the Engine panel."""
        chosen = self.settings.chat_template_for(entry.path)
        if chosen:
            return f"{os.path.basename(chosen)} (instead of its own)"
        return "yes" if entry.meta.has_chat_template else "none: a base model"

    def show_templates(self) -> None:
        """The chat template column again (a template file was chosen for a model, or given up)."""
        for row, entry in enumerate(self.entries):
            item = self.table.item(row, TEMPLATE)
            if item is not None and not entry.problem:
                item.setText(self._template_text(entry))

    def _tooltip(self, entry: ModelEntry) -> str:
        meta = entry.meta
        lines = [f"<b>{escape(meta.name or entry.name)}</b>", escape(entry.path)]
        if entry.parts:
            lines.append(f"{len(entry.parts)} parts")
        if entry.problem and meta.architecture:
            facts = (meta.architecture, entry.params_label, meta.quantization, format_size(entry.size_bytes))
            lines.append(" · ".join(f for f in facts if f))
        if entry.problem:
            lines.append(f"<i>{escape(entry.problem)}</i>")
        elif not meta.has_chat_template:
            lines.append("No chat template: a base model, which continues text rather than chats.")
        projector = None if entry.problem else find_projector(entry.path)
        if projector:
            lines.append(f"Sees images: its projector {escape(os.path.basename(projector))}, beside it, loads with it.")
        if entry.n_params and meta.size_label:
            lines.append(f"{entry.n_params:,} parameters")
        return "<br>".join(lines)

    def _show_row_state(self, row: int, entry: ModelEntry) -> None:
        """Bold for a model loaded now, whose button unloads it (not the last one); no button works
        while a model loads."""
        is_loaded = os.path.realpath(entry.path) in self.loaded
        font = QFont(self.table.font())
        font.setBold(is_loaded)
        self.table.item(row, NAME).setFont(font)
        button: QPushButton = self.table.cellWidget(row, LOAD)
        is_loading = entry.path == self.loading
        button.setText("Loading…" if is_loading else "Unload" if is_loaded else "Load")
        button.setEnabled(entry.loadable and not self.loading and not (is_loaded and len(self.loaded) == 1))
        if not entry.loadable:
            button.setToolTip(entry.problem)
        elif is_loaded:
            button.setToolTip(f"Free {entry.name}: its panes' replies end, and they go on with another model")
        else:
            button.setToolTip(f"Load {entry.name} beside the models loaded: a pane picks it in its header")

    def _refresh_rows(self) -> None:
        for row, entry in enumerate(self.entries):
            self._show_row_state(row, entry)

    def _on_button(self, path: str) -> None:
        if self.loading:
            return
        if os.path.realpath(path) in self.loaded:
            self.sigUnload.emit(path)
        else:
            self.set_loading(path)  # at once: the click shows, and no second Load starts meanwhile
            self.sigLoad.emit(path)

    # -- the window tells -------------------------------------------------------------------------

    def set_loading(self, path: str) -> None:
        self.loading = path
        self._say(f"Loading {os.path.basename(path)}…")
        self._refresh_rows()

    def set_loaded(self, paths, error: str = "") -> None:
        """The models loaded now; `error`: why the one being loaded was not."""
        tried, self.loading, self.loaded = self.loading, "", _real_paths(paths)
        self._refresh_rows()
        if error:
            name = os.path.basename(tried)
            self._say(f'<span style="color:{theme.current().error.name()};">Not loaded: {escape(name)}: {escape(error)}</span>')
        else:
            self._show_status()

    def row_of(self, name: str) -> int:
        """The row of the model called `name` (its file name without .gguf); -1 when not listed."""
        return next((row for row, e in enumerate(self.entries) if e.name == name), -1)

    def load_button(self, name: str) -> QPushButton:
        return self.table.cellWidget(self.row_of(name), LOAD)


def _real_paths(paths) -> set[str]:
    return {os.path.realpath(p) for p in paths}
