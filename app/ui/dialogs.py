"""Small dialogs shared by the window, the panes and the chat list: a warning and a question that do
not block the event loop (the replies go on streaming while they are shown) and exporting a chat to a
file the user picks."""

from __future__ import annotations

from pathlib import Path

from PySide6.QtCore import Qt
from PySide6.QtWidgets import QFileDialog, QMessageBox, QWidget

from app.workspace.chat_store import EXPORT_SUFFIXES, Chat, export_chat


def warn(parent: QWidget, title: str, text: str) -> QMessageBox:
    """Show a warning window-modally without waiting for it to be closed."""
    box = QMessageBox(QMessageBox.Icon.Warning, title, text, parent=parent)
    box.setAttribute(Qt.WidgetAttribute.WA_DeleteOnClose)
    box.open()
    return box


def confirm(parent: QWidget, title: str, text: str, on_yes) -> QMessageBox:
    """Ask Yes or No window-modally without waiting for the answer; `on_yes()` runs on Yes."""
    buttons = QMessageBox.StandardButton.Yes | QMessageBox.StandardButton.No
    box = QMessageBox(QMessageBox.Icon.Question, title, text, buttons, parent)
    box.setDefaultButton(QMessageBox.StandardButton.No)
    box.setAttribute(Qt.WidgetAttribute.WA_DeleteOnClose)
    box.buttonClicked.connect(lambda button: box.standardButton(button) == QMessageBox.StandardButton.Yes and on_yes())
    box.open()
    return box


EXPORT_FILTERS = {"Markdown (*.md)": ".md", "JSON (*.json)": ".json"}  # the dialog's filters, and their extensions


def export_with_dialog(parent: QWidget, chat: Chat) -> Path | None:
    """Ask where, then write Markdown or JSON; the file written, or None when cancelled or it could
    not be written (a warning, not a crash)."""
    path, chosen = QFileDialog.getSaveFileName(parent, "Export chat", f"{chat.name}.md", ";;".join(EXPORT_FILTERS))
    if not path:
        return None
    path = with_filter_suffix(path, chosen)
    try:
        export_chat(chat, path)
    except OSError as e:
        warn(parent, "The chat could not be exported", f"{path}: {e.strerror or e}")
        return None
    return Path(path)


def with_filter_suffix(path: str, chosen_filter: str) -> str:
    """The chosen filter's extension added to a name that has none of the formats' (the file's
    extension decides the format it is written in); Markdown, the dialog's first filter, by default."""
    if Path(path).suffix.lower() in EXPORT_SUFFIXES:
        return path
    return path + EXPORT_FILTERS.get(chosen_filter, ".md")
