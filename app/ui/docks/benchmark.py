"""The in-app benchmark: the batching guide's comparison on the loaded model, as a bar chart and a table.

Every row is one `run_bench` (the code behind `python -m app bench --guide`): its own engine on
the same model file, so the chat engine's cells are left alone. Chatting meanwhile takes CPU from
the benchmark and skews its figures.
"""

from __future__ import annotations

import asyncio
import csv
import math
from pathlib import Path

import pyqtgraph as pg
from PySide6.QtCore import Signal
from PySide6.QtGui import QPalette, QPixmap
from PySide6.QtWidgets import (
    QCheckBox,
    QFileDialog,
    QFormLayout,
    QHBoxLayout,
    QHeaderView,
    QLabel,
    QLineEdit,
    QProgressBar,
    QPushButton,
    QSpinBox,
    QTableWidget,
    QTableWidgetItem,
    QVBoxLayout,
    QWidget,
)

from app.bench import BenchSettings, guide_rows, run_bench

SYSTEM_PROMPT_FILE = Path(__file__).resolve().parents[2] / "resources" / "bench" / "library-system-prompt.txt"
COLUMNS = (
    ("configuration", "Configuration", "{}"),
    ("parallel", "Parallel", "{}"),
    ("agg_tok_s", "Throughput tok/s", "{:.1f}"),
    ("avg_latency_ms", "Avg latency ms", "{:.0f}"),
    ("ttft_p50_s", "TTFT p50 s", "{:.2f}"),
    ("kv_hit_rate", "KV hit", "{:.0%}"),
    ("cpu_util", "CPU util", "{:.0%}"),
)
WHY = "Why"  # the last column: what makes the row's figure what it is, from the measured rows
BAR_COLOUR = "#3b7dd8"
QWIDGETSIZE_MAX = (1 << 24) - 1  # Qt's "no maximum size"


class BenchmarkPanel(QWidget):
    """Run / Cancel, a progress bar, the chart and the table; Export writes PNG and CSV."""

    sigFinished = Signal(str)  # "done", "cancelled" or the error

    def __init__(self, model_path, parent=None):
        super().__init__(parent)
        self._model_path = model_path  # a callable: the model loaded now
        self._task: asyncio.Task | None = None
        self.runs: list[dict] = []
        layout = QVBoxLayout(self)
        layout.addLayout(self._settings_form())
        layout.addLayout(self._controls())
        # the palette's colours: dark with a dark theme, and its text readable on it
        text = self.palette().color(QPalette.ColorRole.Text)
        self.chart = pg.PlotWidget(background=self.palette().color(QPalette.ColorRole.Base))
        self.chart.setTitle("Throughput (generated tokens/s)", color=text)
        for axis in ("left", "bottom"):
            self.chart.getAxis(axis).setTextPen(text)
        self.chart.setMouseEnabled(x=False, y=False)
        self.chart.hideButtons()
        self.chart.setMinimumHeight(180)
        self.chart.getAxis("bottom").setHeight(40)  # two short lines a label: the parallel count, the kind
        self.bars = pg.BarGraphItem(x=[], height=[], width=0.6, brush=BAR_COLOUR)
        self.chart.addItem(self.bars)
        layout.addWidget(self.chart, 1)
        self.table = QTableWidget(0, len(COLUMNS) + 1)
        self.table.setHorizontalHeaderLabels([title for _, title, _ in COLUMNS] + [WHY])
        self.table.horizontalHeader().setSectionResizeMode(QHeaderView.ResizeMode.ResizeToContents)
        self.table.verticalHeader().hide()
        layout.addWidget(self.table, 1)

    def _settings_form(self) -> QFormLayout:
        form = QFormLayout()
        self.parallel_counts = QLineEdit("4, 8, 16")
        self.parallel_counts.setToolTip("The first count is also run as a static batch, and without KV reuse")
        self.max_tokens = QSpinBox(minimum=4, maximum=1024, value=64)
        self.turns = QSpinBox(minimum=1, maximum=8, value=2)
        self.shared_system = QCheckBox("a shared 231-token system prompt")
        self.shared_system.setChecked(True)
        form.addRow("Parallel counts", self.parallel_counts)
        form.addRow("Tokens a reply", self.max_tokens)
        form.addRow("Turns a chat", self.turns)
        form.addRow("", self.shared_system)
        return form

    def _controls(self) -> QHBoxLayout:
        row = QHBoxLayout()
        self.run_button = QPushButton("Run", clicked=self.start)
        self.cancel_button = QPushButton("Cancel", clicked=self.cancel)
        self.export_button = QPushButton("Export PNG + CSV…", clicked=self._on_export)
        for button in (self.cancel_button, self.export_button):
            button.setEnabled(False)  # bool properties through setters, as everywhere (see chat_pane.py)
        self.progress = QProgressBar()
        self.status = QLabel()
        for widget in (self.run_button, self.cancel_button, self.export_button):
            row.addWidget(widget)
        row.addWidget(self.progress, 1)
        row.addWidget(self.status)
        return row

    # -- running ----------------------------------------------------------------------------------

    def rows(self) -> list[BenchSettings]:
        words = self.parallel_counts.text().replace(",", " ").split()
        if not words or not all(w.isdigit() for w in words) or min(int(w) for w in words) < 2:
            raise ValueError("Parallel counts: whole numbers of 2 or more, e.g. 4, 8, 16")
        counts = [int(w) for w in words]
        system = SYSTEM_PROMPT_FILE.read_text(encoding="utf-8").strip() if self.shared_system.isChecked() else None
        base = BenchSettings(
            model_path=self._model_path(),
            max_tokens=self.max_tokens.value(),
            ignore_eos=True,  # every configuration generates the same number of tokens
            turns=self.turns.value(),
            system=system,
        )
        return guide_rows(base, counts)

    @property
    def is_running(self) -> bool:
        return self._task is not None and not self._task.done()

    def start(self) -> None:
        try:
            rows = self.rows()
        except ValueError as e:
            self.status.setText(str(e))
            return
        self._clear()
        self._set_running(True)
        self._task = asyncio.ensure_future(self._run(rows))
        self._task.add_done_callback(self._on_done)

    def _on_done(self, task: asyncio.Task) -> None:
        if task.cancelled():
            outcome = "cancelled"
        elif task.exception() is not None:  # a model that fails to load, a request that fails: say why
            outcome = f"failed: {task.exception()}"
        else:
            outcome = "done"
        self._set_running(False)
        self.status.setText(outcome)
        self.sigFinished.emit(outcome)

    async def _run(self, rows: list[BenchSettings]) -> None:
        for index, settings in enumerate(rows):
            requests = settings.parallel * settings.turns
            done = 0

            def on_request(_line: str, index=index, requests=requests) -> None:
                nonlocal done
                done += 1
                self.progress.setValue(round(100 * (index + done / requests) / len(rows)))

            self.status.setText(f"{settings.label}, {settings.parallel} parallel…")
            self._add_run(await run_bench(settings, on_request))
        self.progress.setValue(100)

    def cancel(self) -> None:
        if self.is_running:
            self._task.cancel()

    def _set_running(self, running: bool) -> None:
        self.run_button.setEnabled(not running)
        self.cancel_button.setEnabled(running)
        self.export_button.setEnabled(not running and bool(self.runs))

    # -- showing ----------------------------------------------------------------------------------

    def _clear(self) -> None:
        self.runs = []
        self.table.setRowCount(0)
        self.bars.setOpts(x=[], height=[])
        self.progress.setValue(0)

    def _add_run(self, run: dict) -> None:
        self.runs.append(run)
        row = self.table.rowCount()
        self.table.insertRow(row)
        for col, (key, _, fmt) in enumerate(COLUMNS):
            value = run[key]
            text = "-" if isinstance(value, float) and math.isnan(value) else fmt.format(value)
            self.table.setItem(row, col, QTableWidgetItem(text))
        for r, run in enumerate(self.runs):  # a later row can explain an earlier one (continuous beside static)
            item = QTableWidgetItem(why(run, self.runs))
            item.setToolTip(item.text())
            self.table.setItem(r, len(COLUMNS), item)
            self.table.item(r, 0).setToolTip(item.text())  # the last column is often scrolled out of view
        heights = [r["agg_tok_s"] for r in self.runs]
        self.bars.setOpts(x=list(range(len(heights))), height=heights)
        # the configuration's whole name is in the table: under a bar, what fits its width
        labels = [(i, bar_label(r)) for i, r in enumerate(self.runs)]
        self.chart.getAxis("bottom").setTicks([labels])
        self.chart.setXRange(-0.5, len(heights) - 0.5)
        self.chart.setYRange(0, max(heights) * 1.1)

    # -- export -----------------------------------------------------------------------------------

    def _on_export(self) -> None:
        path, _ = QFileDialog.getSaveFileName(self, "Export the benchmark", "benchmark.png", "PNG (*.png)")
        if path:
            self.export(Path(path))

    def export(self, png: Path) -> tuple[Path, Path]:
        """The chart and table as a PNG, the figures as CSV beside it (same name, .csv)."""
        png = png.with_suffix(".png")
        self.whole_picture().save(str(png))
        csv_path = png.with_suffix(".csv")
        with open(csv_path, "w", newline="", encoding="utf-8") as f:
            writer = csv.writer(f)
            writer.writerow([key for key, _, _ in COLUMNS])
            for run in self.runs:
                writer.writerow([run[key] for key, _, _ in COLUMNS])
        return png, csv_path

    def whole_picture(self) -> QPixmap:
        """The panel grown for a moment to show every row and column of the table: a short or hidden
        dock showed two rows of four."""
        table = self.table
        frame = 2 * table.frameWidth()
        height = table.horizontalHeader().height() + table.verticalHeader().length() + frame
        width = table.horizontalHeader().length() + frame
        saved, hidden = self.size(), max(0, height - table.height())
        margins = self.layout().contentsMargins()
        table.setFixedHeight(height)
        try:
            self.resize(max(saved.width(), width + margins.left() + margins.right()), saved.height() + hidden)
            self.layout().activate()  # the children take their places now, not at the next event
            return self.grab()
        finally:
            table.setMinimumHeight(0)
            table.setMaximumHeight(QWIDGETSIZE_MAX)
            self.resize(saved)
            self.layout().activate()


def bar_label(run: dict) -> str:
    """Two short lines under a bar: the parallel count, then what sets the row apart."""
    kind = {"static": "static"}.get(run["mode"], "" if run["kv_reuse"] else "no reuse")
    return f"{run['parallel']}×\n{kind}" if kind else f"{run['parallel']}×"


def why(run: dict, runs: list[dict]) -> str:
    """What makes a row's throughput what it is, against the rows it compares with (measured)."""
    single = next((r for r in runs if r["parallel"] == 1 and r["mode"] == "batched"), None)
    peer = next((r for r in runs if r["parallel"] == run["parallel"] and r["mode"] == "batched" and r["kv_reuse"]), None)
    if run["parallel"] == 1:
        return "one reply at a time: the baseline"
    if run["mode"] == "static" and peer is not None:
        ratio = run["agg_tok_s"] / peer["agg_tok_s"] if peer["agg_tok_s"] else math.nan
        if ratio >= 0.95:
            return (
                f"{ratio:.2f}× continuous: each batch waits for its slowest reply, but on this machine a step "
                "costs about its tokens, so the idle slots cost little"
            )
        return f"{ratio:.2f}× continuous: each batch waits for its slowest reply while its finished slots idle"
    if not run["kv_reuse"]:
        return "every turn's prompt computed again: no cells kept between turns"
    if single is not None and single["agg_tok_s"]:
        gain = run["agg_tok_s"] / single["agg_tok_s"]
        return f"{gain:.2f}× one sequence: {run['parallel']} replies share each step's pass over the weights"
    return f"{run['parallel']} replies share each step's pass over the weights"
