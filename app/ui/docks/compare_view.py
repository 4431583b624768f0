"""The compare view: a fan-out's replies side by side with their figures, exported as Markdown, CSV or JSON."""

from __future__ import annotations

import csv
import io
import json
import math
from dataclasses import asdict, dataclass
from pathlib import Path

from PySide6.QtCore import Qt, Signal
from PySide6.QtWidgets import (
    QAbstractItemView,
    QFileDialog,
    QHBoxLayout,
    QHeaderView,
    QLabel,
    QPushButton,
    QTableWidget,
    QTableWidgetItem,
    QVBoxLayout,
    QWidget,
)

from app.engine.events import FinishEvent
from app.ui.dialogs import warn

COLUMNS = ("Setting", "Tokens", "tok/s", "TTFT ms", "Mean logprob", "Reply")
EXPORT_FILTERS = {"Markdown (*.md)": ".md", "CSV, for a spreadsheet (*.csv)": ".csv", "JSON (*.json)": ".json"}


@dataclass
class Compared:
    """One pane of the fan-out: its setting, and its reply's figures once it has one."""

    key: str  # the pane's chat id
    setting: str
    status: str = "waiting"
    tokens: int = 0
    tok_s: float = math.nan
    ttft_ms: float = math.nan
    mean_logprob: float = math.nan  # the reply's tokens' mean log-probability under the model
    reply: str = ""

    def finish(self, final: FinishEvent | None, logprobs: list[float]) -> None:
        if final is None:
            self.status = "stopped"
            return
        st = final.stats
        self.status = final.reason.value
        self.tokens = st.gen_tokens
        self.tok_s = st.gen_tok_s
        self.ttft_ms = 1000 * st.ttft_s
        self.mean_logprob = sum(logprobs) / len(logprobs) if logprobs else math.nan
        self.reply = final.text

    def cells(self) -> tuple[str, ...]:
        return (
            self.setting,
            str(self.tokens) if self.tokens else "–",
            _fmt(self.tok_s, 1),
            _fmt(self.ttft_ms, 0),
            _fmt(self.mean_logprob, 3),
            self.reply or self.status,
        )


class CompareView(QWidget):
    """A table of the current fan-out, a row a pane; Export writes it."""

    sigExported = Signal(object)  # Path

    def __init__(self, parent: QWidget | None = None):
        super().__init__(parent)
        self.rows: list[Compared] = []
        self.title = QLabel("Fan out a prompt (Compare ▸ Fan out…) to compare replies here.", wordWrap=True)
        self.table = QTableWidget(0, len(COLUMNS))
        self.table.setHorizontalHeaderLabels(COLUMNS)
        self.table.setEditTriggers(QAbstractItemView.EditTrigger.NoEditTriggers)
        self.table.setWordWrap(True)
        self.table.verticalHeader().setVisible(False)
        header = self.table.horizontalHeader()
        for column in range(len(COLUMNS) - 1):
            header.setSectionResizeMode(column, QHeaderView.ResizeMode.ResizeToContents)
        header.setSectionResizeMode(len(COLUMNS) - 1, QHeaderView.ResizeMode.Stretch)
        self.export_button = QPushButton("Export…", toolTip="Save the table as Markdown, CSV or JSON", clicked=self._on_export)
        self.export_button.setEnabled(False)
        layout = QVBoxLayout(self)
        layout.setContentsMargins(4, 4, 4, 4)
        top = QHBoxLayout()
        top.addWidget(self.title, 1)
        top.addWidget(self.export_button)
        layout.addLayout(top)
        layout.addWidget(self.table, 1)

    def start(self, title: str, rows: list[Compared]) -> None:
        self.title.setText(title)
        self.rows = rows
        self.export_button.setEnabled(True)
        self._show()

    def finish(self, key: str, final: FinishEvent | None, logprobs: list[float]) -> None:
        for row in self.rows:
            if row.key == key and row.status == "waiting":
                row.finish(final, logprobs)
                self._show()
                return

    def _show(self) -> None:
        self.table.setRowCount(len(self.rows))
        for r, row in enumerate(self.rows):
            for c, text in enumerate(row.cells()):
                item = QTableWidgetItem(text)
                if 0 < c < len(COLUMNS) - 1:
                    item.setTextAlignment(Qt.AlignmentFlag.AlignRight | Qt.AlignmentFlag.AlignTop)
                if c == len(COLUMNS) - 1:
                    item.setToolTip(row.reply)
                self.table.setItem(r, c, item)
        self.table.resizeRowsToContents()

    def _on_export(self) -> None:
        path, chosen = QFileDialog.getSaveFileName(self, "Export the comparison", "comparison.md", ";;".join(EXPORT_FILTERS))
        if not path:
            return
        if Path(path).suffix.lower() not in EXPORT_FILTERS.values():
            path += EXPORT_FILTERS.get(chosen, ".md")
        try:
            Path(path).write_text(export_text(self.title.text(), self.rows, Path(path).suffix.lower()), encoding="utf-8")
        except OSError as e:
            warn(self, "The comparison could not be exported", f"{path}: {e.strerror or e}")
            return
        self.sigExported.emit(Path(path))


def export_text(title: str, rows: list[Compared], suffix: str) -> str:
    """The rows as Markdown (a table, then each reply), CSV (a row a pane) or JSON."""
    if suffix == ".json":
        return json.dumps({"title": title, "rows": [_json_row(r) for r in rows]}, ensure_ascii=False, indent=2)
    if suffix == ".csv":
        out = io.StringIO()
        writer = csv.writer(out)
        writer.writerow(COLUMNS)
        writer.writerows((*row.cells()[:-1], row.reply) for row in rows)
        return out.getvalue()
    lines = [f"# {title}", "", "| " + " | ".join(COLUMNS[:-1]) + " |", "|" + "---|" * (len(COLUMNS) - 1)]
    lines += ["| " + " | ".join(c.replace("|", "\\|") for c in row.cells()[:-1]) + " |" for row in rows]
    for row in rows:
        lines += ["", f"## {row.setting}", "", row.reply or f"({row.status})"]
    return "\n".join(lines) + "\n"


def _json_row(row: Compared) -> dict:
    return {k: (None if isinstance(v, float) and math.isnan(v) else v) for k, v in asdict(row).items() if k != "key"}


def _fmt(value: float, digits: int) -> str:
    return "–" if math.isnan(value) else f"{value:.{digits}f}"
