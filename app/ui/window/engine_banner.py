"""The banner across the top of the window when the engine has stopped: why, and a Restart button."""

from __future__ import annotations

import html

from PySide6.QtCore import Signal
from PySide6.QtWidgets import QFrame, QHBoxLayout, QLabel, QPushButton

from app.ui import theme


class EngineBanner(QFrame):
    sigRestart = Signal()

    def __init__(self, parent=None):
        super().__init__(parent)
        self.setObjectName("engineBanner")
        colours = theme.current()
        background, border = colours.error_background.name(), colours.error.name()
        self.setStyleSheet(f"#engineBanner {{ background: {background}; border: 1px solid {border}; border-radius: 3px; }}")
        row = QHBoxLayout(self)
        row.setContentsMargins(8, 4, 4, 4)
        self.label = QLabel()
        self.label.setWordWrap(True)
        self.restart_button = QPushButton("Restart engine", clicked=lambda: self.sigRestart.emit())
        row.addWidget(self.label, 1)
        row.addWidget(self.restart_button)
        self.hide()

    def show_failure(self, reason: str) -> None:
        # the reason says what stopped and why, e.g. "the engine stopped after an internal error: ..."
        self._say(
            f"<b>{html.escape(reason[:1].upper() + reason[1:])}.</b> Your chats are kept; "
            "a reply that was streaming keeps its text."
        )

    def show_restarting(self) -> None:
        self.label.setText("Restarting the engine…")
        self.restart_button.setEnabled(False)

    def show_restart_failed(self, reason: str) -> None:
        self._say(f"<b>The engine could not be restarted:</b> {html.escape(reason)}")

    def _say(self, text: str) -> None:
        self.label.setText(text)
        self.restart_button.setEnabled(True)
        self.show()
