"""The chat list: every saved chat (title, model, last change, turns), newest first, with Open,
Rename, Delete and Export. It asks the user (a name, a confirmation) and the window does the work."""

from __future__ import annotations

import time
from dataclasses import dataclass

from PySide6.QtCore import Qt, Signal
from PySide6.QtGui import QFont
from PySide6.QtWidgets import (
    QHBoxLayout,
    QHeaderView,
    QInputDialog,
    QLabel,
    QMessageBox,
    QPushButton,
    QSizePolicy,
    QTreeWidget,
    QTreeWidgetItem,
    QVBoxLayout,
    QWidget,
)

from app.workspace.chat_store import Chat

COLUMNS = ("Chat", "Changed", "Turns", "Model")


@dataclass(frozen=True)
class ChatRow:
    chat_id: str
    name: str
    model: str
    updated: float
    turns: int
    is_open: bool  # shown in a pane

    @classmethod
    def of(cls, chat: Chat, is_open: bool) -> ChatRow:
        return cls(chat.chat_id, chat.name, chat.model.removesuffix(".gguf"), chat.updated, chat.turns, is_open)


def when(updated: float, now: float | None = None) -> str:
    """A short date: the time today, the day this year, else the full date."""
    t, today = time.localtime(updated), time.localtime(now)
    if t[:3] == today[:3]:
        return time.strftime("%H:%M", t)
    return time.strftime("%d %b" if t.tm_year == today.tm_year else "%Y-%m-%d", t)


class ChatList(QWidget):
    sigOpen = Signal(str)  # chat id: show it in a pane
    sigRename = Signal(str, str)  # chat id, new name
    sigDelete = Signal(str)  # chat id, confirmed by the user
    sigExport = Signal(str)  # chat id

    def __init__(self, parent=None):
        super().__init__(parent)
        self._rows: dict[str, ChatRow] = {}
        layout = QVBoxLayout(self)
        layout.setContentsMargins(6, 6, 6, 6)
        self.setMinimumWidth(300)  # the titles stay readable beside the date, turns and model
        layout.addWidget(self._tree(), 1)
        layout.addLayout(self._buttons())
        self.status = QLabel()
        self.status.setWordWrap(True)
        layout.addWidget(self.status)
        self._on_selection()

    def _tree(self) -> QTreeWidget:
        self.tree = QTreeWidget()
        self.tree.setHeaderLabels(COLUMNS)
        self.tree.setRootIsDecorated(False)
        self.tree.setUniformRowHeights(True)
        self.tree.setAlternatingRowColors(True)
        header = self.tree.header()
        header.setStretchLastSection(False)
        header.setSectionResizeMode(0, QHeaderView.ResizeMode.Stretch)
        for column in (1, 2):
            header.setSectionResizeMode(column, QHeaderView.ResizeMode.ResizeToContents)
        header.setSectionResizeMode(3, QHeaderView.ResizeMode.Interactive)
        header.resizeSection(3, 90)  # model names are long: elided, whole in the tooltip
        self.tree.itemSelectionChanged.connect(self._on_selection)
        self.tree.itemDoubleClicked.connect(lambda item: self.sigOpen.emit(item.data(0, Qt.ItemDataRole.UserRole)))
        return self.tree

    def _buttons(self) -> QHBoxLayout:
        row = QHBoxLayout()
        self.open_button = QPushButton("Open", clicked=lambda: self._emit_selected(self.sigOpen))
        self.open_button.setToolTip("Show the chat in a free pane, or in a new one if the capacity allows")
        self.rename_button = QPushButton("Rename…", clicked=self._on_rename)
        self.delete_button = QPushButton("Delete…", clicked=self._on_delete)
        self.export_button = QPushButton("Export…", clicked=lambda: self._emit_selected(self.sigExport))
        for button in (self.open_button, self.rename_button, self.delete_button, self.export_button):
            button.setSizePolicy(QSizePolicy.Policy.Ignored, QSizePolicy.Policy.Fixed)  # a narrow dock still fits all four
            row.addWidget(button)
        return row

    # -- rows ----------------------------------------------------------------------------------

    def show_rows(self, rows: list[ChatRow]) -> None:
        self._rows = {row.chat_id: row for row in rows}
        self._render()

    def update_row(self, row: ChatRow) -> None:
        if self._rows.get(row.chat_id) != row:
            self._rows[row.chat_id] = row
            self._render()

    def remove_row(self, chat_id: str) -> None:
        if self._rows.pop(chat_id, None) is not None:
            self._render()

    def row(self, chat_id: str) -> ChatRow | None:
        return self._rows.get(chat_id)

    def item(self, chat_id: str) -> QTreeWidgetItem | None:
        for i in range(self.tree.topLevelItemCount()):
            item = self.tree.topLevelItem(i)
            if item.data(0, Qt.ItemDataRole.UserRole) == chat_id:
                return item
        return None

    @property
    def selected_id(self) -> str | None:
        items = self.tree.selectedItems()
        return items[0].data(0, Qt.ItemDataRole.UserRole) if items else None

    def say(self, text: str) -> None:
        self.status.setText(text)

    def _render(self) -> None:
        """All rows anew, newest first, keeping the selection (a few hundred rows take no time)."""
        selected = self.selected_id
        self.tree.clear()
        for row in sorted(self._rows.values(), key=lambda r: r.updated, reverse=True):
            item = QTreeWidgetItem([row.name, when(row.updated), str(row.turns), row.model or "–"])
            item.setData(0, Qt.ItemDataRole.UserRole, row.chat_id)
            item.setTextAlignment(2, Qt.AlignmentFlag.AlignRight | Qt.AlignmentFlag.AlignVCenter)
            item.setToolTip(0, f"{row.name} (shown in a pane)" if row.is_open else row.name)
            item.setToolTip(1, time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(row.updated)))
            item.setToolTip(3, row.model)
            if row.is_open:
                font = QFont(item.font(0))
                font.setBold(True)
                item.setFont(0, font)
            self.tree.addTopLevelItem(item)
            if row.chat_id == selected:
                item.setSelected(True)
        self._on_selection()

    # -- actions -------------------------------------------------------------------------------

    def _on_selection(self) -> None:
        for button in (self.open_button, self.rename_button, self.delete_button, self.export_button):
            button.setEnabled(self.selected_id is not None)

    def _emit_selected(self, signal) -> None:
        if self.selected_id is not None:
            signal.emit(self.selected_id)

    def _on_rename(self) -> None:
        row = self._rows.get(self.selected_id)
        if row is None:
            return
        name, ok = QInputDialog.getText(self, "Rename chat", "Name:", text=row.name)
        if ok and name.strip() and name.strip() != row.name:
            self.sigRename.emit(row.chat_id, name.strip())

    def _on_delete(self) -> None:
        row = self._rows.get(self.selected_id)
        if row is None:
            return
        where = " It is open in a pane, which gets a new empty chat." if row.is_open else ""
        answer = QMessageBox.question(
            self,
            "Delete chat",
            f"Delete “{row.name}” ({row.turns} turns) from disk?{where} This cannot be undone.",
            QMessageBox.StandardButton.Yes | QMessageBox.StandardButton.No,
            QMessageBox.StandardButton.No,
        )
        if answer == QMessageBox.StandardButton.Yes:
            self.sigDelete.emit(row.chat_id)
