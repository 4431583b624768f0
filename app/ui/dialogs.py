"""Small dialogs shared by the panes and the chat list: a warning that does not block the event loop
(the replies go on streaming while it is shown) and exporting a chat to a file the user picks."""

from __future__ import annotations

from PySide6.QtCore import Qt
from PySide6.QtWidgets import QFileDialog, QMessageBox, QWidget

from .chat_store import Chat, export_chat


def warn(parent: QWidget, title: str, text: str) -> QMessageBox:
    """Show a warning window-modally without waiting for it to be closed."""
    box = QMessageBox(QMessageBox.Icon.Warning, title, text, parent=parent)
    box.setAttribute(Qt.WidgetAttribute.WA_DeleteOnClose)
    box.open()
    return box


def export_with_dialog(parent: QWidget, chat: Chat) -> None:
    """Ask where, then write Markdown or JSON; a file that cannot be written is a warning, not a crash."""
    path, _ = QFileDialog.getSaveFileName(parent, "Export chat", f"{chat.name}.md", "Markdown (*.md);;JSON (*.json)")
    if not path:
        return
    try:
        export_chat(chat, path)
    except OSError as e:
        warn(parent, "The chat could not be exported", f"{path}: {e.strerror or e}")
