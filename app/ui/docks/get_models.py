"""The Model library's "Get models" tab: search the Hugging Face hub for GGUF repos, see a repo's files
(quant, size, whether it fits this machine's memory) and download one into the hub cache, with its
progress, speed and time left, and Cancel.

Every hub call runs on a worker thread (the loop's executor); its progress comes back through
loop.call_soon_threadsafe. A cancelled download leaves only huggingface_hub's partial blob, which is no
model file, and which the next download of that file resumes (after a restart too).
"""

from __future__ import annotations

import asyncio
import os
import threading
import time

from PySide6.QtCore import Qt, QTimer, Signal
from PySide6.QtWidgets import (
    QAbstractItemView,
    QHBoxLayout,
    QHeaderView,
    QLabel,
    QLineEdit,
    QProgressBar,
    QPushButton,
    QSizePolicy,
    QSplitter,
    QTableWidget,
    QTableWidgetItem,
    QVBoxLayout,
    QWidget,
)
from qasync import asyncSlot

from app.models import hub
from app.models.hub import HubError, HubModel, HubUnreachable, RepoHit
from app.ui import theme

from .model_library import format_size

REPO_COLUMNS = ("Repo", "Downloads", "Likes", "Updated")
FILE_COLUMNS = ("File", "Quant", "Size", "Fits")
FILE, FILE_QUANT, FILE_SIZE, FITS = range(len(FILE_COLUMNS))
SLOW_SEARCH_S = 3  # a search unanswered this long says it is still waiting
OFFLINE_ADVICE = "The models already on this machine are in the “On this machine” tab."
FIT_SHARE = 0.8  # a model fits when it takes less than this share of the memory available now
FIT_RULE = (
    f"Fits: the file takes less than {FIT_SHARE:.0%} of the memory available now. Tight: less than "
    f"{FIT_SHARE:.0%} of all memory, so other programs must give some back. No: more than that."
)


class DownloadCancelled(Exception):
    """Raised from the progress callback on the worker thread when Cancel is pressed."""


def machine_memory() -> tuple[int, int]:
    """(total, available) bytes of memory: /proc/meminfo where there is one, else sysconf."""
    try:
        with open("/proc/meminfo", encoding="ascii") as f:
            fields = {k: int(v.split()[0]) * 1024 for k, _, v in (line.partition(":") for line in f) if v.strip()}
        return fields["MemTotal"], fields.get("MemAvailable", fields.get("MemFree", 0))
    except (OSError, KeyError, ValueError):
        pass
    try:
        page = os.sysconf("SC_PAGE_SIZE")
        return os.sysconf("SC_PHYS_PAGES") * page, os.sysconf("SC_AVPHYS_PAGES") * page
    except (ValueError, OSError, AttributeError):
        return 0, 0


def fits(size: int | None, memory: tuple[int, int]) -> str:
    total, available = memory
    if size is None or not total:
        return "?"
    return "yes" if size < FIT_SHARE * available else "tight" if size < FIT_SHARE * total else "no"


def format_duration(seconds: float) -> str:
    seconds = int(seconds)
    return f"{seconds // 3600} h {seconds % 3600 // 60:02d} min" if seconds >= 3600 else f"{seconds // 60}:{seconds % 60:02d}"


class GetModels(QWidget):
    """Search, a repo's files, Download with progress and Cancel; sigDownloaded says a model arrived."""

    sigDownloaded = Signal(str)  # the downloaded model's path (a split model's first part)

    def __init__(self, parent=None):
        super().__init__(parent)
        self.hits: list[RepoHit] = []
        self.repo_id = ""
        self.models: list[HubModel] = []
        self.memory = (0, 0)
        self.downloading = False
        self._cancel = threading.Event()
        self._started = 0.0
        self._start_bytes = 0
        self._resumed_at = 0  # bytes an earlier run had left, when this one resumed them
        self._download_task: asyncio.Future | None = None
        self._search: asyncio.Future | None = None  # the search running, if any
        layout = QVBoxLayout(self)
        layout.setContentsMargins(6, 6, 6, 6)
        layout.addLayout(self._search_row())
        self.status = QLabel(wordWrap=True)
        self.status.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        self.status.setSizePolicy(QSizePolicy.Policy.Ignored, QSizePolicy.Policy.Preferred)
        layout.addWidget(self.status)
        splitter = QSplitter(Qt.Orientation.Horizontal)
        self.repo_table = _table(REPO_COLUMNS)
        self.repo_table.itemSelectionChanged.connect(self._on_repo_selected)
        self.file_table = _table(FILE_COLUMNS)
        self.file_table.itemSelectionChanged.connect(self._show_download_state)
        self.file_table.horizontalHeaderItem(FITS).setToolTip(FIT_RULE)
        splitter.addWidget(self.repo_table)
        splitter.addWidget(self.file_table)
        layout.addWidget(splitter, 1)
        layout.addLayout(self._download_row())
        self._show_download_state()

    def _search_row(self) -> QHBoxLayout:
        row = QHBoxLayout()
        self.search_field = QLineEdit(placeholderText="Search GGUF repos on Hugging Face, e.g. SmolLM2")
        self.search_field.returnPressed.connect(self.search)
        self.search_button = QPushButton("Search", clicked=self.search)
        row.addWidget(self.search_field, 1)
        row.addWidget(self.search_button)
        return row

    def _download_row(self) -> QHBoxLayout:
        row = QHBoxLayout()
        self.download_button = QPushButton("Download", clicked=self.download)
        self.cancel_button = QPushButton("Cancel", clicked=self.cancel)
        self.progress = QProgressBar()
        self.progress.setTextVisible(False)
        self.progress_label = QLabel()
        self.progress_label.setSizePolicy(QSizePolicy.Policy.Ignored, QSizePolicy.Policy.Preferred)
        row.addWidget(self.download_button)
        row.addWidget(self.progress, 1)
        row.addWidget(self.progress_label, 2)
        row.addWidget(self.cancel_button)
        return row

    # -- search and a repo's files ---------------------------------------------------------------

    @asyncSlot()
    async def search(self) -> None:
        """Search the hub; while it runs the button is Cancel, and after a few seconds without an
        answer the line says so (huggingface_hub retries a failed connection for about 20 s)."""
        if self._search is not None:
            self._search.cancel()
            return
        text = self.search_field.text().strip()
        if not text:
            return
        started = time.monotonic()
        self._say(f"Searching for {text}…")
        waiting = QTimer(self, interval=1000)
        waiting.timeout.connect(lambda: self._say_waiting(text, time.monotonic() - started))
        waiting.start()
        self.search_button.setText("Cancel")
        self._search = asyncio.get_running_loop().run_in_executor(None, hub.search, text, 50)
        try:
            hits = await self._search
        except asyncio.CancelledError:  # the thread's answer, when it comes, is dropped
            return self._say(f"Search for {text} cancelled")
        except HubUnreachable as e:
            return self._say_error(f"{e.reason[0].upper()}{e.reason[1:]}. {OFFLINE_ADVICE}")
        except HubError as e:
            return self._say_error(str(e))
        finally:
            waiting.stop()
            self._search = None
            self.search_button.setText("Search")
        self.show_hits(hits)
        self._say(f"{len(hits)} GGUF repo{'s' if len(hits) != 1 else ''} for “{text}”" if hits else f"No GGUF repo for “{text}”")

    def _say_waiting(self, text: str, seconds: float) -> None:
        if seconds >= SLOW_SEARCH_S:
            self._say(f"Searching for {text}… {seconds:.0f} s: the hub has not answered yet, retrying. Cancel stops waiting.")

    def show_hits(self, hits: list[RepoHit]) -> None:
        self.hits = hits
        self.repo_table.setRowCount(len(hits))
        for row, hit in enumerate(hits):
            updated = hit.last_modified.strftime("%Y-%m-%d") if hit.last_modified else ""
            for column, text in enumerate((hit.repo_id, f"{hit.downloads:,}", f"{hit.likes:,}", updated)):
                item = QTableWidgetItem(text)
                item.setToolTip(hit.repo_id)
                if column in (1, 2):
                    item.setTextAlignment(Qt.AlignmentFlag.AlignRight | Qt.AlignmentFlag.AlignVCenter)
                self.repo_table.setItem(row, column, item)

    def _on_repo_selected(self) -> None:
        rows = self.repo_table.selectionModel().selectedRows()
        if rows:
            self.list_files(self.hits[rows[0].row()].repo_id)

    @asyncSlot(str)
    async def list_files(self, repo_id: str) -> None:
        self.repo_id, self.models = repo_id, []
        self.file_table.setRowCount(0)
        self._say(f"Reading {repo_id}…")
        loop = asyncio.get_running_loop()
        try:
            models = await loop.run_in_executor(None, hub.list_models, repo_id)
            self.memory = await loop.run_in_executor(None, machine_memory)
        except HubError as e:
            return self._say_error(str(e))
        if repo_id != self.repo_id:
            return  # another repo was picked meanwhile
        self.show_models(models)
        total, available = self.memory
        self._say(
            f"{repo_id}: {len(models)} model{'s' if len(models) != 1 else ''} · this machine: "
            f"{format_size(available)} of {format_size(total)} memory free"
        )

    def show_models(self, models: list[HubModel]) -> None:
        self.models = models
        self.file_table.setRowCount(len(models))
        for row, model in enumerate(models):
            parts = f" ({len(model.files)} parts)" if len(model.files) > 1 else ""
            size = format_size(model.size) if model.size is not None else "?"
            cells = (model.name + parts, model.quant or "—", size, fits(model.size, self.memory))
            for column, text in enumerate(cells):
                item = QTableWidgetItem(text)
                item.setToolTip(FIT_RULE if column == FITS else model.name)
                if column == FILE_SIZE:
                    item.setTextAlignment(Qt.AlignmentFlag.AlignRight | Qt.AlignmentFlag.AlignVCenter)
                self.file_table.setItem(row, column, item)
        if models:
            self.file_table.selectRow(0)
        self._show_download_state()

    def row_of_file(self, quant: str) -> int:
        return next((row for row, m in enumerate(self.models) if m.quant == quant), -1)

    # -- download ------------------------------------------------------------------------------

    def chosen(self) -> HubModel | None:
        rows = self.file_table.selectionModel().selectedRows()
        return self.models[rows[0].row()] if rows and rows[0].row() < len(self.models) else None

    def _spec(self, model: HubModel) -> str:
        """`repo:quant` names one model only when no other of the repo has its quant."""
        same = [m for m in self.models if m.quant == model.quant]
        return f"{self.repo_id}:{model.quant}" if model.quant and same[0] == model else ""

    def _show_download_state(self) -> None:
        model = self.chosen()
        spec = self._spec(model) if model else ""
        self.download_button.setEnabled(bool(spec) and not self.downloading)
        self.cancel_button.setEnabled(self.downloading)
        if model and not spec:
            self.download_button.setToolTip(
                f"{model.name} shares its quant with another file: pull it with python -m app models pull"
            )
        else:
            self.download_button.setToolTip(f"Download {model.name} into the Hugging Face cache" if model else "")

    def download(self) -> None:
        """Start the chosen file's download; the buttons say so at once, the bytes come on a worker thread."""
        model = self.chosen()
        if self.downloading or model is None or not self._spec(model):
            return
        self.downloading = True
        self._cancel.clear()
        self._started, self._start_bytes = time.monotonic(), -1
        self.progress.setRange(0, 0)  # busy until the first bytes say how far
        self.progress_label.setText(f"Starting {model.name}…")
        self._show_download_state()
        self._say(f"Downloading {model.name} from {self.repo_id}…")
        self._download_task = asyncio.ensure_future(self._download(model, self._spec(model)))

    async def _download(self, model: HubModel, spec: str) -> None:
        loop = asyncio.get_running_loop()

        def on_bytes(done: int, total: int | None) -> None:  # on the worker thread
            if self._cancel.is_set():
                raise DownloadCancelled
            loop.call_soon_threadsafe(self.show_progress, done, total)

        try:
            path = await loop.run_in_executor(None, lambda: hub.pull(spec, on_bytes=on_bytes))
        except DownloadCancelled:
            self._say(f"Cancelled {model.name}: Download again goes on from where it stopped")
        except HubError as e:
            self._say_error(str(e))
        else:
            self._say(f"Downloaded {model.name}: it is in “On this machine”, ready to load")
            self.sigDownloaded.emit(path)
        finally:
            self.downloading = False
            self.progress.setRange(0, 100)
            if self.progress.value() < 100:
                self.progress.reset()
            self.progress_label.setText("")
            self._show_download_state()

    def show_progress(self, done: int, total: int | None) -> None:
        if not self.downloading:
            return
        now = time.monotonic()
        if self._start_bytes < 0:  # the first report: a resumed download starts here, not at 0
            self._started, self._start_bytes, self._resumed_at = now, done, done
        elapsed = now - self._started
        speed = (done - self._start_bytes) / elapsed if elapsed > 0.2 else 0.0
        text = format_size(done)
        if total:
            self.progress.setRange(0, 1000)
            self.progress.setValue(int(1000 * min(done, total) / total))
            text += f" of {format_size(total)}"
        if self._resumed_at:
            text += f" · resumed at {format_size(self._resumed_at)}"
        if speed:
            text += f" · {format_size(speed)}/s"
            if total and done < total:
                text += f" · {format_duration((total - done) / speed)} left"
        self.progress_label.setText(text)

    def cancel(self) -> None:
        if self.downloading:
            self._cancel.set()
            self.progress_label.setText("Cancelling…")

    # -- words -----------------------------------------------------------------------------------

    def _say(self, text: str) -> None:
        self.status.setStyleSheet("")
        self.status.setText(text)
        self.status.setToolTip(text)

    def _say_error(self, text: str) -> None:
        self._say(text)
        self.status.setStyleSheet(f"color: {theme.current().error.name()};")


def _table(columns: tuple[str, ...]) -> QTableWidget:
    table = QTableWidget(0, len(columns))
    table.setHorizontalHeaderLabels(columns)
    table.verticalHeader().hide()
    table.setEditTriggers(QAbstractItemView.EditTrigger.NoEditTriggers)
    table.setSelectionBehavior(QAbstractItemView.SelectionBehavior.SelectRows)
    table.setSelectionMode(QAbstractItemView.SelectionMode.SingleSelection)
    table.setWordWrap(False)
    table.setTextElideMode(Qt.TextElideMode.ElideMiddle)
    table.setAlternatingRowColors(True)
    header = table.horizontalHeader()
    header.setSectionResizeMode(QHeaderView.ResizeMode.ResizeToContents)
    header.setSectionResizeMode(0, QHeaderView.ResizeMode.Stretch)
    return table
